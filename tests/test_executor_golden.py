"""Seed 000's worked examples, planned from SQL and run by the executor: the SUM example of
fig. 17, Table 6 (streams I and II with their own intervals: o1, o2, facts, result) and
Table 7 (a 10-unit range window over zero-length tuples). One time unit is one second."""
import datetime as dt

import pyarrow as pa
import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor.graph import RunningQuery

EPOCH = dt.datetime(2026, 11, 1)


def at(units: int) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=units)


def catalog() -> MemoryCatalog:
    cat = MemoryCatalog()
    for name in ("I", "II", "F"):
        cat.add(Relation(name, "stream", (("val", "DOUBLE"), ("ts", "TIMESTAMP"),
                                          ("te", "TIMESTAMP")), "ts", "te"))
    cat.add(Relation("II0", "stream", (("val", "DOUBLE"), ("ts", "TIMESTAMP")), "ts"))
    return cat


def batch(rows, with_end=True) -> pa.RecordBatch:
    data = {"val": pa.array([float(v) for v, *_ in rows]),
            "ts": pa.array([at(r[1]) for r in rows], pa.timestamp("us"))}
    if with_end:
        data["te"] = pa.array([at(r[2]) for r in rows], pa.timestamp("us"))
    return pa.RecordBatch.from_pydict(data)


def run(sql: str, feeds: list, end: bool = False, boundary: int | None = None) -> list:
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), catalog()))
    out = []
    for stream, rows in feeds:
        for row in rows:                    # one tuple at a time, as the seed processes them
            out += q.push(stream, batch([row], with_end=stream != "II0"))
    if boundary is not None:                # BOUNDARY: nothing earlier than this will follow
        out += q.watermark(feeds[-1][0], int((at(boundary) - dt.datetime(1970, 1, 1))
                                             / dt.timedelta(microseconds=1)))
    if end:
        out += q.end()
    table = pa.Table.from_batches(out) if out else None
    return [] if table is None else [
        tuple((int((v - EPOCH).total_seconds()) if isinstance(v, dt.datetime) else v)
              for v in row.values()) for row in table.to_pylist()]


def test_fig17_sum():
    rows = run("SELECT valid_from, valid_to, SUM(val) FROM F",
               [("F", [(-1, 1, 4), (-4, 1, 6), (7, 1, 8), (2, 3, 7)])], boundary=8)
    assert rows == [(1, 3, 2.0), (3, 4, 4.0), (4, 6, 5.0), (6, 7, 9.0), (7, 8, 7.0)]


I = [(40, 2, 10), (70, 4, 10), (70, 8, 14), (80, 9, 17)]
II = [(90, 3, 7), (70, 5, 9), (50, 7, 14), (100, 9, 18)]
O = ("SELECT valid_from, valid_to, {n} AS sector, AVG(val) AS avg, "
     "(MIN(val) + MAX(val)) / 2 AS minmax FROM {s}")


def test_table6_o1_o2():
    assert run(O.format(n=1, s="I"), [("I", I)]) == [
        (2, 4, 1, 40.0, 40.0), (4, 8, 1, 55.0, 55.0), (8, 9, 1, 60.0, 55.0)]
    assert run(O.format(n=2, s="II"), [("II", II)]) == [
        (3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0), (7, 9, 2, 60.0, 60.0)]


FACTS = ("SELECT valid_from, valid_to, sector, avg, minmax FROM (SELECT 1 AS sector, "
         "AVG(val) AS avg, (MIN(val) + MAX(val)) / 2 AS minmax FROM I UNION ALL "
         "SELECT 2, AVG(val), (MIN(val) + MAX(val)) / 2 FROM II) AS facts")


def _interleaved():
    merged = sorted([("I", r) for r in I] + [("II", r) for r in II], key=lambda x: x[1][1])
    return [(s, [r]) for s, r in merged]


def test_table6_facts_and_result():
    # the union emits later than its inputs: it must see a tuple on every input to order them
    assert run(FACTS, _interleaved()) == [
        (2, 4, 1, 40.0, 40.0), (3, 5, 2, 90.0, 90.0), (4, 8, 1, 55.0, 55.0),
        (5, 7, 2, 80.0, 80.0), (7, 9, 2, 60.0, 60.0)]
    assert run(FACTS + " WHERE avg > 70", _interleaved()) == [
        (3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0)]


def test_table7_range_window_over_zero_length_tuples():
    rows = run(O.format(n=2, s="II0 [RANGE 10]"),
               [("II0", [(90, 3), (70, 5), (50, 7), (100, 9)])])
    assert rows == [(3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0), (7, 9, 2, 70.0, 70.0)]
