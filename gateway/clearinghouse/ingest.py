"""Stream data on its way to the back end, whatever the way in (INSERT, COPY, sources, ALTER
STREAM … ADVANCE TO): the asyncio driver that asks each stream's policies (``slack``,
``heartbeats``, ``shedding``) with the injected clock's time and does the I/O they decide on."""
from __future__ import annotations

import asyncio

import pyarrow as pa

from gateway.archive import priming
from gateway.clearinghouse import heartbeats, shedding, slack
from gateway.clock import SYSTEM, Clock
from gateway.clearinghouse.ingest_log import IngestLog
from gateway.clearinghouse.slack import StreamProgress, micros


class Ingest:
    def __init__(self, link, archive=None, pool=None, clock: Clock = SYSTEM):
        self.link = link
        self.archive = archive            # gateway/archive/storage.py: TYPE ARCHIVED streams
        self.pool = pool                  # threads for the archive's file writes
        self.clock = clock
        self.log = IngestLog(clock)
        self.streams: dict = {}           # relation name (lower) -> StreamProgress
        self._lock = asyncio.Lock()

    def progress(self, name: str) -> StreamProgress:
        return self.streams.setdefault(name.lower(), StreamProgress())

    def resume(self, name: str, ts: int) -> None:
        """After a restart, an archived stream goes on from its archive's newest event time:
        an earlier tuple is late, and the seam of a query reaching back is there."""
        p = self.progress(name)
        p.watermark = p.current = ts

    async def push(self, name: str, ts_column: str, table: pa.Table,
                   options: dict | None = None, origin: str = "INSERT",
                   one_by_one: bool = False, archive: str | None = None) -> tuple[int, int]:
        """Take ``table`` in; deliver what the slack releases. Returns (accepted, late).
        ``origin`` says where the tuples came from, for the late-tuple log; ``one_by_one``:
        the rows arrived in this order, each judged against those before it (a source's
        lines, COPY), not together (one INSERT). ``archive``: the stream's key when it is
        archived: every tuple, late or not, is on disk before this returns."""
        async with self._lock:
            p = self.progress(name)
            p.configure(options or {})
            p.ts_column = ts_column
            if table.num_rows == 0:
                return 0, 0
            nulls = table.column(ts_column).null_count
            if nulls:
                raise ValueError(f"{nulls} row(s) have no event time")
            if archive is not None and self.archive is not None:
                await asyncio.get_running_loop().run_in_executor(
                    self.pool, self.archive.append, archive, ts_column,
                    (options or {}).get("fragment"), table)
            ts = micros(table.column(ts_column).combine_chunks())       # arrival order
            table, ts, late = slack.judge(p, table, ts, one_by_one)
            if late is not None:
                self.log.late_tuples(name, origin, late.table, late.ts, late.watermarks)
            if len(ts) and not shedding.blocks(p.overload) and self.link.behind():
                table, ts = self._shed(name, p, table, ts)
            slack.hold(p, table, ts, self.clock.monotonic())
            await self._release(name, p, slack.slack_bound(p))
            return len(ts), 0 if late is None else late.table.num_rows

    def _shed(self, name: str, p: StreamProgress, table: pa.Table, ts):
        """The back end is behind: the batch goes through the stream's ON OVERLOAD policy."""
        keep = shedding.kept(p.overload, len(ts), p.dropped + p.delivered, p.sample)
        if shedding.counted(p.overload):
            self.log.shed_tuples(name, p.overload, ts, keep)
        p.dropped += int((~keep).sum())
        return table.filter(pa.array(keep)), ts[keep]

    async def _release(self, name: str, p: StreamProgress, bound: int | None,
                       boundary: bool = False) -> None:
        """Send what the slack releases up to ``bound`` and, for punctuation and heartbeats,
        a BOUNDARY there: data alone moves time forward in the back end, a BOUNDARY also
        splits open intervals (seed 000 Algorithm 6), so a quiet stream's answers still come."""
        if bound is None:
            return
        out = slack.release(p, bound)
        if out is not None:
            await self.link.send_data(name, out, p.current, wait=shedding.blocks(p.overload))
        if boundary and slack.new_boundary(p, bound):
            await self.link.watermark(name, bound)

    async def start_primed(self, histories: list, start):
        """Start a query whose windows reach into archived streams' past (``priming``), while
        no stream data moves, so the seams stay where they were read."""
        async with self._lock:
            return await priming.start_primed(self.archive, self.pool, self._seam, histories,
                                              start)

    def _seam(self, stream: str) -> int | None:
        p = self.streams.get(stream)
        return p.watermark if p is not None else None

    async def advance(self, name: str, ts: int) -> None:
        """Punctuation: no tuple earlier than ``ts`` will follow."""
        async with self._lock:
            p = self.progress(name)
            await self._release(name, p, ts, boundary=True)

    async def heartbeats(self) -> None:
        """Forever: a BOUNDARY for each stream idle longer than its heartbeat interval."""
        while True:
            await self.clock.sleep(heartbeats.CHECK_S)
            for name, p, idle in heartbeats.due(self.streams, self.clock.monotonic()):
                async with self._lock:
                    await self._release(name, p, heartbeats.boundary_at(p, idle),
                                        boundary=True)

    def forget(self, name: str) -> None:
        self.streams.pop(name.lower(), None)
        self.log.forget(name)
