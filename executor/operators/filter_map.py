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
        self.predicate = node.predicate.sql

    def on_mask(self, batch: pa.RecordBatch, mask: pa.Array) -> list:
        """The batch's rows where this σ's predicate, computed elsewhere, is true."""
        out = batch.filter(mask, null_selection_behavior="drop")
        return [out] if out.num_rows else []


class GroupedFilter:
    """TelegraphCQ's grouped filter: the σ's of many queries over one input evaluated in one
    DuckDB pass (one predicate column each), so N queries with different constants cost one
    scan of each batch, not N. ``masks`` returns one boolean array per σ, in order."""

    def __init__(self, filters: list):
        self.filters = filters
        cols = ", ".join(f"({f.predicate}) AS m{i}" for i, f in enumerate(filters))
        self.sql = f"SELECT {cols} FROM b"
        self.con = duck.connect()

    def masks(self, batch: pa.RecordBatch) -> list:
        table = duck.run(self.con, "b", batch, self.sql)
        return [table.column(i).combine_chunks() for i in range(len(self.filters))]


class Map(_DuckOp):
    def __init__(self, node):
        outs = ", ".join(f'{o.expr.sql} AS "{o.name}"' for o in node.outputs)
        super().__init__(f'SELECT {outs}, "{TS}", "{TE}" FROM b')
        # a projection of plain columns (q0's shape) is picked by Arrow: no DuckDB call
        self.picks = [(_column_of(o.expr), o.name) for o in node.outputs]
        if any(src is None for src, _ in self.picks):
            self.picks = None

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if self.picks is None or batch.num_rows == 0:
            return super().transform(batch)
        names = [name for _, name in self.picks] + [TS, TE]
        return pa.RecordBatch.from_arrays(
            [batch.column(src) for src, _ in self.picks] + [batch.column(TS), batch.column(TE)],
            names=names)


def _column_of(expr) -> str | None:
    """The input column ``expr`` is, when it is nothing but a column reference."""
    if len(expr.columns) == 1 and expr.sql == '"' + expr.columns[0].replace('"', '""') + '"':
        return expr.columns[0]
    return None
