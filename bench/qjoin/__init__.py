"""Seed 003's experiment for cqgate's quality-driven join: the soccer streams (soccer.py),
the three engines over the same arrivals (engines.py), the table (run.py) and its picture
(plots.py)."""
