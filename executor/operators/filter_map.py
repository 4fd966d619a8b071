"""σ and μ: SQL expressions evaluated by DuckDB over whole Arrow batches (the plan carries
them as DuckDB SQL over the input's column names), intervals passed through unchanged."""
from __future__ import annotations

import pyarrow as pa

from .. import duck
from ..batches import TE, TS
from .base import Stateless


class _DuckOp(Stateless):
    def __init__(self, sql: str):
        self.sql = sql
        self.con = duck.connect()

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if batch.num_rows == 0:
            return None
        table = duck.run(self.con, "b", batch, self.sql)
        return table.combine_chunks().to_batches()[0] if table.num_rows else None


class Filter(_DuckOp):
    def __init__(self, node):
        super().__init__(f'SELECT * FROM b WHERE {node.predicate.sql}')


class Map(_DuckOp):
    def __init__(self, node):
        outs = ", ".join(f'{o.expr.sql} AS "{o.name}"' for o in node.outputs)
        super().__init__(f'SELECT {outs}, "{TS}", "{TE}" FROM b')
