"""The clearinghouse: every stream's tuples, whatever their source, are ordered under the
stream's slack (``slack``), stamped with watermarks and BOUNDARY tuples (``ingest``,
``heartbeats``), shed under overload (``shedding``), logged when late or bad (``ingest_log``)
and handed to the back end and to the spools other engines read (``spool``). It runs on the
event loop; archive writes and spool releases go to worker threads."""
