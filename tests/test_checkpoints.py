"""Checkpoints of a query's operator state (executor/checkpoints.py), driven on the graph as the
back end drives it: a query restored from a checkpoint and given only the tuples after it
answers from its resume point what the query that ran all along answered, coalesced, for every
operator that saves its state; the state is written as Arrow IPC files; a checkpoint is taken
only where the archive from its position on is exactly what the state has not seen."""
import datetime
import os
import random
import subprocess
import sys

import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor import checkpoints
from executor.graph import Graph
from executor.graph.running_graph import below
from gateway.archive.resume import with_intervals

S = 1_000_000
CATALOG = MemoryCatalog() \
    .add(Relation("s", "stream", (("k", "INT"), ("v", "INT"), ("ts", "TIMESTAMP")), "ts")) \
    .add(Relation("t", "stream", (("k", "INT"), ("w", "INT"), ("ts", "TIMESTAMP")), "ts"))

SHAPES = {
    "keyed range": "SELECT k, COUNT(*) AS n, SUM(v) AS total FROM s [RANGE '4 seconds'] "
                   "GROUP BY k",
    "keyless range": "SELECT COUNT(*) AS n, MAX(v) AS top FROM s [RANGE '3 seconds']",
    "index aggregate": "SELECT k, AVG(v) AS mean, COUNT(DISTINCT v) AS kinds "
                       "FROM s [RANGE '3 seconds'] WHERE v > 2 GROUP BY k HAVING COUNT(*) > 1",
    "hopping": "SELECT k, SUM(v) AS total FROM s [RANGE '4 seconds' SLIDE '2 seconds'] "
               "GROUP BY k",
    "join": "SELECT s.k, s.v, t.w FROM s [RANGE '2 seconds'], t [RANGE '3 seconds'] "
            "WHERE s.k = t.k",
    "union": "SELECT k, v FROM s [RANGE '2 seconds'] WHERE v > 5 UNION ALL "
             "SELECT k, w FROM t [RANGE '1 second'] WHERE w < 3",
    "distinct": "SELECT DISTINCT k FROM s [RANGE '2 seconds'] WHERE v > 4",
    "except": "SELECT k FROM s [RANGE '2 seconds'] EXCEPT SELECT k FROM t [RANGE '1 second']",
}


def _plan(sql: str):
    return with_intervals(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))


def _steps(seed: int, n: int = 30, edge: bool = False) -> tuple[list, list]:
    """(stream, batch) and (stream, watermark µs) messages of both streams, a step a second,
    and each step's watermark. ``edge``: tuples on whole and half seconds, the watermark at
    the latest of them (a stream without slack), and the next step's first tuples often at
    that very instant, as a BOUNDARY allows."""
    rng = random.Random(seed)
    out, marks, mark = [], [], 0
    for step in range(n):
        got = []
        for stream, col in (("s", "v"), ("t", "w")):
            if edge:
                ts = sorted(rng.choice((mark, step * S, step * S + S // 2))
                            for _ in range(rng.randrange(0, 6)))
            else:
                ts = sorted(step * S + rng.randrange(S) for _ in range(rng.randrange(0, 6)))
            got += ts
            if ts:
                out.append((stream, pa.RecordBatch.from_pydict({
                    "k": pa.array([rng.randrange(3) for _ in ts], pa.int32()),
                    col: pa.array([rng.randrange(10) for _ in ts], pa.int32()),
                    "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us"))})))
        mark = max([mark, *got]) if edge else (step + 1) * S
        for stream in ("s", "t"):
            out.append((stream, mark))
        marks.append(mark)
    return out, marks


def _feed(g: Graph, messages: list) -> list:
    rows = []
    for stream, m in messages:
        out = g.watermark(stream, m) if isinstance(m, int) else g.push(stream, m)
        rows += _rows(out.get(1, []))
    return rows


def _rows(batches) -> list:
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


def _coalesced(rows: list) -> set:
    """Rows (values…, valid_from, valid_to) with each value's touching pieces joined."""
    by_value: dict = {}
    for *values, vf, vt in rows:
        by_value.setdefault(tuple(values), []).append((vf, vt))
    out = set()
    for values, pieces in by_value.items():
        pieces.sort(key=lambda p: (p[0], p[1] is None, p[1]))
        start, end = pieces[0]
        for s, e in pieces[1:]:
            if s == end:
                end = e
            else:
                out.add((*values, start, end))
                start, end = s, e
        out.add((*values, start, end))
    return out


def _since(rows: list, at: int) -> list:
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=at)
    return [r for r in rows if r[-2] >= t]


def _started(sql: str) -> Graph:
    g = Graph()
    g.keep_edges = True
    g.add(1, _plan(sql), private=True)
    g.prime(1, {}, 0)
    return g


def _history(messages: list, positions: dict) -> dict:
    """Each stream's tuples at or after its position, as the archive gives them: one table."""
    out = {}
    for stream, m in messages:
        if not isinstance(m, int) and stream in positions:
            tail = m.filter(pa.compute.greater_equal(
                m.column("ts").cast(pa.int64()), positions[stream]))
            out.setdefault(stream, []).append(tail)
    return {s: pa.Table.from_batches(b) for s, b in out.items()}


# (resume point, checkpoint): the checkpoint before, at and after the resume point
CUTS = ((25, 17), (12, 20), (20, 20))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("edge", [False, True], ids=["between", "at_boundary"])
def test_a_query_restored_from_a_checkpoint_answers_as_the_one_that_ran_all_along(
        tmp_path, shape, edge):
    """The old run saves its state after a step's BOUNDARYs, and (a crash) its rows were
    delivered up to the BOUNDARY of a step before, at or after it; the restored run gets the
    archive from the checkpoint's positions on in one table. The rows the old run gave
    before the checkpoint from the resume point on, and the restored run's, are the
    uninterrupted run's rows from there on (the gateway takes away those sent twice)."""
    sql = SHAPES[shape]
    messages, marks = _steps(sum(map(ord, shape)), edge=edge)
    whole = _started(sql)
    expected = _feed(whole, messages) + _rows(whole.end(1))

    ends = [i + 1 for i, (s, m) in enumerate(messages) if s == "t" and isinstance(m, int)]
    old, before, fed, saved = _started(sql), [], 0, {}
    for step in sorted({c for _, c in CUTS}):
        before += _feed(old, messages[fed:ends[step]])
        fed = ends[step]
        taken = old.checkpoint(1)
        assert taken is not None
        positions, states, edges = taken
        assert set(positions.values()) == {marks[step]}
        saved[step] = (checkpoints.save(str(tmp_path / f"q{step}"), positions, states, edges),
                       positions, list(before))
        if shape in ("keyed range", "keyless range", "join"):    # they hold Arrow tables
            assert any(n.endswith(".arrow") for n in os.listdir(saved[step][0]))

    for since_step, step in CUTS:
        path, positions, given = saved[step]
        since = marks[since_step]
        new = Graph()
        new.add(1, _plan(sql), private=True)
        restored = _rows(new.resume(1, _history(messages, positions), since,
                                    {"s": marks[-1], "t": marks[-1]}, restore=path).get(1, []))
        restored += _rows(new.end(1))
        assert _coalesced(_since(given, since) + restored) == \
            _coalesced(_since(expected, since)), (since_step, step)
        # none of what the restored run gave begins before the resume point
        assert restored == _since(restored, since)


def test_no_checkpoint_while_tuples_past_the_latest_boundary_are_in_the_state(tmp_path):
    g = _started(SHAPES["keyed range"])
    batch = _steps(1)[0][0][1]
    g.push("s", batch)
    g.watermark("t", S)
    assert g.checkpoint(1) is None               # "s" has had no BOUNDARY since it began
    g.watermark("s", S)
    assert g.checkpoint(1) is not None
    late = batch.set_column(2, "ts", pa.array([2 * S] * batch.num_rows,
                                              pa.int64()).cast(pa.timestamp("us")))
    g.push("s", late)                            # tuples at 2 s, after the BOUNDARY at 1 s
    assert g.checkpoint(1) is None
    late2 = late.slice(0, 1)                     # one more at 2 s
    g.watermark("s", 2 * S)
    positions, _, edges = g.checkpoint(1)        # the tuples at 2 s it has are said
    assert positions == {"s": 2 * S} and edges["s"].num_rows == late.num_rows
    g.push("s", late2)
    assert g.checkpoint(1)[1] and g.checkpoint(1)[2]["s"].num_rows == late.num_rows + 1


def test_an_operator_whose_state_is_not_saved_keeps_its_query_from_checkpoints():
    g = _started("SELECT s.k, t.w FROM s [RANGE '2 seconds'] LEFT JOIN t [RANGE '2 seconds'] "
                 "ON s.k = t.k")
    _feed(g, _steps(2, 3)[0])
    assert g.checkpoint(1) is None


def test_only_the_newest_checkpoints_stay_and_each_appears_whole(tmp_path):
    g = _started(SHAPES["keyed range"])
    folder = str(tmp_path / "q")
    paths = []
    for stream, m in _steps(3, 6)[0]:
        (g.watermark if isinstance(m, int) else g.push)(stream, m)
        taken = g.checkpoint(1)
        if taken is not None and stream == "s":
            paths.append(checkpoints.save(folder, *taken))
    assert len(paths) >= 3
    assert sorted(os.listdir(folder)) == [os.path.basename(p) for p in paths[-checkpoints.KEEP:]]
    assert checkpoints.latest(folder) == paths[-1]
    op = next(v.op for v in below(g.queries[1].sink) if v.op is not None and v.op.checkpointed)
    states, _ = checkpoints.load(checkpoints.save(folder, *g.checkpoint(1)))
    state = next(s for s in states if s)
    assert state["tuples"].equals(op.tuples) and state["current"] == op.current


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_checkpoint_interval_stops_the_server_at_start(value):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--checkpoint-interval",
                          value], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--checkpoint-interval must be 0 (off) or more seconds" in out.stderr
