"""Statements that stop when asked: statement_timeout ends a long DuckDB statement with 57014,
and SIGTERM is a fast shutdown (running statements interrupted, clients told 57P01, the
process gone within seconds, a clean start after); DuckDB's memory is bounded."""
import asyncio
import signal
import subprocess
import sys
import threading
import time

import psycopg

from conftest import ServerProcess
from gateway.process import server as srv_mod

LONG = "SELECT count(*) FROM range(100000000) a, range(100000) b"    # minutes of DuckDB work


def _run(conn, sql: str, out: dict, key: str) -> threading.Thread:
    def run():
        try:
            conn.execute(sql).fetchall()
            out[key] = None
        except psycopg.Error as e:
            out[key] = e.sqlstate
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_statement_timeout_ends_a_long_duckdb_statement(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '500ms'")
        started = time.monotonic()
        try:
            c.execute(LONG).fetchall()
            raised = None
        except psycopg.errors.QueryCanceled as e:
            raised = str(e)
        assert raised == "canceling statement due to statement timeout"
        assert time.monotonic() - started < 5
        assert c.execute("SELECT 1").fetchone() == (1,)          # the session goes on
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT count(*) FROM range(1000)").fetchone() == (1000,)


def test_an_interrupt_that_comes_before_duckdb_starts_is_not_lost(server):
    """statement_timeout = 1ms ends the statement while the worker is still checking
    privileges, before DuckDB runs the query; DuckDB drops an interrupt it gets then, so the
    server repeats it until the statement ends (a CancelRequest and SIGTERM alike)."""
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '1ms'")
        for _ in range(5):
            started = time.monotonic()
            try:                  # the catalog's views are registered before the query runs
                c.execute(LONG + ", (SELECT 1 FROM pg_class LIMIT 1) c").fetchall()
                raised = None
            except psycopg.errors.QueryCanceled as e:
                raised = str(e)
            assert raised == "canceling statement due to statement timeout"
            assert time.monotonic() - started < 5
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT 1").fetchone() == (1,)          # the session goes on


def test_sigterm_interrupts_statements_and_exits_within_seconds(tmp_path):
    data = str(tmp_path / "data")
    s = ServerProcess(data)
    try:
        c1 = psycopg.connect(s.dsn, autocommit=True)
        c2 = psycopg.connect(s.dsn, autocommit=True)
        c2.execute("CREATE STREAM shut_s (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c2.execute("BEGIN")
        c2.execute("DECLARE w CURSOR FOR SELECT a FROM shut_s")
        out = {}
        threads = [_run(c1, LONG, out, "long"),
                   _run(c2, "FETCH 1 FROM w WITH (timeout = '60s')", out, "fetch")]
        time.sleep(1.5)                          # both running
        started = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(30) == 0
        assert time.monotonic() - started < 5
        for t in threads:
            t.join(10)
        assert out == {"long": "57P01", "fetch": "57P01"}
    finally:
        s.stop()
    again = ServerProcess(data)
    try:
        with psycopg.connect(again.dsn, autocommit=True) as c:
            assert c.execute("SELECT relname FROM pg_class WHERE relname = 'shut_s'").fetchall() \
                == [("shut_s",)]
    finally:
        again.stop()


def test_duckdb_memory_is_bounded_and_a_bad_bound_is_refused_at_start(tmp_path):
    s = ServerProcess(str(tmp_path / "data"), "--duckdb-memory", "256MB")
    try:
        with psycopg.connect(s.dsn, autocommit=True) as c:
            assert c.execute("SELECT value FROM duckdb_settings() WHERE name = 'memory_limit'"
                             ).fetchone() == ("244.1 MiB",)
            # a sort bigger than the bound spills to the data directory instead of failing
            assert c.execute("SELECT count(*) FROM (SELECT i, repeat('x', 100) AS s FROM "
                             "range(3000000) t(i) ORDER BY s, i DESC)").fetchone() == (3000000,)
    finally:
        s.stop()
    r = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "0",
                        "--ingest-port", "0", "--data-dir", str(tmp_path / "other"),
                        "--duckdb-memory", "lots"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("cqgate: --duckdb-memory 'lots'"), r.stderr


def test_a_session_idle_in_a_transaction_too_long_ends_with_25P03(server):
    with psycopg.connect(server.dsn, autocommit=True) as other, \
            psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET idle_in_transaction_session_timeout = 300")     # milliseconds
        time.sleep(0.6)                    # idle outside a transaction: nothing happens
        assert c.execute("SELECT 1").fetchone() == (1,)
        c.execute("BEGIN")
        c.execute("SELECT 1")
        time.sleep(1.0)
        try:
            c.execute("SELECT 2")
            ended = None
        except psycopg.Error as e:
            ended = (e.sqlstate, str(e))
        assert ended == ("25P03", "terminating connection due to idle-in-transaction timeout")
        assert c.closed or c.broken
        assert other.execute("SELECT 3").fetchone() == (3,)       # nobody else is touched


def test_a_worker_that_ignores_its_interrupt_does_not_hold_the_shutdown(tmp_path, caplog):
    """A call in a worker thread that no interrupt reaches (here one waiting on an event) is
    given WORKERS_WAIT_S, then left behind with a warning; the shutdown ends on time."""
    stuck = threading.Event()

    async def main():
        server = srv_mod.Server(srv_mod.Config(data_dir=str(tmp_path / "data")))
        await server.start()
        server.services.pool.submit(stuck.wait, 60)
        began = time.monotonic()
        await server.stop()
        return server.abandoned, time.monotonic() - began
    try:
        with caplog.at_level("INFO", logger="cqgate"):
            abandoned, took = asyncio.run(main())
    finally:
        stuck.set()
    assert abandoned and took < srv_mod.WORKERS_WAIT_S + 2, took
    assert "worker threads still busy" in caplog.text
