"""ω for the windows that decide each tuple's interval from the tuple alone (seed 000 §2,
DESIGN §5), on whole batches: RANGE i → [ts, ts + i); NOW → [ts, ts + 1 µs); UNBOUNDED →
[ts, ∞); a source's own intervals are kept; [BETWEEN t1 AND t2] keeps t1 <= ts < t2 as
[ts, t2); RANGE i SLIDE j samples the range window at τ = start + k·j, so a tuple is in the
answers for the τ in [ts, ts + i), each valid for [τ, τ + j): together [τ_first, τ_last + j).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import plan as P
from ..batches import INF, TS, with_interval
from .base import Stateless


def _int64(a) -> np.ndarray:
    return a.to_numpy(zero_copy_only=False).astype(np.int64)


class TimeWindow(Stateless):
    def __init__(self, window):
        self.window = window
        self.transform = _TRANSFORMS[type(window)].__get__(self)

    def _range(self, batch):
        return with_interval(batch, batch.column(TS), pc.add(batch.column(TS),
                                                             self.window.size_us))

    def _now(self, batch):
        return with_interval(batch, batch.column(TS), pc.add(batch.column(TS), 1))

    def _unbounded(self, batch):
        return with_interval(batch, batch.column(TS), pa.array(np.full(batch.num_rows, INF)))

    def _own(self, batch):
        return batch

    def _fixed(self, batch):
        w = self.window
        ts = batch.column(TS)
        keep = pc.and_(pc.greater_equal(ts, w.low_us), pc.less(ts, w.high_us))
        kept = batch.filter(keep)
        return with_interval(kept, kept.column(TS), pa.array(np.full(kept.num_rows,
                                                                       w.high_us)))

    def _slide(self, batch):
        w = self.window
        start = w.start_us or 0
        ts = _int64(batch.column(TS))
        first = start + -((start - ts) // w.slide_us) * w.slide_us          # ceil to grid
        last = start + ((ts + w.size_us - 1 - start) // w.slide_us) * w.slide_us
        keep = first <= last            # a slide longer than the range leaves gaps
        if keep.all():                  # the usual case: no copy of the rows
            return with_interval(batch, pa.array(first), pa.array(last + w.slide_us))
        kept = batch.filter(pa.array(keep))
        return with_interval(kept, pa.array(first[keep]), pa.array(last[keep] + w.slide_us))


_TRANSFORMS = {
    P.RangeWindow: TimeWindow._range,
    P.NowWindow: TimeWindow._now,
    P.UnboundedWindow: TimeWindow._unbounded,
    P.IntervalWindow: TimeWindow._own,
    P.FixedWindow: TimeWindow._fixed,
    P.SlideWindow: TimeWindow._slide,
}


def supports(window) -> bool:
    return type(window) in _TRANSFORMS
