"""α: aggregation with the aggregate index of seed 000 §3.4.

Per group, a list of (interval, partial-aggregate state) kept sorted and non-overlapping. An
input (v, [ts, te)) splits the elements it partly covers, folds v into the covered parts and
fills the uncovered parts of [ts, te) with a fresh state. Inputs arrive in ts order, so every
element that ends by the current time is final: reorganisation emits it (in order) and drops
it; a BOUNDARY at t also splits the element containing t (Algorithm 6) so a quiet stream still
yields rows. The elements one reorganisation emits are coalesced where equal neighbours meet —
except across the slide boundaries of a hopping window, which yields one row per group per
slide. Rows leave in valid_from order.

>>> idx = AggregateIndex([PARTIALS["sum"]])
>>> for v, ts, te in [(-1, 1, 4), (-4, 1, 6), (7, 1, 8)]:
...     idx.insert(ts, te, (v,))
>>> [(s, e, st[0]) for s, e, st in idx.elements]
[(1, 4, 2), (4, 6, 3), (6, 8, 7)]
>>> [(s, e, st[0]) for s, e, st in idx.emit_until(3, split=True)]
[(1, 3, 2)]
>>> idx.insert(3, 7, (2,))
>>> [(s, e, st[0]) for s, e, st in idx.elements]
[(3, 4, 4), (4, 6, 5), (6, 7, 9), (7, 8, 7)]
"""
from __future__ import annotations

import copy

import bisect
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import checkpoints, duck, udf
from ... import plan as P
from ...batches import INF, TE, TS, Watermark
from ...udf import user_aggregate
from ..base import Operator
from ..filter_map import Projection


@dataclass(frozen=True)
class PartialFn:
    """Phase one of an aggregate: a fresh state, folding one value in, the partial's value."""
    init: Callable[[], object]
    add: Callable[[object, object], object]
    value: Callable[[object], object]


def _add_sum(s, v):
    return s if v is None else (v if s is None else s + v)


def _add_min(s, v):
    return s if v is None else (v if s is None or v < s else s)


def _add_max(s, v):
    return s if v is None else (v if s is None or v > s else s)


def _add_distinct(s, v):
    if v is not None:
        s = dict(s)
        s[v] = s.get(v, 0) + 1
    return s


PARTIALS = {
    "sum": PartialFn(lambda: None, _add_sum, lambda s: s),
    "count": PartialFn(lambda: 0, lambda s, v: s + (v is not None), lambda s: s),
    "count_star": PartialFn(lambda: 0, lambda s, v: s + 1, lambda s: s),
    "min": PartialFn(lambda: None, _add_min, lambda s: s),
    "max": PartialFn(lambda: None, _add_max, lambda s: s),
    "count_distinct": PartialFn(lambda: {}, _add_distinct, lambda s: len(s)),
    "sum_distinct": PartialFn(lambda: {}, _add_distinct, lambda s: sum(s) if s else None),
}


# the partials whose values over some rows fold into a state as one value does (a count folds
# in by adding): a batch's rows that share a group and an interval are folded by Arrow first
_MERGED = {
    "sum": ("sum", PARTIALS["sum"]),
    "min": ("min", PARTIALS["min"]),
    "max": ("max", PARTIALS["max"]),
    "count": ("count", PartialFn(lambda: 0, lambda s, n: s + n, lambda s: s)),
    "count_star": ("count_all", PartialFn(lambda: 0, lambda s, n: s + n, lambda s: s)),
}


# a checkpoint refers to them by name
for _name, _fn in [*PARTIALS.items(), *((f"merged_{k}", f) for k, (_, f) in _MERGED.items())]:
    checkpoints.constant(f"partial:{_name}", _fn)


# merged partials a sweep may sum over a batch's overlapping rows (they undo by subtracting)
_SWEPT = ("count", "count_star", "sum")


def _mergeable(func: str, arg_type) -> bool:
    # floats stay one by one: a sum added in another order has other last bits, and Arrow's
    # MIN and MAX pass over NaN where the fold does not
    return func in _MERGED and not (func != "count_star" and pa.types.is_floating(arg_type))


def partial_fn(func: str) -> PartialFn:
    fn = PARTIALS.get(func)
    if fn is not None:
        return fn
    cls = user_aggregate(func)
    return PartialFn(cls, _user_add, lambda s: s.result())


def _user_add(state, value):
    # an element split in two shares no state: fold into a copy
    if value is None:
        return state
    state = copy.deepcopy(state)
    state.add(value)
    return state


def _partial_type(func: str, arg_type):
    """The Arrow type of a partial's values (known before any value, so all-NULL rows that
    fill an empty window keep the columns' types)."""
    if func in ("count", "count_star", "count_distinct"):
        return pa.int64()
    if func in ("sum", "sum_distinct") and pa.types.is_integer(arg_type):
        return pa.int64()
    if func in ("sum", "sum_distinct") and pa.types.is_decimal(arg_type):
        return pa.decimal128(38, arg_type.scale)       # a sum outgrows its terms' precision
    if func in ("sum", "sum_distinct", "min", "max") and not pa.types.is_null(arg_type):
        return arg_type
    if func not in PARTIALS:
        return udf.arrow_type(udf.return_type(func))
    return None


class AggregateIndex:
    """The elements of one group: ``[start, end, states]`` sorted by start, disjoint."""

    __slots__ = ("fns", "elements")

    def __init__(self, fns: list):
        self.fns = fns
        self.elements: list = []

    def _fresh(self, values) -> list:
        return [fn.add(fn.init(), v) for fn, v in zip(self.fns, values)]

    def _fold(self, states, values) -> list:
        return [fn.add(s, v) for fn, s, v in zip(self.fns, states, values)]

    def insert(self, ts: int, te: int, values) -> None:
        if te <= ts:
            return
        els = self.elements
        i = self._first_ending_after(ts)
        out, cursor, j = [], ts, i
        while j < len(els) and els[j][0] < te:
            s, e, st = els[j]
            if s > cursor:                          # a gap before this element
                out.append([cursor, s, self._fresh(values)])
            if s < ts:                              # keep the uncovered prefix
                out.append([s, ts, st])
                s = ts
            if e > te:                              # covered part, then uncovered suffix
                out.append([s, te, self._fold(st, values)])
                out.append([te, e, list(st)])
            else:
                out.append([s, e, self._fold(st, values)])
            cursor = min(e, te)
            j += 1
        if cursor < te:
            out.append([cursor, te, self._fresh(values)])
        els[i:j] = out

    def _first_ending_after(self, ts: int) -> int:
        lo, hi = 0, len(self.elements)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.elements[mid][1] <= ts:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def emit_until(self, now: int, *, split: bool, whole: bool = False) -> list:
        """Remove and return the elements that end by ``now``; with ``split`` also the part
        before ``now`` of the element containing it; ``whole``: every element that starts
        before ``now`` (nothing later changes it)."""
        els = self.elements
        k = 0
        while k < len(els) and (els[k][1] <= now or whole and els[k][0] < now):
            k += 1
        out = els[:k]
        del els[:k]
        if split and els and els[0][0] < now:
            s, e, st = els[0]
            out.append([s, now, list(st)])
            els[0] = [now, e, st]
        return out

    def first_start(self) -> int | None:
        return self.elements[0][0] if self.elements else None


class Aggregate(Operator):
    """α over one input. ``slide_us``: the input is a hopping window (one row per slide);
    ``loop``: the input is a StreaQueL loop's window (one row per iteration); ``whole``: the
    group keys hold the end of a window whose tuples all come at once (a window table's, a
    session's), so a group's row is final as soon as the input's time passes its start and
    leaves whole rather than in pieces."""

    checkpointed = ("groups", "ready", "filled_until", "types", "merged", "swept", "fns")

    def __init__(self, node, *, slide_us: int | None = None, slide_start_us: int = 0,
                 whole: bool = False):
        self.node = node
        self.whole = whole
        self.keys = [k.name for k in node.keys]
        self.partials = [p.name for p in node.partials]
        self.fns = [partial_fn(p.func) for p in node.partials]
        self.slide_us = slide_us
        self.loop = None
        self.slide_start = slide_start_us
        self.groups: dict = {}                  # key tuple -> AggregateIndex
        self.ready: list = []                   # rows final and coalesced, awaiting order
        self.filled_until: int | None = None    # keyless: rows are produced for every instant
        self.types: dict = {}                   # Arrow type of each key and partial column
        self.merged = False                     # partials folded per batch by Arrow first
        self.swept = False                      # … and cut into disjoint pieces (_swept)
        self.input = self.final = None          # Projections over the cursor ``open`` takes

    def open(self, context):
        self.con = context.cursor()
        node = self.node
        if context.st is not None and not node.keys:
            # a query started at a known instant (primed at a seam) answers from there,
            # over an empty window too, not from the first BOUNDARY it sees
            self.filled_until = context.st
        self.input = Projection([(k.name, k.expr) for k in node.keys] +
                                [(p.name, p.arg) for p in node.partials], [TS, TE], self.con)
        self.final = Projection([(f.name, f.expr) for f in node.finals], [TS, TE], self.con,
                                name="r")
        # the keys' and partials' Arrow types by the plan, for rows made before any tuple
        # came (f(⊥) of an aggregate without GROUP BY): the first batch's win after it
        planned = [P.Column(k.name, k.expr.type) for k in node.keys] + \
            [P.Column(p.name, p.arg.type) for p in node.partials if p.arg is not None]
        known = [c for c in planned if c.type not in ("", "UNKNOWN")]
        arrow = {f.name: f.type for f in duck.typed_empty(self.con, known).schema} \
            if known else {}
        self.planned = {k.name: arrow.get(k.name) for k in node.keys}
        self.planned.update({p.name: _partial_type(p.func, arrow.get(p.name, pa.null()))
                             for p in node.partials})

    def follow_loop(self, loop):
        self.loop = loop            # one row per iteration of the StreaQueL loop

    # ------------------------------------------------------------------ input
    def on_batch(self, batch, port=0):
        if batch.num_rows == 0:
            return []
        table = self.input.run(batch)
        if not self.types:
            funcs = [p.func for p in self.node.partials]
            if all(_mergeable(f, table.schema.field(p).type)
                   for f, p in zip(funcs, self.partials)) and not self.groups and \
                    not any(pa.types.is_nested(table.schema.field(k).type) for k in self.keys):
                self.fns = [_MERGED[f][1] for f in funcs]
                self.merged = True
                self.swept = all(f in _SWEPT and (f != "sum" or pa.types.is_integer(
                    table.schema.field(p).type)) for f, p in zip(funcs, self.partials))
            self.types = {f.name: f.type for f in table.schema}
            for p, fn_name in zip(self.partials, funcs):
                self.types[p] = _partial_type(fn_name, self.types[p])
        now = pc.max(table.column(TS)).as_py()
        if self.merged:
            table = self._folded(table)
            if self.swept:
                table = self._swept(table)
        cols = table.to_pydict()
        nk = len(self.keys)
        key_cols = [cols[k] for k in self.keys]
        val_cols = [cols[p] for p in self.partials]
        ts_col, te_col = cols[TS], cols[TE]
        for i in range(len(ts_col)):
            key = tuple(c[i] for c in key_cols) if nk else ()
            idx = self.groups.get(key)
            if idx is None:
                idx = self.groups[key] = AggregateIndex(self.fns)
            idx.insert(ts_col[i], te_col[i], [c[i] for c in val_cols])
        # rows only: progress is passed on when a BOUNDARY says so (seed 000 §2.6), so a
        # multi-input operator downstream orders its inputs by their tuples, as the seed shows
        return [m for m in self._reorganise(now, split=False)
                if not isinstance(m, Watermark)]

    def _folded(self, table: pa.Table) -> pa.Table:
        """One row per group and interval, its partials folded by Arrow's hash aggregation (a
        hopping window's output, read by a second aggregate, has thousands of rows per
        interval), in ts order."""
        how = [_MERGED[p.func][0] for p in self.node.partials]
        aggs = [(name, "count", pc.CountOptions(mode="all")) if h == "count_all" else
                (name, h) for name, h in zip(self.partials, how)]
        out = table.group_by(self.keys + [TS, TE], use_threads=False).aggregate(aggs)
        names = [f"{name}_{'count' if h == 'count_all' else h}"
                 for name, h in zip(self.partials, how)]
        out = out.select(self.keys + names + [TS, TE]).rename_columns(
            self.keys + self.partials + [TS, TE])
        return out.sort_by([(TS, "ascending"), (TE, "ascending")])

    def _swept(self, table: pa.Table) -> pa.Table:
        """The batch's rows as disjoint pieces per group: between each two neighbouring ends
        of its intervals, the partials of the rows covering that stretch, summed (counts and
        integer sums are undone by subtracting, so one sweep over the sorted ends gives them
        all). A row valid long (a table's row version, split at each BOUNDARY) then folds
        into the few elements of its own stretch, not into every element it spans."""
        n = table.num_rows
        if n < 2:
            return table
        if self.keys:
            groups = table.select(self.keys).to_pylist()
            ids: dict = {}
            gid = np.fromiter((ids.setdefault(tuple(g.values()), len(ids)) for g in groups),
                              np.int64, n)
        else:
            gid = np.zeros(n, np.int64)
        ts = table.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        te = table.column(TE).to_numpy(zero_copy_only=False).astype(np.int64)
        g, t = np.concatenate([gid, gid]), np.concatenate([ts, te])
        order = np.lexsort((t, g))
        g, t = g[order], t[order]
        sign = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])[order]
        cover = np.cumsum(sign)
        # a stretch: from one end to the next one of the same group, covered by some row
        cut = np.flatnonzero((g[:-1] == g[1:]) & (t[:-1] < t[1:]) & (cover[:-1] > 0))
        cols = {}
        for name in self.partials:
            col = table.column(name)
            present = col.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)
            values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            total = np.cumsum(np.concatenate([values, -values])[order])[cut]
            known = np.cumsum(np.concatenate([present, -present])[order])[cut]
            cols[name] = pa.array(total, pa.int64(), mask=known == 0)
        first = order[cut] % n             # a row whose keys the stretch's group has
        out = {k: table.column(k).take(pa.array(first)) for k in self.keys}
        out.update(cols)
        out[TS], out[TE] = pa.array(t[cut]), pa.array(t[cut + 1])
        return pa.table(out)

    def on_watermark(self, ts, port=0):
        self.on_start(ts)
        return self._reorganise(ts, split=True)

    def on_start(self, ts: int) -> None:
        # the first instant this aggregate answers for (only a keyless one fills gaps)
        if self.filled_until is None and not self.keys:
            self.filled_until = ts

    def on_end(self):
        return self._reorganise(INF, split=True)

    # ------------------------------------------------------------------ output
    def _values(self, states) -> list:
        return [fn.value(s) for fn, s in zip(self.fns, states)]

    def _split_slides(self, s: int, e: int):
        if e >= INF:            # the input ended: what holds from s on holds in one row
            yield s, e
            return
        j, off = self.slide_us, self.slide_start
        cut = off + ((s - off) // j + 1) * j
        while cut < e:
            yield s, cut
            s, cut = cut, cut + j
        yield s, e

    def _split_at(self, s: int, e: int):
        """[s, e) cut where the loop's iterations start."""
        starts = self.loop.starts
        for cut in starts[bisect.bisect_right(starts, s):bisect.bisect_left(starts, e)]:
            yield s, int(cut)
            s = int(cut)
        yield s, e

    def _emit(self, key, elements: list) -> None:
        """One reorganisation's emitted elements of a group, as rows: each slide of a hopping
        window has its own row; otherwise equal neighbours are coalesced."""
        if self.slide_us:
            for s, e, states in elements:
                values = self._values(states)
                self.ready.extend((a, b, key, values) for a, b in self._split_slides(s, e))
            return
        if self.loop is not None and self.loop.starts is not None:
            for s, e, states in elements:
                values = self._values(states)
                self.ready.extend((a, b, key, values) for a, b in self._split_at(s, e))
            return
        self._coalesce(key, [(s, e, self._values(states)) for s, e, states in elements])

    def _coalesce(self, key, rows: list) -> None:
        """Add (start, end, values) rows of a group, merging neighbours that meet with equal
        values."""
        last = None
        for s, e, values in rows:
            if last is not None and last[1] == s and last[3] == values:
                last = (last[0], e, key, values)
                self.ready[-1] = last
            else:
                last = (s, e, key, values)
                self.ready.append(last)

    def _fill_gaps(self, elements: list, now: int) -> list:
        """Keyless aggregation answers at every instant: empty stretches get f(⊥)."""
        out, cursor = [], self.filled_until
        empty = [fn.init() for fn in self.fns]
        for el in elements:
            if cursor is not None and el[0] > cursor:
                out.append([cursor, el[0], empty])
            out.append(el)
            cursor = el[1]
        if cursor is not None and now > cursor:
            nxt = self.groups.get(())
            start_next = nxt.first_start() if nxt is not None else None
            end = min(now, start_next) if start_next is not None else now
            if end > cursor:
                out.append([cursor, end, empty])
                cursor = end
        self.filled_until = cursor
        return out

    def _reorganise(self, now: int, *, split: bool) -> list:
        if not self.keys and () not in self.groups:
            self._emit((), self._fill_gaps([], now))      # nothing held: f(⊥) so far
        for key in list(self.groups):
            idx = self.groups[key]
            elements = idx.emit_until(now, split=split, whole=self.whole)
            if not self.keys:
                elements = self._fill_gaps(elements, now)
            self._emit(key, elements)
            if not idx.elements:
                del self.groups[key]
        return self._release(now)

    def _frontier(self) -> int:
        starts = [i.first_start() for i in self.groups.values() if i.elements]
        return min(starts) if starts else INF

    def _release(self, now: int) -> list:
        """Rows leave in valid_from order: only those starting before anything still held.
        What follows them is a BOUNDARY at the earliest instant still open: ``now`` (the
        input's time) when nothing is held, so an aggregate with no group left still tells
        what reads it (a union, an outer aggregate) how far its answer is final."""
        front = min(self._frontier(), now)
        if not self.ready:
            return [Watermark(front)] if front < INF else []
        self.ready.sort(key=lambda r: (r[0], r[1]))
        k = bisect.bisect_left([r[0] for r in self.ready], front)
        rows, self.ready = self.ready[:k], self.ready[k:]
        out = []
        if rows:
            data = {name: pa.array([r[2][i] for r in rows], self._type(name))
                    for i, name in enumerate(self.keys)}
            for i, name in enumerate(self.partials):
                data[name] = pa.array([r[3][i] for r in rows], self._type(name))
            data[TS] = pa.array([r[0] for r in rows], pa.int64())
            data[TE] = pa.array([r[1] for r in rows], pa.int64())
            table = pa.table(data)
            result = self.final.run(table)
            out.extend(result.to_batches())
        out.append(Watermark(min(front, self.ready[0][0]) if self.ready else front))
        if out[-1].ts >= INF:
            out.pop()
        return out

    def _type(self, name: str):
        return self.types.get(name) or self.planned.get(name)

    def state_size(self) -> int:
        return sum(len(i.elements) for i in self.groups.values())
