"""The static-table store: one DuckDB database file in the data directory, the emulated
pg_catalog attached read-only beside it, one DuckDB connection per client session, and the mapping
of DuckDB errors to PostgreSQL SQLSTATEs. DuckDB itself refuses files, extensions and settings."""
from __future__ import annotations

import os
import re
import threading

import duckdb
import pyarrow as pa

from executor import plan as P

from gateway.tables import pg_catalog
from gateway.tables.python_functions import PythonFunctions
from gateway.tables.settings import DEFAULTS
from gateway.pgwire import errors as E

DB_NAME = "cqgate"
CATALOG_FILE = "pg_catalog.duckdb"      # rewritten at every start
SPILL_DIR = "duckdb_tmp"                # DuckDB's own spill files
# the settings a session's connection may still change once the configuration is locked
SESSION_CONFIGS = ("integer_division", "schema", "search_path")


class Store:
    def __init__(self, data_dir: str, memory_limit: str = "50%"):
        os.makedirs(data_dir, exist_ok=True)
        self.path = os.path.join(data_dir, f"{DB_NAME}.duckdb")
        self.db = duckdb.connect(self.path, config={
            "autoinstall_known_extensions": False, "autoload_known_extensions": False})
        self.name = self.db.execute("SELECT current_database()").fetchone()[0]
        self.db.execute("CREATE SCHEMA IF NOT EXISTS public")
        catalog = os.path.join(data_dir, CATALOG_FILE)
        self.live_schemas = pg_catalog.build(catalog, self.name, DEFAULTS)
        self.db.execute(f"ATTACH '{_literal(catalog)}' AS {pg_catalog.CATALOG} (READ_ONLY)")
        self.spill_dir = os.path.join(data_dir, SPILL_DIR)
        _lock_down(self.db, self.spill_dir, memory_limit)
        self.catalog_version = 0
        self._lock = threading.Lock()
        self.functions = PythonFunctions(data_dir, self.db)

    def connect(self) -> duckdb.DuckDBPyConnection:
        con = self.db.cursor()
        con.execute(f'USE "{self.name}".public')
        # PostgreSQL semantics: int / int is integer division, and dividing by zero is an error.
        con.execute("SET integer_division = true")
        return con

    def live_table(self, name: str, rows: list) -> pa.Table:
        """The live table ``name`` holding ``rows`` (tuples in its columns' order, as its
        declaration in ``pg_catalog.LIVE_TABLES`` has them); an INTERVAL column's values are
        µs (or timedeltas), held as a duration until registered (``conform``)."""
        schema = self.live_schemas[name]
        return pa.table([pa.array([r[i] for r in rows], _held_as(f.type))
                         for i, f in enumerate(schema)], names=schema.names)

    def bump(self) -> None:
        with self._lock:
            self.catalog_version += 1

    def close(self) -> None:
        self.db.close()


def _literal(text: str) -> str:
    return text.replace("'", "''")


def _lock_down(db: duckdb.DuckDBPyConnection, spill_dir: str, memory_limit: str) -> None:
    """After this, no statement on ``db`` reaches a file, loads an extension or changes a
    setting beyond SESSION_CONFIGS, whatever its spelling: DuckDB refuses it (a role that may
    read server files gets them through ``gateway/security/server_files.py`` instead)."""
    db.execute(f"SET temp_directory = '{_literal(spill_dir)}'")
    db.execute(f"SET memory_limit = '{_literal(memory_limit)}'")
    db.execute("SET allowed_configs = [" + ", ".join(f"'{c}'" for c in SESSION_CONFIGS) + "]")
    db.execute("SET enable_external_access = false")
    db.execute("SET lock_configuration = true")


# DuckDB error -> (SQLSTATE class), tried in order; the first pattern that matches wins.
_ERROR_MAP = [
    (duckdb.InterruptException, None, E.QueryCanceled, "canceling statement due to user request"),
    (duckdb.PermissionException, None, E.InsufficientPrivilege, None),
    (duckdb.IOException, r"No files found|No such file|does not exist", E.UndefinedFile, None),
    (duckdb.InvalidInputException, r"configuration has been locked|read-only mode|"
     r"PermissionError: ", E.InsufficientPrivilege, None),
    (duckdb.ParserException, None, E.SyntaxError_, None),
    (duckdb.CatalogException, r"(Table|View|Relation) with name (\S+) does not exist",
     E.UndefinedTable, None),
    (duckdb.CatalogException, r"Schema with name (\S+) does not exist", E.UndefinedObject, None),
    (duckdb.CatalogException, r"(Scalar Function|Table Function|Macro Function|Function) with "
     r"name", E.UndefinedFunction, None),
    (duckdb.CatalogException, r"already exists", E.DuplicateTable, None),
    (duckdb.CatalogException, r"Type with name", E.UndefinedObject, None),
    (duckdb.CatalogException, None, E.UndefinedObject, None),
    (duckdb.BinderException, r"Referenced column .* not found|does not have a column named|"
     r"column .* does not exist", E.UndefinedColumn, None),
    (duckdb.BinderException, r"No function matches|Could not choose a best candidate",
     E.UndefinedFunction, None),
    (duckdb.BinderException, r"Cannot compare|cannot be cast",
     E.DatatypeMismatch, None),
    (duckdb.BinderException, None, E.SyntaxError_, None),
    (duckdb.ConstraintException, r"NOT NULL", E.NotNullViolation, None),
    (duckdb.ConstraintException, r"foreign key", E.ForeignKeyViolation, None),
    (duckdb.ConstraintException, r"CHECK", E.CheckViolation, None),
    (duckdb.ConstraintException, None, E.UniqueViolation, None),
    (duckdb.ConversionException, None, E.InvalidTextRepresentation, None),
    (duckdb.OutOfRangeException, None, E.NumericOutOfRange, None),
    (duckdb.NotImplementedException, None, E.FeatureNotSupported, None),
    (duckdb.TransactionException, r"Conflict", E.SerializationFailure, None),
    (duckdb.TransactionException, r"aborted", E.InFailedTransaction,
     E.IN_FAILED_TRANSACTION_MESSAGE),
    # a user's Python function raised (the server's own raise PermissionError, above)
    (duckdb.InvalidInputException, r"Python exception occurred while executing the UDF",
     E.ExternalRoutineException, None),
    (duckdb.InvalidInputException, r"[Dd]ivision by zero", E.DivisionByZero, "division by zero"),
    # raised by the catalog's own macros (cq_regproc_oid), as PostgreSQL words it
    (duckdb.InvalidInputException, r'function ".*" does not exist', E.UndefinedFunction, None),
    (duckdb.InvalidInputException, None, E.DataException, None),
    (duckdb.Error, None, E.InternalError, None),
]

_PREFIX = re.compile(r"^[A-Za-z ]+ Error: ")
_UDF = re.compile(r"^Python exception occurred while executing the UDF: \w+: ")
_LINE = re.compile(r"\n\s*LINE (\d+): (.*)\n(\s*)\^", re.S)


def pg_error(exc: Exception, sql_offset: int = 0) -> E.PgError:
    """Translate a DuckDB exception into the PgError a PostgreSQL user would expect."""
    text = str(exc)
    first = text.split("\n")[0]
    message = _UDF.sub("", _PREFIX.sub("", first)).strip()
    for cls, pattern, pg_cls, fixed in _ERROR_MAP:
        if isinstance(exc, cls) and (pattern is None or re.search(pattern, text, re.I)):
            m = re.search(r"with name (\S+) does not exist", message)
            if pg_cls is E.UndefinedTable and m:
                message = f'relation "{m.group(1).strip(chr(34))}" does not exist'
            if pg_cls is E.DivisionByZero:
                message = "division by zero"
            col = re.search(r'[Rr]eferenced column "?([^"\s]+)"? not found', message)
            if pg_cls is E.UndefinedColumn and col:
                message = f'column "{col.group(1)}" does not exist'
            message = message.rstrip("!")
            if message[1:2].islower():
                message = message[:1].lower() + message[1:]
            if pg_cls is E.ExternalRoutineException:     # Python's words, its class first
                message = P.python_error(first) or message
            err = pg_cls(fixed or message)
            hint = re.search(r'Did you mean "([^"]+)"', text)
            if hint and not re.match(r"(pg_|pgcat|main\.|system\.)", hint.group(1)):
                err.hint = f'Perhaps you meant "{hint.group(1)}".'
            return err
    return E.InternalError(message)


def _held_as(typ: pa.DataType) -> pa.DataType:
    """Arrow builds no interval from µs: a duration it is, which DuckDB reads as INTERVAL."""
    return pa.duration("us") if pa.types.is_interval(typ) else typ


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the live table's column types; durations stay durations, which DuckDB
    reads as the INTERVAL the view expects (Arrow casts no duration to an interval)."""
    if table.schema == schema:
        return table
    fields = [table.schema.field(i).with_name(f.name)
              if pa.types.is_duration(table.schema.field(i).type)
              and pa.types.is_interval(f.type) else f for i, f in enumerate(schema)]
    return table.rename_columns(schema.names).cast(pa.schema(fields))
