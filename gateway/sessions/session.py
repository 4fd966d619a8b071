"""One client session: settings, transaction state, prepared statements and portals (SQL cursors
are portals too, as in PostgreSQL), and running a statement on DuckDB or as a session command.

The connection shell (``gateway/sessions/connection.py``) turns protocol messages into calls here and
results into bytes; nothing here touches a socket. DuckDB calls run in worker threads.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from dataclasses import dataclass, field

import duckdb

from dialect.errors import PlanError
from dialect.intervals import interval_us
from dialect.planner.quality_join import session_options

from gateway.security.redaction import redacted
from gateway.archive.priming import start_primed, started_at
from gateway.archive.resume import resumed, seams
from gateway.link.live_rows import LiveRows
from gateway.pgwire import errors as E
from gateway.pgwire import types as T
from gateway.pgwire.results import Done, Rows
from gateway.security import access
from gateway.services import Services
from gateway.sessions import commands
from gateway.tables import settings as S
from gateway.sessions.activity import Activity
from gateway.sessions.columns import ColumnInfo, table_key
from gateway.syntax.command_syntax import read_command
from gateway.syntax.lexer import Statement, split
from gateway.sessions.portals import Portals, TxStatus
from gateway.sessions.prepared import Kind, Prepared
from gateway.streams import queries
from gateway.streams.function_ddl import is_python as is_python_function_ddl
from gateway.streams import statements as stream_statements
from gateway.system_views import activity, cq_views
from gateway.system_views.catalog_live import LiveCatalog
from gateway.tables.pg_catalog import CATALOG
from gateway.tables import translate as TR
from gateway.tables.statement_context import StatementContext, settle
from gateway.tables.store import pg_error

log = logging.getLogger("cqgate")
CATALOG_REFERENCE = CATALOG + "."   # DuckDB SQL that reads the emulated catalog says so
REINTERRUPT_S, REINTERRUPTS = 0.05, 100   # a cancel is repeated for up to 5 s
# duration settings -> the unit of a bare number (PostgreSQL's timeouts count milliseconds)
_JOIN_TARGET = ("cq.join_recall", "cq.join_recall_period")     # checked together when SET
_DURATIONS = {"cq.progress_interval": "s", "statement_timeout": "ms",
              "idle_in_transaction_session_timeout": "ms"}


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


def _choice(name: str, key: str, value: str) -> str:
    """One of an enum setting's words (any case), as PostgreSQL checks them."""
    word = value.strip().strip("'").lower()
    if word not in S.CHOICES[key]:
        raise E.InvalidParameterValue(f'invalid value for parameter "{name}": "{value}"',
                                      hint="Available values: " + ", ".join(S.CHOICES[key])
                                      + ".")
    return word


@dataclass
class Session:
    services: Services
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
    statement_ran: bool = False      # the worker call ran its statement (its bookkeeping follows)
    pending_status: list = field(default_factory=list)   # ParameterStatus to send
    notices: list = field(default_factory=list)
    client_closed: object = None     # () -> task that ends when the client disconnects
    peer: tuple = ()                 # (client address, port), for pg_stat_activity
    activity: Activity | None = None  # for pg_stat_activity, on the server's clock
    terminate: object = None         # () -> None: ends the connection (pg_terminate_backend)

    def __post_init__(self):
        self.con = self.services.store.connect()
        self.columns = ColumnInfo(self.con, self.services.store, self.services.streams)
        self.live = LiveCatalog(self.con, self.services, self.user)
        self.activity = self.activity or Activity(self.services.clock.now)
        self.at_commit: list = []             # owners to record when the transaction commits
        self.inflight = None                  # the last worker call (in_thread)
        self.ddl_in_tx = False                # DDL in the open transaction block
        self.timed_out = False                # statement_timeout interrupted DuckDB
        self.role_defaults: dict = {}         # ALTER ROLE … SET: what RESET returns to
        self.settings["session_authorization"] = self.user
        self.settings["is_superuser"] = "on" if self.services.roles.is_superuser(self.user) \
            else "off"
        for key in S.SERVER_BOUNDS:
            self.settings[key] = self.default_setting(key)
        self.cancel_event = asyncio.Event()
        self.written_tables: set = set()      # tables written since the last refresh
        # what the statements it runs may use of it (stream statements, security, archive)
        self.ctx = StatementContext(self.services, self.con, self.user, self.pid, self.settings,
                                    self.columns, access.RelationFacts(), self.on_commit,
                                    self.notices)

    # ------------------------------------------------------------------ helpers
    @property
    def tz(self):
        return T.zone(self.settings.get("TimeZone", "UTC"))

    async def in_thread(self, fn, *args):
        """``fn(*args)`` in a worker thread; the call is kept (``inflight``) so that closing
        the session waits for it even when the caller was cancelled."""
        self.statement_ran = False
        self.inflight = self.services.pool.submit(fn, *args)
        if self.canceled or self.timed_out:   # asked to stop before the call was made
            self._interrupt(self.inflight, REINTERRUPTS)
        try:
            return await asyncio.wrap_future(self.inflight)
        except duckdb.Error as e:       # one no step mapped (the catalog's refresh, cancelled)
            err = pg_error(e)
            raise (self._stopped(err) if isinstance(e, duckdb.InterruptException) else err) \
                from None

    def _stopped(self, err: E.PgError) -> E.PgError:
        """The error of a statement this session interrupted: why it asked (statement_timeout
        or a cancel), whichever step of the statement the interrupt reached."""
        if self.timed_out:
            return E.QueryCanceled("canceling statement due to statement timeout")
        if self.canceled:
            return E.QueryCanceled("canceling statement due to user request")
        return err

    async def settled(self, timeout: float = 3) -> None:
        """Wait (a while) for the last worker call to end: its DuckDB connection must not be
        used by two threads at once."""
        call = self.inflight
        if call is not None and not call.done():
            await asyncio.wait([asyncio.wrap_future(call)], timeout=timeout)

    def cancel(self) -> None:
        """On the event loop: the running statement is interrupted. DuckDB drops an interrupt
        that comes before its query starts (the worker may still be checking privileges),
        so the interrupt is repeated until the worker call ends."""
        self.canceled = True
        self.cancel_event.set()
        self._interrupt(self.inflight, REINTERRUPTS)

    def _interrupt(self, call, left: int) -> None:
        if call is not None and (call.done() or self.statement_ran
                                 or not (self.canceled or self.timed_out)):
            return
        try:
            self.con.interrupt()
        except duckdb.Error:
            pass
        if call is not None and left:
            asyncio.get_running_loop().call_later(REINTERRUPT_S, self._interrupt, call, left - 1)

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
        return self.services.clock.monotonic() + us / 1e6 if us > 0 else None

    def idle_in_transaction_limit(self) -> float | None:
        """Seconds the client may stay silent inside a transaction block before the session
        ends with 25P03 (idle_in_transaction_session_timeout); None: no limit."""
        if self.status == TxStatus.IDLE:
            return None
        us = interval_us(self.settings.get("idle_in_transaction_session_timeout") or "0ms")
        return us / 1e6 if us > 0 else None

    # ------------------------------------------------------------------ settings
    def default_setting(self, key: str) -> str:
        """What RESET gives ``key``: the role's default (ALTER ROLE … SET), else the server's
        value."""
        return self.role_defaults.get(key, self.server_setting(key))

    def server_setting(self, key: str) -> str:
        """The server's value of ``key``: its flag's for the bounds the flags set."""
        flag = S.SERVER_BOUNDS.get(key)
        return getattr(self.services.config, flag) if flag else S.DEFAULTS.get(key, "")

    def _bound_setting(self, name: str, key: str, value: str, for_user: str) -> str:
        """A memory bound, checked: a size, and no higher than the server's unless the
        session's role is a superuser (one role must not take the server's memory)."""
        value = value.strip().strip("'")
        try:
            size = S.size_bytes(value)
        except ValueError:
            raise E.InvalidParameterValue(f'invalid value for parameter "{name}": "{value}"',
                                          hint="Write a size such as 512kB, 16MB or 1GB.") \
                from None
        server = self.server_setting(key)
        if size > S.size_bytes(server) and not self.services.roles.is_superuser(for_user):
            raise E.InsufficientPrivilege(
                f'permission denied to set parameter "{name}" above the server\'s {server}',
                hint="A superuser may raise it, or the server's --" +
                     S.SERVER_BOUNDS[key].replace("_", "-") + " flag.")
        return value

    def set_setting(self, name: str, value: str, *, local: bool = False) -> None:
        key, value = self.checked_setting(name, value)
        self.settings[key] = value
        if key in S.REPORTED:
            self.pending_status.append((key, value))

    def checked_setting(self, name: str, value: str,
                        for_user: str | None = None) -> tuple[str, str]:
        """(canonical name, value) of a SET this session (or, for ALTER ROLE … SET, the
        role ``for_user``'s sessions) may make, or its error."""
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
        if key in S.CHOICES:
            value = _choice(name, key, value)
        if key in _DURATIONS:
            value = _interval_setting(name, value, bare_unit=_DURATIONS[key])
        if key in S.SERVER_BOUNDS:
            value = self._bound_setting(name, key, value, for_user or self.user)
        if key in _JOIN_TARGET:
            value = value.strip().strip("'")
            try:
                session_options(*(value if k == key else self.settings.get(k, S.DEFAULTS[k])
                                  for k in _JOIN_TARGET))
            except PlanError as e:
                raise E.InvalidParameterValue(str(e), hint=e.hint) from None
        return key, value

    def apply_role_settings(self, config: dict) -> None:
        """The role's ALTER ROLE … SET defaults, before the client's startup options (which
        win, as in PostgreSQL); one that no longer holds is skipped, as a warning would."""
        for key, value in config.items():
            try:
                self.set_setting(key, value)
                self.role_defaults[key] = self.settings[key]
            except E.PgError as e:
                log.warning("role %s: default %s = %s not applied: %s", self.user, key,
                            value, e.message)

    def apply_startup_options(self, params: dict) -> None:
        for key, value in params.items():
            if key in ("user", "database", "options", "replication"):
                continue
            if S.is_known(key):
                self.set_setting(key, value)
        opts = params.get("options", "")
        for m in re.finditer(r"(?:-c\s*|--)([A-Za-z0-9_.]+)=((?:\\ |[^ ])*)", opts):
            self.set_setting(m.group(1).replace("-", "_"), m.group(2).replace("\\ ", " "))

    # ------------------------------------------------------------------ prepare / describe
    def prepare(self, name: str, sql: str, client_oids: tuple = ()) -> Prepared:
        stmts = split(sql)
        if len(stmts) > 1:
            raise E.SyntaxError_("cannot insert multiple commands into a prepared statement")
        if not stmts:
            return Prepared(name, None, list(client_oids), Kind.EMPTY)
        return self.prepare_statement(name, stmts[0], client_oids)

    def prepare_statement(self, name: str, stmt: Statement, client_oids: tuple = (), *,
                          may_be_command: bool = True) -> Prepared:
        """``stmt`` prepared: a session command (unless ``may_be_command`` is False: a
        DECLARE's query, which its DECLARE's tokens already said is none), or for the
        translator."""
        cmd = read_command(stmt) if may_be_command else None
        oids = list(client_oids) + [0] * max(0, stmt.max_param - len(client_oids))
        if cmd is not None:
            return Prepared(name, stmt, oids, Kind.COMMAND, command=cmd)
        tr = self.translate(stmt)
        for idx, oid in tr.params.items():
            if 0 < idx <= len(oids) and not oids[idx - 1]:
                oids[idx - 1] = oid
        oids = [o or 25 for o in oids]
        if not tr.stream and is_python_function_ddl(tr.ast, self.services.store.functions):
            tr = dataclasses.replace(tr, stream=True, source=tr.ast)
        if tr.stream or any(self.services.streams.get(schema, name) is not None
                            for schema, name, _ in tr.tables):
            return Prepared(name, stmt, oids, Kind.STREAM, translated=tr)
        try:
            needs = access.needs(tr.ast)
        except E.PgError as e:
            raise _placed(e, stmt) from None
        return Prepared(name, stmt, oids, Kind.SQL, translated=tr, needs=needs)

    def translate(self, stmt: Statement) -> TR.Translated:
        try:
            tr = TR.translate_cached(stmt.text)
        except E.PgError as e:
            if e.position:
                e.position += stmt.offset
            raise
        if stmt.max_param:
            params = TR.infer_params(tr.source,
                                     lambda a, c: self.columns.type_oid(tr.tables, a, c))
            tr = TR.Translated(**{**tr.__dict__, "params": params})
        return tr

    async def describe_statement(self, p: Prepared) -> list | None:
        """Fields of a prepared statement's result (None = no rows), without running it."""
        return await self.DESCRIBE[p.kind](self, p)

    async def _describe_stream(self, p: Prepared) -> list | None:
        try:
            return await self.in_thread(stream_statements.describe, self.ctx, p.translated.source)
        except E.PgError as e:
            raise _placed(e, p.stmt) from None

    async def _describe_command(self, p: Prepared) -> list | None:
        return commands.describe_command(self, p)

    async def _describe_table_sql(self, p: Prepared) -> list | None:
        if not p.returns_rows:
            return None
        if p.needs.files:
            return await self.in_thread(self._describe_with_files, p)
        if CATALOG_REFERENCE in p.translated.duck_sql.lower():
            await self.in_thread(self.live.refresh)
        return await self.in_thread(self.columns.describe, p.translated, p.param_oids,
                                    self.ctx.bind_session_values)

    def _describe_with_files(self, p: Prepared) -> list:
        """A statement that reads server files, described from the files' rows (the role
        must be one that may read them)."""
        access.check(self.ctx, p.needs)
        with self.ctx.server_files():
            ast = self.services.files.substitute(self.ctx, p.translated.ast)
            return self.columns.describe(dataclasses.replace(p.translated, ast=ast),
                                         p.param_oids, self.ctx.bind_session_values)

    async def _describe_empty(self, p: Prepared) -> None:
        return None

    DESCRIBE = {Kind.EMPTY: _describe_empty, Kind.STREAM: _describe_stream,
                Kind.COMMAND: _describe_command, Kind.SQL: _describe_table_sql}

    # ------------------------------------------------------------------ execution
    async def execute(self, p: Prepared, params: list) -> Rows | Done:
        self.activity.started(redacted(p.stmt.text) if p.stmt else "", self._waits_on_stream(p))
        try:
            return await self.run_prepared(p, params)
        finally:
            self.activity.finished("idle" if self.status == TxStatus.IDLE else
                                   "idle in transaction" if self.status == TxStatus.IN_BLOCK
                                   else "idle in transaction (aborted)")
            if self.written_tables and self.status == TxStatus.IDLE:
                await self._tables_changed()

    def _waits_on_stream(self, p: Prepared) -> bool:
        """Whether running ``p`` waits for a continuous query's rows."""
        if p.kind is Kind.STREAM:
            return True
        cmd = p.command
        portal = self.portals.get(getattr(cmd, "cursor", None) or "") if cmd else None
        return portal is not None and isinstance(portal.result, LiveRows)

    async def _tables_changed(self) -> None:
        """Committed writes to tables that running stream–table joins read: the back end
        gets their new contents, which hold from its current watermark on."""
        link = self.services.backend
        names = [n for n in self.written_tables if n in link.tables_in_use]
        self.written_tables.clear()
        for name in names:
            table = await self.in_thread(self.ctx.table_contents, name)
            await link.send_table(name, table)

    async def run_prepared(self, p: Prepared, params: list) -> Rows | Done:
        if p.kind is Kind.EMPTY:
            return Done("")
        if self.status == TxStatus.FAILED and not p.allowed_when_failed:
            raise E.InFailedTransaction(E.IN_FAILED_TRANSACTION_MESSAGE)
        self.canceled = False
        self.cancel_event.clear()
        return await self.RUN[p.kind](self, p, params)

    async def _run_stream(self, p: Prepared, params: list):
        try:
            res = await settle(await self.in_thread(stream_statements.run, self.ctx,
                                                    p.translated.source, params),
                               self.in_thread)
        except E.PgError as e:
            raise _placed(e, p.stmt) from None
        if not isinstance(res, queries.Planned):
            return res
        if res.spark is not None:
            return await self.services.spark_streams.open(
                res.plan, res.spark, res.fields, res.schema, p.stmt.text, self.pid,
                p.cursor or p.name, self.services.pool,
                label=f"cursor {p.cursor}" if p.cursor else "query",
                bounds=self.ctx.result_bounds())

        link, plan, resumption = self.services.backend, res.plan, None
        resume_from = res.delivery.resume_from
        if res.resumable is not None or res.delivery.progress:
            plan, resumption = resumed(self.services, res)

        async def start(history=None, seam=None):
            # (called while stream data stands still: its reads that start with it begin here)
            run = plan if history is None or resume_from is not None else started_at(
                plan, {s: self.services.ingest.seam(s) for s in history})
            live = await link.open(
                run, res.fields, res.schema, p.stmt.text, self.pid, p.cursor or p.name,
                res.tables, history, seam, label=f"cursor {p.cursor}" if p.cursor else "query",
                bounds=self.ctx.result_bounds(), resumption=resumption,
                resume=resume_from is not None,
                upto=seams(self.services, res.resumable) if resume_from is not None else None)
            live.through = res.through  # the derived streams it reads through their query
            return live
        if res.history:        # windows reaching into an archive start primed
            return await start_primed(self.services, list(res.history), start, resume_from)
        return await start()

    async def _run_table_sql(self, p: Prepared, params: list):
        views = {}
        if cq_views.wanted(p.translated.catalog_reads):
            views.update(await cq_views.gather(self.services, self.user))
        if activity.wanted(p.translated.catalog_reads):
            views.update(activity.tables(self.services, self.user))
        deadline = self.statement_deadline()
        timer = None if deadline is None else asyncio.get_running_loop().call_later(
            max(0.0, deadline - self.services.clock.monotonic()), self._time_out)
        try:
            return await self.in_thread(self._checked_run, p, params, views)
        finally:
            if timer is not None:
                timer.cancel()
            self.timed_out = False

    def _time_out(self) -> None:
        """statement_timeout reached while DuckDB runs the statement: interrupt it (57014)."""
        self.timed_out = True
        self._interrupt(self.inflight, REINTERRUPTS)

    def _checked_run(self, p: Prepared, params: list, views: dict) -> Rows | Done:
        """In a worker thread: the privileges checked, the system views the statement reads
        registered, the statement run, and what it made given its owner."""
        try:
            fresh = [] if p.needs.nothing else access.check(self.ctx, p.needs)
        except E.PgError as e:
            raise _locate(e, p.stmt) from None
        if views:
            self.live.refresh()
            self.live.register(views)
        done = self._run_sql(p, params)
        self.statement_ran = True       # what follows is bookkeeping: no interrupt reaches it
        if fresh or p.needs.drops or p.needs.renames:
            access.record(self.ctx, p.needs, fresh)
        return done

    RUN = {Kind.STREAM: _run_stream, Kind.COMMAND: commands.run_command,
           Kind.SQL: _run_table_sql}

    def _run_sql(self, p: Prepared, params: list) -> Rows | Done:
        tr = p.translated
        sql = tr.duck_sql
        if CATALOG_REFERENCE in sql.lower():
            self.live.refresh()
        with self.ctx.server_files():
            if p.needs.files or tr.has_set_config or "getvariable('cq_" in sql.lower():
                ast = tr.ast
                if p.needs.files:    # a role that may read server files: access.check said so
                    ast = self.services.files.substitute(self.ctx, ast)
                if tr.has_set_config:
                    ast, changes = TR.set_config_ast(ast, params)
                    for name, value in changes:
                        self.set_setting(name, value)
                sql = self.ctx.bind_session_values(ast)
            return self._run_duckdb(p, sql, params)

    def _run_duckdb(self, p: Prepared, sql: str, params: list) -> Rows | Done:
        tr = p.translated
        args = params or None
        try:
            if tr.returns_rows:
                rel = self.con.sql(sql, params=args) if args else self.con.sql(sql)
                names, types = rel.columns, [str(x) for x in rel.types]
                table = rel.to_arrow_table()
                if tr.tag != "SELECT":
                    self._note_write(tr)
                return Rows(self.columns.fields(tr, names, types), table, tr.tag)
            cur = self.con.execute(sql, args) if args else self.con.execute(sql)
            return Done(self._dml_tag(tr, cur))
        except (duckdb.Error, UnicodeDecodeError) as e:
            # DuckDB's message may quote a value's bytes that are not UTF-8 (a bytea cast to
            # uuid): its Python binding then fails to decode the message itself
            err = pg_error(e) if isinstance(e, duckdb.Error) else E.PgError(
                'invalid byte sequence for encoding "UTF8"', sqlstate="22021")
            raise _locate(self._stopped(err), p.stmt) from None

    def _note_write(self, tr: TR.Translated) -> None:
        if self.status == TxStatus.IN_BLOCK:
            self.writes_in_tx = True
        if tr.tag in ("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE TABLE"):
            self.written_tables.update(table_key(s, n) for s, n, _ in tr.tables)
        if tr.tag.startswith(("CREATE", "DROP", "ALTER", "COMMENT")):
            self.services.store.bump()
            self.ddl_in_tx = self.status != TxStatus.IDLE

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
            self.at_commit.clear()
            self.live.forget()
            self.drop_portals(keep_holdable=True)
            raise pg_error(e) from None
        self.status = TxStatus.IDLE
        self.savepoints.clear()
        done, self.at_commit = self.at_commit, []
        if commit and not failed and self.ddl_in_tx:
            self.services.store.bump()     # what it created shows to others from now on
        self.ddl_in_tx = False
        if failed or not commit:
            self.written_tables.clear()
            self.live.forget()         # registrations made in the transaction are undone
        else:
            for apply in done:
                apply()
        self.drop_portals(keep_holdable=commit and not failed)
        return "ROLLBACK" if failed or not commit else "COMMIT"

    def on_commit(self, apply) -> None:
        """Run ``apply`` now, or at COMMIT inside a transaction block (ROLLBACK drops it)."""
        if self.status == TxStatus.IDLE:
            apply()
        else:
            self.at_commit.append(apply)

    def fail_transaction(self) -> None:
        if self.status == TxStatus.IN_BLOCK:
            self.status = TxStatus.FAILED

    def drop_portals(self, keep_holdable: bool) -> None:
        for name in list(self.portals):
            if not (keep_holdable and self.portals[name].holdable):
                del self.portals[name]

    def status_letter(self) -> str:
        return self.status.value


def _placed(err: E.PgError, stmt: Statement) -> E.PgError:
    """An error from planning a statement, its position (in the statement) moved to where the
    statement is in the client's query string."""
    if err.position is not None:
        err.position += stmt.offset
    return err


def _locate(err: E.PgError, stmt: Statement) -> E.PgError:
    """Point an error about a named object at where the client wrote that name."""
    m = re.search(r'"([^"]+)"', err.message)
    if err.position is None and m and err.sqlstate in ("42P01", "42703", "42883", "42704"):
        name = m.group(1).split(".")[-1]
        found = re.search(r'(?<![\w"])"?' + re.escape(name) + r'"?(?!\w)', stmt.text, re.I)
        if found:
            err.position = stmt.offset + found.start() + 1
    return err
