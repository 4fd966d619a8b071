"""Statements with stream syntax: the catalog of streams, named windows, derived streams and
wrappers (``registry``), their DDL (``ddl``), INSERT into streams (``inserts``), continuous and
snapshot queries and EXPLAIN (``queries``, ``explain_analyze``), RECOMPUTE (``recompute``) and
the dispatch by statement node (``statements``). Each takes a StatementContext. Planning and
DuckDB calls run in worker threads; a round trip to the back end is awaited on the event loop."""
