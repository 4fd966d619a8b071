"""Archived streams: Parquet files per stream (``storage``), Spark over them for queries of the
past (``spark``, ``past_queries``), priming a new query with the past its windows reach into
(``priming``) and how far a late tuple reaches (``recompute``). File I/O runs in the gateway's
worker threads; Spark jobs run in Spark's own threads and report back to the event loop."""
