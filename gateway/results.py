"""What running a statement yields (rows in an Arrow table, or a command tag) and how a result
is turned into RowDescription / DataRow bytes, whole columns at a time."""
from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import deque
from dataclasses import dataclass, field

import pyarrow as pa

from .protocol import messages as M
from .protocol import types as T
from .protocol.errors import FeatureNotSupported, QueryCanceled


@dataclass(frozen=True)
class Field:
    name: str
    type_oid: int
    typmod: int = -1
    table_oid: int = 0
    attnum: int = 0

    @property
    def typlen(self) -> int:
        t = T.BY_OID.get(self.type_oid)
        return t.typlen if t else -1


@dataclass
class Rows:
    """A row-returning result, materialised; ``pos`` advances as a portal is fetched."""
    fields: list
    table: pa.Table
    tag: str = "SELECT"
    pos: int = 0

    @property
    def remaining(self) -> int:
        return self.table.num_rows - self.pos


class LiveRows:
    """A continuous query's result queue: batches arrive from the back end in valid_from order
    and leave through ``take``; ``finish`` marks the end (LIMIT reached, DROP, an error)."""

    def __init__(self, fields: list, schema: pa.Schema | None, qid: int, sql: str, owner: int,
                 name: str, link):
        self.fields, self.qid, self.sql, self.owner, self.name = fields, qid, sql, owner, name
        self.schema = schema
        self.link = link
        self.tag = "SELECT"
        self.started = time.time()
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
            self.link.live.pop(self.qid, None)

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
        ``statement_deadline`` (time.monotonic): statement_timeout's end; reached first, it
        ends the wait with 57014."""
        ends = [d for d in (None if timeout is None else time.monotonic() + timeout,
                            statement_deadline) if d is not None]
        deadline = min(ends) if ends else None
        want = 1 if n is None else n
        while self.n_pending < want and not self.ended and not (notices and self.notices):
            if cancel.is_set():
                raise QueryCanceled("canceling statement due to user request")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if deadline == statement_deadline:
                    raise QueryCanceled("canceling statement due to statement timeout")
                break
            self._changed.clear()
            waits = [asyncio.ensure_future(self._changed.wait()),
                     asyncio.ensure_future(cancel.wait())]
            if closed is not None:
                waits.append(closed)
            done, _ = await asyncio.wait(waits, timeout=left,
                                         return_when=asyncio.FIRST_COMPLETED)
            for w in waits[:2]:
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


@dataclass
class Done:
    tag: str
    notices: list = field(default_factory=list)


def row_description(fields: list, formats: list) -> bytes:
    return M.row_description(
        (f.name, f.table_oid, f.attnum, f.type_oid, f.typlen, f.typmod, formats[i])
        for i, f in enumerate(fields))


def resolve_formats(codes: tuple, n: int) -> list:
    """Bind's result-format codes: none = all text, one = all that, else one per column."""
    if not codes:
        return [0] * n
    if len(codes) == 1:
        return [codes[0]] * n
    if len(codes) != n:
        raise FeatureNotSupported(f"bind message has {len(codes)} result formats but query has "
                                  f"{n} columns")
    return list(codes)


def encode_rows(rows: Rows, limit: int, formats: list, tz: dt.tzinfo) -> tuple[bytes, int]:
    """DataRow messages for up to ``limit`` rows (0 = all) from ``rows.pos``; returns (bytes, n)."""
    n = rows.remaining if limit <= 0 else min(limit, rows.remaining)
    if n <= 0:
        return b"", 0
    chunk = rows.table.slice(rows.pos, n)
    rows.pos += n
    cols = []
    for i, f in enumerate(rows.fields):
        arr = chunk.column(i).combine_chunks() if chunk.column(i).num_chunks != 1 \
            else chunk.column(i).chunk(0)
        if formats[i] == 1 and T.binary_supported(f.type_oid):
            cols.append(T.binary_column(arr, f.type_oid))
        elif formats[i] == 1:
            raise FeatureNotSupported(
                f"binary output of type {f.type_oid} is not supported; ask for text")
        else:
            cols.append(T.text_column(arr, f.type_oid, tz))
    return M.data_rows(cols), n
