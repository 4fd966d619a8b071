"""DuckDB over Arrow for the operators: a graph owns one in-memory database (``Database``, a
cursor factory), each operator a cursor of it set to PostgreSQL's integer division, over which
it runs its SQL on registered batches (``run``). ``quote`` spells every identifier of that SQL."""
from __future__ import annotations

import functools
import threading

import duckdb
import pyarrow as pa

from . import python_functions


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
    needs no SQL costs no database). Calling it gives a new cursor; its taker closes it.
    ``define`` adds the Python functions a plan calls (python_functions.PythonFunction)."""

    def __init__(self):
        self._db: duckdb.DuckDBPyConnection | None = None
        self._functions: dict = {}          # DuckDB name -> PythonFunction

    def __call__(self) -> duckdb.DuckDBPyConnection:
        if self._db is None:
            self._db = duckdb.connect(config=LOCKED)
            for f in self._functions.values():
                f.install(self._db)
        return configured(self._db.cursor())

    def define(self, functions) -> None:
        """Make ``functions`` callable by their DuckDB names (each once: a name is a hash of
        its definition)."""
        for f in functions:
            if f.duck_name not in self._functions:
                self._functions[f.duck_name] = f
                if self._db is not None:
                    f.install(self._db)

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


# (name, sql, input schema) -> the Arrow schema DuckDB gives ``sql``: many queries differing
# only in constants run the same expressions, and each asking DuckDB costs a call (~2 ms)
_SCHEMAS: dict = {}
_SCHEMAS_KEPT = 4096


def schema_of(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema,
              sql: str) -> pa.Schema:
    """The schema of ``sql``'s result over a batch of ``schema`` visible as ``name``: DuckDB
    binds it over no rows once, later asks are remembered (a plan's function names are
    hashes of their definitions, so one text means one thing)."""
    key = (name, sql, schema.remove_metadata())
    known = _SCHEMAS.get(key)
    if known is None:
        known = run(con, name, schema.empty_table(), sql).schema
        if len(_SCHEMAS) >= _SCHEMAS_KEPT:
            _SCHEMAS.pop(next(iter(_SCHEMAS)))          # the oldest first
        _SCHEMAS[key] = known
    return known


def typed_empty(con: duckdb.DuckDBPyConnection, columns, extra: str = "") -> pa.Table:
    """No rows, with the Arrow types DuckDB gives ``columns`` (plan Columns: name, DuckDB
    type); ``extra`` adds more select items."""
    if not columns and not extra:   # every column a NULL of no type (SELECT NULL … UNION …)
        return pa.table({})
    return con.sql(empty_select(columns, extra)).to_arrow_table()


def empty_select(columns, extra: str = "") -> str:
    """A query of no rows whose columns are ``columns`` (plan Columns: name, DuckDB type;
    UNKNOWN: a NULL of no type, no type at all: VARCHAR), then ``extra`` select items."""
    cols = [("NULL" if c.type == "UNKNOWN" else f"CAST(NULL AS {c.type or 'VARCHAR'})")
            + f" AS {quote(c.name)}" for c in columns]
    return f"SELECT {', '.join(cols + ([extra] if extra else []))} LIMIT 0"


# ---------------------------------------------------------------------- before a plan runs
# One database binds the planner's expressions, configured as the back end's. It runs no
# worker thread of its own (threads = 1): the gateway forks (Spark's JVM is started from it),
# and a thread caught in a lock at the fork can crash the child.
_typing: list = []
_typing_lock = threading.Lock()


def _typing_database() -> duckdb.DuckDBPyConnection:
    """The typing database (made on first use); the caller holds ``_typing_lock``."""
    if not _typing:
        _typing.append(configured(duckdb.connect(config={**LOCKED, "threads": 1})))
    return _typing[0]


_typed_functions: set = set()      # the DuckDB names of the Python functions defined there


def define_for_typing(functions) -> None:
    """Make Python functions known to the typing database, so that calls of them bind."""
    with _typing_lock:
        for f in functions:
            if f.duck_name not in _typed_functions:
                f.install(_typing_database())
                _typed_functions.add(f.duck_name)


def query_columns(sql: str) -> list:
    """(name, type) of each column of query ``sql``, bound (not run) in the typing database;
    raises ``duckdb.Error`` where it cannot be bound."""
    with _typing_lock:
        rel = _typing_database().sql(sql)
        return [(n, str(t)) for n, t in zip(rel.columns, rel.types)]


def _typed(sql: str) -> list:
    """``sql``'s result types, bound (not run) in the typing database."""
    return [t for _, t in query_columns(sql)]


def _names_where(condition: str) -> frozenset:
    """The names of DuckDB's functions that meet ``condition``."""
    with _typing_lock:
        return frozenset(r[0] for r in _typing_database().sql(
            f"SELECT DISTINCT function_name FROM duckdb_functions() WHERE {condition}"
        ).fetchall())


@functools.lru_cache(maxsize=4096)
def expression_type(sql: str, columns: tuple) -> str:
    """DuckDB's result type of ``sql`` over input columns ((name, DuckDB type), …; UNKNOWN:
    a NULL of no type), bound as the back end binds it; raises ``duckdb.Error`` where it
    cannot be bound (a function it does not have, arguments no overload takes).

    >>> expression_type('greatest("a", 2)', (("a", "INTEGER"),))
    'INTEGER'
    """
    cols = ", ".join((f"CAST(NULL AS {t})" if t not in ("", "UNKNOWN") else "NULL")
                     + f" AS {quote(n)}" for n, t in columns) or "1 AS _"
    return _typed(f"SELECT {sql} FROM (SELECT {cols}) AS b")[0]


@functools.lru_cache(maxsize=1)
def aggregate_names() -> frozenset:
    """The names of DuckDB's aggregate functions."""
    return _names_where("function_type = 'aggregate'")


@functools.lru_cache(maxsize=1)
def volatile_names() -> frozenset:
    """The names of DuckDB's functions whose value changes from call to call (random())."""
    return _names_where("stability = 'VOLATILE'")


@functools.lru_cache(maxsize=1024)
def union_type(a: str, b: str) -> str:
    """The type DuckDB gives a column of UNION ALL whose inputs are typed ``a`` and ``b``.

    >>> union_type("INTEGER", "BIGINT"), union_type("INTEGER", "DOUBLE")
    ('BIGINT', 'DOUBLE')
    """
    return _typed(f"SELECT CAST(NULL AS {a}) UNION ALL SELECT CAST(NULL AS {b})")[0]


# errors DuckDB raises over a query's values (a cast that cannot convert one, an overflow):
# the user's, with PostgreSQL's SQLSTATE, not the system's
_DATA_ERRORS = ((duckdb.ConversionException, "22P02"), (duckdb.OutOfRangeException, "22003"),
                (duckdb.DataError, "22000"), (duckdb.InvalidInputException, "22023"))


def data_error(e: duckdb.Error) -> tuple[str, str] | None:
    """(message, SQLSTATE) of an error over a query's values, or None for another kind.

    >>> data_error(duckdb.ConversionException("Conversion Error: 'x' is not INT32\\nLINE 1"))
    ("Conversion Error: 'x' is not INT32", '22P02')
    """
    message = str(e).split("\n", 1)[0]
    raised = python_functions.error_message(message)
    if raised is not None:      # a user's Python function raised: PostgreSQL's external
        return raised, "38000"  # routine exception
    if "Division by zero" in message:
        return "division by zero", "22012"
    for cls, state in _DATA_ERRORS:
        if isinstance(e, cls):
            return message, state
    return None
