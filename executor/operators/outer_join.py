"""⟕ ⟖ ⟗: LEFT, RIGHT and FULL joins of two streams, a hash join with padded rows (Krämer &
Seeger's outer join over validity intervals). The joined rows are the inner join's
(``StreamJoin``); a tuple of a preserved side is also a row padded with NULLs, valid exactly
while no partner is: its interval minus the union of its partners' overlaps.

Both inputs go through the merge, so at each frontier every tuple that starts before it is
known, and a later tuple starts at the frontier or after (where both sides are on hopping
windows' grids, at the next grid point). At each BOUNDARY the join therefore sends the padded
rows' pieces from where it sent them up to there, which no later tuple can change, with the
joined rows held since, in valid_from order: a padded row is cut at the BOUNDARYs it lives
across, as α cuts its rows (it holds at the same instants as one row would); over tumbling
windows it is whole. Stored tuples go when their interval has passed, as the inner join's do.
"""
from __future__ import annotations

import pyarrow as pa

from .. import duck
from .. import plan as P
from ..batches import INF, TE, TS, Watermark, one_table, sort_by_interval
from ..duck import quote
from .join import StreamJoin

BEFORE = -INF        # the frontier before the first: no piece starts earlier


class OuterStreamJoin(StreamJoin):
    checkpointed = None         # (its padded pieces' state is not saved yet: it replays)

    def __init__(self, node):
        super().__init__(node)
        self.padded = {"left": (0,), "right": (1,), "full": (0, 1)}[node.outer]
        self.prev = [BEFORE, BEFORE]     # per side: where its padded pieces were sent up to
        self.grids = (_grid(node.left), _grid(node.right))   # the grid each side starts on
        self.held: list = []     # joined rows since the last BOUNDARY, in valid_from order
        types = ({c.name: c.type for c in node.left.schema},
                 {c.name: c.type for c in node.right.schema})
        self.pieces = [self._pieces_sql(i, types[1 - i]) for i in (0, 1)]
        self.columns = (node.left.schema, node.right.schema)

    def _pieces_sql(self, i: int, other_types: dict) -> str:
        """The query of side i's padded pieces between {lo} and {hi}: over its stored tuples
        ``p`` and the other side's ``q``, the parts of each p's interval that no partner's
        overlap covers, from {lo} on, up to {hi}."""
        mine, theirs = ("_l", "_r")[i], ("_r", "_l")[i]
        own = (self.left_cols, self.right_cols)[i]
        nulls = {n: f"CAST(NULL AS {t or 'VARCHAR'}) AS {quote(n)}"
                 for n, t in other_types.items()}
        cols = [quote(n) if n in own else nulls[n] for n in self.left_cols + self.right_cols]
        # a piece starts at {lo} or where a partner's overlap ends, if nothing covers that
        # instant; it ends where the next overlap starts, or at the tuple's end or {hi}
        return (
            f"WITH p AS (SELECT row_number() OVER () AS __id, * FROM p_in), "
            f"b AS (SELECT __id, greatest(__ts{mine}, {{lo}}) AS lo, "
            f"least(__te{mine}, {{hi}}) AS hi FROM p "
            f"WHERE greatest(__ts{mine}, {{lo}}) < least(__te{mine}, {{hi}})), "
            f"c AS (SELECT p.__id, greatest(__ts{mine}, __ts{theirs}, {{lo}}) AS s, "
            f"least(__te{mine}, __te{theirs}, {{hi}}) AS e FROM p JOIN q_in AS q "
            f"ON ({{cond}}) WHERE greatest(__ts{mine}, __ts{theirs}, {{lo}}) < "
            f"least(__te{mine}, __te{theirs}, {{hi}})), "
            f"g AS (SELECT __id, lo AS g FROM b UNION SELECT c.__id, c.e FROM c "
            f"JOIN b ON c.__id = b.__id WHERE c.e < b.hi), "
            f"gaps AS (SELECT g.__id, g.g AS gs, least(b.hi, coalesce((SELECT min(c.s) FROM c "
            f"WHERE c.__id = g.__id AND c.s > g.g), b.hi)) AS ge FROM g "
            f"JOIN b ON g.__id = b.__id WHERE NOT EXISTS (SELECT 1 FROM c "
            f"WHERE c.__id = g.__id AND c.s <= g.g AND g.g < c.e)) "
            f"SELECT {', '.join(cols)}, gaps.gs AS {TS}, gaps.ge AS {TE} FROM gaps "
            f"JOIN p ON gaps.__id = p.__id WHERE gaps.gs < gaps.ge")

    def advance(self, limit: int, parts: list, everything: bool) -> list:
        new = self._sides(parts)
        self.held += self._pairs(new)
        self._store(new)
        if not (everything or self.at_boundary):
            return []           # rows wait for the BOUNDARY, with the padded pieces
        # judged before the purge: a tuple that ended since the last frontier has pieces here
        # up to where nothing new can start: a later tuple of either side (a partner, or one
        # of the padded side, whose pieces start where it does)
        hi = INF if everything else min(_next_start(limit, g) for g in self.grids)
        pieces = [t for t in (self._padded(i, hi) for i in self.padded)
                  if t is not None and t.num_rows]
        for i in self.padded:
            self.prev[i] = max(self.prev[i], hi)
        self._purge(None if everything else limit)
        rows, self.held = self.held, []
        if pieces:
            joined = [pa.Table.from_batches(rows)] if rows else []
            rows = sort_by_interval(pa.concat_tables(joined + pieces,
                                                     promote_options="permissive")).to_batches()
        return rows + ([] if everything else [Watermark(limit)])

    def state_size(self) -> int:
        return super().state_size() + sum(b.num_rows for b in self.held)

    def _padded(self, i: int, hi: int) -> pa.Table | None:
        """Side i's padded pieces from the last frontier up to ``hi``."""
        mine = [c for c, _, _ in self.stored[i]]
        if not mine or self.prev[i] >= hi:
            return None
        theirs = [c for c, _, _ in self.stored[1 - i]]
        q = one_table(theirs) if theirs else self._empty(1 - i)
        sql = self.pieces[i].format(lo=self.prev[i], hi=hi, cond=self.cond)
        return duck.run(self.con, {"p_in": one_table(mine), "q_in": q}, None, sql)

    def _empty(self, i: int) -> pa.Table:
        """Side i as stored, with no tuple."""
        suffix = ("_l", "_r")[i]
        return duck.typed_empty(self.con, self.columns[i],
                                f"0::BIGINT AS __ts{suffix}, 0::BIGINT AS __te{suffix}, "
                                f"0::BIGINT AS __keep{suffix}")


def _grid(node) -> tuple | None:
    """(slide, start) when the tuples of ``node`` all start on a hopping window's grid (its ω
    under filters and maps): one that comes later starts on the grid point at or after the
    frontier."""
    while isinstance(node, (P.Filter, P.Map)):
        node = node.input
    if isinstance(node, P.Window) and isinstance(node.window, P.SlideWindow):
        return node.window.slide_us, node.window.start_us or 0
    return None


def _next_start(limit: int, grid: tuple | None) -> int:
    """The earliest instant a tuple that comes after ``limit`` can start at."""
    if grid is None:
        return limit
    slide, start = grid
    return start + -((start - limit) // slide) * slide
