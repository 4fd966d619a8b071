"""The live catalog as one session sees it: the tables behind pg_catalog's views, registered
on the session's own connection (``catalog_live``), ``pg_stat_activity`` (``activity``) and
cqgate's system views ``cq_queries``, ``cq_streams``… gathered from the back end when a
statement reads them (``cq_views``)."""
