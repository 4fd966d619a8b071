"""ω RANGE i fused with α, on whole batches: the sliding-window case of the aggregate index.

Over a range window a group's value changes only where a tuple arrives (ts) or leaves
(ts + i). DuckDB evaluates every partial aggregate at all those change points at once, as a
window aggregate whose frame is RANGE BETWEEN i - 1 µs PRECEDING AND CURRENT ROW — the tuples
with c - i < ts <= c, which is the window's snapshot at c. The value at point c_k holds on
[c_k, c_{k+1}); an element is final once its end is at or before the latest input time.
Tuples are kept only while they can still be in a later frame. Rows leave in valid_from order
with equal neighbours coalesced; a group whose window is empty has no row (a keyless
aggregate has one: COUNT(*) = 0). Results equal the aggregate index's (``aggregate.py``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import plan as P
from ... import duck
from ...batches import INF, TE, TS, Watermark
from ...duck import quote
from .aggregate import Aggregate

_WINDOWED = {"sum": "SUM({a})", "count": "COUNT({a})", "count_star": "COUNT(\"__arr\")",
             "min": "MIN({a})", "max": "MAX({a})", "count_distinct": "COUNT(DISTINCT {a})",
             "sum_distinct": "SUM(DISTINCT {a})"}


# each partial's value over an empty window
_EMPTY = {"count": 0, "count_star": 0, "count_distinct": 0}


def _group_bounds(table: pa.Table, keys: list) -> list:
    """Where each group's run of rows starts (rows sorted by key), and the end."""
    n = table.num_rows
    if not keys or n == 0:
        return [0, n] if n else [0]
    changed = np.zeros(n, dtype=bool)
    changed[0] = True
    for k in keys:
        col = table.column(k).to_numpy(zero_copy_only=False)
        prev = col[:-1]
        diff = np.asarray(col[1:] != prev, dtype=bool)
        if col.dtype == object:           # None == None is a run, None != x is a change
            nulls = np.array([v is None for v in col])
            diff = (nulls[1:] != nulls[:-1]) | (diff & ~nulls[1:])
        elif col.dtype.kind == "f":
            both_nan = np.isnan(col[1:]) & np.isnan(prev)
            diff &= ~both_nan
        changed[1:] |= diff
    return list(np.flatnonzero(changed)) + [n]


def supports(node: P.Aggregate) -> bool:
    return all(p.func in _WINDOWED for p in node.partials)


class RangeAggregate(Aggregate):
    checkpointed = Aggregate.checkpointed + ("tuples", "current", "last_now", "at_start")

    def __init__(self, node: P.Aggregate, window: P.RangeWindow):
        super().__init__(node)
        self.size = window.size_us
        self.tuples: pa.Table | None = None     # keys, args, ts: tuples still in some frame
        self.current: dict = {}                 # key -> (start, values, count), still open
        self.last_now = -INF                    # every point before this was dealt with
        # without GROUP BY, a query started at a known instant (primed, or resumed) has a
        # row from there whose value is the window's then: until its input passes that
        # instant, the points before it (its history's) say what that value is
        self.at_start = False
        keys = [quote(k) for k in self.keys]
        part = f"PARTITION BY {', '.join(keys)} " if self.keys else ""
        args = [quote(p) for p in self.partials]
        aggs = [_WINDOWED[p.func].format(a=a) + f" OVER w AS {quote(p.name)}"
                for p, a in zip(node.partials, args)]
        nulls = [f"NULL AS {quote(p)}" for p in self.partials]
        key_sel = "".join(k + ", " for k in keys)
        arrive = ", ".join(keys + args + ['1 AS "__arr"', f'{quote(TS)} AS "__t"'])
        leave = ", ".join(keys + nulls
                          + ['NULL AS "__arr"', f'{quote(TS)} + {self.size} AS "__t"'])
        points = ", ".join(keys + ['"__t"'] + aggs + ['COUNT("__arr") OVER w AS "__n"'])
        self.points_sql = f"""
            WITH pts AS (
                SELECT {arrive} FROM t
                UNION ALL
                SELECT DISTINCT {leave} FROM t)
            SELECT * FROM (
                SELECT DISTINCT {points}
                FROM pts
                WINDOW w AS ({part}ORDER BY "__t" RANGE BETWEEN {self.size - 1} PRECEDING
                             AND CURRENT ROW))
            WHERE "__t" >= $since
            ORDER BY {key_sel}"__t\""""

    # ------------------------------------------------------------------ input
    def on_batch(self, batch, port=0):
        if batch.num_rows == 0:
            return []
        new = self.input.run(batch).drop_columns([TE])
        self.tuples = new if self.tuples is None else pa.concat_tables(
            [self.tuples, new.cast(self.tuples.schema)])
        now = new.column(TS)[-1].as_py()
        return [m for m in self._advance(now) if not isinstance(m, Watermark)]

    def on_watermark(self, ts, port=0):
        self.on_start(ts)
        return self._advance(ts, boundary=True)

    def on_end(self):
        return self._advance(INF, boundary=True)

    # ------------------------------------------------------------------ change points
    def _advance(self, now: int, boundary: bool = False) -> list:
        if not self.keys and () not in self.current and self.filled_until is not None:
            # without GROUP BY there is a row at every instant from the start, COUNT(*) = 0
            # over an empty window
            self.current[()] = (self.filled_until, [_EMPTY.get(p.func) for p in
                                                    self.node.partials], 0)
            self.at_start = self.last_now < self.filled_until
        if self.tuples is None or self.tuples.num_rows == 0:
            start = self.current.get(())
            if boundary and start is not None and start[0] < now:
                self._coalesce((), [(start[0], now, start[1])])
                if now < INF:
                    self.current[()] = (now, start[1], start[2])
                else:                       # the input ended: that value holds for good
                    del self.current[()]
            return self._release(now)
        # points before every group's open element, and before the last call, were dealt
        # with already
        since = min([o[0] for o in self.current.values()] + [self.last_now])
        table = duck.run(self.con, "t", self.tuples,
                         self.points_sql.replace("$since", str(since)))
        if not self.types:              # the partials' types are the window aggregates'
            self.types = {f.name: f.type for f in table.schema}
        pts = table.to_pydict()
        keys = [pts[k] for k in self.keys]
        times = pts["__t"]
        values = [pts[p] for p in self.partials]
        counts = pts["__n"]
        keep_from: dict = {}
        bounds = _group_bounds(table, self.keys)
        for i, j in zip(bounds[:-1], bounds[1:]):
            key = tuple(k[i] for k in keys)
            start = self._group(key, times, values, counts, i, j, now, boundary)
            if start is not None:
                keep_from[key] = start
        self._forget(keep_from)
        self.last_now = max(self.last_now, now)
        self.at_start = self.at_start and now < self.current.get((), (INF,))[0]
        return self._release(now)

    def _group(self, key, times, values, counts, i, j, now, boundary) -> int | None:
        """Close the group's elements that end by ``now`` and return the start of the one
        left open. The open element's value is kept (``self.current``): the point that began
        it may be the expiry of a tuple since forgotten."""
        prev = self.current.get(key)            # (start, values, count) of the open element
        rows = []
        for k in range(i, j):
            c = times[k]
            if c > now:
                break
            if prev is None and c < self.last_now:
                continue                        # a closed group's points were dealt with
            if prev is not None and c < prev[0]:
                if not self.at_start:
                    continue                    # that point was dealt with already
                # the empty window's row from the start gives way to the history's points
                self.at_start, prev = False, None
            if prev is not None and c == prev[0]:
                # more tuples may have arrived at this very instant: take the new value
                prev = (c, [v[k] for v in values], counts[k])
                continue
            if prev is not None:
                rows.append((prev[0], c, prev[1], prev[2]))
            prev = (c, [v[k] for v in values], counts[k])
        if prev is not None and boundary and prev[0] < now:
            rows.append((prev[0], now, prev[1], prev[2]))   # a BOUNDARY splits it (or the
            prev = (now, prev[1], prev[2]) if now < INF else None   # end: it holds for good)
        self._coalesce(key, [(s, e, vals) for s, e, vals, n in rows if n or not self.keys])
        if prev is not None and (prev[2] or not self.keys):
            self.current[key] = prev
            return prev[0]
        self.current.pop(key, None)        # an empty window: no row until a new tuple comes
        return None

    def _forget(self, open_starts: dict) -> None:
        """Keep the tuples that can still be in the frame of a point at or after their
        group's open element: ts > open start - i."""
        if not open_starts:          # every window is empty: only new tuples matter
            self.tuples = self.tuples.slice(0, 0)
            return
        horizon = min(open_starts.values()) - self.size
        self.tuples = self.tuples.filter(
            pc.greater(self.tuples.column(TS), horizon))

    def _frontier(self) -> int:
        return min(o[0] for o in self.current.values()) if self.current else INF

    def state_size(self) -> int:
        return self.tuples.num_rows if self.tuples is not None else 0
