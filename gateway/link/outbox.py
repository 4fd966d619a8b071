"""Frames to the back end, sent by a thread of their own: ``write`` queues bytes or Arrow buffers
(in order, from any thread) without copying them, and ``drain`` waits while more than the high
water mark is queued.

The event loop's transport would copy each frame into its buffer and move what is left after
every partial send; for the megabytes a second of stream data takes, that copying was a good
share of the gateway's time. Here the thread hands each buffer to the kernel as it is, waiting
for the socket in ``select`` (the socket stays non-blocking: the loop still reads from it).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import select
import socket
import threading

from executor.wire import send_some

log = logging.getLogger("cqgate")


class Outbox:
    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, high: int):
        self.sock, self.loop, self.high = sock, loop, high
        self.queue: collections.deque = collections.deque()
        self.queued = 0                     # bytes written and not yet sent
        self.lost = False                   # the back end stopped reading
        self._wake = threading.Condition()
        self._room = asyncio.Event()        # set while at most ``high`` bytes are queued
        self._room.set()
        self._closing = False
        self._busy = False                  # the thread is sending a frame
        self._thread = threading.Thread(target=self._send_all, name="backend-outbox",
                                        daemon=True)
        self._thread.start()

    def write(self, data) -> None:
        """Queue ``data``: bytes, or a list of bytes-like parts sent one after another."""
        parts = [memoryview(p).cast("B") for p in (data if isinstance(data, list) else [data])]
        with self._wake:
            if self.lost or self._closing:
                return
            if not self.queue and not self._busy:
                # nothing in flight: what the socket takes now goes at once, without waking
                # the thread (which would wait for the GIL: latency at low rates)
                parts = self._send_now(parts)
                if not parts:
                    return
            size = sum(len(p) for p in parts)
            self.queue.append(parts)
            self.queued += size
            if self.queued > self.high:
                self._loop_call(self._room.clear)
            self._wake.notify()

    def _send_now(self, parts: list) -> list:
        """Send without waiting; the parts (or part of one) the socket did not take."""
        try:
            return send_some(self.sock, parts)
        except (BlockingIOError, InterruptedError):
            return parts
        except OSError:
            return parts                         # the thread finds the link lost

    def get_write_buffer_size(self) -> int:
        return self.queued

    async def drain(self) -> None:
        """Wait while more than the high water mark is queued (never when the back end is
        gone: its reader notices and restarts it)."""
        while self.queued > self.high and not self.lost:
            self._room.clear()
            if self.queued <= self.high or self.lost:    # the thread may have just sent it
                break
            await self._room.wait()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()

    def _loop_call(self, fn) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            fn()
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn)

    def _send_all(self) -> None:
        while True:
            with self._wake:
                while not self.queue and not self._closing:
                    self._wake.wait()
                if not self.queue:
                    return
                parts = self.queue.popleft()
                self._busy = True
            size = sum(len(p) for p in parts)
            try:
                self._send(parts)
            except OSError as e:
                log.debug("back end link: %s", e)
                with self._wake:
                    self.lost = True
                    self.queue.clear()
                    self.queued = 0
                self._loop_call(self._room.set)
                return
            with self._wake:
                self.queued -= size
                self._busy = False
                room = self.queued <= self.high
            if room and not self._room.is_set():     # a wake-up only for a waiting drain
                self._loop_call(self._room.set)

    def _send(self, parts: list) -> None:
        """All of ``parts``, gathered into as few system calls as the socket allows."""
        while parts:
            try:
                parts = send_some(self.sock, parts)
            except (BlockingIOError, InterruptedError):
                select.select([], [self.sock], [], 1.0)

