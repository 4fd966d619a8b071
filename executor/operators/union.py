"""∪ (UNION ALL): the inputs' rows, merged in timestamp order; intervals unchanged."""
from __future__ import annotations

import pyarrow as pa

from .. import duck
from ..batches import Watermark
from .base import Operator
from .merge import Merger


class Union(Operator):
    checkpointed = ("merger", "schema")

    def __init__(self, node):
        self.node = node
        self.inputs = len(node.inputs)
        self.names = [c.name for c in node.schema]
        self.merger = Merger(self.inputs)
        self.types: dict = {}           # column -> the Arrow type of the union's plan type
        self.schema = None

    def open(self, context):
        con = context.cursor()
        try:
            known = [c for c in self.node.schema if c.type not in ("", "UNKNOWN")]
            self.types = {f.name: f.type for f in duck.typed_empty(con, known).schema}
        finally:
            con.close()

    def _align(self, batch):
        # every input's columns take the union's names, by position (intervals last), and
        # the types of its plan (whichever input's batch comes first: an input's DuckDB may
        # type a constant 0.5 as a DECIMAL where the plan's rules say DOUBLE)
        batch = batch.rename_columns(self.names + batch.schema.names[len(self.names):])
        if self.schema is None:
            self.schema = pa.schema([pa.field(f.name, self.types.get(f.name, f.type))
                                     for f in batch.schema])
        if batch.schema != self.schema:
            batch = batch.cast(self.schema)
        return batch

    def _out(self, everything=False) -> list:
        table = self.merger.release(everything=everything)
        out = [b for b in table.to_batches()] if table is not None else []
        front = self.merger.frontier()
        if front is not None:
            out.append(Watermark(front))
        return out

    def on_batch(self, batch, port=0):
        self.merger.add(self._align(batch), port)
        return self._out()

    def on_watermark(self, ts, port=0):
        self.merger.mark(ts, port)
        return self._out()

    def on_end(self):
        return self._out(everything=True)

    def state_size(self) -> int:
        return sum(b.num_rows for q in self.merger.pending for b in q)
