"""ω for Flink's window table functions, TUMBLE, HOP and CUMULATE (``GridWindow``): each tuple
once per window holding it, each copy valid from its window's last instant for one step. A copy
starts after its tuple, so copies are held until the input's time passes their start and then
leave in start order (what every operator above expects of its input); the state is the copies
of windows not yet ended.
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

    def on_batch(self, batch, port=0):
        copies = pa.table(self.window.copies(batch))
        self.held = copies if self.held is None else pa.concat_tables([self.held, copies])
        # every later tuple starts at or after this batch's last, and its copies after it
        return self._release(pc.max(batch.column(TS)).as_py())

    def on_watermark(self, ts, port=0):
        return self._release(ts) + [Watermark(ts)]

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
