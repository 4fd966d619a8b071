"""User-defined aggregates: a Python class registered by name, with ``add(value)`` and
``result()`` (which may return a dict: a struct, as seed 000's {min, max, avg, med} example),
and a class attribute ``returns``: the result's SQL type in DuckDB's spelling (default
DOUBLE). The server loads them from ``name=module:Class`` specs (``--aggregate``).

>>> class Summary:
...     def __init__(self): self.values = []
...     def add(self, v): self.values.append(v)
...     def result(self): return {"min": min(self.values), "max": max(self.values)}
>>> register_aggregate("summary", Summary)
>>> s = user_aggregate("summary")(); s.add(3); s.add(1); s.result()
{'min': 1, 'max': 3}
"""
from __future__ import annotations

import functools
import importlib

import duckdb
import pyarrow as pa

_AGGREGATES: dict = {}


def register_aggregate(name: str, cls) -> None:
    _AGGREGATES[name.lower()] = cls


def user_aggregate(name: str):
    try:
        return _AGGREGATES[name.lower()]
    except KeyError:
        raise KeyError(f"no aggregate registered as {name!r}") from None


def names() -> set:
    return set(_AGGREGATES)


def return_type(name: str) -> str:
    return getattr(user_aggregate(name), "returns", "DOUBLE")


@functools.lru_cache(maxsize=None)
def arrow_type(sql_type: str) -> pa.DataType:
    """The Arrow type DuckDB gives ``sql_type`` (a struct keeps its fields' names and order)."""
    return duckdb.connect().sql(f"SELECT CAST(NULL AS {sql_type}) AS x").to_arrow_table() \
        .schema.field("x").type


def load(spec: str | None) -> list:
    """Register the aggregates of ``name=module:Class[,name=module:Class…]``."""
    loaded = []
    for item in filter(None, (x.strip() for x in (spec or "").split(","))):
        name, _, target = item.partition("=")
        module, _, attr = target.partition(":")
        if not (name and module and attr):
            raise ValueError(f"aggregate spec {item!r} is not name=module:Class")
        cls = getattr(importlib.import_module(module), attr)
        if not (callable(getattr(cls, "add", None)) and callable(getattr(cls, "result", None))):
            raise ValueError(f"{target} needs add(value) and result() methods")
        register_aggregate(name, cls)
        arrow_type(return_type(name))          # the declared type must be one DuckDB knows
        loaded.append(name.lower())
    return loaded
