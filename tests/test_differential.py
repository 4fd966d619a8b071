"""Correct or refused: seeded random continuous queries (``differential/grammar.py``) through
the shared server, as cursors, derived streams, named windows and in snapshot mode, each
answer compared with DuckDB on the snapshots at every instant where either side changes.
An internal error, an error SQL would not give, a wrong answer or type, or a 42xxx refusal
of a query DuckDB runs fails the test, with the case shrunk. ``scripts/differential.py``
runs thousands with other seeds."""
from __future__ import annotations

from collections import Counter

from differential.run import differential_run
from differential.runner import ACCEPTED

SEED = 20261127
QUERIES = 300


def test_random_queries_are_right_or_refused(server):
    result = differential_run(server.dsn, SEED, QUERIES)
    assert not result.failures, result.text()
    cursors = [o for o in result.outcomes if o.how == "cursor"]
    assert len(cursors) == QUERIES
    # the run says something: most shapes run, and every way of reading them was exercised
    accepted = [o for o in cursors if o.status in ACCEPTED]
    assert len(accepted) > QUERIES * 0.4, result.text()
    ways = Counter(o.how for o in result.outcomes if o.status == "ok")
    assert min(ways[h] for h in ("cursor", "derived", "window", "snapshot")) >= 10, ways
    assert sum(o.rows for o in accepted) > QUERIES, "the answers are not all empty"
