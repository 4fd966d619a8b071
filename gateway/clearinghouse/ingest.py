"""Stream data on its way to the back end, whatever the way in (INSERT, COPY, sources, ALTER
STREAM … ADVANCE TO): each stream's slack policy puts its tuples in event-time order, tuples
later than the slack allows are counted, logged (``cq_late_tuples``) and not delivered, idle
streams get heartbeats, and an ``ON OVERLOAD`` stream sheds load while the back end is behind.

Slack (``WITH (slack = …)``): ``none`` (the default) delivers at once and treats anything
earlier than the newest tuple as late; ``'5 seconds'`` is K-slack (a tuple waits until a tuple
K newer has arrived); ``adaptive`` is MP-K-slack (seed 003: K starts at 0 and grows to the
largest delay seen, D(x) = t_curr − x.ts). Each tuple is judged against the watermark as it
stood when it arrived: a source's lines and COPY rows one by one, an INSERT's rows together.

Data alone moves time forward in the back end (a row is emitted once its interval is final);
punctuation (``advance``) and heartbeats send a BOUNDARY, which splits open intervals (seed 000
Algorithm 6). A stream ``WITH (heartbeat = '1s')`` that has been idle that long (wall clock)
gets a BOUNDARY at its newest event time plus the idle time, and its slack buffer is released,
so a union or join with a busy stream does not stall.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dialect.intervals import interval_us
from executor import wire

from gateway.clearinghouse.ingest_log import IngestLog

HEARTBEAT_CHECK_S = 0.05      # how often idle streams are looked at


@dataclass
class StreamProgress:
    watermark: int | None = None      # µs: no tuple earlier than this will be delivered
    boundary: int | None = None       # µs: the last BOUNDARY sent to the back end
    current: int | None = None        # µs: the newest event time seen (t_curr)
    slack: int = 0                    # µs: K
    adaptive: bool = False
    heartbeat: int | None = None      # µs of wall clock, or None
    last_arrival: float = 0.0         # wall clock (s) of the last tuple
    held: pa.Table | None = None      # tuples waiting for the slack, in arrival order
    held_ts: np.ndarray | None = None  # their event times, µs
    ts_column: str = ""
    late: int = 0
    bad: int = 0                      # source lines that could not be read
    dropped: int = 0                  # tuples shed under ON OVERLOAD
    delivered: int = 0
    overload: str = "BLOCK"
    sample: float = 0.1               # the share KEEP SAMPLE keeps

    def configure(self, options: dict) -> None:
        slack = str(options.get("slack", "none")).lower()
        self.adaptive = slack == "adaptive"
        if not self.adaptive:
            self.slack = 0 if slack == "none" else interval_us(slack)
        hb = options.get("heartbeat")
        self.heartbeat = interval_us(hb) if hb else None
        self.overload = options.get("overload", "BLOCK")
        self.sample = float(options.get("sample", 0.1))


def micros(col) -> np.ndarray:
    """An event-time column as µs, in numpy."""
    return wire.micros(col).to_numpy(zero_copy_only=False)


NO_TIME = np.iinfo(np.int64).min


@dataclass(frozen=True)
class History:
    """An archived stream whose past a new query's windows reach into: the tuples newer than
    ``reach_us`` before the seam (``None``: all of them), or, for a fixed window, from
    ``since_us`` on, or, for a loop, from its first window's start when it starts at the
    seam (``edge``)."""
    stream: str                # relation name, as the back end knows it
    key: str                   # schema.name, as the archive knows it
    ts_column: str
    fragment: str | None
    reach_us: int | None = None
    since_us: int | None = None
    edge: object = None        # seam -> the earliest instant needed (a loop's first window)

    def after(self, seam: int | None) -> int | None:
        """The newest event time before the tuples needed (None: all of them)."""
        if self.edge is not None:
            first = self.edge(seam) if seam is not None else None
            return None if first is None else first - 1
        if self.since_us is not None:
            return self.since_us - 1
        if self.reach_us is None or seam is None:
            return None
        return seam - self.reach_us


def _watermarks(p: StreamProgress, ts: np.ndarray, one_by_one: bool):
    """The watermark each tuple meets on arrival (a tuple earlier than its watermark is
    late); sets ``p.slack`` to K after them (MP-K-slack: K grows to the largest delay seen,
    late tuples' too, D(x) = t_curr − x.ts)."""
    seen = np.maximum.accumulate(ts)               # t_curr after each tuple
    if p.current is not None:
        seen = np.maximum(seen, p.current)
    k = np.maximum.accumulate(np.maximum(seen - ts, p.slack)) if p.adaptive else \
        np.full(len(ts), p.slack)
    p.slack = int(k[-1])
    start = NO_TIME if p.watermark is None else p.watermark
    if not one_by_one:
        return start
    bound = seen - k                               # the release bound after each tuple
    before = np.concatenate([[start], bound[:-1]])
    return np.maximum.accumulate(np.maximum(before, start))


class Ingest:
    def __init__(self, link, archive=None, pool=None):
        self.link = link
        self.archive = archive            # gateway/archive.py, for TYPE ARCHIVED streams
        self.pool = pool                  # threads for the archive's file writes
        self.log = IngestLog()
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
            floor = max((x for x in (p.current, p.watermark) if x is not None), default=None)
            if len(ts) and (floor is None or ts[0] >= floor) and \
                    (len(ts) < 2 or (ts[1:] >= ts[:-1]).all()):
                # in order and none earlier than what came before: nothing is late and no
                # delay grows the slack, whatever the policy (the common case, made cheap)
                late = 0
            else:
                watermark = _watermarks(p, ts, one_by_one)
                keep = ts >= watermark
                late = int((~keep).sum())
            if late:
                self.log.late_tuples(name, origin, table.filter(pa.array(~keep)), ts[~keep],
                                     np.broadcast_to(watermark, ts.shape)[~keep])
                table, ts = table.filter(pa.array(keep)), ts[keep]
            p.late += late
            if len(ts) and p.overload != "BLOCK" and self.link.behind():
                table, ts = self._shed(name, p, table, ts)
            if len(ts):
                p.current = int(max(ts.max(), p.current if p.current is not None else ts.max()))
                p.last_arrival = time.monotonic()
                p.held = table if p.held is None else pa.concat_tables(
                    [p.held, table], promote_options="default")
                p.held_ts = ts if p.held_ts is None else np.concatenate([p.held_ts, ts])
            await self._release(name, p, p.current - p.slack if p.current is not None else None)
            return len(ts), late

    def _shed(self, name: str, p: StreamProgress, table: pa.Table, ts: np.ndarray):
        """ON OVERLOAD: the back end is behind, so this batch is shed. DROP keeps nothing
        and counts it; KEEP COUNTS also logs how many tuples each event-time second lost
        (``cq_shed``); KEEP SAMPLE delivers an even sample (``sample``, default 10 %) and logs
        the counts, so a query can scale its answers up."""
        keep = np.zeros(len(ts), bool)
        if p.overload == "KEEP SAMPLE":
            seen = p.dropped + p.delivered     # spread the sample evenly across batches
            keep = np.floor((seen + np.arange(1, len(ts) + 1)) * p.sample) > \
                np.floor((seen + np.arange(len(ts))) * p.sample)
        if p.overload != "DROP":
            self.log.shed_tuples(name, p.overload, ts, keep)
        p.dropped += int((~keep).sum())
        return table.filter(pa.array(keep)), ts[keep]

    async def _release(self, name: str, p: StreamProgress, bound: int | None,
                       boundary: bool = False) -> None:
        """Deliver the held tuples earlier than or at ``bound``, in event-time order; later
        tuples than ``bound`` stay, earlier ones will be late from now on."""
        if bound is None:
            return
        out = None
        if p.held is not None and p.held.num_rows:
            held, ts = p.held, p.held_ts
            if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():      # sort only when out of order
                order = np.argsort(ts, kind="stable")
                held, ts = held.take(pa.array(order)), ts[order]
            k = int(np.searchsorted(ts, bound, side="right"))
            out, rest = held.slice(0, k), held.slice(k)
            p.held, p.held_ts = (rest, ts[k:]) if rest.num_rows else (None, None)
        p.watermark = bound if p.watermark is None else max(p.watermark, bound)
        if out is not None and out.num_rows:
            p.delivered += out.num_rows
            await self.link.send_data(name, out, p.current, wait=p.overload == "BLOCK")
        if boundary and (p.boundary is None or bound > p.boundary):
            p.boundary = bound
            await self.link.watermark(name, bound)

    async def start_primed(self, histories: list, start):
        """Start a query whose windows reach into archived streams' past: while no stream data
        moves, read each stream's history up to its watermark (the seam: what the back end
        has been given, which the archive holds, late tuples too) and ``await start(history,
        seam)``, which registers the query; live data after the seam follows it."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            history, seams = {}, []
            for stream in {h.stream.lower() for h in histories}:
                mine = [h for h in histories if h.stream.lower() == stream]
                p = self.streams.get(stream)
                seam = p.watermark if p is not None else None
                afters = [h.after(seam) for h in mine]       # the widest reach of them all
                after = None if None in afters else min(afters)
                h = mine[0]
                table = await loop.run_in_executor(self.pool, self.archive.read, h.key,
                                                   h.ts_column, after, seam, h.fragment)
                if table is not None:
                    history[stream] = table
                    top = int(micros(table.column(h.ts_column).combine_chunks())[-1])
                    seams.append(seam if seam is not None else top)
            return await start(history, max(seams) if seams else NO_TIME)

    async def advance(self, name: str, ts: int) -> None:
        """Punctuation: no tuple earlier than ``ts`` will follow."""
        async with self._lock:
            p = self.progress(name)
            await self._release(name, p, ts, boundary=True)

    async def heartbeats(self) -> None:
        """Forever: a BOUNDARY for each stream idle longer than its heartbeat interval."""
        while True:
            await asyncio.sleep(HEARTBEAT_CHECK_S)
            now = time.monotonic()
            for name, p in list(self.streams.items()):
                if p.heartbeat is None or p.current is None:
                    continue
                idle = int((now - p.last_arrival) * 1_000_000)
                if idle >= p.heartbeat:
                    async with self._lock:
                        await self._release(name, p, p.current + idle, boundary=True)

    def forget(self, name: str) -> None:
        self.streams.pop(name.lower(), None)
        self.log.forget(name)
