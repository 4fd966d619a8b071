"""Run by tests/test_psycopg.py under PSYCOPG_IMPL=python and =binary: round-trips every
supported type in text and binary, a named cursor, COPY in and out, TypeInfo.fetch."""
import datetime as dt
import sys
import uuid
from decimal import Decimal

import psycopg
from psycopg.types import TypeInfo

dsn, table, impl = sys.argv[1], sys.argv[2], sys.argv[3]
assert psycopg.pq.__impl__ == impl, psycopg.pq.__impl__

with psycopg.connect(dsn, autocommit=True) as conn:
    assert conn.info.parameter_status("server_version").startswith("15.")
    conn.execute(f"CREATE TABLE {table} (a INT PRIMARY KEY, b TEXT, c NUMERIC(10,2), "
                 "d DOUBLE PRECISION, e BOOLEAN, f DATE, g TIMESTAMP, h TIMESTAMPTZ, i BIGINT, "
                 "j SMALLINT, k REAL, l BYTEA, m UUID, n INTERVAL, o INT[], p TEXT[], q JSON)")
    row = (1, "héllo 'q'", Decimal("12.34"), 1.5, True, dt.date(2024, 2, 29),
           dt.datetime(2024, 1, 2, 3, 4, 5, 678900),
           dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), 2**40, -7, 0.25,
           b"\x00\x01\xff", uuid.UUID("12345678-1234-5678-1234-567812345678"),
           dt.timedelta(days=1, hours=2), [1, 2, None], ["a", "b c"], '{"k": [1, 2]}')
    placeholders = ", ".join(["%s"] * len(row))
    conn.execute(f"INSERT INTO {table} VALUES ({placeholders})", row[:-1] + (row[-1],))
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            got = cur.execute(f"SELECT * FROM {table} WHERE a = %s", (1,)).fetchone()
            expected = list(row)
            expected[16] = {"k": [1, 2]}
            assert list(got) == expected, (binary, got)
            names = [d.name for d in cur.description]
            assert names == list("abcdefghijklmnopq"), names
    # parameters of several types, sent text and binary
    for binary in (False, True):
        with conn.cursor(binary=binary) as cur:
            cur.execute(f"SELECT a FROM {table} WHERE b = %s AND c = %s AND e = %s AND f = %s",
                        ("héllo 'q'", Decimal("12.34"), True, dt.date(2024, 2, 29)))
            assert cur.fetchall() == [(1,)]
    conn.execute(f"INSERT INTO {table} (a, b) SELECT g, 'r' || g FROM generate_series(2, 30) g")

    # COPY into a table and back out
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} (a, b, c) FROM STDIN") as copy:
            for k in range(100, 110):
                copy.write_row((k, f"copied {k}", Decimal(k) / 4))
        cur.execute(f"SELECT count(*), sum(c) FROM {table} WHERE a >= 100")
        assert cur.fetchone() == (10, Decimal("261.25"))
        out = []
        with cur.copy(f"COPY (SELECT a, b FROM {table} WHERE a >= 100 ORDER BY a) TO STDOUT") \
                as copy:
            for r in copy.rows():
                out.append(r)
        assert out[0] == ("100", "copied 100") and len(out) == 10

    # TypeInfo.fetch (catalog query with to_regtype and ::regtype)
    info = TypeInfo.fetch(conn, "int4")
    assert info.oid == 23 and info.array_oid == 1007, info

with psycopg.connect(dsn) as conn:      # a transaction, so the named cursor can live
    with conn.cursor(name="mycur") as cur:
        cur.itersize = 7
        cur.execute(f"SELECT a, b FROM {table} WHERE a > %s ORDER BY a", (1,))
        first = cur.fetchmany(3)
        assert [r[0] for r in first] == [2, 3, 4], first
        rest = cur.fetchall()
        assert len(rest) == 26 + 10 and rest[-1][0] == 109
        assert [d.name for d in cur.description] == ["a", "b"]
    conn.commit()
print("ok", impl)
