"""What an operator is given when it opens (``Operator.open``): the query's start instant, a
DuckDB cursor factory, the lookup tables stream–table joins read, and a clock. Operators take
time, SQL and tables from here only, so a test drives one with a fake clock and no process."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import duckdb


def wall_clock() -> int:
    """Real time, µs since the epoch."""
    return time.time_ns() // 1000


@dataclass(frozen=True)
class OperatorContext:
    cursor: Callable[[], duckdb.DuckDBPyConnection]   # a new cursor; its taker closes it
    # ST: the query's start (µs): the archive's seam when the query is primed; None for a
    # query over live data, which starts with the first tuple it sees
    st: int | None = None
    tables: dict = field(default_factory=dict)        # table name (lower) -> its contents
    clock: Callable[[], int] = wall_clock             # µs
