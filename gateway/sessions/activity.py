"""What one session is doing, as ``pg_stat_activity`` shows it: when it connected, its state
(active, idle, idle in transaction), its current or last statement and since when."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from gateway.clock import SYSTEM


@dataclass
class Activity:
    """One session's state for pg_stat_activity, changed as its statements start and end;
    times are the server clock's (``now``)."""

    now: Callable[[], float] = SYSTEM.now
    backend_start: float = 0.0
    state: str = "idle"
    query: str = ""
    query_start: float | None = None
    state_change: float = 0.0
    xact_start: float | None = None
    waits_on_stream: bool = False    # waiting for a continuous query's rows

    def __post_init__(self):
        self.backend_start = self.state_change = self.now()

    def started(self, query: str, waits_on_stream: bool) -> None:
        now = self.now()
        self.state, self.query, self.query_start = "active", query, now
        self.state_change, self.waits_on_stream = now, waits_on_stream
        if self.xact_start is None:
            self.xact_start = now

    def finished(self, state: str) -> None:
        self.state, self.state_change, self.waits_on_stream = state, self.now(), False
        if state == "idle":
            self.xact_start = None
