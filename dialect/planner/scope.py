"""The relations one SELECT reads, for name resolution: a ``Source`` per FROM item (its
alias, catalog relation and scan), and ``Scope.resolve`` from a column to ``alias.column``."""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import AmbiguousColumn, UndefinedColumn, UndefinedRelation
from .catalog import Relation
from .types import normalize


@dataclass
class Source:
    alias: str
    relation: Relation
    node: object                  # the scan (and window) in the algebra
    is_stream: bool


class Scope:
    """The relations of one SELECT, for name resolution: internal column names are
    ``alias.column``."""

    def __init__(self, sources: list):
        self.sources = sources

    def find(self, alias: str) -> Source | None:
        for s in self.sources:
            if s.alias.lower() == alias.lower():
                return s
        return None

    def resolve(self, col: exp.Column) -> tuple[str, str]:
        """(internal name, type) of a column reference."""
        name = col.name
        if col.table:
            src = self.find(col.table)
            if src is None:
                raise UndefinedRelation(
                    f'missing FROM-clause entry for table "{col.table}"',
                    hint="Qualify columns with a relation or alias named in FROM.")
            typ = src.relation.column_type(name)
            if typ is None:
                raise UndefinedColumn(f'column {col.table}.{name} does not exist',
                                      hint=columns_hint(src))
            return f"{src.alias}.{_canonical(src.relation, name)}", normalize(typ)
        hits = [s for s in self.sources if s.relation.column_type(name) is not None]
        if not hits:
            raise UndefinedColumn(f'column "{name}" does not exist',
                                  hint=" ".join(columns_hint(s) for s in self.sources))
        if len(hits) > 1:
            raise AmbiguousColumn(f'column reference "{name}" is ambiguous',
                                  hint="Qualify it: " + " or ".join(
                                      f"{s.alias}.{name}" for s in hits))
        src = hits[0]
        return (f"{src.alias}.{_canonical(src.relation, name)}",
                normalize(src.relation.column_type(name)))


def _canonical(rel: Relation, name: str) -> str:
    return next(c for c, _ in rel.columns if c.lower() == name.lower())


def columns_hint(src: Source) -> str:
    return f"{src.alias} has " + ", ".join(c for c, _ in src.relation.columns) + "."
