"""DuckDB over Arrow for the operators: each operator owns one in-memory connection, set to
PostgreSQL's integer division, and runs its SQL over a batch registered under a name."""
from __future__ import annotations

import duckdb
import pyarrow as pa


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    # the plan's SQL means what PostgreSQL means: int / int divides as integers
    con.execute("SET integer_division = true")
    return con


def run(con: duckdb.DuckDBPyConnection, name, data, sql: str) -> pa.Table:
    """``sql`` with the Arrow batch or table ``data`` visible as ``name`` (zero-copy);
    ``name`` may instead be a dict {name: data} to see several (``data`` is then None)."""
    inputs = name if isinstance(name, dict) else {name: data}
    for n, d in inputs.items():
        con.register(n, d)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        for n in inputs:
            con.unregister(n)
