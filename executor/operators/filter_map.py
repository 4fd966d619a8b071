"""σ and μ: SQL expressions over whole Arrow batches, intervals passed through unchanged. The plan
carries each expression as DuckDB SQL over the input's column names and, when it is simple, as
a tree that Arrow's kernels evaluate without a DuckDB call (``kernels``); a batch the kernels
cannot do exactly as DuckDB would goes to DuckDB."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import duck
from ..expressions import kernels, predicate_index
from .. import plan as P
from ..batches import TE, TS
from ..duck import quote
from .base import Stateless


class Fast:
    """An expression's kernel, if it has a tree; given up for good once its input types turn
    out to be beyond the kernels. ``run`` returns None when DuckDB must do the batch."""

    def __init__(self, expr, con):
        self.f, self.con = None, con
        if getattr(expr, "tree", None) is not None:
            try:
                self.f = kernels.Kernel(expr.tree)
            except kernels.Unsupported:
                pass

    def run(self, how, batch: pa.RecordBatch, *args):
        if self.f is None:
            return None
        try:
            self.f.learn(batch, self.con)
            return how(self.f, batch, *args)
        except kernels.Fallback:
            return None
        except kernels.Unsupported:
            self.f = None
            return None


class _DuckOp(Stateless):
    def __init__(self, sql: str):
        self.sql = sql

    def open(self, context):
        self.con = context.cursor()

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if batch.num_rows == 0:
            return None
        table = duck.run(self.con, "b", batch, self.sql)
        return table.combine_chunks().to_batches()[0] if table.num_rows else None


class Filter(_DuckOp):
    def __init__(self, node):
        super().__init__(f'SELECT * FROM b WHERE {node.predicate.sql}')
        self.node = node
        self.predicate = node.predicate.sql
        self.fast: Fast | None = None

    def open(self, context):
        super().open(context)
        self.fast = Fast(self.node.predicate, self.con)

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        mask = self.fast.run(kernels.mask, batch) if batch.num_rows else None
        if mask is None:
            return super().transform(batch)
        out = batch.filter(mask, null_selection_behavior="drop")
        return out if out.num_rows else None

    def on_mask(self, batch: pa.RecordBatch, mask) -> list:
        """The batch's rows where this σ's predicate, computed elsewhere, is true: ``mask``
        is a boolean array or the rows' positions (the predicate index's answer)."""
        if isinstance(mask, np.ndarray):
            return [batch.take(pa.array(mask))] if len(mask) else []
        out = batch.filter(mask, null_selection_behavior="drop")
        return [out] if out.num_rows else []


class GroupedFilter:
    """TelegraphCQ's grouped filter: the σ's of many queries over one input evaluated together,
    so N queries with different constants cost one scan of each batch, not N: the predicate
    index for σ's comparing one integer expression with constants, Arrow's kernels for the
    other simple predicates (steps they share computed once), one DuckDB pass (one predicate
    column each) for the rest. ``masks`` returns, per σ in order, a boolean array or the
    positions of its rows; ``close`` closes the cursor."""

    def __init__(self, filters: list, con):
        self.filters = filters
        self.con = con
        self.index = predicate_index.RangeIndex([f.node.predicate.tree for f in filters], con)

    def close(self) -> None:
        self.con.close()

    def masks(self, batch: pa.RecordBatch) -> list:
        memo: dict = {}                 # steps the predicates share, computed once
        indexed = self.index.select(batch, memo)
        out = [indexed[k] if k in indexed else f.fast.run(kernels.mask, batch, memo)
               for k, f in enumerate(self.filters)]
        rest = [i for i, m in enumerate(out) if m is None]
        if rest:
            # a predicate DuckDB types as NULL (WHERE NULL) is a mask still: Arrow filters
            # only by booleans
            cols = ", ".join(f"CAST(({self.filters[i].predicate}) AS BOOLEAN) AS m{i}"
                             for i in rest)
            table = duck.run(self.con, "b", batch, f"SELECT {cols} FROM b")
            for k, i in enumerate(rest):
                out[i] = table.column(k).combine_chunks()
        return out


class Projection:
    """Named expressions over a batch or table (``None``: a NULL column), then the columns
    ``keep`` as they are, as a table: plain columns picked by Arrow, simple expressions by
    the kernels (typed by DuckDB once), anything else by one DuckDB call."""

    def __init__(self, outputs: list, keep: list, con, name: str = "b"):
        self.con, self.name = con, name
        outputs = [(n, e if e is not None else _NULL) for n, e in outputs]
        select = [f"{e.sql} AS {quote(n)}" for n, e in outputs] + [quote(k) for k in keep]
        self.sql = f"SELECT {', '.join(select)} FROM {name}"
        self.names = [n for n, _ in outputs] + list(keep)
        self.keep = list(keep)
        self.picks = [_column_of(e) for _, e in outputs]
        if None in self.picks:
            self.picks = None
        self.fast = [Fast(e, con) for _, e in outputs]
        self.types = None          # DuckDB's output types, learnt once, for the kernels' output

    def run(self, data) -> pa.Table:
        if isinstance(data, pa.Table) and data.num_rows:
            batches = data.combine_chunks().to_batches()
            data = batches[0] if len(batches) == 1 else data
        if isinstance(data, pa.RecordBatch) and data.num_rows:
            columns = self._arrow(data)
            if columns is not None:
                return pa.Table.from_arrays(columns + [data.column(k) for k in self.keep],
                                            names=self.names)
        return duck.run(self.con, self.name, data, self.sql)

    def _arrow(self, batch: pa.RecordBatch) -> list | None:
        if self.picks is not None:
            return [batch.column(src) for src in self.picks]
        if any(f.f is None for f in self.fast):
            return None
        if self.types is None:
            self.types = duck.schema_of(self.con, self.name, batch.schema, self.sql).types
        columns = [f.run(kernels.column, batch, t) for f, t in zip(self.fast, self.types)]
        return None if None in columns else columns


class Map(Stateless):
    def __init__(self, node):
        self.node = node
        self.projection: Projection | None = None

    def open(self, context):
        self.con = context.cursor()
        self.projection = Projection([(o.name, o.expr) for o in self.node.outputs], [TS, TE],
                                     self.con)

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        if batch.num_rows == 0:
            return None
        table = self.projection.run(batch)
        return table.combine_chunks().to_batches()[0] if table.num_rows else None


_NULL = P.Expr("NULL", (), "", ("null",))


def _column_of(expr) -> str | None:
    """The input column ``expr`` is, when it is nothing but a column reference."""
    if len(expr.columns) == 1 and expr.sql == quote(expr.columns[0]):
        return expr.columns[0]
    return None
