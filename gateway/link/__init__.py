"""The gateway's side of the back end: the link that sends plans, tuples and watermarks and
receives result rows (``backend_link``, ``frames``, ``outbox``), and a continuous query's rows
as a cursor reads them (``live_rows``), spilled to disk past a bound (``spill``). It runs on
the event loop; only spill files are written from it."""
