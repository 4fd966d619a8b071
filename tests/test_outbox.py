"""The gateway's outbox to the back end (gateway/link/outbox.py): frames written from the loop and
from other threads arrive whole and in each writer's order, Arrow buffers go out uncopied,
``drain`` holds a writer while the reader is behind and lets it go once the reader catches up,
and a reader that is gone never leaves a writer waiting."""
import asyncio
import socket
import threading

import pyarrow as pa

from executor import wire
from gateway.link.outbox import Outbox


def _reader(sock: socket.socket, got: list) -> threading.Thread:
    def run():
        frames = wire.Frames(sock)
        while (f := frames.next()) is not None:
            got.append(f)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_frames_arrive_whole_and_in_order_from_any_thread():
    async def main():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)                 # as the loop leaves it
        out = Outbox(ours, asyncio.get_running_loop(), high=1 << 16)
        got: list = []
        reader = _reader(theirs, got)
        batch = pa.record_batch({"x": pa.array(range(50_000))})
        for k in range(20):
            out.write(wire.data_parts("s", batch))
            out.write(wire.encode(wire.Progress("s", k)))
            await out.drain()
        others = [threading.Thread(target=lambda n=n: [
            out.write(wire.encode(wire.Drop(n * 100 + i))) for i in range(50)])
            for n in range(3)]
        for t in others:
            t.start()
        for t in others:
            t.join()
        out.close()
        await asyncio.sleep(0.2)
        ours.close()
        reader.join(10)
        return got

    got = asyncio.run(asyncio.wait_for(main(), 30))
    data = [f for f in got if f[0] == wire.DATA]
    progress = [wire.decode(k, p).ts for k, p in got if k == wire.PROGRESS]
    assert len(data) == 20 and progress == list(range(20))
    assert all(wire.parse_data(p)[1].column("x").to_pylist() == list(range(50_000))
               for _, p in data)
    drops = [wire.decode(k, p).qid for k, p in got if k == wire.DROP]
    for n in range(3):                         # each thread's frames in its own order
        assert [q for q in drops if q // 100 == n] == [n * 100 + i for i in range(50)]


def test_drain_waits_for_a_slow_reader_and_not_for_a_gone_one():
    async def main():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        out = Outbox(ours, asyncio.get_running_loop(), high=1 << 16)
        out.write(b"x" * (4 << 20))             # far more than the socket buffers hold
        drained = asyncio.create_task(out.drain())
        await asyncio.sleep(0.3)
        assert not drained.done() and out.get_write_buffer_size() > 1 << 16
        received = 0
        theirs.settimeout(5)
        while received < 4 << 20:               # the reader catches up
            received += len(theirs.recv(1 << 20))
        await asyncio.wait_for(drained, 5)
        out.write(b"y" * (4 << 20))
        theirs.close()                          # the reader is gone
        await asyncio.wait_for(out.drain(), 5)
        assert out.lost
        out.close()

    asyncio.run(asyncio.wait_for(main(), 30))
