"""α's sweep (executor/operators/aggregates/aggregate.py ``_swept``): counts and integer sums of
a batch's overlapping rows are cut into disjoint pieces before they reach the aggregate index,
so a row valid long (a PostgreSQL table's row version, a ROWS window's tuple, split at each
BOUNDARY) folds into the elements of its own stretch only. The rows that leave, at every
instant, are the ones the index gives when every row is folded in one by one."""
from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor.graph import RunningQuery
from executor.operators.aggregates import aggregate

S = 1_000_000
CATALOG = MemoryCatalog().add(
    Relation("s", "stream", (("k", "INT"), ("v", "INT"), ("ts", "TIMESTAMP")), "ts"))
QUERIES = [
    "SELECT count(*) AS n, sum(v) AS total, count(v) AS c, valid_from, valid_to "
    "FROM s [PARTITION BY k ROWS 1]",
    "SELECT k % 3 AS g, count(*) AS n, sum(v) AS total, valid_from, valid_to "
    "FROM s [PARTITION BY k ROWS 2] GROUP BY k % 3",
    "SELECT count(*) AS n, sum(v) AS total, valid_from, valid_to FROM s [RANGE 3]",
    # a filter above the window leaves gaps in a group's stretch (a table's rows that stop
    # and start matching)
    "SELECT k % 2 AS g, count(*) AS n, sum(v) AS total, valid_from, valid_to "
    "FROM s [PARTITION BY k ROWS 1] WHERE v > 0 GROUP BY k % 2",
]


def _run(sql: str, events: list) -> Counter:
    """What the query says holds at each instant: {(instant, row): n}."""
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    out = []
    for kind, payload in events:
        if kind == "rows":
            out += q.push("s", payload)
        else:
            out += q.watermark("s", payload)
    out += q.end()
    rows = []
    for batch in out:
        if isinstance(batch, (pa.RecordBatch, pa.Table)) and batch.num_rows:
            rows += pa.Table.from_batches([batch]).to_pylist() \
                if isinstance(batch, pa.RecordBatch) else batch.to_pylist()
    held = Counter()
    for r in rows:
        start, end = r.pop("valid_from", None), r.pop("valid_to", None)
        values = tuple(sorted(r.items()))
        for t in range(0, 40):
            at = t * S // 2
            if start is not None and _us(start) <= at and (end is None or at < _us(end)):
                held[(at, values)] += 1
    return held


def _us(value) -> int:
    return int(value.timestamp() * S) if hasattr(value, "timestamp") else int(value)


def _events(rng: random.Random) -> list:
    events, t = [], 0
    for _ in range(rng.randrange(3, 12)):
        n = rng.randrange(1, 8)
        ts = sorted(t + rng.randrange(0, 2 * S) for _ in range(n))
        t = ts[-1]
        events.append(("rows", pa.RecordBatch.from_pydict({
            "k": pa.array([rng.randrange(5) for _ in ts], pa.int32()),
            "v": pa.array([rng.choice([None, rng.randrange(-9, 10)]) for _ in ts], pa.int32()),
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us"))})))
        if rng.random() < 0.6:
            t += rng.randrange(0, S)
            events.append(("watermark", t))
    return events


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("seed", range(25))
def test_swept_rows_hold_what_one_by_one_rows_hold(sql, seed, monkeypatch):
    events = _events(random.Random(seed))
    swept = _run(sql, events)
    monkeypatch.setattr(aggregate, "_SWEPT", ())
    one_by_one = _run(sql, events)
    assert swept == one_by_one
    assert swept, "the answer says something"
