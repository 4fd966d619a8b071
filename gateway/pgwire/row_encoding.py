"""Results become RowDescription and DataRow bytes, whole Arrow columns at a time, in the
formats a Bind asked for."""
from __future__ import annotations

import datetime as dt

from executor.pg_text import text_column
from gateway.pgwire import messages as M
from gateway.pgwire import types as T
from gateway.pgwire.errors import FeatureNotSupported
from gateway.pgwire.results import Rows


def row_description(fields: list, formats: list) -> bytes:
    return M.row_description(
        (f.name, f.table_oid, f.attnum, f.type_oid, f.typlen, f.typmod, formats[i])
        for i, f in enumerate(fields))


def resolve_formats(codes: tuple, n: int) -> list:
    """Bind's result-format codes: none = all text, one = all that, else one per column."""
    if not codes:
        return [0] * n
    if len(codes) == 1:
        return [codes[0]] * n
    if len(codes) != n:
        raise FeatureNotSupported(f"bind message has {len(codes)} result formats but query has "
                                  f"{n} columns")
    return list(codes)


def encode_rows(rows: Rows, limit: int, formats: list, tz: dt.tzinfo) -> tuple[bytes, int]:
    """DataRow messages for up to ``limit`` rows (0 = all) from ``rows.pos``; returns (bytes, n)."""
    n = rows.remaining if limit <= 0 else min(limit, rows.remaining)
    if n <= 0:
        return b"", 0
    chunk = rows.table.slice(rows.pos, n)
    rows.pos += n
    cols = []
    for i, f in enumerate(rows.fields):
        arr = chunk.column(i).combine_chunks() if chunk.column(i).num_chunks != 1 \
            else chunk.column(i).chunk(0)
        if formats[i] == 1 and T.binary_supported(f.type_oid):
            cols.append(T.binary_column(arr, f.type_oid))
        elif formats[i] == 1:
            raise FeatureNotSupported(
                f"binary output of type {f.type_oid} is not supported; ask for text")
        else:
            cols.append(text_column(arr, f.type_oid, tz))
    return M.data_rows(cols), n
