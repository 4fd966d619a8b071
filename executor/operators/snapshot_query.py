"""Σ: a query evaluated on its inputs' snapshots at every instant where one of them changes,
which is snapshot reducibility read as an algorithm, and so exact for any SQL DuckDB runs.

The inputs' tuples that are still valid are kept. Once the merge's frontier passes an
instant, no tuple valid there can still come, so the plan's SQL runs in one DuckDB query for
every instant where a tuple begins or ends since the last run (a LATERAL join of those
instants with the query over the tuples valid at each). The answers at consecutive instants
become rows with intervals: a row (each copy of it, for duplicates) is valid from the first
instant it is in the answer to the first where it is not. A row still in the answer is held
open; a BOUNDARY cuts it there so a quiet input still yields rows (as α's reorganisation
does), and rows leave in valid_from order.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from .. import plan as P
from ..batches import INF, TE, TS, Watermark, one_table, sort_by_interval
from ..duck import quote
from .join import COMPACT
from .merge import Merger, Merging

_START = "__s"      # an open row's valid_from
_COPY = "__k"       # which copy of a row (a snapshot may hold a row several times)


class SnapshotQuery(Merging):
    def __init__(self, node: P.SnapshotQuery):
        self.node = node
        self.inputs = len(node.inputs)
        self.merger = Merger(self.inputs)
        self.names = [c.name for c in node.schema]
        self.in_cols = [[c.name for c in i.schema] for i in node.inputs]
        self.tables = tuple(t.lower() for t in node.tables)
        self.current: dict = {}                 # lookup table -> its rows, as the SQL reads them
        self.stored: list = [[] for _ in node.inputs]     # still-valid tuples per input
        self.empty: list = []                   # per input: no rows, its columns' types
        self.start: int | None = None
        self.done: int | None = None            # the answer before this instant is known
        self.live: pa.Table | None = None       # rows in the answer at ``done``: cols, copy, start
        self.held: list = []                    # ended rows waiting for an earlier open one
        cols = ", ".join(map(quote, self.names))
        self.runs_sql = (
            f"WITH r AS (SELECT *, row_number() OVER (PARTITION BY __t, {cols}) AS {_COPY} "
            f"FROM res), p AS (SELECT __t, row_number() OVER (ORDER BY __t) AS __i, "
            "coalesce(lead(__t) OVER (ORDER BY __t), @LIMIT@) AS __next FROM points), "
            f"seen AS (SELECT {cols}, {_COPY}, r.__t, p.__i, p.__next FROM r JOIN p USING (__t) "
            f"UNION ALL SELECT {cols}, {_COPY}, {_START} AS __t, 0 AS __i, @DONE@ AS __next "
            f"FROM open), runs AS (SELECT *, __i - row_number() OVER (PARTITION BY {cols}, "
            f"{_COPY} ORDER BY __i) AS __g FROM seen) "
            f"SELECT {cols}, {_COPY}, min(__t) AS {TS}, max(__next) AS {TE}, "
            f"max(__i) = @LAST@ AS __open FROM runs GROUP BY {cols}, {_COPY}, __g "
            f"ORDER BY {TS}, {TE}")

    def open(self, context):
        self.con = context.cursor()
        # a query started at a known instant (primed at a seam) answers from there, over
        # empty windows too (COUNT(*) = 0, a table's rows padded), not from the first
        # BOUNDARY; archived tuples before it still move its start back to theirs
        self.start = context.st
        interval = f"0::BIGINT AS {TS}, 0::BIGINT AS {TE}"
        self.empty = [duck.typed_empty(self.con, i.schema, interval) for i in self.node.inputs]
        self.no_rows = [duck.typed_empty(self.con, cols) for cols in self.node.table_columns]
        for name in self.tables:
            table = context.tables.get(name)
            if table is not None:
                self.set_table(name, table)
        # no open row yet, with the columns' types as the query gives them (a NULL of no
        # type among them)
        none = self._query(np.array([], np.int64))
        self.live = none.select(self.names).append_column(
            _COPY, pa.array([], pa.int64())).append_column(_START, pa.array([], pa.int64()))

    def set_table(self, name: str, table: pa.Table) -> None:
        by_name = {n.lower(): n for n in table.schema.names}
        for j, read in enumerate(self.tables):         # a table read twice is two reads
            if read == name:
                cols = [c.name for c in self.node.table_columns[j]]
                self.current[f"__tb{j}"] = table.select(
                    [by_name[c.split(".", 1)[1].lower()] for c in cols]).rename_columns(cols)

    def on_start(self, ts: int) -> None:
        if self.start is None or ts < self.start:
            self.start = ts

    def advance(self, limit: int, parts: list, everything: bool) -> list:
        for i, part in enumerate(parts):
            if part is not None and part.num_rows:
                self.stored[i].append(part.select(self.in_cols[i] + [TS, TE]))
        if self.done is None:
            self.done = self._first_instant(parts, limit, everything)
            if self.done is None:
                return []
        if limit > self.done or everything:
            self._answer(limit)
        return self._release()

    def _first_instant(self, parts: list, limit: int, everything: bool) -> int | None:
        """Where the answer begins: when the streams read began (a COUNT(*) of nothing
        answers from there), else the first tuple, else the first watermark."""
        if self.start is not None:
            return self.start
        first = [pc.min(p.column(TS)).as_py() for p in parts if p is not None and p.num_rows]
        return min(first) if first else (None if everything else limit)

    def _answer(self, limit: int) -> None:
        """The rows that end before ``limit``; those still in the answer stay open."""
        bounds = [np.concatenate([c.column(TS).to_numpy(), c.column(TE).to_numpy()])
                  for side in self.stored for c in side]
        points = np.unique(np.concatenate(bounds)) if bounds else np.array([], np.int64)
        points = points[(points > self.done) & (points < min(limit, INF))]
        points = np.concatenate([[self.done], points]).astype(np.int64)
        res = self._query(points)
        sql = self.runs_sql.replace("@LIMIT@", str(min(limit, INF))).replace(
            "@DONE@", str(self.done)).replace("@LAST@", str(len(points)))
        runs = duck.run(self.con, {"res": res, "points": pa.table({"__t": points}),
                                   "open": self.live},
                        None, sql)
        # at the end every row is final: one still in the answer holds forever
        still = runs.column("__open").to_numpy(zero_copy_only=False) & (limit < INF)
        ended = runs.filter(pa.array(~still)).select(self.names + [TS, TE])
        # a row cut at the last BOUNDARY and gone at once was already sent whole
        ended = ended.filter(pc.less(ended.column(TS), ended.column(TE)))
        kept = runs.filter(pa.array(still))
        if self.at_boundary and limit < INF and kept.num_rows:     # cut open rows there
            starts = pa.array(np.full(kept.num_rows, limit, np.int64))
            ended = pa.concat_tables([ended, kept.select(self.names + [TS]).append_column(
                TE, starts)], promote_options="default")
        else:
            starts = kept.column(TS)
        self.live = kept.select(self.names + [_COPY]).append_column(_START, starts)
        if ended.num_rows:
            self.held.append(ended)
        self.done = int(min(limit, INF))
        # tuples that ended by now meet no later instant; many small batches become one
        for i, side in enumerate(self.stored):
            side = [c for c in (_unexpired(c, self.done) for c in side) if c is not None]
            self.stored[i] = [one_table(side).combine_chunks()] if len(side) > COMPACT \
                else side

    def _query(self, points: np.ndarray) -> pa.Table:
        """The plan's query at each of ``points``: ``__t`` and the answer's columns."""
        tables = {f"__in{i}": one_table(side) if side else self.empty[i]
                  for i, side in enumerate(self.stored)}
        for j, name in enumerate(self.tables):       # a table not sent yet has no rows
            tables[f"__tb{j}"] = self.current.get(f"__tb{j}", self.no_rows[j])
        tables["__c"] = pa.table({"__t": pa.array(points, pa.int64())})
        return duck.run(self.con, tables, None, self.node.sql)

    def _release(self) -> list:
        """The held rows no open row precedes, in valid_from order, and how far that goes."""
        opens = self.live.column(_START)
        bound = pc.min(opens).as_py() if len(opens) else None
        out: list = []
        if self.held:
            held = sort_by_interval(pa.concat_tables(self.held, promote_options="default"))
            if bound is not None:
                cut = int(np.searchsorted(held.column(TS).to_numpy(), bound, side="right"))
                ready, rest = held.slice(0, cut), held.slice(cut)
            else:
                ready, rest = held, held.slice(0, 0)
            self.held = [rest] if rest.num_rows else []
            out.extend(b for b in ready.to_batches() if b.num_rows)
        marks = [x for x in (bound, self.done) if x is not None]
        if self.held:
            marks.append(self.held[0].column(TS)[0].as_py())
        if marks and min(marks) < INF:
            out.append(Watermark(min(marks)))
        return out

    def state_size(self) -> int:
        held = sum(b.num_rows for q in self.merger.pending for b in q)
        return held + sum(c.num_rows for side in self.stored for c in side) + \
            sum(t.num_rows for t in self.held) + \
            (self.live.num_rows if self.live is not None else 0)


def _unexpired(chunk: pa.Table, now: int) -> pa.Table | None:
    keep = pc.greater(chunk.column(TE), now)
    if pc.all(keep).as_py():
        return chunk
    chunk = chunk.filter(keep)
    return chunk if chunk.num_rows else None
