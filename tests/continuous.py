"""Helpers for tests of continuous queries through a real server: unique stream names, seed
time units as timestamps, waiting until a query runs in the back end (or, generally, until a
condition holds), and feeding a stream from another connection once it does."""
from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
import time
import uuid

import psycopg

EPOCH = dt.datetime(2026, 11, 1)


def at(units: float) -> dt.datetime:
    """Seed time unit ``units`` (one unit = one second) as a timestamp."""
    return EPOCH + dt.timedelta(seconds=units)


def lit(units: float) -> str:
    return f"TIMESTAMP '{at(units).isoformat(sep=' ')}'"


def units(value: dt.datetime | None) -> float | None:
    return None if value is None else (value - EPOCH).total_seconds()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def running(dsn: str, fragment: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                         [f"%{fragment}%"]).fetchone()[0]


def wait_running(dsn: str, fragment: str, count: int = 1, timeout: float = 20) -> None:
    """Wait until ``count`` queries whose SQL contains ``fragment`` run (or fail)."""
    deadline = time.monotonic() + timeout
    while running(dsn, fragment) != count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} quer(ies) with {fragment!r} not running after "
                                 f"{timeout}s (found {running(dsn, fragment)})")
        time.sleep(0.05)


def wait_for(condition, timeout: float = 60, what: str = "the condition"):
    """Poll ``condition()`` every 0.05 s until it returns something true, and return that;
    an AssertionError naming ``what`` after ``timeout`` seconds. The timeout is generous: a
    wait for something to happen on a busy machine, not a bound on how soon (bench/ measures
    that)."""
    deadline = time.monotonic() + timeout
    while not (got := condition()):
        if time.monotonic() > deadline:
            said = what() if callable(what) else what      # (callable: what it is by then)
            raise AssertionError(f"{said}: still not so after {timeout}s")
        time.sleep(0.05)
    return got


class Feeder(threading.Thread):
    """Runs ``statements`` on a connection of its own once a query mentioning ``fragment``
    runs; ``join_checked`` re-raises what went wrong in the thread."""

    def __init__(self, dsn: str, fragment: str, statements: list, delay: float = 0.0):
        super().__init__(daemon=True)
        self.dsn, self.fragment, self.statements, self.delay = dsn, fragment, statements, delay
        self.error: BaseException | None = None
        self.start()

    def run(self):
        try:
            wait_running(self.dsn, self.fragment)
            time.sleep(self.delay)
            with psycopg.connect(self.dsn, autocommit=True) as c:
                for s in self.statements:
                    c.execute(s)
        except BaseException as e:  # noqa: BLE001 - reported by join_checked
            self.error = e

    def join_checked(self, timeout: float = 30) -> None:
        self.join(timeout)
        assert not self.is_alive(), "feeder did not finish"
        if self.error is not None:
            raise self.error


def fetch(cur, sql: str) -> list:
    """Run a FETCH; rows with timestamps as seed time units."""
    cur.execute(sql)
    return [tuple(units(v) if hasattr(v, "year") else v for v in r) for r in cur.fetchall()]


def make_stream(c, name: str) -> None:
    c.execute(f"CREATE STREAM {name} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")


@contextlib.contextmanager
def follow(server, prefix: str, create: str | None = None):
    """A fresh stream (``create``: its CREATE STREAM with ``{s}`` for the name; by default
    ``(k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)``), an autocommit connection that feeds it,
    and a cursor on a connection of its own, inside a transaction (where DECLARE lives)."""
    s = unique(prefix)
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        if create is None:
            make_stream(admin, s)
        else:
            admin.execute(create.format(s=s))
        yield s, admin, conn.cursor()


def send_source(port: int, text: str | bytes, timeout: float = 10) -> bytes:
    """Send ``text`` as a source on the ingest port; returns what the server answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(text.encode() if isinstance(text, str) else text)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer
