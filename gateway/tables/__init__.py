"""Static tables and the emulated catalog: the DuckDB store, locked down in DuckDB itself
(``store``), the read-only pg_catalog and its live tables (``pg_catalog``), translation of
PostgreSQL SQL to DuckDB's (``translate``), session settings (``settings``) and what a statement
may use of its session (``statement_context``, with ``settle``, which awaits a statement's round
trips to the back end on the event loop). Otherwise pure computation and DuckDB calls, which
callers run in worker threads."""
