"""COPY data formats: PostgreSQL's text format (tab-separated, ``\\N`` nulls, backslash escapes)
and CSV, both ways. Parsing yields an Arrow table of strings that DuckDB casts on INSERT."""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.csv as pacsv

from .protocol.errors import BadCopyFormat
from .protocol import types as T

_ESC = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_ESC_RE = re.compile(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)")


def _unescape(m: re.Match) -> str:
    s = m.group(1)
    if s[0] == "x":
        return chr(int(s[1:], 16))
    if s[0].isdigit():
        return chr(int(s, 8))
    return _ESC.get(s, s)


def parse_text(data: bytes, ncols: int, delimiter: str, null: str) -> pa.Table:
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    cols = [[] for _ in range(ncols)]
    for lineno, line in enumerate(lines, 1):
        line = line[:-1] if line.endswith("\r") else line
        if line == "\\.":
            break
        fields = line.split(delimiter)
        if len(fields) != ncols:
            raise BadCopyFormat(
                f"{'extra' if len(fields) > ncols else 'missing'} data for column"
                f"{'' if len(fields) > ncols else ' ' + str(len(fields) + 1)}",
                detail=f"COPY line {lineno}: {line[:80]!r}")
        for i, f in enumerate(fields):
            cols[i].append(None if f == null else _ESC_RE.sub(_unescape, f) if "\\" in f else f)
    return pa.table({f"c{i}": pa.array(c, pa.string()) for i, c in enumerate(cols)})


def parse_csv(data: bytes, ncols: int, delimiter: str, null: str, quote: str, escape: str,
              header: bool) -> pa.Table:
    if data.endswith(b"\\.\n"):
        data = data[:-3]
    opts = pacsv.ReadOptions(column_names=[f"c{i}" for i in range(ncols)],
                             skip_rows=1 if header else 0)
    parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=quote,
                               escape_char=escape if escape != quote else False,
                               double_quote=escape == quote, newlines_in_values=True)
    conv = pacsv.ConvertOptions(column_types={f"c{i}": pa.string() for i in range(ncols)},
                                null_values=[null], strings_can_be_null=True,
                                quoted_strings_can_be_null=False)
    try:
        return pacsv.read_csv(pa.py_buffer(data), read_options=opts, parse_options=parse,
                              convert_options=conv)
    except pa.ArrowInvalid as e:
        raise BadCopyFormat(f"invalid CSV data for COPY: {e}") from None


_TEXT_ESC = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _csv_field(v: str, delimiter: str, quote: str, null: str) -> str:
    if v == "" or v == null or any(c in v for c in (delimiter, quote, "\n", "\r")):
        return quote + v.replace(quote, quote + quote) + quote
    return v


def format_rows(fields, table: pa.Table, tz, csv: bool, header: bool, delimiter: str,
                null: str, quote: str):
    """Yield one encoded line per row (and a header line first for CSV HEADER)."""
    if csv and header:
        yield (delimiter.join(_csv_field(f.name, delimiter, quote, null) for f in fields)
               + "\n").encode()
    cols = [[None if v is None else v.decode() for v in
             T.text_column(table.column(i).combine_chunks(), f.type_oid, tz).to_pylist()]
            for i, f in enumerate(fields)]
    for values in zip(*cols):
        if csv:
            line = delimiter.join(null if v is None else _csv_field(v, delimiter, quote, null)
                                  for v in values)
        else:
            line = delimiter.join(null if v is None else v.translate(_TEXT_ESC) for v in values)
        yield (line + "\n").encode()
