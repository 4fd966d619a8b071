"""DuckDB over Arrow for the operators: a graph owns one in-memory database (``Database``, a
cursor factory), each operator a cursor of it set to PostgreSQL's integer division, over which
it runs its SQL on registered batches (``run``). ``quote`` spells every identifier of that SQL."""
from __future__ import annotations

import duckdb
import pyarrow as pa


def quote(name: str) -> str:
    """``name`` as a DuckDB identifier, whatever characters it holds.

    >>> quote('S.price'), quote('a"b')
    ('"S.price"', '"a""b"')
    """
    return '"' + name.replace('"', '""') + '"'


# a query's expressions run on batches the back end registers: nothing may reach a file, load
# an extension or change a setting but the one each cursor sets
LOCKED = {"enable_external_access": False, "autoinstall_known_extensions": False,
          "autoload_known_extensions": False, "allowed_configs": ["integer_division"],
          "lock_configuration": True}


def configured(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    # the plan's SQL means what PostgreSQL means: int / int divides as integers
    con.execute("SET integer_division = true")
    return con


class Database:
    """Cursors of one in-memory database, made when the first is asked for (a graph that
    needs no SQL costs no database). Calling it gives a new cursor; its taker closes it."""

    def __init__(self):
        self._db: duckdb.DuckDBPyConnection | None = None

    def __call__(self) -> duckdb.DuckDBPyConnection:
        if self._db is None:
            self._db = duckdb.connect(config=LOCKED)
        return configured(self._db.cursor())

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


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


def typed_empty(con: duckdb.DuckDBPyConnection, columns, extra: str = "") -> pa.Table:
    """No rows, with the Arrow types DuckDB gives ``columns`` (plan Columns: name, DuckDB
    type); ``extra`` adds more select items."""
    cols = [f"CAST(NULL AS {c.type or 'VARCHAR'}) AS {quote(c.name)}" for c in columns]
    if extra:
        cols.append(extra)
    return con.sql(f"SELECT {', '.join(cols)} LIMIT 0").to_arrow_table()
