"""Statements that stop when asked: statement_timeout ends a long DuckDB statement with 57014,
and SIGTERM is a fast shutdown (running statements interrupted, clients told 57P01, the
process gone with no worker left behind, a clean start after); DuckDB's memory is bounded.
Waits here are generous, for a busy machine: how fast is a benchmark's question."""
import asyncio
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import psycopg

from conftest import ServerProcess
from continuous import wait_for
from gateway.process import server as srv_mod
from gateway.system_views import catalog_live

LONG = "SELECT count(*) FROM range(100000000) a, range(100000) b"    # minutes of DuckDB work
TIMEOUT = "canceling statement due to statement timeout"


def _run(conn, sql: str, out: dict, key: str) -> threading.Thread:
    """Run ``sql`` on ``conn`` in a thread; ``out[key]``: the error it ended with, or None."""
    def run():
        try:
            conn.execute(sql).fetchall()
            out[key] = None
        except psycopg.Error as e:
            out[key] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _ended(conn, sql: str, timeout: float = 60) -> psycopg.Error | None:
    """Run ``sql`` on ``conn``; the error it ended with (None: none). LONG runs for minutes,
    so ending within ``timeout`` shows that DuckDB was interrupted."""
    out: dict = {}
    t = _run(conn, sql, out, "error")
    t.join(timeout)
    if t.is_alive():
        conn.cancel()                    # free the session for the test's cleanup
        t.join(30)
        raise AssertionError(f"the statement was not interrupted within {timeout}s")
    return out["error"]


def test_statement_timeout_ends_a_long_duckdb_statement(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '500ms'")
        e = _ended(c, LONG)
        assert isinstance(e, psycopg.errors.QueryCanceled) and str(e) == TIMEOUT, e
        assert c.execute("SELECT 1").fetchone() == (1,)          # the session goes on
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT count(*) FROM range(1000)").fetchone() == (1000,)


def test_an_interrupt_that_comes_before_duckdb_starts_is_not_lost(server):
    """statement_timeout = 1ms ends the statement while the worker is still checking
    privileges, before DuckDB runs the query; DuckDB drops an interrupt it gets then, so the
    server repeats it until the statement ends (a CancelRequest and SIGTERM alike)."""
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '1ms'")
        for _ in range(5):        # the catalog's views are registered before the query runs
            e = _ended(c, LONG + ", (SELECT 1 FROM pg_class LIMIT 1) c")
            assert isinstance(e, psycopg.errors.QueryCanceled) and str(e) == TIMEOUT, e
        c.execute("SET statement_timeout = 0")
        assert c.execute("SELECT 1").fetchone() == (1,)          # the session goes on


def test_an_interrupt_that_reaches_the_catalog_refresh_says_why_it_came(tmp_path, monkeypatch):
    """The interrupt may reach DuckDB while the worker registers the catalog's views, outside
    the statement itself: statement_timeout still says 'statement timeout' (57014), not
    'user request'. Deterministic: the refresh here waits past the timeout and is then
    interrupted, as a busy machine makes it happen now and then."""
    refresh = catalog_live.LiveCatalog.refresh

    def slow_refresh(self):
        time.sleep(0.3)                 # statement_timeout (50ms) fires meanwhile
        self.con.execute("SELECT count(*) FROM range(100000000) a, range(100000) b")
        refresh(self)

    monkeypatch.setattr(catalog_live.LiveCatalog, "refresh", slow_refresh)

    async def main():
        server = srv_mod.Server(srv_mod.Config(data_dir=str(tmp_path / "data"), port=0,
                                               ingest_port=0))
        port = await server.start()

        def client():
            with psycopg.connect(f"host=127.0.0.1 port={port} user=cq dbname=cq",
                                 autocommit=True) as c:
                c.execute("SET statement_timeout = '50ms'")
                e = _ended(c, "SELECT 1 FROM pg_class LIMIT 1")
                c.execute("SET statement_timeout = 0")
                return e, c.execute("SELECT 1").fetchone()
        try:
            return await asyncio.wait_for(asyncio.to_thread(client), 120)
        finally:
            await server.stop()
    e, after = asyncio.run(main())
    assert isinstance(e, psycopg.errors.QueryCanceled) and str(e) == TIMEOUT, e
    assert after == (1,)                                       # the session goes on


def test_sigterm_interrupts_statements_and_exits(tmp_path):
    data = str(tmp_path / "data")
    s = ServerProcess(data)
    try:
        c1 = psycopg.connect(s.dsn, autocommit=True)
        c2 = psycopg.connect(s.dsn, autocommit=True)
        c2.execute("CREATE STREAM shut_s (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c2.execute("BEGIN")
        c2.execute("DECLARE w CURSOR FOR SELECT a FROM shut_s")
        pids = [c1.info.backend_pid, c2.info.backend_pid]
        out = {}
        threads = [_run(c1, LONG, out, "long"),
                   _run(c2, "FETCH 1 FROM w WITH (timeout = '60s')", out, "fetch")]
        with psycopg.connect(s.dsn, autocommit=True) as watch:    # both running
            wait_for(lambda: watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE (pid = %s AND state = 'active') "
                "OR (pid = %s AND wait_event IS NOT NULL)", pids).fetchone()[0] == 2,
                60, "the DuckDB statement and the FETCH running")
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(60) == 0
        for t in threads:
            t.join(30)
        assert {key: None if e is None else e.sqlstate for key, e in out.items()} == \
            {"long": "57P01", "fetch": "57P01"}
        # interrupted, not left behind: every worker thread ended within the shutdown
        wait_for(lambda: any("shutdown: worker threads and DuckDB closed" in ln
                             for ln in s.lines), 30, "the shutdown's last log line")
        assert not any("worker threads still busy" in ln for ln in s.lines), "".join(s.lines)
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
        # not a wait for anything: twice the timeout of idling outside a transaction, which
        # must not end the session
        time.sleep(0.6)
        assert c.execute("SELECT 1").fetchone() == (1,)
        c.execute("BEGIN")
        c.execute("SELECT 1")
        # idle in the transaction until the server says something: it ends the session
        assert select.select([c], [], [], 60)[0], "the session was not ended within 60 s"
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
    given WORKERS_WAIT_S, then left behind with a warning; the shutdown ends without it."""
    stuck, returned = threading.Event(), threading.Event()

    def ignores_interrupts():
        stuck.wait(60)                  # far longer than a shutdown takes, even a slow one
        returned.set()

    async def main():
        server = srv_mod.Server(srv_mod.Config(data_dir=str(tmp_path / "data")))
        await server.start()
        server.services.pool.submit(ignores_interrupts)
        await server.stop()
        return server.abandoned, returned.is_set()
    try:
        with caplog.at_level("INFO", logger="cqgate"):
            abandoned, waited_for_it = asyncio.run(main())
    finally:
        stuck.set()
    assert abandoned and not waited_for_it         # the call was still running at the end
    assert "worker threads still busy" in caplog.text


# The server's command line, with a thread that reads the process's SIGTERM and SIGINT actions
# (the C function the kernel calls) every 0.1 ms and says on stderr whenever another function
# than the one Python installed for the server's loop is in place.
WATCHED = r"""
import ctypes, signal, sys, threading, time
libc = ctypes.CDLL(None)
def actions():
    out = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        buf = ctypes.create_string_buffer(256)   # struct sigaction, its handler first
        libc.sigaction(int(sig), None, buf)
        out.append(int.from_bytes(buf.raw[:8], sys.byteorder))
    return out
def watch():
    while not actions()[0]:                  # until the server's loop takes SIGTERM
        time.sleep(0.001)
    own, told = actions(), 0
    while told < 3:
        # (the default action comes back as the loop closes, at exit: not a replacement)
        if any(now not in (mine, 0, 1) for now, mine in zip(actions(), own)):
            print("SIGTERM or SIGINT action replaced", file=sys.stderr, flush=True)
            told += 1
        time.sleep(0.0001)
threading.Thread(target=watch, daemon=True).start()
from gateway.process.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_while_copy_and_a_source_parse_csv_stops_the_server(tmp_path):
    """COPY and stream sources parse CSV on the server's loop; pyarrow used to put its own
    SIGTERM and SIGINT handler in place around each parse, and a signal that came then could
    be lost (the server ran on). The handlers stay the server's, and SIGTERM mid-COPY stops
    it."""
    s = ServerProcess(str(tmp_path / "data"), python=("-c", WATCHED))
    try:
        with psycopg.connect(s.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM parsed (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        source = socket.create_connection(("127.0.0.1", s.ingest_port), timeout=30)
        source.sendall(b"csvwrapper,parsed\n")
        copying = threading.Event()

        def copy():
            """COPYs of 1,000 rows a chunk, until the server goes."""
            chunk = "".join(f"{i}\t2026-01-01 00:00:00\n" for i in range(1000))  # none late
            try:
                with psycopg.connect(s.dsn, autocommit=True) as conn:
                    while True:
                        with conn.cursor().copy("COPY parsed (a, t) FROM STDIN") as cp:
                            for _ in range(20):
                                cp.write(chunk)
                                source.sendall(b"1,2026-01-01 00:00:00\n" * 100)
                        copying.set()
            except (psycopg.Error, OSError):
                return
        t = threading.Thread(target=copy, daemon=True)
        t.start()
        assert copying.wait(60)
        time.sleep(2.0)                               # many parses, each watched
        s.proc.send_signal(signal.SIGTERM)
        try:
            code = s.proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        t.join(30)
        source.close()
        assert code == 0, "".join(s.lines[-30:])
        assert not any("action replaced" in ln for ln in s.lines), "".join(s.lines)
        wait_for(lambda: any("shutdown: worker threads and DuckDB closed" in ln
                             for ln in s.lines), 30, "the shutdown's last log line")
    finally:
        s.stop()
