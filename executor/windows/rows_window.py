"""ω for count windows, [ROWS n] and [PARTITION BY k ROWS n WHERE p] (DESIGN §5): a tuple is
valid from its ts until the ts of the n-th later tuple of its partition. That end is unknown
when the tuple arrives, so the last n tuples of each partition are held open; a watermark
(BOUNDARY) splits them, emitting [start, watermark) and keeping [watermark, …) open, as seed
000's Algorithm 6 does, so results downstream never wait for the next tuple. Coalescing in
α puts the pieces back together. Per batch, one DuckDB window query (``lead(ts, n)`` per
partition) finds every end that became known. A tuple whose end is known waits while an open
tuple of another partition started earlier, so rows still leave in ts order.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..batches import INF, TE, TS, Watermark
from ..operators.base import Operator

START, ORD, NEXT = "__start", "__ord", "__next"


class RowsWindow(Operator):
    def __init__(self, window):
        self.n = window.rows
        self.keys = [e.sql for e in window.partition_by]
        self.where = window.where.sql if window.where is not None else None
        self.held: pa.Table | None = None     # open tuples: input columns, __start, __ord
        self.ready: list = []                 # closed tuples waiting for earlier open ones
        self.columns: list | None = None      # the input's columns (without ts/te)
        self.seq = 0

    def open(self, context):
        self.con = context.cursor()

    def _sql(self) -> str:
        part = f"PARTITION BY {', '.join(self.keys)} " if self.keys else ""
        return (f"SELECT *, lead({TS}, {self.n}) OVER ({part}ORDER BY {ORD}) AS {NEXT} "
                f"FROM rows_in ORDER BY {ORD}")

    def on_batch(self, batch, port=0):
        if self.columns is None:
            self.columns = [n for n in batch.schema.names if n not in (TS, TE)]
        new = pa.table(batch) if isinstance(batch, pa.RecordBatch) else batch
        if self.where is not None:       # the WHERE inside the brackets comes first
            new = duck.run(self.con, "rows_in", new, f"SELECT * FROM rows_in WHERE {self.where}")
            if new.num_rows == 0:
                return []
        new = new.select(self.columns + [TS])
        new = new.append_column(START, new.column(TS))
        new = new.append_column(ORD, pa.array(np.arange(self.seq, self.seq + new.num_rows)))
        self.seq += new.num_rows
        both = new if self.held is None else pa.concat_tables([self.held, new])
        seen = duck.run(self.con, "rows_in", both, self._sql())
        nxt = seen.column(NEXT)
        closed = seen.filter(nxt.is_valid())
        self.held = seen.filter(nxt.is_null()).drop_columns([NEXT])
        return self._emit(closed.column(START), closed.column(NEXT), closed)

    def _emit(self, start, end, rows: pa.Table) -> list:
        """Release the rows [start, end) that no open tuple precedes; keep the others."""
        out = self._rows(start, end, rows)
        if out is not None:
            self.ready.append(out)
        if not self.ready:
            return []
        ready = pa.concat_tables(self.ready) if len(self.ready) > 1 else self.ready[0]
        if self.held is not None and self.held.num_rows:
            front = pc.min(self.held.column(START)).as_py()
            go = pc.less_equal(ready.column(TS), front)
            ready, rest = ready.filter(go), ready.filter(pc.invert(go))
            self.ready = [rest] if rest.num_rows else []
        else:
            self.ready = []
        if ready.num_rows == 0:
            return []
        return ready.sort_by([(TS, "ascending"), (TE, "ascending")]).to_batches()

    def _rows(self, start, end, rows: pa.Table | None) -> pa.Table | None:
        if rows is None or rows.num_rows == 0:
            return None
        s = start.to_numpy().astype(np.int64) if not isinstance(start, np.ndarray) else start
        e = end.to_numpy().astype(np.int64) if not isinstance(end, np.ndarray) else end
        keep = e > s                       # equal timestamps: the tuple never holds alone
        cols = {c: rows.column(c) for c in self.columns}
        cols[TS], cols[TE] = pa.array(s), pa.array(e)
        out = pa.table(cols).filter(pa.array(keep))
        return out if out.num_rows else None

    def on_watermark(self, ts, port=0):
        out = self._emit(None, None, None)
        if self.held is not None and self.held.num_rows:
            start = self.held.column(START).to_numpy().astype(np.int64)
            split = start < ts
            if split.any():
                piece = self.held.filter(pa.array(split))
                self.held = self.held.set_column(
                    self.held.schema.get_field_index(START), START,
                    pa.array(np.where(split, ts, start)))
                out += self._emit(start[split], np.full(int(split.sum()), ts, np.int64), piece)
        return out + [Watermark(ts)]

    def on_end(self):
        held, self.held = self.held, None
        if held is None or held.num_rows == 0:
            return self._emit(None, None, None)
        start = held.column(START).to_numpy().astype(np.int64)
        return self._emit(start, np.full(held.num_rows, INF, np.int64), held)

    def state_size(self) -> int:
        return (self.held.num_rows if self.held is not None else 0) + sum(
            t.num_rows for t in self.ready)
