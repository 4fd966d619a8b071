"""What flows between operators: Arrow record batches whose rows carry their validity interval
in the columns ``__ts`` and ``__te`` (event-time microseconds, ``INF`` for "forever"), and
watermarks (BOUNDARY tuples: no later tuple of that input will have a smaller ts).

Rows in a batch are in (ts, te) order, and batches of one input follow each other in order.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = "__ts"
TE = "__te"
INF = 1 << 62          # "valid forever": far beyond any real timestamp in µs


@dataclass(frozen=True)
class Watermark:
    """BOUNDARY: nothing earlier than ``ts`` will follow on this input."""
    ts: int


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


def sort_by_interval(table: pa.Table) -> pa.Table:
    return table.sort_by([(TS, "ascending"), (TE, "ascending")])
