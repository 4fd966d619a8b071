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


def run(con: duckdb.DuckDBPyConnection, name: str, data, sql: str) -> pa.Table:
    """``sql`` with the Arrow batch or table ``data`` visible as ``name`` (zero-copy)."""
    con.register(name, data)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister(name)
