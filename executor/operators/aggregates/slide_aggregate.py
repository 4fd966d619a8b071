"""ω RANGE i SLIDE j fused with α, on whole batches: the hopping and tumbling case of the
aggregate index, where every interval lies on the slide grid.

A tuple with timestamp ts is in the answers for the τ on the grid with τ - i < ts <= τ. Each
batch is aggregated by Arrow per (group, first τ, last τ), those partials are spread over
their slides (numpy) and filed under each τ; a slide's partials are merged once, when it is
final: once a tuple with ts > τ (or a BOUNDARY past τ) has been seen. So a batch costs what
its own rows cost, however many groups the open slides hold. Batches that close no slide are
only held (up to ``_PENDING_BYTES``), then aggregated together: one pass where a shared σ
hands many queries' aggregates a few rows each per batch. A final slide's rows are valid
for [τ, τ + j) and leave in τ order. Results equal the aggregate index's (``aggregate.py``), which
stays the path for other windows and for COUNT(DISTINCT) and user aggregates.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import duck
from ... import plan as P
from ...batches import TE, TS, Watermark
from ...duck import quote
from ..base import Operator
from ..filter_map import Projection

TAU = "__tau"
_COMPACT = 64          # a slide's partials are merged into one table after this many batches
_PENDING_BYTES = 1 << 16   # input held before it is aggregated, though no slide closes
_EMPTY: dict = {}          # (input schema, keys, partials, funcs) -> partials of no rows

# partial -> (Arrow hash aggregation on the batch, the one that merges two partials)
_VECTOR = {
    "sum": ("sum", "sum"),
    "count": ("count", "sum"),
    "count_star": ("count_all", "sum"),
    "min": ("min", "min"),
    "max": ("max", "max"),
}


def groupable(node: P.Aggregate) -> bool:
    """Whether Arrow's hash aggregation computes every partial of ``node`` (``grouped``)."""
    return all(p.func in _VECTOR for p in node.partials)


supports = groupable


class SlideAggregate(Operator):
    checkpointed = ("slides", "empty", "started", "emitted_until", "marked", "promised",
                    "pending", "pending_bytes", "pending_first")

    def __init__(self, node: P.Aggregate, window: P.SlideWindow):
        self.node = node
        self.size, self.slide = window.size_us, window.slide_us
        self.offset = window.start_us or 0
        self.keys = [k.name for k in node.keys]
        self.partials = [p.name for p in node.partials]
        self.funcs = [p.func for p in node.partials]
        self.slides: dict = {}                  # τ -> [partials of its rows so far]
        self.empty: pa.Table | None = None      # no rows: keys, partials and TAU, typed
        self.started: int | None = None         # keyless: first slide to answer for
        self.emitted_until: int | None = None   # keyless: slides up to here are out
        # the latest watermark: at the end, the slide holding then is final too
        self.marked: int | None = None
        self.promised: int | None = None        # the last watermark sent on
        self.pending: list = []                 # input batches not aggregated yet
        self.pending_bytes = 0
        self.pending_first: int | None = None   # the first slide the held rows are in
        self.input = self.final = None          # Projections over the cursor ``open`` takes

    def open(self, context):
        self.con = context.cursor()
        node = self.node
        one = P.Expr("1", (), "INTEGER", ("int", "1"))
        self.input = Projection([(k.name, k.expr) for k in node.keys] +
                                [(p.name, p.arg if p.arg is not None else one)
                                 for p in node.partials], [TS], self.con)
        tau = P.Expr(quote(TAU), (TAU,), "BIGINT", ("col", TAU))
        end = P.Expr(f'{quote(TAU)} + {self.slide}', (TAU,), "BIGINT",
                     ("add", ("col", TAU), ("int", str(self.slide))))
        self.final = Projection([(f.name, f.expr) for f in node.finals] +
                                [(TS, tau), (TE, end)], [], self.con, name="r")

    def _grid_up(self, ts):
        """The first τ on the grid at or after ``ts`` (an int or an array of them)."""
        return self.offset - ((self.offset - ts) // self.slide) * self.slide

    def on_batch(self, batch, port=0):
        if batch.num_rows == 0:
            return []
        ts = batch.column(TS)
        now = ts[-1].as_py()
        self.on_start(ts[0].as_py())
        if self.empty is None:
            self.empty = self._no_partials(batch.schema)
        if self.pending and batch.schema != self.pending[0].schema:
            self._absorb()          # the stream gained a column: no mixed schemas held
        if not self.pending:
            self.pending_first = self._grid_up(ts[0].as_py())
        self.pending.append(batch)
        self.pending_bytes += batch.get_total_buffer_size()    # (nbytes: ~30 µs a call)
        if self.pending_bytes >= _PENDING_BYTES:
            self._absorb()
        return self._emit(now, inclusive=False) + self._promise(now)

    def _absorb(self, before: int | None = None) -> None:
        """Aggregate the held rows, if any, or only if one of their slides is before
        ``before`` (it is about to be final)."""
        if not self.pending or (before is not None and self.pending_first >= before):
            return
        held, self.pending, self.pending_bytes = self.pending, [], 0
        t = self.input.run(pa.Table.from_batches(held) if len(held) > 1 else held[0])
        ts = t.column(TS).to_numpy()
        first = self._grid_up(ts)                                   # first τ >= ts
        last = self.offset + ((ts + self.size - 1 - self.offset) // self.slide) * self.slide
        counts = np.maximum((last - first) // self.slide + 1, 0)
        # aggregate first per (group, first slide, last slide) — tuples there share their
        # slides — then spread those partials over their slides: far fewer rows to explode
        t = t.drop_columns([TS]).append_column("__first", pa.array(first)) \
            .append_column("__last", pa.array(last)).filter(pa.array(counts > 0))
        pre = grouped(t, self.keys + ["__first", "__last"], self.partials, self.funcs)
        f0 = pre.column("__first").to_numpy()
        n = (pre.column("__last").to_numpy() - f0) // self.slide + 1
        rows = np.repeat(np.arange(pre.num_rows), n)
        tau = f0[rows] + (np.arange(len(rows)) - np.repeat(np.cumsum(n) - n, n)) * self.slide
        order = np.argsort(tau, kind="stable")          # each slide's rows side by side
        rows, tau = rows[order], tau[order]
        spread = pre.drop_columns(["__first", "__last"]).take(pa.array(rows))
        taus, starts = np.unique(tau, return_index=True)
        for k, at in enumerate(taus.tolist()):
            end = int(starts[k + 1]) if k + 1 < len(taus) else len(tau)
            parts = self.slides.setdefault(at, [])
            parts.append(spread.slice(int(starts[k]), end - int(starts[k])))
            if len(parts) >= _COMPACT:                 # bounded: many batches, one slide
                self.slides[at] = [self._merged(parts)]

    def _no_partials(self, schema: pa.Schema) -> pa.Table:
        """The partials of no rows, typed as ``_absorb`` types them (with TAU), for the rows
        of empty slides: asked of Arrow once for all aggregates alike (many queries')."""
        projected = duck.schema_of(self.con, self.input.name, schema, self.input.sql)
        key = (projected, tuple(self.keys), tuple(self.partials), tuple(self.funcs))
        if key not in _EMPTY:
            if len(_EMPTY) >= 1024:
                _EMPTY.pop(next(iter(_EMPTY)))          # the oldest first
            none = pa.array([], pa.int64())
            t = projected.empty_table().drop_columns([TS]).append_column("__first", none) \
                .append_column("__last", none)
            pre = grouped(t, self.keys + ["__first", "__last"], self.partials, self.funcs)
            _EMPTY[key] = pre.drop_columns(["__first", "__last"]).append_column(TAU, none)
        return _EMPTY[key]

    def _merged(self, parts: list) -> pa.Table:
        """One row per group: the slide's partials merged."""
        both = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 \
            else parts[0]
        merged = both.group_by(self.keys, use_threads=False).aggregate(
            [(p, _VECTOR[f][1]) for p, f in zip(self.partials, self.funcs)])
        merged = merged.rename_columns([_strip(n, self.partials) for n in merged.column_names])
        return merged.select(self.keys + self.partials)

    def on_start(self, ts: int) -> None:
        if self.started is None and not self.keys:
            # the slide whose answer holds when the stream starts (τ <= ts0 < τ + j)
            self.started = self.offset + ((ts - self.offset) // self.slide) * self.slide

    def on_watermark(self, ts, port=0):
        self.on_start(ts)
        self.marked = ts if self.marked is None else max(self.marked, ts)
        return self._emit(ts, inclusive=False) + self._promise(ts)

    def on_end(self):
        return self._emit(None, inclusive=True)

    def _promise(self, now: int) -> list:
        """Once the slides before ``now`` are out, every later row starts at a slide's end
        τ >= ``now``: a watermark at the first such τ, sent on data as well as on a
        BOUNDARY, so what reads these rows (q5's MAX, a join) answers a slide as soon as it
        closes, not at the next heartbeat. Every interval out of here lies on the slide
        grid, so a watermark on the grid cuts none of the answers above in two (one at a
        heartbeat's instant did). Once a slide at most."""
        at = self._grid_up(now)
        if self.promised is not None and at <= self.promised:
            return []
        self.promised = at
        return [Watermark(at)]

    def _emit(self, now: int | None, *, inclusive: bool) -> list:
        """Rows of the slides final at ``now`` (τ < now), or of every slide at the end."""
        self._absorb(before=now)
        done = sorted(at for at in self.slides if now is None or at < now)
        if not done and (self.keys or self.started is None or now is not None and
                         self._grid_up(now) - self.slide < self._unanswered()):
            return []
        finals = []
        for at in done:
            merged = self._merged(self.slides.pop(at))
            finals.append(merged.append_column(TAU, pa.array(np.full(merged.num_rows, at))))
        parts = ([self.empty] if self.empty is not None else []) + finals
        ready = pa.concat_tables(parts, promote_options="permissive") if parts else None
        if not self.keys:
            ready = self._fill_empty(ready, now)
            ready = ready.sort_by(TAU) if ready is not None else None
        if ready is None or ready.num_rows == 0:
            return []
        return self.final.run(ready).to_batches()

    def _fill_empty(self, ready: pa.Table | None, now: int | None) -> pa.Table | None:
        """Without GROUP BY every slide has its row, COUNT(*) = 0 where the window was empty
        (``ready`` None: no tuple has come yet)."""
        if self.started is None:
            return ready
        have = set(ready.column(TAU).to_pylist()) if ready is not None else set()
        if now is not None:
            hi = self._grid_up(now) - self.slide
        else:               # the end: every slide up to the one the last watermark is in
            last = [self.offset + (self.marked - self.offset) // self.slide * self.slide] \
                if self.marked is not None else []
            hi = max([*have, *last], default=None)
        if hi is None:
            return ready
        lo = self._unanswered()
        missing = [x for x in range(lo, hi + 1, self.slide) if x not in have]
        self.emitted_until = max(lo, hi + self.slide)
        if not missing:
            return ready
        empty = {TAU: pa.array(missing, pa.int64())}
        for p, f in zip(self.partials, self.funcs):
            zero = 0 if f in ("count", "count_star") else None
            empty[p] = pa.array([zero] * len(missing), ready.schema.field(p).type
                                if ready is not None and p in ready.schema.names else None)
        if ready is None or not ready.num_rows:
            return pa.table(empty)
        filler = pa.table(empty).select(ready.schema.names)
        return pa.concat_tables([ready, filler.cast(ready.schema)])

    def _unanswered(self) -> int:
        """Keyless: the first slide whose row has not been sent."""
        return self.emitted_until if self.emitted_until is not None else self.started

    def state_size(self) -> int:
        return sum(t.num_rows for parts in self.slides.values() for t in parts) + \
            sum(t.num_rows for t in self.pending)


def grouped(table: pa.Table, by: list, partials: list, funcs: list) -> pa.Table:
    """``table``'s partials aggregated by Arrow per ``by``, under their own names."""
    out = table.group_by(by, use_threads=False).aggregate(
        [(p, _VECTOR[f][0]) if f != "count_star" else (p, "count", pc.CountOptions("all"))
         for p, f in zip(partials, funcs)])
    return out.rename_columns([_strip(n, partials) for n in out.column_names])


def _strip(name: str, partials: list) -> str:
    """Arrow names aggregates ``p0_sum``; give them back their partial names."""
    for p in partials:
        if name.startswith(p + "_"):
            return p
    return name
