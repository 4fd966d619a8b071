"""COPY … TO STDOUT: the bytes PostgreSQL writes in text and CSV (escapes, NULLs, quoting,
one CopyData message a row, which psycopg's row reader relies on), and COPY of a continuous
query, which streams rows as they come until its LIMIT, a cancel or the client's going."""
from __future__ import annotations

import asyncio
import datetime as dt
import threading

import asyncpg
import psycopg
import pytest

from conftest import psql
from continuous import Feeder, lit, unique, wait_running

ROWS = [
    (1, "tab\there", 1.5, dt.datetime(2026, 11, 1, 0, 0, 1, 500000)),
    (2, "nl\nback\\slash", None, None),
    (3, 'a,"q"', -0.25, dt.datetime(2026, 11, 1)),
    (4, "bar|cr\r", 0.0, dt.datetime(2026, 11, 1, 0, 0, 0, 10)),
    (5, "\b\f\v", 1e20, None),
    (6, "", None, None),
]
TEXT = ("1\ttab\\there\t1.5\t2026-11-01 00:00:01.5\n"
        "2\tnl\\nback\\\\slash\t\\N\t\\N\n"
        '3\ta,"q"\t-0.25\t2026-11-01 00:00:00\n'
        "4\tbar|cr\\r\t0\t2026-11-01 00:00:00.00001\n"
        "5\t\\b\\f\\v\t1e+20\t\\N\n"
        "6\t\t\\N\t\\N\n")
CSV = ("a,s,f,ts\n"
       "1,tab\there,1.5,2026-11-01 00:00:01.5\n"
       '2,"nl\nback\\slash",,\n'
       '3,"a,""q""",-0.25,2026-11-01 00:00:00\n'
       '4,"bar|cr\r",0,2026-11-01 00:00:00.00001\n'
       "5,\b\f\v,1e+20,\n"
       '6,"",,\n')


@pytest.fixture
def table(server):
    name = unique("copyout")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a INT, s TEXT, f DOUBLE PRECISION, ts TIMESTAMP)")
        with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            for r in ROWS:
                cp.write_row(r)
    return name


def _copied(dsn: str, sql: str) -> tuple[bytes, list]:
    """What COPY … TO STDOUT sends: its bytes, and the CopyData messages one by one."""
    with psycopg.connect(dsn, autocommit=True) as c:
        with c.cursor().copy(sql) as cp:
            messages = [bytes(m) for m in cp]
    return b"".join(messages), messages


@pytest.mark.parametrize("sql,expected", [
    ("COPY {t} TO STDOUT", TEXT),
    ("COPY (SELECT * FROM {t} ORDER BY a) TO STDOUT WITH (FORMAT csv, HEADER)", CSV),
    ("COPY {t} (a, s) TO STDOUT (DELIMITER '|')",
     "".join(f"{a}|{s}\n" for a, s in [(1, "tab\\there"), (2, "nl\\nback\\\\slash"),
                                        (3, 'a,"q"'), (4, "bar\\|cr\\r"),
                                        (5, "\\b\\f\\v"), (6, "")])),
    ("COPY (SELECT a, f FROM {t} ORDER BY a) TO STDOUT CSV NULL 'none'",
     "1,1.5\n2,none\n3,-0.25\n4,0\n5,1e+20\n6,none\n"),
])
def test_copy_out_writes_what_postgresql_writes(server, table, sql, expected):
    data, messages = _copied(server.dsn, sql.format(t=table))
    assert data.decode() == expected
    header = 1 if "HEADER" in sql else 0
    assert len(messages) == len(ROWS) + header          # one CopyData message a row


def test_psycopg_reads_copied_rows_back(server, table):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with c.cursor().copy(f"COPY {table} TO STDOUT") as cp:
            cp.set_types(["int4", "text", "float8", "timestamp"])
            got = list(cp.rows())
    assert got == ROWS


def _stream(dsn: str) -> str:
    s = unique("copylive")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v TEXT, t TIMESTAMP TIMESTAMPCOLUMN)")
    return s


def test_copy_of_a_continuous_query_streams_until_its_limit(server):
    s = _stream(server.dsn)
    feeder = Feeder(server.dsn, f"FROM {s}", [
        f"INSERT INTO {s} VALUES (1, 'a', {lit(1)}), (2, 'b\tc', {lit(2)})",
        f"INSERT INTO {s} VALUES (3, NULL, {lit(3)}), (4, 'late', {lit(4)})"], delay=0.2)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        cur = c.cursor()
        with cur.copy(f"COPY (SELECT k, v, valid_from FROM {s} LIMIT 3) TO STDOUT") as cp:
            cp.set_types(["int4", "text", "timestamp"])
            rows = list(cp.rows())
        assert cur.rowcount == 3
        assert c.execute("SELECT 1").fetchone() == (1,)
    feeder.join_checked()
    assert [r[:2] for r in rows] == [(1, "a"), (2, "b\tc"), (3, None)]
    assert [r[2].second for r in rows] == [1, 2, 3]
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_cancel_ends_a_copy_of_a_continuous_query_and_keeps_the_session(server):
    s = _stream(server.dsn)
    feeder = Feeder(server.dsn, f"FROM {s}",
                    [f"INSERT INTO {s} VALUES (7, 'x', {lit(1)})"])
    with psycopg.connect(server.dsn, autocommit=True) as c:
        first = []
        with pytest.raises(psycopg.errors.QueryCanceled):
            with c.cursor().copy(f"COPY (SELECT k FROM {s}) TO STDOUT") as cp:
                for row in cp.rows():
                    first.append(row)
                    threading.Timer(0.2, c.cancel).start()     # the query has no end of its own
        assert first == [("7",)]
        assert c.execute("SELECT 2").fetchone() == (2,)
    feeder.join_checked()
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_copy_of_a_stream_in_snapshot_mode_is_finite(server):
    s = _stream(server.dsn)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"INSERT INTO {s} VALUES (1, 'a', {lit(1)}), (2, 'b', {lit(2)})")
        data, _ = _copied(server.dsn + " options='-c cq.mode=snapshot'",
                          f"COPY (SELECT k, v FROM {s} [RANGE '10 seconds']) TO STDOUT")
    assert sorted(data.decode().splitlines()) == ["1\ta", "2\tb"]


def test_psql_copy_of_a_continuous_query(server):
    s = _stream(server.dsn)
    feeder = Feeder(server.dsn, f"FROM {s}", [
        f"INSERT INTO {s} VALUES (5, 'p', {lit(1)}), (6, 'q', {lit(2)})"])
    r = psql(server, "-c", f"\\copy (SELECT k, v FROM {s} LIMIT 2) to stdout csv",
             timeout=60)
    feeder.join_checked()
    assert r.returncode == 0, r.stderr
    assert r.stdout == "5,p\n6,q\n"


def test_asyncpg_copy_from_query_of_a_continuous_query(server):
    s = _stream(server.dsn)
    feeder = Feeder(server.dsn, f"FROM {s}", [
        f"INSERT INTO {s} VALUES (8, 'r', {lit(1)}), (9, 's,t', {lit(2)})"])

    async def main():
        con = await asyncpg.connect(host="127.0.0.1", port=server.port, user="cq",
                                    database="cq")
        chunks = []

        async def sink(data):
            chunks.append(data)

        try:
            status = await con.copy_from_query(f"SELECT k, v FROM {s} LIMIT 2", output=sink,
                                               format="csv")
        finally:
            await con.close()
        return status, b"".join(chunks)

    status, data = asyncio.run(asyncio.wait_for(main(), 60))
    feeder.join_checked()
    assert status == "COPY 2"
    assert data == b'8,r\n9,"s,t"\n'


def test_a_client_that_goes_away_ends_its_copy(server):
    s = _stream(server.dsn)
    c = psycopg.connect(server.dsn, autocommit=True)
    started = threading.Event()

    def copy():
        try:
            with c.cursor().copy(f"COPY (SELECT k FROM {s}) TO STDOUT") as cp:
                started.set()
                for _ in cp:
                    pass
        except psycopg.Error:
            pass

    t = threading.Thread(target=copy, daemon=True)
    t.start()
    assert started.wait(20)
    wait_running(server.dsn, f"FROM {s}")
    c.pgconn.finish()                  # the socket closes under the COPY
    wait_running(server.dsn, f"FROM {s}", count=0)
    t.join(10)


@pytest.mark.parametrize("sql, sqlstate, position", [
    # an error in COPY's query points into the statement the client sent, as PostgreSQL's does
    ("COPY (SELECT nosuch FROM pg_class) TO STDOUT", "42703", 14),
    ("COPY (SELEC 1) TO STDOUT", "42601", 13),
    ("COPY () TO STDOUT", "0A000", None),
    ("COPY (SHOW search_path) TO STDOUT", "0A000", None),
])
def test_copy_of_a_query_that_cannot_run_says_where_and_why(server, sql, sqlstate, position):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as err:
            with c.cursor().copy(sql) as copy:
                list(copy)
        assert (err.value.sqlstate, err.value.diag.statement_position) == (
            sqlstate, None if position is None else str(position))
        assert c.execute("SELECT 1").fetchone() == (1,)      # the session goes on
