"""COPY … (FORMAT BINARY) both ways: the bytes PostgreSQL's binary format has (signature in the
first message, a CopyData message a row, the -1 trailer), every type the text path carries
read back equal to what a SELECT gives, a continuous query's rows streamed as they come, and
bad binary data refused with PostgreSQL's errors while the session goes on. COPY TO and FROM a
server file (FORMAT binary): the file is PostgreSQL's file format (the signature, the rows
back to back with no message framing, the -1 trailer), read here by a parser of its own, and
a file built here by a writer of its own loads into the right values."""
from __future__ import annotations

import datetime as dt
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


# ------------------------------------------------------------------ COPY to and from a file
# a table for the file tests: integers, text, a timestamp, numbers with fractions, NULLs in
# each column but the key, and an empty string, which is not NULL
FILE_COLUMNS = [("k", "INT"), ("i", "INT"), ("b", "BIGINT"), ("t", "TEXT"),
                ("ts", "TIMESTAMP"), ("n", "DECIMAL(12,3)"), ("f", "DOUBLE PRECISION")]
FILE_ROWS = [
    "(1, 7, 1099511627776, 'one', TIMESTAMP '2026-01-02 03:04:05.000006', -12.345, 1.5e300)",
    "(2, NULL, -5, 'tab\there ünicode', NULL, 0.001, NULL)",
    "(3, -2147483648, NULL, NULL, TIMESTAMP '1999-12-31 23:59:59', NULL, -0.25)",
    "(4, 0, 0, '', TIMESTAMP '2000-01-01 00:00:00', 123456789.5, 0)",
]
PG_EPOCH = dt.datetime(2000, 1, 1)


def _numeric(raw: bytes) -> decimal.Decimal:
    """PostgreSQL's binary numeric: digit count, weight, sign, display scale, base-10000
    digits (the first weighing 10000**weight)."""
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", raw)
    digits = struct.unpack_from(f"!{ndigits}h", raw, 8)
    assert len(raw) == 8 + 2 * ndigits
    value = sum(decimal.Decimal(d).scaleb(4 * (weight - j)) for j, d in enumerate(digits))
    value = value.quantize(decimal.Decimal(1).scaleb(-dscale))
    return -value if sign == 0x4000 else value


# how each column's binary form reads (PostgreSQL's send functions, network byte order)
DECODE = {
    "INT": lambda raw: struct.unpack("!i", raw)[0],
    "BIGINT": lambda raw: struct.unpack("!q", raw)[0],
    "TEXT": lambda raw: raw.decode("utf-8"),
    "TIMESTAMP": lambda raw: PG_EPOCH + dt.timedelta(microseconds=struct.unpack("!q", raw)[0]),
    "DECIMAL(12,3)": _numeric,
    "DOUBLE PRECISION": lambda raw: struct.unpack("!d", raw)[0],
}


def _parse_binary_file(data: bytes, ncols: int) -> list[list]:
    """The tuples of a PostgreSQL binary COPY file, each a list of its fields' bytes (None:
    NULL), read strictly: any byte the format does not account for fails."""
    assert data[:11] == b"PGCOPY\n\xff\r\n\x00", data[:24]
    flags, extension = struct.unpack_from("!ii", data, 11)
    assert (flags, extension) == (0, 0)
    pos, tuples = 19, []
    while True:
        (count,) = struct.unpack_from("!h", data, pos)
        pos += 2
        if count == -1:
            break
        assert count == ncols, f"tuple {len(tuples)} has {count} fields at byte {pos - 2}"
        fields = []
        for _ in range(count):
            (length,) = struct.unpack_from("!i", data, pos)
            pos += 4
            assert length >= -1
            fields.append(None if length == -1 else data[pos:pos + length])
            pos += max(length, 0)
            assert pos <= len(data), "a field runs past the end of the file"
        tuples.append(fields)
    assert pos == len(data), f"{len(data) - pos} bytes after the trailer"
    return tuples


@pytest.fixture
def file_table(server):
    name = unique("binfile")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} ({', '.join(f'{n} {t}' for n, t in FILE_COLUMNS)})")
        c.execute(f"INSERT INTO {name} VALUES {', '.join(FILE_ROWS)}")
    return name


def test_binary_copy_to_a_file_writes_postgresql_file_format(server, file_table, tmp_path):
    path = tmp_path / "out.bin"
    with psycopg.connect(server.dsn, autocommit=True) as c:
        cur = c.execute(f"COPY {file_table} TO '{path}' (FORMAT binary)")
        assert cur.rowcount == len(FILE_ROWS)
        selected = c.execute(f"SELECT * FROM {file_table} ORDER BY k").fetchall()
    tuples = _parse_binary_file(path.read_bytes(), len(FILE_COLUMNS))
    decoded = [tuple(None if raw is None else DECODE[typ](raw)
                     for raw, (_, typ) in zip(fields, FILE_COLUMNS)) for fields in tuples]
    # the server read the table in some order; the key puts both sides in the same one
    assert sorted(decoded) == selected
    assert selected[1][:4] == (2, None, -5, "tab\there ünicode")
    assert selected[3][3] == ""                         # an empty text, not a NULL


def test_binary_copy_file_round_trips_into_an_empty_table(server, file_table, tmp_path):
    path = tmp_path / "round.bin"
    target = unique("binfilein")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"COPY {file_table} TO '{path}' (FORMAT binary)")
        c.execute(f"CREATE TABLE {target} AS SELECT * FROM {file_table} LIMIT 0")
        cur = c.execute(f"COPY {target} FROM '{path}' (FORMAT binary)")
        assert cur.rowcount == len(FILE_ROWS)
        assert c.execute(f"SELECT * FROM {target} ORDER BY k").fetchall() == \
            c.execute(f"SELECT * FROM {file_table} ORDER BY k").fetchall()
        # no rows: the file is the header and the trailer alone, and loads nothing
        empty = tmp_path / "empty.bin"
        c.execute(f"COPY (SELECT * FROM {file_table} WHERE false) TO '{empty}' (FORMAT binary)")
        assert empty.read_bytes() == SIGNATURE + struct.pack("!h", -1)
        assert c.execute(f"COPY {target} FROM '{empty}' (FORMAT binary)").rowcount == 0
        assert c.execute(f"SELECT count(*) FROM {target}").fetchone() == (len(FILE_ROWS),)


def _file_tuple(a: int | None, s: str | None) -> bytes:
    """One tuple of an (int4, text) binary COPY file, built field by field."""
    out = struct.pack("!h", 2)
    out += struct.pack("!i", -1) if a is None else struct.pack("!ii", 4, a)
    if s is None:
        return out + struct.pack("!i", -1)
    text = s.encode("utf-8")
    return out + struct.pack("!i", len(text)) + text


def test_binary_copy_from_a_file_an_independent_writer_made(server, tmp_path):
    name = unique("binfilew")
    rows = [(1, "x"), (None, "naïve"), (3, None), (-2147483648, ""), (None, None)]
    body = b"".join(_file_tuple(a, s) for a, s in rows) + struct.pack("!h", -1)
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0) + body)
    # a header extension a reader does not know is skipped, as PostgreSQL's reader does
    extended = tmp_path / "extended.bin"
    extended.write_bytes(b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 6) + b"\x00ext\x00\x01"
                         + body)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a INT, s TEXT)")
        for path in (plain, extended):
            c.execute(f"DELETE FROM {name}")
            cur = c.execute(f"COPY {name} FROM '{path}' (FORMAT binary)")
            assert cur.rowcount == len(rows)
            got = c.execute(f"SELECT a, s FROM {name}").fetchall()
            assert sorted(got, key=repr) == sorted(rows, key=repr), path.name
