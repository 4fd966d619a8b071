"""A continuous query's progress and its restart: what a result queue keeps so that its rows go
on exactly once when the back end that ran it dies, and the progress rows a cursor asks for.

The back end says when a BOUNDARY reaches a query's result (``REACHED`` ts: every row that
begins before ts has been sent). The gateway keeps the rows that came since (the *tail*, with
their intervals in two hidden columns at the end). After a crash the query is started again on
the new back end from the last such watermark, from the archive, and its rows that begin no
later than the tail's are cut by what the tail already covered, value by value, instant by
instant (a row may come in other pieces than before: cut at other BOUNDARYs). Once the new
query has passed the tail, its rows go on as they come.

A progress row must part the rows sent from those not sent, and a BOUNDARY at ts lets rows
that begin at ts come after it (tuples at ts are not late): so a cursor with progress rows gets
a row that begins at or after the latest watermark only with the next one, after which the
progress row comes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import pyarrow as pa
import pyarrow.compute as pc

from executor.wire import INF

log = logging.getLogger("cqgate")

TAIL_ROWS = 1_000_000     # rows kept since the last watermark; past it a crash loses the query


def _us(col) -> list:
    """TIMESTAMP column → µs (NULL: forever)."""
    values = pc.cast(col, pa.int64()).to_pylist()
    return [INF if v is None else v for v in values]


def _frozen(v):
    if isinstance(v, float):
        # a sum or mean recomputed over the archive may differ in its last bits
        return float(f"{v:.12g}") if v == v else "NaN"
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    return v


def _key(values: list, interval: set) -> tuple:
    """A row's values without its visible valid_from / valid_to (at ``interval``): pieces of
    one row cut at other instants have the same key."""
    return _frozen(tuple(v for i, v in enumerate(values) if i not in interval))


@dataclass
class Replay:
    """What the tail covered, by the row's values: [start, end) µs pieces, taken away from
    the restarted query's rows as they come."""
    covered: dict
    upto: int                     # the latest start in the tail
    rows: int
    # the restart gives back every piece: it replays from before the tail; one restored
    # from a checkpoint gives only rows made after it, those before it having been sent
    whole: bool = True

    @classmethod
    def of(cls, tail: list, width: int, pseudo: dict) -> "Replay":
        covered: dict = {}
        upto, n = -INF, 0
        interval = set(pseudo.values())
        for t in tail:
            cols = [c.to_pylist() for c in t.columns[:width]]
            starts, ends = _us(t.column(width)), _us(t.column(width + 1))
            for i, (s, e) in enumerate(zip(starts, ends)):
                covered.setdefault(_key([c[i] for c in cols], interval), []).append([s, e])
                upto, n = max(upto, s), n + 1
        return cls(covered, upto, n)

    def cut(self, table: pa.Table, width: int, pseudo: dict) -> pa.Table:
        """``table`` less what the tail covered (rows beginning after the tail pass as they
        are); a row partly covered keeps the rest, its visible valid_from / valid_to
        (``pseudo``: name -> column index) with it. Columns are taken by place: an answer
        may name two alike."""
        late = pc.greater(pc.cast(table.column(width), pa.int64()), self.upto)
        early = table.filter(pc.invert(late))
        if not early.num_rows:
            return table
        cols = [c.to_pylist() for c in early.columns]
        starts, ends = _us(early.column(width)), _us(early.column(width + 1))
        out: list = [[] for _ in cols]
        interval = set(pseudo.values())
        for i, (start, end) in enumerate(zip(starts, ends)):
            values = [c[i] for c in cols[:width]]
            pieces = self.covered.get(_key(values, interval))
            for s, e in _uncovered(start, end, pieces) if pieces else [(start, end)]:
                for j, v in enumerate(_piece(values, s, e, width, pseudo)):
                    out[j].append(v)
        if not out[0]:
            return table.filter(late)
        cut = pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(out, table.schema)],
                                   schema=table.schema)
        return pa.concat_tables([cut, table.filter(late)])

    def merged(self, older: "Replay | None") -> "Replay":
        """A crash while replaying: what the earlier tail covered and the new one did."""
        if older is not None:
            for key, pieces in older.covered.items():
                self.covered.setdefault(key, []).extend(pieces)
            self.upto, self.rows = max(self.upto, older.upto), self.rows + older.rows
            self.whole = self.whole and older.whole
        return self


def _timestamp(us: int):
    return None if us >= INF else pa.scalar(us, pa.int64()).cast(pa.timestamp("us")).as_py()


def _uncovered(start: int, end: int, pieces: list) -> list:
    """[start, end) less the tail's pieces of the same values; each piece covers one row at
    each instant, so what it covers here it covers for no other row (taken from it)."""
    out, todo = [], [(start, end)]
    while todo:
        s, e = todo.pop()
        for p in pieces:
            ps, pe = p
            if ps < e and s < pe and ps < pe:
                lo, hi = max(s, ps), min(e, pe)
                pieces.remove(p)
                pieces.extend(x for x in ([ps, lo], [hi, pe]) if x[0] < x[1])
                todo.extend(x for x in ((s, lo), (hi, e)) if x[0] < x[1])
                break
        else:
            out.append((s, e))
    return sorted(out)


def _piece(values: list, s: int, e: int, width: int, pseudo: dict) -> list:
    """A row's values over [s, e): its visible interval columns and the hidden ones say so."""
    row = list(values)
    ts, te = _timestamp(s), _timestamp(e)
    for name, value in (("valid_from", ts), ("valid_to", te)):
        if name in pseudo:
            row[pseudo[name]] = value
    return row + [ts, te]


@dataclass
class Resumption:
    """A result queue's progress and restart. ``progress``: the client asked for progress
    rows (a first column ``cq_progress``); ``restart(live, since, started, generation)``:
    starts the query again on a new back end from ``since`` after the link's crash number
    ``generation`` (None: it cannot be, and a crash ends it);
    ``hidden``: the rows carry their interval in two more columns (for a restart, and for
    progress rows, which part the rows sent from those not sent); ``width``: the answer's
    columns, before those two; ``pseudo``: the
    visible valid_from / valid_to among them; ``horizon_us``: how far before a watermark the
    query looks (a pattern's WITHIN): progress is reported only once that is past the
    instant it started."""
    width: int
    progress: bool = False
    restart: Callable[..., Awaitable] | None = None
    hidden: bool = False          # the rows carry their interval in two more columns
    pseudo: dict = field(default_factory=dict)
    horizon_us: int = 0
    # stream -> µs: it saw none of the stream's tuples up to there, every one after (the link)
    started: dict | None = None
    reached: int | None = None        # the latest watermark its rows passed
    # where it started: the seam it was primed at (None: from the first tuples it saw), from
    # where it starts again when its back end dies before its rows passed a watermark
    seam: int | None = None
    recoveries: int = 0
    tail: list = field(default_factory=list)
    tail_rows: int = 0
    held: list = field(default_factory=list)    # rows not to be sent before the next watermark
    replay: Replay | None = None

    def rows(self, table: pa.Table, schema: pa.Schema | None) -> pa.Table:
        """Rows from the back end as the client gets them now (``schema``: its columns);
        with progress rows, those that begin at or after the last watermark wait for the
        next one, so that a progress row always parts the rows sent from those not sent."""
        if self.replay is not None:
            table = self.replay.cut(table, self.width, self.pseudo)
        if self.progress and self.hidden and table.num_rows:
            starts = pc.cast(table.column(self.width), pa.int64())
            now = pc.less(starts, -INF if self.reached is None else self.reached)
            self.held.append(table.filter(pc.invert(now)))
            table = table.filter(now)
        if self.restart is not None and table.num_rows:
            self.tail.append(table)
            self.tail_rows += table.num_rows
            if self.tail_rows > TAIL_ROWS:    # too much since the watermark: it cannot go on
                log.warning("a query sent more than %d rows since its last watermark; it "
                            "will not go on if its back end dies", TAIL_ROWS)
                self.restart, self.tail, self.tail_rows = None, [], 0
        return self._client(table, schema)

    def _client(self, table: pa.Table, schema: pa.Schema | None) -> pa.Table:
        table = table.select(range(self.width))
        if self.progress:
            table = table.add_column(0, schema.field(0), pa.nulls(table.num_rows,
                                                                  schema.field(0).type))
        return table

    def at(self, ts: int, schema: pa.Schema | None) -> list:
        """The query's rows passed a BOUNDARY at ``ts``: the tail keeps only what begins at ts
        or later, a replay that is past its tail ends, and the rows held for it and a
        progress row (when asked for and due) come back, to be sent."""
        if self.reached is not None and ts <= self.reached:
            return []
        self.reached = ts
        # rows that begin at ts may have come before its BOUNDARY (tuples at ts are not
        # late): a restart from ts gives them again, so the tail keeps them
        self.tail = [k for t in self.tail if (k := t.filter(pc.greater_equal(
            pc.cast(t.column(self.width), pa.int64()), ts))).num_rows]
        self.tail_rows = sum(t.num_rows for t in self.tail)
        if self.replay is not None and ts > self.replay.upto:
            left = sum(len(p) for p in self.replay.covered.values())
            if left and self.replay.whole:
                log.warning("a restarted query did not give %d piece(s) of the rows sent "
                            "before its back end stopped", left)
            self.replay = None
        out = []
        if self.held:
            held = pa.concat_tables(self.held)
            before = pc.less(pc.cast(held.column(self.width), pa.int64()), ts)
            out.append(self._client(held.filter(before), schema))
            rest = held.filter(pc.invert(before))
            self.held = [rest] if rest.num_rows else []
        due = not self.started or ts - self.horizon_us > max(self.started.values())
        if self.progress and due:
            cols = [pa.array([ts], pa.int64()).cast(schema.field(0).type)] + \
                [pa.nulls(1, f.type) for f in list(schema)[1:]]
            out.append(pa.Table.from_arrays(cols, schema=schema))
        return out

    def from_checkpoint(self) -> None:
        """Its restart starts from a checkpoint (``lost`` came first)."""
        if self.replay is not None:
            self.replay.whole = False

    def lost(self) -> bool:
        """The back end died: whether the query can go on (then the rows since the last
        watermark are what its restart must not send again)."""
        if self.restart is None:
            return False
        self.replay = Replay.of(self.tail, self.width, self.pseudo).merged(self.replay)
        self.tail, self.tail_rows, self.held = [], 0, []
        self.recoveries += 1
        return True
