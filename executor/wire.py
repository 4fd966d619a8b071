"""Frames between the gateway and the back end over one stream socket: a kind byte, a 4-byte
length, then the payload — JSON for control, Arrow IPC for data (never Python rows).

Gateway → back end: ``PLAN`` {req, qid, plan, feeds} · ``DATA`` stream + batch ·
``WATERMARK`` {stream, ts} · ``DROP`` {qid} · ``DROP_STREAM`` {stream} · ``STATS`` {req} ·
``SNAPSHOT`` {req, qid, plan, relations} (a one-time query at now: ``ROWS`` then ``ANSWER``) ·
``TABLE`` name + contents (a static table that stream–table joins read, as it now stands) ·
``PROGRESS`` {stream, ts} (the newest event time delivered; statistics, not a BOUNDARY) ·
``HISTORY`` qid/stream + batch (archived tuples that prime query qid, sent before its PLAN,
SNAPSHOT or RECOMPUTE) · ``RECOMPUTE`` {req, qid, plan, seam, spans} (the query over its
history as though no tuple was late: ``ROWS`` then ``ANSWER``).
Back end → gateway: ``ROWS`` qid + batch · ``ENDED`` {qid, error?, sqlstate?} · ``ANSWER``
{req, ok, error?, …}.
"""
from __future__ import annotations

import json
import struct

import pyarrow as pa

PLAN, DATA, WATERMARK, DROP, DROP_STREAM, STATS = b"P", b"D", b"W", b"X", b"Z", b"S"
SNAPSHOT, TABLE, PROGRESS, HISTORY, RECOMPUTE = b"Q", b"T", b"G", b"H", b"C"
ROWS, ENDED, ANSWER = b"R", b"E", b"A"

_HEAD = struct.Struct("!cI")
_NAME = struct.Struct("!H")
_QID = struct.Struct("!q")
HEADER_SIZE = _HEAD.size


def frame(kind: bytes, payload: bytes) -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


def header(data: bytes) -> tuple[bytes, int]:
    return _HEAD.unpack(data)


def control(kind: bytes, **fields) -> bytes:
    return frame(kind, json.dumps(fields, separators=(",", ":")).encode())


def parse_control(payload: bytes) -> dict:
    return json.loads(payload)


def ipc_buffer(batch: pa.RecordBatch | pa.Table) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write(batch)
    return sink.getvalue()


def ipc(batch: pa.RecordBatch | pa.Table) -> bytes:
    return ipc_buffer(batch).to_pybytes()


def read_ipc(data) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def data_parts(stream: str, batch, kind: bytes = DATA) -> list:
    """A DATA (or TABLE, HISTORY) frame as [head, Arrow buffer]: the rows are not copied."""
    name = stream.encode()
    body = ipc_buffer(batch)
    return [_HEAD.pack(kind, _NAME.size + len(name) + body.size) + _NAME.pack(len(name)) + name,
            body]


def data(stream: str, batch, kind: bytes = DATA) -> bytes:
    return b"".join(data_parts(stream, batch, kind))


def data_stream(payload: bytes) -> str:
    """The stream a DATA payload is for, without reading its rows."""
    (n,) = _NAME.unpack_from(payload)
    return payload[_NAME.size:_NAME.size + n].decode()


class Frames:
    """Frames read off a blocking stream socket. ``next()`` waits for one; ``peek()`` returns
    the next one only if it has already arrived whole (it never waits), and ``skip()``
    consumes what ``peek()`` returned: the back end uses them to take the data queued behind
    a batch in one go."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0
        self.eof = False

    def _recv(self, block: bool) -> None:
        self.sock.setblocking(block)
        try:
            chunk = self.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        finally:
            self.sock.setblocking(True)
        if not chunk:
            self.eof = True
            return
        if self.pos and self.pos >= len(self.buf) // 2:    # drop what was read
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += chunk

    def _whole(self) -> tuple[bytes, int] | None:
        """(kind, payload length) of the next frame if all of it is buffered."""
        if len(self.buf) - self.pos < HEADER_SIZE:
            return None
        kind, length = _HEAD.unpack_from(self.buf, self.pos)
        return (kind, length) if len(self.buf) - self.pos - HEADER_SIZE >= length else None

    def peek(self) -> tuple[bytes, bytes] | None:
        got = self._whole()
        if got is None and not self.eof:
            self._recv(block=False)
            got = self._whole()
        if got is None:
            return None
        kind, length = got
        start = self.pos + HEADER_SIZE
        with memoryview(self.buf) as view:               # one copy, not two
            return kind, bytes(view[start:start + length])

    def skip(self) -> None:
        _, length = _HEAD.unpack_from(self.buf, self.pos)
        self.pos += HEADER_SIZE + length

    def next(self) -> tuple[bytes, bytes] | None:
        """The next frame, waiting for it; None once the socket has closed."""
        while self._whole() is None:
            if self.eof:
                return None
            self._recv(block=True)
        frame_ = self.peek()
        self.skip()
        return frame_


def parse_data(payload: bytes) -> tuple[str, pa.Table]:
    (n,) = _NAME.unpack_from(payload)
    name = payload[_NAME.size:_NAME.size + n].decode()
    return name, read_ipc(memoryview(payload)[_NAME.size + n:])


def history(qid: int, stream: str, batch) -> list:
    return data_parts(f"{qid}/{stream}", batch, HISTORY)


def parse_history(payload: bytes) -> tuple[int, str, pa.Table]:
    name, table = parse_data(payload)
    qid, _, stream = name.partition("/")
    return int(qid), stream, table


def rows(qid: int, batch) -> bytes:
    return frame(ROWS, _QID.pack(qid) + ipc(batch))


def parse_rows(payload: bytes) -> tuple[int, pa.Table]:
    (qid,) = _QID.unpack_from(payload)
    return qid, read_ipc(memoryview(payload)[_QID.size:])
