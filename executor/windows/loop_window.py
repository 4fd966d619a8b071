"""ω for a StreaQueL loop over live data: ``for (t = init; condition; t = next)
{ WindowIs(S, left, right) }``. Iteration k, at t_k, answers over the tuples with
left(t_k) <= ts <= right(t_k) and holds until the next iteration starts, like a hopping window
(wtime(*) is t_k). A tuple is therefore valid from the first iteration that contains it to
the end of the last one.

``ST`` (the query's start) is the event time of the first tuple the query sees, and ``NOW``
is the same instant: a loop over live data starts with the data. The iterations are computed
once (``windows/loops.py``), then each batch is placed with two binary searches (``left`` and
``right`` must not move back in time).

A loop over an archived stream starts primed: ST is then the instant the query started (the
seam, the context's ``st``), the archive gives the tuples its windows reach back to, and a
loop whose variable moves backwards (``t -= 10``) is answered too.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..batches import TS, with_interval
from ..operators.base import Stateless
from .loops import iterations


class LoopWindow(Stateless):
    checkpointed = None         # its iterations are not saved (loops never resume)
    iterates = True

    def __init__(self, window):
        self.w = window
        self.starts: np.ndarray | None = None   # t_k (µs)
        self.ends: np.ndarray | None = None     # when iteration k's answer stops holding
        self.left = self.right = None
        self.st: int | None = None               # the query's start when primed, else None

    def open(self, context):
        self.con = context.cursor()
        self.st = context.st

    def transform(self, batch):
        ts = batch.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        if self.starts is None:
            st = self.st if self.st is not None else int(ts.min())
            it = iterations(self.w, st, self.con, primed=self.st is not None)
            self.starts, self.ends, self.left, self.right = (it.starts, it.ends, it.left,
                                                             it.right)
        first = np.searchsorted(self.right, ts, side="left")     # first k: right_k >= ts
        last = np.searchsorted(self.left, ts, side="right") - 1  # last k: left_k <= ts
        keep = (first <= last) & (first < len(self.starts)) & (last >= 0)
        if not keep.any():
            return None
        kept = batch.filter(pa.array(keep))
        return with_interval(kept, pa.array(self.starts[first[keep]]),
                             pa.array(self.ends[last[keep]]))
