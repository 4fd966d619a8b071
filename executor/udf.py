"""User-defined aggregates: a Python class registered by name, with ``add(value)`` and
``result()`` (which may return a dict: a struct, as seed 000's {min, max, avg, med} example).

>>> class Summary:
...     def __init__(self): self.values = []
...     def add(self, v): self.values.append(v)
...     def result(self): return {"min": min(self.values), "max": max(self.values)}
>>> register_aggregate("summary", Summary)
>>> s = user_aggregate("summary")(); s.add(3); s.add(1); s.result()
{'min': 1, 'max': 3}
"""
from __future__ import annotations

_AGGREGATES: dict = {}


def register_aggregate(name: str, cls) -> None:
    _AGGREGATES[name.lower()] = cls


def user_aggregate(name: str):
    try:
        return _AGGREGATES[name.lower()]
    except KeyError:
        raise KeyError(f"no aggregate registered as {name!r}") from None
