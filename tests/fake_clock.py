"""A clock for tests of the gateway's timing: time moves only when a test says so, and sleepers
on it wake when it passes their end. Wall-clock time is a fixed epoch plus the monotonic time."""
from __future__ import annotations

import asyncio


class FakeClock:
    def __init__(self, start: float = 0.0, epoch: float = 1_700_000_000.0):
        self.t = start
        self.epoch = epoch
        self._sleepers: list = []

    def now(self) -> float:
        return self.epoch + self.t

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.t + seconds, wake))
        await wake

    def advance(self, seconds: float) -> None:
        self.t += seconds
        for end, wake in list(self._sleepers):
            if end <= self.t:
                self._sleepers.remove((end, wake))
                if not wake.done():
                    wake.set_result(None)
