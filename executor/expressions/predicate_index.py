"""The grouped filter's predicate index (TelegraphCQ's CACQ): the σ's of many queries that each
compare one integer expression E with constants (=, <, <=, >, >=, BETWEEN, and ANDs of them)
are answered together. Per batch E is computed once (by the kernels, as DuckDB types it) and
sorted; each σ's rows are one run of that order, found by binary search. N such queries cost
one sort of the batch, not N scans, and a σ whose constants no row meets costs nothing more.

``range_of(tree)`` reads a σ's kernel tree as (E, lo, hi); ``RangeIndex.select`` gives, for each
σ it answers, the positions of its rows in the batch, ascending."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import kernels

LOW, HIGH = -(1 << 63), (1 << 63) - 1            # the integers E may hold (int64)
_FLIP = {"eq": "eq", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}   # c op E -> E op' c
_BOUNDS = {"eq": lambda c: (c, c), "lt": lambda c: (LOW, c - 1), "le": lambda c: (LOW, c),
           "gt": lambda c: (c + 1, HIGH), "ge": lambda c: (c, HIGH)}
_NONE = np.empty(0, np.int64)


def _constant(tree) -> int | None:
    """The integer a literal tree is (``7``, ``-7``), else None."""
    if tree[0] == "int":
        return int(tree[1])
    if tree[0] == "neg" and tree[1][0] == "int":
        return -int(tree[1][1])
    return None


def _plain(tree) -> bool:
    """Whether ``tree`` reads a column (a constant expression is no index key)."""
    return tree[0] == "col" or any(isinstance(t, tuple) and _plain(t) for t in tree[1:])


def range_of(tree) -> tuple | None:
    """(E, lo, hi) when ``tree`` is true exactly for the rows whose E is not NULL and lies in
    [lo, hi] (as integers), else None. With E NULL every comparison, and so their AND, is
    NULL, and σ drops the row: the index leaves it out."""
    op = tree[0]
    if op == "and":
        a, b = range_of(tree[1]), range_of(tree[2])
        if a is None or b is None or a[0] != b[0]:
            return None
        return a[0], max(a[1], b[1]), min(a[2], b[2])
    if op not in _FLIP:
        return None
    expr, c = tree[1], _constant(tree[2])
    if c is None:
        expr, c, op = tree[2], _constant(tree[1]), _FLIP[op]
    if c is None or not _plain(expr) or not LOW <= c <= HIGH:
        return None
    return (expr, *_BOUNDS[op](c))


def _clamp(x: int) -> int:
    return min(max(x, LOW), HIGH)


class _Group:
    """The σ's over one E: their positions among the grouped σ's and their [lo, hi]."""

    def __init__(self, expr, members: list):
        self.kernel = kernels.Kernel(expr)
        self.which = [k for k, _, _ in members]
        self.empty = [lo > hi for _, lo, hi in members]       # (E > 2**63 - 1: no row)
        # the bounds within int64, E's widest type, once the empty ones are known
        self.lo = np.array([_clamp(lo) for _, lo, _ in members], np.int64)
        self.hi = np.array([_clamp(hi) for _, _, hi in members], np.int64)


class RangeIndex:
    """The index over ``trees`` (a σ's kernel tree or None each), for the E's that at least
    ``least`` σ's compare; ``con`` types E once (kernels.Kernel.learn)."""

    def __init__(self, trees: list, con, least: int = 2):
        self.con = con
        by_expr: dict = {}
        for k, tree in enumerate(trees):
            found = range_of(tree) if tree is not None else None
            if found is not None:
                by_expr.setdefault(found[0], []).append((k, found[1], found[2]))
        self.groups = []
        for expr, members in by_expr.items():
            if len(members) >= least:
                try:
                    self.groups.append(_Group(expr, members))
                except kernels.Unsupported:
                    pass

    def select(self, batch: pa.RecordBatch, memo: dict) -> dict:
        """{position of a σ: the rows of ``batch`` it keeps, ascending} for the σ's the index
        answers on this batch; the others (E not a signed integer, a value the kernels leave
        to DuckDB) are not in it. ``memo``: steps shared with the other σ's (``Kernel``)."""
        out: dict = {}
        for g in list(self.groups):
            values = self._values(g, batch, memo)
            if values is None:
                continue
            rows, values = values
            order = np.argsort(values, kind="stable")
            ordered = values[order]
            starts = np.searchsorted(ordered, g.lo, "left")
            ends = np.searchsorted(ordered, g.hi, "right")
            for k, a, b, empty in zip(g.which, starts.tolist(), ends.tolist(), g.empty):
                if empty or a >= b:
                    out[k] = _NONE
                else:
                    picked = order[a:b]
                    out[k] = np.sort(rows[picked] if rows is not None else picked)
        return out

    def _values(self, g: _Group, batch: pa.RecordBatch, memo: dict) -> tuple | None:
        """(the positions of E's non-NULL rows, or None for all; E there, as int64), or None
        when the kernels do not give E for this batch (and never will: the group goes)."""
        try:
            g.kernel.learn(batch, self.con)
            v = g.kernel(batch, memo)
        except kernels.Fallback:
            return None
        except kernels.Unsupported:
            self.groups.remove(g)
            return None
        if isinstance(v, pa.Scalar) or not pa.types.is_signed_integer(v.type):
            self.groups.remove(g)          # a comparison of other types: DuckDB's rules
            return None
        if isinstance(v, pa.ChunkedArray):
            v = v.combine_chunks()
        if v.null_count:
            rows = np.flatnonzero(v.is_valid().to_numpy(zero_copy_only=False))
            return rows, v.drop_null().to_numpy().astype(np.int64, copy=False)
        return None, v.to_numpy().astype(np.int64, copy=False)
