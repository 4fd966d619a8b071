"""The operator lifecycle: ``on_batch(batch, port)`` and ``on_watermark(ts, port)`` return the
messages the operator emits (batches in (ts, te) order, then possibly a watermark);
``on_end()`` flushes whatever is still held. Operators keep no clock of their own: time is what
their inputs say, so tests drive them with made-up batches."""
from __future__ import annotations

import pyarrow as pa

from ..batches import Watermark


class Operator:
    inputs = 1

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list:
        raise NotImplementedError

    def on_watermark(self, ts: int, port: int = 0) -> list:
        return [Watermark(ts)]

    def on_end(self) -> list:
        return []

    def state_size(self) -> int:
        """Rows (or index elements) held, for cq_queries and memory checks."""
        return 0


class Stateless(Operator):
    """An operator that maps each batch on its own (σ, μ, stateless ω)."""

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        raise NotImplementedError

    def on_batch(self, batch, port=0):
        out = self.transform(batch)
        return [out] if out is not None and out.num_rows else []
