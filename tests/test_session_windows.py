"""Session windows, ``[SESSION gap]`` and ``[PARTITION BY k SESSION gap]`` (NEXMark q11): a
partition's tuples less than the gap apart form a session, which ends a gap after its last
tuple and from then on holds for one gap, with ``wstart(*)`` and ``wend(*)`` readable. Right at
every instant through the shared server over seeded data sets (tuples in several batches,
NULL keys, ties), compared with DuckDB on the snapshots (the differential tester's judge,
whose world computes sessions on its own); the window's state is the open sessions alone,
and a session grouped by its end comes whole.
Each query here was a syntax error (42601) before."""
from __future__ import annotations

import datetime as dt

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect import errors as DE
from dialect.planner import MemoryCatalog, Relation, plan
from differential.world import Window
from differential.written import Written, assert_right, refs
from executor import duck
from executor import plan as P
from executor.batches import INF, TE, TS, Watermark
from executor.context import OperatorContext
from executor.graph import RunningQuery
from executor.windows.session_window import SessionWindow
from planner_catalog import seed_catalog

S = 1_000_000


def _session(gap: float, *partition) -> Window:
    return Window("session", size=int(gap * S), partition=partition)


CASES = {
    "sessions per key, counted, with their start and end": (
        "k, COUNT(*) AS n, SUM(v) AS total, wstart(*) AS ws, wend(*) AS we",
        "FROM {s1} [PARTITION BY k SESSION '1 second'] GROUP BY k",
        "FROM snap0(@T@) GROUP BY k, wstart, wend",
        refs(("s1", _session(1, "k"), "s1")),
        "k, COUNT(*) AS n, SUM(v) AS total, wstart AS ws, wend AS we"),
    "one session at a time, its tuples filtered": (
        "k, v, wstart(*) AS ws",
        "FROM {s2} [SESSION '2 seconds'] WHERE v > 0",
        "FROM snap0(@T@) WHERE v > 0",
        refs(("s2", _session(2), "s2")),
        "k, v, wstart AS ws"),
    "a global aggregate over sessions of a stream with own intervals": (
        "COUNT(*) AS n, MIN(v) AS low",
        "FROM {s3} [SESSION '500 milliseconds']",
        "FROM snap0(@T@)",
        refs(("s3", _session(0.5), "s3")),
        None),
    "sessions joined to a windowed stream": (
        "a.k, a.v, b.v AS bv, wend(*) AS we",
        "FROM {s1} [PARTITION BY k SESSION '2 seconds'] AS a JOIN {s2} [RANGE '3 seconds'] AS b "
        "ON a.k = b.k",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON a.k = b.k",
        refs(("s1", _session(2, "k"), "a"), ("s2", Window("range", size=3 * S), "b")),
        "a.k, a.v, b.v AS bv, a.wend AS we"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_session_windows_are_right_at_every_instant(server, name):
    items, cql, oracle, read, oracle_items = CASES[name]
    assert_right(server.dsn, Written(items, cql, oracle, oracle_items=oracle_items), read)


def _plan(sql: str) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), seed_catalog(), now_us=0)


def test_wstart_and_wend_need_one_session_window():
    with pytest.raises(DE.PlanError) as e:
        _plan("SELECT wstart(*) FROM sensors [RANGE 10 SECONDS]")
    assert e.value.sqlstate == "42703" and "SESSION" in e.value.hint
    with pytest.raises(DE.PlanError) as e:
        _plan("SELECT wend(*) FROM sensors [SESSION 1 SECOND] a, sensors [SESSION 1 SECOND] b")
    assert e.value.sqlstate == "42702"
    with pytest.raises(DE.PlanError) as e:
        _plan("SELECT node FROM sensors [SESSION '0 seconds']")
    assert e.value.sqlstate == "22023"


def test_a_grouped_query_groups_by_the_session_and_explain_shows_it():
    sql = ("SELECT node, COUNT(*), wstart(*) FROM sensors [PARTITION BY node SESSION "
           "'10 seconds'] GROUP BY node")
    text = "\n".join(P.explain(_plan(sql)))
    assert 'ω partition by "sensors.node" session 10 seconds' in text
    assert '"sensors.__wstart"' in text and '"sensors.__wend"' in text
    # the window prints back as written
    tree = sqlglot.parse_one("SELECT * FROM s [PARTITION BY k SESSION '10 seconds']", read="cql")
    assert "[PARTITION BY k SESSION '10 seconds']" in tree.sql("cql")


def test_the_window_holds_only_open_sessions():
    """A session a second long every 3 seconds for 300 seconds: the ω holds the open
    session's tuples alone, and every tuple leaves once, valid [end, end + gap)."""
    window = P.SessionWindow(S, (), ("s.__wstart", "s.__wend"))
    op = SessionWindow(window)
    database = duckdb.connect()
    op.open(OperatorContext(cursor=lambda: duck.configured(database.cursor()), st=None,
                            tables={}, clock=lambda: 0))
    out, sizes = [], []
    for sec in range(0, 300, 3):
        ts = [sec * S + i * 250_000 for i in range(4)]
        batch = pa.RecordBatch.from_arrays([pa.array(np.arange(4)), pa.array(ts),
                                            pa.array([INF] * 4)], names=["s.v", TS, TE])
        out += op.on_batch(batch) + op.on_watermark(sec * S + S)
        sizes.append(op.state_size())
    out += op.on_end()
    rows = pa.Table.from_batches([m for m in out if not isinstance(m, Watermark)])
    assert rows.num_rows == 400 and max(sizes) <= 4
    ends = np.array([sec * S + 750_000 + S for sec in range(0, 300, 3)]).repeat(4)
    assert (rows.column(TS).to_numpy() == ends).all()
    assert (rows.column(TE).to_numpy() == ends + S).all()
    starts = rows.column("s.__wstart").cast(pa.int64()).to_numpy()
    assert (starts == (ends - 750_000 - S)).all()


def test_a_grouped_session_comes_whole_whatever_the_boundaries():
    """GROUP BY k reading wend(*) runs fused with the window: each session's row is sent once,
    valid [end, end + gap), though BOUNDARYs fall every 250 ms inside it (α would send it in
    pieces); a count without wend(*) goes through α and holds at the same instants."""
    catalog = MemoryCatalog().add(Relation("s", "stream", (("k", "INT"), ("t", "TIMESTAMP")),
                                           "t"))
    fused = RunningQuery(plan(sqlglot.parse_one(
        "SELECT k, COUNT(*) AS n, wend(*) AS e, valid_from, valid_to FROM s [PARTITION BY k "
        "SESSION '1 second'] GROUP BY k", read="cql"), catalog))
    times = [0, 400_000, 3 * S, 3 * S + 100_000, 3 * S + 900_000]
    keys = [1, 1, 1, 2, 1]
    batch = pa.RecordBatch.from_pydict({"k": pa.array(keys, pa.int32()),
                                        "t": pa.array(times).cast(pa.timestamp("us"))})
    out = fused.push("s", batch)
    for q in range(1, 30):
        out += fused.watermark("s", q * 250_000)
    rows = [(r["k"], r["n"], _us(r["e"]), _us(r["valid_from"]), _us(r["valid_to"]))
            for b in out if not isinstance(b, Watermark) for r in b.to_pylist()]
    assert sorted(rows) == [(1, 2, 1_400_000, 1_400_000, 2_400_000),
                            (1, 2, 4_900_000, 4_900_000, 5_900_000),
                            (2, 1, 4_100_000, 4_100_000, 5_100_000)]


def _us(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
