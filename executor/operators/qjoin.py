"""⋈q, the quality-driven join of two out-of-order streams (seed 003, QJoin): each arriving
tuple joins the other side's buffer at once, and the buffers keep just enough history for the
asked recall over a period.

Tuples come in arrival order, each with its window's interval. A tuple's delay is its stream's
newest time when it arrives minus its own. T is the older of the two streams' newest times;
side k's buffer keeps a tuple while ts > T − d_k − w_k, so a tuple of the other side up to d_k
late still finds it. Every L of T the pair (d_R, d_S) is chosen by Algorithm 1: the recall a
pair gives is estimated from the last few L's delay distributions (granularity g) over the
window cut into basic windows (size b), and the pair with the fewest buffered tuples
((d_R + w_R)·V_R + (d_S + w_S)·V_S) that meets the target is taken. The pairs are not spread
evenly over the basic windows: the share in each is read from where the last few L's results
lay (u = ts_R − ts_S), scaled up where the buffers were short. The recall each L really had is
measured as well (the share of its pairs each arriving tuple found gone from the other
buffer), and how far the estimate was from it lately corrects the next target; the target
of the next L is what the period ending with it still needs.

Results leave as soon as they are found, so not in valid_from order; the output's watermark
is the lower buffer bound (no later result can begin at or before it). A named window's or
derived stream's join (``in_order``) holds its results until that watermark passes them and
sends them sorted: the same rows, in valid_from order, later by about a window and a delay
bound. Every result is correct; a tuple whose partners may have left a buffer is counted as
late.
"""
from __future__ import annotations

import collections
import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..expressions import kernels
from .. import plan as P
from ..batches import TE, TS, Watermark, one_table
from .base import Operator
from .filter_map import Fast

NO_TIME = np.iinfo(np.int64).min
MARGIN = 0.007        # aimed above the target: a period's recall varies about its mean
SPARE = 0.005         # a period ahead of its target lets the next L aim this much lower …
CATCH_UP = 0.03       # … and one behind makes it aim up to this much higher
DELAYS_KEPT = 100_000  # delays kept per side between adaptations
FOUND_FLOOR = 0.2     # a basic window's results are scaled up at most five times
EVEN = 0.05           # the even share kept in the pairs' spread over the basic windows
COMPACT = 8           # a buffer's arrival chunks are made one table after this many
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


def basic_windows(w_r: int, w_s: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The basic windows that cut u = r.ts − s.ts in (−w_R, w_S): slices of b from −w_R,
    the last one cut at w_S (at least one); (their centres, their widths)."""
    if w_r + w_s <= 0:                  # two empty windows: one point
        return np.zeros(1), np.ones(1)
    lower = np.arange(-w_r, w_s, b, dtype=np.float64)
    upper = np.minimum(lower + b, w_s)
    return (lower + upper) / 2, upper - lower


def later_arrivals(delays_r: np.ndarray, delays_s: np.ndarray, w_r: int, w_s: int, g: int,
                   b: int) -> list:
    """What the recall model reads of two delay samples. A pair (r, s) lies in both windows
    when u = r.ts − s.ts is in (−w_R, w_S), cut into basic windows of size b. If s arrives
    after r (D_S − D_R > u), it finds r when r has not left R's buffer: d_R > D_S − w_R − u;
    and the other way round. For S's tuples, then R's: the share of each delay bin (at
    granularity g), the bound the partner's buffer needs for each (bin, basic window), and
    the chance the partner came first."""
    centres, _ = basic_windows(w_r, w_s, b)
    out = []
    for own, other, w_buffer, sign in ((delays_s, delays_r, w_r, 1),
                                       (delays_r, delays_s, w_s, -1)):
        d, share = _distribution(own, g)
        u = sign * centres[None, :]
        out.append((share, d[:, None] - w_buffer - u, _cdf(other)(d[:, None] - u)))
    return out


def recall_parts(arrivals: list, weight: np.ndarray) -> tuple:
    """The recall as a function of the two delay bounds, Q(d_R, d_S) = G_R(d_R) + G_S(d_S):
    for each side, (thresholds, cumulative weights); G(d) is the weight of thresholds below
    d. ``weight``: the share of the pairs in each basic window."""
    parts = []
    for share, need, last in arrivals:
        mass = (share[:, None] * weight[None, :] * last).ravel()
        order = np.argsort(need.ravel(), kind="stable")
        parts.append((need.ravel()[order], np.cumsum(mass[order])))
    return tuple(parts)


def basic_recall(arrivals: list, d_r: int, d_s: int) -> np.ndarray:
    """The recall of the pairs in each basic window at the delay bounds (d_R, d_S)."""
    return sum((share[:, None] * last * (need < bound + 0.5)).sum(axis=0)
               for (share, need, last), bound in zip(arrivals, (d_r, d_s)))


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
    this L's arrivals and how much of their pairs they found already gone."""
    __slots__ = ("chunks", "ts", "te", "newest", "delays", "recent", "arrived", "lost", "late",
                 "bound")

    def __init__(self):
        self.chunks: list = []
        self.ts: list = []                  # each chunk's interval starts (numpy) …
        self.te: list = []                  # … and ends
        self.newest = NO_TIME
        self.delays: list = []              # this L's delays (numpy arrays)
        self.recent: collections.deque = collections.deque(maxlen=SAMPLE_LS)
        self.arrived = 0                    # tuples this L
        self.lost = 0.0                     # this L: Σ over arrivals of the share of pairs gone
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
        # in order: results not yet sent, as runs (table, valid_from) each sorted on its own
        self.held: list = []
        self.adaptations = 0
        self.period_recall: float | None = None
        self.condition = _condition(node)
        # where results lie in u = ts_left − ts_right, per basic window: this L's, the last few
        _, widths = basic_windows(*self.spans, node.basic_us)
        self.even = widths / widths.sum()               # pairs spread evenly over the window
        self.n_basic = len(widths)
        self.offsets = np.zeros(self.n_basic, np.int64)
        self.recent_offsets: collections.deque = collections.deque(maxlen=SAMPLE_LS)
        self.below = _below(self.even)

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
        # other buffer's bound have left (measured, for the recall this L had, as the share
        # of its pairs that lay there: u = ts_left − ts_right beyond the bound's)
        if other.bound != NO_TIME:
            if port == 0:
                gone = 1.0 - self._share_below(ts - other.bound)
            else:           # the basic window the bound falls in counts as gone, if any is
                cut = other.bound - ts
                gone = np.where(cut > -self.spans[0],
                                self._share_below(cut + self.node.basic_us), 0.0)
            me.lost += float(gone.sum())
            me.late += int((gone > 0).sum())
        out = []
        table = pa.Table.from_batches([batch])
        te = batch.column(TE).to_numpy(zero_copy_only=False).astype(np.int64)
        if other.chunks:
            found = self._pairs(table, ts, te, port, other)
            if found is not None:
                self.produced += found.num_rows
                out = [found]
        # kept for the other side's later tuples, but not one already behind its buffer's
        # bound: a result of two such tuples would begin before the watermark sent
        behind = ts <= me.bound
        if behind.any():
            table, ts, te = table.filter(pa.array(~behind)), ts[~behind], te[~behind]
        me.chunks.append(table)
        me.ts.append(ts)
        me.te.append(te)
        me.newest = int(seen[-1])
        return self._send(out, self._advance())

    def on_watermark(self, ts, port=0):
        """A quiet input's time moves on (its heartbeats): T with it, so the other side's
        buffer is still evicted and L still comes."""
        side = self.sides[port]
        if side.newest == NO_TIME or ts > side.newest:
            side.newest = int(ts)
        return self._send([], self._advance())

    def on_end(self):
        return self._release(np.iinfo(np.int64).max)

    def _send(self, found: list, marks: list) -> list:
        """What leaves now: the results as found; or, in order, the held results that begin
        at or before the watermark, then the watermark."""
        if not self.node.in_order:
            return found + marks
        if found:               # one sorted run; held rows are not copied again
            table = pa.Table.from_batches(found)
            ts = table.column(TS).to_numpy().astype(np.int64)
            order = np.argsort(ts, kind="stable")
            self.held.append((table.take(pa.array(order)), ts[order]))
        return (self._release(marks[-1].ts) if marks else []) + marks

    def _release(self, upto: int) -> list:
        """The held results beginning at or before ``upto``, sorted by valid_from: each
        run's head, merged."""
        ready, starts, rest = [], [], []
        for table, ts in self.held:
            k = int(np.searchsorted(ts, upto, side="right"))
            if k:
                ready.append(table.slice(0, k))
                starts.append(ts[:k])
            if k < len(ts):
                rest.append((table.slice(k), ts[k:]))
        self.held = rest
        if not ready:
            return []
        order = np.argsort(np.concatenate(starts), kind="stable")
        return pa.concat_tables(ready).take(pa.array(order)).combine_chunks().to_batches()

    def _held_rows(self) -> int:
        return sum(len(ts) for _, ts in self.held)

    # ------------------------------------------------------------------ joining
    def _pairs(self, new: pa.Table, n_ts: np.ndarray, n_te: np.ndarray, port: int,
               side: _Side) -> pa.RecordBatch | None:
        """The new tuples × the other side's buffer: the pairs whose intervals meet (numpy
        over the intervals both keep), then the join condition on those, reading only the
        columns it names (the kernels, or DuckDB when they cannot); each result valid where
        both are, with every column."""
        other = one_table(side.chunks)
        o_ts, o_te = np.concatenate(side.ts), np.concatenate(side.te)
        i, j = np.nonzero((n_ts[:, None] < o_te[None, :]) & (o_ts[None, :] < n_te[:, None]))
        if not len(i):
            return None
        tables = (new, other) if port == 0 else (other, new)
        if self.condition is not None:
            named = self._columns(tables, (i, j) if port == 0 else (j, i),
                                  set(self.condition.columns))
            keep = self.fast.run(kernels.mask, named)
            if keep is None:
                keep = duck.run(self.con, "b", named,
                                f"SELECT ({self.condition.sql}) AS m FROM b").column("m")
            keep = pc.fill_null(keep, False).to_numpy(zero_copy_only=False)
            i, j = i[keep], j[keep]
            if not len(i):
                return None
        self._offsets(n_ts[i] - o_ts[j] if port == 0 else o_ts[j] - n_ts[i])
        batch = self._columns(tables, (i, j) if port == 0 else (j, i))
        return pa.RecordBatch.from_arrays(
            batch.columns + [pa.array(np.maximum(n_ts[i], o_ts[j])),
                             pa.array(np.minimum(n_te[i], o_te[j]))],
            names=batch.schema.names + [TS, TE])

    def _columns(self, tables: tuple, rows: tuple, only: set | None = None) -> pa.RecordBatch:
        """The left and right rows ``rows`` of ``tables`` side by side (``only`` these
        columns)."""
        names, arrays = [], []
        for table, k, cols in zip(tables, rows, self.cols):
            taken = pa.array(k)
            for c in cols:
                if only is None or c in only:
                    names.append(c)
                    arrays.append(table.column(c).take(taken).combine_chunks())
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _basic_window(self, u: np.ndarray) -> np.ndarray:
        """The basic window each u lies in (−1 below the first, n_basic at w_S or above)."""
        k = np.clip((u + self.spans[0]) // self.node.basic_us, -1, self.n_basic - 1)
        return np.where(u >= self.spans[1], self.n_basic, k)

    def _share_below(self, u: np.ndarray) -> np.ndarray:
        """The share of pairs whose u lies in basic windows wholly below each ``u``."""
        return self.below[np.maximum(self._basic_window(u), 0)]

    def _offsets(self, u: np.ndarray) -> None:
        """Count the results' offsets u by basic window (where the pairs lie in the window)."""
        k = np.clip(self._basic_window(u), 0, self.n_basic - 1)
        self.offsets += np.bincount(k, minlength=self.n_basic)

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
        if len(side.chunks) > COMPACT:   # many small arrivals: one table again
            side.chunks = [one_table(side.chunks).combine_chunks()]
            side.ts, side.te = [np.concatenate(side.ts)], [np.concatenate(side.te)]
        chunks, starts, ends = [], [], []
        for chunk, ts, te in zip(side.chunks, side.ts, side.te):
            keep = ts > side.bound
            if not keep.all():
                if not keep.any():
                    continue
                chunk, ts, te = chunk.filter(pa.array(keep)), ts[keep], te[keep]
            chunks.append(chunk)
            starts.append(ts)
            ends.append(te)
        side.chunks, side.ts, side.te = chunks, starts, ends

    # ------------------------------------------------------------------ Algorithm 1
    def _adapt(self, now: int) -> None:
        n = self.node
        r, s = self.sides
        for side in self.sides:
            side.recent.append(np.concatenate(side.delays) if side.delays
                               else np.zeros(0, np.int64))
        self.recent_offsets.append(self.offsets)
        self.offsets = np.zeros(self.n_basic, np.int64)
        arrivals = later_arrivals(np.concatenate(r.recent), np.concatenate(s.recent),
                                  self.spans[0], self.spans[1], n.granularity_us, n.basic_us)
        weights = self._pair_weights(basic_recall(arrivals, *self.delay))
        self.below = _below(weights)
        parts = recall_parts(arrivals, weights)
        # the L just ended, as measured: each tuple's pairs are in proportion to the other
        # side's arrivals, and the share of them it found gone from the buffer is missing
        ideal = r.arrived * s.arrived
        missing = r.lost * s.arrived + s.lost * r.arrived
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
        # the next L aims at what its period needs, the model corrected by how far it was
        # off lately
        bias = sum(self.bias) / len(self.bias) if self.bias else 0.0
        target = min(max(self._aim(now) + bias + MARGIN, 0.0), 1.0)
        seconds = n.adapt_us / 1e6
        d_r_new, d_s_new, _ = choose_delays(parts, target, self.spans[0], self.spans[1],
                                            r.arrived / seconds, s.arrived / seconds,
                                            n.granularity_us)
        self.delay = [d_r_new, d_s_new]
        self.adaptations += 1
        for side in self.sides:
            side.delays, side.arrived, side.lost = [], 0, 0.0

    def _aim(self, now: int) -> float:
        """The recall the next L needs for the period that ends with it to reach the
        target, given the L's of that period already measured (the next L weighs as the
        last one did): what the user asked for is a period's recall, not each L's."""
        n = self.node
        last = self.history[-1][2] if self.history else 0
        kept = [(q, m) for end, q, m in self.history if end > now + n.adapt_us - n.period_us]
        if not last or not kept:
            return n.recall
        got, total = sum(q * m for q, m in kept), sum(m for _, m in kept)
        need = (n.recall * (total + last) - got) / last
        return min(max(need, n.recall - SPARE), n.recall + CATCH_UP)

    def _pair_weights(self, found: np.ndarray | None = None) -> np.ndarray:
        """The share of pairs in each basic window, from the results of the last few L: the
        pairs gather where the two streams' tuples meet (as a ball leaves the players, all
        in old ball × new player), not evenly. The results a basic window gave are divided
        by the share of its pairs the buffers let be ``found`` (the pairs lost are where
        the buffers were short); a little of the even share is kept, so a basic window with
        no result lately still counts."""
        counts = sum(self.recent_offsets, np.zeros(self.n_basic, np.int64)).astype(np.float64)
        if found is not None:
            counts /= np.maximum(found, FOUND_FLOOR)
        total = counts.sum()
        return self.even if not total else (1 - EVEN) * counts / total + EVEN * self.even

    # ------------------------------------------------------------------ observability
    def quality(self) -> dict:
        return {"recall_target": self.node.recall, "recall_estimate": self.period_recall,
                "delay_left_us": self.delay[0], "delay_right_us": self.delay[1],
                "buffered_left": self.sides[0].rows(), "buffered_right": self.sides[1].rows(),
                "results": self.produced, "late_left": self.sides[0].late,
                "late_right": self.sides[1].late, "adaptations": self.adaptations,
                "held": self._held_rows()}

    def state_size(self) -> int:
        return sum(s.rows() for s in self.sides) + self._held_rows()


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


def _below(weights: np.ndarray) -> np.ndarray:
    """The share of pairs below each basic window's lower edge (and 1 above the last)."""
    below = np.concatenate([[0.0], np.cumsum(weights)])
    below /= below[-1]
    below[-1] = 1.0                     # exactly: a span the bound misses loses nothing
    return below
