"""Continuous queries on Spark Structured Streaming (a second engine beside the back end):
the clearinghouse's spools as a replayable source, results back through foreachBatch."""
