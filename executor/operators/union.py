"""∪ (UNION ALL): the inputs' rows, merged in timestamp order; intervals unchanged."""
from __future__ import annotations

from ..batches import Watermark
from .base import Operator
from .merge import Merger


class Union(Operator):
    def __init__(self, node):
        self.inputs = len(node.inputs)
        self.names = [c.name for c in node.schema]
        self.merger = Merger(self.inputs)
        self.schema = None

    def _align(self, batch):
        # every input's columns take the union's names, by position (intervals last), and the
        # first input's types
        batch = batch.rename_columns(self.names + batch.schema.names[len(self.names):])
        if self.schema is None:
            self.schema = batch.schema
        elif batch.schema != self.schema:
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
