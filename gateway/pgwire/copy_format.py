"""COPY data formats: PostgreSQL's text format (tab-separated, ``\\N`` nulls, backslash escapes)
and CSV, both ways, on whole Arrow columns. Parsing yields an Arrow table of strings that
DuckDB casts on INSERT; formatting yields the CopyData messages, one a row."""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gateway.pgwire import messages as M
from gateway.pgwire import types as T
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


def _csv_field(text: pa.Array, typ: pa.DataType, delimiter: str, quote: str,
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


def header_line(fields, delimiter: str, quote: str) -> bytes:
    """CSV HEADER's line of column names."""
    names = pa.array([f.name for f in fields], pa.string())
    line = delimiter.join(_csv_field(names, pa.string(), delimiter, quote, "").to_pylist())
    return (line + "\n").encode()


def copy_header(fields, delimiter: str, quote: str) -> bytes:
    """CSV HEADER's line of column names, as a CopyData message."""
    return M.copy_data(header_line(fields, delimiter, quote))


def copy_file_data(fields, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
                   quote: str) -> bytes:
    """The rows of ``table`` as the contents of a COPY … TO file: lines ended by newlines."""
    if not fields or not table.num_rows:
        return b""
    lines = copy_lines(fields, table, tz, csv, delimiter, null, quote)
    whole = pc.binary_join(pa.ListArray.from_arrays([0, len(lines)], lines), b"\n")
    return whole[0].as_py() + b"\n"


def copy_lines(fields, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
               quote: str) -> pa.Array:
    """The rows of ``table`` as COPY's text or CSV lines (without line ends), built whole
    columns at a time."""
    cols = []
    for i, f in enumerate(fields):
        arr = table.column(i).combine_chunks() if table.column(i).num_chunks != 1 \
            else table.column(i).chunk(0)
        text = T.text_column(arr, f.type_oid, tz)
        cols.append((_csv_field(text, arr.type, delimiter, quote, null) if csv
                     else _text_field(text, arr.type, delimiter, null)).view(pa.binary()))
    # each line joined by Arrow's own separator: far fewer pieces per row than joining every
    # value and separator as a piece of its own
    return pc.binary_join_element_wise(*cols, pa.scalar(delimiter.encode(), pa.binary()))


def copy_messages(fields, table: pa.Table, tz, csv: bool, delimiter: str, null: str,
                  quote: str) -> bytes:
    """The rows of ``table`` as CopyData messages, one a row as PostgreSQL sends them."""
    if not fields or not table.num_rows:
        return b""
    return M.copy_data_rows(copy_lines(fields, table, tz, csv, delimiter, null, quote))
