"""τ, Top-N over rows that hold for ever once they start (``TopN``): each partition keeps its
first ``count`` rows in order; a row that ranks among them enters at its start, and the row it
pushes past ``count`` leaves then (with the row number selected, the rows after it are numbered
anew from then on). Rows whose end is not known yet leave in pieces at each BOUNDARY, as an
aggregate's do; the state is the rows kept, ``count`` per partition.
"""
from __future__ import annotations

import bisect

import pyarrow as pa

from ..batches import INF, TE, TS, Watermark
from .base import Operator


class _Descending:
    """A value that sorts backwards (ORDER BY … DESC of any type)."""
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return self.v > other.v

    def __eq__(self, other):
        return self.v == other.v


def _sort_key(values, order) -> tuple:
    """A row's place by ``order`` ((descending, nulls first) per value): NULLs before or
    after every value, as PostgreSQL sorts them."""
    out = []
    for v, (desc, nulls_first) in zip(values, order):
        if v is None:
            out.append((0 if nulls_first else 2, None))
        else:
            out.append((1, _Descending(v) if desc else v))
    return tuple(out)


class _Row:
    """A row of the batch at hand, by its index, until its values are read."""
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class TopN(Operator):
    def __init__(self, node):
        self.node = node
        self.count = node.count
        self.directions = [(desc, nulls) for _, desc, nulls in node.order]
        self.columns = [c.name for c in node.input.schema]
        self.rank = bool(node.rank)
        # partition -> (sort keys, [values, start, number]) in order, at most ``count``
        self.partitions: dict = {}
        self.ready: list = []                  # (start, end, values, number) pieces
        self.types: dict = {}                  # the input columns' Arrow types

    def on_batch(self, batch, port=0):
        self.types = self.types or {f.name: f.type for f in batch.schema}
        # only the partition and order columns become Python values for every row; a row's
        # other values only if it enters (most rows of a long stream never do)
        cols = {name: batch.column(name).to_pylist() for name in
                {*self.node.partition, *(c for c, _, _ in self.node.order)}}
        parts = list(zip(*(cols[c] for c in self.node.partition))) if self.node.partition \
            else [()] * batch.num_rows
        keys = list(zip(*(cols[c] for c, _, _ in self.node.order)))
        first_piece, touched = len(self.ready), set()
        for i, (part, key, ts) in enumerate(zip(parts, keys, batch.column(TS).to_pylist())):
            if self._insert(part, _sort_key(key, self.directions), _Row(i), ts):
                touched.add(part)
        entries = [e for p in touched for e in self.partitions[p][1]]
        pending = [e for e in entries if isinstance(e[0], _Row)]
        pieces = [k for k in range(first_piece, len(self.ready))
                  if isinstance(self.ready[k][2], _Row)]
        rows = sorted({e[0].i for e in pending} | {self.ready[k][2].i for k in pieces})
        values = dict(zip(rows, zip(*(batch.column(c).take(pa.array(rows, pa.int64()))
                                      .to_pylist() for c in self.columns))))
        for e in pending:
            e[0] = values[e[0].i]
        for k in pieces:
            start, end, row, number = self.ready[k]
            self.ready[k] = (start, end, values[row.i], number)
        return []

    def _insert(self, part, key, values, ts: int) -> bool:
        """Whether the row enters its partition's first ``count``."""
        sorts, kept = self.partitions.setdefault(part, ([], []))
        at = bisect.bisect_right(sorts, key)        # after its equals: the earlier stays first
        if at >= self.count:
            return False
        sorts.insert(at, key)
        kept.insert(at, [values, ts, at + 1])
        moved = kept[at + 1:] if self.rank else kept[self.count:]
        for entry in moved:                         # renumbered, or pushed out
            self._piece(entry, ts)
            entry[2] += 1
        if len(kept) > self.count:
            del sorts[self.count:], kept[self.count:]
        return True

    def _piece(self, entry, until: int) -> None:
        """The row as it held from its start until ``until``; it goes on from there."""
        if until > entry[1]:
            self.ready.append((entry[1], until, entry[0], entry[2]))
            entry[1] = until

    def on_watermark(self, ts, port=0):
        for _, kept in self.partitions.values():
            for entry in kept:
                self._piece(entry, ts)
        return self._release() + [Watermark(ts)]

    def on_end(self):
        for _, kept in self.partitions.values():
            for entry in kept:
                self._piece(entry, INF)
        return self._release()

    def _release(self) -> list:
        if not self.ready:
            return []
        self.ready.sort(key=lambda r: (r[0], r[1]))
        data = {c: pa.array([r[2][i] for r in self.ready], self.types.get(c))
                for i, c in enumerate(self.columns)}
        if self.rank:
            data[self.node.rank] = pa.array([r[3] for r in self.ready], pa.int64())
        data[TS] = pa.array([r[0] for r in self.ready], pa.int64())
        data[TE] = pa.array([r[1] for r in self.ready], pa.int64())
        self.ready = []
        return pa.table(data).to_batches()

    def state_size(self) -> int:
        return sum(len(kept) for _, kept in self.partitions.values())
