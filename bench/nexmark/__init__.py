"""NEXMark for cqgate: a generator that writes the events once (generate.py), the queries in
cqgate's dialect with their DuckDB definitions (queries.py), and the programs that run them
(run.py, peers.py)."""
