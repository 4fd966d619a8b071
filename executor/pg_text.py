"""PostgreSQL's text output of whole Arrow columns (and the binary forms that are one Arrow step),
and the rows built from them: COPY's text, CSV and binary rows as CopyData messages, DataRow
messages. Shared by the gateway and the back end, which encodes a continuous COPY's rows where
the query produces them so that the gateway only forwards their bytes."""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import uuid
from decimal import Decimal
from functools import partial
from typing import Callable
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _float_text(v: float) -> str:
    """Shortest round-trip digits as PostgreSQL 12+ prints them: scientific notation below
    1e-4 and from 1e15 on (Python's repr switches at 1e16), ``Infinity``/``NaN``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    r = repr(v)
    if "e" not in r and abs(v) >= 1e15:
        sign, body = ("-", r[1:]) if r[0] == "-" else ("", r)
        whole, _, frac = body.partition(".")
        digits = (whole + frac.rstrip("0")).rstrip("0")
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e+{len(whole) - 1:02d}"
    return r[:-2] if r.endswith(".0") else r


def _float4_text(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return _float_text(v)
    r = str(np.float32(v))
    if r.endswith(".0"):
        r = r[:-2]
    return r


def _frac(us: int) -> str:
    return ("." + f"{us:06d}".rstrip("0")) if us else ""


def _ts_text(v: dt.datetime) -> str:
    return v.strftime("%Y-%m-%d %H:%M:%S") + _frac(v.microsecond) if v.year >= 1000 else \
        f"{v.year:04d}-{v.month:02d}-{v.day:02d} {v.hour:02d}:{v.minute:02d}:{v.second:02d}" \
        + _frac(v.microsecond)


def _offset_text(off: dt.timedelta) -> str:
    secs = int(off.total_seconds())
    sign = "+" if secs >= 0 else "-"
    secs = abs(secs)
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    out = f"{sign}{h:02d}"
    if m or s:
        out += f":{m:02d}"
    if s:
        out += f":{s:02d}"
    return out


def interval_text(months: int, days: int, micros: int) -> str:
    parts = []
    years, mons = divmod(abs(months), 12)
    sign = -1 if months < 0 else 1
    if years:
        parts.append(f"{sign * years} year" + ("s" if sign * years != 1 else ""))
    if mons:
        parts.append(f"{sign * mons} mon" + ("s" if sign * mons != 1 else ""))
    if days:
        parts.append(f"{days} day" + ("s" if days != 1 else ""))
    if micros or not parts:
        neg = micros < 0
        micros = abs(micros)
        secs, us = divmod(micros, 1_000_000)
        h, rem = divmod(secs, 3600)
        m, s = divmod(rem, 60)
        t = f"{h:02d}:{m:02d}:{s:02d}" + _frac(us)
        parts.append(("-" if neg else "") + t)
    return " ".join(parts)


def _array_elem_text(v, enc) -> str:
    if v is None:
        return "NULL"
    s = enc(v)
    if s == "" or s.upper() == "NULL" or re.search(r'[{}",\\\s]', s):
        s = '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s


def _py_text(v, tz: dt.tzinfo) -> str:
    """Text form of one Python value as PostgreSQL prints it."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return _tstz_text(v, tz)
    return _PY_TEXT.get(type(v), str)(v)


def _tstz_text(v: dt.datetime, tz: dt.tzinfo) -> str:
    loc = v.astimezone(tz)
    return _ts_text(loc) + _offset_text(loc.utcoffset())


def _list_text(v, tz) -> str:
    return "{" + ",".join(_array_elem_text(x, lambda y: _py_text(y, tz)) for x in v) + "}"


_PY_TEXT: dict[type, Callable] = {
    bool: lambda v: "t" if v else "f",
    float: _float_text,
    dt.datetime: _ts_text,
    dt.date: lambda v: v.isoformat(),
    dt.time: lambda v: v.strftime("%H:%M:%S") + _frac(v.microsecond),
    dt.timedelta: lambda v: interval_text(0, v.days, v.seconds * 1_000_000 + v.microseconds),
    bytes: lambda v: "\\x" + v.hex(),
    Decimal: lambda v: str(v),
    uuid.UUID: str,
    dict: lambda v: json.dumps(v, default=str),
    pa.MonthDayNano: lambda v: interval_text(v.months, v.days, v.nanoseconds // 1000),
}


def cast_text(arr: pa.Array) -> pa.Array:
    """Vectorised: Arrow's own string cast already prints what PostgreSQL prints."""
    return pc.cast(pc.cast(arr, pa.string()), pa.binary())


def _float_column_text(arr: pa.Array) -> pa.Array:
    """Arrow prints the same shortest digits as PostgreSQL but switches to scientific notation
    at other exponents; values outside [1e-4, 1e14) and non-finite ones go through Python."""
    f = _float4_text if arr.type == pa.float32() else _float_text
    out = cast_text(arr)
    a = pc.abs(arr)
    odd = pc.or_kleene(pc.greater_equal(a, 1e14),
                       pc.and_kleene(pc.less(a, 1e-4), pc.not_equal(a, 0)))
    odd = pc.fill_null(pc.or_kleene(odd, pc.is_nan(arr)), False)
    if not pc.any(odd).as_py():
        return out
    fixed = [f(v).encode() for v in pc.filter(arr, odd).to_pylist()]
    return pc.replace_with_mask(out, odd, pa.array(fixed, pa.binary()))


def _timestamp_text(arr: pa.Array) -> pa.Array:
    """'YYYY-MM-DD HH:MM:SS[.ffffff]' with trailing fractional zeros dropped, as a string array.
    Arrow prints every µs timestamp with all six fractional digits, so trimming '0's and
    then a bare '.' off the right is exactly PostgreSQL's form."""
    if arr.type.unit != "us":
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz), safe=False)
    text = pc.ascii_rtrim(pc.cast(arr, pa.string()), "0")
    # a whole second is left with a bare '.', which goes too (one more pass only if any is)
    return pc.ascii_rtrim(text, ".") if pc.any(pc.ends_with(text, ".")).as_py() else text


def _timestamptz_text(arr: pa.Array, tz: dt.tzinfo) -> pa.Array:
    """Local time in the session zone plus its UTC offset; offsets are few, so they are
    formatted once each and gathered."""
    name = getattr(tz, "key", "UTC")
    utc = arr.cast(pa.timestamp("us", tz="UTC"), safe=False)
    local = pc.local_timestamp(utc.cast(pa.timestamp("us", tz=name)))
    offsets = pc.subtract(local.cast(pa.int64()), utc.cast(pa.int64()))
    uniq = pc.unique(offsets)
    labels = pa.array([None if o is None else _offset_text(dt.timedelta(microseconds=o))
                       for o in uniq.to_pylist()], pa.string())
    suffix = pc.take(labels, pc.index_in(offsets, uniq))
    text = pc.binary_join_element_wise(_timestamp_text(local), suffix, "")
    return pc.cast(text, pa.binary())


def text_column(arr: pa.Array, oid: int, tz: dt.tzinfo) -> pa.Array:
    """Encode a whole Arrow column to PostgreSQL text format: a binary array (null = NULL)."""
    t = arr.type
    if pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_string(t) \
            or pa.types.is_large_string(t) or pa.types.is_date32(t):
        return cast_text(arr)
    if pa.types.is_boolean(t):
        return pc.cast(pc.if_else(arr, "t", "f"), pa.binary())
    if pa.types.is_floating(t):
        return _float_column_text(arr)
    if pa.types.is_timestamp(t):
        if t.tz:
            return _timestamptz_text(arr, tz)
        return pc.cast(_timestamp_text(arr), pa.binary())
    if isinstance(t, pa.ExtensionType):
        return text_column(arr.storage if isinstance(arr, pa.ExtensionArray) else arr, oid, tz)
    if oid in (22, 30) and pa.types.is_list(t):       # int2vector, oidvector: "1 2"
        return pc.cast(pc.binary_join(pc.cast(arr, pa.list_(pa.string())), " "), pa.binary())
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        enc = lambda v: _list_text(v, tz)  # noqa: E731
    elif pa.types.is_struct(t) or pa.types.is_map(t):
        enc = lambda v: json.dumps(v if not isinstance(v, list) else dict(v),  # noqa: E731
                                   default=str)
    else:
        enc = lambda v: _py_text(v, tz)  # noqa: E731
    return pa.array([None if v is None else enc(v).encode() for v in arr.to_pylist()],
                    pa.binary())


# the characters PostgreSQL's text format writes with a backslash (besides the delimiter)
_TEXT_ESCAPES = [("\\", "\\\\"), ("\b", "\\b"), ("\f", "\\f"), ("\n", "\\n"),
                 ("\r", "\\r"), ("\t", "\\t"), ("\v", "\\v")]
# the text of these types is digits, signs, '.', ':', ' ', letters and nothing else
_PLAIN_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal,
                pa.types.is_boolean, pa.types.is_date, pa.types.is_timestamp, pa.types.is_time)


def _plain(typ: pa.DataType, *chars: str) -> bool:
    """Whether no value of ``typ`` can print any of ``chars``: its column needs no escaping."""
    return any(check(typ) for check in _PLAIN_TYPES) and \
        not any(c.isalnum() or c in "-+.: " for c in chars)


def _as_string(text: pa.Array) -> pa.Array:
    """Encoded text (binary, valid UTF-8 by construction) seen as a string array: a view, not
    a cast, which would check every byte."""
    return text if pa.types.is_string(text.type) else text.view(pa.string())


def _holds_any(s: pa.Array, chars: str) -> bool:
    """Whether some value of a string array may hold one of ``chars``: its bytes are scanned
    in one go by numpy (a regex per value costs 25 times more). Control characters are
    looked for as a class, so one of them not in ``chars`` answers yes too."""
    data = s.buffers()[2]
    if data is None or len(s) == 0:
        return False
    width = np.int64 if pa.types.is_large_string(s.type) else np.int32
    offsets = np.frombuffer(s.buffers()[1], width)[s.offset:s.offset + len(s) + 1]
    x = np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]]
    if not len(x):
        return False
    if any(ord(c) < 32 for c in chars) and x.min() < 32:
        return True
    return any((x == ord(c)).any() for c in chars if 32 <= ord(c) < 128) or \
        any(ord(c) >= 128 for c in chars)


def _text_field(text: pa.Array, typ: pa.DataType, delimiter: str, null: str) -> pa.Array:
    """A column's text in COPY's text format: backslash escapes, NULL as ``null``."""
    s = _as_string(text)
    escapes = _TEXT_ESCAPES + ([(delimiter, "\\" + delimiter)]
                               if delimiter not in "\b\f\n\r\t\v" else [])
    if not _plain(typ, delimiter) and _holds_any(s, "".join(a for a, _ in escapes)):
        for a, b in escapes:
            s = pc.replace_substring(s, a, b)
    return pc.fill_null(s, null)


def csv_field(text: pa.Array, typ: pa.DataType, delimiter: str, quote: str,
               null: str) -> pa.Array:
    """A column's text in CSV: quoted where it holds the delimiter, the quote or a line
    break, or reads as the NULL string; NULL as ``null``, unquoted."""
    s = _as_string(text)
    if _plain(typ, delimiter, quote) or not _holds_any(s, delimiter + quote + "\n\r"):
        needs = pc.equal(s, null) if null else None
    else:
        special = "[" + re.escape(delimiter + quote) + "\\n\\r]"
        needs = pc.or_(pc.match_substring_regex(s, special), pc.equal(s, null))
    if needs is None or not pc.any(needs).as_py():
        return pc.fill_null(s, null)
    quoted = pc.binary_join_element_wise(quote, pc.replace_substring(s, quote, quote * 2),
                                         quote, "")
    return pc.fill_null(pc.if_else(pc.fill_null(needs, False), quoted, s), null)


def copy_lines(oids: list, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
               quote: str) -> pa.Array:
    """The rows of ``table`` as COPY's text or CSV lines (without line ends), built whole
    columns at a time: its first ``len(oids)`` columns, of those PostgreSQL types."""
    cols = []
    for i, oid in enumerate(oids):
        arr = table.column(i).combine_chunks() if table.column(i).num_chunks != 1 \
            else table.column(i).chunk(0)
        text = text_column(arr, oid, tz)
        cols.append((csv_field(text, arr.type, delimiter, quote, null) if csv
                     else _text_field(text, arr.type, delimiter, null)).view(pa.binary()))
    # each line joined by Arrow's own separator: far fewer pieces per row than joining every
    # value and separator as a piece of its own
    return pc.binary_join_element_wise(*cols, pa.scalar(delimiter.encode(), pa.binary()))


def copy_messages(oids: list, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
                  quote: str) -> bytes:
    """The rows of ``table`` as CopyData messages, one a row as PostgreSQL sends them."""
    if not oids or not table.num_rows:
        return b""
    return copy_data_rows(copy_lines(oids, table, tz, csv, delimiter, null, quote))


# a COPY's rows encoded where they are produced: one CopyData message a row, in one column
ENCODED = pa.schema([pa.field("copy_data", pa.binary())])


def zone(name: str) -> dt.tzinfo:
    """The time zone of an IANA name, UTC for any other."""
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        return dt.timezone.utc


def copy_data_table(table, oids: list, tz: dt.tzinfo, csv: bool, delimiter: str, null: str,
                    quote: str) -> pa.Table:
    """The rows of ``table`` (a table or a record batch) as a table of ``ENCODED``: each
    row's CopyData message, as PostgreSQL sends it, to go to the client unchanged."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    lines = copy_lines(oids, table, tz, csv, delimiter, null, quote)
    return pa.Table.from_arrays([copy_data_messages(lines)], schema=ENCODED)


def schema_text(schema: pa.Schema) -> str:
    """An Arrow schema as text that a JSON message can carry (its IPC form, base64)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def conformed(table, types: list) -> pa.Table:
    """The first ``len(types)`` columns of ``table`` (a table or a record batch) as those
    types: the rows' declared types, which the back end may compute wider or otherwise
    (DuckDB gives ``price * 0.908`` as a decimal where the query declares a double)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    cols = [c if c.type == t else c.cast(t) for c, t in zip(table.columns, types)]
    return pa.Table.from_arrays(cols, names=table.column_names[:len(cols)])


def copy_encoder(oids: list, tz: str, csv: bool, delimiter: str, null: str, quote: str,
                 binary: bool, schema: str):
    """A table's rows -> a table of ``ENCODED``, as a COPY with these options sends them;
    ``schema`` (``schema_text``): the types the rows are declared with, cast to first."""
    if binary:
        encode = partial(copy_binary_table, oids=oids)
    else:
        encode = partial(copy_data_table, oids=oids, tz=zone(tz), csv=csv,
                         delimiter=delimiter, null=null, quote=quote)
    types = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema))).types

    def declared(table) -> pa.Table:
        return encode(conformed(table, types))
    return declared


def binary_fast(oids: list, schema: pa.Schema) -> bool:
    """Whether ``copy_binary_table`` encodes every column of ``schema`` as ``oids``."""
    return all(binary_fast_column(pa.array([], type=f.type), oid) is not None
               for oid, f in zip(oids, schema))


def encoded_bytes(table: pa.Table) -> bytes:
    """The CopyData messages of a table of ``ENCODED``, back to back."""
    return b"".join(back_to_back(chunk) for chunk in table.column(0).chunks)


TEXT_LIKE = {25, 1043, 19, 1042, 18, 114, 142, 705}
PG_EPOCH_US = 946_684_800_000_000      # 2000-01-01 in Unix microseconds
PG_EPOCH_DAYS = 10_957


def _fixed_width(arr: pa.Array, oid: int):
    """(numpy values, big-endian dtype) for types whose binary form is one fixed-width number."""
    t = arr.type
    if oid in (20, 23, 21, 26, 700, 701) and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        dtype = {20: ">i8", 23: ">i4", 21: ">i2", 26: ">u4", 700: ">f4", 701: ">f8"}[oid]
        return pc.fill_null(arr, 0).to_numpy(zero_copy_only=False), dtype
    if oid in (1114, 1184) and pa.types.is_timestamp(t):
        us = arr.cast(pa.timestamp("us", tz=t.tz), safe=False).cast(pa.int64())
        return pc.subtract(pc.fill_null(us, 0), PG_EPOCH_US).to_numpy(), ">i8"
    if oid == 1082 and pa.types.is_date32(t):
        days = pc.fill_null(arr.cast(pa.int32()), 0)
        return pc.subtract(days, PG_EPOCH_DAYS).to_numpy(), ">i4"
    if oid == 16 and pa.types.is_boolean(t):
        return pc.fill_null(arr, False).to_numpy(zero_copy_only=False), ">u1"
    return None, None


def binary_fast_column(arr: pa.Array, oid: int) -> pa.Array | None:
    """A column's PostgreSQL binary form where it needs no Python per value: text-like
    strings (their UTF-8) and types whose binary form is one fixed-width number; None for
    any other (``gateway/pgwire/types.py`` has the rest)."""
    if oid in TEXT_LIKE and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return cast_text(arr)
    values, dtype = _fixed_width(arr, oid)
    if values is None:
        return None
    w = np.dtype(dtype).itemsize
    offsets = np.arange(0, (len(arr) + 1) * w, w, dtype=np.int32)
    out = pa.Array.from_buffers(pa.binary(), len(arr), [
        None, pa.py_buffer(offsets), pa.py_buffer(values.astype(dtype).tobytes())])
    if arr.null_count:
        out = pc.if_else(pc.is_valid(arr), out, pa.scalar(None, pa.binary()))
    return out


def copy_binary_table(table, oids: list) -> pa.Table:
    """The rows of ``table`` (a table or a record batch) as binary COPY's CopyData messages,
    one a row, in a table of ``ENCODED`` (the signature that goes before the first row is the
    gateway's to add). Only for columns ``binary_fast_column`` encodes; ValueError else."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    cols = []
    for i, oid in enumerate(oids):
        col = table.column(i)
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        out = binary_fast_column(arr, oid)
        if out is None:
            raise ValueError(f"no vectorised binary form for type {oid} ({arr.type})")
        cols.append(out)
    return pa.Table.from_arrays([data_row_messages(cols, ord("d"))], schema=ENCODED)


_ROW_HEAD = np.dtype([("tag", "u1"), ("length", ">i4"), ("columns", ">i2")])


def data_row_messages(columns: list, tag: int | None = ord("D")) -> pa.Array:
    """DataRow messages for a batch, built without a Python loop over rows: each column is an
    Arrow binary array of already-encoded values (null = SQL NULL). Each row's header and each
    cell's length word are numpy records; Arrow concatenates header, lengths and values row by
    row: a binary array, one message a row. With ``tag`` ``d`` they are binary COPY's CopyData
    messages, whose data is a DataRow's body; with None, the bodies alone (binary COPY's rows in
    a file). ``columns`` must not be empty."""
    n = len(columns[0])
    parts, total = [], np.full(n, 4 + 2 + 4 * len(columns), np.int64)
    for col in columns:
        col = col.cast(pa.binary()) if col.type != pa.binary() else col
        null = col.is_null().to_numpy(zero_copy_only=False) if col.null_count else None
        if null is not None:
            col = pc.fill_null(col, b"")
        length = pc.binary_length(col).to_numpy()
        if null is not None:
            length = np.where(null, -1, length)
        total += np.maximum(length, 0)
        parts += [fixed_records(length.astype(">i4")), col]
    if tag is None:
        head = np.full(n, len(columns), ">i2")
    else:
        head = np.empty(n, _ROW_HEAD)
        head["tag"], head["length"], head["columns"] = tag, total, len(columns)
    return pc.binary_join_element_wise(fixed_records(head), *parts, b"")


def data_rows(columns: list, tag: int | None = ord("D")) -> bytes:
    """``data_row_messages`` back to back, in one buffer."""
    if not columns or not len(columns[0]):
        return b""
    return back_to_back(data_row_messages(columns, tag))


def fixed_records(values: np.ndarray) -> pa.Array:
    """A numpy array of fixed-size records → a binary array of their bytes, one per row."""
    width = values.dtype.itemsize
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values),
                                                 [None, pa.py_buffer(values.tobytes())])
    return fixed.cast(pa.binary())


def back_to_back(values: pa.Array) -> bytes:
    """The values of a binary array one after another: they already lie so in its data
    buffer, so this is one copy of that stretch."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:values.offset + n + 1]
    return values.buffers()[2][offsets[0]:offsets[-1]].to_pybytes()


_COPY_HEAD = np.dtype([("tag", "u1"), ("length", ">i4")])


def copy_data_messages(lines: pa.Array) -> pa.Array:
    """The CopyData message of each of ``lines`` (a binary array, each line without its
    newline), as PostgreSQL sends it: a binary array, one message a row."""
    head = np.empty(len(lines), _COPY_HEAD)
    head["tag"], head["length"] = ord("d"), pc.binary_length(lines).to_numpy() + 5
    return pc.binary_join_element_wise(fixed_records(head), lines, _NEWLINE, b"")


def copy_data_rows(lines: pa.Array) -> bytes:
    """CopyData messages, one a row, for a whole batch of ``lines``, back to back."""
    return back_to_back(copy_data_messages(lines))


_NEWLINE = pa.scalar(b"\n", pa.binary())
