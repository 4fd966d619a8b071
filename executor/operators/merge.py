"""Merging several inputs in timestamp order (seed 000 Algorithm 1, on batches): rows wait per
input until they are stable — no input can still send an earlier one, because each input has
rows queued or a watermark (BOUNDARY) beyond them — and then leave in (ts, te) order. A quiet
input with a recent watermark does not hold a busy one back."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..batches import INF, TS, sort_by_interval
from .base import Operator


class Merger:
    def __init__(self, inputs: int):
        self.pending = [[] for _ in range(inputs)]     # queued batches per input
        self.marks = [None] * inputs                    # latest watermark per input

    def add(self, batch: pa.RecordBatch, port: int) -> None:
        if batch.num_rows:
            self.pending[port].append(batch)

    def mark(self, ts: int, port: int) -> None:
        self.marks[port] = ts if self.marks[port] is None else max(self.marks[port], ts)

    def frontier(self) -> int | None:
        """Rows with ts <= frontier are stable: every input has data or a watermark past it."""
        bounds = []
        for queue, mark in zip(self.pending, self.marks):
            last = queue[-1].column(TS)[-1].as_py() if queue else None
            candidates = [x for x in (last, mark) if x is not None]
            if not candidates:
                return None
            bounds.append(max(candidates))
        return min(bounds)

    def release_parts(self, *, everything: bool = False) -> tuple[int | None, list]:
        """(limit, [the stable rows of each input, or None]): every input's rows up to the
        frontier (all rows when ``everything``), each in the order it came."""
        limit = None if everything else self.frontier()
        if limit is None and not everything:
            return None, [None] * len(self.pending)
        parts, kept = [], []
        for queue in self.pending:
            if everything:
                taken, rest = queue, []
            else:
                taken, rest = _split(queue, limit)
            kept.append(rest)
            taken = [b for b in taken if b.num_rows]
            parts.append(pa.Table.from_batches(taken) if taken else None)
        self.pending = kept
        return limit, parts

    def release(self, *, everything: bool = False) -> pa.Table | None:
        """The stable rows of all inputs (one schema), in (ts, te) order."""
        _, parts = self.release_parts(everything=everything)
        parts = [p for p in parts if p is not None]
        if not parts:
            return None
        return sort_by_interval(pa.concat_tables(parts))


def _split(queue: list, limit: int) -> tuple[list, list]:
    """An input's queued batches (in ts order) → (rows with ts <= limit, the rest): batches
    wholly before the limit are taken as they are, only the one that straddles it is cut."""
    for i, b in enumerate(queue):
        ts = b.column(TS)
        if ts[-1].as_py() <= limit:
            continue
        cut = int(np.searchsorted(ts.to_numpy(), limit, side="right"))
        head, tail = b.slice(0, cut), b.slice(cut)
        return queue[:i] + [head], [tail] + queue[i + 1:]
    return queue, []


class Merging(Operator):
    """An operator over several inputs that works on their stable rows: each message adds
    to the merge, and ``advance(limit, parts, everything)`` gets every input's rows up to
    the frontier (``limit``; INF at the end, when ``everything``)."""

    def on_batch(self, batch, port=0):
        self.merger.add(batch, port)
        return self._step()

    def on_watermark(self, ts, port=0):
        self.merger.mark(ts, port)
        self.at_boundary = True
        try:
            return self._step()
        finally:
            self.at_boundary = False

    def on_end(self):
        return self._step(everything=True)

    at_boundary = False  # this step is a BOUNDARY's (not data's): what works only at
                         # BOUNDARYs (Σ's cuts, an outer join's padded rows) does it now
    reached = None       # the highest frontier so far: an input's rows come in order, so
                         # its bound never falls back below rows it already sent

    def _step(self, everything: bool = False) -> list:
        limit, parts = self.merger.release_parts(everything=everything)
        if limit is None and not everything:
            return []
        if not everything:
            limit = self.reached = limit if self.reached is None else max(limit, self.reached)
        return self.advance(INF if everything else limit, parts, everything)

    def advance(self, limit: int, parts: list, everything: bool) -> list:
        raise NotImplementedError
