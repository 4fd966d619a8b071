"""Joins of streams without windows, bounded by event time (interval joins, NEXMark q4's
``B.t BETWEEN A.t AND A.expires``) or by ``WITH (state_ttl = …)``: right at every instant
through the shared server over seeded data sets (compared with DuckDB on the snapshots, the
differential tester's judge), refused with a hint when nothing bounds a side, and holding a
flat state in the join operator as the watermark moves (each was refused with 0A000 before)."""
from __future__ import annotations


import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect import errors as DE
from dialect.planner import plan
from differential.world import Window
from differential.written import Written, assert_right, range_window, refs
from executor import plan as P
from executor import duck
from executor.batches import INF, TE, TS, Watermark
from executor.context import OperatorContext
from executor.operators import join
from gateway.spark_engine import translate as spark_plans
from planner_catalog import seed_catalog

NONE = Window("none")       # s1, s2: [UNBOUNDED]; s3: its own intervals
CASES = {
    "an interval join of two streams without windows": (
        "a.k, a.v, b.v AS bv, a.t, b.t AS bt",
        "FROM {s1} AS a JOIN {s2} AS b ON a.k = b.k AND b.t BETWEEN a.t AND a.t + "
        "INTERVAL '2 seconds'",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON a.k = b.k AND b.t BETWEEN a.t AND "
        "a.t + INTERVAL '2 seconds'",
        refs(("s1", NONE, "a"), ("s2", NONE, "b"))),
    "a join on equal event times": (
        "a.v, b.v AS bv",
        "FROM {s1} AS a, {s2} AS b WHERE a.t = b.t AND a.v <= b.v",
        "FROM snap0(@T@) AS a, snap1(@T@) AS b WHERE a.t = b.t AND a.v <= b.v",
        refs(("s1", NONE, "a"), ("s2", NONE, "b"))),
    "an interval join under an aggregate, with own intervals": (
        "a.k, COUNT(*) AS n, MAX(b.v) AS top",
        "FROM {s1} AS a JOIN {s3} AS b ON b.t >= a.t - INTERVAL '1 seconds' AND "
        "b.t <= a.t + INTERVAL '500 milliseconds' GROUP BY a.k",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON b.t >= a.t - INTERVAL '1 seconds' AND "
        "b.t <= a.t + INTERVAL '500 milliseconds' GROUP BY a.k",
        refs(("s1", NONE, "a"), ("s3", NONE, "b"))),
    "three streams, each step bounded": (
        "a.k, b.v, c.v AS cv",
        "FROM {s1} AS a JOIN {s2} AS b ON b.t BETWEEN a.t AND a.t + INTERVAL '1 seconds' "
        "JOIN {s3} [RANGE '2 seconds'] AS c ON c.k = a.k AND c.t <= b.t + INTERVAL '1 seconds'",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON b.t BETWEEN a.t AND a.t + INTERVAL "
        "'1 seconds' JOIN snap2(@T@) AS c ON c.k = a.k AND c.t <= b.t + INTERVAL '1 seconds'",
        refs(("s1", NONE, "a"), ("s2", NONE, "b"), ("s3", range_window(2), "c"))),
    "state_ttl": (
        "a.k, a.v, b.v AS bv",
        "FROM {s1} AS a JOIN {s2} AS b ON a.k = b.k WITH (state_ttl = '2 seconds')",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON a.k = b.k AND "
        "abs(epoch_us(a.t) - epoch_us(b.t)) < 2000000",
        refs(("s1", NONE, "a"), ("s2", NONE, "b"))),
    "state_ttl beside windows": (
        "a.k, b.v",
        "FROM {s1} [RANGE '3 seconds'] AS a, {s3} AS b WHERE a.v < b.v WITH (state_ttl = "
        "'1 second')",
        "FROM snap0(@T@) AS a, snap1(@T@) AS b WHERE a.v < b.v AND "
        "abs(epoch_us(a.t) - epoch_us(b.t)) < 1000000",
        refs(("s1", range_window(3), "a"), ("s3", NONE, "b"))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bounded_joins_are_right_at_every_instant(server, name):
    items, cql, oracle, read = CASES[name]
    assert_right(server.dsn, Written(items, cql, oracle), read)


# ---------------------------------------------------------------------- the planner
def _plan(sql: str) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), seed_catalog(), now_us=0)


def _join(node):
    return node if isinstance(node, P.Join) else _join(P.children(node)[0])


def test_each_side_is_freed_by_the_condition_that_bounds_the_other():
    j = _join(_plan("SELECT R.sid FROM R, P WHERE P.ts BETWEEN R.ts AND R.ts + INTERVAL "
                    "'10 seconds'").root)
    assert j.keep[0].sql == "epoch_us(\"R.ts\" + INTERVAL '10' SECONDS) + 1"
    assert j.keep[1].sql == 'epoch_us("P.ts") + 1'
    assert "keeps left tuples until" in P.explain_label(j)


@pytest.mark.parametrize("sql,unbounded", [
    # P.ts < R.ts + … frees R's tuples, but nothing frees P's
    ("SELECT R.sid FROM R, P WHERE P.ts < R.ts + INTERVAL '1 second'", "P"),
    # a bound on a column that is not the other side's event time frees nothing
    ("SELECT R.sid FROM R, P WHERE P.sid <= R.sid AND R.sid <= P.sid", "R"),
    # a SLIDE window's tuples start at the slide, not at their event time, and a count
    # window's come in pieces that start later
    ("SELECT R.sid FROM R [RANGE 2 SECONDS SLIDE 1 SECOND], P WHERE P.ts = R.ts", "P"),
    ("SELECT R.sid FROM R [ROWS 10], P WHERE P.ts = R.ts", "P"),
])
def test_a_side_nothing_frees_is_refused_with_the_ways_out(sql, unbounded):
    with pytest.raises(DE.Unsupported) as e:
        _plan(sql)
    assert e.value.sqlstate == "0A000" and unbounded in e.value.message
    assert "state_ttl" in e.value.hint and "BETWEEN" in e.value.hint


def test_state_ttl_bounds_both_sides_and_must_bound_something():
    j = _join(_plan("SELECT R.sid FROM R, P WHERE R.sid = P.sid WITH (state_ttl = '1 hour')"
                    ).root)
    assert j.ttl_us == 3_600_000_000 and "; state_ttl 1 hour" in P.explain_label(j)
    assert 'abs(epoch_us("R.ts") - epoch_us("P.ts")) < 3600000000' in j.residual.sql
    assert [k.sql for k in j.keep] == ['epoch_us("R.ts") + 3600000000',
                                       'epoch_us("P.ts") + 3600000000']
    with pytest.raises(DE.Unsupported) as e:       # its condition reads the event times
        _plan("SELECT R.sid FROM R [ROWS 5], P WHERE R.sid = P.sid WITH (state_ttl = '1 hour')")
    assert "event time" in e.value.message and e.value.position is not None
    with pytest.raises(DE.Unsupported) as e:
        _plan("SELECT sid FROM R WITH (state_ttl = '1 hour')")
    assert e.value.position is not None
    with pytest.raises(DE.PlanError) as e:
        _plan("SELECT R.sid FROM R, P WHERE R.sid = P.sid WITH (state_ttl = 'soon')")
    assert e.value.sqlstate == "22023"
    with pytest.raises(DE.Unsupported):        # Σ keeps every valid tuple: no ttl there
        _plan("SELECT R.sid FROM R [RANGE 1 SECOND] LEFT JOIN P [RANGE 1 SECOND] ON "
              "R.sid = P.sid WITH (state_ttl = '1 hour')")


def test_spark_refuses_state_ttl_and_runs_a_bounded_windowed_join():
    with pytest.raises(spark_plans.Refused) as e:
        spark_plans.check(_plan("SELECT R.sid FROM R [RANGE 1 SECOND], P [RANGE 1 SECOND] "
                                "WHERE R.sid = P.sid WITH (state_ttl = '1 hour')"))
    assert "state_ttl" in e.value.message
    # keep only frees state early: the rows are the windowed join's, which Spark gives too
    spark_plans.check(_plan("SELECT R.sid FROM R [RANGE 1 SECOND], P [RANGE 1 SECOND] "
                            "WHERE R.sid = P.sid AND P.ts <= R.ts"))


# ---------------------------------------------------------------------- the operator
S = 1_000_000
A_COLS = (P.Column("a.id", "INTEGER"), P.Column("a.expires", "TIMESTAMP"),
          P.Column("a.t", "TIMESTAMP"))
B_COLS = (P.Column("b.auction", "INTEGER"), P.Column("b.t", "TIMESTAMP"))


def _interval_join(bounded: bool) -> P.Join:
    """auction a JOIN bid b ON a.id = b.auction AND b.t BETWEEN a.t AND a.expires, as the
    planner makes it (with or without what frees its state)."""
    left = P.Window(P.StreamScan("auction", "a", A_COLS, "t"), P.UnboundedWindow(), A_COLS)
    right = P.Window(P.StreamScan("bid", "b", B_COLS, "t"), P.UnboundedWindow(), B_COLS)
    keep = (P.Expr('epoch_us("a.expires") + 1', ("a.expires",), "BIGINT"),
            P.Expr('epoch_us("b.t") + 1', ("b.t",), "BIGINT")) if bounded else (None, None)
    equi = ((P.Expr('"a.id"', ("a.id",)), P.Expr('"b.auction"', ("b.auction",))),)
    return P.Join(left, right, equi,
                  P.Expr('"b.t" BETWEEN "a.t" AND "a.expires"', ("b.t", "a.t", "a.expires")),
                  schema=A_COLS + B_COLS, keep=keep)


def _stamp(us):
    return pa.array(np.asarray(us, dtype="datetime64[us]"))


def _run(node, seconds: int, seed: int = 1):
    """One auction a second (open for 1–5 s) and three bids a second on recent auctions:
    (the pairs joined, the operator's state size each second)."""
    rng = np.random.default_rng(seed)
    op = join.StreamJoin(node)
    database = duckdb.connect()
    op.open(OperatorContext(cursor=lambda: duck.configured(database.cursor()), st=None,
                            tables={}, clock=lambda: 0))
    pairs, sizes, auctions = 0, [], []
    for sec in range(seconds):
        t = sec * S
        expires = t + int(rng.integers(1, 6)) * S
        auctions.append((sec, t, expires))
        a = pa.RecordBatch.from_arrays(
            [pa.array([sec], pa.int32()), _stamp([expires]), _stamp([t]), pa.array([t]),
             pa.array([INF])], names=[c.name for c in A_COLS] + [TS, TE])
        bid_t = [t + 200_000 * (i + 1) for i in range(3)]
        ids = [int(rng.integers(max(0, sec - 6), sec + 1)) for _ in bid_t]
        b = pa.RecordBatch.from_arrays(
            [pa.array(ids, pa.int32()), _stamp(bid_t), pa.array(bid_t), pa.array([INF] * 3)],
            names=[c.name for c in B_COLS] + [TS, TE])
        out = op.on_batch(a, 0) + op.on_batch(b, 1)
        out += op.on_watermark(t + S, 0) + op.on_watermark(t + S, 1)
        pairs += sum(m.num_rows for m in out if not isinstance(m, Watermark))
        sizes.append(op.state_size())
    op.close()
    return pairs, sizes


def _brute_force(seconds: int, seed: int = 1) -> int:
    rng = np.random.default_rng(seed)
    auctions, n = {}, 0
    for sec in range(seconds):
        t = sec * S
        auctions[sec] = (t, t + int(rng.integers(1, 6)) * S)
        for i in range(3):
            bt = t + 200_000 * (i + 1)
            start, end = auctions[int(rng.integers(max(0, sec - 6), sec + 1))]
            n += start <= bt <= end
    return n


def test_an_interval_join_holds_a_flat_state_and_the_same_pairs():
    bounded, sizes = _run(_interval_join(True), 150)
    assert bounded == _brute_force(150) > 0
    # at most the auctions still open (5 s, one a second) and a second's bids
    assert max(sizes[50:]) <= 12, max(sizes[50:])
    # the same join without its bounds keeps everything (what the bound saves)
    unbounded, grown = _run(_interval_join(False), 150)
    assert unbounded == bounded and grown[-1] == 150 * 4
