"""ω for a StreaQueL loop over live data: ``for (t = init; condition; t = next)
{ WindowIs(S, left, right) }``. Iteration k, at t_k, answers over the tuples with
left(t_k) <= ts <= right(t_k) and holds until the next iteration starts, like a hopping window
(wtime(*) is t_k). A tuple is therefore valid from the first iteration that contains it to
the end of the last one.

``ST`` (the query's start) is the event time of the first tuple the query sees, and ``NOW``
is the same instant: a loop over live data starts with the data. The iterations are computed
once, then each batch is placed with two binary searches (``left`` and ``right`` must not move
back in time).

A loop over an archived stream starts primed: ``st`` is then the instant the query started
(the seam), the archive gives the tuples its windows reach back to, and a loop whose variable
moves backwards (``t -= 10``) is answered too: its iterations are taken in time order, each
valid for one step from its t.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import duck
from ..batches import TS, micros, with_interval
from .base import Stateless

MAX_ITERATIONS = 1_000_000


class NotLive(Exception):
    """A loop whose windows move back in time: it needs the archive."""


class LoopWindow(Stateless):
    def __init__(self, window):
        self.w = window
        self.con = duck.connect()
        self.starts: np.ndarray | None = None   # t_k (µs)
        self.ends: np.ndarray | None = None     # when iteration k's answer stops holding
        self.left = self.right = None
        self.st: int | None = None               # the query's start when primed, else None

    # ------------------------------------------------------------------ iterations
    def _eval(self, expr: str, ts: np.ndarray, st: int) -> np.ndarray:
        """``expr`` of the loop variable at each of ``ts`` (µs), as µs or booleans."""
        t = pa.table({"t": pa.array(ts, pa.int64()).cast(pa.timestamp("us"))})
        out = duck.run(self.con, "it", t,
                       f'SELECT {expr} AS v FROM (SELECT t AS "{self.w.var}", '
                       f"make_timestamp({st}) AS \"ST\", make_timestamp({st}) AS \"NOW\" "
                       "FROM it)").column("v")
        if pa.types.is_timestamp(out.type):
            out = micros(out)
        return out.to_numpy(zero_copy_only=False)

    def _iterate(self, st: int) -> None:
        t0 = int(self._eval(self.w.init.sql, np.array([st]), st)[0])
        t1 = int(self._eval(self.w.next.sql, np.array([t0]), st)[0])
        step = t1 - t0
        if step == 0 or (step < 0 and self.st is None):
            raise NotLive("a loop whose variable does not move forward reads the past: make "
                          "the stream TYPE ARCHIVED")
        candidates = t0 + step * np.arange(MAX_ITERATIONS, dtype=np.int64)
        nxt = self._eval(self.w.next.sql, candidates[:3], st)
        if not np.array_equal(np.diff(np.append(candidates[:3], nxt[-1])), np.full(3, step)):
            raise NotLive("a loop whose step changes does not run in the back end yet")
        ok = self._eval(self.w.condition.sql, candidates, st).astype(bool)
        k = int(np.argmin(ok)) if not ok.all() else MAX_ITERATIONS
        self.starts = candidates[:k] if step > 0 else candidates[:k][::-1].copy()
        self.ends = self.starts + abs(step)
        self.left = self._eval(self.w.left.sql, self.starts, st) if k else self.starts
        self.right = self._eval(self.w.right.sql, self.starts, st) if k else self.starts
        if k and (np.any(np.diff(self.left) < 0) or np.any(np.diff(self.right) < 0)):
            raise NotLive("a loop whose window's edges move against its variable does not "
                          "run in the back end yet")

    def earliest(self, st: int) -> int | None:
        """The earliest instant the loop's windows reach when the query starts at ``st``
        (None: no iteration)."""
        self.st = st
        self._iterate(st)
        return int(self.left[0]) if len(self.starts) else None

    # ------------------------------------------------------------------ tuples
    def transform(self, batch):
        ts = batch.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        if self.starts is None:
            self._iterate(self.st if self.st is not None else int(ts.min()))
        first = np.searchsorted(self.right, ts, side="left")     # first k: right_k >= ts
        last = np.searchsorted(self.left, ts, side="right") - 1  # last k: left_k <= ts
        keep = (first <= last) & (first < len(self.starts)) & (last >= 0)
        if not keep.any():
            return None
        kept = batch.filter(pa.array(keep))
        return with_interval(kept, pa.array(self.starts[first[keep]]),
                             pa.array(self.ends[last[keep]]))
