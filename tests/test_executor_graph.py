"""The shared query graph (executor/graph/running_graph.py) driven directly: identical per-tuple
operators are built once for all the queries that read them, a query's removal frees exactly its
own state, a failing operator ends only the queries above it, LIMIT ends a query, and a named
relation's results feed the queries that read it."""
import datetime

import pyarrow as pa
import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor import plan as P
from executor.graph import Graph
from executor.graph.running_graph import below

S = 1_000_000
CATALOG = MemoryCatalog().add(Relation("s", "stream", (("k", "INT"), ("v", "INT"),
                                                        ("ts", "TIMESTAMP")), "ts"))


def _plan(sql: str) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), CATALOG)


def _batch(rows) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "k": pa.array([r[0] for r in rows], pa.int32()),
        "v": pa.array([r[1] for r in rows], pa.int32()),
        "ts": pa.array([r[2] * S for r in rows], pa.int64()).cast(pa.timestamp("us"))})


def _rows(out: dict, qid) -> list:
    return [tuple(r.values()) for b in out.get(qid, []) for r in b.to_pylist()]


def test_identical_operators_are_shared_and_freed_with_their_last_reader():
    g = Graph()
    g.add(1, _plan("SELECT k FROM s [RANGE 5] WHERE v > 0"))
    g.add(2, _plan("SELECT k FROM s [RANGE 5] WHERE v > 0"))
    g.add(3, _plan("SELECT k, COUNT(*) FROM s [RANGE 5] WHERE v > 0 GROUP BY k"))
    assert len(g.scans["s"]) == 1                  # one feed for all three
    shared = len(g.shared)
    out = g.push("s", _batch([(1, 1, 1), (2, -1, 2)]))
    assert _rows(out, 1) == _rows(out, 2) == [(1,)]
    g.remove(1)
    assert len(g.shared) == shared                 # query 2 still reads them
    g.remove(2)
    assert len(g.shared) < shared and g.scans      # query 3 keeps the scan and its window
    g.remove(3)
    assert g.shared == {} and g.scans == {} and g.queries == {}


def test_an_aggregate_twice_in_one_query_runs_once():
    """q5's shape: the counts and their maximum read one aggregate; another query with the
    same aggregate gets its own (its first windows hold only what came after it started)."""
    counts = "SELECT k, COUNT(*) AS n FROM s [RANGE 5 SLIDE 1] GROUP BY k"
    q5 = (f"SELECT c.k, c.n FROM ({counts}) c, (SELECT MAX(n) AS top FROM ({counts}) x) m "
          "WHERE c.n = m.top")
    g = Graph()
    g.add(1, _plan(q5))
    g.add(2, _plan(counts))

    def aggregates(qid):
        return {id(v) for v in below(g.queries[qid].sink) if "Aggregate" in type(v.op).__name__}
    assert len(aggregates(1)) == 2                 # the shared count, and MAX over it
    assert not aggregates(1) & aggregates(2)
    out = g.push("s", _batch([(1, 1, 1), (1, 1, 2), (2, 1, 3), (3, 1, 9)]))
    assert (1, 2) in _rows(out, 1)                 # k=1 has the most bids in its windows
    g.remove(1)
    g.remove(2)
    assert g.shared == {}


def _seconds(t: datetime.datetime) -> float:
    return (t - datetime.datetime(1970, 1, 1)).total_seconds()


def test_a_slide_is_answered_when_data_closes_it_and_whole():
    """q5's join of the counts with their maximum answers a slide in the step whose tuple
    closes it, with no BOUNDARY (the hopping aggregate says, on data, that nothing starts
    before the next slide's end), and a BOUNDARY between two slide ends cuts no answer in
    two (its watermark goes on at the next slide's end)."""
    counts = "SELECT k, COUNT(*) AS n FROM s [RANGE 4 SLIDE 2] GROUP BY k"
    q5 = (f"SELECT c.k, c.n, valid_from FROM ({counts}) c, (SELECT MAX(n) AS top FROM "
          f"({counts}) x) m WHERE c.n = m.top")
    g = Graph()
    g.add(1, _plan(q5))
    assert _rows(g.push("s", _batch([(1, 1, 1), (1, 1, 1.5), (2, 1, 1.8)])), 1) == []
    # ts 2.5 closes the slide ending at 2: (1, 2) from 2 s, at once
    out = _rows(g.push("s", _batch([(2, 1, 2.5)])), 1)
    assert [(k, n, _seconds(t)) for k, n, t in out] == [(1, 2, 2.0)], out
    # a BOUNDARY at 3.3 s: the slide ending at 4 is still open, and nothing is cut at 3.3
    assert _rows(g.watermark("s", int(3.3 * S)), 1) == []
    out = _rows(g.push("s", _batch([(2, 1, 4.2)])), 1)
    # the slide ending at 4 holds k=1 (2) and k=2 (2): both, from 4 s
    assert sorted((k, n, _seconds(t)) for k, n, t in out) == [(1, 2, 4.0), (2, 2, 4.0)], out


def test_a_window_table_function_is_answered_when_data_passes_its_end():
    """Flink's TUMBLE through an aggregate answers a window in the step whose tuple passes
    its end, with no BOUNDARY (the window operator says, on data, where the next copy can
    start at the earliest), and a BOUNDARY inside a window cuts no answer in two."""
    sql = ("SELECT window_start, window_end, k, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE s, "
           "DESCRIPTOR(ts), INTERVAL '2' SECOND)) GROUP BY window_start, window_end, k")
    g = Graph()
    g.add(1, _plan(sql))

    def answered(out):
        return sorted((_seconds(a), _seconds(b), k, n) for a, b, k, n in _rows(out, 1))
    assert answered(g.push("s", _batch([(1, 1, 0.5), (1, 1, 1.0), (2, 1, 1.5)]))) == []
    assert answered(g.push("s", _batch([(1, 1, 2.5)]))) == [(0.0, 2.0, 1, 2), (0.0, 2.0, 2, 1)]
    assert answered(g.push("s", _batch([(1, 1, 3.0)]))) == []
    assert answered(g.watermark("s", int(3.3 * S))) == []
    assert answered(g.push("s", _batch([(1, 1, 4.5)]))) == [(2.0, 4.0, 1, 2)]


def test_count_windows_share_one_state():
    g = Graph()
    g.add(1, _plan("SELECT valid_from, valid_to, SUM(v) FROM s [PARTITION BY k ROWS 2]"))
    g.add(2, _plan("SELECT valid_from, valid_to, MAX(v) FROM s [PARTITION BY k ROWS 2]"))
    windows = [v for v in g.shared.values() if type(v.op).__name__ == "RowsWindow"]
    assert len(windows) == 1 and len(windows[0].parents) == 2
    g.push("s", _batch([(1, 1, 1), (1, 2, 2), (1, 3, 3)]))
    out = g.watermark("s", 4 * S)
    assert [r[2:] for r in _rows(out, 1)] == [(1,), (3,), (5,)]
    assert [r[2:] for r in _rows(out, 2)] == [(1,), (2,), (3,)]


def test_a_failing_operator_ends_only_its_queries():
    g = Graph()
    g.add("bad", _plan("SELECT 10 / v FROM s [NOW]"))
    g.add("good", _plan("SELECT v FROM s [NOW]"))
    out = g.push("s", _batch([(1, 0, 1)]))
    assert list(g.take_failures()) == ["bad"] and _rows(out, "good") == [(0,)]


def test_filters_of_many_queries_are_evaluated_together():
    """σ's with different constants over one scan run as one grouped filter; each query still
    gets exactly its rows, and a predicate that fails ends only its own query."""
    g = Graph()
    for i in range(4):
        g.add(i, _plan(f"SELECT k, v FROM s [NOW] WHERE v > {i}"))
    g.add("bad", _plan("SELECT k FROM s [NOW] WHERE 10 / (v - 2) > 0"))
    scan = g.scans["s"][0]
    rows = [(1, 0, 1), (2, 1, 1), (3, 2, 2), (4, 3, 2), (5, 4, 3)]
    out = g.push("s", _batch(rows))
    assert scan.grouped is not None and len(scan.grouped.filters) == 5
    for i in range(4):
        assert _rows(out, i) == [(k, v) for k, v, _ in rows if v > i]
    assert list(g.take_failures()) == ["bad"]
    g.remove("bad")
    for i in (1, 3):
        g.remove(i)
    out = g.push("s", _batch([(6, 1, 4), (7, 2, 4)]))
    assert _rows(out, 0) == [(6, 1), (7, 2)] and _rows(out, 2) == []
    assert len(scan.grouped.filters) == 2


def test_limit_ends_the_query():
    g = Graph()
    g.add(1, _plan("SELECT v FROM s LIMIT 2"))
    assert g.finished() == []
    out = g.push("s", _batch([(1, 1, 1), (1, 2, 2), (1, 3, 3)]))
    assert _rows(out, 1) == [(1,), (2,)] and g.finished() == [1]


def test_a_named_relation_feeds_its_readers():
    g = Graph()
    g.add("w", _plan("SELECT k, SUM(v) AS total FROM s [RANGE 10] GROUP BY k"), feeds="w")
    cat = MemoryCatalog().add(Relation("s", "stream", (("k", "INT"), ("v", "INT"),
                                                        ("ts", "TIMESTAMP")), "ts"))
    cat.add(Relation("w", "window", (("k", "INT"), ("total", "BIGINT"))))
    reader = plan(sqlglot.parse_one("SELECT k, total FROM Stream(w) WHERE total > 2",
                                    read="cql"), cat)
    g.add("r", reader)
    out = g.push("s", _batch([(1, 1, 1), (1, 2, 2)]))
    out2 = g.watermark("s", 3 * S)
    assert _rows(out, "r") + _rows(out2, "r") == [(1, 3)]


def test_windowed_state_stays_bounded():
    g = Graph()
    g.add(1, _plan("SELECT k, COUNT(*) FROM s [RANGE 2] GROUP BY k"))
    g.add(2, _plan("SELECT a.k FROM s [RANGE 2] AS a, s [RANGE 2] AS b WHERE a.k = b.k"))
    sizes = []
    for t in range(1, 200):
        g.push("s", _batch([(t % 3, t, t)]))
        g.watermark("s", t * S)
        sizes.append(g.state_size(1) + g.state_size(2))
    assert max(sizes[100:]) <= max(sizes[:100])    # the windows move; old state is purged
    assert max(sizes) < 30


def test_queued_batches_of_a_stream_are_taken_as_one():
    """Frames of one stream queued behind a DATA frame join it (PROGRESS frames of that stream
    too); a frame of another stream or kind stops the batch and stays for the next read."""
    import socket

    from executor import backend, wire
    a, b = socket.socketpair()
    try:
        a.sendall(wire.data("s", _batch([(1, 1, 1)])) +
                  wire.encode(wire.Progress("s", 1 * S)) +
                  wire.data("s", _batch([(2, 2, 2), (3, 3, 3)])) +
                  wire.data("t", _batch([(4, 4, 4)])) +
                  wire.data("s", _batch([(5, 5, 5)])))
        frames = wire.Frames(b)
        kind, payload = frames.next()
        name, table, progress = backend._coalesced(frames, payload)
        assert kind == wire.DATA and name == "s" and table.column("k").to_pylist() == [1, 2, 3]
        assert table.column("k").num_chunks == 1 and len(progress) == 1
        kind, payload = frames.next()
        name, table, _ = backend._coalesced(frames, payload)
        assert name == "t" and table.column("k").to_pylist() == [4]
        name, table, _ = backend._coalesced(frames, frames.next()[1])
        assert name == "s" and table.column("k").to_pylist() == [5]
        assert frames.peek() is None                 # nothing more, and peek does not wait
        a.close()
        assert frames.next() is None                 # the socket closed
    finally:
        b.close()


def _walk(tree: dict) -> list:
    return [tree] + [n for child in tree["inputs"] for n in _walk(child)]


def test_analyze_counts_each_operator_since_its_query_began():
    """EXPLAIN ANALYZE's counters: rows in and out per operator against the rows pushed (σ's
    grouped into one DuckDB pass still count their own), an older query's rows left out of a
    newer one's shared operators, and an operator a query reads twice shown once."""
    g = Graph()
    g.add(1, _plan("SELECT k FROM s [RANGE 5] WHERE v > 0"))
    g.push("s", _batch([(1, 1, 1), (2, -1, 2)]))
    g.add(2, _plan("SELECT k FROM s [RANGE 5] WHERE v > 2"))      # a second σ on the scan
    g.push("s", _batch([(3, 3, 3), (4, 1, 4), (5, -2, 5)]))
    trees = g.analyze([1, 2])
    first = {n["label"].split(" ")[0]: n for n in _walk(trees[1])}
    second = {n["label"].split(" ")[0]: n for n in _walk(trees[2])}
    assert (first["stream"]["rows_out"], first["σ"]["rows_in"], first["σ"]["rows_out"]) == \
        (5, 5, 3)
    assert (second["stream"]["rows_out"], second["σ"]["rows_in"], second["σ"]["rows_out"]) == \
        (3, 3, 1)
    assert first["stream"]["shared"] == 2 and first["σ"]["shared"] == 1
    assert trees[1]["rows_out"] == g.queries[1].rows_out == 3
    assert trees[2]["rows_out"] == g.queries[2].rows_out == 1
    assert all(n["ms"] > 0 and n["batches"] for n in _walk(trees[2]))
    counts = "SELECT k, COUNT(*) AS n FROM s [RANGE 5 SLIDE 1] GROUP BY k"
    g.add(3, _plan(f"SELECT c.k, c.n FROM ({counts}) c, (SELECT MAX(n) AS top FROM ({counts}) "
                   "x) m WHERE c.n = m.top"))
    g.push("s", _batch([(1, 1, 6), (1, 1, 7), (2, 1, 8)]))
    nodes = _walk(g.analyze([3])[3])
    aggregates = [n for n in nodes if n["label"].startswith("α") and "count_star" in n["label"]]
    assert len(aggregates) == 2 and sum(bool(n.get("repeat")) for n in aggregates) == 1
    counted = next(n for n in aggregates if not n.get("repeat"))
    assert counted["rows_in"] == 3 and counted["state"] > 0
    g.close()
