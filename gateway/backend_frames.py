"""Frames from the back end (``executor/wire.py``), received in place: each whole frame is handed
to ``on_frame(kind, payload)`` on the loop as soon as it is in, and ``on_lost()`` is called once
the connection ends.

asyncio's StreamReader copies every received piece into its buffer and again out of it; result
rows of a busy query are megabytes a second. Here the socket is read into a buffer directly,
and a payload of ``BIG`` bytes or more gets a buffer of its own, received into and then never
written again, so Arrow reads the rows where they lie.
"""
from __future__ import annotations

import asyncio

from executor.wire import HEADER_SIZE, header

RECV = 1 << 20            # the buffer small frames are received into
BIG = 1 << 16             # payloads from this size get a buffer of their own (BIG < RECV / 4)


class BackendFrames(asyncio.BufferedProtocol):
    def __init__(self, on_frame, on_lost):
        self.on_frame, self.on_lost = on_frame, on_lost
        self.buf = bytearray(RECV)
        self.pos = self.end = 0               # unread bytes: buf[pos:end]
        self.big: list | None = None          # [kind, payload, bytes received] of a BIG frame
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.big is not None:
            _, payload, got = self.big
            return memoryview(payload)[got:]
        if self.pos == self.end:
            self.pos = self.end = 0
        elif len(self.buf) - self.end < RECV // 4:     # the unread bytes to the front
            self.buf[:self.end - self.pos] = self.buf[self.pos:self.end]
            self.end -= self.pos
            self.pos = 0
        return memoryview(self.buf)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.big is not None:
            self.big[2] += nbytes
        else:
            self.end += nbytes
        while (frame := self._next()) is not None:
            self.on_frame(*frame)

    def _next(self) -> tuple | None:
        """The next whole frame (kind, payload), or None until more has come."""
        if self.big is not None:
            kind, payload, got = self.big
            if got < len(payload):
                return None
            self.big = None
            return kind, payload
        if self.end - self.pos < HEADER_SIZE:
            return None
        kind, length = header(bytes(self.buf[self.pos:self.pos + HEADER_SIZE]))
        start = self.pos + HEADER_SIZE
        if length >= BIG:
            payload = bytearray(length)
            have = min(length, self.end - start)
            payload[:have] = memoryview(self.buf)[start:start + have]
            self.pos = start + have
            self.big = [kind, payload, have]
            return self._next()
        if self.end - start < length:
            return None
        self.pos = start + length
        with memoryview(self.buf) as view:
            return kind, bytes(view[start:start + length])

    def eof_received(self) -> bool:
        return False                          # the transport closes; connection_lost follows

    def connection_lost(self, exc) -> None:
        self.on_lost()
