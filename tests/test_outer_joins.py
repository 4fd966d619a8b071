"""LEFT, RIGHT and FULL joins of two streams with windows run as hash joins that pad rows
(executor/operators/outer_join.py), right at every instant against DuckDB on the snapshots:
a padded row holds exactly while its tuple has no partner, over data in several batches,
with NULL keys, ties and tuples that carry their own intervals. Other shapes stay Σ's."""
from __future__ import annotations

import datetime as dt

import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from differential.world import Window
from differential.written import Written, assert_right, range_window, refs
from executor import plan as P

import pytest

R1, R2, R3 = range_window(1), range_window(2), range_window(3)
SLIDE = Window("slide", size=2_000_000, slide=1_000_000)

CASES = {
    "left join, a condition on the padded side in ON, one on both in WHERE": (
        "a.k, a.v, b.v AS bv",
        "FROM {s1} [RANGE '2 seconds'] AS a LEFT JOIN {s2} [RANGE '3 seconds'] AS b "
        "ON a.k = b.k AND b.v > 0 WHERE a.v IS NOT NULL OR b.v IS NULL",
        "FROM snap0(@T@) AS a LEFT JOIN snap1(@T@) AS b ON a.k = b.k AND b.v > 0 "
        "WHERE a.v IS NOT NULL OR b.v IS NULL",
        refs(("s1", R2, "a"), ("s2", R3, "b"))),
    "right join, a condition on the preserved side in ON": (
        "a.v, b.k AS bk, b.v AS bv",
        "FROM {s1} [RANGE '1 second'] AS a RIGHT JOIN {s2} [RANGE '2 seconds'] AS b "
        "ON a.k = b.k AND b.v < 2",
        "FROM snap0(@T@) AS a RIGHT JOIN snap1(@T@) AS b ON a.k = b.k AND b.v < 2",
        refs(("s1", R1, "a"), ("s2", R2, "b"))),
    "full join with a residual, one side carrying its own intervals": (
        "a.k, b.k AS bk, a.v, b.v AS bv",
        "FROM {s1} [RANGE '2 seconds'] AS a FULL JOIN {s3} AS b ON a.k = b.k AND a.v <> b.v",
        "FROM snap0(@T@) AS a FULL JOIN snap1(@T@) AS b ON a.k = b.k AND a.v <> b.v",
        refs(("s1", R2, "a"), ("s3", Window("none"), "b"))),
    "left join of hopping windows, counted per key": (
        "a.k, COUNT(*) AS n, COUNT(b.v) AS matched",
        "FROM {s1} [RANGE '2 seconds' SLIDE '1 second'] AS a LEFT JOIN {s2} "
        "[RANGE '2 seconds' SLIDE '1 second'] AS b ON a.k = b.k GROUP BY a.k",
        "FROM snap0(@T@) AS a LEFT JOIN snap1(@T@) AS b ON a.k = b.k GROUP BY a.k",
        refs(("s1", SLIDE, "a"), ("s2", SLIDE, "b"))),
    "a self join, left, on an inequality besides the key": (
        "a.k, a.v, b.v AS bv",
        "FROM {s2} [RANGE '3 seconds'] AS a LEFT JOIN {s2} [RANGE '1 second'] AS b "
        "ON a.k = b.k AND a.v < b.v",
        "FROM snap0(@T@) AS a LEFT JOIN snap1(@T@) AS b ON a.k = b.k AND a.v < b.v",
        refs(("s2", R3, "a"), ("s2", R1, "b"))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_outer_joins_are_right_at_every_instant(server, name):
    items, cql, oracle, read = CASES[name]
    assert_right(server.dsn, Written(items, cql, oracle), read, max_tuples=14)


def _catalog() -> MemoryCatalog:
    cat = MemoryCatalog()
    cat.add(Relation("a", "stream", (("k", "INT"), ("v", "INT"), ("t", "TIMESTAMP")), "t"))
    cat.add(Relation("b", "stream", (("k", "INT"), ("w", "INT"), ("t", "TIMESTAMP")), "t"))
    cat.add(Relation("tb", "table", (("k", "INT"), ("name", "TEXT"))))
    return cat


def _root(sql: str):
    return plan(sqlglot.parse_one(sql, read="cql"), _catalog(), now_us=0).root


def test_two_windowed_streams_join_by_hash_and_other_shapes_stay_snapshot_queries():
    root = _root("SELECT a.k, b.w FROM a [RANGE '2 seconds'] FULL JOIN b [RANGE '3 seconds'] "
                 "ON a.k = b.k AND b.w > 1 WHERE a.v > 0")
    assert isinstance(root.input, P.Filter)          # WHERE above the join: it sees NULLs
    join = root.input.input
    assert isinstance(join, P.Join) and join.outer == "full" and len(join.equi) == 1
    assert join.residual is not None and "b.w" in join.residual.sql       # ON stays in it
    assert "⋈ full outer hash" in P.explain_label(join)
    for sql in ("SELECT a.k, t.name FROM a [RANGE '2 seconds'] LEFT JOIN tb AS t "
                "ON a.k = t.k",
                # USING's k is COALESCE(a.k, b.k) in a FULL join: SQL's, by Σ
                "SELECT k, b.w FROM a [RANGE '2 seconds'] FULL JOIN b [RANGE '2 seconds'] "
                "USING (k)",
                "SELECT a.k, ROW_NUMBER() OVER (ORDER BY a.v) FROM a [RANGE '2 seconds'] "
                "LEFT JOIN b [RANGE '2 seconds'] ON a.k = b.k"):
        assert isinstance(_root(sql), P.SnapshotQuery) or isinstance(
            _root(sql).input, P.SnapshotQuery), sql


def test_a_tuple_that_comes_after_a_boundary_keeps_its_padded_row_from_its_start():
    """A left tuple on no grid (RANGE) that starts after a BOUNDARY but before the right side's
    next grid point: its padded row starts where it does. (The join once looked ahead to the
    right side's grid alone and sent the pieces from that grid point on.)"""
    from executor.graph import RunningQuery
    import pyarrow as pa
    s = 1_000_000

    def batch(v, t):
        return pa.RecordBatch.from_pydict({"k": pa.array([1], pa.int32()),
                                           "v": pa.array([v], pa.int32()),
                                           "w": pa.array([1], pa.int32()),
                                           "t": pa.array([t], pa.timestamp("us"))})
    q = RunningQuery(plan(sqlglot.parse_one(
        "SELECT a.v, b.w, valid_from, valid_to FROM a [RANGE '2 seconds'] LEFT JOIN "
        "b [RANGE '2 seconds' SLIDE '1 second'] ON a.k = b.k", read="cql"), _catalog()))
    rows = q.push("b", batch(1, s // 5).select(["k", "w", "t"]))
    rows += q.push("a", batch(1, s // 10).select(["k", "v", "t"]))
    rows += q.watermark("a", 3 * s // 10) + q.watermark("b", 3 * s // 10)
    rows += q.push("a", batch(2, s // 2).select(["k", "v", "t"]))
    rows += q.watermark("a", 5 * s) + q.watermark("b", 5 * s)
    got = [(r["v"], r["w"], r["valid_from"], r["valid_to"]) for b in rows
           for r in b.to_pylist()]

    def at(us):
        return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
    # the tuple of 0.5 s is alone from 0.5 s until its partner starts at 1 s
    assert (2, None, at(s // 2), at(s)) in got, got
