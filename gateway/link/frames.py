"""Frames from the back end (``executor/wire.py``), received in place: each whole frame is handed
to ``on_frame(kind, payload)`` on the loop as soon as it is in, and ``on_lost()`` is called once
the connection ends.

asyncio's StreamReader copies every received piece into its buffer and again out of it; result
rows of a busy query are megabytes a second. Here asyncio receives straight into a
``wire.FrameBuffer``, which gives a big payload a buffer of its own, so Arrow reads the rows
where they lie.
"""
from __future__ import annotations

import asyncio

from executor.wire import FrameBuffer


class BackendFrames(asyncio.BufferedProtocol):
    def __init__(self, on_frame, on_lost):
        self.on_frame, self.on_lost = on_frame, on_lost
        self.frames = FrameBuffer()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.target()

    def buffer_updated(self, nbytes: int) -> None:
        self.frames.received(nbytes)
        while (frame := self.frames.next_frame()) is not None:
            self.on_frame(*frame)

    def eof_received(self) -> bool:
        return False                          # the transport closes; connection_lost follows

    def connection_lost(self, exc) -> None:
        self.on_lost()
