"""The time the gateway reads, injected wherever it is read so that tests can drive it:
``now()`` is wall-clock seconds since the epoch, ``monotonic()`` seconds for measuring intervals,
and ``sleep(s)`` waits until ``s`` seconds of monotonic time have passed."""
from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clocks and the event loop's timers."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM = SystemClock()
