"""The server's files for the roles that may reach them, as in PostgreSQL: superusers and members
of ``pg_read_server_files`` (DuckDB's file-reading table functions, COPY FROM a file) and of
``pg_write_server_files`` (COPY TO a file). The shared database never touches a file: a file
function runs in a DuckDB of its own, with file access, and its rows join the statement as an
Arrow table registered on the session's connection."""
from __future__ import annotations

import itertools
import os
import threading

import duckdb
import pyarrow as pa
from sqlglot import exp

from gateway.pgwire import errors as E
from gateway.security.access import FILE_READERS, func_name, relations
from gateway.security.roles import READ_SERVER_FILES, WRITE_SERVER_FILES
from gateway.tables.statement_context import StatementContext
from gateway.tables.store import pg_error



def may_read(ctx: StatementContext) -> bool:
    """Whether the session's role may read the server's files (PostgreSQL's rule)."""
    return ctx.services.roles.has_privs_of(ctx.user, READ_SERVER_FILES)


def may_write(ctx: StatementContext) -> bool:
    """Whether the session's role may write the server's files."""
    return ctx.services.roles.has_privs_of(ctx.user, WRITE_SERVER_FILES)


def copy_denied(direction: str) -> E.PgError:
    """PostgreSQL's words for COPY with a file by a role that may not."""
    role, prep = (READ_SERVER_FILES, "from") if direction == "in" else (WRITE_SERVER_FILES, "to")
    return E.InsufficientPrivilege(
        f"permission denied to COPY {prep} a file",
        detail=f"Only roles with privileges of the \"{role}\" role may COPY {prep} a file.",
        hint="Anyone can COPY to stdout or from stdin. psql's \\copy command also works for "
             "anyone.")


class ServerFiles:
    """An in-memory DuckDB with file access, made at the first use; only this module's
    callers, after the role was checked, give it SQL."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self._db: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        self._names = itertools.count(1)

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._db is None:
                self._db = duckdb.connect(config={"autoinstall_known_extensions": False,
                                                  "autoload_known_extensions": False})
            return self._db.cursor()

    def read(self, function_sql: str) -> pa.Table:
        con = self._cursor()
        try:
            return con.sql(f"SELECT * FROM {function_sql}").to_arrow_table()
        except duckdb.Error as e:
            raise pg_error(e) from None
        finally:
            con.close()

    def path(self, path: str) -> str:
        """A COPY file's path: relative ones are in the data directory, as PostgreSQL's."""
        return path if os.path.isabs(path) else os.path.join(self.data_dir, path)

    def substitute(self, ctx, ast: exp.Expression) -> exp.Expression:
        """A copy of ``ast`` with each file-reading table function (or file named as a table)
        read here and replaced by the name of its rows, registered on the session's connection
        until ``Session.server_files`` ends."""
        ast = ast.copy()
        for t, function in list(relations(ast)):
            if function not in FILE_READERS:
                continue
            call = t.this if func_name(t.this) else exp.Anonymous(
                this=function, expressions=[exp.Literal.string(t.name)])
            if any(isinstance(x, exp.Placeholder) or x.key == "parameter"
                   for x in call.walk()):
                raise E.FeatureNotSupported("a file function's arguments must be constants")
            name = f"cq_file_{next(self._names)}"
            ctx.con.register(name, self.read(call.sql("duckdb")))
            ctx.file_tables.append(name)
            t.replace(exp.Table(this=exp.to_identifier(name), alias=t.args.get("alias")))
        return ast
