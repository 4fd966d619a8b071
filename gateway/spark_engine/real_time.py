"""Spark's real-time mode (``trigger(realTime=…)``) for the Spark engine's queries that allow
it: a cursor's query of one stream's windowed rows, filtered and projected (Spark runs
nothing stateful, no Python, in that mode), over columns Spark's Arrow reader takes as
they are. A task reads the stream's spool as it grows (``SpoolRealTime.java``) and sends
its rows back as an Arrow stream (``RowsBack.java``) to the ``RowsBack`` listener here.

Each such query holds one executor core for as long as it runs, so the server runs at most
``slots`` of them at once; the others run in micro-batches. Spark ends a real-time batch
every ``BATCH`` (it commits the spool then, and a new task carries on).
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from typing import Callable

import pyarrow as pa

log = logging.getLogger("cqgate")
BATCH = "1 minute"          # a real-time batch's length: the spool is committed at its end
HEADER_BYTES = 256          # a connection's first line: token, partition, epoch
ACCEPT_TIMEOUT_S = 30       # a connection that sends no header in this long is dropped


def arrow_type_ok(t: pa.DataType) -> bool:
    """Whether Spark's Arrow reader takes a spool column of type ``t`` as it is (what it
    does not: timestamps in s or ms, unsigned integers, DuckDB's other types)."""
    if pa.types.is_timestamp(t):
        return t.unit == "us"
    return any(is_(t) for is_ in (
        pa.types.is_boolean, pa.types.is_int8, pa.types.is_int16, pa.types.is_int32,
        pa.types.is_int64, pa.types.is_float32, pa.types.is_float64, pa.types.is_decimal128,
        pa.types.is_string, pa.types.is_binary, pa.types.is_date32))


def local_slots(master: str) -> int:
    """Real-time queries a master runs by default: one core fewer than a local master has
    (the rest run micro-batches); none on a cluster, whose executors may not reach this
    server's listener (``--spark-real-time`` says otherwise)."""
    if not master.startswith("local"):
        return 0
    inside = master[len("local"):].strip("[]").split(",")[0] or "1"
    cores = (os.cpu_count() or 1) if inside == "*" else int(inside)
    return max(cores - 1, 0)


class RowsBack:
    """Where real-time queries' tasks send their rows: a TCP listener on ``host``; each
    query is known by a token, and its connections (a task each, one after another as
    Spark's real-time batches follow) are read one at a time, in the order they came."""

    def __init__(self, host: str):
        self.host = host
        self._sock = socket.create_server((host, 0))
        self.port = self._sock.getsockname()[1]
        self._queries: dict = {}            # token -> (on_batch, lock)
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="spark-rows-back").start()

    def expect(self, on_batch: Callable[[pa.RecordBatch], None]) -> str:
        """A new query's token: its tasks' batches go to ``on_batch``, in order."""
        token = secrets.token_hex(16)
        with self._lock:
            self._queries[token] = (on_batch, threading.Lock())
        return token

    def forget(self, token: str) -> None:
        with self._lock:
            self._queries.pop(token, None)

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:                   # closed: the server is stopping
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True,
                             name="spark-rows-back-task").start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            conn.settimeout(ACCEPT_TIMEOUT_S)
            header = f.readline(HEADER_BYTES).split()
            with self._lock:
                known = self._queries.get(header[0].decode("ascii", "replace")) \
                    if header else None
            if known is None:
                return                         # a stopped query's task, or a stranger
            on_batch, order = known
            conn.settimeout(None)              # a quiet stream is not a dead one
            with order:
                try:
                    for batch in pa.ipc.open_stream(f):
                        on_batch(batch)
                except (OSError, pa.ArrowInvalid) as e:
                    # the task was stopped mid-stream (its query ended, or it failed,
                    # which the query's own end reports)
                    log.debug("a real-time task's rows ended early: %s", e)
