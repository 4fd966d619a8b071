"""A continuous COPY … TO STDOUT (text or CSV) has its rows encoded by the back end, where the
query produces them, and the gateway forwards the bytes: the back end sends one CopyData
message a row once asked (``EncodeRows``), the gateway encodes the rows that came before and
any that still come typed the same way, and what a client reads is byte for byte what the same
rows encoded by the gateway give (a one-time COPY of the snapshot)."""
import datetime as dt

import psycopg
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor import backend, pg_text, wire
from executor import plan as P
from gateway.link.live_rows import LiveRows
from gateway.pgwire import copy_binary
from gateway.pgwire import messages as M
from gateway.pgwire import types as T
from continuous import Feeder, lit, unique

S = 1_000_000
CATALOG = MemoryCatalog().add(Relation("s", "stream", (
    ("k", "INT"), ("x", "DOUBLE"), ("t", "TEXT"), ("ts", "TIMESTAMP")), "ts"))
# odd values on purpose: a tab, a newline, a backslash, a quote, the NULL string, the
# delimiter, floats PostgreSQL prints in scientific notation, NaN
ROWS = [(1, 1.5, "plain", 1), (2, 1e20, "tab\there", 2), (3, float("nan"), "new\nline", 3),
        (None, -2.5e-7, 'back\\slash "q"', 4), (5, None, "nil", 5), (6, 0.0, "a;b", 6),
        (7, 3.0, None, 7)]


def _batch(rows) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "k": pa.array([r[0] for r in rows], pa.int32()),
        "x": pa.array([r[1] for r in rows], pa.float64()),
        "t": pa.array([r[2] for r in rows], pa.string()),
        "ts": pa.array([r[3] * S for r in rows], pa.int64()).cast(pa.timestamp("us"))})


def _run(encode: wire.EncodeRows | None) -> list:
    """The ROWS the back end sends for one query over ``ROWS``, asked to encode them or not."""
    sent = []
    be = backend.Backend(sent.append)
    query = plan(sqlglot.parse_one("SELECT k, x, t, ts FROM s", read="cql"), CATALOG)
    be.dispatch(wire.PlanQuery(req=1, qid=7, plan=P.to_dict(query)))
    if encode is not None:
        be.dispatch(encode)
    be.take("s", pa.Table.from_batches([_batch(ROWS)]))
    be.dispatch(wire.Watermark("s", 10 * S))
    frames = [b"".join(bytes(p) for p in f) for f in sent if isinstance(f, list)]
    return [wire.parse_rows(f[wire.HEADER_SIZE:])[1] for f in frames
            if f[:1] == wire.ROWS]


def test_the_back_end_sends_copy_data_messages_once_asked():
    oids = [23, 701, 25, 1114]
    how = dict(oids=oids, tz="America/New_York", csv=True, delimiter=";", null="nil",
               quote="'")
    typed = _run(None)
    encoded = _run(wire.EncodeRows(qid=7, schema=pg_text.schema_text(typed[0].schema), **how))
    assert typed and all(t.schema != pg_text.ENCODED for t in typed)
    assert encoded and all(t.schema == pg_text.ENCODED for t in encoded)
    assert sum(t.num_rows for t in encoded) == sum(t.num_rows for t in typed) == len(ROWS)
    want = b"".join(pg_text.copy_messages(oids, t, pg_text.zone(how["tz"]), True, ";", "nil",
                                          "'") for t in typed)
    assert b"".join(pg_text.encoded_bytes(t) for t in encoded) == want
    # each value one message: 'd', its length, the line, a newline
    lines = [m[5:] for m in _messages(want)]
    assert lines[3] == b"nil;-2.5e-07;back\\slash \"q\";1970-01-01 00:00:04\n"
    assert lines[4] == b"5;nil;'nil';1970-01-01 00:00:05\n"


def _messages(data: bytes) -> list:
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i + 1:i + 5], "big")
        out.append(data[i:i + 1 + n])
        i += 1 + n
    return out


class _Link:
    def __init__(self, can: bool):
        self.can, self.asked = can, []

    def encode_rows(self, qid, how):
        self.asked.append((qid, how))
        return self.can


def test_rows_already_waiting_and_rows_still_typed_are_encoded_in_the_gateway():
    """Rows put before the back end was asked, and rows that come typed later (primed from
    the archive), are encoded by the gateway so that the queue holds one kind of table; where
    the source cannot encode (a split query, Spark), nothing changes."""
    batch = pa.Table.from_batches([_batch(ROWS)])
    args = ([23, 701, 25, 1114], "UTC", False, "\t", "\\N", '"')
    for can in (True, False):
        link = _Link(can)
        live = LiveRows([], batch.schema, 7, "", 0, "", link)
        live.put(batch.slice(0, 3))
        assert live.encode_at_source(*args) is can
        live.put(batch.slice(3))
        assert link.asked == [(7, dict(oids=args[0], tz="UTC", csv=False, delimiter="\t",
                                       null="\\N", quote='"', binary=False,
                                       schema=pg_text.schema_text(batch.schema)))]
        got = live._pop(None)
        assert got.num_rows == len(ROWS)
        if can:
            assert got.schema == pg_text.ENCODED
            assert pg_text.encoded_bytes(got) == pg_text.copy_messages(
                args[0], batch, dt.timezone.utc, False, "\t", "\\N", '"')
        else:
            assert got.schema == batch.schema


VALUES = [(1, 1.5, "plain", True, "1.250"), (2, 1e20, "tab\there", False, None),
          (3, float("nan"), "new\nline", None, "-3.000"),
          (4, -2.5e-7, 'back\\slash "q"', True, "0.001"), (5, None, "nil", False, "12345.678"),
          (6, 0.0, None, True, "0.000")]


STREAM = ("k INT, x DOUBLE PRECISION, t TEXT, b BOOLEAN, n DECIMAL(10, 3), at TIMESTAMPTZ, "
          "ts TIMESTAMP TIMESTAMPCOLUMN")


def _value_rows() -> list:
    """``VALUES`` as INSERT values, and one more row, later, that the queries leave out
    (k < 100): it moves the watermark past the others, so the continuous COPY's rows all come."""
    return [f"{k}, {_sql(x)}, {_sql(t)}, {_sql(b)}, {_sql(n)}, "
            f"TIMESTAMPTZ '2026-11-29 0{k}:30:00+00', {lit(k)}" for k, x, t, b, n in VALUES] + \
        [f"100, 0, 'later', true, 0, NULL, {lit(20)}"]


def _live_and_snapshot(server, columns: str, rows: list, select: str, n: int, options: str,
                       setup: tuple = ()) -> tuple:
    """A new stream of ``columns``; ``select`` (``{s}``: the stream) read by a continuous
    ``COPY (… LIMIT n) TO STDOUT options`` while another connection inserts ``rows`` (each a
    VALUES list), then the same COPY of the snapshot: both as their CopyData messages."""
    s = unique("copysrc")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} ({columns})")
    query = select.format(s=s)
    feeder = Feeder(server.dsn, f"FROM {s}", [f"INSERT INTO {s} VALUES ({r})" for r in rows])
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for statement in setup:
            c.execute(statement)
        live = _copy(c, f"COPY ({query} LIMIT {n}) TO STDOUT {options}")
        feeder.join_checked()
        c.execute("SET cq.mode = snapshot")
        snap = _copy(c, f"COPY ({query}) TO STDOUT {options}")
    return live, snap


@pytest.mark.parametrize("options", [
    "", "(FORMAT csv, DELIMITER ';', NULL 'nil', QUOTE '''')",
    "(FORMAT text, DELIMITER '|', NULL 'none')"])
def test_a_continuous_copy_gives_the_bytes_of_the_snapshots_copy(server, options):
    """The same rows through a continuous COPY (encoded by the back end) and through a
    one-time COPY of the snapshot (encoded by the gateway), in a session whose TimeZone is
    not UTC, with the COPY options set: the same lines."""
    live, snap = _live_and_snapshot(
        server, STREAM, _value_rows(), "SELECT k, x, t, b, n, at, ts FROM {s} [UNBOUNDED] "
        "WHERE k < 100", len(VALUES), options, setup=("SET TimeZone = 'Asia/Kolkata'",))
    assert len(live) == len(VALUES) and sorted(live) == sorted(snap)
    assert any(b"+05:30" in line for line in live)          # the session's zone


def _sql(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"CAST('{v!r}' AS DOUBLE)" if v != v or abs(v) >= 1e15 else repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def _copy(c, sql: str) -> list:
    """The data of each CopyData message: a row (a CSV row may hold a line break)."""
    with c.cursor() as cur:
        with cur.copy(sql) as copy:
            return [bytes(chunk) for chunk in copy]


def test_binary_rows_from_the_back_end_are_the_gateways_binary_rows():
    oids = [23, 701, 25, 1114]
    typed = _run(None)
    encoded = _run(wire.EncodeRows(qid=7, oids=oids, tz="UTC", csv=False, delimiter="\t",
                                   null="\\N", quote='"', binary=True,
                                   schema=pg_text.schema_text(typed[0].schema)))
    assert encoded and all(t.schema == pg_text.ENCODED for t in encoded)
    want = b"".join(M.data_rows([T.binary_column(t.column(i).combine_chunks(), oid)
                                 for i, oid in enumerate(oids)], tag=ord("d")) for t in typed)
    assert b"".join(pg_text.encoded_bytes(t) for t in encoded) == want


def test_binary_copy_is_encoded_at_the_source_only_where_every_column_is_one_arrow_step():
    schema = pa.schema([("k", pa.int32()), ("t", pa.string()), ("at", pa.timestamp("us"))])
    assert pg_text.binary_fast([23, 25, 1114], schema)
    assert not pg_text.binary_fast([23, 1700, 1114], schema.set(
        1, pa.field("n", pa.decimal128(10, 3))))          # numeric: Python per value


@pytest.mark.parametrize("columns", ["k, x, t, b, at, ts", "k, n, ts"])
def test_a_continuous_binary_copy_gives_the_rows_of_the_snapshots_copy(server, columns):
    """Binary COPY: encoded by the back end where every column allows it (the first case),
    by the gateway otherwise (numeric); either way the rows of the snapshot's COPY."""
    live, snap = _live_and_snapshot(
        server, STREAM, _value_rows(), f"SELECT {columns} FROM {{s}} [UNBOUNDED] WHERE k < 100",
        len(VALUES), "(FORMAT binary)")
    assert live[0].startswith(copy_binary.HEADER) and live[-1] == copy_binary.TRAILER
    rows = _binary_rows(live)
    assert len(rows) == len(VALUES) and sorted(rows) == sorted(_binary_rows(snap))


def _binary_rows(chunks: list) -> list:
    """Each row's bytes: the signature off the first, the trailer left out."""
    return [chunks[0][len(copy_binary.HEADER):]] + chunks[1:-1]


@pytest.mark.parametrize("options", ["", "(FORMAT csv)", "(FORMAT binary)"])
def test_computed_columns_go_out_as_their_declared_types(server, options):
    """The back end computes ``price * 0.908`` as a decimal where the query declares a double
    (and the gateway's queue casts it so): its encoder casts to the declared types first.
    Without that, binary COPY ended the query (a decimal has no one-step binary form)."""
    rows = [f"{k}, {k * 1000 + 7}, {k / 3}, 'v{k}', {lit(k)}" for k in range(1, 6)] + \
        [f"100, 0, 0, 'z', {lit(30)}"]
    live, snap = _live_and_snapshot(
        server, "k INT, price BIGINT, x DOUBLE PRECISION, t TEXT, ts TIMESTAMP TIMESTAMPCOLUMN",
        rows, "SELECT k, price * 0.908 AS p, k + 1 AS k1, x / 2 AS h, CAST(k AS SMALLINT) AS sm, "
        "t || '!' AS tt, price / 3 AS d, ts + INTERVAL '1 hour' AS later FROM {s} WHERE k < 100",
        5, options)
    if "binary" in options:
        live, snap = _binary_rows(live), _binary_rows(snap)
    assert len(live) == 5 and sorted(live) == sorted(snap)
