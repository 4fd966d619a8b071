"""The differential query tester: seeded random continuous queries (``grammar``) over small
streams and a table (``world``), run through a real server and compared at every instant where
either side changes with DuckDB on the inputs' snapshots (``oracle``, ``runner``); a failure is
shrunk to a small case. ``tests/test_differential.py`` runs a fixed seed in the suite,
``scripts/differential.py`` thousands of queries with any seed."""
