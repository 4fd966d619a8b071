"""⋈ on whole batches (seed 000 §2; DESIGN §5). Result interval = intersection.

Stream–stream: both inputs go through the Algorithm-1 merge, so tuples are joined in
timestamp order and results leave in valid_from order; each stable chunk is joined against
the other side's stored tuples and against itself in one DuckDB query (the equi-join part
becomes DuckDB's hash join, the residual a filter), and a stored tuple is purged as soon as no
later tuple can meet it (te <= the frontier).

Stream–table: the table is a lookup relation the gateway sends whole whenever it changes;
each stream tuple joins the table as it stood when the tuple was processed and keeps its own
interval (Flink's lookup join; an update later does not retract earlier results).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..batches import TE, TS, Watermark
from .base import Operator
from .merge import Merger

NEW = "__new"


def _condition(node) -> str:
    parts = [f"({a.sql}) = ({b.sql})" for a, b in node.equi]
    if node.residual is not None:
        parts.append(f"({node.residual.sql})")
    return " AND ".join(parts) if parts else "TRUE"


def _quoted(names) -> str:
    return ", ".join('"' + n.replace('"', '""') + '"' for n in names)


class StreamJoin(Operator):
    inputs = 2

    def __init__(self, node):
        self.left_cols = [c.name for c in node.left.schema]
        self.right_cols = [c.name for c in node.right.schema]
        self.merger = Merger(2)
        self.stored: list = [None, None]        # per side: columns + __ts_l/__te_l (or _r)
        self.con = duck.connect()
        cond = _condition(node)
        self.sql = (f"SELECT {_quoted(self.left_cols)}, {_quoted(self.right_cols)}, "
                    f"greatest(__ts_l, __ts_r) AS {TS}, least(__te_l, __te_r) AS {TE} "
                    f"FROM l JOIN r ON ({cond}) AND (l.{NEW} OR r.{NEW}) "
                    f"AND greatest(__ts_l, __ts_r) < least(__te_l, __te_r) "
                    f"ORDER BY {TS}, {TE}")

    @staticmethod
    def _side(table: pa.Table, cols: list, suffix: str, new: bool) -> pa.Table:
        t = table.select(cols + [TS, TE]).rename_columns(cols + [f"__ts{suffix}",
                                                                 f"__te{suffix}"])
        return t.append_column(NEW, pa.array([new] * t.num_rows, pa.bool_()))

    def _run(self, everything: bool = False) -> list:
        limit, parts = self.merger.release_parts(everything=everything)
        out = []
        if any(p is not None for p in parts):
            sides = []
            for i, (cols, suffix) in enumerate(((self.left_cols, "_l"),
                                                (self.right_cols, "_r"))):
                chunks = [t for t in (self.stored[i],) if t is not None]
                if parts[i] is not None:
                    chunks.append(self._side(parts[i], cols, suffix, True))
                sides.append(pa.concat_tables(chunks) if len(chunks) > 1 else
                             chunks[0] if chunks else None)
            if all(t is not None for t in sides):
                out.extend(duck.run(self.con, {"l": sides[0], "r": sides[1]}, None,
                                    self.sql).to_batches())
            for i, suffix in enumerate(("_l", "_r")):
                t = sides[i]
                if t is None:
                    continue
                t = t.set_column(t.schema.get_field_index(NEW), NEW,
                                 pa.array([False] * t.num_rows, pa.bool_()))
                if limit is not None:         # no later tuple starts before the frontier
                    t = t.filter(pc.greater(t.column(f"__te{suffix}"), limit))
                self.stored[i] = t if t.num_rows else None
        if limit is not None:
            out.append(Watermark(limit))
        return out

    def on_batch(self, batch, port=0):
        self.merger.add(batch, port)
        return self._run()

    def on_watermark(self, ts, port=0):
        self.merger.mark(ts, port)
        return self._run()

    def on_end(self):
        return self._run(everything=True)

    def state_size(self) -> int:
        held = sum(b.num_rows for q in self.merger.pending for b in q)
        return held + sum(t.num_rows for t in self.stored if t is not None)


class TableJoin(Operator):
    """The stream on port 0 against the table the back end was last sent (``set_table``)."""

    def __init__(self, node, table_name: str, filters: list):
        self.table_name = table_name
        self.left_cols = [c.name for c in node.left.schema]
        self.right_cols = [c.name for c in node.right.schema]
        self.filters = filters
        self.table: pa.Table | None = None
        self.con = duck.connect()
        self.sql = (f"SELECT {_quoted(self.left_cols)}, {_quoted(self.right_cols)}, "
                    f"{TS}, {TE} FROM l JOIN r ON {_condition(node)} ORDER BY {TS}, {TE}")

    def set_table(self, table: pa.Table) -> None:
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
