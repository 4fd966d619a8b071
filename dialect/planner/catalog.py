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
    kind: str                     # stream | table | window | derived | view
    columns: tuple                # tuple[(name, DuckDB type)]
    timestamp_column: str | None = None
    end_column: str | None = None
    # a query in FROM: its columns' names inside the plan, unique where the query's own
    # repeat (SELECT a.k, b.k gives k and k_2)
    names: tuple = ()
    query: str = ""               # a view over streams: its SELECT, read where it is named
    # a derived stream read through its query: ((stream, the first event time it reads),
    # …) for its reads that start with it (``executor.plan.born_from``)
    born: tuple = ()
    # a stream that follows a PostgreSQL table: the table's key, whose changes end versions
    versions: tuple = ()

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

    def function_exists(self, name: str) -> bool:
        """Whether a table query could call a function of this name (one the back end's
        DuckDB lacks: a user's SQL function, the catalog's own)."""
        ...

    def sql_function(self, name: str, schema: str | None = None) -> tuple | None:
        """A user's SQL function (in ``schema``, or the first of the search path that has
        one): (parameter names, its body as DuckDB SQL), or None."""
        ...


    def python_function(self, name: str):
        """A user's Python function (executor.python_functions.PythonFunction), or None."""
        ...


@dataclass
class MemoryCatalog:
    relations: dict = field(default_factory=dict)      # lower-case qualified name -> Relation
    aggregates: set = field(default_factory=set)       # user-defined aggregate names
    functions: dict = field(default_factory=dict)      # name -> (parameters, DuckDB body)
    python: dict = field(default_factory=dict)         # name -> PythonFunction

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

    def function_exists(self, name: str) -> bool:
        return name.lower() in self.functions

    def sql_function(self, name: str, schema: str | None = None) -> tuple | None:
        return self.functions.get(f"{schema}.{name}".lower() if schema else name.lower())

    def python_function(self, name: str):
        return self.python.get(name.lower())
