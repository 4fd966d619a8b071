"""A source connection's bytes, received straight into one buffer and handed out as whole lines:
``readline()`` for the head line, then ``read_lines(n)`` for up to ``n`` bytes of whole lines
(or ``read_some(n)``, bytes as they come, for a source that sends no lines).

asyncio's StreamReader copies every received piece into its buffer and again out of it; at a
source's hundreds of megabytes a minute that copying was a good share of the gateway's loop.
Here the socket is read into the buffer itself (``BufferedProtocol``), and the lines leave it
in one copy. Reading pauses while ``high`` bytes wait, so a fast source waits for the server.
"""
from __future__ import annotations

import asyncio

LINGER_S = 2.0          # how long an erring source may go on sending before the close
RECV = 1 << 18            # room offered to each receive


class LineTooLong(Exception):
    pass


class SourceStream(asyncio.BufferedProtocol):
    def __init__(self, handler, high: int, tasks: set):
        self.handler, self.high, self.tasks = handler, high, tasks
        self.buf = bytearray(RECV)
        self.pos = self.end = 0               # unread bytes: buf[pos:end]
        self.eof = False
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self._more = asyncio.Event()

    # ------------------------------------------------------------------ protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        task = asyncio.get_running_loop().create_task(self.handler(self))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.pos == self.end:
            self.pos = self.end = 0
        if len(self.buf) - self.end < RECV:
            n = self.end - self.pos
            if self.pos and n <= self.pos:
                # the unread bytes to the front, in place, only when no more of them move
                # than were taken since the last move: each byte is moved at most once. (Up to
                # ``high`` bytes wait unread; moving them all for each receive's room copied
                # every byte many times over.)
                view = memoryview(self.buf)
                view[:n] = view[self.pos:self.end]
                view.release()
                self.pos, self.end = 0, n
            if len(self.buf) - self.end < RECV:
                # grown by half at least, so growing costs a copy a byte at most too; reading
                # pauses at ``high``, which bounds it
                self.buf.extend(bytes(max(RECV, len(self.buf) // 2)))
        return memoryview(self.buf)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if self.end - self.pos >= self.high and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self._more.set()

    def eof_received(self) -> bool:
        self.eof = True
        self._more.set()
        # stay open: the source learns that every line was taken (or why not) when the
        # server closes the connection, after the last line, not at its own end of data
        return True

    def connection_lost(self, exc) -> None:
        self.eof = True
        self._more.set()

    # ------------------------------------------------------------------ reading
    async def _wait(self) -> None:
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self._more.clear()
        await self._more.wait()

    def _take(self, upto: int) -> bytes:
        data = bytes(memoryview(self.buf)[self.pos:upto])
        self.pos = upto
        if self.paused and self.end - self.pos < self.high // 2:
            self.paused = False               # room again: receive while this is parsed
            self.transport.resume_reading()
        return data

    async def readline(self, limit: int) -> bytes:
        """The first line, its newline included (at the end of the stream: what is left)."""
        return await self.read_lines(1, limit)

    async def read_lines(self, n: int, limit: int) -> bytes:
        """Whole lines, up to ``n`` bytes of them (more when one line is longer), as soon as
        there are any; at the end of the stream what is left, which may lack its newline;
        b"" when nothing is. ``LineTooLong`` when ``limit`` bytes hold no line end."""
        while True:
            if self.end > self.pos:
                nl = self.buf.rfind(b"\n", self.pos, min(self.end, self.pos + n))
                if nl < 0:
                    nl = self.buf.find(b"\n", self.pos, self.end)
                if nl >= 0:
                    return self._take(nl + 1)
                if self.end - self.pos > limit:
                    raise LineTooLong
            if self.eof:
                return self._take(self.end)
            await self._wait()

    async def read_some(self, n: int) -> bytes:
        """Up to ``n`` bytes, as soon as there are any; b"" at the end of the stream."""
        while self.end == self.pos and not self.eof:
            await self._wait()
        return self._take(min(self.end, self.pos + n))

    # ------------------------------------------------------------------ writing
    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    async def linger(self, seconds: float = LINGER_S) -> None:
        """After an error line: our side half-closed, the source's remaining bytes read and
        dropped until it ends (or ``seconds`` pass). Closing with unread bytes would reset the
        connection, and the source would lose the error it is about to read."""
        if self.transport.is_closing():
            return
        if self.transport.can_write_eof():
            self.transport.write_eof()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.eof and loop.time() < deadline:
            self.pos = self.end                       # dropped
            try:
                await asyncio.wait_for(self._wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break

    def peer(self) -> str:
        peer = self.transport.get_extra_info("peername")
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
