"""Every way a client reads a continuous query, each with the real client: psql (plain SELECT,
\\set FETCH_COUNT, Ctrl-C), psycopg named cursors, asyncpg cursors, pgjdbc's fetch size,
psqlODBC's UseDeclareFetch, and node-postgres' cursor traffic (Execute with a row limit and
Flush, no Sync) spoken with the raw protocol client. A feeder inserts once the query runs."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys

import asyncpg
import psycopg
import pytest

import pgwire
from conftest import psql
from continuous import Feeder, lit, unique, wait_running
from test_jdbc import _driver_jar

HERE = os.path.dirname(os.path.abspath(__file__))


def _stream(dsn: str) -> str:
    s = unique("cl")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
    return s


def _feed(server, s: str, keys, delay: float = 0.0) -> Feeder:
    return Feeder(server.dsn, f"FROM {s}", [
        f"INSERT INTO {s} VALUES ({k}, {lit(i + 1)})" for i, k in enumerate(keys)], delay)


def test_psql_plain_select_until_limit(server):
    s = _stream(server.dsn)
    feeder = _feed(server, s, [10, 11, 12, 13])
    r = psql(server, "-A", "-t", "-c", f"SELECT k FROM {s} LIMIT 3", timeout=60)
    feeder.join_checked()
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10", "11", "12"]


def test_psql_fetch_count(server):
    s = _stream(server.dsn)
    feeder = _feed(server, s, [1, 2, 3, 4, 5])
    r = psql(server, "-A", "-t", stdin=f"\\set FETCH_COUNT 2\nSELECT k * 10 FROM {s} LIMIT 5;\n",
             timeout=60)
    feeder.join_checked()
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10", "20", "30", "40", "50"]


def test_psql_ctrl_c_cancels(server):
    s = _stream(server.dsn)
    cmd = ["psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(server.port), "-U", "cq",
           "-d", "cq"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(f"SELECT k FROM {s};\n")
    p.stdin.flush()
    try:
        wait_running(server.dsn, f"FROM {s}")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert "canceling statement due to user request" in err    # psql then ends the script
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_psycopg_named_cursor(server):
    s = _stream(server.dsn)
    feeder = _feed(server, s, [5, 6, 7, 8])
    with psycopg.connect(server.dsn) as conn:
        cur = conn.cursor(name="follow")
        cur.itersize = 2
        cur.execute(f"SELECT k, valid_from FROM {s} [NOW]")
        rows = cur.fetchmany(3)
        assert [r[0] for r in rows] == [5, 6, 7]
        cur.close()
    feeder.join_checked()
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_asyncpg_cursor(server):
    s = _stream(server.dsn)
    feeder = _feed(server, s, [21, 22, 23, 24, 25])

    async def main():
        con = await asyncpg.connect(host="127.0.0.1", port=server.port, user="cq",
                                    database="cq")
        try:
            async with con.transaction():
                cur = await con.cursor(f"SELECT k FROM {s} WHERE k > $1", 21)
                first = [r["k"] for r in await cur.fetch(2)]
                second = [r["k"] for r in await cur.fetch(2)]
                return first, second
        finally:
            await con.close()

    assert asyncio.run(asyncio.wait_for(main(), 60)) == ([22, 23], [24, 25])
    feeder.join_checked()


def test_portal_row_limit_with_flush_and_no_sync(server):
    """node-postgres' cursor: Parse, Bind, Describe, Flush, then Execute(2) + Flush again and
    again inside a transaction; each Execute answers with rows and PortalSuspended."""
    s = _stream(server.dsn)
    c = pgwire.Client(server.port)
    c.send(pgwire.query("BEGIN"))
    c.until(b"Z")
    c.send(pgwire.parse("", f"SELECT k FROM {s}"), pgwire.bind("C_1", ""),
           pgwire.msg(b"D", b"P" + pgwire.cstr("C_1")), pgwire.flush())
    assert [t for t, _ in c.until(b"T")] == [b"1", b"2", b"T"]
    feeder = _feed(server, s, [1, 2, 3, 4])
    got = []
    for _ in range(2):
        c.send(pgwire.execute("C_1", 2), pgwire.flush())
        msgs = c.until(b"s")
        got += [int(body[6:]) for t, body in msgs if t == b"D"]
    assert got == [1, 2, 3, 4]
    feeder.join_checked()
    c.send(pgwire.msg(b"C", b"P" + pgwire.cstr("C_1")), pgwire.sync())
    assert [t for t, _ in c.until(b"Z")] == [b"3", b"Z"]
    wait_running(server.dsn, f"FROM {s}", count=0)
    c.close()


def test_odbc_use_declare_fetch(server):
    s = _stream(server.dsn)
    feeder = _feed(server, s, [31, 32, 33, 34])     # each FETCH 2 waits for two rows
    r = subprocess.run([sys.executable, os.path.join(HERE, "drivers", "odbc_follow.py"),
                        str(server.port), f"SELECT k FROM {s}", "3"],
                       capture_output=True, text=True, timeout=90)
    feeder.join_checked()
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["31", "32", "33"]
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_jdbc_fetch_size(server, tmp_path):
    if shutil.which("javac") is None:
        pytest.fail("javac (JDK 17) is required for the JDBC test")
    s = _stream(server.dsn)
    src = os.path.join(HERE, "drivers", "jdbc", "ContinuousCheck.java")
    subprocess.run(["javac", "-d", str(tmp_path), src], check=True, timeout=120)
    feeder = _feed(server, s, [41, 42, 43, 44, 45], delay=0.2)
    r = subprocess.run(["java", "-cp", f"{tmp_path}{os.pathsep}{_driver_jar()}",
                        "ContinuousCheck", f"jdbc:postgresql://127.0.0.1:{server.port}/cq",
                        f"SELECT k FROM {s} LIMIT 5"],
                       capture_output=True, text=True, timeout=120)
    feeder.join_checked()
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "columns=k:int4"
    assert [x for x in out if x.startswith("row=")] == [f"row={k}" for k in range(41, 46)]
    assert out[-1] == "done"


def test_simple_query_streams_rows_as_they_come(server):
    """What psql 17's FETCH_COUNT relies on: one simple Query, DataRows sent (and flushed) as
    the query produces them, until a CancelRequest ends it with 57014."""
    s = _stream(server.dsn)
    c = pgwire.Client(server.port)
    c.send(pgwire.query(f"SELECT k FROM {s}"))
    assert c.read()[0] == b"T"
    got = []
    for k in (7, 8):
        with psycopg.connect(server.dsn, autocommit=True) as feed:
            wait_running(server.dsn, f"FROM {s}")
            feed.execute(f"INSERT INTO {s} VALUES ({k}, {lit(k)})")
        tag, body = c.read()                      # arrives while the query still runs
        assert tag == b"D"
        got.append(int(body[6:]))
    assert got == [7, 8]
    pgwire.cancel(server.port, c.pid, c.secret)
    msgs = c.until(b"Z")
    errors = [pgwire.error_fields(b) for t, b in msgs if t == b"E"]
    assert errors and errors[0]["C"] == "57014"
    c.send(pgwire.query("SELECT 1"))
    assert [t for t, _ in c.until(b"Z")] == [b"T", b"D", b"C", b"Z"]
    c.close()


def test_statement_timeout_cancels_a_waiting_continuous_query(server):
    """statement_timeout (ms, or with a unit) ends a continuous query that waits longer with
    57014, as PostgreSQL ends a long statement; the session goes on, and so does a cursor's
    FETCH: the transaction fails, and its query ends with it."""
    s = _stream(server.dsn)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = 300")
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            c.execute(f"SELECT k FROM {s}")
        assert c.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SET statement_timeout = 'soon'")
    with psycopg.connect(server.dsn) as c:
        c.execute("SET statement_timeout = '300ms'")
        c.execute(f"DECLARE f CURSOR FOR SELECT k FROM {s}")
        with pytest.raises(psycopg.errors.QueryCanceled):
            c.execute("FETCH 1 FROM f")
        c.rollback()
        assert c.execute("SELECT 2").fetchone() == (2,)
    wait_running(server.dsn, f"FROM {s}", count=0)       # the cursor's query ended
