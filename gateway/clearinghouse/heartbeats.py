"""Heartbeats, as pure code: when a stream's BOUNDARY is due (splitting open intervals at the
watermark, at most once a heartbeat period) and how far a quiet stream's watermark moves with
the wall clock. Times are arguments; nothing here waits."""
from __future__ import annotations

from typing import Iterator

CHECK_S = 0.05      # how often streams are looked at


def idle_us(p, now_s: float) -> int | None:
    """How long (µs) stream state ``p`` has been quiet at ``now_s`` when its watermark should
    move on with the wall clock: after each whole heartbeat period of quiet. None when it
    does not follow the wall clock (a replay of history, or ``heartbeat = 'none'``), has no
    tuple yet, or is not due another move."""
    if not (p.wall_clock and p.follows_wall) or p.current is None:
        return None
    idle = int((now_s - p.last_arrival) * 1_000_000)
    return idle if idle >= p.heartbeat * (p.quiet_moves + 1) else None


def quiet(streams: dict, now_s: float) -> Iterator[tuple[str, object, int]]:
    """(name, state, idle µs) of each quiet stream whose watermark moves with the wall clock,
    looked at lazily: a stream a tuple reaches meanwhile is no longer quiet."""
    for name, p in list(streams.items()):
        idle = idle_us(p, now_s)
        if idle is not None:
            yield name, p, idle


def wall_bound(p, idle: int) -> int:
    """Where a quiet stream's watermark goes: its newest tuple's event time plus the quiet
    time, so a source that lags the wall clock keeps its lag. The move is counted."""
    p.quiet_moves += 1
    return p.current + idle
