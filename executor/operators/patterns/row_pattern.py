"""⊳ with a row pattern (MATCH_RECOGNIZE's PATTERN beyond a concatenation): quantifiers,
alternation and grouping over the rows of each partition, in time order.

Each variable's DEFINE is decided for whole batches at once (a bit per variable per row, Arrow
kernels or one DuckDB pass); the rows of each partition are then matched against the pattern
tree by backtracking in the SQL standard's order of preference (leftmost; greedy quantifiers
try more rows first, reluctant fewer; alternatives left to right), so Python runs per row of
a match attempt, not per event of the stream. A match that a later row could still change (a
preferred path ran out of rows) waits for that row, the frontier or WITHIN; rows leave in
valid_from order, the output's watermark held at the earliest match still open."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import duck
from ...expressions import kernels
from ... import plan as P
from ...batches import INF, TE, TS, Watermark, distinct_keys
from ..base import QueryError
from ..filter_map import Fast
from ..merge import Merger, Merging
from .row_define import Path, columns, holds, prev_reach

_WAIT = object()          # a preferred path ran out of rows: more may change the match
MAX_DEPTH_ROWS = 400      # rows a match can follow before Python's recursion limit


class _Run:
    """One partition's rows not yet behind a match (and the few before that PREV reads):
    store ids, times, variable bits, the values DEFINE reads row by row."""
    __slots__ = ("ids", "ts", "bits", "cols", "start")

    def __init__(self, names):
        self.ids = np.empty(0, np.int64)
        self.ts = np.empty(0, np.int64)
        self.bits = np.empty(0, np.int64)
        self.cols = {n: np.empty(0, object) for n in names}
        self.start = 0                # where the next match attempt begins

    def drop_before_start(self, keep: int) -> None:
        cut = self.start - keep
        if cut > 0:
            self.ids, self.ts, self.bits = self.ids[cut:], self.ts[cut:], self.bits[cut:]
            self.cols = {n: v[cut:] for n, v in self.cols.items()}
            self.start -= cut


def preferred(tree: tuple, bits: np.ndarray, var_bit: dict, start: int, end: int,
              complete: bool, check=None):
    """The preferred match of ``tree`` beginning at row ``start`` among rows [start, end):
    (end row, labels from the last row back as nested pairs), None (no match), or _WAIT
    (a more preferred path needed a row beyond ``end`` and more rows may come).
    ``check(var, i, labels)``: the DEFINE terms that read other rows of the match."""
    ran_out = [False]

    def match(node, i, labels):
        kind = node[0]
        if kind == "var":
            if i >= end:
                ran_out[0] = True
            elif bits[i] & var_bit[node[1]] and (check is None or check(node[1], i, labels)):
                yield i + 1, (node[1], labels)
        elif kind == "seq":
            yield from _sequence(node[1], 0, i, labels)
        elif kind == "alt":
            for branch in node[1]:
                yield from match(branch, i, labels)
        else:
            yield from _repeat(node, 0, i, labels)

    def _sequence(items, k, i, labels):
        if k == len(items):
            yield i, labels
            return
        for j, more in match(items[k], i, labels):
            yield from _sequence(items, k + 1, j, more)

    def _repeat(node, count, i, labels):
        _, item, low, high, greedy = node
        more = high is None or count < high
        if not greedy and count >= low:
            yield i, labels
        if more:
            for j, further in match(item, i, labels):
                # an iteration consumes a row, or counts towards the minimum (then at most
                # ``low`` empty ones): never an endless loop
                if j > i or count < low:
                    yield from _repeat(node, count + 1, j, further)
        if greedy and count >= low:
            yield i, labels

    try:
        for found in match(tree, start, None):
            return _WAIT if ran_out[0] and not complete else found
    except RecursionError:
        raise QueryError(f"a row pattern's match would be longer than this server follows "
                         f"(about {MAX_DEPTH_ROWS} rows)", "54000",
                         hint="Bound it with WITHIN, or a quantifier's maximum such as "
                              "{1,100}.") from None
    return _WAIT if ran_out[0] and not complete else None


def ends(tree: tuple) -> tuple[set, bool]:
    """(the variables a match's last row can be mapped to, whether ``tree`` can match no
    row at all).

    >>> sorted(ends(("seq", (("var", "A"), ("rep", ("var", "B"), 0, None, True))))[0])
    ['A', 'B']
    """
    kind = tree[0]
    if kind == "var":
        return {tree[1]}, False
    if kind == "alt":
        parts = [ends(b) for b in tree[1]]
        return set().union(*(p[0] for p in parts)), any(p[1] for p in parts)
    if kind == "seq":
        out = set()
        for item in reversed(tree[1]):
            last, empty = ends(item)
            out |= last
            if not empty:
                return out, False
        return out, True
    last, empty = ends(tree[1])
    return last, empty or tree[2] == 0


def _labels(chain, length: int) -> list:
    out = [None] * length
    for k in range(length - 1, -1, -1):
        out[k], chain = chain
    return out


class RowPattern(Merging):
    inputs = 1

    def __init__(self, node: P.Pattern):
        self.node = node
        self.tree = node.regex
        self.vars = [c.alias for c in node.components]
        self.var_bit = {v: 1 << i for i, v in enumerate(self.vars)}
        self.window = node.within_us
        self.merger = Merger(1)
        self.runs: dict = {}
        self.numbers: dict = {}                        # partition -> matches so far
        self.store: pa.Table | None = None
        self.base = 0                                  # store id of its first row
        self.decided: list = []                        # matches not yet sent (tables)
        self.names = [c.name for c in node.inputs[0].schema]
        self.keys = [e.tree[1] for e in node.components[0].partition]
        self.checks = {c.alias: c.checks for c in node.components if c.checks is not None}
        self.check_cols = sorted(set().union(*map(columns, self.checks.values())))
        self.margin = max(map(prev_reach, self.checks.values()), default=0)
        # the variables a match can end on: a row mapped to none of them ends no match
        self.final = sum(self.var_bit[v] for v in ends(self.tree)[0])

    def open(self, context):
        self.con = context.cursor()
        self.fast = [Fast(c.predicate, self.con) if c.predicate is not None else None
                     for c in self.node.components]
        # the output's Arrow types, as DuckDB spells the plan's
        self.schema = duck.typed_empty(self.con, self.node.schema).schema

    # ------------------------------------------------------------------ messages
    def advance(self, limit: int, parts: list, everything: bool) -> list:
        if parts[0] is not None and parts[0].num_rows:
            self._add(parts[0])
        open_from = limit
        for key, run in list(self.runs.items()):
            self._match(key, run, limit, everything)
            if run.start < len(run.ts):
                open_from = min(open_from, self._earliest_end(run, limit))
            elif not len(run.ts):
                del self.runs[key]
        out = self._release(open_from if not everything else INF)
        self._forget()
        return out + ([] if everything else [Watermark(open_from)])

    # ------------------------------------------------------------------ rows in
    def _add(self, table: pa.Table) -> None:
        batch = table.combine_chunks().to_batches()[0]
        bits = np.zeros(batch.num_rows, np.int64)
        for c, fast in zip(self.node.components, self.fast):
            if c.predicate is None:
                bits |= self.var_bit[c.alias]
                continue
            mask = fast.run(kernels.mask, batch)
            if mask is None:
                mask = duck.run(self.con, "b", batch,
                                f"SELECT ({c.predicate.sql}) AS m FROM b").column("m")
            bits |= np.where(pc.fill_null(mask, False).to_numpy(zero_copy_only=False),
                             self.var_bit[c.alias], 0)
        first = self.base + (self.store.num_rows if self.store is not None else 0)
        ids = np.arange(first, first + batch.num_rows, dtype=np.int64)
        self.store = pa.Table.from_batches([batch]) if self.store is None else \
            pa.concat_tables([self.store, pa.Table.from_batches([batch])])
        ts = batch.column(TS).to_numpy()
        values = {n: _objects(batch.column(n)) for n in self.check_cols}
        for key, rows in _groups(batch, self.keys):
            if any(v is None for v in key):
                continue                         # a NULL partition value matches nothing
            if key not in self.runs:
                self.runs[key] = _Run(self.check_cols)
            run = self.runs[key]
            run.ids = np.concatenate([run.ids, ids[rows]])
            run.ts = np.concatenate([run.ts, ts[rows]])
            run.bits = np.concatenate([run.bits, bits[rows]])
            for n, v in values.items():
                run.cols[n] = np.concatenate([run.cols[n], v[rows]])

    # ------------------------------------------------------------------ matching
    def _match(self, key, run: _Run, limit: int, everything: bool) -> None:
        """Find the run's matches as far as the rows before ``limit`` decide them."""
        avail = len(run.ts) if everything else int(np.searchsorted(run.ts, limit, "left"))
        found = []
        check = self._checker(run) if self.checks else None
        while run.start < avail:
            s = run.start
            end, complete = avail, everything
            if self.window is not None:
                cut = int(np.searchsorted(run.ts, run.ts[s] + self.window, "left"))
                if cut < len(run.ts) or limit >= run.ts[s] + self.window:
                    end, complete = min(cut, avail), True
            result = preferred(self.tree, run.bits, self.var_bit, s, end, complete, check)
            if result is _WAIT:
                break
            if result is None:
                run.start += 1
                continue
            stop, chain = result
            number = self.numbers[key] = self.numbers.get(key, 0) + 1
            labels = _labels(chain, stop - s)
            found.append((s, stop, labels, number))
            run.start = s + self._resume(stop - s, labels)
        if found:
            self.decided.append(self._measures(key, run, found))
        run.drop_before_start(self.margin)

    def _earliest_end(self, run: _Run, limit: int) -> int:
        """The earliest time a match of the run's rows still open can be stamped with: the
        first of them a match can end on, or ``limit`` when none before it can (an attempt
        waiting for a row to come holds back no match another partition has finished)."""
        avail = int(np.searchsorted(run.ts, limit, "left"))
        hits = np.flatnonzero(run.bits[run.start:avail] & self.final)
        return int(run.ts[run.start + hits[0]]) if len(hits) else limit

    def _checker(self, run: _Run):
        """The matcher's test of a row against the DEFINE terms that read other rows."""
        checks, cols = self.checks, run.cols

        def check(var, i, labels):
            t = checks.get(var)
            return t is None or holds(t, Path(var, i, labels), cols)
        return check

    def _resume(self, length: int, labels: list) -> int:
        """AFTER MATCH SKIP: where the next match may begin, counted from this one's first
        row. A skip to a variable the match has no row of, or to its first row (the same
        match again, for ever), is an error, as the SQL standard has it."""
        skip, var = self.node.skip, self.node.skip_to
        if skip in _SKIP_ROWS:
            return _SKIP_ROWS[skip](length)
        rows = [i for i, v in enumerate(labels) if v == var]
        to = f"AFTER MATCH SKIP TO {'FIRST' if skip == 'to_first' else 'LAST'} {var}"
        if not rows:
            raise QueryError(f"{to}: a match has no row of {var}", "22000",
                             hint=f"Skip to a variable every match has, or make {var} "
                                  "required in PATTERN.")
        at = rows[0] if skip == "to_first" else rows[-1]
        if at == 0:
            raise QueryError(f"{to}: a match's first row is {var}'s, so the next match would "
                             "begin where this one began", "22000",
                             hint="Skip to a later variable, or TO NEXT ROW.")
        return at

    def _measures(self, key, run: _Run, found: list) -> pa.Table:
        """One row per match: the partition's values, then each measure."""
        cols = {}
        n = len(found)
        for name, value in zip(self.node.schema[:len(self.keys)], key):
            cols[name.name] = [value] * n
        for m, col in zip(self.node.measures, self.node.schema[len(self.keys):]):
            cols[col.name] = self._measure(m, run, found)
        last = np.array([run.ts[stop - 1] for _, stop, _, _ in found], np.int64)
        table = pa.Table.from_pydict(cols, schema=self.schema)
        return table.append_column(TS, pa.array(last)).append_column(TE, pa.array(last))

    def _measure(self, m: P.RowMeasure, run: _Run, found: list) -> list:
        if m.func == "classifier":
            return [labels[-1] for _, _, labels, _ in found]
        if m.func == "match_number":
            return [number for _, _, _, number in found]
        rows = []
        for s, stop, labels, _ in found:
            picked = [run.ids[s + i] for i, v in enumerate(labels)
                      if m.var is None or v == m.var]
            rows.append(picked)
        if m.func == "count" and m.column is None:
            return [len(r) for r in rows]
        flat = np.array([i for r in rows for i in r], np.int64)
        values = self.store.column(m.column).take(pa.array(flat - self.base)).to_pylist() \
            if len(flat) else []
        out, k = [], 0
        for r in rows:
            vals = values[k:k + len(r)]
            k += len(r)
            present = [v for v in vals if v is not None]
            out.append(_REDUCE[m.func](vals, present, m.offset))
        return out

    def _release(self, upto: int) -> list:
        """Decided matches whose time the output's watermark has reached, in time order."""
        if not self.decided:
            return []
        table = pa.concat_tables(self.decided).sort_by([(TS, "ascending")])
        ts = table.column(TS).to_numpy()
        n = int(np.searchsorted(ts, upto, "right"))
        self.decided = [table.slice(n)] if n < table.num_rows else []
        return [b for b in table.slice(0, n).to_batches() if b.num_rows]

    def _forget(self) -> None:
        """Store rows before every run's first row still needed are dropped."""
        if self.store is None:
            return
        needed = min((int(r.ids[r.start]) for r in self.runs.values()
                      if r.start < len(r.ids)), default=self.base + self.store.num_rows)
        if needed > self.base:
            self.store = self.store.slice(needed - self.base)
            self.base = needed

    def state_size(self) -> int:
        return sum(len(r.ts) for r in self.runs.values())


_SKIP_ROWS = {"past_last": lambda length: length, "all": lambda length: 1}

_REDUCE = {                      # (values, non-NULL values, FIRST/LAST's offset)
    "count": lambda vals, present, n: len(present),
    "first": lambda vals, present, n: vals[n] if n < len(vals) else None,
    "last": lambda vals, present, n: vals[-1 - n] if n < len(vals) else None,
    "sum": lambda vals, present, n: sum(present) if present else None,
    "min": lambda vals, present, n: min(present) if present else None,
    "max": lambda vals, present, n: max(present) if present else None,
    "avg": lambda vals, present, n: sum(present) / len(present) if present else None,
}


def _objects(column) -> np.ndarray:
    """A column's values as Python objects (NULL as None), for DEFINE's row-by-row terms."""
    out = np.empty(len(column), object)
    out[:] = column.to_pylist()
    return out


def _groups(batch: pa.RecordBatch, keys: list):
    """(partition values, row positions) of each partition in the batch, positions in
    order; Python runs once per partition."""
    if not keys:
        yield (), np.arange(batch.num_rows)
        return
    inverse, values = distinct_keys([batch.column(k) for k in keys])
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(values) + 1))
    for i, key in enumerate(values):
        yield key, order[bounds[i]:bounds[i + 1]]
