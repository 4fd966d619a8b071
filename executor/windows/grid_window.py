"""ω for Flink's window table functions, TUMBLE, HOP and CUMULATE (``GridWindow``): each tuple
once per window holding it, each copy valid from its window's last instant for one step. A copy
starts after its tuple, so copies are held until the input's time passes their start and then
leave in start order (what every operator above expects of its input); the state is the copies
of windows not yet ended. After data, a watermark at the earliest start a copy still to leave
can have: on the grid, so it splits no answer above, and an aggregate above answers a window
as soon as its last copy is out, not at the next heartbeat.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..batches import INF, TS, Watermark
from ..operators.base import Operator


class GridWindow(Operator):
    def __init__(self, window):
        self.window = window
        self.held: pa.Table | None = None      # copies whose windows have not ended
        self.promised: int | None = None        # the last watermark sent on

    def on_batch(self, batch, port=0):
        copies = pa.table(self.window.copies(batch))
        self.held = copies if self.held is None else pa.concat_tables([self.held, copies])
        # every later tuple starts at or after this batch's last, and its copies after it
        frontier = pc.max(batch.column(TS)).as_py()
        return self._release(frontier) + self._promise(frontier)

    def on_watermark(self, ts, port=0):
        self.promised = ts if self.promised is None else max(self.promised, ts)
        return self._release(ts) + [Watermark(ts)]

    def _promise(self, frontier: int) -> list:
        """A watermark where the next copy to leave may start at the earliest: the first held
        one's start, or the first copy of a tuple at ``frontier`` (input comes in ts order).
        Once per such start."""
        at = self.window.first_copy(frontier)
        if self.held is not None and self.held.num_rows:
            at = min(at, pc.min(self.held.column(TS)).as_py())
        if self.promised is not None and at <= self.promised:
            return []
        self.promised = at
        return [Watermark(at)]

    def on_end(self):
        return self._release(INF)

    def _release(self, frontier: int) -> list:
        """The held copies that start before ``frontier``, in start order."""
        if self.held is None or self.held.num_rows == 0:
            return []
        due = pc.less(self.held.column(TS), frontier)
        out = self.held.filter(due)
        self.held = self.held.filter(pc.invert(due))
        if out.num_rows == 0:
            return []
        return out.sort_by(TS).to_batches()

    def state_size(self) -> int:
        return self.held.num_rows if self.held is not None else 0
