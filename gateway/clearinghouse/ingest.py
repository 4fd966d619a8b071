"""Stream data on its way to the back end, whatever the way in (INSERT, COPY, sources, ALTER
STREAM … ADVANCE TO): the asyncio driver that asks each stream's policies (``slack``,
``heartbeats``, ``shedding``) with the injected clock's time and does the I/O they decide on."""
from __future__ import annotations

import asyncio

import pyarrow as pa

from executor import plan as P

from gateway.clearinghouse import arrival_time, heartbeats, shedding, slack
from gateway.clock import SYSTEM, Clock
from gateway.clearinghouse.ingest_log import IngestLog
from gateway.clearinghouse.slack import StreamProgress, micros


class Ingest:
    def __init__(self, link, archive=None, pool=None, clock: Clock = SYSTEM, spools=None):
        self.link = link
        self.spools = spools              # spool.Spools: streams engines outside the back end read
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
            if self.link.reads_arrivals(name):      # QJoin: every tuple, as it came
                await self.link.send_data(name + P.ARRIVAL, table, None)
            if self.link.reads_by_arrival_time(name):   # [… ON ARRIVAL]: stamped as it came
                await self.link.send_data(name + P.PROCTIME, arrival_time.stamped(
                    table, arrival_time.stamp(p, self.clock.now())), None)
            ts = micros(table.column(ts_column).combine_chunks())       # arrival order
            table, ts, late = slack.judge(p, table, ts, one_by_one)
            if late is not None:
                self.log.late_tuples(name, origin, late.table, late.ts, late.watermarks)
            if len(ts) and not shedding.blocks(p.overload) and self.link.behind():
                table, ts = self._shed(name, p, table, ts)
            slack.hold(p, table, ts, self.clock.monotonic(), self.clock.now())
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
                       at_once: bool = False, asked: bool = False) -> None:
        """Send what the slack releases up to ``bound``, then a BOUNDARY at the watermark if one
        is due: data alone moves time forward in the back end, a BOUNDARY also splits open
        intervals (seed 000 Algorithm 6), so answers that stop changing still come."""
        if bound is None:
            return
        out = slack.release(p, bound)
        if out is not None:
            await self.link.send_data(name, out, p.current, wait=shedding.blocks(p.overload))
        if self.spools is not None and self.spools.tapped(name):
            await asyncio.get_running_loop().run_in_executor(
                self.pool, self.spools.release, name, out, p.watermark)
        await self._split(name, p, at_once, asked)

    async def _split(self, name: str, p: StreamProgress, at_once: bool = False,
                     asked: bool = False) -> None:
        """A BOUNDARY at the watermark if one is due. Only one a statement ``asked`` for
        (punctuation) waits for a back end that is behind; any other stays due until it has
        caught up, so a stopped back end never holds the clearinghouse up."""
        if not asked and self.link.behind():
            return
        bound = slack.boundary_due(p, self.clock.monotonic(), at_once=at_once)
        if bound is not None:
            await self.link.watermark(name, bound, wait=asked)

    async def while_still(self, work):
        """``await work(seam_of)`` while no stream data moves, so each stream's seam
        (``seam_of(stream)``: its watermark, or None) stays where it was read: a query primed
        from the archive (gateway/archive/priming.py) starts there."""
        async with self._lock:
            return await work(self.seam)

    def seam(self, stream: str) -> int | None:
        p = self.streams.get(stream)
        return p.watermark if p is not None else None

    async def advance(self, name: str, ts: int) -> None:
        """Punctuation: no tuple earlier than ``ts`` will follow. Asked for by a statement,
        its BOUNDARY goes at once, whenever the last one went."""
        async with self._lock:
            p = self.progress(name)
            await self._release(name, p, ts, at_once=True, asked=True)

    async def move(self, name: str, ts: int) -> None:
        """A source's word that no tuple earlier than ``ts`` will follow, taken as data's
        is: the watermark moves now, its BOUNDARY when one is due (once a heartbeat period),
        so a source that says so often does not split open intervals as often."""
        async with self._lock:
            await self._release(name, self.progress(name), ts)

    async def heartbeats(self) -> None:
        """Forever: every ``CHECK_S``, a ``tick``."""
        while True:
            await self.clock.sleep(heartbeats.CHECK_S)
            await self.tick()

    async def tick(self) -> None:
        """Quiet streams that follow the wall clock move their watermark on with it, once each
        heartbeat period of quiet, and split there; every other stream whose watermark moved
        since its last BOUNDARY gets one when a period has passed since that."""
        now = self.clock.monotonic()
        for name, p, idle in heartbeats.quiet(self.streams, now):
            async with self._lock:
                await self._release(name, p, heartbeats.wall_bound(p, idle), at_once=True)
        for name, p in list(self.streams.items()):
            if slack.moved(p):             # looked at without the lock: most have not
                async with self._lock:
                    await self._split(name, p)
        for name in self.link.read_by_arrival_time():     # their time is the wall clock's
            async with self._lock:
                at = arrival_time.beat(self.progress(name), self.clock.now(), now)
                if at is not None:
                    await self.link.watermark(name + P.PROCTIME, at, wait=False)

    def forget(self, name: str) -> None:
        self.streams.pop(name.lower(), None)
        self.log.forget(name)
