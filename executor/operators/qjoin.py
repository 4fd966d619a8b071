"""⋈q, the quality-driven join of two out-of-order streams (seed 003, QJoin): each arriving
tuple joins the other side's buffer at once, and the buffers keep just enough history for the
asked recall over a period.

Tuples come in arrival order, each with its window's interval. A tuple's delay is its stream's
newest time when it arrives minus its own. T is the older of the two streams' newest times;
side k's buffer keeps a tuple while ts > T − d_k − w_k, so a tuple of the other side up to d_k
late still finds it. Every L of T the pair (d_R, d_S) is chosen by Algorithm 1: the recall a
pair gives is estimated from the last few L's delay distributions (granularity g) over the
window cut into basic windows (size b), and the pair with the fewest buffered tuples
((d_R + w_R)·V_R + (d_S + w_S)·V_S) that meets the target is taken. The recall each L really
had is measured as well (the window time each arriving tuple found gone from the other
buffer), and how far the estimate was from it lately corrects the next target.

Results leave as soon as they are found, so not in valid_from order; the output's watermark
is the lower buffer bound (no later result can begin at or before it). Every result is
correct; a tuple whose partners may have left a buffer is counted as late.
"""
from __future__ import annotations

import collections
import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck, kernels
from .. import plan as P
from ..batches import TE, TS, Watermark
from .base import Operator
from .filter_map import Fast

NO_TIME = np.iinfo(np.int64).min
MARGIN = 0.01         # aimed above the target: a period's recall varies about its mean
DELAYS_KEPT = 100_000  # delays kept per side between adaptations
SAMPLE_LS = 4         # the delay distribution is read over the last few L (a tail needs data)


# ---------------------------------------------------------------------- Algorithm 1
def _distribution(delays: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """The delay distribution at granularity g: (delay of each bin (its upper edge), share)."""
    bins = np.bincount((np.maximum(delays, 0) // g).astype(np.int64))
    keep = np.flatnonzero(bins)
    return (keep + 1) * g, bins[keep] / max(len(delays), 1)


def _cdf(delays: np.ndarray):
    """P[D < x] over the sample, for an array of x."""
    ordered = np.sort(delays)
    return lambda x: np.searchsorted(ordered, x, side="left") / max(len(ordered), 1)


def recall_parts(delays_r: np.ndarray, delays_s: np.ndarray, w_r: int, w_s: int, g: int,
                 b: int) -> tuple:
    """The recall as a function of the two delay bounds, Q(d_R, d_S) = G_R(d_R) + G_S(d_S):
    for each side, (thresholds, cumulative weights); G(d) is the weight of thresholds below
    d. A pair (r, s) lies in both windows when u = r.ts − s.ts is in (−w_R, w_S), taken
    uniform over basic windows of size b. If s arrives after r (D_S − D_R > u), it finds r
    when r has not left R's buffer: d_R > D_S − w_R − u; and the other way round."""
    centres = np.arange(-w_r + b / 2, w_s, b, dtype=np.float64)
    weight = np.full(len(centres), 1 / max(len(centres), 1))
    parts = []
    for own, other, w_buffer, sign in ((delays_s, delays_r, w_r, 1), (delays_r, delays_s,
                                                                       w_s, -1)):
        d, share = _distribution(own, g)
        if not len(d):
            parts.append((np.zeros(0), np.zeros(0)))
            continue
        u = sign * centres[None, :]
        last = _cdf(other)(d[:, None] - u)      # this side's tuple arrives after its partner
        need = (d[:, None] - w_buffer - u).ravel()
        mass = (share[:, None] * weight[None, :] * last).ravel()
        order = np.argsort(need, kind="stable")
        parts.append((need[order], np.cumsum(mass[order])))
    return tuple(parts)


def _gain(part, bounds: np.ndarray) -> np.ndarray:
    """G(d) for each d of ``bounds``."""
    need, cum = part
    if not len(need):
        return np.zeros(len(bounds))
    k = np.searchsorted(need, bounds, side="left")
    return np.where(k > 0, cum[np.maximum(k - 1, 0)], 0.0)


def choose_delays(parts: tuple, target: float, w_r: int, w_s: int, rate_r: float,
                  rate_s: float, g: int) -> tuple[int, int, float]:
    """Algorithm 1: scan d_R and d_S in steps of g up to the largest useful delay, keep the
    pairs whose estimated recall meets ``target``, return the one buffering the fewest
    tuples, (d_R, d_S, its recall); the pair that reaches the most recall if none does."""
    top = max([int(p[0][-1]) + g if len(p[0]) else g for p in parts] + [g])
    grid = np.arange(0, top + g, g, dtype=np.int64)
    g_r, g_s = _gain(parts[0], grid.astype(np.float64) + 0.5), \
        _gain(parts[1], grid.astype(np.float64) + 0.5)
    # for each d_R, the least d_S whose gain makes up the rest (G_S does not decrease)
    need = target - g_r - 1e-12
    j = np.minimum(np.searchsorted(g_s, need, side="left"), len(grid) - 1)
    ok = g_r + g_s[j] >= target - 1e-12
    if not ok.any():
        return int(grid[-1]), int(grid[-1]), float(g_r[-1] + g_s[-1])
    cost = (grid + w_r) * rate_r + (grid[j] + w_s) * rate_s
    cost = np.where(ok, cost, np.inf)
    i = int(np.argmin(cost))
    return int(grid[i]), int(grid[j[i]]), float(g_r[i] + g_s[j[i]])


def estimated_recall(parts: tuple, d_r: int, d_s: int) -> float:
    return float(_gain(parts[0], np.array([d_r + 0.5]))[0]
                 + _gain(parts[1], np.array([d_s + 0.5]))[0])


# ---------------------------------------------------------------------- the operator
class _Side:
    """One input: its buffer (chunks in arrival order), newest time, the recent delays, and
    this L's arrivals and the window time they found already gone."""
    __slots__ = ("chunks", "ts", "te", "newest", "delays", "recent", "arrived", "lost_us", "late",
                 "bound")

    def __init__(self):
        self.chunks: list = []
        self.ts: list = []                  # each chunk's interval starts (numpy) …
        self.te: list = []                  # … and ends
        self.newest = NO_TIME
        self.delays: list = []              # this L's delays (numpy arrays)
        self.recent: collections.deque = collections.deque(maxlen=SAMPLE_LS)
        self.arrived = 0                    # tuples this L
        self.lost_us = 0                    # this L: window time whose partners had left
        self.late = 0                       # tuples whose partners may have left
        self.bound = NO_TIME                # the buffer keeps ts > bound

    def rows(self) -> int:
        return sum(len(t) for t in self.ts)


class QJoin(Operator):
    inputs = 2

    def __init__(self, node: P.QualityJoin):
        self.node = node
        self.cols = ([c.name for c in node.left.schema], [c.name for c in node.right.schema])
        self.sides = (_Side(), _Side())
        self.spans = node.spans_us                      # w_R, w_S
        self.delay = [0, 0]                             # d_R, d_S
        self.warm = [0, 0]                              # the largest delay seen per side
        self.next_adapt: int | None = None
        # (T at its end, measured recall, its weight: ideal pairs, roughly) per L in the period
        self.history: collections.deque = collections.deque()
        self.bias: collections.deque = collections.deque(maxlen=SAMPLE_LS)
        self.produced = 0
        self.adaptations = 0
        self.period_recall: float | None = None
        self.condition = _condition(node)

    def open(self, context):
        self.con = context.cursor()
        self.fast = Fast(self.condition, self.con) if self.condition is not None else None

    # ------------------------------------------------------------------ messages
    def on_batch(self, batch, port=0):
        if not batch.num_rows:
            return []
        me, other = self.sides[port], self.sides[1 - port]
        ts = batch.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        seen = np.maximum.accumulate(ts)
        if me.newest != NO_TIME:
            seen = np.maximum(seen, me.newest)
        me.delays.append(seen - ts)
        if len(me.delays) > 256:          # T stalled (one input quiet): keep the latest only
            me.delays = [np.concatenate(me.delays)[-DELAYS_KEPT:]]
        self.warm[port] = max(self.warm[port], int((seen - ts).max()))
        me.arrived += len(ts)
        # partners of a tuple lie in (ts − w_other, ts + w_own): those at or before the
        # other buffer's bound have left (measured, for the recall this L had)
        reach = self.spans[1 - port] + self.spans[port]
        gone = np.clip(other.bound - (ts - self.spans[1 - port]), 0, reach) \
            if other.bound != NO_TIME else np.zeros(len(ts), np.int64)
        me.lost_us += int(gone.sum())
        me.late += int((gone > 0).sum())
        out = []
        table = pa.Table.from_batches([batch])
        te = batch.column(TE).to_numpy(zero_copy_only=False).astype(np.int64)
        if other.chunks:
            found = self._pairs(table, ts, te, port, other)
            if found is not None:
                self.produced += found.num_rows
                out = [found]
        me.chunks.append(table)
        me.ts.append(ts)
        me.te.append(te)
        me.newest = int(seen[-1])
        return out + self._advance()

    def on_watermark(self, ts, port=0):
        """A quiet input's time moves on (its heartbeats): T with it, so the other side's
        buffer is still evicted and L still comes."""
        side = self.sides[port]
        if side.newest == NO_TIME or ts > side.newest:
            side.newest = int(ts)
        return self._advance()

    def on_end(self):
        return []

    # ------------------------------------------------------------------ joining
    def _pairs(self, new: pa.Table, n_ts: np.ndarray, n_te: np.ndarray, port: int,
               side: _Side) -> pa.RecordBatch | None:
        """The new tuples × the other side's buffer: the pairs whose intervals meet (numpy
        over the intervals both keep), then the join condition on those (the kernels, or
        DuckDB when they cannot); each result valid where both are."""
        other = _one(side.chunks)
        o_ts, o_te = np.concatenate(side.ts), np.concatenate(side.te)
        i, j = np.nonzero((n_ts[:, None] < o_te[None, :]) & (o_ts[None, :] < n_te[:, None]))
        if not len(i):
            return None
        sides = [(new, i), (other, j)] if port == 0 else [(other, j), (new, i)]
        columns = [t.column(c).take(pa.array(k)) for (t, k), cols in zip(sides, self.cols)
                   for c in cols]
        ts = np.maximum(n_ts[i], o_ts[j])
        te = np.minimum(n_te[i], o_te[j])
        batch = pa.RecordBatch.from_arrays(
            [c.combine_chunks() for c in columns] + [pa.array(ts), pa.array(te)],
            names=self.cols[0] + self.cols[1] + [TS, TE])
        if self.condition is None:
            return batch
        keep = self.fast.run(kernels.mask, batch)
        if keep is None:
            keep = duck.run(self.con, "b", batch,
                            f"SELECT ({self.condition.sql}) AS m FROM b").column("m")
        kept = batch.filter(pc.fill_null(keep, False))
        return kept if kept.num_rows else None

    # ------------------------------------------------------------------ buffers
    def _advance(self) -> list:
        """T moved: adapt every L, evict below the bounds, tell the watermark."""
        if any(s.newest == NO_TIME for s in self.sides):
            return []
        now = min(s.newest for s in self.sides)
        if self.next_adapt is None:
            self.next_adapt = now + self.node.adapt_us
        elif now >= self.next_adapt:
            self._adapt(now)
            self.next_adapt = now + self.node.adapt_us
        if not self.adaptations:      # no distribution yet: keep for the largest delay seen
            self.delay = [max(self.warm[1 - k], self.delay[k]) for k in (0, 1)]
        for k, side in enumerate(self.sides):
            bound = now - self.delay[k] - self.spans[k]
            if bound > side.bound:
                side.bound = bound
                self._evict(side)
        return [Watermark(min(s.bound for s in self.sides))]

    @staticmethod
    def _evict(side: _Side) -> None:
        chunks, starts, ends = [], [], []
        for chunk, ts, te in zip(side.chunks, side.ts, side.te):
            if len(ts) and ts.max() <= side.bound:
                continue
            if len(ts) and ts.min() <= side.bound:
                keep = ts > side.bound
                chunk, ts, te = chunk.filter(pa.array(keep)), ts[keep], te[keep]
            chunks.append(chunk)
            starts.append(ts)
            ends.append(te)
        if len(chunks) > 64:             # many small arrivals: one table again
            chunks = [_one(chunks).combine_chunks()]
            starts, ends = [np.concatenate(starts)], [np.concatenate(ends)]
        side.chunks, side.ts, side.te = chunks, starts, ends

    # ------------------------------------------------------------------ Algorithm 1
    def _adapt(self, now: int) -> None:
        n = self.node
        r, s = self.sides
        for side in self.sides:
            side.recent.append(np.concatenate(side.delays) if side.delays
                               else np.zeros(0, np.int64))
        parts = recall_parts(np.concatenate(r.recent), np.concatenate(s.recent),
                             self.spans[0], self.spans[1], n.granularity_us, n.basic_us)
        # the L just ended, as measured: each tuple pairs with the other side's tuples in
        # (ts − w_other, ts + w_own), as many as that side's rate there; the ones whose
        # time had left the buffer are missing
        ideal = r.arrived * s.arrived * (self.spans[0] + self.spans[1])
        missing = r.lost_us * s.arrived + s.lost_us * r.arrived
        got = min(max(1.0 - missing / ideal if ideal else 1.0, 0.0), 1.0)
        self.history.append((now, got, ideal))
        # how far the model was from what was measured, at the bounds this L had
        if ideal:
            self.bias.append(estimated_recall(parts, *self.delay) - got)
        while self.history and self.history[0][0] <= now - n.period_us:
            self.history.popleft()
        got = sum(q * m for _, q, m in self.history)
        total = sum(m for _, _, m in self.history)
        self.period_recall = got / total if total else None
        # the next L aims at the target, the model corrected by how far it was off lately
        bias = sum(self.bias) / len(self.bias) if self.bias else 0.0
        target = min(max(n.recall + bias + MARGIN, 0.0), 1.0)
        seconds = n.adapt_us / 1e6
        d_r_new, d_s_new, _ = choose_delays(parts, target, self.spans[0], self.spans[1],
                                            r.arrived / seconds, s.arrived / seconds,
                                            n.granularity_us)
        self.delay = [d_r_new, d_s_new]
        self.adaptations += 1
        for side in self.sides:
            side.delays, side.arrived, side.lost_us = [], 0, 0

    # ------------------------------------------------------------------ observability
    def quality(self) -> dict:
        return {"recall_target": self.node.recall, "recall_estimate": self.period_recall,
                "delay_left_us": self.delay[0], "delay_right_us": self.delay[1],
                "buffered_left": self.sides[0].rows(), "buffered_right": self.sides[1].rows(),
                "results": self.produced, "late_left": self.sides[0].late,
                "late_right": self.sides[1].late, "adaptations": self.adaptations}

    def state_size(self) -> int:
        return sum(s.rows() for s in self.sides)


def _condition(node: P.QualityJoin) -> P.Expr | None:
    """The join's predicate, equalities and the rest, as one expression (with a kernel tree
    when every part has one)."""
    parts = [P.Expr(f"({a.sql}) = ({b.sql})", a.columns + b.columns, "BOOLEAN",
                    ("eq", a.tree, b.tree) if a.tree is not None and b.tree is not None
                    else None) for a, b in node.equi]
    if node.residual is not None:
        parts.append(node.residual)
    if not parts:
        return None
    trees = [e.tree for e in parts]
    tree = None if None in trees else functools.reduce(lambda a, b: ("and", a, b), trees)
    return P.Expr(" AND ".join(f"({e.sql})" for e in parts),
                  tuple(dict.fromkeys(c for e in parts for c in e.columns)), "BOOLEAN", tree)


def _one(chunks: list) -> pa.Table:
    return chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks)
