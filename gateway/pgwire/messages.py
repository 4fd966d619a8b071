"""PostgreSQL v3 wire messages, sans I/O: a frontend-message parser fed with bytes and one small
builder function per backend message (the length is filled in at the end).

Nothing here touches a socket; the protocol core (``gateway/pgwire/protocol.py``) pulls
messages from the parser one at a time, as its state allows.
"""
from __future__ import annotations

import struct

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from executor.pg_text import back_to_back, data_rows  # noqa: F401 - re-exported (M.*)
from gateway.pgwire.errors import ProtocolViolation, ProgramLimitExceeded

PROTOCOL_3_0 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")
_HDR = struct.Struct("!ci")


# --------------------------------------------------------------------------- frontend messages
@dataclass(frozen=True)
class Startup:
    params: dict


@dataclass(frozen=True)
class SSLRequest:
    pass


@dataclass(frozen=True)
class GSSENCRequest:
    pass


@dataclass(frozen=True)
class CancelRequest:
    pid: int
    secret: int


@dataclass(frozen=True)
class Query:
    sql: str


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_oids: tuple


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple
    params: tuple  # bytes | None each
    result_formats: tuple


@dataclass(frozen=True)
class Describe:
    kind: str  # 'S' statement or 'P' portal
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


@dataclass(frozen=True)
class Close:
    kind: str
    name: str


@dataclass(frozen=True)
class Sync:
    pass


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class Terminate:
    pass


@dataclass(frozen=True)
class CopyData:
    data: bytes


@dataclass(frozen=True)
class CopyDone:
    pass


@dataclass(frozen=True)
class CopyFail:
    message: str


@dataclass(frozen=True)
class PasswordMessage:
    """'p' carries a password, a SASLInitialResponse or a SASLResponse; the auth step decodes."""
    payload: bytes


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def cstr(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation("invalid message format: unterminated string")
        s = self.buf[self.pos:end].decode("utf-8", errors="strict")
        self.pos = end + 1
        return s

    def i16(self) -> int:
        if self.pos + 2 > len(self.buf):
            raise ProtocolViolation("invalid message format: truncated int16")
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        if self.pos + 4 > len(self.buf):
            raise ProtocolViolation("invalid message format: truncated int32")
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u32(self) -> int:
        if self.pos + 4 > len(self.buf):
            raise ProtocolViolation("invalid message format: truncated int32")
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolViolation("invalid message format: length exceeds message")
        v = self.buf[self.pos:self.pos + n]
        self.pos += n
        return v

    def rest(self) -> bytes:
        v = self.buf[self.pos:]
        self.pos = len(self.buf)
        return v

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ProtocolViolation("invalid message format: trailing bytes")


def _parse_bind(r: _Reader) -> Bind:
    portal, stmt = r.cstr(), r.cstr()
    nfmt = r.i16()
    if nfmt < 0:
        raise ProtocolViolation("invalid message format: negative format count")
    formats = tuple(r.i16() for _ in range(nfmt))
    nparams = r.i16()
    if nparams < 0:
        raise ProtocolViolation("invalid message format: negative parameter count")
    params = []
    for _ in range(nparams):
        n = r.i32()
        params.append(None if n == -1 else r.take(n))
    nres = r.i16()
    if nres < 0:
        raise ProtocolViolation("invalid message format: negative result format count")
    res = tuple(r.i16() for _ in range(nres))
    return Bind(portal, stmt, formats, tuple(params), res)


def _parse_parse(r: _Reader) -> Parse:
    name, sql = r.cstr(), r.cstr()
    n = r.i16()
    if n < 0:
        raise ProtocolViolation("invalid message format: negative parameter count")
    return Parse(name, sql, tuple(r.u32() for _ in range(n)))


def _parse_describe(r: _Reader) -> Describe:
    kind = r.take(1).decode("ascii", errors="replace")
    if kind not in ("S", "P"):
        raise ProtocolViolation(f"invalid DESCRIBE message subtype {kind!r}")
    return Describe(kind, r.cstr())


def _parse_close(r: _Reader) -> Close:
    kind = r.take(1).decode("ascii", errors="replace")
    if kind not in ("S", "P"):
        raise ProtocolViolation(f"invalid CLOSE message subtype {kind!r}")
    return Close(kind, r.cstr())


# One entry per frontend message type: how to read its body.
FRONTEND_PARSERS = {
    b"Q": lambda r: Query(r.cstr()),
    b"P": _parse_parse,
    b"B": _parse_bind,
    b"D": _parse_describe,
    b"E": lambda r: Execute(r.cstr(), r.i32()),
    b"C": _parse_close,
    b"S": lambda r: Sync(),
    b"H": lambda r: Flush(),
    b"X": lambda r: Terminate(),
    b"d": lambda r: CopyData(r.rest()),
    b"c": lambda r: CopyDone(),
    b"f": lambda r: CopyFail(r.cstr()),
    b"p": lambda r: PasswordMessage(r.rest()),
}

# Messages whose body we read to the end ourselves (copy data, password payloads).
_OPEN_ENDED = {b"d", b"p"}


def parse_startup(body: bytes):
    """Parse a startup-phase packet body (after its length word)."""
    r = _Reader(body)
    code = r.i32()
    if code == SSL_REQUEST:
        return SSLRequest()
    if code == GSSENC_REQUEST:
        return GSSENCRequest()
    if code == CANCEL_REQUEST:
        return CancelRequest(r.i32(), r.i32())
    if code >> 16 != 3:
        raise ProtocolViolation(
            f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
            "server supports 3.0 to 3.0")
    params = {}
    while True:
        key = r.cstr()
        if not key:
            break
        params[key] = r.cstr()
    return Startup(params)


@dataclass
class FrontendParser:
    """Accumulates bytes and hands out parsed messages one at a time, so that bytes behind a
    message stay unread until the reader is ready for them; raises ProtocolViolation on
    garbage when the garbage is reached."""
    max_message: int = 64 * 1024 * 1024
    startup: bool = True
    buf: bytearray = field(default_factory=bytearray)

    def push(self, data: bytes) -> None:
        self.buf += data

    def next_message(self):
        """The next complete message, or None until more bytes arrive."""
        buf = self.buf
        if self.startup:
            if len(buf) < 4:
                return None
            (length,) = _I32.unpack_from(buf, 0)
            if length < 8 or length > 10000:
                raise ProtocolViolation("invalid length of startup packet")
            if len(buf) < length:
                return None
            body = bytes(buf[4:length])
            del buf[:length]
            try:
                msg = parse_startup(body)
            except UnicodeDecodeError as e:   # a parameter that is not UTF-8
                raise ProtocolViolation("invalid byte sequence for encoding \"UTF8\"") from e
            if isinstance(msg, Startup):
                self.startup = False
            return msg
        if len(buf) < 5:
            return None
        tag, length = _HDR.unpack_from(buf, 0)
        if length < 4:
            raise ProtocolViolation(f"invalid message length {length}")
        if length > self.max_message:
            raise ProgramLimitExceeded(
                f"message of {length} bytes exceeds the limit of {self.max_message} bytes")
        if tag not in FRONTEND_PARSERS:
            raise ProtocolViolation(f"invalid frontend message type {tag[0]}")
        if len(buf) < length + 1:
            return None
        body = bytes(buf[5:length + 1])
        del buf[:length + 1]
        r = _Reader(body)
        try:
            msg = FRONTEND_PARSERS[tag](r)
        except UnicodeDecodeError as e:
            raise ProtocolViolation("invalid byte sequence for encoding \"UTF8\"") from e
        if tag not in _OPEN_ENDED:
            r.done()
        return msg


# --------------------------------------------------------------------------- backend messages
def _msg(tag: bytes, body: bytes = b"") -> bytes:
    return tag + _I32.pack(len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


def authentication_ok() -> bytes:
    return _msg(b"R", _I32.pack(0))


def authentication_cleartext() -> bytes:
    return _msg(b"R", _I32.pack(3))


def authentication_sasl(mechanisms: Sequence[str]) -> bytes:
    return _msg(b"R", _I32.pack(10) + b"".join(_cstr(m) for m in mechanisms) + b"\0")


def authentication_sasl_continue(data: bytes) -> bytes:
    return _msg(b"R", _I32.pack(11) + data)


def authentication_sasl_final(data: bytes) -> bytes:
    return _msg(b"R", _I32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return _msg(b"S", _cstr(name) + _cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return _msg(b"K", _I32.pack(pid) + _I32.pack(secret))


def ready_for_query(status: str) -> bytes:
    return _msg(b"Z", status.encode("ascii"))


def row_description(fields: Iterable[tuple]) -> bytes:
    """fields: (name, table_oid, attnum, type_oid, typlen, typmod, format)."""
    fields = list(fields)
    parts = [_I16.pack(len(fields))]
    for name, table_oid, attnum, type_oid, typlen, typmod, fmt in fields:
        parts.append(_cstr(name) + struct.pack("!IhIhih", table_oid, attnum, type_oid, typlen,
                                                typmod, fmt))
    return _msg(b"T", b"".join(parts))


def command_complete(tag: str) -> bytes:
    return _msg(b"C", _cstr(tag))


def empty_query_response() -> bytes:
    return _msg(b"I")


def parse_complete() -> bytes:
    return _msg(b"1")


def bind_complete() -> bytes:
    return _msg(b"2")


def close_complete() -> bytes:
    return _msg(b"3")


def no_data() -> bytes:
    return _msg(b"n")


def portal_suspended() -> bytes:
    return _msg(b"s")


def parameter_description(oids: Sequence[int]) -> bytes:
    return _msg(b"t", _I16.pack(len(oids)) + b"".join(_U32.pack(o) for o in oids))


def copy_in_response(ncols: int, binary: bool = False) -> bytes:
    fmt = 1 if binary else 0
    return _msg(b"G", struct.pack("!bh", fmt, ncols) + _I16.pack(fmt) * ncols)


def copy_out_response(ncols: int, binary: bool = False) -> bytes:
    fmt = 1 if binary else 0
    return _msg(b"H", struct.pack("!bh", fmt, ncols) + _I16.pack(fmt) * ncols)


def copy_data(data: bytes) -> bytes:
    return _msg(b"d", data)


def copy_done() -> bytes:
    return _msg(b"c")


def _fields(severity: str, sqlstate: str, message: str, position: int | None,
            detail: str | None, hint: str | None) -> bytes:
    parts = [b"S" + _cstr(severity), b"V" + _cstr(severity), b"C" + _cstr(sqlstate),
             b"M" + _cstr(message)]
    if detail:
        parts.append(b"D" + _cstr(detail))
    if hint:
        parts.append(b"H" + _cstr(hint))
    if position:
        parts.append(b"P" + _cstr(str(position)))
    return b"".join(parts) + b"\0"


def error_response(sqlstate: str, message: str, *, severity: str = "ERROR",
                   position: int | None = None, detail: str | None = None,
                   hint: str | None = None) -> bytes:
    return _msg(b"E", _fields(severity, sqlstate, message, position, detail, hint))


def notice_response(message: str, *, severity: str = "NOTICE", sqlstate: str = "00000",
                    detail: str | None = None, hint: str | None = None) -> bytes:
    return _msg(b"N", _fields(severity, sqlstate, message, None, detail, hint))
