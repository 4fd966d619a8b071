"""ω for session windows, [SESSION gap] and [PARTITION BY k SESSION gap] (``SessionWindow``):
a partition's tuples less than the gap apart form one session, which ends a gap after its last
tuple; once the input's time passes that end, every tuple of the session leaves valid for
[end, end + gap) with the session's start and end as two more columns. Until then the open
sessions' tuples are held (the state: open sessions only). Per batch or watermark, one DuckDB
window query numbers the held tuples' sessions; a tuple that bridges two sessions is simply in
one, as the input comes in event-time order.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..batches import INF, TE, TS, Watermark
from ..duck import quote
from ..operators.base import Operator

START, END, ORD = "__start", "__end", "__ord"


class SessionWindow(Operator):
    def __init__(self, window):
        self.gap = window.gap_us
        self.keys = [e.sql for e in window.partition_by]
        self.start_col, self.end_col = window.columns
        self.held: pa.Table | None = None     # the open sessions' tuples: columns, __ts
        self.columns: list | None = None      # the input's columns (without ts/te)
        self.seq = 0
        # no open session ends before this (a tuple can only push an end later, or start a
        # session ending a gap after it): a frontier short of it closes nothing
        self.next_end = INF

    def open(self, context):
        self.con = context.cursor()

    def _sql(self, frontier: int) -> str:
        part = f"PARTITION BY {', '.join(self.keys)} " if self.keys else ""
        order = f"{part}ORDER BY {TS}, {ORD}"
        by_session = f"PARTITION BY {', '.join(self.keys + ['__sid'])}"
        cols = ", ".join(quote(c) for c in self.columns)
        return (
            f"WITH gaps AS (SELECT *, coalesce({TS} - lag({TS}) OVER ({order}) >= {self.gap}, "
            f"true)::INT AS __new FROM held), "
            f"numbered AS (SELECT *, sum(__new) OVER ({order} ROWS UNBOUNDED PRECEDING) AS "
            f"__sid FROM gaps), "
            f"spans AS (SELECT *, min({TS}) OVER ({by_session}) AS {START}, "
            f"max({TS}) OVER ({by_session}) + {self.gap} AS {END} FROM numbered) "
            f"SELECT {cols}, {TS}, {ORD}, {START}, {END}, {END} <= {frontier} AS __closed "
            f"FROM spans ORDER BY {END}, {TS}, {ORD}")

    def on_batch(self, batch, port=0):
        if self.columns is None:
            self.columns = [n for n in batch.schema.names if n not in (TS, TE)]
        new = pa.table(batch).select(self.columns + [TS])
        new = new.append_column(ORD, pa.array(np.arange(self.seq, self.seq + new.num_rows)))
        self.seq += new.num_rows
        self.held = new if self.held is None else pa.concat_tables([self.held, new])
        first, last = pc.min_max(batch.column(TS)).values()
        self.next_end = min(self.next_end, first.as_py() + self.gap)
        # every later tuple starts at or after this batch's last: a session that ended by
        # then can take no more
        return self._close(last.as_py())

    def on_watermark(self, ts, port=0):
        return self._close(ts) + [Watermark(ts)]

    def on_end(self):
        return self._close(INF)

    def _close(self, frontier: int) -> list:
        """Emit the sessions that ended by ``frontier``; keep the others' tuples."""
        if self.held is None or self.held.num_rows == 0 or frontier < self.next_end:
            return []
        seen = duck.run(self.con, "held", self.held, self._sql(frontier))
        closed = seen.column("__closed")
        done = seen.filter(closed)
        still = seen.filter(pc.invert(closed))
        self.held = still.select(self.columns + [TS, ORD])
        self.next_end = pc.min(still.column(END)).as_py() if still.num_rows else INF
        if done.num_rows == 0:
            return []
        end = done.column(END)
        out = {c: done.column(c) for c in self.columns}
        out[self.start_col] = done.column(START).cast(pa.timestamp("us"))
        out[self.end_col] = end.cast(pa.timestamp("us"))
        out[TS], out[TE] = end, pc.add(end, self.gap)
        return pa.table(out).to_batches()

    def state_size(self) -> int:
        return self.held.num_rows if self.held is not None else 0
