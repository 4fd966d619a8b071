"""What one session is doing, as ``pg_stat_activity`` shows it: when it connected, its state
(active, idle, idle in transaction), its current or last statement and since when."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Activity:
    """One session's state for pg_stat_activity, changed as its statements start and end."""

    backend_start: float = field(default_factory=time.time)
    state: str = "idle"
    query: str = ""
    query_start: float | None = None
    state_change: float = field(default_factory=time.time)
    xact_start: float | None = None
    waits_on_stream: bool = False    # waiting for a continuous query's rows

    def started(self, query: str, waits_on_stream: bool) -> None:
        now = time.time()
        self.state, self.query, self.query_start = "active", query, now
        self.state_change, self.waits_on_stream = now, waits_on_stream
        if self.xact_start is None:
            self.xact_start = now

    def finished(self, state: str) -> None:
        self.state, self.state_change, self.waits_on_stream = state, time.time(), False
        if state == "idle":
            self.xact_start = None
