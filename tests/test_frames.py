"""The two readers of gateway ↔ back end frames, the back end's (``wire.Frames``, a blocking
socket) and the gateway's (``BackendFrames``, an asyncio protocol), receive in place, giving
big payloads a buffer of their own: whatever the sizes and however the bytes are cut on the
way, every frame comes out whole, in order, and an Arrow batch in one reads back equal."""
import asyncio
import random
import socket
import threading

import pyarrow as pa
import pytest

from executor import wire
from gateway.link import frames as backend_frames


def _frames(seed: int) -> list:
    rng = random.Random(seed)
    out = []
    for i in range(60):
        size = rng.choice([0, 1, 100, wire.Frames.BIG - 1, wire.Frames.BIG,
                           rng.randrange(1, 3 << 20)])
        out.append((wire.ROWS if i % 2 else wire.ANSWER, bytes([i % 251]) * size))
    return out


def _send_cut(sock, data: bytes, seed: int) -> None:
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        n = rng.choice([1, 7, 4096, 65536, 1 << 20])
        sock.sendall(data[at:at + n])
        at += n
    sock.shutdown(socket.SHUT_WR)


@pytest.mark.parametrize("seed", range(4))
def test_the_back_ends_reader_gives_whole_frames_in_order(seed):
    frames = _frames(seed)
    data = b"".join(wire.frame(k, p) for k, p in frames)
    a, b = socket.socketpair()
    with a, b:
        threading.Thread(target=_send_cut, args=(a, data, seed), daemon=True).start()
        reader, got = wire.Frames(b), []
        while True:
            if seed % 2 and reader.peek() is not None:      # peek and skip, as coalescing does
                got.append(reader.peek())
                reader.skip()
                continue
            frame = reader.next()
            if frame is None:
                break
            got.append(frame)
    assert [(k, bytes(p)) for k, p in got] == frames


@pytest.mark.parametrize("seed", range(4))
def test_the_gateways_reader_gives_whole_frames_in_order(seed):
    frames = _frames(seed)
    data = b"".join(wire.frame(k, p) for k, p in frames)

    async def main():
        a, b = socket.socketpair()
        got, lost = [], asyncio.Event()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_unix_connection(
            lambda: backend_frames.BackendFrames(lambda k, p: got.append((k, bytes(p))),
                                                 lost.set), sock=b)
        threading.Thread(target=_send_cut, args=(a, data, seed), daemon=True).start()
        await asyncio.wait_for(lost.wait(), 30)
        transport.close()
        a.close()
        return got

    assert asyncio.run(main()) == frames


def test_a_batch_sent_in_parts_reads_back_equal():
    table = pa.table({"k": pa.array(range(100_000)), "s": pa.array(["x" * 30] * 100_000)})
    batch = table.to_batches()[0].slice(7, 90_000)            # offsets rebased on the way
    a, b = socket.socketpair()
    with a, b:
        threading.Thread(target=wire.send_parts,
                         args=(a, wire.data_parts("bids", batch) + wire.rows(3, batch)),
                         daemon=True).start()
        reader = wire.Frames(b)
        kind, payload = reader.next()
        assert kind == wire.DATA and wire.parse_data(payload) == ("bids", pa.table(batch))
        kind, payload = reader.next()
        assert kind == wire.ROWS and wire.parse_rows(payload) == (3, pa.table(batch))
