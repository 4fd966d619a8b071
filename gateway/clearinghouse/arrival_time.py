"""Arrival time, as pure code: the instant a stream's batch reached the server, which stamps it
for the queries that read the stream by arrival time (``[… ON ARRIVAL]``), and when that time
moves on without data (a BOUNDARY each heartbeat period, so their windows close with the wall
clock). Stamps of one stream only grow: each is later than every stamp and BOUNDARY before it.
Times are arguments; nothing here waits."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from executor import plan as P


def stamp(p, now_s: float) -> int:
    """The arrival time (µs) of a batch of stream state ``p`` reaching the server at
    ``now_s`` (wall clock, s): the wall clock, unless it stepped back."""
    p.proctime = max(int(now_s * 1_000_000), p.proctime + 1)
    return p.proctime


def stamped(table: pa.Table, at: int) -> pa.Table:
    """``table`` with its arrival time in PROCTIME_COLUMN."""
    return table.append_column(P.PROCTIME_COLUMN, pa.array(
        np.full(table.num_rows, at, dtype="datetime64[us]"), pa.timestamp("us")))


def beat(p, now_s: float, monotonic_s: float) -> int | None:
    """The BOUNDARY (µs) that moves the arrival time of ``p`` on with the wall clock when a
    heartbeat period has passed since the last one; None when none is due."""
    if monotonic_s - p.proctime_beat < p.heartbeat / 1_000_000:
        return None
    p.proctime_beat = monotonic_s
    return stamp(p, now_s)
