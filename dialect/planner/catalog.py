"""What the planner needs to know about relations, and an in-memory catalog.

The gateway implements the same two methods over its stream registry and DuckDB; tests use
``MemoryCatalog``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Relation:
    name: str                     # as the catalog spells it, e.g. temp.streams
    kind: str                     # stream | table | window | derived
    columns: tuple                # tuple[(name, DuckDB type)]
    timestamp_column: str | None = None
    end_column: str | None = None

    def column_type(self, name: str) -> str | None:
        for col, typ in self.columns:
            if col.lower() == name.lower():
                return typ
        return None


class Catalog(Protocol):
    def relation(self, schema: str | None, name: str) -> Relation | None: ...

    def is_aggregate(self, name: str) -> bool: ...

    def aggregate_type(self, name: str) -> str:
        """A user-defined aggregate's result type (DuckDB spelling)."""
        ...


@dataclass
class MemoryCatalog:
    relations: dict = field(default_factory=dict)      # lower-case qualified name -> Relation
    aggregates: set = field(default_factory=set)       # user-defined aggregate names

    def add(self, rel: Relation) -> "MemoryCatalog":
        self.relations[rel.name.lower()] = rel
        return self

    def relation(self, schema: str | None, name: str) -> Relation | None:
        key = f"{schema}.{name}".lower() if schema else name.lower()
        rel = self.relations.get(key)
        if rel is None and schema is None:
            rel = self.relations.get(f"public.{name}".lower())
        return rel

    def is_aggregate(self, name: str) -> bool:
        return name.lower() in self.aggregates

    def aggregate_type(self, name: str) -> str:
        return "DOUBLE"
