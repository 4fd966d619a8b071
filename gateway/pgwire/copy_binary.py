"""COPY's binary format both ways: rows out as PostgreSQL sends them (the signature before the
first row, a CopyData message a row, the -1 trailer), built whole columns at a time; data in
parsed into typed Arrow columns, read by each target column's type as PostgreSQL's receive
functions do (22P03 where the bytes do not fit it)."""
from __future__ import annotations

import struct
from array import array

import numpy as np
import pyarrow as pa

from gateway.pgwire import messages as M
from gateway.pgwire import types as T
from gateway.pgwire.errors import BadCopyFormat, FeatureNotSupported, PgError

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + struct.pack("!ii", 0, 0)          # no flags, no header extension
TRAILER = struct.pack("!h", -1)


def check_types(fields) -> None:
    """Refuse, before any row goes, a result with a column binary COPY cannot send."""
    for f in fields:
        if not T.binary_supported(f.type_oid):
            raise FeatureNotSupported(f'binary COPY of column "{f.name}" (type '
                                      f"{_type_name(f.type_oid)}) is not supported",
                                      hint="Use COPY … (FORMAT text) or (FORMAT csv).")


def _type_name(oid: int) -> str:
    t = T.BY_OID.get(oid)
    return t.sql_name if t is not None else str(oid)


class BinaryRows:
    """The CopyData messages of one binary COPY TO: ``rows`` for each batch, ``end`` once;
    the signature goes in front of the first message, as PostgreSQL sends it."""

    def __init__(self, fields):
        check_types(fields)
        self.fields = fields
        self.started = False

    def _first(self, messages: bytes) -> bytes:
        """The signature put into the first message's data (its length grows by as much)."""
        if self.started:
            return messages
        self.started = True
        n = struct.unpack_from("!i", messages, 1)[0]
        return b"d" + struct.pack("!i", n + len(HEADER)) + HEADER + messages[5:]

    def _encoded(self, table: pa.Table, tag: int | None) -> bytes:
        cols = [T.binary_column(_column(table, i), f.type_oid)
                for i, f in enumerate(self.fields)]
        return M.data_rows(cols, tag=tag)

    def rows(self, table: pa.Table) -> bytes:
        if not table.num_rows:
            return b""
        return self._first(self._encoded(table, ord("d")))

    def forward(self, messages: bytes) -> bytes:
        """Rows already encoded as CopyData messages (by the back end), sent as they are."""
        return self._first(messages) if messages else b""

    def end(self) -> bytes:
        return self._first(M.copy_data(TRAILER))

    def file_data(self, table: pa.Table) -> bytes:
        """The contents of a COPY … TO 'file' (FORMAT binary): signature, rows, trailer."""
        body = self._encoded(table, None) if table.num_rows else b""
        return HEADER + body + TRAILER


def _column(table: pa.Table, i: int) -> pa.Array:
    col = table.column(i)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


# --------------------------------------------------------------------------- binary in
def _bad(msg: str) -> PgError:
    return PgError(msg, sqlstate="22P03")


def _walk(data: bytes, ncols: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Where each field's bytes start and how long they are (-1: NULL), row by row, as
    (starts, lengths) of shape (rows, ncols), and the number of rows."""
    if data[:len(SIGNATURE)] != SIGNATURE:
        raise BadCopyFormat("COPY file signature not recognized")
    if len(data) < 19:
        raise BadCopyFormat("invalid COPY file header (missing flags)")
    flags, ext = struct.unpack_from("!ii", data, 11)
    if ext < 0 or 19 + ext > len(data):
        raise BadCopyFormat("invalid COPY file header (wrong length)")
    if flags & (1 << 16):
        raise FeatureNotSupported("COPY with OIDs is not supported")
    if flags & ~0xFFFF & ~(1 << 16):
        raise BadCopyFormat("unrecognized critical flags in COPY file header")
    pos = 19 + ext
    starts, lengths = array("q"), array("i")
    h, i = struct.Struct("!h").unpack_from, struct.Struct("!i").unpack_from
    end = len(data)
    try:
        while pos < end:                   # the -1 trailer may be left out, as in PostgreSQL
            (n,) = h(data, pos)
            pos += 2
            if n == -1:
                if pos != end:
                    raise BadCopyFormat("received copy data after EOF marker")
                break
            if n != ncols:
                raise BadCopyFormat(f"row field count is {n}, expected {ncols}")
            for _ in range(n):
                (ln,) = i(data, pos)
                pos += 4
                if ln < -1:
                    raise BadCopyFormat("invalid field size")
                starts.append(pos)
                lengths.append(ln)
                if ln > 0:
                    pos += ln
            if pos > end:
                raise struct.error
    except struct.error:
        raise BadCopyFormat("unexpected EOF in COPY data") from None
    rows = len(lengths) // ncols if ncols else 0
    return (np.frombuffer(starts, np.int64).reshape(rows, ncols),
            np.frombuffer(lengths, np.int32).reshape(rows, ncols), rows)


# fixed-width binary forms: width, numpy big-endian dtype, Arrow type of the decoded column
_FIXED = {
    16: (1, ">u1", pa.bool_()), 21: (2, ">i2", pa.int16()), 23: (4, ">i4", pa.int32()),
    20: (8, ">i8", pa.int64()), 26: (4, ">u4", pa.uint32()), 700: (4, ">f4", pa.float32()),
    701: (8, ">f8", pa.float64()), 1082: (4, ">i4", pa.date32()),
    1083: (8, ">i8", pa.time64("us")), 1114: (8, ">i8", pa.timestamp("us")),
    1184: (8, ">i8", pa.timestamp("us", tz="UTC")),
}
_SHIFT = {1082: T.PG_EPOCH_DAYS, 1114: T.PG_EPOCH_US, 1184: T.PG_EPOCH_US}
_GATHER_ROWS = 1 << 14
# variable-width forms that are bytes as they are: (skip, Arrow type)
_BYTES = {**{oid: (0, pa.string()) for oid in T.TEXT_LIKE | {142}},
          3802: (1, pa.string()), 17: (0, pa.binary())}


def _fixed_column(buf: np.ndarray, starts, lengths, oid: int) -> pa.Array:
    width, dtype, typ = _FIXED[oid]
    null = lengths < 0
    if ((lengths != width) & ~null).any():
        raise _bad(f"incorrect binary data format in COPY column of type {_type_name(oid)}")
    at = np.where(null, 0, starts)
    raw = buf[at[:, None] + np.arange(width)].copy().view(dtype).ravel()
    values = raw.astype(dtype[1:] if oid != 16 else np.bool_)
    if oid in _SHIFT:
        values = _shifted(values, _SHIFT[oid], null, oid)
    mask = null if null.any() else None
    return pa.array(values, typ, mask=mask)


def _shifted(values: np.ndarray, shift: int, null: np.ndarray, oid: int) -> np.ndarray:
    """PostgreSQL's 2000-based days or microseconds as Unix-based ones: its ±infinity (the
    type's largest and smallest values) as DuckDB's (± the largest), and a value whose shift
    would not fit 22008, as PostgreSQL reports one out of range."""
    info = np.iinfo(values.dtype)
    wide = np.where(null, 0, values.astype(np.int64))      # a NULL's bytes are not a value
    plus, minus = wide == info.max, wide == info.min
    if ((wide > info.max - shift) & ~plus | (wide < -info.max - shift) & ~minus).any():
        raise PgError(f"{_type_name(oid)} out of range", sqlstate="22008")
    shifted = np.where(plus, info.max, np.where(minus, -info.max, wide + shift))
    return shifted.astype(values.dtype)


def _bytes_column(buf: np.ndarray, starts, lengths, oid: int) -> pa.Array:
    skip, typ = _BYTES[oid]
    null = lengths < 0
    if skip and ((lengths < skip) & ~null).any():
        raise _bad("incorrect binary data format in COPY column of type jsonb")
    size = np.where(null, 0, lengths - skip).astype(np.int64)
    first = np.where(null, 0, starts + skip)
    offsets = np.zeros(len(size) + 1, np.int64)
    np.cumsum(size, out=offsets[1:])
    # each value's bytes gathered vectorised: byte k of the output comes from first[row] + k
    # minus the row's offset; in slices of rows, so the index (8 bytes a byte) stays small
    values = np.empty(offsets[-1], np.uint8)
    for lo in range(0, len(size), _GATHER_ROWS):
        hi = min(lo + _GATHER_ROWS, len(size))
        index = np.repeat(first[lo:hi] - offsets[lo:hi], size[lo:hi]) + \
            np.arange(offsets[lo], offsets[hi])
        values[offsets[lo]:offsets[hi]] = buf[index]
    validity = pa.array(~null).buffers()[1] if null.any() else None
    large = pa.large_string() if typ == pa.string() else pa.large_binary()
    out = pa.Array.from_buffers(large, len(size), [validity, pa.py_buffer(offsets),
                                                   pa.py_buffer(values.tobytes())],
                                null_count=int(null.sum()))
    if typ == pa.string():
        try:
            out.validate(full=True)
        except pa.ArrowInvalid:
            raise PgError("invalid byte sequence for encoding \"UTF8\"",
                          sqlstate="22021") from None
    return out


def _each_column(data: bytes, starts, lengths, oid: int) -> pa.Array:
    """Types whose binary form needs Python per value (numeric, interval, uuid, arrays)."""
    parse = T.numeric_text if oid == 1700 else T.BINARY_PARSERS.get(oid)
    pgt = T.BY_OID.get(oid)
    if parse is None and pgt is not None and pgt.category == "A":
        parse = T.bin_array
    if parse is None:
        raise FeatureNotSupported(f"binary COPY into a column of type {_type_name(oid)} "
                                  "is not supported",
                                  hint="Use COPY … (FORMAT text) or (FORMAT csv).")
    values = []
    try:
        for s, n in zip(starts.tolist(), lengths.tolist()):
            values.append(None if n < 0 else parse(data[s:s + n]))
    except (struct.error, ValueError, IndexError, UnicodeDecodeError, ArithmeticError):
        raise _bad(f"incorrect binary data format in COPY column of type "
                   f"{_type_name(oid)}") from None
    if oid in (1186, 1700):            # their text, for the column's CAST
        return pa.array(values, pa.string())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        raise _bad(f"incorrect binary data format in COPY column of type "
                   f"{_type_name(oid)}") from None


def parse(data: bytes, oids: list[int]) -> pa.Table:
    """COPY FROM STDIN (FORMAT binary) data as a table of columns ``c0``, ``c1``, … decoded
    by the target columns' types ``oids``."""
    starts, lengths, rows = _walk(data, len(oids))
    buf = np.frombuffer(data, np.uint8)
    cols = {}
    for k, oid in enumerate(oids):
        s, n = starts[:, k], lengths[:, k]
        if oid in _FIXED:
            cols[f"c{k}"] = _fixed_column(buf, s, n, oid)
        elif oid in _BYTES:
            cols[f"c{k}"] = _bytes_column(buf, s, n, oid)
        else:
            cols[f"c{k}"] = _each_column(data, s, n, oid)
    if not oids:
        return pa.table({})
    return pa.table(cols) if rows else pa.table(
        {f"c{k}": pa.array([], pa.string()) for k in range(len(oids))})
