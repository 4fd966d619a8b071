"""Heartbeats for idle streams, as pure code: a stream ``WITH (heartbeat = '1s')`` that has had
no tuple for that long at ``now_s`` (monotonic seconds) is due a BOUNDARY at its newest event
time plus the idle time, so a union or join with a busy stream does not stall."""
from __future__ import annotations

from typing import Iterator

CHECK_S = 0.05      # how often idle streams are looked at


def idle_us(p, now_s: float) -> int | None:
    """How long (µs) stream state ``p`` has been idle at ``now_s`` when a heartbeat is due;
    None when it has no heartbeat, no tuple yet, or has not been idle long enough."""
    if p.heartbeat is None or p.current is None:
        return None
    idle = int((now_s - p.last_arrival) * 1_000_000)
    return idle if idle >= p.heartbeat else None


def due(streams: dict, now_s: float) -> Iterator[tuple[str, object, int]]:
    """(name, state, idle µs) of each stream due a heartbeat at ``now_s``, looked at lazily:
    a stream that a tuple reaches while an earlier one's BOUNDARY is sent is no longer idle."""
    for name, p in list(streams.items()):
        idle = idle_us(p, now_s)
        if idle is not None:
            yield name, p, idle


def boundary_at(p, idle: int) -> int:
    """The event time of an idle stream's BOUNDARY: its newest tuple's plus the idle time."""
    return p.current + idle
