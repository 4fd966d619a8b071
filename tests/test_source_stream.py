"""A source connection's reader (gateway/sources/source_stream.py) over a real socket: the head
line, then whole lines however the sender cut its writes, the last line without its newline, a line
over the limit, and a reader that pauses the socket while too much waits unread."""
import asyncio
import random
import socket

import pytest

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
