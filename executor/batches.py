"""What flows between operators: Arrow record batches whose rows carry their validity interval
in the columns ``__ts`` and ``__te`` (event-time microseconds, ``INF`` for "forever"), and
watermarks (BOUNDARY tuples: no later tuple of that input will have a smaller ts).

Rows in a batch are in (ts, te) order, and batches of one input follow each other in order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TS = "__ts"
TE = "__te"
INF = 1 << 62          # "valid forever": far beyond any real timestamp in µs


@dataclass(frozen=True)
class Watermark:
    """BOUNDARY: nothing earlier than ``ts`` will follow on this input. It holds no rows
    (``num_rows``, so that counting a mix of batches and watermarks needs no type test)."""
    ts: int
    num_rows: ClassVar[int] = 0


def micros(col) -> pa.Array:
    """An event-time column as int64 µs (TIMESTAMP of any unit or time zone, or an integer)."""
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("us", tz=col.type.tz))
    return col.cast(pa.int64())


def with_interval(batch: pa.RecordBatch, ts, te) -> pa.RecordBatch:
    """``batch`` with its interval columns replaced (or added)."""
    cols = {name: batch.column(i) for i, name in enumerate(batch.schema.names)
            if name not in (TS, TE)}
    cols[TS] = pa.array(ts, pa.int64()) if not isinstance(ts, pa.Array) else ts
    cols[TE] = pa.array(te, pa.int64()) if not isinstance(te, pa.Array) else te
    return pa.RecordBatch.from_pydict(cols)


def one_table(chunks) -> pa.Table:
    """Tables of one schema (or one table) as one table. A batch may type an all-NULL
    column as null (an aggregate over nothing, such as q5's MAX before any count): it takes
    the type of the others."""
    if isinstance(chunks, pa.Table):
        return chunks
    return chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks, promote_options="default")


def sort_by_interval(table: pa.Table) -> pa.Table:
    return table.sort_by([(TS, "ascending"), (TE, "ascending")])


def distinct_keys(columns: list) -> tuple[np.ndarray, list]:
    """Each row's key (one value per column; NULL is None) as (its index into the keys,
    the distinct keys as tuples): dictionary codes in Arrow, Python once per distinct key."""
    codes = np.zeros(len(columns[0]), np.int64)
    dictionaries = []
    for col in columns:
        enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray)
                                   else col)
        size = len(enc.dictionary) + 1                   # + 1: NULL
        idx = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False)
        codes = codes * size + idx.astype(np.int64)
        dictionaries.append((enc.dictionary.to_pylist() + [None], size))
    distinct, inverse = np.unique(codes, return_inverse=True)
    keys = []
    for code in distinct.tolist():
        key = []
        for values, size in reversed(dictionaries):
            code, j = divmod(code, size)
            key.append(values[j])
        keys.append(tuple(reversed(key)))
    return inverse.reshape(-1), keys
