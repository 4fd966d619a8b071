"""The server's Python functions: those ``CREATE FUNCTION … LANGUAGE python`` made (kept in
``<data_dir>/catalog/functions.json``) and those the operator named (``--function``), each callable
by its name in table queries (a function of the DuckDB file's connection) and offered to the
planner, whose plans carry the definitions to wherever they run (the back end, Spark)."""
from __future__ import annotations

import logging
import threading

import duckdb

from executor.plan import FunctionError, PythonFunction

from gateway import catalog_files
from gateway.pgwire import errors as E

DOCUMENT = "functions.json"
LANGUAGES = ("python", "plpython3u", "plpythonu")
log = logging.getLogger("cqgate.functions")


class PythonFunctions:
    """Name (lower case) -> PythonFunction, defined in ``db`` (the DuckDB file's connection,
    whose cursors the sessions use) under that name."""

    def __init__(self, data_dir: str, db: duckdb.DuckDBPyConnection):
        self.data_dir, self.db = data_dir, db
        self._lock = threading.Lock()
        self.functions: dict = {}
        self.owners: dict = {}              # name -> the role that made it (None: operator)
        for d in catalog_files.load(data_dir, DOCUMENT) or []:
            fn = PythonFunction.from_json(d["function"])
            try:
                self._define(fn)
            except FunctionError as e:      # its module went away: the others still load
                log.warning("function %s is not defined: %s", fn.name, e)
                continue
            self.owners[fn.name] = d.get("owner")

    def get(self, name: str) -> PythonFunction | None:
        return self.functions.get(name.lower())

    def add_operators(self, functions: list) -> None:
        """The operator's functions (``--function``): not kept in the catalog, named anew at
        every start."""
        for fn in functions:
            self._define(fn)
            self.owners[fn.name] = None

    def create(self, fn: PythonFunction, owner: str, replace: bool) -> None:
        with self._lock:
            old = self.functions.get(fn.name)
            if old is not None and not replace:
                raise E.PgError(f'function "{fn.name}" already exists with the same argument '
                                "types", sqlstate="42723",
                                hint="Use CREATE OR REPLACE FUNCTION.")
            if old is None and self._builtin(fn.name):
                raise E.PgError(f'function "{fn.name}" already exists', sqlstate="42723",
                                hint="Name the Python function differently.")
            if old is not None and self.owners.get(fn.name) is None:
                raise E.InsufficientPrivilege(f"function {fn.name} is the server's "
                                              "(--function): it cannot be replaced")
            if old is not None:
                self.db.remove_function(fn.name)
            self._define(fn)
            self.owners[fn.name] = owner
            self._save()

    def drop(self, name: str) -> None:
        with self._lock:
            name = name.lower()
            if self.owners.get(name) is None:
                raise E.InsufficientPrivilege(f"function {name} is the server's (--function): "
                                              "it cannot be dropped")
            self.db.remove_function(name)
            del self.functions[name]
            del self.owners[name]
            self._save()

    def _define(self, fn: PythonFunction) -> None:
        fn.install(self.db, fn.name)
        self.functions[fn.name] = fn

    def _builtin(self, name: str) -> bool:
        """Whether DuckDB already has a function (or a user's SQL function) of this name."""
        return bool(self.db.execute("SELECT count(*) FROM duckdb_functions() WHERE "
                                    "lower(function_name) = ?", [name]).fetchall()[0][0])

    def _save(self) -> None:
        catalog_files.save(self.data_dir, DOCUMENT, [
            {"function": fn.to_json(), "owner": self.owners[n]}
            for n, fn in sorted(self.functions.items()) if self.owners.get(n) is not None])
