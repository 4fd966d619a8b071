"""Control frames between the gateway and the back end (``executor/wire.py``): every message
comes back equal from its frame, through both frame readers; a frame of an unknown kind or
with a payload that is not its message's JSON object fails with ``FrameError``; and the back
end answers and dispatches typed messages."""
import asyncio
import dataclasses
import socket
import threading

import pyarrow as pa
import pytest

from executor import backend, pg_text, wire
from gateway.link import frames as backend_frames

PLAN = {"root": {"op": "scan", "stream": "s"}}

SAMPLES = [
    wire.PlanQuery(req=1, qid=7, plan=PLAN, feeds="w", seam=5),
    wire.PlanQuery(req=2, qid=8, plan=PLAN),
    wire.PlanQuery(req=3, qid=9, plan=PLAN, seam=5, resume=True, upto={"bids": 9}),
    wire.Drop(qid=7),
    wire.DropStream(stream="bids"),
    wire.Stats(req=3),
    wire.Snapshot(req=4, qid=9, plan=PLAN, relations=[["w", PLAN]]),
    wire.Progress(stream="bids", ts=1_000_000),
    wire.Watermark(stream="bids", ts=wire.INF),
    wire.Recompute(req=5, qid=10, plan=PLAN, seam=9, spans=[[0, 4], [6, 8]]),
    wire.Ended(qid=7),
    wire.Ended(qid=7, error="division by zero", sqlstate="22012"),
    wire.Answer(req=1, ok=True),
    wire.Answer(req=1, ok=False, error="not runnable", sqlstate="0A000"),
    wire.Answer(req=3, ok=True, queries=[{"qid": 7, "rows_in": 2}],
                streams=[{"stream": "bids", "tuples": 2, "watermark": None}],
                backend={"batches": 1, "batch_rows": 2, "busy_seconds": 0.5}),
    wire.Analyze(req=6, qids=[7, 8]),
    wire.Answer(req=6, ok=True, operators={"7": {"label": "σ", "rows_in": 2, "inputs": []}}),
    wire.Mark(n=3),
    wire.Reached(qid=7, ts=1_000_000),
    wire.EncodeRows(qid=7, oids=[20, 25], tz="Europe/Paris", csv=True, delimiter=";",
                    schema=pg_text.schema_text(pa.schema([("a", pa.int64())])),
                    null="", quote='"'),
]


def _split(frame: bytes) -> tuple[bytes, bytes]:
    kind, length = frame[:1], int.from_bytes(frame[1:wire.HEADER_SIZE], "big")
    payload = frame[wire.HEADER_SIZE:]
    assert len(payload) == length
    return kind, payload


def test_every_message_kind_has_a_sample():
    assert {type(m) for m in SAMPLES} == set(wire.MESSAGES.values())
    assert len(wire.MESSAGES) == 14


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_round_trips_through_its_frame(msg):
    kind, payload = _split(wire.encode(msg))
    assert kind == msg.KIND and wire.MESSAGES[kind] is type(msg)
    assert wire.decode(kind, payload) == msg
    assert wire.decode(kind, bytearray(payload)) == msg      # a big frame's own buffer


def test_messages_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES[2].qid = 1


def test_bytes_on_the_wire_stay_as_they_were():
    assert wire.encode(wire.Progress("s", 3)) == wire.frame(wire.PROGRESS,
                                                            b'{"stream":"s","ts":3}')
    assert wire.encode(wire.Drop(4)) == wire.frame(wire.DROP, b'{"qid":4}')


@pytest.mark.parametrize("kind", [b"?", wire.DATA, wire.ROWS, wire.TABLE, wire.HISTORY])
def test_a_frame_of_no_control_kind_is_refused(kind):
    with pytest.raises(wire.FrameError, match="no control message has frame kind"):
        wire.decode(kind, b'{"qid":1}')


@pytest.mark.parametrize("payload, why", [
    (b'{"qid":', "malformed JSON"),
    (b"", "malformed JSON"),
    (b"\xff\xfe\x00", "malformed JSON"),
    (b"[1, 2]", "a JSON list, not an object"),
    (b"7", "a JSON int, not an object"),
    (b"{}", "missing 1 required"),
    (b'{"qid":1,"stream":"s"}', "unexpected keyword argument 'stream'"),
])
def test_a_malformed_payload_is_refused_clearly(payload, why):
    with pytest.raises(wire.FrameError, match=f"^Drop frame: .*{why}"):
        wire.decode(wire.DROP, payload)


def test_frame_errors_are_value_errors():
    assert issubclass(wire.FrameError, ValueError)


def _send(sock, data: bytes) -> None:
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


def test_messages_come_through_both_readers_among_data_frames():
    """Control frames mixed with Arrow frames (some big) read back as the same messages on
    the back end's reader and the gateway's; a control frame big enough to get a buffer of
    its own (not a bytes object) too."""
    batch = pa.record_batch({"x": pa.array(range(40_000))})
    big = wire.Answer(req=7, ok=True, queries=[{"sql": "x" * wire.FrameBuffer.BIG}])
    data = b"".join(wire.encode(m) + wire.data("s", batch) for m in SAMPLES) + wire.encode(big)

    def decoded(frames):
        return [wire.decode(k, p) for k, p in frames if k in wire.MESSAGES]

    a, b = socket.socketpair()
    with a, b:
        threading.Thread(target=_send, args=(a, data), daemon=True).start()
        reader, got = wire.Frames(b), []
        while (f := reader.next()) is not None:
            got.append(f)
    assert decoded(got) == SAMPLES + [big]
    assert [wire.parse_data(p)[1].num_rows for k, p in got if k == wire.DATA] == \
        [40_000] * len(SAMPLES)

    async def main():
        a, b = socket.socketpair()
        got, lost = [], asyncio.Event()
        transport, _ = await asyncio.get_running_loop().create_unix_connection(
            lambda: backend_frames.BackendFrames(lambda k, p: got.append((k, p)), lost.set),
            sock=b)
        threading.Thread(target=_send, args=(a, data), daemon=True).start()
        await asyncio.wait_for(lost.wait(), 30)
        transport.close()
        a.close()
        return got

    assert decoded(asyncio.run(main())) == SAMPLES + [big]


def _backend():
    sent = []
    return backend.Backend(sent.append), sent


def _replies(sent: list) -> list:
    return [wire.decode(*_split(f)) for f in sent if isinstance(f, bytes)]


def test_the_back_end_dispatches_by_message_type():
    be, sent = _backend()
    assert set(be.handlers) == set(wire.MESSAGES.values()) - {wire.Ended, wire.Answer,
                                                              wire.Reached}
    be.handle(*_split(wire.encode(wire.Progress("Bids", 5))))
    be.handle(*_split(wire.encode(wire.Progress("bids", 3))))
    assert be.streams["bids"].watermark == 5
    be.handle(*_split(wire.encode(wire.Stats(req=11))))
    (answer,) = _replies(sent)
    assert answer == wire.Answer(req=11, ok=True, queries=[], streams=[
        {"stream": "bids", "tuples": 0, "watermark": 5, "rate": 0.0, "late": 0}],
        backend={"batches": 0, "batch_rows": 0, "busy_seconds": 0.0})
    sent.clear()
    be.handle(*_split(wire.encode(wire.Analyze(req=12, qids=[99]))))     # no such query
    (answer,) = _replies(sent)
    assert answer == wire.Answer(req=12, ok=True, operators={})


def test_the_back_end_refuses_an_unknown_kind_and_answers_a_failed_one_time_query():
    be, sent = _backend()
    with pytest.raises(wire.FrameError):
        be.handle(b"?", b"{}")
    be.handle(*_split(wire.encode(wire.Snapshot(req=12, qid=1, plan={}, relations=[]))))
    (answer,) = _replies(sent)
    assert answer.req == 12 and not answer.ok and answer.sqlstate == "XX000"


def test_coalescing_keeps_progress_as_messages():
    a, b = socket.socketpair()
    with a, b:
        batch = pa.record_batch({"x": pa.array([1, 2])})
        a.sendall(wire.data("s", batch) + wire.encode(wire.Progress("s", 4)) +
                  wire.data("s", batch) + wire.encode(wire.Progress("t", 5)))
        frames = wire.Frames(b)
        name, table, progress = backend._coalesced(frames, frames.next()[1])
        assert (name, table.num_rows, progress) == ("s", 4, [wire.Progress("s", 4)])
        assert wire.decode(*frames.next()) == wire.Progress("t", 5)


def test_marks_among_joined_data_are_echoed_after_it():
    """A MARK says the rows of everything before it have gone out: joined into one batch with
    the DATA around it, it is answered after the batch, which it still follows."""
    a, b = socket.socketpair()
    with a, b:
        batch = pa.record_batch({"x": pa.array([1, 2])})
        a.sendall(wire.data("s", batch) + wire.encode(wire.Mark(1)) +
                  wire.data("s", batch) + wire.encode(wire.Mark(2)))
        frames = wire.Frames(b)
        name, table, progress = backend._coalesced(frames, frames.next()[1])
        assert (name, table.num_rows, progress) == ("s", 4, [wire.Mark(1), wire.Mark(2)])
    be, sent = _backend()
    for msg in progress:
        be.dispatch(msg)
    assert _replies(sent) == [wire.Mark(1), wire.Mark(2)]
