"""Stream data that arrives through SQL (INSERT, COPY, ALTER STREAM … ADVANCE TO) on its way
to the back end: sorted by event time, tuples earlier than the stream's watermark counted as
late and held back, the watermark moved to the latest timestamp seen.

Data alone moves time forward in the back end (a row is emitted once its interval is final);
only punctuation (``advance``) and, later, idle heartbeats send a BOUNDARY, which splits open
intervals (seed 000 Algorithm 6) — so results are not cut into pieces at every INSERT.

A stream without slack promises its tuples in order; the clearinghouse (slack, heartbeats,
sources on the ingest port) builds on this.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class StreamProgress:
    watermark: int | None = None      # µs: no tuple earlier than this will be delivered
    boundary: int | None = None       # µs: the last BOUNDARY sent to the back end
    late: int = 0
    delivered: int = 0


def micros(col) -> np.ndarray:
    """An event-time column as µs (TIMESTAMP of any unit or time zone, or an integer)."""
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.timestamp("us", tz=col.type.tz))
    return pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)


class Ingest:
    def __init__(self, link):
        self.link = link
        self.streams: dict = {}           # relation name (lower) -> StreamProgress
        self._lock = asyncio.Lock()

    def progress(self, name: str) -> StreamProgress:
        return self.streams.setdefault(name.lower(), StreamProgress())

    async def push(self, name: str, ts_column: str, table: pa.Table) -> tuple[int, int]:
        """Deliver ``table`` to the back end in event-time order; returns (delivered, late)."""
        async with self._lock:
            p = self.progress(name)
            if table.num_rows == 0:
                return 0, 0
            nulls = table.column(ts_column).null_count
            if nulls:
                raise ValueError(f"{nulls} row(s) have no event time")
            table = table.sort_by([(ts_column, "ascending")])
            ts = micros(table.column(ts_column).combine_chunks())
            late = 0
            if p.watermark is not None:
                keep = ts >= p.watermark
                late = int((~keep).sum())
                if late:
                    table, ts = table.filter(pa.array(keep)), ts[keep]
            if table.num_rows:
                p.watermark = max(p.watermark or int(ts[-1]), int(ts[-1]))
            p.late += late
            p.delivered += table.num_rows
            await self.link.send_data(name, table, p.watermark)
            return table.num_rows, late

    async def advance(self, name: str, ts: int) -> None:
        """Punctuation: no tuple earlier than ``ts`` will follow."""
        async with self._lock:
            p = self.progress(name)
            if p.boundary is None or ts > p.boundary:
                p.boundary = ts
                p.watermark = max(p.watermark if p.watermark is not None else ts, ts)
                await self.link.watermark(name, ts)

    def forget(self, name: str) -> None:
        self.streams.pop(name.lower(), None)
