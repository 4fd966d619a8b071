"""⋈ on whole batches (seed 000 §2; DESIGN §5). Result interval = intersection.

Stream–stream: both inputs go through the Algorithm-1 merge, so tuples are joined in
timestamp order and results leave in valid_from order; each stable chunk is joined against
the other side's stored tuples and against itself in one DuckDB query (the equi-join part
becomes DuckDB's hash join, the residual a filter), and a stored tuple is purged as soon as no
later tuple can meet it: te <= the frontier, or, for an interval join or a state_ttl, the
side's ``keep`` bound (``Join.keep``) <= the frontier, although still valid.

Stream–table: the table is a lookup relation the gateway sends whole whenever it changes;
each stream tuple joins the table as it stood when the tuple was processed and keeps its own
interval (Flink's lookup join; an update later does not retract earlier results).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..batches import TE, TS, Watermark, one_table
from ..duck import quote
from .base import Operator
from .merge import Merger, Merging

COMPACT = 64        # a side's stored chunks are made one after this many


def _condition(node) -> str:
    parts = [f"({a.sql}) = ({b.sql})" for a, b in node.equi]
    if node.residual is not None:
        parts.append(f"({node.residual.sql})")
    return " AND ".join(parts) if parts else "TRUE"


def _column_list(names) -> str:
    return ", ".join(map(quote, names))


class StreamJoin(Merging):
    inputs = 2
    checkpointed = ("merger", "stored", "reached")

    def __init__(self, node):
        self.left_cols = [c.name for c in node.left.schema]
        self.right_cols = [c.name for c in node.right.schema]
        self.merger = Merger(2)
        # per side: stored chunks (columns + __ts_l/__te_l/__keep_l), each with its least
        # and greatest __keep (when it may go: te, or sooner by the join's keep bound), so
        # purging looks at a chunk's rows only when it is partly expired
        self.stored: list = [[], []]
        # a NULL bound: the condition holds for no later tuple, so the tuple goes at once
        self.keep = [f"coalesce({k.sql}, {TS})" if k is not None else None for k in node.keep]
        self.cond = cond = _condition(node)
        self.pair = (f"SELECT {_column_list(self.left_cols)}, "
                     f"{_column_list(self.right_cols)}, greatest(__ts_l, __ts_r) AS {TS}, "
                     f"least(__te_l, __te_r) AS {TE} "
                     "FROM {l} AS l JOIN {r} AS r ON (" + cond.replace("{", "{{")
                     .replace("}", "}}") + ") AND greatest(__ts_l, __ts_r) < "
                     "least(__te_l, __te_r)")

    def open(self, context):
        self.con = context.cursor()

    def _side(self, table: pa.Table, i: int) -> pa.Table:
        """A side's new tuples as stored: its columns, interval and __keep (when it goes)."""
        cols, suffix = (self.left_cols, self.right_cols)[i], ("_l", "_r")[i]
        names = cols + [f"__ts{suffix}", f"__te{suffix}"]
        if self.keep[i] is None:
            side = table.select(cols + [TS, TE]).rename_columns(names)
            return side.append_column(f"__keep{suffix}", side.column(f"__te{suffix}"))
        return duck.run(self.con, "side", table, f"SELECT {_column_list(cols)}, {TS} AS "
                        f"__ts{suffix}, {TE} AS __te{suffix}, least({TE}, {self.keep[i]}) "
                        f"AS __keep{suffix} FROM side")

    def advance(self, limit: int, parts: list, everything: bool) -> list:
        limit = None if everything else limit
        new = self._sides(parts)
        out = self._pairs(new)
        self._store(new)
        self._purge(limit)
        return out + ([Watermark(limit)] if limit is not None else [])

    def _sides(self, parts: list) -> list:
        """Each input's new tuples as stored (None where it has none)."""
        return [self._side(p, i) if p is not None else None for i, p in enumerate(parts)]

    def _pairs(self, new: list) -> list:
        """The joined rows with a new tuple in them: new left × every right, old left × new
        right (stored × stored was joined when the later of the two came)."""
        right_all = [c for c, _, _ in self.stored[1]] + ([new[1]] if new[1] is not None else [])
        pairs = []
        if new[0] is not None and right_all:
            pairs.append((new[0], right_all))
        if new[1] is not None and self.stored[0]:
            pairs.append(([c for c, _, _ in self.stored[0]], [new[1]]))
        return self._join(pairs).to_batches() if pairs else []

    def _store(self, new: list) -> None:
        for i, suffix in enumerate(("_l", "_r")):
            if new[i] is not None and new[i].num_rows:
                self.stored[i].append(_bounded(new[i], f"__keep{suffix}"))

    def _purge(self, limit: int | None) -> None:
        """Drop what no later tuple can meet (``limit``: the frontier; None: the end)."""
        for i, suffix in enumerate(("_l", "_r")):
            chunks = self.stored[i]
            if limit is not None:           # no later tuple starts before the frontier
                chunks = [c for c in (_unexpired(c, f"__keep{suffix}", limit) for c in chunks)
                          if c is not None]
            if len(chunks) > COMPACT:         # many small batches: one table again
                chunks = [_bounded(one_table([c for c, _, _ in chunks]).combine_chunks(),
                                   f"__keep{suffix}")]
            self.stored[i] = chunks

    def _join(self, pairs: list) -> pa.Table:
        tables, selects = {}, []
        for k, (left, right) in enumerate(pairs):
            tables[f"l{k}"] = one_table(left)
            tables[f"r{k}"] = one_table(right)
            selects.append(self.pair.format(l=f"l{k}", r=f"r{k}"))
        sql = " UNION ALL ".join(f"({q})" for q in selects) + f" ORDER BY {TS}, {TE}"
        return duck.run(self.con, tables, None, sql)

    def state_size(self) -> int:
        held = sum(b.num_rows for q in self.merger.pending for b in q)
        return held + sum(t.num_rows for side in self.stored for t, _, _ in side)


def _bounded(chunk: pa.Table, te: str) -> tuple:
    low, high = pc.min_max(chunk.column(te)).values()
    return chunk, low.as_py(), high.as_py()


def _unexpired(stored: tuple, te: str, limit: int) -> tuple | None:
    """A stored chunk without its rows that are no longer valid after ``limit`` (None when
    none are left); a chunk wholly expired or wholly alive is not looked into."""
    chunk, low, high = stored
    if high <= limit:
        return None
    if low > limit:
        return stored
    return _bounded(chunk.filter(pc.greater(chunk.column(te), limit)), te)


class TableJoin(Operator):
    """The stream on port 0 against the table the back end was last sent (``set_table``)."""

    def __init__(self, node, table_name: str, filters: list):
        self.table_name = table_name
        self.tables = (table_name,)
        self.left_cols = [c.name for c in node.left.schema]
        self.right_cols = [c.name for c in node.right.schema]
        self.filters = filters
        self.table: pa.Table | None = None
        self.sql = (f"SELECT {_column_list(self.left_cols)}, "
                    f"{_column_list(self.right_cols)}, {TS}, {TE} "
                    f"FROM l JOIN r ON {_condition(node)} ORDER BY {TS}, {TE}")

    def open(self, context):
        self.con = context.cursor()
        table = context.tables.get(self.table_name)
        if table is not None:           # the table as it stands when the query starts
            self.set_table(self.table_name, table)

    def set_table(self, name: str, table: pa.Table) -> None:
        by_name = {n.lower(): n for n in table.schema.names}
        names = [by_name[c.split(".", 1)[1].lower()] for c in self.right_cols]
        t = table.select(names).rename_columns(self.right_cols)
        if self.filters:
            t = duck.run(self.con, "r", t, "SELECT * FROM r WHERE " + " AND ".join(
                f"({f})" for f in self.filters))
        self.table = t

    def on_batch(self, batch, port=0):
        if self.table is None or self.table.num_rows == 0:
            return []
        return duck.run(self.con, {"l": batch, "r": self.table}, None, self.sql).to_batches()

    def state_size(self) -> int:
        return self.table.num_rows if self.table is not None else 0
