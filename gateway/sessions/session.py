"""One client session: settings, transaction state, prepared statements and portals (SQL cursors
are portals too, as in PostgreSQL), and running a statement on DuckDB or as a session command.

The connection shell (``gateway/sessions/connection.py``) turns protocol messages into calls here and
results into bytes; nothing here touches a socket. DuckDB calls run in worker threads.
"""
from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field

import duckdb
from sqlglot import exp

from dialect.errors import PlanError
from dialect.intervals import interval_us
from dialect.names import fold, quote

from gateway.link.live_rows import LiveRows
from gateway.pgwire import copy_format as C
from gateway.pgwire import errors as E
from gateway.pgwire import types as T
from gateway.pgwire.results import Done, Field, Rows
from gateway.sessions import commands
from gateway.sessions import settings as S
from gateway.sessions.lexer import Statement, split
from gateway.sessions.portals import Portals, TxStatus
from gateway.sessions.prepared import Kind, Prepared
from gateway.streams import inserts, queries
from gateway.streams import statements as stream_statements
from gateway.tables import system_views
from gateway.tables import translate as TR
from gateway.tables.store import pg_error

log = logging.getLogger("cqgate")
_GETVAR = re.compile(r"getvariable\('(cq_[^']*)'\)", re.I)


def _interval_setting(name: str, value: str, bare_unit: str = "s") -> str:
    """A duration setting, checked; a bare number is in ``bare_unit`` (PostgreSQL's
    statement_timeout counts milliseconds)."""
    value = value.strip().strip("'")
    if re.fullmatch(r"\d+(\.\d+)?", value):
        value = f"{value}{bare_unit}"
    try:
        if interval_us(value) < 0:
            raise PlanError("negative")
    except PlanError:
        raise E.InvalidParameterValue(f'invalid value for parameter "{name}": "{value}"',
                                      hint="Write an interval such as '1s', '500ms' or 0.") \
            from None
    return value


@dataclass
class Session:
    server: object                # gateway.process.server.Server
    pid: int
    secret: int
    user: str = "cq"
    database: str = "cqgate"
    settings: dict = field(default_factory=lambda: dict(S.DEFAULTS))
    status: TxStatus = TxStatus.IDLE
    statements: dict = field(default_factory=dict)
    portals: Portals = field(default_factory=Portals)
    savepoints: list = field(default_factory=list)
    writes_in_tx: bool = False
    canceled: bool = False
    pending_status: list = field(default_factory=list)   # ParameterStatus to send
    notices: list = field(default_factory=list)
    client_closed: object = None     # () -> task that ends when the client disconnects

    def __post_init__(self):
        self.con = self.server.store.connect()
        self._col_cache: dict = {}
        self._col_cache_version = -1
        self.settings["session_authorization"] = self.user
        self.cancel_event = asyncio.Event()
        self.written_tables: set = set()      # tables written since the last refresh
        self.plans: dict = {}                 # gateway/streams/queries.py: plan_query
        self.result_types: dict = {}          # … and typed_fields

    # ------------------------------------------------------------------ helpers
    @property
    def tz(self):
        return T.zone(self.settings.get("TimeZone", "UTC"))

    def _session_value(self, name: str) -> str:
        """The literal for a ``getvariable('cq_…')`` the translator left in the SQL."""
        if name == "cq_user":
            return self.user
        if name == "cq_pid":
            return str(self.pid)
        key = S.canonical(name[len(TR.SETTING_PREFIX):])
        return self.settings.get(key)

    def bind_session_values(self, sql: str) -> str:
        if "getvariable('cq_" not in sql.lower():
            return sql

        def lit(m):
            v = self._session_value(m.group(1))
            return "NULL" if v is None else "'" + str(v).replace("'", "''") + "'"

        return _GETVAR.sub(lit, sql)

    async def _call(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.server.pool, fn, *args)

    def cancel(self) -> None:
        self.canceled = True
        self.cancel_event.set()
        try:
            self.con.interrupt()
        except duckdb.Error:
            pass

    def close(self) -> None:
        self.portals.clear()
        try:
            if self.status != TxStatus.IDLE:
                self.con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        self.con.close()

    def statement_deadline(self) -> float | None:
        """When (the server clock's monotonic time) statement_timeout ends the running
        statement; None: never. Result queues wait by the same clock."""
        us = interval_us(self.settings.get("statement_timeout", "0ms"))
        return self.server.clock.monotonic() + us / 1e6 if us > 0 else None

    # ------------------------------------------------------------------ settings
    def set_setting(self, name: str, value: str, *, local: bool = False) -> None:
        key = S.canonical(name)
        if not S.is_known(key):
            raise E.UndefinedParameter(f'unrecognized configuration parameter "{name}"')
        if key in S.READ_ONLY:
            raise E.PgError(f'parameter "{name}" cannot be changed', sqlstate="55P02")
        if key == "client_encoding":
            value = value.strip().strip("'")
        if key == "client_encoding" and value.lower() not in S.UTF8_NAMES:
            raise E.InvalidParameterValue(
                f'cqgate speaks UTF8 only; client_encoding "{value}" is not supported',
                hint="Leave client_encoding at UTF8 (the default).")
        if key == "client_encoding":
            value = "UTF8"
        if key == "TimeZone":
            value = value.strip("'")
        if key in ("cq.progress_interval", "statement_timeout"):
            value = _interval_setting(name, value, bare_unit="ms" if key == "statement_timeout"
                                      else "s")
        self.settings[key] = value
        if key in S.REPORTED:
            self.pending_status.append((key, value))

    def apply_startup_options(self, params: dict) -> None:
        for key, value in params.items():
            if key in ("user", "database", "options", "replication"):
                continue
            if S.is_known(key):
                self.set_setting(key, value)
        opts = params.get("options", "")
        for m in re.finditer(r"(?:-c\s*|--)([A-Za-z0-9_.]+)=((?:\\ |[^ ])*)", opts):
            self.set_setting(m.group(1).replace("-", "_"), m.group(2).replace("\\ ", " "))

    # ------------------------------------------------------------------ catalog lookups
    def _columns(self, schema: str | None, table: str) -> list:
        """[(name, duckdb type)] of a user table or view, cached per catalog version."""
        if self._col_cache_version != self.server.store.catalog_version:
            self._col_cache.clear()
            self._col_cache_version = self.server.store.catalog_version
        key = (schema, table.lower())
        if key not in self._col_cache:
            rows = self.con.execute(
                "SELECT c.column_name, c.data_type, t.table_oid, c.column_index "
                "FROM duckdb_columns() c LEFT JOIN duckdb_tables() t "
                "ON t.database_name = c.database_name AND t.schema_name = c.schema_name "
                "AND t.table_name = c.table_name "
                "WHERE c.database_name = ? AND lower(c.table_name) = ? "
                "AND (c.schema_name = ? OR (? IS NULL AND c.schema_name = 'public')) "
                "ORDER BY c.column_index",
                [self.server.store.name, table.lower(), schema, schema]).fetchall()
            if not rows:          # a stream, window or derived stream: its declared columns
                obj = self.server.streams.get(schema, table, kinds=("stream", "window",
                                                                    "derived"))
                rows = [(c[0], c[1], None, i) for i, c in enumerate(obj.columns)] if obj else []
            self._col_cache[key] = rows
        return self._col_cache[key]

    def _column_type(self, tables, alias, col) -> int:
        candidates = [t for t in tables if alias is None or (t[2] or "").lower() == alias.lower()]
        for schema, name, _alias in candidates:
            cols = self._columns(schema, name)
            if isinstance(col, int):
                if col < len(cols):
                    return T.duck_to_pg(cols[col][1]).oid
                continue
            for cname, ctype, *_ in cols:
                if cname.lower() == col.lower():
                    return T.duck_to_pg(ctype).oid
        return 0

    def _origins(self, t: TR.Translated, names: list) -> list:
        """(table oid, attnum) for each output column that is a plain column of a table."""
        out = [(0, 0)] * len(names)
        if not t.projections or not t.tables or t.catalog:
            return out
        expanded = []
        for name, alias, col in t.projections:
            if name == "*":
                tabs = [x for x in t.tables if alias is None or (x[2] or "").lower() == alias.lower()]
                if len(tabs) != 1 and alias is None and len(t.tables) != 1:
                    return out
                for c in self._columns(tabs[0][0], tabs[0][1]) if tabs else []:
                    expanded.append((c[2] or 0, c[3]))
            elif col is not None:
                tabs = [x for x in t.tables if alias is None or (x[2] or "").lower() == alias.lower()]
                found = (0, 0)
                for schema, tname, _ in tabs:
                    for c in self._columns(schema, tname):
                        if c[0].lower() == col.lower():
                            found = (c[2] or 0, c[3])
                            break
                    if found != (0, 0):
                        break
                expanded.append(found)
            else:
                expanded.append((0, 0))
        return expanded if len(expanded) == len(names) else out

    # ------------------------------------------------------------------ prepare / describe
    def prepare(self, name: str, sql: str, client_oids: tuple = ()) -> Prepared:
        stmts = split(sql)
        if len(stmts) > 1:
            raise E.SyntaxError_("cannot insert multiple commands into a prepared statement")
        if not stmts:
            return Prepared(name, None, list(client_oids), Kind.EMPTY)
        return self.prepare_statement(name, stmts[0], client_oids)

    def prepare_statement(self, name: str, stmt: Statement, client_oids: tuple = ()) -> Prepared:
        cmd = commands.command_for(stmt.text)
        oids = list(client_oids) + [0] * max(0, stmt.max_param - len(client_oids))
        if cmd is not None:
            return Prepared(name, stmt, oids, Kind.COMMAND, command=cmd)
        tr = self.translate(stmt)
        for idx, oid in tr.params.items():
            if 0 < idx <= len(oids) and not oids[idx - 1]:
                oids[idx - 1] = oid
        oids = [o or 25 for o in oids]
        if tr.stream or any(self.server.streams.get(schema, name) is not None
                            for schema, name, _ in tr.tables):
            return Prepared(name, stmt, oids, Kind.STREAM, translated=tr)
        return Prepared(name, stmt, oids, Kind.SQL, translated=tr)

    def translate(self, stmt: Statement) -> TR.Translated:
        try:
            tr = TR.translate_cached(stmt.text)
        except E.PgError as e:
            if e.position:
                e.position += stmt.offset
            raise
        if stmt.max_param:
            params = TR.infer_params(tr.source,
                                     lambda a, c: self._column_type(tr.tables, a, c))
            tr = TR.Translated(**{**tr.__dict__, "params": params})
        return tr

    async def describe_statement(self, p: Prepared) -> list | None:
        """Fields of a prepared statement's result (None = no rows), without running it."""
        return await self.DESCRIBE[p.kind](self, p)

    async def _describe_stream(self, p: Prepared) -> list | None:
        return await self._call(stream_statements.describe, self, p.translated.source)

    async def _describe_command(self, p: Prepared) -> list | None:
        return commands.describe_command(self, p)

    async def _describe_table_sql(self, p: Prepared) -> list | None:
        if not p.returns_rows:
            return None
        return await self._call(self._describe_sql, p.translated, p.param_oids)

    async def _describe_empty(self, p: Prepared) -> None:
        return None

    DESCRIBE = {Kind.EMPTY: _describe_empty, Kind.STREAM: _describe_stream,
                Kind.COMMAND: _describe_command, Kind.SQL: _describe_table_sql}

    def _describe_sql(self, tr: TR.Translated, oids: list) -> list:
        ast = tr.ast.copy()

        def null_param(node):
            if isinstance(node, exp.Anonymous) and node.name.lower() == "set_config":
                return exp.Literal.string("")
            idx = TR.param_index(node)
            if idx is not None:
                t = T.BY_OID.get(oids[idx - 1] if idx <= len(oids) else 25)
                return exp.Cast(this=exp.Null(), to=exp.DataType.build(
                    t.duckdb if t else "VARCHAR", dialect="duckdb"))
            return node

        ast = ast.transform(null_param)
        if isinstance(ast, (exp.Insert, exp.Update, exp.Delete)):
            target = ast.this.this if isinstance(ast.this, exp.Schema) else ast.this
            ret = ast.args["returning"].expressions
            ast = exp.select(*ret).from_(target.copy()).limit(0)
        try:
            rel = self.con.sql(self.bind_session_values(ast.sql("duckdb")))
            names, types = rel.columns, [str(x) for x in rel.types]
        except duckdb.Error as e:
            raise pg_error(e) from None
        return self._fields(tr, names, types)

    def _fields(self, tr: TR.Translated | None, names: list, types: list) -> list:
        origins = self._origins(tr, names) if tr is not None else [(0, 0)] * len(names)
        out = []
        for name, ty, (toid, attnum) in zip(names, types, origins):
            pg = T.duck_to_pg(ty)
            out.append(Field(name, pg.oid, T.duck_typmod(ty), toid, attnum))
        return out

    # ------------------------------------------------------------------ execution
    async def execute(self, p: Prepared, params: list) -> Rows | Done:
        try:
            return await self._execute(p, params)
        finally:
            if self.written_tables and self.status == TxStatus.IDLE:
                await self._tables_changed()

    async def _tables_changed(self) -> None:
        """Committed writes to tables that running stream–table joins read: the back end
        gets their new contents, which hold from its current watermark on."""
        link = self.server.backend
        names = [n for n in self.written_tables if n in link.tables_in_use]
        self.written_tables.clear()
        for name in names:
            table = await self._call(self.table_contents, name)
            await link.send_table(name, table)

    def table_contents(self, name: str):
        try:
            return self.con.sql(f"SELECT * FROM {name}").to_arrow_table()
        except duckdb.Error as e:
            raise pg_error(e) from None

    async def _execute(self, p: Prepared, params: list) -> Rows | Done:
        if p.kind is Kind.EMPTY:
            return Done("")
        if self.status == TxStatus.FAILED and not p.allowed_when_failed:
            raise E.InFailedTransaction(E.IN_FAILED_TRANSACTION_MESSAGE)
        self.canceled = False
        self.cancel_event.clear()
        return await self.RUN[p.kind](self, p, params)

    async def _run_stream(self, p: Prepared, params: list):
        res = await self._call(stream_statements.run, self, p.translated.source, params)
        if not isinstance(res, queries.Planned):
            return res

        def start(history=None, seam=None):
            return self.server.backend.open(res.plan, res.fields, res.schema, p.stmt.text,
                                            self.pid, p.cursor or p.name, res.tables, history,
                                            seam, label=f"cursor {p.cursor}" if p.cursor
                                            else "query")
        if res.history:        # windows reaching into an archive start primed
            return await self.server.ingest.start_primed(list(res.history), start)
        return await start()

    async def _run_table_sql(self, p: Prepared, params: list):
        if p.translated.catalog and system_views.wanted(p.stmt.text):
            await system_views.refresh(self)
        return await self._call(self._run_sql, p, params)

    RUN = {Kind.STREAM: _run_stream, Kind.COMMAND: commands.run_command,
           Kind.SQL: _run_table_sql}

    def _run_sql(self, p: Prepared, params: list) -> Rows | Done:
        tr = p.translated
        sql = tr.duck_sql
        if tr.has_set_config:
            sql, changes = TR.set_config_sql(tr, params)
            for name, value in changes:
                self.set_setting(name, value)
        sql = self.bind_session_values(sql)
        args = params or None
        try:
            if tr.returns_rows:
                rel = self.con.sql(sql, params=args) if args else self.con.sql(sql)
                names, types = rel.columns, [str(x) for x in rel.types]
                table = rel.to_arrow_table()
                if tr.tag != "SELECT":
                    self._note_write(tr)
                return Rows(self._fields(tr, names, types), table, tr.tag)
            cur = self.con.execute(sql, args) if args else self.con.execute(sql)
            return Done(self._dml_tag(tr, cur))
        except duckdb.Error as e:
            err = pg_error(e)
            if self.canceled:
                err = E.QueryCanceled("canceling statement due to user request")
            raise _locate(err, p.stmt) from None

    def _note_write(self, tr: TR.Translated) -> None:
        if self.status == TxStatus.IN_BLOCK:
            self.writes_in_tx = True
        if tr.tag in ("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE TABLE"):
            self.written_tables.update(_table_key(s, n) for s, n, _ in tr.tables)
        if tr.tag.startswith(("CREATE", "DROP", "ALTER", "COMMENT")):
            self.server.store.bump()

    def _dml_tag(self, tr: TR.Translated, cur) -> str:
        self._note_write(tr)
        if tr.tag in ("INSERT", "UPDATE", "DELETE", "MERGE"):
            try:
                rows = cur.fetchall()      # drain: DuckDB holds the connection until then
                n = rows[0][0] if rows else 0
            except duckdb.Error:
                n = 0
            return f"INSERT 0 {n}" if tr.tag == "INSERT" else f"{tr.tag} {n}"
        return tr.tag

    def rows_tag(self, rows: Rows, n: int) -> str:
        if rows.tag == "INSERT":
            return f"INSERT 0 {n}"
        return f"{rows.tag} {n}"

    # ------------------------------------------------------------------ COPY
    def copy_columns(self, req) -> list:
        """[(name, duckdb type)] of the COPY target, in the order the data carries them."""
        schema, _, table = req.table.rpartition(".")
        stream = self._copy_stream(req)
        cols = [(c[0], c[1], None, None) for c in stream.columns] if stream is not None else \
            self._columns(fold(schema) if schema else None, fold(table))
        if not cols:
            raise E.UndefinedTable(f'relation "{fold(table)}" does not exist')
        if req.columns is None:
            return [(c[0], c[1]) for c in cols]
        by_name = {c[0].lower(): c for c in cols}
        missing = [c for c in req.columns if c.lower() not in by_name]
        if missing:
            raise E.UndefinedColumn(f'column "{missing[0]}" of relation "{fold(table)}" '
                                    "does not exist")
        return [(by_name[c.lower()][0], by_name[c.lower()][1]) for c in req.columns]

    def _copy_stream(self, req):
        schema, _, table = req.table.rpartition(".")
        return self.server.streams.get(fold(schema) if schema else None, fold(table),
                                       kinds=("stream",))

    def copy_load(self, req, cols: list, data: bytes) -> int:
        if req.csv:
            table = C.parse_csv(data, len(cols), req.delimiter, req.null, req.quote, req.escape,
                                req.header)
        else:
            table = C.parse_text(data, len(cols), req.delimiter, req.null)
        names = ", ".join(quote(c[0]) for c in cols)
        casts = ", ".join(f'CAST(c{i} AS {c[1]})' for i, c in enumerate(cols))
        self.con.register("cq_copy_in", table)
        stream = self._copy_stream(req)
        try:
            if stream is not None:
                sql = inserts.stream_rows_sql(stream, [c[0] for c in cols], "SELECT * FROM cq_copy_in")
                return inserts.deliver(self, stream, self.con.sql(sql).to_arrow_table(), "COPY")
            self.con.execute(f"INSERT INTO {req.table} ({names}) SELECT {casts} FROM cq_copy_in")
        except duckdb.Error as e:
            raise pg_error(e) from None
        finally:
            self.con.unregister("cq_copy_in")
        if self.status == TxStatus.IN_BLOCK:
            self.writes_in_tx = True
        schema, _, name = req.table.rpartition(".")
        self.written_tables.add(_table_key(schema.strip('"') or None, name.strip('"')))
        return table.num_rows

    async def copy_source(self, req) -> Rows | LiveRows:
        """The rows COPY … TO STDOUT sends: a table's or a one-time query's, or, for a query
        over streams, a continuous query's as they come (in cq.mode = snapshot: its rows at
        now), just as the same SELECT would give them."""
        if req.query:
            sql = req.query
        else:
            cols = "*" if req.columns is None else ", ".join(
                quote(c) for c in req.columns)
            sql = f"SELECT {cols} FROM {req.table}"
        p = self.prepare("", sql)
        res = await self._execute(p, []) if p.kind in (Kind.STREAM, Kind.SQL) and \
            p.returns_rows else None
        if not isinstance(res, (Rows, LiveRows)):
            raise E.FeatureNotSupported("COPY (query) TO needs a query that returns rows")
        return res

    # ------------------------------------------------------------------ transactions
    def begin(self) -> None:
        self.con.execute("BEGIN TRANSACTION")
        self.status = TxStatus.IN_BLOCK
        self.writes_in_tx = False
        self.savepoints.clear()

    def end_transaction(self, commit: bool) -> str:
        failed = self.status == TxStatus.FAILED
        try:
            self.con.execute("COMMIT" if commit and not failed else "ROLLBACK")
        except duckdb.TransactionException:
            pass
        except duckdb.Error as e:
            self.status = TxStatus.IDLE
            self.drop_portals(keep_holdable=True)
            raise pg_error(e) from None
        self.status = TxStatus.IDLE
        self.savepoints.clear()
        if failed or not commit:
            self.written_tables.clear()
        self.drop_portals(keep_holdable=commit and not failed)
        return "ROLLBACK" if failed or not commit else "COMMIT"

    def fail_transaction(self) -> None:
        if self.status == TxStatus.IN_BLOCK:
            self.status = TxStatus.FAILED

    def drop_portals(self, keep_holdable: bool) -> None:
        for name in list(self.portals):
            if not (keep_holdable and self.portals[name].holdable):
                del self.portals[name]

    def status_letter(self) -> str:
        return self.status.value


def _table_key(schema: str | None, name: str) -> str:
    """A table as stream–table joins name it: ``name``, or ``schema.name`` outside public."""
    schema = (schema or "public").lower()
    return name.lower() if schema == "public" else f"{schema}.{name.lower()}"


def _locate(err: E.PgError, stmt: Statement) -> E.PgError:
    """Point an error about a named object at where the client wrote that name."""
    m = re.search(r'"([^"]+)"', err.message)
    if err.position is None and m and err.sqlstate in ("42P01", "42703", "42883", "42704"):
        name = m.group(1).split(".")[-1]
        found = re.search(r'(?<![\w"])"?' + re.escape(name) + r'"?(?!\w)', stmt.text, re.I)
        if found:
            err.position = stmt.offset + found.start() + 1
    return err
