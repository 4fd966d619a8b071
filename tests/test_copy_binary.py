"""COPY … (FORMAT BINARY) both ways: the bytes PostgreSQL's binary format has (signature in the
first message, a CopyData message a row, the -1 trailer), every type the text path carries
read back equal to what a SELECT gives, a continuous query's rows streamed as they come, and
bad binary data refused with PostgreSQL's errors while the session goes on."""
from __future__ import annotations

import decimal
import struct

import psycopg
import pytest

from continuous import Feeder, lit, unique, wait_running

# a column of each type the wire carries, a value and a NULL of each
COLUMNS = [
    ("i", "INT", "7"), ("b", "BIGINT", "1099511627776"), ("s", "SMALLINT", "-3"),
    ("f", "DOUBLE PRECISION", "1.5e300"), ("r", "REAL", "2.5"), ("n", "DECIMAL(12,3)", "-12.345"),
    ("t", "TEXT", "'héllo\tworld'"), ("v", "VARCHAR", "'x'"),
    ("ts", "TIMESTAMP", "TIMESTAMP '2026-01-02 03:04:05.000006'"),
    ("tz", "TIMESTAMPTZ", "TIMESTAMPTZ '2026-01-02 03:04:05+00'"),
    ("d", "DATE", "DATE '1999-12-31'"), ("tm", "TIME", "TIME '23:59:58.5'"),
    ("bo", "BOOLEAN", "true"), ("by", "BYTEA", "'\\x00ff'::BYTEA"),
    ("u", "UUID", "'a1b2c3d4-0000-4000-8000-000000000001'::UUID"),
    ("iv", "INTERVAL", "INTERVAL '3 days 5 seconds'"), ("j", "JSON", "'{\"a\": [1, 2]}'::JSON"),
    ("arr", "INT[]", "[1, NULL, 3]"), ("tarr", "TEXT[]", "['a', 'b c']"),
]
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)


@pytest.fixture
def typed(server):
    name = unique("bin")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} ({', '.join(f'{n} {t}' for n, t, _ in COLUMNS)})")
        c.execute(f"INSERT INTO {name} VALUES ({', '.join(v for _, _, v in COLUMNS)}), "
                  f"({', '.join('NULL' for _ in COLUMNS)})")
    return name


def _types(conn, table: str) -> list[str]:
    """The columns' PostgreSQL types, as the server describes them."""
    cur = conn.execute(f"SELECT * FROM {table} LIMIT 0")
    infos = [(conn.adapters.types.get(d.type_code), d.type_code) for d in cur.description]
    return [i.name + ("[]" if oid == i.array_oid else "") for i, oid in infos]


def test_binary_copy_out_reads_back_what_select_gives(server, typed):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        selected = c.execute(f"SELECT * FROM {typed}").fetchall()
        types = _types(c, typed)
        cur = c.cursor()
        with cur.copy(f"COPY {typed} TO STDOUT (FORMAT BINARY)") as cp:
            cp.set_types(types)
            copied = list(cp.rows())
        assert cur.rowcount == 2
    assert copied == selected
    assert copied[0][0] == 7 and all(v is None for v in copied[1])


def test_binary_copy_has_postgresql_framing(server, typed):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with c.cursor().copy(f"COPY (SELECT i, t FROM {typed} ORDER BY i) TO STDOUT "
                             "(FORMAT BINARY)") as cp:
            messages = [bytes(m) for m in cp]
        with c.cursor().copy("COPY (SELECT 1 WHERE false) TO STDOUT BINARY") as cp:
            empty = [bytes(m) for m in cp]
    text = "héllo\tworld".encode()
    # the signature joins the first row's message, each row its own message, then -1
    assert messages == [
        SIGNATURE + struct.pack("!hi", 2, 4) + struct.pack("!i", 7) + struct.pack("!i", len(text))
        + text,
        struct.pack("!hii", 2, -1, -1),
        struct.pack("!h", -1)]
    assert empty == [SIGNATURE + struct.pack("!h", -1)]


def test_binary_copy_in_round_trips_every_type(server, typed):
    target = unique("binin")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {target} AS SELECT * FROM {typed} LIMIT 0")
        with c.cursor().copy(f"COPY {typed} TO STDOUT (FORMAT BINARY)") as cp:
            data = b"".join(bytes(m) for m in cp)
        cur = c.cursor()
        with cur.copy(f"COPY {target} FROM STDIN WITH (FORMAT BINARY)") as cp:
            for k in range(0, len(data), 7):          # split anywhere: the format is a stream
                cp.write(data[k:k + 7])
        assert cur.rowcount == 2
        assert c.execute(f"SELECT * FROM {target} ORDER BY i").fetchall() == \
            c.execute(f"SELECT * FROM {typed} ORDER BY i").fetchall()
        # psycopg's own binary rows, typed by the client, go in too
        with c.cursor().copy(f"COPY {target} (i, t, ts) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["int4", "text", "timestamp"])
            cp.write_row((8, "from psycopg", None))
        assert c.execute(f"SELECT t FROM {target} WHERE i = 8").fetchone() == ("from psycopg",)


def test_bad_binary_data_is_refused_and_the_session_goes_on(server):
    name = unique("binbad")
    good_row = struct.pack("!hi", 1, 4) + struct.pack("!i", 5)
    cases = [
        (b"PGCOPY\nnot it" + b"\0" * 8, psycopg.errors.BadCopyFileFormat, "signature"),
        (SIGNATURE + struct.pack("!hi", 2, 4) + b"\0\0\0\1" + struct.pack("!i", -1),
         psycopg.errors.BadCopyFileFormat, "row field count is 2, expected 1"),
        (SIGNATURE + struct.pack("!hi", 1, 8) + b"\0" * 8,
         psycopg.errors.InvalidBinaryRepresentation, "incorrect binary data format"),
        (SIGNATURE + good_row + struct.pack("!hi", 1, 4) + b"\0",
         psycopg.errors.BadCopyFileFormat, "unexpected EOF"),
        (SIGNATURE + struct.pack("!hi", 1, -5), psycopg.errors.BadCopyFileFormat,
         "invalid field size"),
        (SIGNATURE + struct.pack("!h", -1) + good_row, psycopg.errors.BadCopyFileFormat,
         "after EOF marker"),
        (SIGNATURE[:15] + struct.pack("!i", 1000), psycopg.errors.BadCopyFileFormat,
         "wrong length"),
        (SIGNATURE + struct.pack("!hi", 1, 4) + struct.pack("!i", 5) + b"\x01\x02",
         psycopg.errors.BadCopyFileFormat, "row field count is 258, expected 1"),
    ]
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a INT)")
        for data, error, words in cases:
            with pytest.raises(error) as e:
                with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
                    cp.write(data)
            assert words in str(e.value)
        with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(SIGNATURE + good_row + struct.pack("!h", -1))
        assert c.execute(f"SELECT a FROM {name}").fetchall() == [(5,)]


def test_binary_copy_of_a_continuous_query_streams_until_its_limit(server):
    s = unique("binlive")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v TEXT, t TIMESTAMP TIMESTAMPCOLUMN)")
    feeder = Feeder(server.dsn, f"FROM {s}", [
        f"INSERT INTO {s} VALUES (1, 'a', {lit(1)}), (2, NULL, {lit(2)})",
        f"INSERT INTO {s} VALUES (3, 'c', {lit(3)}), (4, 'd', {lit(4)})"], delay=0.2)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        cur = c.cursor()
        with cur.copy(f"COPY (SELECT k, v, valid_from FROM {s} LIMIT 3) TO STDOUT "
                      "(FORMAT BINARY)") as cp:
            cp.set_types(["int4", "text", "timestamp"])
            first = cp.read_row()               # arrives before the second INSERT is made
            rest = list(cp.rows())
        assert cur.rowcount == 3
        assert c.execute("SELECT 1").fetchone() == (1,)
    feeder.join_checked()
    assert [first[:2]] + [r[:2] for r in rest] == [(1, "a"), (2, None), (3, "c")]
    assert [r[2].second for r in [first] + rest] == [1, 2, 3]
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_binary_numbers_and_times_at_their_edges(server):
    """Numerics of 30 digits and of 1e-5 both ways (the output once sent 0.00001 as 0.1),
    PostgreSQL's ±infinity timestamps and dates in, a timestamp past DuckDB's range 22008."""
    name = unique("binedge")
    sig = SIGNATURE
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (n DECIMAL(38,10), ts TIMESTAMP, d DATE)")
        values = [decimal.Decimal("12345678901234567890.1234567890"),
                  decimal.Decimal("0.0000100000"), decimal.Decimal("-0.0001230000")]
        with c.cursor().copy(f"COPY {name} (n) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["numeric"])
            for v in values:
                cp.write_row((v,))
        assert [r[0] for r in c.execute(f"SELECT n FROM {name} ORDER BY n")] == sorted(values)
        binary = c.cursor(binary=True)
        assert binary.execute("SELECT 0.00001::DECIMAL(10,5), -0.000123::DECIMAL(12,6), "
                              "123456789012345678901234567890::DECIMAL(38,0)").fetchone() == \
            (decimal.Decimal("0.00001"), decimal.Decimal("-0.000123"),
             decimal.Decimal("123456789012345678901234567890"))
        infinite = sig + b"".join(struct.pack("!hiiqii", 3, -1, 8, ts, 4, d) for ts, d in
                                  [(2 ** 63 - 1, 2 ** 31 - 1), (-2 ** 63, -2 ** 31)])
        with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(infinite)
        assert c.execute(f"SELECT ts::VARCHAR, d::VARCHAR FROM {name} WHERE n IS NULL "
                         "ORDER BY ts").fetchall() == [("-infinity", "-infinity"),
                                                       ("infinity", "infinity")]
        with pytest.raises(psycopg.errors.DatetimeFieldOverflow):
            with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(sig + struct.pack("!hiiqi", 3, -1, 8, 2 ** 63 - 10, -1))
        with pytest.raises(psycopg.errors.SyntaxError):
            c.execute(f"COPY {name} TO STDOUT (FORMAT BINARY, HEADER)")
