"""The one registry of wire types: DuckDB/Arrow type -> PostgreSQL type OID, and the text and
binary encoders (whole Arrow columns -> bytes per value) and parameter decoders for each.

Output matches what PostgreSQL 15 sends (``t``/``f`` booleans, NUMERIC 1700 for decimals, ISO
timestamps, ``postgres`` IntervalStyle, ``{...}`` arrays).
"""
from __future__ import annotations

import datetime as dt
import math
import re
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Callable

import pyarrow as pa

from dialect.names import pg_type_name
from executor.pg_text import (PG_EPOCH_DAYS, PG_EPOCH_US, TEXT_LIKE,  # noqa: F401
                              binary_fast_column, interval_text, text_column, zone)

from gateway.pgwire.errors import InvalidTextRepresentation, FeatureNotSupported, PgError

PG_EPOCH_DATE = dt.date(2000, 1, 1)
PG_EPOCH = dt.datetime(2000, 1, 1)
PG_EPOCH_TZ = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
_UTC = dt.timezone.utc


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str          # pg_type.typname
    sql_name: str      # what format_type() prints
    typlen: int
    array_oid: int = 0
    elem_oid: int = 0
    category: str = "U"
    duckdb: str = "VARCHAR"   # the DuckDB type a cast to this type becomes


# --------------------------------------------------------------------------- the type table
_T = PgType
TYPES: list[PgType] = [
    _T(16, "bool", "boolean", 1, 1000, category="B", duckdb="BOOLEAN"),
    _T(17, "bytea", "bytea", -1, 1001, category="U", duckdb="BLOB"),
    _T(18, "char", '"char"', 1, 1002, category="Z", duckdb="VARCHAR"),
    _T(19, "name", "name", 64, 1003, category="S", duckdb="VARCHAR"),
    _T(20, "int8", "bigint", 8, 1016, category="N", duckdb="BIGINT"),
    _T(21, "int2", "smallint", 2, 1005, category="N", duckdb="SMALLINT"),
    _T(22, "int2vector", "int2vector", -1, 1006, elem_oid=21, category="A", duckdb="SMALLINT[]"),
    _T(23, "int4", "integer", 4, 1007, category="N", duckdb="INTEGER"),
    _T(24, "regproc", "regproc", 4, 1008, category="N", duckdb="VARCHAR"),
    _T(25, "text", "text", -1, 1009, category="S", duckdb="VARCHAR"),
    _T(26, "oid", "oid", 4, 1028, category="N", duckdb="UINTEGER"),
    _T(28, "xid", "xid", 4, 1011, category="U", duckdb="BIGINT"),
    _T(30, "oidvector", "oidvector", -1, 1013, elem_oid=26, category="A", duckdb="UINTEGER[]"),
    _T(114, "json", "json", -1, 199, category="U", duckdb="JSON"),
    _T(142, "xml", "xml", -1, 143, category="U", duckdb="VARCHAR"),
    _T(700, "float4", "real", 4, 1021, category="N", duckdb="FLOAT"),
    _T(701, "float8", "double precision", 8, 1022, category="N", duckdb="DOUBLE"),
    _T(705, "unknown", "unknown", -2, 0, category="X", duckdb="VARCHAR"),
    _T(790, "money", "money", 8, 791, category="N", duckdb="DECIMAL(18,2)"),
    _T(1042, "bpchar", "character", -1, 1014, category="S", duckdb="VARCHAR"),
    _T(1043, "varchar", "character varying", -1, 1015, category="S", duckdb="VARCHAR"),
    _T(1082, "date", "date", 4, 1182, category="D", duckdb="DATE"),
    _T(1083, "time", "time without time zone", 8, 1183, category="D", duckdb="TIME"),
    _T(1114, "timestamp", "timestamp without time zone", 8, 1115, category="D",
       duckdb="TIMESTAMP"),
    _T(1184, "timestamptz", "timestamp with time zone", 8, 1185, category="D",
       duckdb="TIMESTAMPTZ"),
    _T(1186, "interval", "interval", 16, 1187, category="T", duckdb="INTERVAL"),
    _T(1266, "timetz", "time with time zone", 12, 1270, category="D", duckdb="TIMETZ"),
    _T(1560, "bit", "bit", -1, 1561, category="V", duckdb="BIT"),
    _T(1562, "varbit", "bit varying", -1, 1563, category="V", duckdb="BIT"),
    _T(1700, "numeric", "numeric", -1, 1231, category="N", duckdb="DECIMAL(38,10)"),
    _T(2205, "regclass", "regclass", 4, 2210, category="N", duckdb="UINTEGER"),
    _T(2206, "regtype", "regtype", 4, 2211, category="N", duckdb="UINTEGER"),
    _T(2950, "uuid", "uuid", 16, 2951, category="U", duckdb="UUID"),
    _T(3802, "jsonb", "jsonb", -1, 3807, category="U", duckdb="JSON"),
    _T(2249, "record", "record", -1, 2287, category="P", duckdb="VARCHAR"),
    _T(2278, "void", "void", 4, 0, category="P", duckdb="VARCHAR"),
]
BY_OID: dict[int, PgType] = {t.oid: t for t in TYPES}
BY_NAME: dict[str, PgType] = {t.name: t for t in TYPES}
for _t in list(TYPES):
    if _t.array_oid and _t.array_oid not in BY_OID:
        _arr = PgType(_t.array_oid, "_" + _t.name, _t.sql_name + "[]", -1, 0, elem_oid=_t.oid,
                      category="A", duckdb=_t.duckdb + "[]")
        TYPES.append(_arr)
        BY_OID[_arr.oid] = _arr
        BY_NAME[_arr.name] = _arr

def lookup_type_name(name: str) -> PgType | None:
    """Resolve a SQL type spelling (``int4``, ``integer[]``, ``pg_catalog.text``) to a PgType."""
    n, arr = pg_type_name(name)
    base = BY_NAME.get(n)
    if base is None:
        return None
    return BY_OID.get(base.array_oid) if arr else base


# DuckDB type name (str(DuckDBPyType) / duckdb_columns().data_type) -> pg type name
_DUCK_SCALARS = {
    "BOOLEAN": "bool", "TINYINT": "int2", "SMALLINT": "int2", "UTINYINT": "int2",
    # UINTEGER is how the catalog stores oids (and what ::oid becomes), so it is oid on the wire.
    "INTEGER": "int4", "USMALLINT": "int4", "BIGINT": "int8", "UINTEGER": "oid",
    "UBIGINT": "numeric", "HUGEINT": "numeric", "UHUGEINT": "numeric", "VARINT": "numeric",
    "BIGNUM": "numeric", "FLOAT": "float4", "DOUBLE": "float8", "VARCHAR": "text",
    "BLOB": "bytea", "DATE": "date", "TIME": "time", "TIME WITH TIME ZONE": "timetz",
    "TIMESTAMP": "timestamp", "TIMESTAMP_S": "timestamp", "TIMESTAMP_MS": "timestamp",
    "TIMESTAMP_NS": "timestamp", "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "INTERVAL": "interval", "UUID": "uuid", "JSON": "json", "BIT": "varbit", "NULL": "text",
    "\"NULL\"": "text",
}


def duck_to_pg(duck_type: str) -> PgType:
    """Map a DuckDB type spelling to the PostgreSQL type the wire reports."""
    t = duck_type.strip()
    if t.endswith("[]"):
        elem = duck_to_pg(t[:-2])
        return BY_OID.get(elem.array_oid) or BY_NAME["text"]
    if re.match(r"^[A-Z_ ]+\[\d+\]$", t):   # fixed-size ARRAY
        elem = duck_to_pg(t[:t.rindex("[")])
        return BY_OID.get(elem.array_oid) or BY_NAME["text"]
    if t.startswith("DECIMAL"):
        return BY_NAME["numeric"]
    return BY_NAME[_DUCK_SCALARS.get(t, "text")]


def duck_typmod(duck_type: str) -> int:
    m = re.match(r"DECIMAL\((\d+),\s*(\d+)\)", duck_type)
    if m:
        return ((int(m.group(1)) << 16) | int(m.group(2))) + 4
    return -1


def type_oid_case_sql(column: str) -> str:
    """A SQL CASE expression mapping a DuckDB type-name column to an OID (used by pg_catalog)."""
    whens = [f"WHEN {column} = '{k}' THEN {BY_NAME[v].oid}" for k, v in _DUCK_SCALARS.items()
             if '"' not in k]
    arr = [f"WHEN {column} = '{k}[]' THEN {BY_NAME[v].array_oid}"
           for k, v in _DUCK_SCALARS.items() if '"' not in k and BY_NAME[v].array_oid]
    return ("CASE " + " ".join(whens + arr) +
            f" WHEN {column} LIKE 'DECIMAL%[]' THEN 1231 WHEN {column} LIKE 'DECIMAL%' THEN 1700"
            " ELSE 25 END")


# --------------------------------------------------------------------------- binary output
def _numeric_binary(d: Decimal) -> bytes:
    """A numeric in PostgreSQL's binary form: base-10000 digit groups around the decimal
    point, the first group's weight, a sign word and the display scale."""
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if d.is_infinite():
        return struct.pack("!hhHh", 0, 0, 0xF000 if d < 0 else 0xD000, 0)
    sign, digits, exp = d.as_tuple()
    dscale = max(0, -exp)
    s = "".join(map(str, digits))
    if exp >= 0:
        int_part, frac_part = s + "0" * exp, ""
    else:
        s = s.rjust(-exp, "0")                  # 0.00001: five places, one digit
        int_part, frac_part = s[:len(s) + exp], s[len(s) + exp:]
    int_part = int_part.lstrip("0")
    int_part = "0" * ((-len(int_part)) % 4) + int_part
    frac_part = frac_part + "0" * ((-len(frac_part)) % 4)
    groups = [int(int_part[i:i + 4]) for i in range(0, len(int_part), 4)] + \
             [int(frac_part[i:i + 4]) for i in range(0, len(frac_part), 4)]
    weight = len(int_part) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack("!hhHh", len(groups), weight, 0x4000 if sign else 0, dscale) + \
        b"".join(struct.pack("!H", g) for g in groups)


_NUMERIC_SIGNS = {0x0000: "", 0x4000: "-"}
_NUMERIC_SPECIAL = {0xC000: "NaN", 0xD000: "Infinity", 0xF000: "-Infinity"}


def numeric_text(b: bytes) -> str:
    """A numeric's binary form as its exact text; ValueError if it is not one (a bad sign
    word, a digit group of 10000 or more, a wrong length)."""
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", b)
    if sign in _NUMERIC_SPECIAL:
        return _NUMERIC_SPECIAL[sign]
    if sign not in _NUMERIC_SIGNS or ndigits < 0 or dscale < 0 or len(b) != 8 + 2 * ndigits:
        raise ValueError("invalid sign or length in numeric")
    digits = struct.unpack_from(f"!{ndigits}H", b, 8)
    if any(d >= 10000 for d in digits):
        raise ValueError("invalid digit in numeric")
    text = "".join(f"{d:04d}" for d in digits)
    point = 4 * (weight + 1)                  # where the decimal point falls in ``text``
    if point <= 0:
        text, point = "0" * -point + text, 0
    text = text.ljust(point, "0")
    whole, frac = text[:point].lstrip("0") or "0", text[point:]
    frac = (frac + "0" * dscale)[:dscale]
    return _NUMERIC_SIGNS[sign] + whole + ("." + frac if dscale else "")


def _ts_micros(v: dt.datetime) -> int:
    if v.tzinfo is not None:
        d = v - PG_EPOCH_TZ
    else:
        d = v - PG_EPOCH
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


_BIN_PY: dict[int, Callable] = {
    16: lambda v: b"\x01" if v else b"\x00",
    21: lambda v: struct.pack("!h", v),
    23: lambda v: struct.pack("!i", v),
    20: lambda v: struct.pack("!q", v),
    26: lambda v: struct.pack("!I", v),
    700: lambda v: struct.pack("!f", v),
    701: lambda v: struct.pack("!d", v),
    1700: lambda v: _numeric_binary(Decimal(v)),
    25: lambda v: str(v).encode(),
    1043: lambda v: str(v).encode(),
    19: lambda v: str(v).encode(),
    18: lambda v: str(v).encode(),
    1042: lambda v: str(v).encode(),
    114: lambda v: str(v).encode(),
    142: lambda v: str(v).encode(),
    3802: lambda v: b"\x01" + str(v).encode(),
    17: bytes,
    2950: lambda v: uuid.UUID(str(v)).bytes,
    1082: lambda v: struct.pack("!i", (v - PG_EPOCH_DATE).days),
    1083: lambda v: struct.pack("!q", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000
                                + v.microsecond),
    # DuckDB hands TIMETZ over normalised to UTC: the zone is +00
    1266: lambda v: struct.pack("!qi", ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000
                                + v.microsecond, 0),
    1114: lambda v: struct.pack("!q", _ts_micros(v)),
    1184: lambda v: struct.pack("!q", _ts_micros(v if v.tzinfo else v.replace(tzinfo=_UTC))),
    1186: lambda v: struct.pack("!qii", v.nanoseconds // 1000, v.days, v.months),
}


def _array_binary(values: list, elem_oid: int) -> bytes:
    enc = _BIN_PY.get(elem_oid)
    if enc is None:
        raise FeatureNotSupported(f"binary output of arrays of type {elem_oid} is not supported")
    has_null = any(v is None for v in values)
    out = [struct.pack("!iiI", 1, 1 if has_null else 0, elem_oid),
           struct.pack("!ii", len(values), 1)]
    if not values:
        out = [struct.pack("!iiI", 0, 0, elem_oid)]
    for v in values:
        if v is None:
            out.append(b"\xff\xff\xff\xff")
        else:
            b = enc(v)
            out.append(struct.pack("!i", len(b)) + b)
    return b"".join(out)


def binary_column(arr: pa.Array, oid: int) -> pa.Array:
    """Encode a whole Arrow column to PostgreSQL binary format: a binary array."""
    fast = binary_fast_column(arr, oid)
    if fast is not None:
        return fast
    if oid in TEXT_LIKE:                 # a struct or map shown as text, say
        return text_column(arr, oid, _UTC)
    pgt = BY_OID.get(oid)
    if pgt is not None and pgt.elem_oid and pgt.category == "A":
        enc = lambda v: _array_binary(v, pgt.elem_oid)  # noqa: E731
    else:
        enc = _BIN_PY.get(oid)
    if enc is None:
        raise FeatureNotSupported(f"binary output of type {oid} is not supported")
    return pa.array([None if v is None else enc(v) for v in arr.to_pylist()], pa.binary())


def binary_supported(oid: int) -> bool:
    t = BY_OID.get(oid)
    return oid in _BIN_PY or (t is not None and t.elem_oid in _BIN_PY and t.category == "A")


# --------------------------------------------------------------------------- parameter input
_TRUE = {"t", "true", "y", "yes", "on", "1"}
_FALSE = {"f", "false", "n", "no", "off", "0"}


def _parse_bool(s: str) -> bool:
    k = s.strip().lower()
    if k in _TRUE:
        return True
    if k in _FALSE:
        return False
    raise InvalidTextRepresentation(f'invalid input syntax for type boolean: "{s}"')


def _parse_int(s: str) -> int:
    try:
        return int(s.strip())
    except ValueError:
        raise InvalidTextRepresentation(f'invalid input syntax for type integer: "{s}"') from None


def _parse_float(s: str) -> float:
    k = s.strip().lower()
    special = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf,
               "inf": math.inf, "-inf": -math.inf}
    if k in special:
        return special[k]
    try:
        return float(k)
    except ValueError:
        raise InvalidTextRepresentation(
            f'invalid input syntax for type double precision: "{s}"') from None


def _parse_numeric(s: str) -> Decimal:
    try:
        return Decimal(s.strip())
    except InvalidOperation:
        raise InvalidTextRepresentation(f'invalid input syntax for type numeric: "{s}"') from None


def _parse_ts(s: str) -> dt.datetime:
    k = s.strip()
    k = re.sub(r"([+-]\d\d)$", r"\1:00", k)
    try:
        return dt.datetime.fromisoformat(k)
    except ValueError:
        raise InvalidTextRepresentation(
            f'invalid input syntax for type timestamp: "{s}"') from None


def _parse_date(s: str) -> dt.date:
    try:
        return dt.date.fromisoformat(s.strip())
    except ValueError:
        raise InvalidTextRepresentation(f'invalid input syntax for type date: "{s}"') from None


def _parse_bytea(s: str) -> bytes:
    if s.startswith("\\x"):
        return bytes.fromhex(s[2:])
    return s.encode("latin-1").decode("unicode_escape").encode("latin-1")


def parse_array_text(s: str, elem: Callable[[str], object]) -> list:
    """Parse ``{1,2,"a b",NULL}`` (one dimension) into a list of element values."""
    s = s.strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise InvalidTextRepresentation(f'malformed array literal: "{s}"')
    body, out, i = s[1:-1], [], 0
    while i < len(body):
        if body[i] == '"':
            j, buf = i + 1, []
            while j < len(body) and body[j] != '"':
                if body[j] == "\\":
                    j += 1
                buf.append(body[j])
                j += 1
            out.append(elem("".join(buf)))
            i = j + 1
        else:
            j = body.find(",", i)
            j = len(body) if j < 0 else j
            tok = body[i:j].strip()
            out.append(None if tok.upper() == "NULL" else elem(tok))
            i = j
        if i < len(body) and body[i] == ",":
            i += 1
    return out


TEXT_PARSERS: dict[int, Callable[[str], object]] = {
    16: _parse_bool, 21: _parse_int, 23: _parse_int, 20: _parse_int, 26: _parse_int,
    700: _parse_float, 701: _parse_float, 1700: _parse_numeric,
    1114: _parse_ts, 1184: _parse_ts, 1082: _parse_date, 17: _parse_bytea,
}


def _bin_numeric(b: bytes) -> Decimal:
    return Decimal(numeric_text(b))            # exact, however many digits


def _bin_ts(b: bytes) -> dt.datetime:
    (us,) = struct.unpack("!q", b)
    return PG_EPOCH + dt.timedelta(microseconds=us)


def _bin_interval(b: bytes) -> str:
    us, days, months = struct.unpack("!qii", b)
    return interval_text(months, days, us)


def bin_array(b: bytes) -> list:
    ndim, _flags, elem_oid = struct.unpack_from("!iiI", b)
    if ndim == 0:
        return []
    if ndim != 1:
        raise FeatureNotSupported("multi-dimensional array parameters are not supported")
    n, _lb = struct.unpack_from("!ii", b, 12)
    pos, out = 20, []
    dec = BINARY_PARSERS.get(elem_oid, lambda x: x.decode())
    for _ in range(n):
        (ln,) = struct.unpack_from("!i", b, pos)
        pos += 4
        if ln == -1:
            out.append(None)
        else:
            out.append(dec(b[pos:pos + ln]))
            pos += ln
    return out


BINARY_PARSERS: dict[int, Callable[[bytes], object]] = {
    16: lambda b: b != b"\x00",
    21: lambda b: struct.unpack("!h", b)[0],
    23: lambda b: struct.unpack("!i", b)[0],
    20: lambda b: struct.unpack("!q", b)[0],
    26: lambda b: struct.unpack("!I", b)[0],
    700: lambda b: struct.unpack("!f", b)[0],
    701: lambda b: struct.unpack("!d", b)[0],
    1700: _bin_numeric,
    25: lambda b: b.decode(), 1043: lambda b: b.decode(), 19: lambda b: b.decode(),
    1042: lambda b: b.decode(), 18: lambda b: b.decode(), 114: lambda b: b.decode(),
    705: lambda b: b.decode(),
    3802: lambda b: b[1:].decode(),
    17: bytes,
    2950: lambda b: str(uuid.UUID(bytes=b)),
    1082: lambda b: PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", b)[0]),
    1083: lambda b: (dt.datetime.min + dt.timedelta(microseconds=struct.unpack("!q", b)[0])
                     ).time(),
    1114: _bin_ts,
    1184: lambda b: _bin_ts(b).replace(tzinfo=_UTC),
    1186: _bin_interval,
}


def decode_param(raw: bytes | None, oid: int, fmt: int):
    """Turn one Bind parameter into the Python value handed to DuckDB. Bytes that do not
    decode are the client's mistake, as in PostgreSQL: 22021 (not UTF-8), 22P03 (binary),
    22P02 (text), never an internal error."""
    try:
        return _decode_param(raw, oid, fmt)
    except (struct.error, ValueError, ArithmeticError, IndexError) as e:
        if isinstance(e, UnicodeDecodeError) and e.encoding == "utf-8":
            raise PgError('invalid byte sequence for encoding "UTF8"',
                          sqlstate="22021") from None
        name = BY_OID[oid].sql_name if oid in BY_OID else f"oid {oid}"
        if fmt == 1:
            raise PgError(f"incorrect binary data format in bind parameter of type {name}",
                          sqlstate="22P03") from None
        raise InvalidTextRepresentation(f"invalid input syntax for type {name}: {e}") from None


def _decode_param(raw: bytes | None, oid: int, fmt: int):
    if raw is None:
        return None
    pgt = BY_OID.get(oid)
    if fmt == 1:
        if pgt is not None and pgt.category == "A":
            return bin_array(raw)
        dec = BINARY_PARSERS.get(oid)
        if dec is None:
            raise FeatureNotSupported(f"binary input of type {oid} is not supported")
        return dec(raw)
    s = raw.decode("utf-8")
    if pgt is not None and pgt.category == "A" and pgt.elem_oid:
        return parse_array_text(s, TEXT_PARSERS.get(pgt.elem_oid, str))
    parser = TEXT_PARSERS.get(oid)
    return parser(s) if parser else s
