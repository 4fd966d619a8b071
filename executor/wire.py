"""Frames between the gateway and the back end over one stream socket: a kind byte, a 4-byte
length, then the payload — JSON for control, Arrow IPC for data (never Python rows).

Gateway → back end: ``PLAN`` {req, qid, plan, feeds} · ``DATA`` stream + batch ·
``WATERMARK`` {stream, ts} · ``DROP`` {qid} · ``DROP_STREAM`` {stream} · ``STATS`` {req} ·
``SNAPSHOT`` {req, qid, plan, relations} (a one-time query at now: ``ROWS`` then ``ANSWER``) ·
``TABLE`` name + contents (a static table that stream–table joins read, as it now stands) ·
``PROGRESS`` {stream, ts} (the newest event time delivered; statistics, not a BOUNDARY) ·
``HISTORY`` qid/stream + batch (archived tuples that prime query qid, sent before its PLAN,
SNAPSHOT or RECOMPUTE) · ``RECOMPUTE`` {req, qid, plan, seam, spans} (the query over its
history as though no tuple was late: ``ROWS`` then ``ANSWER``) · ``ANALYZE`` {req, qids} (EXPLAIN
ANALYZE: each query's operators with their counters, in ``ANSWER``'s ``operators``) ·
``MARK`` {n} (sent back once everything before it is answered: where the rows of queries
sharded across back ends are merged).
Back end → gateway: ``ROWS`` qid + batch · ``ENDED`` {qid, error?, sqlstate?} · ``ANSWER``
{req, ok, error?, …} · ``MARK`` {n} · ``REACHED`` {qid, ts} (every row of the query that
begins before ts has been sent: a BOUNDARY reached its result).

Each JSON frame holds one frozen message (``PlanQuery``, ``Ended``, …, registered in ``MESSAGES``
by kind byte); ``encode`` and ``decode`` are the only way between a message and its frame.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa

# What the gateway needs of the back end's data model besides frames, so that it reaches the
# executor only through this module and the plan: event time as frames carry it (µs, INF for
# "forever") and the heap policy both processes share (frames are megabytes).
from executor.allocator import keep_freed_memory  # noqa: F401 - re-exported
from executor.batches import INF, micros  # noqa: F401 - re-exported

PLAN, DATA, WATERMARK, DROP, DROP_STREAM, STATS = b"P", b"D", b"W", b"X", b"Z", b"S"
SNAPSHOT, TABLE, PROGRESS, HISTORY, RECOMPUTE, ANALYZE = b"Q", b"T", b"G", b"H", b"C", b"Y"
ROWS, ENDED, ANSWER, MARK, ENCODE, REACHED = b"R", b"E", b"A", b"M", b"K", b"V"

_HEAD = struct.Struct("!cI")
_NAME = struct.Struct("!H")
_QID = struct.Struct("!q")
HEADER_SIZE = _HEAD.size


def frame(kind: bytes, payload: bytes) -> bytes:
    return _HEAD.pack(kind, len(payload)) + payload


class FrameError(ValueError):
    """A frame that holds no message of this protocol: a kind no message has, or a payload
    that is not the JSON object of its message."""


MESSAGES: dict = {}           # kind byte -> the class of the message its frames hold


@dataclass(frozen=True)
class Control:
    """A message sent as JSON; each subclass registers itself under its kind byte."""
    KIND: ClassVar[bytes]

    def __init_subclass__(cls, kind: bytes, **kw):
        super().__init_subclass__(**kw)
        cls.KIND = kind
        MESSAGES[kind] = cls


@dataclass(frozen=True)
class PlanQuery(Control, kind=PLAN):
    """Run continuous query ``qid`` until DROP; ``feeds``: the named window or derived stream
    its rows become; ``seam``: where the archived tuples sent before it give way to live ones;
    ``resume``: the query goes on from the seam, as one that ran all along would (a BOUNDARY
    there, its rows that begin at or after it), rather than starting there; ``restore``: from
    that checkpoint's state (``executor.checkpoints``); ``checkpoint``: the directory it saves
    its state in, every ``every`` seconds at most."""
    req: int
    qid: int
    plan: dict                      # executor.plan.to_dict
    feeds: str | None = None
    seam: int | None = None
    resume: bool = False
    upto: dict | None = None        # resume: each stream's BOUNDARY when its history was read
    restore: str | None = None
    checkpoint: str | None = None
    every: float = 0.0


@dataclass(frozen=True)
class Drop(Control, kind=DROP):
    qid: int


@dataclass(frozen=True)
class DropStream(Control, kind=DROP_STREAM):
    stream: str


@dataclass(frozen=True)
class Stats(Control, kind=STATS):
    req: int


@dataclass(frozen=True)
class Analyze(Control, kind=ANALYZE):
    """EXPLAIN ANALYZE of the queries ``qids`` (those still running answer)."""
    req: int
    qids: list


@dataclass(frozen=True)
class Snapshot(Control, kind=SNAPSHOT):
    """A one-time query at now; ``relations``: [name, plan] of the named windows it reads,
    dependencies first; ``at``: the instant it answers for (None: its streams' newest
    watermark)."""
    req: int
    qid: int
    plan: dict
    relations: list
    at: int | None = None


@dataclass(frozen=True)
class Progress(Control, kind=PROGRESS):
    stream: str
    ts: int


@dataclass(frozen=True)
class Watermark(Control, kind=WATERMARK):
    stream: str
    ts: int


@dataclass(frozen=True)
class Mark(Control, kind=MARK):
    """A point in the frames to a back end, echoed when it has been reached."""
    n: int


@dataclass(frozen=True)
class EncodeRows(Control, kind=ENCODE):
    """From now on, send query ``qid``'s rows as COPY's text (or, ``csv``, CSV) lines of its
    first ``len(oids)`` columns, one CopyData message a row (``pg_text.copy_data_table``), or
    with ``binary`` as binary COPY's rows (``pg_text.copy_binary_table``): the gateway forwards
    them to a COPY … TO STDOUT client as they are. ``tz``: the session's TimeZone, for
    timestamptz; ``schema``: the types the gateway declared for the rows, cast to first."""
    qid: int
    oids: list
    tz: str
    csv: bool
    delimiter: str
    null: str
    quote: str
    schema: str                     # the rows' declared types (pg_text.schema_text)
    binary: bool = False


@dataclass(frozen=True)
class Recompute(Control, kind=RECOMPUTE):
    """The query over its history up to ``seam``: its rows overlapping ``spans`` ([from, to)
    µs pairs), or, ``by_start``, beginning within them."""
    req: int
    qid: int
    plan: dict
    seam: int
    spans: list
    by_start: bool = False


@dataclass(frozen=True)
class Ended(Control, kind=ENDED):
    qid: int
    error: str | None = None
    sqlstate: str | None = None


@dataclass(frozen=True)
class Reached(Control, kind=REACHED):
    """Query ``qid``'s result has passed a BOUNDARY at ``ts``: every row that begins before it
    has been sent (its progress, and where it can be resumed from)."""
    qid: int
    ts: int


@dataclass(frozen=True)
class Answer(Control, kind=ANSWER):
    """The reply to the request ``req``; a STATS reply carries one dict per query and per
    stream (and the back end's own counters), an ANALYZE reply the query's operator tree."""
    req: int
    ok: bool
    error: str | None = None
    sqlstate: str | None = None
    queries: list | None = None
    streams: list | None = None
    backend: dict | None = None
    operators: dict | None = None


def encode(msg: Control) -> bytes:
    """A message's frame: its kind byte, then its fields as a JSON object."""
    # vars, not dataclasses.asdict: asdict would deep-copy a plan on every frame
    return frame(msg.KIND, json.dumps(vars(msg), separators=(",", ":")).encode())


def decode(kind: bytes, payload) -> Control:
    """The message a control frame holds; ``FrameError`` if it holds none."""
    cls = MESSAGES.get(kind)
    if cls is None:
        raise FrameError(f"no control message has frame kind {kind!r}")
    try:
        fields = json.loads(payload if isinstance(payload, (bytes, bytearray)) else
                            bytes(payload))
    except ValueError as e:             # not JSON, or not UTF-8
        raise FrameError(f"{cls.__name__} frame: malformed JSON: {e}") from e
    if not isinstance(fields, dict):
        raise FrameError(f"{cls.__name__} frame: a JSON {type(fields).__name__}, "
                         "not an object")
    try:
        return cls(**fields)
    except TypeError as e:              # a field missing, or one the message has not
        raise FrameError(f"{cls.__name__} frame: {e}") from e


def read_ipc(data) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class _Pieces:
    """A write-only file for Arrow's IPC writer that keeps what it is given: the small
    framing pieces as bytes, the batch's buffers as they are (Arrow passes them uncopied)."""
    closed = False
    SMALL = 4096            # pieces shorter than this are joined to their neighbours

    def __init__(self, head: bytes):
        self.parts: list = [head]
        self.size = 0

    def write(self, data) -> int:
        n = data.size if isinstance(data, pa.Buffer) else len(data)
        if n < self.SMALL and not isinstance(self.parts[-1], pa.Buffer):
            self.parts[-1] += bytes(data)
        elif n < self.SMALL:
            self.parts.append(bytes(data))
        else:
            self.parts.append(data)
        self.size += n
        return n

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _framed(kind: bytes, prefix: bytes, batch) -> list:
    """A frame whose payload is ``prefix`` and then ``batch`` in Arrow IPC, as a list of parts
    to send one after another: the head and Arrow's framing as bytes, the rows' buffers
    uncopied."""
    sink = _Pieces(b"")
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), batch.schema) as w:
        w.write(batch)
    head = _HEAD.pack(kind, len(prefix) + sink.size) + prefix
    return [head + sink.parts[0], *sink.parts[1:]]


def data_parts(stream: str, batch, kind: bytes = DATA) -> list:
    """A DATA (or TABLE, HISTORY) frame as parts (see ``_framed``)."""
    name = stream.encode()
    return _framed(kind, _NAME.pack(len(name)) + name, batch)


IOV_MAX = 512          # buffers handed to one sendmsg (the kernel takes up to 1024)


def unsent(parts: list, sent: int) -> list:
    """What is left of ``parts`` (memoryviews) once ``sent`` bytes of them have gone."""
    for i, view in enumerate(parts):
        if sent < len(view):
            return [view[sent:], *parts[i + 1:]] if sent else parts[i:]
        sent -= len(view)
    return []


def send_some(sock, views: list) -> list:
    """One gathered send of ``views`` (byte memoryviews); what the socket did not take."""
    return unsent(views, sock.sendmsg(views[:IOV_MAX]))


def send_parts(sock, parts: list) -> None:
    """Send every part (bytes-like) on a blocking socket, gathered into few system calls."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        views = send_some(sock, views)


def data(stream: str, batch, kind: bytes = DATA) -> bytes:
    return b"".join(bytes(p) for p in data_parts(stream, batch, kind))


def data_stream(payload) -> str:
    """The stream a DATA payload is for, without reading its rows."""
    (n,) = _NAME.unpack_from(payload)
    return bytes(payload[_NAME.size:_NAME.size + n]).decode()


class FrameBuffer:
    """Frames assembled from bytes received in place, whatever does the receiving: receive
    into ``target()``, tell ``received(n)``, then take whole frames from ``next_frame()``.

    Bytes land straight in one buffer (no copy per receive). A payload of ``BIG`` bytes or
    more gets a buffer of its own, received into directly and then never written again, so
    Arrow reads the rows where they lie; smaller ones are copied out."""

    RECV = 1 << 20
    BIG = 1 << 16            # below RECV / 4: a small frame always fits the room kept free

    def __init__(self):
        self.buf = bytearray(self.RECV)
        self.pos = self.end = 0              # unread bytes: buf[pos:end]
        self.big: list | None = None         # [kind, payload, bytes received] of a BIG frame

    def target(self) -> memoryview:
        """Where the next bytes go."""
        if self.big is not None:
            _, payload, got = self.big
            return memoryview(payload)[got:]
        if self.pos == self.end:
            self.pos = self.end = 0
        elif len(self.buf) - self.end < self.RECV // 4:
            self.buf[:self.end - self.pos] = self.buf[self.pos:self.end]   # to the front
            self.end -= self.pos
            self.pos = 0
        return memoryview(self.buf)[self.end:]

    def received(self, n: int) -> None:
        if self.big is not None:
            self.big[2] += n
        else:
            self.end += n

    def next_frame(self) -> tuple[bytes, object] | None:
        """The next whole frame (kind, payload), or None until more has come."""
        if self.big is not None:
            kind, payload, got = self.big
            if got < len(payload):
                return None
            self.big = None
            return kind, payload
        if self.end - self.pos < HEADER_SIZE:
            return None
        kind, length = _HEAD.unpack_from(self.buf, self.pos)
        start = self.pos + HEADER_SIZE
        if length >= self.BIG:
            # not zeroed (bytearray's memset, holding the interpreter's lock, cost more than
            # receiving): every byte is written before the frame is handed on
            payload = np.empty(length, np.uint8)
            have = min(length, self.end - start)
            payload[:have] = memoryview(self.buf)[start:start + have]
            self.pos = start + have
            self.big = [kind, payload, have]
            return self.next_frame()
        if self.end - start < length:
            return None
        self.pos = start + length
        with memoryview(self.buf) as view:
            return kind, bytes(view[start:start + length])


class Frames:
    """Frames read off a blocking stream socket (through a ``FrameBuffer``). ``next()`` waits
    for one; ``peek()`` returns the next one only if it has already arrived whole (it never
    waits), and ``skip()`` consumes what ``peek()`` returned: the back end uses them to take
    the data queued behind a batch in one go."""

    BIG = FrameBuffer.BIG

    def __init__(self, sock):
        self.sock = sock
        self.frames = FrameBuffer()
        self.eof = False
        self.ready = None                    # (kind, payload) whole, not yet consumed

    def _recv(self, block: bool) -> bool:
        """Receive what is there (waiting for something when ``block``); False if nothing
        came."""
        target = self.frames.target()
        self.sock.setblocking(block)
        try:
            n = self.sock.recv_into(target)
        except (BlockingIOError, InterruptedError):
            return False
        finally:
            self.sock.setblocking(True)
            target.release()
        if n == 0:
            self.eof = True
            return False
        self.frames.received(n)
        return True

    def _assemble(self) -> bool:
        """Whether the next frame is whole (then it is in ``ready``)."""
        if self.ready is None:
            self.ready = self.frames.next_frame()
        return self.ready is not None

    def peek(self) -> tuple[bytes, object] | None:
        if not self._assemble() and not self.eof and self._recv(block=False):
            self._assemble()
        return self.ready

    def skip(self) -> None:
        self.ready = None

    def next(self) -> tuple[bytes, object] | None:
        """The next frame, waiting for it; None once the socket has closed."""
        while not self._assemble():
            if self.eof:
                return None
            self._recv(block=True)
        got, self.ready = self.ready, None
        return got


def parse_data(payload) -> tuple[str, pa.Table]:
    (n,) = _NAME.unpack_from(payload)
    name = bytes(payload[_NAME.size:_NAME.size + n]).decode()
    return name, read_ipc(memoryview(payload)[_NAME.size + n:])


def history(qid: int, stream: str, batch) -> list:
    return data_parts(f"{qid}/{stream}", batch, HISTORY)


def parse_history(payload: bytes) -> tuple[int, str, pa.Table]:
    name, table = parse_data(payload)
    qid, _, stream = name.partition("/")
    return int(qid), stream, table


def rows(qid: int, batch) -> list:
    """A ROWS frame as parts (see ``_framed``)."""
    return _framed(ROWS, _QID.pack(qid), batch)


def parse_rows(payload: bytes) -> tuple[int, pa.Table]:
    (qid,) = _QID.unpack_from(payload)
    return qid, read_ipc(memoryview(payload)[_QID.size:])
