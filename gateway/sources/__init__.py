"""Where stream data comes from besides SQL: the ingest port, where programs send lines through
a wrapper (``ingest_port``, ``source_stream``), and the seam every source implements
(``seam``), so the clearinghouse never knows which source fed it."""
