"""A continuous query's result queue in the gateway: the back-end link puts Arrow batches in, in
valid_from order; FETCH, portals and COPY take rows out, waiting with timeouts, cancels and
statement_timeout, on an injected clock (the system's by default)."""
from __future__ import annotations

import asyncio
from collections import deque

import pyarrow as pa

from gateway.clock import SYSTEM, Clock
from gateway.pgwire.errors import QueryCanceled


class LiveRows:
    """A continuous query's result queue: batches arrive from the back end in valid_from order
    and leave through ``take``; ``finish`` marks the end (LIMIT reached, DROP, an error)."""

    def __init__(self, fields: list, schema: pa.Schema | None, qid: int, sql: str, owner: int,
                 name: str, link, clock: Clock = SYSTEM):
        self.fields, self.qid, self.sql, self.owner, self.name = fields, qid, sql, owner, name
        self.schema = schema
        self.link = link
        self.clock = clock
        self.tag = "SELECT"
        self.started = clock.now()
        self.pending: deque = deque()
        self.n_pending = 0
        self.delivered = 0
        self.ended = False
        self.error = None
        self.failure: str | None = None   # why the back end stopped it
        self.streams: set = set()         # the streams and named relations it reads
        self.notices: list = []           # (severity, sqlstate, message) for its next FETCH
        self._changed = asyncio.Event()

    # called by the back-end link, on the server's loop
    def put(self, table: pa.Table) -> None:
        if table.num_rows and not self.ended:
            if self.schema is not None and table.schema != self.schema:
                table = table.cast(self.schema)
            self.pending.append(table)
            self.n_pending += table.num_rows
            self._changed.set()

    def finish(self, error=None) -> None:
        if not self.ended:
            self.ended, self.error = True, error
            self._changed.set()

    def close(self) -> None:
        """The cursor is gone: end the query in the back end and free its state."""
        if not self.ended:
            self.finish()
            self.link.drop(self.qid)
        else:
            self.link.forget(self.qid)

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
        return self._pop(self.n_pending if n is None else min(n, self.n_pending))

    def _pop(self, n: int) -> pa.Table:
        parts, got = [], 0
        while got < n:
            t = self.pending.popleft()
            if got + t.num_rows > n:
                k = n - got
                self.pending.appendleft(t.slice(k))
                t = t.slice(0, k)
            parts.append(t)
            got += t.num_rows
        self.n_pending -= got
        self.delivered += got
        if not parts:
            return self.schema.empty_table() if self.schema is not None else pa.table({})
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    @property
    def exhausted(self) -> bool:
        return self.ended and self.n_pending == 0
