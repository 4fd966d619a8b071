"""A source connection's reader (gateway/sources/source_stream.py) over a real socket: the head
line, then whole lines however the sender cut its writes, the last line without its newline, a line
over the limit, and a reader that pauses the socket while too much waits unread."""
import asyncio
import random
import socket

import pytest

from gateway.sources import source_stream
from gateway.sources.source_stream import LineTooLong, SourceStream


async def _serve(handler, high: int = 1 << 20):
    tasks: set = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: SourceStream(handler, high, tasks), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _send(port: int, pieces: list) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        for p in pieces:
            s.sendall(p)
        s.shutdown(socket.SHUT_WR)
        s.recv(100)


@pytest.mark.parametrize("seed", range(5))
def test_whole_lines_however_the_bytes_were_cut(seed):
    rng = random.Random(seed)
    lines = [b"x" * rng.randint(0, 300) + b",%d" % i for i in range(5000)]
    body = b"\n".join(lines)                          # the last line has no newline
    cuts = sorted(rng.sample(range(1, len(body)), 200))
    pieces = [b"head,line\n"] + [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)])]

    async def main():
        got, done = [], asyncio.Event()

        async def handler(stream):
            got.append(await stream.readline(1000))
            while data := await stream.read_lines(4096, 1000):
                got.append(data)
            stream.close()
            done.set()
        server, port = await _serve(handler)
        await asyncio.get_running_loop().run_in_executor(None, _send, port, pieces)
        await asyncio.wait_for(done.wait(), 10)
        server.close()
        return got

    got = asyncio.run(asyncio.wait_for(main(), 30))
    assert got[0] == b"head,line\n"
    assert all(chunk.endswith(b"\n") for chunk in got[1:-1])
    assert all(len(chunk) <= 4096 for chunk in got[1:])
    assert b"".join(got[1:]) == body


def test_a_line_over_the_limit_and_back_pressure():
    async def main():
        outcome = {}

        async def handler(stream):
            await asyncio.sleep(0.5)                  # a slow reader: the socket pauses
            outcome["paused"] = stream.paused
            outcome["lines"] = b""
            try:
                while data := await stream.read_lines(1 << 20, 100):
                    outcome["lines"] += data
            except LineTooLong:
                outcome["too long"] = True
            stream.close()
        server, port = await _serve(handler, high=1 << 16)
        many = b"short line\n" * 20_000
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _send, port, [many, b"y" * 500])
        server.close()
        return outcome, many

    outcome, many = asyncio.run(asyncio.wait_for(main(), 30))
    assert outcome["paused"] and outcome["lines"] == many and outcome["too long"]


def test_the_connection_closes_only_after_the_last_line_is_taken():
    """A source knows its lines were all taken when the server closes the connection: its own
    end of data must not close it while lines still wait to be parsed."""
    async def main():
        finished = {}

        async def handler(stream):
            while await stream.read_lines(1 << 20, 1000):
                await asyncio.sleep(0.3)              # a slow parse
            finished["at"] = asyncio.get_running_loop().time()
            stream.close()
        server, port = await _serve(handler)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, _send, port, [b"a,1\n" * 10])
        closed_at = loop.time()
        server.close()
        return finished, closed_at

    finished, closed_at = asyncio.run(asyncio.wait_for(main(), 30))
    assert finished["at"] <= closed_at


class _Transport:
    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class _CountingView:
    """memoryview as the module sees it, counting the bytes written through slices."""
    moved = 0

    def __init__(self, obj):
        self.view = memoryview(obj)

    def __getitem__(self, key):
        return self.view[key]

    def __setitem__(self, key, value):
        _CountingView.moved += len(value)
        self.view[key] = value

    def release(self):
        self.view.release()


def test_a_lagging_reader_moves_each_byte_at_most_once(monkeypatch):
    """A reader some megabytes behind its source (up to ``high`` bytes wait unread) takes as
    much as each receive brings. Making room for the next receive must not move all the
    unread bytes each time: the old buffer did, and copied every byte dozens of times over."""
    monkeypatch.setattr(source_stream, "memoryview", _CountingView, raising=False)
    _CountingView.moved = 0
    high, chunk, lag = 8 << 20, source_stream.RECV, 6 << 20
    stream = SourceStream(None, high, set())
    stream.transport = _Transport()
    line = b"1,2,3,some text of a bid,2026-11-29 00:00:00\n"
    pattern = line * (source_stream.RECV // len(line) + 2)
    sent, taken, biggest = 0, [], 0

    async def run():
        nonlocal sent, biggest
        while sent < 200 << 20:
            if stream.paused or stream.end - stream.pos >= lag:
                # a reader as fast as the source but some megabytes behind it
                taken.append(await stream.read_lines(chunk, 1 << 20))
                if stream.paused:
                    continue
            room = stream.get_buffer(-1)
            n = min(len(room), source_stream.RECV)
            room[:n] = pattern[sent % len(line):][:n]
            room.release()                  # as the transport lets go of it after a receive
            stream.buffer_updated(n)
            sent += n
            biggest = max(biggest, len(stream.buf))
    asyncio.run(asyncio.wait_for(run(), 60))
    got = b"".join(taken)
    assert got and got == (line * (len(got) // len(line)))      # whole lines, in order
    assert _CountingView.moved <= sent, (_CountingView.moved, sent)
    assert biggest <= 3 * high
