"""COPY data formats: PostgreSQL's text format (tab-separated, ``\\N`` nulls, backslash escapes)
and CSV, both ways, on whole Arrow columns. Parsing yields an Arrow table of strings that
DuckDB casts on INSERT; formatting yields the CopyData messages, one a row."""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from executor.pg_text import (ENCODED, binary_fast, copy_encoder, copy_lines,  # noqa: F401
                              copy_messages, csv_field, encoded_bytes,  # (re-exported)
                              schema_text)
from gateway.pgwire import messages as M
from gateway.pgwire.errors import BadCopyFormat

_ESC = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_ESC_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)")


def _unescape_one(m: re.Match) -> str:
    s = m.group(1)
    if s[0] == "x" and len(s) > 1:      # a bare \x, no hex digit after it, is a plain x
        return chr(int(s[1:], 16))
    if s[0].isdigit():
        return chr(int(s, 8))
    return _ESC.get(s, s)


def _unescape(col: pa.Array) -> pa.Array:
    """Backslash escapes, decoded only in the values that have any (usually none)."""
    has = pc.fill_null(pc.match_substring(col, "\\"), False)
    if not pc.any(has).as_py():
        return col
    fixed = [_ESC_RE.sub(_unescape_one, v) for v in pc.filter(col, has).to_pylist()]
    return pc.replace_with_mask(col, has, pa.array(fixed, pa.string()))


def _read(data: bytes, ncols: int, parse: pacsv.ParseOptions, null: str, header: bool,
          quoted_null: bool) -> pa.Table:
    names = [f"c{i}" for i in range(ncols)]
    opts = pacsv.ReadOptions(column_names=names, skip_rows=1 if header else 0,
                             block_size=max(1 << 20, min(len(data) + 1, 64 << 20)))
    conv = pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                null_values=[null], strings_can_be_null=True,
                                quoted_strings_can_be_null=quoted_null)
    try:
        return pacsv.read_csv(pa.py_buffer(data), read_options=opts, parse_options=parse,
                              convert_options=conv)
    except pa.ArrowInvalid as e:
        msg = str(e)
        m = re.search(r"Expected (\d+) columns, got (\d+): (.*)", msg)
        if m:
            kind = "extra data after last expected column" if int(m.group(2)) > ncols \
                else "missing data for column"
            raise BadCopyFormat(kind, detail=f"COPY line: {m.group(3)[:80]!r}") from None
        raise BadCopyFormat(f"invalid COPY data: {msg.splitlines()[0]}") from None


def _strip_end_marker(data: bytes) -> bytes:
    if data.endswith(b"\\.\n"):
        return data[:-3]
    if data.endswith(b"\\.\r\n"):
        return data[:-4]
    return data


def parse_text(data: bytes, ncols: int, delimiter: str, null: str) -> pa.Table:
    data = _strip_end_marker(data)
    if not data:
        return pa.table({f"c{i}": pa.array([], pa.string()) for i in range(ncols)})
    parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=False, escape_char=False,
                               double_quote=False, ignore_empty_lines=False)
    table = _read(data, ncols, parse, null, False, True)
    return pa.table({n: _unescape(table.column(n).combine_chunks())
                     for n in table.column_names})


def parse_csv(data: bytes, ncols: int, delimiter: str, null: str, quote: str, escape: str,
              header: bool) -> pa.Table:
    data = _strip_end_marker(data)
    parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=quote,
                               escape_char=escape if escape != quote else False,
                               double_quote=escape == quote, newlines_in_values=True)
    return _read(data, ncols, parse, null, header, False)


def header_line(fields, delimiter: str, quote: str) -> bytes:
    """CSV HEADER's line of column names."""
    names = pa.array([f.name for f in fields], pa.string())
    line = delimiter.join(csv_field(names, pa.string(), delimiter, quote, "").to_pylist())
    return (line + "\n").encode()


def copy_header(fields, delimiter: str, quote: str) -> bytes:
    """CSV HEADER's line of column names, as a CopyData message."""
    return M.copy_data(header_line(fields, delimiter, quote))


def copy_file_data(fields, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
                   quote: str) -> bytes:
    """The rows of ``table`` as the contents of a COPY … TO file: lines ended by newlines."""
    if not fields or not table.num_rows:
        return b""
    lines = copy_lines([f.type_oid for f in fields], table, tz, csv, delimiter, null, quote)
    whole = pc.binary_join(pa.ListArray.from_arrays([0, len(lines)], lines), b"\n")
    return whole[0].as_py() + b"\n"
