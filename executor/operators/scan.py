"""Where a query's rows enter: a stream's raw batches, or a named window's or derived stream's
result rows, as the internal columns ``alias.col`` plus their interval (µs)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .. import plan as P
from ..batches import TE, TS, micros
from .base import Stateless


class Scan(Stateless):
    """A stream's raw batch → internal columns ``alias.col`` plus its interval (µs)."""

    def __init__(self, node: P.StreamScan):
        self.node = node
        self.source = P.feed_of(node)
        self.names = [c.name.split(".", 1)[1] for c in node.schema]

    def transform(self, batch):
        ts = micros(batch.column(self.node.timestamp_column))
        if self.node.born_us is not None:   # (history from before its query began)
            mine = pc.greater_equal(ts, self.node.born_us)
            if not pc.all(mine).as_py():
                batch, ts = batch.filter(mine), ts.filter(mine)
        cols = {f"{self.node.alias}.{n}": batch.column(n) for n in self.names}
        te = micros(batch.column(self.node.end_column)) if self.node.end_column else ts
        cols[TS], cols[TE] = ts, te
        return pa.RecordBatch.from_pydict(cols)


class RelationScan(Stateless):
    """A named window's or derived stream's result rows (their own columns and intervals)
    → internal columns ``alias.col``."""

    def __init__(self, node: P.WindowRelationScan):
        self.node = node
        self.source = node.name.lower()
        self.names = [c.name for c in node.schema]

    def transform(self, batch):
        return batch.rename_columns(self.names + [TS, TE])
