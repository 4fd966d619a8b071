"""What connects cqgate to other systems: secrets, sources that streams read (a PostgreSQL
table followed by logical replication: ``postgres_source``) and sinks that continuous answers
are written to; their DDL (``ddl``) and the tasks that run them (``runtime``)."""
