"""DuckDB over Arrow for the operators: each owns a cursor of the process's one in-memory
database (set to PostgreSQL's integer division) and runs its SQL over a registered batch."""
from __future__ import annotations

import duckdb
import pyarrow as pa


_database: duckdb.DuckDBPyConnection | None = None


def connect() -> duckdb.DuckDBPyConnection:
    global _database
    if _database is None:
        _database = duckdb.connect()
    con = _database.cursor()
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
