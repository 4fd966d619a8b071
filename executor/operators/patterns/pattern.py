"""⊳ event patterns (seed 004, SASE): SEQ over several inputs with negation, an equivalence
test, predicates and a window, by sequence scan and construction over Active Instance Stacks.

Events are taken in event-time order once every input has passed them (the Algorithm-1
merge's frontier). Each component's events first meet its own predicate and get their
partition (the equivalence attributes' values; PAIS); each positive component then keeps, per
partition, a stack of the events that entered its NFA state, an event entering only when the
previous state's stack of its partition holds an earlier event inside the window (transition
filtering). An event of the last component constructs its candidate sequences at once: the
stacks are walked backwards inside the window with numpy, in bulk (each stack is in time order,
so an event's RIP is a binary search). One DuckDB query per step then keeps the candidates
that satisfy the cross-event predicates, the negations and the selection strategy. A negation
that closes the pattern holds its matches until the frontier passes ``first + window``."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import duck
from ...expressions import kernels
from ... import plan as P
from ...batches import TE, TS, Watermark, distinct_keys
from ...duck import quote
from ..base import QueryError
from ..filter_map import Fast
from ..merge import Merger, Merging

PART = "__part"          # an event's partition id (the equivalence attributes' values)
KNOWN = "__known"        # when a match became known: its event time as a stream tuple
KEY_LIMIT = 1 << 62      # composite (partition, ts) keys above this: searched per partition
NONE = -(1 << 62)        # "no bound" among event times
CANDIDATE_LIMIT = 2_000_000   # sequences built at once (more: built in slices, or 54000)
INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")


def _plain(c: P.PatternComponent) -> list | None:
    """The columns a component's equivalence attributes are, when each is a plain column
    (Arrow then takes them as they are); None otherwise."""
    if any(getattr(e, "tree", None) is None or e.tree[0] != "col" for e in c.partition):
        return None
    return [e.tree[1] for e in c.partition]


class _TooMany(Exception):
    """A slice of events would build more than CANDIDATE_LIMIT candidate sequences."""

    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


def _ts(i: int) -> str:
    return f"__ts_{i}"


class _Events:
    """One component's events that met its own predicate, in time order, numbered from
    ``base`` (ids stay valid as the window purges the oldest)."""

    def __init__(self, indexed: bool = False):
        self.table: pa.Table | None = None
        self.ts = np.empty(0, np.int64)
        self.base = 0
        # a negated component's events by (partition, ts): a negation's range check is a
        # binary search
        self.index = _Stack() if indexed else None

    def add(self, table: pa.Table) -> np.ndarray:
        first = self.base + len(self.ts)
        self.table = table if self.table is None else pa.concat_tables([self.table, table])
        ts = table.column(TS).to_numpy()
        self.ts = np.concatenate([self.ts, ts])
        ids = np.arange(first, first + table.num_rows, dtype=np.int64)
        if self.index is not None:
            self.index.push(table.column(PART).to_numpy(), ts, ids)
        return ids

    def take(self, ids: np.ndarray) -> pa.Table:
        return self.table.take(pa.array(ids - self.base))

    def purge(self, upto: int) -> None:
        """Forget events with ts <= upto."""
        n = int(np.searchsorted(self.ts, upto, side="right"))
        if n:
            self.table, self.ts, self.base = self.table.slice(n), self.ts[n:], self.base + n
            if self.index is not None:
                self.index.purge(upto)

    def rows(self) -> int:
        return len(self.ts)


class _Stack:
    """One NFA state's active instances, every partition's in one set of arrays sorted by
    (partition, ts) (PAIS as columns): a search for many events of many partitions is one
    binary search over a composite key, ``partition * span + (ts - base)``."""
    __slots__ = ("part", "ts", "ids", "low")

    def __init__(self):
        self.part = np.empty(0, np.int64)
        self.ts = np.empty(0, np.int64)
        self.ids = np.empty(0, np.int64)
        # per instance: the previous state's instance must have a later ts than this
        # (skip till next match and strict contiguity; NONE otherwise)
        self.low = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.ts)

    def push(self, part: np.ndarray, ts: np.ndarray, ids: np.ndarray,
             low: np.ndarray | None = None) -> None:
        low = np.full(len(ts), NONE, np.int64) if low is None else low
        part, ts, ids, low = (np.concatenate([self.part, part]), np.concatenate([self.ts, ts]),
                              np.concatenate([self.ids, ids]), np.concatenate([self.low, low]))
        order = np.lexsort((ts, part))      # two sorted runs: close to linear
        self.part, self.ts, self.ids, self.low = part[order], ts[order], ids[order], low[order]

    def purge(self, upto: int) -> None:
        keep = self.ts > upto
        if not keep.all():
            self.part, self.ts = self.part[keep], self.ts[keep]
            self.ids, self.low = self.ids[keep], self.low[keep]

    def find(self, part: np.ndarray, after: np.ndarray | None, before: np.ndarray):
        """For each (part[i], after[i], before[i]): the positions of this partition's
        instances with after < ts < before (after None: no lower bound), as (lo, hi)."""
        if len(self.ts) == 0 or len(part) == 0:
            zero = np.zeros(len(part), np.int64)
            return zero, zero
        base = int(min(self.ts.min(), before.min()))
        span = int(max(self.ts.max(), before.max())) - base + 2
        widest = max(abs(int(min(self.part[0], part.min()))),
                     abs(int(max(self.part[-1], part.max()))) + 1)
        if widest * span >= KEY_LIMIT:
            return self._find_each(part, after, before)
        key = self.part * span + (self.ts - base)
        hi = np.searchsorted(key, part * span + (before - base), side="left")
        if after is None:
            lo = np.searchsorted(key, part * span, side="left")
        else:           # an ``after`` below every ts becomes base - 1: still this partition
            low = np.maximum(after, base - 1) - base
            lo = np.searchsorted(key, part * span + low, side="right")
        return lo, hi

    def _find_each(self, part, after, before):
        """``find`` partition by partition, for keys too wide for one int64."""
        lo, hi = np.zeros(len(part), np.int64), np.zeros(len(part), np.int64)
        edges = np.searchsorted(self.part, np.unique(part))
        for p, start in zip(np.unique(part), edges):
            end = int(np.searchsorted(self.part, p, side="right"))
            sel = part == p
            ts = self.ts[start:end]
            hi[sel] = start + np.searchsorted(ts, before[sel], side="left")
            lo[sel] = start + (np.searchsorted(ts, after[sel], side="right")
                               if after is not None else 0)
        return lo, hi

    def latest_before(self, part: np.ndarray, before: np.ndarray) -> np.ndarray:
        """For each (part[i], before[i]): the latest ts < before[i] in that partition, or
        NONE when there is none."""
        if len(self.ts) == 0:
            return np.full(len(part), NONE, np.int64)
        lo, hi = self.find(part, None, before)
        return np.where(hi > lo, self.ts[np.maximum(hi - 1, 0)], NONE)


class _Latest:
    """The latest event time per partition of some events (every input's, for strict
    contiguity; one component's, for skip till next match), asked only about this step's
    events: between steps it keeps two times per partition."""

    def __init__(self):
        self.last = _Stack()               # two instances per partition
        self.now = self.last

    def step(self, part: np.ndarray, ts: np.ndarray) -> None:
        """This step's events (in time order per partition, as they came)."""
        now = _Stack()
        now.push(np.concatenate([self.last.part, part]), np.concatenate([self.last.ts, ts]),
                 np.zeros(len(self.last.ts) + len(ts), np.int64))
        self.now = now
        # kept: each partition's two latest distinct times (a later step may bring an event
        # at the latest time itself, which asks for the one before)
        part, ts = now.part, now.ts
        distinct = np.append((part[1:] != part[:-1]) | (ts[1:] != ts[:-1]), True) \
            if len(now) else part > 0
        part, ts = part[distinct], ts[distinct]
        last = np.append(part[1:] != part[:-1], True) if len(part) else part > 0
        keep = last | (np.append(last[1:], False) & np.append(part[1:] == part[:-1], False))
        self.last = _Stack()
        self.last.part, self.last.ts = part[keep], ts[keep]
        self.last.ids = self.last.low = np.zeros(int(keep.sum()), np.int64)

    def before(self, part: np.ndarray, ts: np.ndarray) -> np.ndarray:
        return self.now.latest_before(part, ts)

    def purge(self, upto: int) -> None:
        self.last.purge(upto)



def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the positions lo[i]..hi[i]-1: (which i each belongs to, the position)."""
    count = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo)), count)
    starts = np.repeat(lo - (np.cumsum(count) - count), count)
    return owner, np.arange(int(count.sum()), dtype=np.int64) + starts


class Pattern(Merging):
    def __init__(self, node: P.Pattern):
        self.node = node
        self.inputs = len(node.inputs)
        self.merger = Merger(self.inputs)
        comps = node.components
        self.positive = [k for k, c in enumerate(comps) if not c.negated]
        self.window = node.within_us
        self.events = [_Events(indexed=c.negated) for c in comps]
        self.stacks = [_Stack() for _ in self.positive[:-1]]   # per NFA state but the last
        self.parts: dict = {}                                # partition values -> id
        self.pending: pa.Table | None = None                 # matches awaiting a closing !
        self.closing = [k for k in range(self.positive[-1] + 1, len(comps))]
        self.columns = [[c.name for c in inp.schema] for inp in node.inputs]
        # the latest events the strategy bounds a step back by: every input's ("all") for
        # strict contiguity, a component's own for skip till next match (unless a cross
        # predicate names it: then only a candidate can tell, in SQL)
        self.latest = ({"all": _Latest()} if node.strategy == "strict" else
                       {k: _Latest() for k in self.positive[1:]
                        if comps[k].against is None} if node.strategy == "next" else {})
        self.candidates = 0          # sequences constructed (before predicates and negations)
        self.match_ends: dict = {}   # partition -> the next kept match begins after (SKIP)
        self.integer_keys = all(len(c.partition) == 1 and c.partition[0].type in INTEGERS
                                for c in comps)
        self._prepare_sql()

    def open(self, context):
        self.con = context.cursor()
        self.fast = [Fast(c.predicate, self.con) if c.predicate is not None else None
                     for c in self.node.components]
        self.where_fast = Fast(self.node.where, self.con) if self.node.where is not None \
            else None

    # ------------------------------------------------------------------ SQL, made once
    def _prepare_sql(self) -> None:
        node, comps = self.node, self.node.components
        self.own_sql = []
        for k, c in enumerate(comps):
            keys = ", ".join(f"({e.sql}) AS __pv{j}" for j, e in enumerate(c.partition))
            where = [f"({e.sql}) IS NOT NULL" for e in c.partition]
            if c.predicate is not None:
                where.append(f"({c.predicate.sql})")
            self.own_sql.append(f"SELECT *{', ' + keys if keys else ''} FROM b"
                                + (f" WHERE {' AND '.join(where)}" if where else ""))
        pos = self.positive
        first, last = _ts(pos[0]), _ts(pos[-1])
        conds = [f"({node.where.sql})"] if node.where is not None else []
        # each negation's range as (component, (low ts column, offset), (high …, offset))
        self.ranges, self.closing_ranges = [], []
        for k, c in enumerate(comps):
            if not c.negated:
                continue
            before = [p for p in pos if p < k]
            after = [p for p in pos if p > k]
            if before and after:                       # between its neighbours
                span = (before[-1], 0), (after[0], 0)
            elif after:                                # leading: (last - W, first)
                span = (pos[-1], -self.window), (after[0], 0)
            else:                                      # closing: (last, first + W)
                self.closing_ranges.append((k, (pos[-1], 0), (pos[0], self.window)))
                continue
            self.ranges.append((k, *span))
            conds.append(self._absent(k, *(f"{_ts(i)} - {-d}" if d else _ts(i)
                                           for i, d in span)))
        conds += self._strategy_conditions()
        cols = ", ".join(quote(n) for k in pos for n in self.columns[k] if n not in (TS, TE))
        known = (f"{first} + {self.window}" if self.closing else last)
        self.keep_sql = (f"SELECT {cols}, {', '.join(_ts(k) for k in pos)}, {PART}, "
                         f"{known} AS {KNOWN} FROM cand"
                         + (f" WHERE {' AND '.join(conds)}" if conds else ""))
        self.close_sql = None
        # Arrow and numpy decide when every condition allows: no strategy beyond the default,
        # no predicate naming a negated component (its ranges are binary searches)
        self.vectorised = all(c.against is None for c in comps
                              if c.negated or node.strategy == "next")
        if self.closing:
            closes = [self._absent(k, last, f"{first} + {self.window}") for k in self.closing]
            self.close_sql = f"SELECT * FROM cand WHERE {' AND '.join(closes)}"

    def _absent(self, k: int, low: str, high: str) -> str:
        """No event of negated component ``k`` in its partition strictly inside (low, high)
        that meets the predicate naming it. Its columns keep their names (``c.x``), so the
        predicate's references to them bind inside and the rest to the candidate."""
        c = self.node.components[k]
        pred = f" AND ({c.against.sql})" if c.against is not None else ""
        return (f"NOT EXISTS (SELECT 1 FROM ev{k} AS x WHERE x.{TS} > {low} AND x.{TS} < {high}"
                f" AND x.{PART} = cand.{PART}{pred})")

    def _strategy_conditions(self) -> list:
        """Skip till next match, for a component with cross predicates (which only a
        candidate can decide): no event of it between the previous positive event and its
        own that meets them. The rest of both strategies is exact in construction
        (``_low``)."""
        pos, comps = self.positive, self.node.components
        out = []
        for prev, k in zip(pos, pos[1:]):
            if self.node.strategy == "next" and comps[k].against is not None:
                pred = f" AND ({comps[k].against.sql})"
                out.append(f"NOT EXISTS (SELECT 1 FROM ev{k} AS x WHERE x.{TS} > {_ts(prev)} "
                           f"AND x.{TS} < {_ts(k)} AND x.{PART} = cand.{PART}{pred})")
        return out

    # ------------------------------------------------------------------ messages
    def advance(self, limit: int, parts: list, everything: bool) -> list:
        out = self._scan(parts)
        if self.closing:                      # _scan held its matches; release the ripe
            out = self._release_closed(limit)
        if self.window is not None and not everything:
            self._purge(limit - self.window)
        batches = [b for b in out.to_batches() if b.num_rows] if out is not None else []
        return batches + ([] if everything else [Watermark(limit)])

    # ------------------------------------------------------------------ scan
    def _own(self, k: int, part) -> pa.Table | None:
        """Component ``k``'s new events that meet its own predicate, with their partition."""
        if part is None or part.num_rows == 0:
            return None
        table = self._arrow_own(k, part)
        if table is None:              # beyond Arrow's kernels: one DuckDB pass
            table = duck.run(self.con, "b", part, self.own_sql[k])
        if table.num_rows == 0:
            return None
        n = len(self.node.components[k].partition)
        if n == 0:
            ids = np.zeros(table.num_rows, np.int64)
        else:
            ids = self._partition_ids([table.column(f"__pv{j}") for j in range(n)])
            table = table.drop_columns([f"__pv{j}" for j in range(n)])
        return table.append_column(PART, pa.array(ids, pa.int64()))

    def _arrow_own(self, k: int, part: pa.Table) -> pa.Table | None:
        """``own_sql[k]`` with Arrow's kernels when the predicate has a kernel tree and the
        equivalence attributes are plain columns (no DuckDB call per step); None otherwise."""
        c = self.node.components[k]
        if _plain(c) is None:
            return None
        batch = part.combine_chunks().to_batches()[0] if part.num_columns else None
        if batch is None:
            return None
        keep = None
        if c.predicate is not None:
            keep = self.fast[k].run(kernels.mask, batch)
            if keep is None:
                return None
        for name in _plain(c):
            valid = pc.is_valid(batch.column(name))
            keep = valid if keep is None else pc.and_kleene(keep, valid)
        if keep is not None:
            batch = batch.filter(keep, null_selection_behavior="drop")
        table = pa.Table.from_batches([batch])
        for j, name in enumerate(_plain(c)):
            table = table.append_column(f"__pv{j}", table.column(name))
        return table

    def _partition_ids(self, columns: list) -> np.ndarray:
        """The partition id of each row's equivalence values (new values get new ids); Python
        runs once per distinct value in the step, not per event. One integer attribute is
        its own id."""
        if self.integer_keys:
            return columns[0].to_numpy().astype(np.int64, copy=False)
        inverse, keys = distinct_keys(columns)
        known = self.parts
        ids = np.fromiter((known.setdefault(k, len(known)) for k in keys), np.int64, len(keys))
        return ids[inverse]

    def _scan(self, parts: list) -> pa.Table | None:
        new = [self._own(k, p) for k, p in enumerate(parts)]
        ids = [self.events[k].add(t) if t is not None else None for k, t in enumerate(new)]
        if self.node.strategy == "strict":
            self._note_everything(parts)
        for k, latest in self.latest.items():
            if k == "all":
                continue
            empty = np.empty(0, np.int64)
            latest.step(*((new[k].column(PART).to_numpy(), new[k].column(TS).to_numpy())
                          if new[k] is not None else (empty, empty)))
        found, states = None, len(self.positive)
        for state, k in enumerate(self.positive):
            if new[k] is None:
                continue
            ts, part = new[k].column(TS).to_numpy(), new[k].column(PART).to_numpy()
            if state == 0 and states > 1:
                self.stacks[0].push(part, ts, ids[k])
                continue
            mine, low = ids[k], None
            if state > 0:                        # transition filtering (PAIS)
                low = self._low(k, part, ts)
                lo, hi = self.stacks[state - 1].find(part, low, ts)
                enter = hi > lo
                part, ts, mine = part[enter], ts[enter], mine[enter]
                low = low[enter] if low is not None else None
            if state == states - 1:
                found = (part, ts, mine, low)
            elif len(ts):
                self.stacks[state].push(part, ts, mine, low)
        return self._matches(found)

    def _low(self, k: int, part: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
        """For events of positive component ``k``: the previous positive event must have a
        ts above this. The window; strict contiguity, the latest event of the partition
        before; skip till next match, the latest event of ``k`` before (none of k's may lie
        between)."""
        low = ts - self.window if self.window is not None else None
        latest = self.latest.get("all" if self.node.strategy == "strict" else k)
        if latest is not None:
            before = latest.before(part, ts) - 1
            low = before if low is None else np.maximum(low, before)
        return low

    def _note_everything(self, parts: list) -> None:
        """Strict contiguity sees every event of every input in its partition."""
        got_part, got_ts = [], []
        for k, t in enumerate(parts):
            if t is None or t.num_rows == 0:
                continue
            c = self.node.components[k]
            n = len(c.partition)
            names = _plain(c)
            if n and names is not None:          # the attributes are columns: Arrow
                valid = pc.and_(*[pc.is_valid(t.column(x)) for x in names]) if n > 1 \
                    else pc.is_valid(t.column(names[0]))
                t = t.filter(valid)
                got_part.append(self._partition_ids([t.column(x) for x in names]))
            elif n:
                keys = ", ".join(f"({e.sql}) AS __pv{j}" for j, e in enumerate(c.partition))
                t = duck.run(self.con, "b", t, f"SELECT {TS}, {keys} FROM b WHERE "
                             + " AND ".join(f"__pv{j} IS NOT NULL" for j in range(n)))
                got_part.append(self._partition_ids([t.column(f"__pv{j}")
                                                     for j in range(n)]))
            else:
                got_part.append(np.zeros(t.num_rows, np.int64))
            got_ts.append(t.column(TS).to_numpy())
        empty = np.empty(0, np.int64)
        self.latest["all"].step(np.concatenate(got_part) if got_part else empty,
                                np.concatenate(got_ts) if got_ts else empty)

    # ------------------------------------------------------------------ construction
    def _construct(self, part: np.ndarray, t_last: np.ndarray, last_ids: np.ndarray,
                   low: np.ndarray | None) -> list:
        """Every path back from the last state's events through the stacks of their
        partitions, each step bounded below by the upper instance's ``low`` (the window,
        the strategy): one id array per positive component."""
        levels = [last_ids]
        frontier = t_last
        first = t_last - self.window if self.window is not None else None
        for state in range(len(self.positive) - 2, -1, -1):
            stack = self.stacks[state]
            lo, hi = stack.find(part, low, frontier)
            count = int(np.maximum(hi - lo, 0).sum())
            if count > CANDIDATE_LIMIT:
                raise _TooMany(count)
            owner, pos = _ranges(lo, hi)
            levels = [stack.ids[pos]] + [lv[owner] for lv in levels]
            frontier, part = stack.ts[pos], part[owner]
            if first is not None:
                first = first[owner]
            low = stack.low[pos]
            if first is not None:        # every earlier event is inside the last's window
                low = np.maximum(low, first)
        return levels

    def _matches(self, found) -> pa.Table | None:
        """The step's matches: candidates constructed from the last state's events in
        slices small enough that no slice builds more than CANDIDATE_LIMIT sequences (a
        single event that alone would is an error: 54000), each slice filtered at once."""
        if found is None or len(found[1]) == 0:
            return None
        kept, todo = [], [(0, len(found[1]))]
        while todo:
            a, b = todo.pop()
            piece = tuple(x[a:b] if x is not None else None for x in found)
            try:
                levels = self._construct(*piece) if len(self.positive) > 1 else [piece[2]]
            except _TooMany as e:
                if b - a == 1:
                    raise QueryError(
                        f"a pattern would build more than {CANDIDATE_LIMIT:,} candidate "
                        f"sequences for one event ({e.count:,})", "54000",
                        hint="Add an equivalence test [attr], narrow WITHIN, or choose "
                             "USING SKIP TILL NEXT MATCH.") from None
                mid = (a + b) // 2
                todo += [(mid, b), (a, mid)]
                continue
            self.candidates += len(levels[0])
            if len(levels[0]):
                kept.append(self._keep(levels))
        kept = [k for k in kept if k.num_rows]
        if not kept:
            return None
        kept = pa.concat_tables(kept)
        if self.closing:
            self.pending = kept if self.pending is None else pa.concat_tables([self.pending,
                                                                              kept])
            return None
        return self._stamped(kept)

    def _keep(self, levels: list) -> pa.Table:
        """The candidates (one id array per positive component) that are matches, with
        their components' columns and times."""
        cols, names = [], []
        for j, k in enumerate(self.positive):
            rows = self.events[k].take(levels[j])
            for n in self.columns[k]:
                if n not in (TS, TE):
                    cols.append(rows.column(n))
                    names.append(n)
            cols.append(rows.column(TS))
            names.append(_ts(k))
            if j == 0:
                cols.append(rows.column(PART))
                names.append(PART)
        cand = pa.table(cols, names=names)
        kept = self._kept(cand) if self.vectorised else None
        if kept is None:
            kept = duck.run(self.con, self._visible(cand), None, self.keep_sql)
        return kept

    def _kept(self, cand: pa.Table) -> pa.Table | None:
        """``keep_sql`` with Arrow's kernels and binary searches (None: DuckDB must)."""
        batch = cand.combine_chunks().to_batches()[0]
        keep = self._absent_mask(cand, self.ranges)
        if self.node.where is not None:
            mask = self.where_fast.run(kernels.mask, batch)
            if mask is None:
                return None
            keep = np.logical_and(keep, pc.fill_null(mask, False).to_numpy(
                zero_copy_only=False))
        kept = cand.filter(keep)
        pos = self.positive
        known = kept.column(_ts(pos[0])).to_numpy() + self.window if self.closing \
            else kept.column(_ts(pos[-1])).to_numpy()
        names = [n for k in pos for n in self.columns[k] if n not in (TS, TE)]
        names += [_ts(k) for k in pos] + [PART]
        return kept.select(names).append_column(KNOWN, pa.array(known, pa.int64()))

    def _absent_mask(self, cand: pa.Table, ranges: list) -> np.ndarray:
        """Per candidate: no event of each negated component in its range (numpy)."""
        keep = np.ones(cand.num_rows, bool)
        part = cand.column(PART).to_numpy()
        for k, (lo_k, lo_d), (hi_k, hi_d) in ranges:
            low = cand.column(_ts(lo_k)).to_numpy() + lo_d
            high = cand.column(_ts(hi_k)).to_numpy() + hi_d
            lo, hi = self.events[k].index.find(part, low, high)
            keep &= hi <= lo
        return keep

    def _visible(self, cand: pa.Table) -> dict:
        seen = {"cand": cand}
        for k, c in enumerate(self.node.components):
            if (c.negated or self.node.strategy == "next") and self.events[k].table is not None:
                seen[f"ev{k}"] = self.events[k].table
            elif c.negated or self.node.strategy == "next":
                seen[f"ev{k}"] = self._empty(k)
        return seen

    def _empty(self, k: int) -> pa.Table:
        """Component ``k`` with no events yet, typed as the plan says (DuckDB binds the
        predicates that read it)."""
        return duck.typed_empty(self.con, self.node.inputs[k].schema,
                                f"0::BIGINT AS {TS}, 0::BIGINT AS {TE}, 0::BIGINT AS {PART}")

    def _release_closed(self, limit: int) -> pa.Table | None:
        """Held matches whose closing negation's range (last, first + W) the frontier has
        passed: those with no such event leave, in the order they became known."""
        if self.pending is None or self.pending.num_rows == 0:
            return None
        ripe = pc.less_equal(self.pending.column(KNOWN), limit)
        held = self.pending.filter(ripe)
        self.pending = self.pending.filter(pc.invert(ripe))
        if held.num_rows == 0:
            return None
        kept = (held.filter(self._absent_mask(held, self.closing_ranges)) if self.vectorised
                else duck.run(self.con, self._visible(held), None, self.close_sql))
        return self._stamped(kept)

    def _stamped(self, kept: pa.Table) -> pa.Table | None:
        """Matches as stream tuples: the positive components' columns, stamped when known,
        in that order (ties by the events' times, so the order never depends on batching)."""
        if kept.num_rows == 0:
            return None
        order = [(KNOWN, "ascending")] + [(_ts(k), "ascending") for k in self.positive]
        kept = kept.sort_by(order)
        if self.node.skip != "all":
            kept = kept.filter(self._skipped(kept))
            if kept.num_rows == 0:
                return None
        names = [c.name for c in self.node.schema]
        cols = [kept.column(n) for n in names]
        known = kept.column(KNOWN).cast(pa.int64())
        return pa.table(cols + [known, known], names=names + [TS, TE])

    def _skipped(self, kept: pa.Table) -> np.ndarray:
        """AFTER MATCH SKIP PAST LAST ROW or TO FIRST/LAST var (one row each here): in each
        partition, a match that begins before where the last one kept lets the next begin
        is dropped (matches come in time order; Python runs once per match, not per
        event)."""
        part = kept.column(PART).to_numpy()
        first = kept.column(_ts(self.positive[0])).to_numpy()
        if self.node.skip == "past_last":
            after = kept.column(_ts(self.positive[-1])).to_numpy()
        else:          # the next match may begin at the variable's row: after just before it
            at = [c.alias for c in self.node.components].index(self.node.skip_to)
            after = kept.column(_ts(at)).to_numpy() - 1
        keep, ends = np.zeros(len(part), bool), self.match_ends
        for i, (p, a, b) in enumerate(zip(part.tolist(), first.tolist(), after.tolist())):
            if a > ends.get(p, NONE):
                keep[i], ends[p] = True, b
        return keep

    # ------------------------------------------------------------------ state
    def _purge(self, upto: int) -> None:
        """Nothing at or before ``upto`` (= frontier - window) can join a later match."""
        for e in self.events:
            e.purge(upto)
        for stack in self.stacks:
            stack.purge(upto)
        for latest in self.latest.values():
            latest.purge(upto)
        # a later match begins after ``upto``: ends at or before it no longer skip anything
        self.match_ends = {p: e for p, e in self.match_ends.items() if e > upto}

    def state_size(self) -> int:
        return (sum(e.rows() for e in self.events)
                + sum(len(s) for s in self.stacks)
                + (self.pending.num_rows if self.pending is not None else 0))

