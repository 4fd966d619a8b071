"""A continuous query's result queue in the gateway: the back-end link puts Arrow batches in, in
valid_from order; FETCH, portals and COPY take rows out, waiting with timeouts, cancels and
statement_timeout, on an injected clock (the system's by default).

A queue holds at most ``Bounds.memory`` bytes in memory; what a slow client has not read past
that goes to disk (``spill.Spill``), and past ``Bounds.spill`` bytes there the query ends with
54000, so one client that stops reading costs the server a bounded amount, never more."""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

import pyarrow as pa

from gateway.clock import SYSTEM, Clock
from gateway.link.resumption import Resumption
from gateway.link.spill import Spill
from gateway.pgwire.copy_format import ENCODED, copy_encoder, schema_text
from gateway.pgwire.errors import PgError, QueryCanceled

log = logging.getLogger("cqgate")


@dataclass(frozen=True)
class Bounds:
    """How much of a queue stays in memory and how much may wait on disk (bytes; None: no
    bound), the folder its spill files go to, and how errors name the settings."""
    memory: int | None = None
    spill: int | None = None
    folder: str | None = None
    memory_setting: str = "cq.result_memory"
    spill_setting: str = "cq.result_spill"


UNBOUNDED = Bounds()


def size_text(n: int) -> str:
    """Bytes as PostgreSQL writes memory settings (kB, MB, GB)."""
    for unit, k in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


class LiveRows:
    """A continuous query's result queue: batches arrive from the back end in valid_from order
    and leave through ``take``; ``finish`` marks the end (LIMIT reached, DROP, an error)."""

    def __init__(self, fields: list, schema: pa.Schema | None, qid: int, sql: str, owner: int,
                 name: str, link, clock: Clock = SYSTEM, bounds: Bounds = UNBOUNDED):
        self.fields, self.qid, self.sql, self.owner, self.name = fields, qid, sql, owner, name
        self.schema = schema
        self.link = link
        self.clock = clock
        self.tag = "SELECT"
        self.started = clock.now()
        self.bounds = bounds
        self.pending: deque = deque()     # in memory, in order, before anything spilled
        self.n_pending = 0                # rows waiting: in memory and on disk
        self.memory_bytes = 0             # Arrow bytes of ``pending``
        self.spill: Spill | None = None   # made at the first overflow
        self.delivered = 0
        self.ended = False
        self.error = None
        self.failure: str | None = None   # why the back end stopped it
        self.streams: set = set()         # the streams and named relations it reads
        # derived streams it reads through their query (streams.inlining): its plan names
        # their streams instead, so the back end does not end it when one is dropped
        self.through: frozenset = frozenset()
        self.notices: list = []           # (severity, sqlstate, message) for its next FETCH
        self._changed = asyncio.Event()
        self._encode = None               # rows that still come typed -> ENCODED rows
        self.resumption: Resumption | None = None   # progress rows, restart after a crash

    # called by the back-end link, on the server's loop
    def put(self, table: pa.Table) -> None:
        if self.resumption is not None and not self.ended:
            table = self.resumption.rows(table, self.schema)
        self._queue(table)

    def reached(self, ts: int) -> None:
        """A BOUNDARY at ``ts`` reached the query's rows (``wire.Reached``)."""
        if self.resumption is not None and not self.ended:
            for table in self.resumption.at(ts, self.schema):
                self._queue(table)

    def _queue(self, table: pa.Table) -> None:
        if table.num_rows and not self.ended:
            if self.schema is not None and table.schema != self.schema:
                table = self._encode(table) if self._encode is not None else \
                    table.cast(self.schema)
            size = table.get_total_buffer_size()
            b = self.bounds
            self.n_pending += table.num_rows
            self._changed.set()
            if (self.spill is not None and self.spill.rows) or \
                    (b.memory is not None and self.memory_bytes + size > b.memory):
                self._to_disk(table)          # may end the query (and empty the queue)
            else:
                self.pending.append(table)
                self.memory_bytes += size

    def _to_disk(self, table: pa.Table) -> None:
        b = self.bounds
        if self.spill is None:
            self.spill = Spill(b.folder, f"q{self.qid}", b.memory // 2)
            log.info("%s: the client reads slower than rows come; spilling its rows to disk",
                     self.label())
        # written in slices of about a quarter of the memory bound, the disk bound checked
        # after each: a big batch overshoots it by one slice, not by the whole batch
        size = max(1, table.get_total_buffer_size())
        step = table.num_rows if b.memory is None else \
            max(1, table.num_rows * max(1, b.memory // 4) // size)
        for lo in range(0, table.num_rows, step):
            try:
                self.spill.write(table.slice(lo, step))
            except OSError as e:            # a full disk ends this query, not the server
                self._fail(PgError(f"could not spill the rows {self.label()} has not read: "
                                   f"{e}", sqlstate="53100"))
                return
            if b.spill is not None and self.spill.disk_bytes > b.spill:
                held = f"{size_text(b.memory)} in memory and {size_text(b.spill)} on disk"
                self._fail(PgError(
                    f"{self.label()} fell too far behind its continuous query: more than "
                    f"{held} of rows waited to be read", sqlstate="54000",
                    hint="Read the rows faster (FETCH more often, or more at a time), or raise "
                         "cq.result_spill or cq.result_memory."))
                return

    def encode_at_source(self, oids: list, tz: str, csv: bool, delimiter: str, null: str,
                         quote: str, binary: bool = False) -> bool:
        """From now on the rows come as a COPY … TO STDOUT client reads them, one CopyData
        message a row (``ENCODED``): the source is asked to encode them where it produces
        them, and those already here, and any that still come typed (rows primed from the
        archive), are encoded here the same way. Not once rows have gone to disk (they stay
        as they are), nor where the source cannot; False then."""
        if self.spill is not None or self.schema is None or (
                self.resumption is not None and self.resumption.progress):
            return False
        how = dict(oids=oids, tz=tz, csv=csv, delimiter=delimiter, null=null, quote=quote,
                   binary=binary, schema=schema_text(self.schema))
        if not self.link.encode_rows(self.qid, how):
            return False
        self.resumption = None      # encoded where made, the rows cannot be cut after a crash
        encode = copy_encoder(**how)
        self.pending = deque(encode(t) for t in self.pending)
        self.memory_bytes = sum(t.get_total_buffer_size() for t in self.pending)
        self.schema, self._encode = ENCODED, encode
        return True

    def label(self) -> str:
        return f"cursor {self.name}" if self.name else f"query of pid {self.owner}"

    def _fail(self, err: PgError) -> None:
        """The client fell too far behind: its waiting rows go, the query ends with ``err``
        (listed in cq_queries until its cursor closes), and its source stops."""
        self.failure = err.message
        self._discard()
        self.finish(err)
        self._stop_source(f"failed ({err.sqlstate} {err.message})")

    def _stop_source(self, how: str) -> None:
        """The rows' source stops: here the back end's query."""
        self.link.end_query(self.qid, how)

    def finish(self, error=None) -> None:
        if not self.ended:
            self.ended, self.error = True, error
            self._changed.set()

    def close(self) -> None:
        """The cursor is gone: end the query in the back end and free its state."""
        self._discard()
        if not self.ended:
            self.finish()
            self.link.drop(self.qid)
        else:
            self.link.forget(self.qid)

    def _discard(self) -> None:
        self.pending.clear()
        self.n_pending = self.memory_bytes = 0
        if self.spill is not None:
            self.spill.discard()

    @property
    def spilled_bytes(self) -> int:
        """What the rows waiting on disk take there (compressed)."""
        return self.spill.disk_bytes if self.spill is not None else 0

    # called by the connection and FETCH
    def take_notices(self) -> list:
        out, self.notices = self.notices, []
        return out

    async def take(self, n: int | None, timeout: float | None, cancel: asyncio.Event,
                   closed: asyncio.Future | None = None, *, notices: bool = False,
                   statement_deadline: float | None = None) -> pa.Table:
        """Up to ``n`` rows: waits until ``n`` are there (``n`` None: at least one), the query
        ends, or ``timeout`` seconds pass (then returns what came, maybe nothing).
        ``notices``: also return (maybe with no rows) when a notice is waiting.
        ``statement_deadline`` (the clock's ``monotonic``): statement_timeout's end; reached
        first, it ends the wait with 57014."""
        clock = self.clock
        ends = [d for d in (None if timeout is None else clock.monotonic() + timeout,
                            statement_deadline) if d is not None]
        deadline = min(ends) if ends else None
        want = 1 if n is None else n
        while self.n_pending < want and not self.ended and not (notices and self.notices):
            if cancel.is_set():
                raise QueryCanceled("canceling statement due to user request")
            left = None if deadline is None else deadline - clock.monotonic()
            if left is not None and left <= 0:
                if deadline == statement_deadline:
                    raise QueryCanceled("canceling statement due to statement timeout")
                break
            self._changed.clear()
            mine = [asyncio.ensure_future(self._changed.wait()),
                    asyncio.ensure_future(cancel.wait())]
            if left is not None:
                mine.append(asyncio.ensure_future(clock.sleep(left)))
            await asyncio.wait(mine + ([closed] if closed is not None else []),
                               return_when=asyncio.FIRST_COMPLETED)
            for w in mine:
                w.cancel()
            if closed is not None and closed.done():
                raise ConnectionResetError("the client disconnected")
        if cancel.is_set():
            raise QueryCanceled("canceling statement due to user request")
        if self.n_pending == 0 and self.ended and self.error is not None:
            err, self.error = self.error, None
            raise err
        return self._pop(n)

    def _pop(self, n: int | None) -> pa.Table:
        """``n`` rows (None: those in memory, or the next spilled segment's), in order."""
        if n is None:
            self._read_back()
            n = sum(t.num_rows for t in self.pending)
        n = min(n, self.n_pending)
        parts, got = [], 0
        while got < n:
            if not self.pending:
                self._read_back()
            t = self.pending.popleft()
            if got + t.num_rows > n:
                k = n - got
                self.pending.appendleft(t.slice(k))     # holds the same buffers still
                t = t.slice(0, k)
            else:
                self.memory_bytes -= t.get_total_buffer_size()
            parts.append(t)
            got += t.num_rows
        self.n_pending -= got
        self.delivered += got
        if not parts:
            return self.schema.empty_table() if self.schema is not None else pa.table({})
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _read_back(self) -> None:
        """Memory is empty: the oldest spilled segment comes back into it."""
        if not self.pending and self.spill is not None and self.spill.rows:
            table = self.spill.read_next()
            self.pending.append(table)
            self.memory_bytes = table.get_total_buffer_size()

    @property
    def exhausted(self) -> bool:
        return self.ended and self.n_pending == 0
