"""The relations one SELECT reads, for name resolution: a ``Source`` per FROM item (its
alias, catalog relation and scan), and ``Scope.resolve`` from a column to ``alias.column``."""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from executor import plan as P

from ..errors import AmbiguousColumn, UndefinedColumn, UndefinedRelation
from .catalog import Relation
from .types import normalize


@dataclass
class Source:
    alias: str
    relation: Relation
    node: object                  # the scan (and window) in the algebra
    is_stream: bool
    session: tuple = ()           # a session window's (start, end) columns: wstart(*), wend(*)


# marks the column a session's wstart(*) or wend(*) stands for (its value: the index of its
# name in SESSION_BOUNDS)
SESSION_BOUND = "session_bound"
SESSION_BOUNDS = ("wstart", "wend")


class Scope:
    """The relations of one SELECT, for name resolution: internal column names are
    ``alias.column``."""

    def __init__(self, sources: list):
        self.sources = sources
        # JOIN … USING (k): k unqualified names the first relation's (name -> (first, the
        # relations joined to it USING k …))
        self.merged: dict = {}

    def find(self, alias: str) -> Source | None:
        for s in self.sources:
            if s.alias.lower() == alias.lower():
                return s
        return None

    def resolve(self, col: exp.Column) -> tuple[str, str]:
        """(internal name, type) of a column reference."""
        if SESSION_BOUND in col.meta:
            return self._session_bound(col)
        name = col.name
        if col.table:
            src = self.find(col.table)
            if name == P.PROCTIME_COLUMN and src is not None and \
                    getattr(src.node, "proctime", False):      # PROCTIME(): its arrival
                return f"{src.alias}.{name}", "TIMESTAMP"
            if src is None:
                raise UndefinedRelation(
                    f'missing FROM-clause entry for table "{col.table}"',
                    hint="Qualify columns with a relation or alias named in FROM.")
            found = _lookup(src, name, col.meta.get(PLAN_NAME, False))
            if not found:
                raise UndefinedColumn(f'column {col.table}.{name} does not exist',
                                      hint=columns_hint(src))
            if len(found) > 1:
                raise AmbiguousColumn(f'column reference "{col.table}.{name}" is ambiguous',
                                      hint=f"{col.table} has more than one column {name}; "
                                           "name them apart in its select list (AS).")
            return found[0]
        hits = [(s, f) for s in self.sources if (f := _lookup(s, name))]
        if name.lower() in self.merged:
            merged = self.merged[name.lower()]
            hits = [(merged[0], _lookup(merged[0], name))] + [
                (s, f) for s, f in hits if not any(s is m for m in merged)]
        if not hits:
            raise UndefinedColumn(f'column "{name}" does not exist',
                                  hint=" ".join(columns_hint(s) for s in self.sources))
        if len(hits) > 1 or len(hits[0][1]) > 1:
            raise AmbiguousColumn(f'column reference "{name}" is ambiguous',
                                  hint="Qualify it: " + " or ".join(
                                      f"{s.alias}.{name}" for s, _ in hits))
        return hits[0][1][0]

    def _session_bound(self, col: exp.Column) -> tuple[str, str]:
        what = SESSION_BOUNDS[col.meta[SESSION_BOUND]]
        found = [s for s in self.sources if s.session]
        if not found:
            raise UndefinedColumn(f"{what}(*) needs a session window",
                                  hint="Write s [SESSION '10 seconds'] or [PARTITION BY k "
                                       "SESSION '10 seconds'].")
        if len(found) > 1:
            raise AmbiguousColumn(f"{what}(*) is ambiguous: {found[0].alias} and "
                                  f"{found[1].alias} both have session windows",
                                  hint="Read one of them in a query in FROM that selects "
                                       f"{what}(*) AS a name.")
        return found[0].session[col.meta[SESSION_BOUND]], "TIMESTAMP"


# marks a column reference that names a query's column by its plan name (what ``*`` expands
# to: the query's own names may repeat)
PLAN_NAME = "plan_name"


def _lookup(src: Source, name: str, by_plan_name: bool = False) -> list:
    """(internal name, type) of each column of ``src`` called ``name`` (a query in FROM may
    have several)."""
    rel = src.relation
    if by_plan_name and rel.names:
        return [(f"{src.alias}.{n}", normalize(t)) for n, (_, t) in zip(rel.names, rel.columns)
                if n == name]
    return [(f"{src.alias}.{rel.names[i] if rel.names else c}", normalize(t))
            for i, (c, t) in enumerate(rel.columns) if c.lower() == name.lower()]


def columns_hint(src: Source) -> str:
    return f"{src.alias} has " + ", ".join(c for c, _ in src.relation.columns) + "."
