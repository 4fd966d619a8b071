"""Each row as many times as its count column says, intervals unchanged: what EXCEPT ALL and
INTERSECT ALL keep of a row that several inputs hold (``lowering`` counts the copies with an
aggregate first). A count of zero or NULL drops the row.

>>> import pyarrow as pa
>>> from executor import plan as P
>>> op = Repeat(P.Repeat(None, "n", ()))
>>> op.transform(pa.record_batch({"x": [1, 2, 3], "n": [2, 0, 1]})).column(0).to_pylist()
[1, 1, 3]
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .base import Stateless


class Repeat(Stateless):
    def __init__(self, node):
        self.count = node.count

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        counts = batch.column(self.count).fill_null(0).to_numpy(zero_copy_only=False)
        index = np.repeat(np.arange(batch.num_rows), np.maximum(counts, 0).astype(np.int64))
        return batch.take(pa.array(index, pa.int64())) if len(index) else None
