"""Driving a cqgate server with NEXMark files: declare the streams, start a query on a cursor
(psycopg, FETCH), a COPY (asyncpg) or an Arrow reader (ADBC, binary COPY), send the CSV files
through the ingest port (as fast as the server takes them, or paced), and drain the rows in a
thread, noting when each batch arrived. Used by the tests and by run.py."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import adbc_driver_postgresql.dbapi as adbc
import asyncpg
import psycopg
import pyarrow as pa

from .generate import DDL, SCHEMAS

CHUNK = 1 << 20


def declare(dsn: str, slack: str = "none", streams=tuple(SCHEMAS), ddl: dict = DDL) -> None:
    """Each stream of ``streams`` made anew (``ddl``: their columns by name; FLINK_DDL for the
    Flink suite's person, auction and bid)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for s in streams:
            c.execute(f"DROP STREAM IF EXISTS {s} CASCADE")
            c.execute(f"CREATE STREAM {s} ({ddl[s]}) WITH (slack = '{slack}')")


class Reader:
    """A cursor over ``sql`` on its own connection, drained by a thread: ``rows`` and, per
    FETCH that returned rows, (perf_counter at arrival, rows so far)."""

    def __init__(self, dsn: str | None, sql: str, name: str = "c", quiet: str = "20s",
                 conn: psycopg.Connection | None = None):
        self.conn = conn if conn is not None else psycopg.connect(dsn)
        self.cur = self.conn.cursor()
        hold = " WITH HOLD" if self.conn.autocommit else ""
        self.cur.execute(f"DECLARE {name} CURSOR{hold} FOR {sql}")
        self.name, self.quiet = name, quiet      # the reader stops after that long without rows
        self.rows: list = []
        self.arrivals: list = []
        self.keep = True
        self.expect: int | None = None
        self.counts = len
        self.count = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)

    @classmethod
    def on(cls, conn: psycopg.Connection, sql: str, quiet: str = "20s") -> "Reader":
        """A reader on ``conn``, a session its caller has set up (SET …)."""
        return cls(None, sql, quiet=quiet, conn=conn)

    def start(self, expect: int | None = None, keep: bool = True,
              counts=len) -> "Reader":
        """Drain until ``expect`` rows have come (``counts``: how much a FETCH's rows count
        towards it, e.g. only the rows still valid at the end), or until it is quiet."""
        self.expect, self.keep, self.counts = expect, keep, counts
        self.thread.start()
        return self

    def _drain(self) -> None:
        try:
            while self.expect is None or self.count < self.expect:
                # what is ready, at least one row: no waiting for a batch to fill up
                self.cur.execute(f"FETCH ALL FROM {self.name} WITH (timeout = '{self.quiet}')")
                got = self.cur.fetchall()
                if not got:
                    break
                self.count += self.counts(got)
                self.arrivals.append((time.perf_counter(), self.count, got[-1]))
                if self.keep:
                    self.rows.extend(got)
        except psycopg.errors.QueryCanceled:
            pass                              # close() ends a reader that has no end of its own
        finally:
            self.done.set()

    def wait(self, timeout: float) -> int:
        if not self.done.wait(timeout):
            raise TimeoutError(f"{self.count} rows after {timeout}s")
        return self.count

    def close(self) -> None:
        try:
            self.conn.cancel()
        except psycopg.Error:
            pass
        self.done.wait(30)
        self.conn.close()


def _await_query(dsn: str, reader, timeout: float) -> None:
    """Until the reader's query shows in cq_queries (by its session's pid, where the reader
    knows it, else by its text); its reader's error if it ended first."""
    deadline = time.monotonic() + timeout

    def started(c) -> bool:
        if not hasattr(reader, "pid"):
            return c.execute("SELECT count(*) FROM cq_queries WHERE query = %s",
                             [reader.sql]).fetchone()[0] > 0
        return reader.pid is not None and c.execute(
            "SELECT count(*) FROM cq_queries WHERE pid = %s", [reader.pid]).fetchone()[0] > 0
    with psycopg.connect(dsn, autocommit=True) as c:
        while not started(c):
            if reader.done.is_set() or time.monotonic() > deadline:
                raise RuntimeError(f"the query did not start: {reader.error!r}")
            time.sleep(0.02)


class CopyReader:
    """The same, read as ``COPY (sql) TO STDOUT`` by asyncpg, which hands over all the
    CopyData messages a read brought at once: the client's cost per row is finding its
    newline, as a client writing the rows to a file pays. Rows are counted, not kept; it stops
    after ``expect`` rows (then cancels the COPY) or when the query ends."""

    def __init__(self, dsn: str, sql: str, counts=None, settings: dict | None = None):
        """``counts``: how many rows a chunk of COPY lines counts for (default: its lines);
        ``settings``: the session's, sent at startup."""
        self.dsn, self.sql = dsn, sql
        self.counts = counts or (lambda chunk: chunk.count(b"\n"))
        self.settings = settings or {}
        self.pid: int | None = None            # its session's, once connected
        self.params = dict(kv.split("=", 1) for kv in dsn.split())
        self.count = 0
        self.arrivals: list = []              # (perf_counter, rows so far, None) per chunk
        self.expect: int | None = None
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, expect: int | None = None, keep: bool = False,
              timeout: float = 30, continuous: bool = True) -> "CopyReader":
        """Start the COPY and return once its query runs (rows are counted, never kept);
        ``continuous=False``: a server with no cq_queries to wait on (PostgreSQL)."""
        if keep:
            raise ValueError("a CopyReader counts rows; use Reader to keep them")
        self.expect = expect
        threading.Thread(target=asyncio.run, args=(self._drain(),), daemon=True).start()
        if continuous:
            _await_query(self.dsn, self, timeout)
        return self

    async def _drain(self) -> None:
        p = self.params
        try:
            con = await asyncpg.connect(host=p["host"], port=int(p["port"]), user=p["user"],
                                        database=p["dbname"], server_settings=self.settings)
        except (OSError, asyncpg.PostgresError) as e:
            self.error = e
            self.done.set()
            return
        self._loop = asyncio.get_running_loop()
        self.pid = con.get_server_pid()

        async def sink(chunk: bytes) -> None:
            self.count += self.counts(chunk)
            self.arrivals.append((time.perf_counter(), self.count, None))
            if self.expect is not None and self.count >= self.expect:
                self._task.cancel()

        self._task = asyncio.ensure_future(con.copy_from_query(self.sql, output=sink))
        try:
            await self._task
        except asyncio.CancelledError:
            pass                              # enough rows, or close()
        except asyncpg.PostgresError as e:
            self.error = e
        finally:
            await con.close(timeout=10)
            self.done.set()

    def wait(self, timeout: float) -> int:
        if not self.done.wait(timeout):
            raise TimeoutError(f"{self.count} rows after {timeout}s")
        if self.error is not None:
            raise RuntimeError(f"the read failed: {self.error}")
        return self.count

    def close(self) -> None:
        if self._loop is not None and self._task is not None and not self.done.is_set():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self.done.wait(30)


class ArrowReader:
    """The same, read by the ADBC PostgreSQL driver (``adbc_driver_postgresql``), which
    fetches a query through ``COPY (…) TO STDOUT (FORMAT BINARY)`` and parses it into Arrow
    record batches in C++: an Arrow client's cost per row. Rows are counted per batch; with
    ``expect`` the query gets that LIMIT (see ``start``)."""

    def __init__(self, dsn: str, sql: str):
        self.sql = sql
        p = dict(kv.split("=", 1) for kv in dsn.split())
        self.uri = f"postgresql://{p['user']}@{p['host']}:{p['port']}/{p['dbname']}"
        self.count = 0
        self.arrivals: list = []
        self.expect: int | None = None
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._conn = None

    def start(self, expect: int | None = None, keep: bool = False,
              timeout: float = 30, continuous: bool = True) -> "ArrowReader":
        if keep:
            raise ValueError("an ArrowReader counts rows; use Reader to keep them")
        self.expect = expect
        if expect is not None and " LIMIT " not in self.sql.upper():
            # the driver hands over a batch when its buffer fills or the COPY ends: a LIMIT
            # ends it at the last row, so the last partial batch comes too
            self.sql = f"{self.sql} LIMIT {expect}"
        threading.Thread(target=self._drain, daemon=True).start()
        if continuous:
            _await_query(self.uri, self, timeout)
        return self

    def _drain(self) -> None:
        try:
            self._conn = adbc.connect(self.uri)
            cur = self._conn.cursor()
            # a batch per arrival of ~1MB at most, not the driver's default 16MB
            cur.adbc_statement.set_options(
                **{"adbc.postgresql.batch_size_hint_bytes": str(1 << 20)})
            cur.execute(self.sql)
            for batch in cur.fetch_record_batch():
                self.count += batch.num_rows
                self.arrivals.append((time.perf_counter(), self.count, None))
                if self.expect is not None and self.count >= self.expect:
                    break
        except adbc.Error as e:
            self.error = e
        finally:
            self.done.set()

    wait = CopyReader.wait

    def close(self) -> None:
        self.done.wait(30)
        if self._conn is not None:
            self._conn.close()


def _send(port: int, stream: str, data: bytes, errors: list,
          wrapper: str = "csvwrapper") -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(f"{wrapper},{stream}\n".encode())
        for i in range(0, len(data), CHUNK):
            sock.sendall(data[i:i + CHUNK])
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(4096)
        if answer:
            errors.append(answer.decode())


def feed(port: int, files: dict, wrapper: str = "csvwrapper") -> None:
    """Send each stream's CSV ({stream: bytes}; with ``wrapper`` arrowwrapper, its Arrow IPC
    stream: ``ipc_bytes``) on its own source connection, all at once, as fast as the server
    reads them."""
    errors: list = []
    threads = [threading.Thread(target=_send, args=(port, s, d, errors, wrapper))
               for s, d in files.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))


def ipc_bytes(table: pa.Table, rows: int = 65536) -> bytes:
    """A table as one Arrow IPC stream (what ``arrowwrapper`` reads), in batches of ``rows``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def paced(port: int, stream: str, lines: list[bytes], rate: float, tick: float = 0.001) -> list:
    """Send ``lines`` at ``rate`` lines/s in ticks; returns (perf_counter when sent, index of
    the first line after the tick) per tick."""
    sent = []
    per_tick = max(1, int(rate * tick))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"csvwrapper,{stream}\n".encode())
        start = time.perf_counter()
        for k, i in enumerate(range(0, len(lines), per_tick)):
            due = start + k * per_tick / rate
            while (now := time.perf_counter()) < due:
                if due - now > 0.0005:
                    time.sleep(due - now - 0.0003)
            sock.sendall(b"".join(lines[i:i + per_tick]))
            sent.append((time.perf_counter(), min(len(lines), i + per_tick)))
        sock.shutdown(socket.SHUT_WR)
        sock.recv(4096)
    return sent


def advance(dsn: str, streams, to: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for s in streams:
            c.execute(f"ALTER STREAM {s} ADVANCE TO '{to}'")
