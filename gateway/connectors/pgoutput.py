"""Decoder of pgoutput's messages (protocol version 1): ``decode`` of one XLogData payload gives one
tuple; values are None (NULL), str (text), bytes (binary) or UNCHANGED (an unchanged TOASTed
value), times are µs since the Unix epoch, and a payload it cannot read raises ValueError."""
from __future__ import annotations

import struct
from typing import NamedTuple

PG_EPOCH_US = 946_684_800_000_000   # 2000-01-01, pgoutput's epoch, in Unix µs

TRUNCATE_CASCADE = 1            # Truncate.options bits
TRUNCATE_RESTART_IDENTITY = 2


class _Unchanged:
    """An UPDATE's unchanged TOASTed column: pgoutput sends 'u' instead of the value."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"           # pickles and copies as the one module-level instance


UNCHANGED = _Unchanged()


class Begin(NamedTuple):
    final_lsn: int
    commit_time_us: int
    xid: int


class Commit(NamedTuple):
    flags: int
    commit_lsn: int
    end_lsn: int                 # what to confirm with send_status once the transaction is kept
    commit_time_us: int


class Origin(NamedTuple):
    commit_lsn: int
    name: str


class RelColumn(NamedTuple):
    key: bool                    # part of the replica identity
    name: str
    type_oid: int
    typmod: int


class Relation(NamedTuple):
    oid: int
    namespace: str               # "" for pg_catalog
    name: str
    replica_identity: str        # d default, n nothing, f full, i index
    columns: tuple[RelColumn, ...]


class Type(NamedTuple):
    oid: int
    namespace: str
    name: str


class Insert(NamedTuple):
    oid: int
    new: tuple


class Update(NamedTuple):
    oid: int
    old: tuple | None            # the old key ('K') or whole old row ('O'), when sent
    old_kind: str | None
    new: tuple


class Delete(NamedTuple):
    oid: int
    old: tuple
    old_kind: str                # 'K' key columns only (others None), 'O' the whole row


class Truncate(NamedTuple):
    options: int                 # TRUNCATE_CASCADE | TRUNCATE_RESTART_IDENTITY
    oids: tuple[int, ...]


class Message(NamedTuple):
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I32 = struct.Struct(">i").unpack_from
_BEGIN = struct.Struct(">QqI").unpack_from
_COMMIT = struct.Struct(">BQQq").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_COLUMN_TYPE = struct.Struct(">Ii").unpack_from
_TRUNCATE = struct.Struct(">IB").unpack_from
_MESSAGE = struct.Struct(">BQ").unpack_from

_TEXT, _BINARY = ord("t"), ord("b")
_CONSTANT_VALUES = {ord("n"): None, ord("u"): UNCHANGED}
_OLD_KINDS = {ord("K"): "K", ord("O"): "O"}
_NEW = ord("N")


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int) -> tuple[tuple, int]:
    """TupleData at ``pos`` -> (values, the position after it)."""
    count = _U16(buf, pos)[0]
    pos += 2
    values = []
    append = values.append
    # the hot loop of a change: text first, and no call per column
    for _ in range(count):
        kind = buf[pos]
        if kind == _TEXT or kind == _BINARY:
            end = pos + 5 + _I32(buf, pos + 1)[0]
            value = buf[pos + 5:end]
            append(value.decode() if kind == _TEXT else value)
            pos = end
        elif kind in _CONSTANT_VALUES:
            append(_CONSTANT_VALUES[kind])
            pos += 1
        else:
            raise ValueError(f"unknown tuple value kind {bytes([kind])!r}")
    if pos > len(buf):
        raise ValueError("tuple data runs past the end of the message")
    return tuple(values), pos


def _expect_new(buf: bytes, pos: int) -> tuple:
    if buf[pos] != _NEW:
        raise ValueError(f"expected 'N' at {pos}, got {bytes([buf[pos]])!r}")
    return _tuple(buf, pos + 1)[0]


def _begin(buf: bytes) -> Begin:
    final_lsn, commit_time, xid = _BEGIN(buf, 1)
    return Begin(final_lsn, commit_time + PG_EPOCH_US, xid)


def _commit(buf: bytes) -> Commit:
    flags, commit_lsn, end_lsn, commit_time = _COMMIT(buf, 1)
    return Commit(flags, commit_lsn, end_lsn, commit_time + PG_EPOCH_US)


def _origin(buf: bytes) -> Origin:
    return Origin(_U64(buf, 1)[0], _cstring(buf, 9)[0])


def _relation(buf: bytes) -> Relation:
    oid = _U32(buf, 1)[0]
    namespace, pos = _cstring(buf, 5)
    name, pos = _cstring(buf, pos)
    identity = chr(buf[pos])
    count = _U16(buf, pos + 1)[0]
    pos += 3
    columns = []
    for _ in range(count):
        flags = buf[pos]
        column, pos = _cstring(buf, pos + 1)
        type_oid, typmod = _COLUMN_TYPE(buf, pos)
        pos += 8
        columns.append(RelColumn(bool(flags & 1), column, type_oid, typmod))
    return Relation(oid, namespace, name, identity, tuple(columns))


def _type(buf: bytes) -> Type:
    oid = _U32(buf, 1)[0]
    namespace, pos = _cstring(buf, 5)
    return Type(oid, namespace, _cstring(buf, pos)[0])


def _insert(buf: bytes) -> Insert:
    return Insert(_U32(buf, 1)[0], _expect_new(buf, 5))


def _update(buf: bytes) -> Update:
    oid = _U32(buf, 1)[0]
    old_kind = _OLD_KINDS.get(buf[5])
    if old_kind is None:                 # only the new row: the key did not change
        return Update(oid, None, None, _expect_new(buf, 5))
    old, pos = _tuple(buf, 6)
    return Update(oid, old, old_kind, _expect_new(buf, pos))


def _delete(buf: bytes) -> Delete:
    old_kind = _OLD_KINDS.get(buf[5])
    if old_kind is None:
        raise ValueError(f"Delete without 'K' or 'O' tuple: {bytes([buf[5]])!r}")
    return Delete(_U32(buf, 1)[0], _tuple(buf, 6)[0], old_kind)


def _truncate(buf: bytes) -> Truncate:
    count, options = _TRUNCATE(buf, 1)
    return Truncate(options, struct.unpack_from(f">{count}I", buf, 6))


def _message(buf: bytes) -> Message:
    flags, lsn = _MESSAGE(buf, 1)
    prefix, pos = _cstring(buf, 10)
    size = _U32(buf, pos)[0]
    content = buf[pos + 4:pos + 4 + size]
    if len(content) != size:
        raise ValueError("message content runs past the end of the message")
    return Message(bool(flags & 1), lsn, prefix, content)


_DECODERS = {
    ord("B"): _begin, ord("C"): _commit, ord("O"): _origin, ord("R"): _relation,
    ord("Y"): _type, ord("I"): _insert, ord("U"): _update, ord("D"): _delete,
    ord("T"): _truncate, ord("M"): _message,
}


def decode(payload: bytes) -> (Begin | Commit | Origin | Relation | Type | Insert | Update
                               | Delete | Truncate | Message):
    """One pgoutput message (an XLogData payload) -> its tuple."""
    if not payload:
        raise ValueError("empty pgoutput message")
    decoder = _DECODERS.get(payload[0])
    if decoder is None:
        raise ValueError(f"unknown pgoutput message type {payload[:1]!r}")
    try:
        return decoder(payload)
    except (struct.error, IndexError) as e:
        raise ValueError(f"truncated pgoutput {payload[:1]!r} message: {e}") from e
