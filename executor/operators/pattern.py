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

from .. import duck
from .. import plan as P
from ..batches import INF, TE, TS, Watermark
from ..duck import quote
from .base import Operator
from .merge import Merger

PART = "__part"          # an event's partition id (the equivalence attributes' values)
KNOWN = "__known"        # when a match became known: its event time as a stream tuple


def _ts(i: int) -> str:
    return f"__ts_{i}"


class _Events:
    """One component's events that met its own predicate, in time order, numbered from
    ``base`` (ids stay valid as the window purges the oldest)."""

    def __init__(self):
        self.table: pa.Table | None = None
        self.ts = np.empty(0, np.int64)
        self.base = 0

    def add(self, table: pa.Table) -> np.ndarray:
        first = self.base + len(self.ts)
        self.table = table if self.table is None else pa.concat_tables([self.table, table])
        self.ts = np.concatenate([self.ts, table.column(TS).to_numpy()])
        return np.arange(first, first + table.num_rows, dtype=np.int64)

    def take(self, ids: np.ndarray) -> pa.Table:
        return self.table.take(pa.array(ids - self.base))

    def purge(self, upto: int) -> None:
        """Forget events with ts <= upto."""
        n = int(np.searchsorted(self.ts, upto, side="right"))
        if n:
            self.table, self.ts, self.base = self.table.slice(n), self.ts[n:], self.base + n

    def rows(self) -> int:
        return len(self.ts)


class _Stack:
    """One NFA state's active instances in one partition: (ts, event id), in time order."""
    __slots__ = ("ts", "ids")

    def __init__(self):
        self.ts = np.empty(0, np.int64)
        self.ids = np.empty(0, np.int64)

    def push(self, ts: np.ndarray, ids: np.ndarray) -> None:
        self.ts = np.concatenate([self.ts, ts])
        self.ids = np.concatenate([self.ids, ids])

    def purge(self, upto: int) -> None:
        n = int(np.searchsorted(self.ts, upto, side="right"))
        if n:
            self.ts, self.ids = self.ts[n:], self.ids[n:]


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the positions lo[i]..hi[i]-1: (which i each belongs to, the position)."""
    count = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo)), count)
    starts = np.repeat(lo - (np.cumsum(count) - count), count)
    return owner, np.arange(int(count.sum()), dtype=np.int64) + starts


class Pattern(Operator):
    def __init__(self, node: P.Pattern):
        self.node = node
        self.inputs = len(node.inputs)
        self.merger = Merger(self.inputs)
        comps = node.components
        self.positive = [k for k, c in enumerate(comps) if not c.negated]
        self.window = node.within_us
        self.events = [_Events() for _ in comps]
        self.stacks = [dict() for _ in self.positive[:-1]]   # state -> partition -> _Stack
        self.parts: dict = {}                                # partition values -> id
        self.pending: pa.Table | None = None                 # matches awaiting a closing !
        self.closing = [k for k in range(self.positive[-1] + 1, len(comps))]
        self.columns = [[c.name for c in inp.schema] for inp in node.inputs]
        self.everything: pa.Table | None = None              # strict: every event's (ts, part)
        self._prepare_sql()

    def open(self, context):
        self.con = context.cursor()

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
        for k, c in enumerate(comps):
            if not c.negated:
                continue
            before = [p for p in pos if p < k]
            after = [p for p in pos if p > k]
            if before and after:                       # between its neighbours
                low, high = _ts(before[-1]), _ts(after[0])
            elif after:                                # leading: (last - W, first)
                low, high = f"{last} - {self.window}", _ts(after[0])
            else:                                      # closing: (last, first + W)
                continue
            conds.append(self._absent(k, low, high))
        conds += self._strategy_conditions()
        cols = ", ".join(quote(n) for k in pos for n in self.columns[k] if n not in (TS, TE))
        known = (f"{first} + {self.window}" if self.closing else last)
        self.keep_sql = (f"SELECT {cols}, {', '.join(_ts(k) for k in pos)}, {PART}, "
                         f"{known} AS {KNOWN} FROM cand"
                         + (f" WHERE {' AND '.join(conds)}" if conds else ""))
        self.close_sql = None
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
        """Skip till next match: each positive event is the first of its component after
        the previous one (the same predicates met); strict contiguity: no event of any input
        of the partition between two consecutive positive events."""
        pos, comps = self.positive, self.node.components
        out = []
        for prev, k in zip(pos, pos[1:]):
            if self.node.strategy == "next":
                against = comps[k].against
                pred = f" AND ({against.sql})" if against is not None else ""
                out.append(f"NOT EXISTS (SELECT 1 FROM ev{k} AS x WHERE x.{TS} > {_ts(prev)} "
                           f"AND x.{TS} < {_ts(k)} AND x.{PART} = cand.{PART}{pred})")
            elif self.node.strategy == "strict":
                out.append(f"NOT EXISTS (SELECT 1 FROM everything AS x WHERE x.{TS} > "
                           f"{_ts(prev)} AND x.{TS} < {_ts(k)} AND x.{PART} = cand.{PART})")
        return out

    # ------------------------------------------------------------------ messages
    def on_batch(self, batch, port=0):
        self.merger.add(batch, port)
        return self._step()

    def on_watermark(self, ts, port=0):
        self.merger.mark(ts, port)
        return self._step()

    def on_end(self):
        return self._step(everything=True)

    def _step(self, everything: bool = False) -> list:
        limit, parts = self.merger.release_parts(everything=everything)
        if limit is None and not everything:
            return []
        limit = INF if everything else limit
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

    def _partition_ids(self, columns: list) -> np.ndarray:
        """The partition id of each row's equivalence values (new values get new ids); Python
        runs once per distinct value in the step, not per event."""
        codes, uniques = np.zeros(len(columns[0]), np.int64), []
        for col in columns:
            enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray)
                                       else col)
            size = len(enc.dictionary)
            codes = codes * size + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            uniques.append((enc.dictionary.to_pylist(), size))
        distinct, inverse = np.unique(codes, return_inverse=True)
        ids, known = np.empty(len(distinct), np.int64), self.parts
        for i, code in enumerate(distinct.tolist()):
            key = []
            for values, size in reversed(uniques):
                code, j = divmod(code, size)
                key.append(values[j])
            ids[i] = known.setdefault(tuple(reversed(key)), len(known))
        return ids[inverse.reshape(-1)]

    def _scan(self, parts: list) -> pa.Table | None:
        new = [self._own(k, p) for k, p in enumerate(parts)]
        ids = [self.events[k].add(t) if t is not None else None for k, t in enumerate(new)]
        if self.node.strategy == "strict":
            self._note_everything(parts)
        found, states = [], len(self.positive)
        for state, k in enumerate(self.positive):
            if new[k] is None:
                continue
            ts, part = new[k].column(TS).to_numpy(), new[k].column(PART).to_numpy()
            if state == 0:
                if states == 1:
                    found.append((None, ts, ids[k]))
                else:
                    self._push(0, ts, part, ids[k])
                continue
            for p in np.unique(part):
                stack = self.stacks[state - 1].get(int(p))
                if stack is None:
                    continue
                sel = np.flatnonzero(part == p)
                t = ts[sel]
                lo = (np.searchsorted(stack.ts, t - self.window, side="right")
                      if self.window is not None else np.zeros(len(t), np.int64))
                enter = np.searchsorted(stack.ts, t, side="left") > lo  # transition filtering
                if not enter.any():
                    continue
                if state == states - 1:
                    found.append((int(p), t[enter], ids[k][sel[enter]]))
                else:
                    self.stacks[state].setdefault(int(p), _Stack()).push(t[enter],
                                                                         ids[k][sel[enter]])
        return self._matches(found)

    def _push(self, state: int, ts: np.ndarray, part: np.ndarray, ids: np.ndarray) -> None:
        for p in np.unique(part):
            sel = part == p
            self.stacks[state].setdefault(int(p), _Stack()).push(ts[sel], ids[sel])

    def _note_everything(self, parts: list) -> None:
        """Strict contiguity sees every event of every input in its partition: (ts, part)."""
        got = []
        for k, t in enumerate(parts):
            if t is None or t.num_rows == 0:
                continue
            c = self.node.components[k]
            keys = ", ".join(f"({e.sql}) AS __pv{j}" for j, e in enumerate(c.partition))
            t = duck.run(self.con, "b", t, f"SELECT {TS}{', ' + keys if keys else ''} FROM b")
            n = len(c.partition)
            if n:
                valid = pc.and_(*[pc.is_valid(t.column(f"__pv{j}")) for j in range(n)]) \
                    if n > 1 else pc.is_valid(t.column("__pv0"))
                t = t.filter(valid)
                ids = self._partition_ids([t.column(f"__pv{j}") for j in range(n)])
            else:
                ids = np.zeros(t.num_rows, np.int64)
            got.append(pa.table({TS: t.column(TS), PART: pa.array(ids, pa.int64())}))
        if got:
            rows = pa.concat_tables(([self.everything] if self.everything is not None else [])
                                    + got)
            self.everything = rows.sort_by(TS)

    # ------------------------------------------------------------------ construction
    def _construct(self, p, t_last: np.ndarray, last_ids: np.ndarray) -> list:
        """Every path back from the last state's events through the stacks of partition
        ``p`` inside the window: one id array per positive component."""
        levels = [last_ids]
        frontier = t_last
        bound = t_last - self.window if self.window is not None else None
        for state in range(len(self.positive) - 2, -1, -1):
            stack = self.stacks[state].get(p)
            if stack is None:
                return []
            lo = (np.searchsorted(stack.ts, bound, side="right") if bound is not None
                  else np.zeros(len(frontier), np.int64))
            hi = np.searchsorted(stack.ts, frontier, side="left")
            owner, pos = _ranges(lo, hi)
            levels = [stack.ids[pos]] + [lv[owner] for lv in levels]
            frontier = stack.ts[pos]
            if bound is not None:
                bound = bound[owner]
        return levels

    def _matches(self, found: list) -> pa.Table | None:
        if not found:
            return None
        pieces = []
        for p, t, ids in found:
            levels = ([ids] if p is None else self._construct(p, t, ids))
            if levels and len(levels[0]):
                pieces.append(levels)
        if not pieces:
            return None
        levels = [np.concatenate([lv[j] for lv in pieces]) for j in range(len(self.positive))]
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
        kept = duck.run(self.con, self._visible(cand), None, self.keep_sql)
        if self.closing:
            self.pending = kept if self.pending is None else pa.concat_tables([self.pending,
                                                                              kept])
            return None
        return self._stamped(kept)

    def _visible(self, cand: pa.Table) -> dict:
        seen = {"cand": cand}
        for k, c in enumerate(self.node.components):
            if (c.negated or self.node.strategy == "next") and self.events[k].table is not None:
                seen[f"ev{k}"] = self.events[k].table
            elif c.negated or self.node.strategy == "next":
                seen[f"ev{k}"] = self._empty(k)
        if self.node.strategy == "strict":
            seen["everything"] = self.everything if self.everything is not None else \
                pa.table({TS: pa.array([], pa.int64()), PART: pa.array([], pa.int64())})
        return seen

    def _empty(self, k: int) -> pa.Table:
        """Component ``k`` with no events yet, typed as the plan says (DuckDB binds the
        predicates that read it)."""
        cols = ", ".join(f"CAST(NULL AS {c.type or 'VARCHAR'}) AS {quote(c.name)}"
                         for c in self.node.inputs[k].schema)
        return self.con.sql(f"SELECT {cols}{', ' if cols else ''}0::BIGINT AS {TS}, "
                            f"0::BIGINT AS {TE}, 0::BIGINT AS {PART} LIMIT 0").to_arrow_table()

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
        kept = duck.run(self.con, self._visible(held), None, self.close_sql)
        return self._stamped(kept)

    def _stamped(self, kept: pa.Table) -> pa.Table | None:
        """Matches as stream tuples: the positive components' columns, stamped when known,
        in that order (ties by the events' times, so the order never depends on batching)."""
        if kept.num_rows == 0:
            return None
        order = [(KNOWN, "ascending")] + [(_ts(k), "ascending") for k in self.positive]
        kept = kept.sort_by(order)
        names = [c.name for c in self.node.schema]
        cols = [kept.column(n) for n in names]
        known = kept.column(KNOWN).cast(pa.int64())
        return pa.table(cols + [known, known], names=names + [TS, TE])

    # ------------------------------------------------------------------ state
    def _purge(self, upto: int) -> None:
        """Nothing at or before ``upto`` (= frontier - window) can join a later match."""
        for e in self.events:
            e.purge(upto)
        for state in self.stacks:
            for p in list(state):
                state[p].purge(upto)
                if len(state[p].ts) == 0:
                    del state[p]
        if self.everything is not None:
            n = int(np.searchsorted(self.everything.column(TS).to_numpy(), upto, side="right"))
            self.everything = self.everything.slice(n)

    def state_size(self) -> int:
        return (sum(e.rows() for e in self.events)
                + sum(len(s.ts) for state in self.stacks for s in state.values())
                + (self.pending.num_rows if self.pending is not None else 0))

