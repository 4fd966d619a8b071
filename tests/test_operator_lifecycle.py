"""Operators driven one by one through their lifecycle (open, on_batch, on_watermark, on_end,
close) with an ``OperatorContext`` of a fake clock and a recording cursor factory, built from
plan nodes with no process and no SQL parser: each takes its DuckDB cursor in ``open`` and
closes it in ``close``, reads ST from the context, and never the wall clock. Then ``reach``
(how far back each window kind reaches when its query starts) against what the window operators
keep, and last whole queries in a graph: their cursors closed on removal, a primed query's ST."""
import datetime
import time

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401 - registers the cql dialect
from dialect.planner import MemoryCatalog, Relation, plan
from executor import duck
from executor import plan as P
from executor.batches import INF, TE, TS, Watermark
from executor.context import OperatorContext
from executor.graph import Graph
from executor.graph.running_graph import below
from executor.windows.loops import NotLive
from executor.operators import filter_map, join
from executor.operators.aggregates import (aggregate, range_aggregate, session_aggregate,
                                           slide_aggregate)
from executor.windows import loop_window, rows_window, session_window
from executor.windows import time_window as window

S = 1_000_000


class Cursors:
    """A cursor factory that remembers every cursor it gave."""

    def __init__(self):
        self.database = duckdb.connect()
        self.made = []

    def __call__(self):
        cursor = duck.configured(self.database.cursor())
        self.made.append(cursor)
        return cursor


class FakeClock:
    def __init__(self, now: int = 7 * S):
        self.now = now

    def __call__(self) -> int:
        return self.now


def _context(st=None, tables=None) -> OperatorContext:
    return OperatorContext(cursor=Cursors(), st=st, tables=tables or {}, clock=FakeClock())


def _closed(cursor) -> bool:
    try:
        cursor.execute("SELECT 1")
    except duckdb.ConnectionException:
        return True
    return False


def _batch(ts, te=None, v=None) -> pa.RecordBatch:
    ts = np.asarray(ts, np.int64)
    te = ts + 1 if te is None else np.asarray(te, np.int64)
    v = np.arange(len(ts), dtype=np.int32) if v is None else np.asarray(v, np.int32)
    return pa.RecordBatch.from_pydict({"s.v": pa.array(v), TS: pa.array(ts),
                                       TE: pa.array(te)})


def _rows(messages) -> list:
    return [tuple(r.values()) for m in messages if not isinstance(m, Watermark)
            for r in m.to_pylist()]


def _col(name: str, typ: str) -> P.Expr:
    return P.Expr(duck.quote(name), (name,), typ, ("col", name))


V = _col("s.v", "INTEGER")
SCHEMA = (P.Column("s.v", "INTEGER"),)
SCAN = P.StreamScan("s", "s", SCHEMA, "ts")
COUNT = P.Aggregate(SCAN, (), (P.Partial("n", "count_star"),),
                    (P.NamedExpr("n", _col("n", "BIGINT")),), (P.Column("n", "BIGINT"),))
SUM_BY_V = P.Aggregate(SCAN, (P.NamedExpr("k", V),), (P.Partial("total", "sum", V),),
                       (P.NamedExpr("k", _col("k", "INTEGER")),
                        P.NamedExpr("total", _col("total", "BIGINT"))),
                       (P.Column("k", "INTEGER"), P.Column("total", "BIGINT")))
SESSION = P.SessionWindow(S, (), ("s.__wstart", "s.__wend"))
FORWARD = P.LoopWindow(
    "t", P.Expr('"ST"', ("ST",), "TIMESTAMP", ("col", "ST")),
    P.Expr('"t" < "ST" + INTERVAL \'50\' SECOND', ("t", "ST"), "BOOLEAN"),
    P.Expr('"t" + INTERVAL \'10\' SECOND', ("t",), "TIMESTAMP"),
    P.Expr('"t" - INTERVAL \'4\' SECOND', ("t",), "TIMESTAMP"),
    P.Expr('"t"', ("t",), "TIMESTAMP", ("col", "t")))
BACKWARD = P.LoopWindow(
    "t", P.Expr('"ST"', ("ST",), "TIMESTAMP", ("col", "ST")),
    P.Expr('"t" > "ST" - INTERVAL \'50\' SECOND', ("t", "ST"), "BOOLEAN"),
    P.Expr('"t" - INTERVAL \'10\' SECOND', ("t",), "TIMESTAMP"),
    P.Expr('"t" - INTERVAL \'10\' SECOND', ("t",), "TIMESTAMP"),
    P.Expr('"t"', ("t",), "TIMESTAMP", ("col", "t")))


@pytest.fixture
def no_wall_clock(monkeypatch):
    """Any read of the wall clock while operators run fails the test."""
    def read(*_):
        raise AssertionError("an operator read the wall clock")
    for name in ("time", "time_ns", "monotonic", "monotonic_ns"):
        monkeypatch.setattr(time, name, read)


# ---------------------------------------------------------------------- stateful operators
def test_keyless_aggregate_answers_from_its_start_with_a_fake_clock(no_wall_clock):
    ctx = _context()
    op = aggregate.Aggregate(COUNT)
    op.open(ctx)
    op.on_start(0)                     # the stream began at 0: COUNT(*) = 0 until 1 s
    # what is final by the latest tuple leaves at once; a BOUNDARY splits what is open
    assert _rows(op.on_batch(_batch([1 * S, 3 * S], [11 * S, 13 * S]))) == \
        [(0, 0, 1 * S), (1, 1 * S, 3 * S)]
    out = op.on_watermark(5 * S)
    assert _rows(out) == [(2, 3 * S, 5 * S)] and out[-1] == Watermark(5 * S)
    assert _rows(op.on_end()) == [(2, 5 * S, 11 * S), (1, 11 * S, 13 * S), (0, 13 * S, INF)]
    cursor, = ctx.cursor.made
    op.close()
    assert _closed(cursor) and op.con is None


def test_count_window_splits_open_tuples_at_a_watermark(no_wall_clock):
    ctx = _context()
    op = rows_window.RowsWindow(P.RowsWindow(2))
    op.open(ctx)
    assert _rows(op.on_batch(_batch([1 * S, 2 * S, 3 * S], v=[10, 20, 30]))) == \
        [(10, 1 * S, 3 * S)]            # the first tuple ends at the second one after it
    out = op.on_watermark(4 * S)
    assert _rows(out) == [(20, 2 * S, 4 * S), (30, 3 * S, 4 * S)]
    assert _rows(op.on_end()) == [(20, 4 * S, INF), (30, 4 * S, INF)]
    cursor, = ctx.cursor.made
    op.close()
    assert _closed(cursor)


def _operators() -> dict:
    """One of each operator that runs SQL, built from plan nodes."""
    table_join = P.Join(SCAN, P.TableScan("t", "t", (P.Column("t.v", "INTEGER"),)),
                        ((V, _col("t.v", "INTEGER")),), kind="stream-table",
                        schema=SCHEMA + (P.Column("t.v", "INTEGER"),))
    stream_join = P.Join(SCAN, P.StreamScan("r", "r", (P.Column("r.v", "INTEGER"),), "ts"),
                         ((V, _col("r.v", "INTEGER")),),
                         schema=SCHEMA + (P.Column("r.v", "INTEGER"),))
    return {
        "filter": lambda: filter_map.Filter(P.Filter(SCAN, P.Expr('"s.v" > 1', ("s.v",),
                                                                  "BOOLEAN"), SCHEMA)),
        "map": lambda: filter_map.Map(P.Map(SCAN, (P.NamedExpr("x", V),),
                                            (P.Column("x", "INTEGER"),))),
        "aggregate": lambda: aggregate.Aggregate(SUM_BY_V),
        "range aggregate": lambda: range_aggregate.RangeAggregate(SUM_BY_V,
                                                                  P.RangeWindow(5 * S)),
        "slide aggregate": lambda: slide_aggregate.SlideAggregate(
            SUM_BY_V, P.SlideWindow(5 * S, 1 * S)),
        "count window": lambda: rows_window.RowsWindow(P.RowsWindow(2)),
        "session window": lambda: session_window.SessionWindow(SESSION),
        "session aggregate": lambda: session_aggregate.SessionAggregate(SUM_BY_V, SESSION),
        "loop window": lambda: loop_window.LoopWindow(FORWARD),
        "stream join": lambda: join.StreamJoin(stream_join),
        "table join": lambda: join.TableJoin(table_join, "t", []),
    }


@pytest.mark.parametrize("name", list(_operators()))
def test_an_operator_takes_its_cursor_in_open_and_closes_it_in_close(name):
    ctx = _context()
    op = _operators()[name]()
    assert ctx.cursor.made == []                  # building takes nothing
    op.open(ctx)
    cursor, = ctx.cursor.made
    assert not _closed(cursor)
    op.close()
    assert _closed(cursor)
    op.close()                                    # closing twice is harmless


def test_operators_without_sql_take_no_cursor():
    ctx = _context()
    for op in (window.TimeWindow(P.RangeWindow(S)), window.TimeWindow(P.NowWindow())):
        op.open(ctx)
        op.close()
    assert ctx.cursor.made == []


def test_a_table_join_reads_its_table_from_the_context_and_then_from_set_table():
    node = P.Join(SCAN, P.TableScan("t", "t", (P.Column("t.room", "VARCHAR"),
                                                (P.Column("t.v", "INTEGER")))),
                  ((V, _col("t.v", "INTEGER")),), kind="stream-table",
                  schema=SCHEMA + (P.Column("t.room", "VARCHAR"), P.Column("t.v", "INTEGER")))
    op = join.TableJoin(node, "t", [])
    assert op.tables == ("t",)
    op.open(_context(tables={"t": pa.table({"room": ["lab"], "v": [1]})}))
    assert _rows(op.on_batch(_batch([S, 2 * S], v=[1, 2]))) == [(1, "lab", 1, S, S + 1)]
    op.set_table("t", pa.table({"room": ["hall"], "v": [2]}))
    assert _rows(op.on_batch(_batch([3 * S], v=[2]))) == [(2, "hall", 2, 3 * S, 3 * S + 1)]
    op.close()


# ---------------------------------------------------------------------- loops
def _loop_rows(op, ts) -> list:
    out = op.on_batch(_batch(ts))
    return [(r[TS], r[TE]) for b in out for r in b.to_pylist()]


def test_a_primed_loop_starts_at_the_context_st(no_wall_clock):
    op = loop_window.LoopWindow(FORWARD)
    op.open(_context(st=100 * S))
    # iterations at 100, 110, …, 140 s over [t - 4 s, t]; a tuple in no window is dropped
    assert _loop_rows(op, [95 * S, 96 * S, 103 * S, 108 * S]) == \
        [(100 * S, 110 * S), (110 * S, 120 * S)]
    assert list(op.starts) == [t * S for t in (100, 110, 120, 130, 140)]
    op.close()


def test_a_live_loop_starts_with_its_first_tuple():
    op = loop_window.LoopWindow(FORWARD)
    op.open(_context())
    assert _loop_rows(op, [200 * S, 208 * S]) == [(200 * S, 210 * S), (210 * S, 220 * S)]
    assert op.starts[0] == 200 * S
    op.close()


def test_a_loop_moving_back_needs_the_seam():
    live = loop_window.LoopWindow(BACKWARD)
    live.open(_context())
    with pytest.raises(NotLive):
        live.on_batch(_batch([100 * S]))
    primed = loop_window.LoopWindow(BACKWARD)
    primed.open(_context(st=100 * S))
    assert _loop_rows(primed, [55 * S]) == [(60 * S, 70 * S)]
    assert list(primed.starts) == [t * S for t in (60, 70, 80, 90, 100)]
    live.close()
    primed.close()


def test_an_aggregate_over_a_loop_answers_once_per_iteration():
    ctx = _context(st=100 * S)
    loop = loop_window.LoopWindow(FORWARD)
    agg = aggregate.Aggregate(COUNT)
    loop.open(ctx)
    agg.open(ctx)
    agg.follow_loop(loop)
    rows = [r for b in loop.on_batch(_batch([96 * S, 97 * S, 106 * S, 118 * S]))
            for r in _rows(agg.on_batch(b))] + _rows(agg.on_watermark(130 * S))
    # without follow_loop equal neighbours would be coalesced into one row
    assert rows == [(2, 100 * S, 110 * S), (1, 110 * S, 120 * S), (1, 120 * S, 130 * S)]


# ---------------------------------------------------------------------- reach
def _kept(w, ts: int):
    """The interval the window operator gives a tuple at ``ts``, or None if it drops it."""
    op = window.TimeWindow(w)
    out = op.on_batch(_batch([ts]))
    return (out[0].column(TS)[0].as_py(), out[0].column(TE)[0].as_py()) if out else None


@pytest.mark.parametrize("w", [P.RangeWindow(10 * S), P.RangeWindow(1),
                               P.SlideWindow(10 * S, 3 * S), P.SlideWindow(6 * S, 6 * S),
                               P.SlideWindow(10 * S, 3 * S, start_us=1 * S)])
def test_reach_of_time_windows(w):
    """A tuple just before the reach is valid only before the query starts; for a range
    window the tuple at the reach is still valid then."""
    st = 1000 * S + 123
    edge = w.reach(st)
    assert w.reaches_back and edge <= st
    before = _kept(w, edge - 1)
    assert before is None or before[1] <= st
    if isinstance(w, P.RangeWindow):
        at = _kept(w, edge)
        assert at[0] <= st < at[1]
    assert w.reach(None) is None              # it depends on when the query starts


def test_reach_of_a_fixed_window_is_its_low_end_whatever_the_start():
    w = P.FixedWindow(50 * S, 80 * S)
    assert w.reach(100 * S) == w.reach(None) == 50 * S
    assert _kept(w, 50 * S) is not None and _kept(w, 50 * S - 1) is None


@pytest.mark.parametrize("w", [P.UnboundedWindow(), P.RowsWindow(3), P.IntervalWindow()])
def test_windows_that_start_with_the_query_reach_nothing(w):
    assert not w.reaches_back and w.reach(100 * S) is None


def test_a_now_window_reaches_back_to_its_starts_own_instant():
    w = P.NowWindow()
    assert w.reaches_back and w.reach(100 * S) == 100 * S and w.reach(None) is None


@pytest.mark.parametrize("loop, st, edge", [(FORWARD, 100 * S, 96 * S),
                                            (BACKWARD, 100 * S, 50 * S)])
def test_reach_of_a_loop_is_the_left_edge_of_its_first_window(loop, st, edge):
    cursors = Cursors()
    cursor = cursors()
    assert loop.reach(st, cursor) == edge
    assert not _closed(cursor)                    # the caller's cursor stays the caller's
    assert loop.reaches_back and loop.reach(None) is None
    op = loop_window.LoopWindow(loop)             # the primed loop keeps exactly from there
    op.open(_context(st=st))
    assert _loop_rows(op, [edge - 1]) == [] and _loop_rows(op, [edge]) != []


def test_reach_of_a_loop_without_a_cursor_closes_the_database_it_opens(monkeypatch):
    opened = []

    class Recorded(duck.Database):
        def __init__(self):
            super().__init__()
            opened.append(self)

    monkeypatch.setattr(duck, "Database", Recorded)
    assert FORWARD.reach(100 * S) == 96 * S
    database, = opened
    assert database._db is None                   # closed again


# ---------------------------------------------------------------------- in a graph
CATALOG = MemoryCatalog().add(Relation("s", "stream", (("k", "INT"), ("v", "INT"),
                                                        ("ts", "TIMESTAMP")), "ts"))
CATALOG.add(Relation("t", "table", (("k", "INT"), ("room", "VARCHAR"))))


def _plan(sql: str) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), CATALOG)


def _stream(rows) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "k": pa.array([r[0] for r in rows], pa.int32()),
        "v": pa.array([r[1] for r in rows], pa.int32()),
        "ts": pa.array([r[2] for r in rows], pa.int64()).cast(pa.timestamp("us"))})


def test_removing_queries_closes_every_cursor_their_operators_took():
    g = Graph(clock=FakeClock())
    cursors = Cursors()
    g.context = OperatorContext(cursor=cursors, tables=g.table_data, clock=g.context.clock)
    g.set_table("t", pa.table({"k": pa.array([1], pa.int32()), "room": ["lab"]}))
    queries = ["SELECT k, COUNT(*) FROM s [RANGE 5] WHERE v > 0 GROUP BY k",
               "SELECT k, SUM(v) FROM s [RANGE 5 SLIDE 1] GROUP BY k",
               "SELECT MAX(v) FROM s [PARTITION BY k ROWS 2]",
               "SELECT s.v, t.room FROM s [NOW], t WHERE s.k = t.k",
               "SELECT k FROM s [NOW] WHERE v > 1",
               "SELECT COUNT(*) FROM s for (t = ST; t < ST + 50; t += 10) "
               "{ WindowIs(s, t - 4, t) }"]
    for i, sql in enumerate(queries):
        g.add(i, _plan(sql))
    out = g.push("s", _stream([(1, 2, 1 * S), (1, 3, 2 * S)]))
    assert [tuple(r.values()) for r in out[3][0].to_pylist()] == [(2, "lab"), (3, "lab")]
    assert cursors.made and not any(map(_closed, cursors.made))
    for i in range(len(queries)):
        g.remove(i)
    assert all(map(_closed, cursors.made)) and g.tables == {"t": []}
    g.close()


def _seconds(t: datetime.datetime) -> float:
    return (t - datetime.datetime(1970, 1, 1)).total_seconds()


def test_a_private_query_opens_when_primed_with_the_seam_as_st():
    """Primed, a loop starts at the seam, not at its first tuple, and its aggregate answers
    once per iteration."""
    g = Graph()
    loop = ("SELECT valid_from, valid_to, COUNT(*) FROM s "
            "for (t = ST; t < ST + 50; t += 10) { WindowIs(s, t - 4, t) }")
    g.add("p", _plan(loop), private=True)
    ops = [v.op for v in below(g.queries["p"].sink) if v.op is not None]
    assert all(op.con is None for op in ops)                      # not open yet
    history = _stream([(1, 1, 97 * S), (1, 1, 107 * S), (1, 1, 118 * S)])
    primed = g.prime("p", {"s": pa.Table.from_batches([history])}, 100 * S)
    looped = [op for op in ops if op.iterates]
    assert looped and looped[0].starts[0] == 100 * S              # ST is the seam
    later = g.watermark("s", 135 * S)
    rows = [(_seconds(r["valid_from"]), _seconds(r["valid_to"]), r["count"])
            for out in (primed, later) for b in out["p"] for r in b.to_pylist()]
    # one row per iteration, not one coalesced row over both
    assert [r for r in rows if r[2]] == [(100, 110, 1), (110, 120, 1), (120, 130, 1)]
    g.close()


def test_a_one_time_graph_may_borrow_the_running_graphs_database():
    running = Graph()
    running.add(1, _plan("SELECT k FROM s [NOW] WHERE v > 1"))
    one_time = Graph(database=running.database)
    one_time.add("q", _plan("SELECT k FROM s [NOW] WHERE v > 2"))
    assert one_time.snapshot("q", {"s": [_stream([(1, 3, S)])]}, S).num_rows == 1
    one_time.close()                  # its operators' cursors, not the borrowed database
    assert running.database._db is not None
    assert running.push("s", _stream([(4, 2, 2 * S)]))[1][0].num_rows == 1
    running.close()
    assert running.database._db is None
