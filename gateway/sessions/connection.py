"""The asyncio shell around one client connection: reads the socket into the sans-I/O protocol
core (``gateway/pgwire/protocol.py``), starts TLS and opens the session when the core asks,
runs each statement event through a table, and writes what the core queues. A bad connection
ends only itself.
"""
from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections import deque

from gateway.sessions import copy_data
from gateway.tables import settings as S
from gateway.syntax.command_syntax import CopyRequest
from gateway.pgwire import copy_binary
from gateway.pgwire.copy_format import (ENCODED, binary_fast, copy_header, copy_messages,
                                        encoded_bytes)
from gateway.pgwire import messages as M
from gateway.pgwire import types as T
from gateway.pgwire.errors import (AdminShutdown, PgError, DuplicatePreparedStatement,
                                   DuplicateCursor, InvalidSqlStatementName, InvalidCursorName,
                                   IdleInTransactionTimeout, QueryCanceled,
                                   TooManyConnections)
from gateway.pgwire.protocol import (Authenticated, CopyInFailed, Fatal, ServerProtocol,
                                     StartTLS, State)
from gateway.pgwire.results import Done, Rows
from gateway.link.live_rows import LiveRows
from gateway.pgwire.row_encoding import encode_rows, resolve_formats, row_description
from gateway.sessions.portals import Portal, TxStatus
from gateway.sessions.session import Session
from gateway.syntax.lexer import split
from gateway.tables.statement_context import settle

log = logging.getLogger("cqgate")
FLUSH_AT = 256 * 1024
ENCODE_BATCH = 16384     # rows encoded per step: large enough to amortise the Arrow kernels
# rows from which a continuous query's batch is encoded in a thread: below, at once (under
# ~7 ms); in a thread each return of the GIL waits on the busy loop (15-25 ms for 2,600 rows)
THREAD_ROWS = 8192


class Closed(Exception):
    """The client went away or must be disconnected."""


class Connection:
    def __init__(self, server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server              # the process: TLS, roles, pids, cancel
        self.services = server.services   # what the session is given
        self.reader = reader
        self.writer = writer
        cfg = self.services.config
        self.core = ServerProtocol(cfg.auth, server.roles,
                                   tls_available=server.ssl_context is not None,
                                   tls=writer.get_extra_info("sslcontext") is not None,
                                   require_tls=cfg.require_tls,
                                   max_message=cfg.max_message_bytes)
        self.events: deque = deque()
        self.session: Session | None = None
        self._watcher: asyncio.Task | None = None
        self._task: asyncio.Task | None = None
        self._terminated = False          # ended by pg_terminate_backend
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    # ------------------------------------------------------------------ I/O
    async def next_event(self):
        """The core's next event, reading the socket when it has none. Before the session
        exists every answer goes out before waiting, since the client waits for it."""
        while not self.events:
            self.events.extend(self.core.events())
            if self.events:
                break
            await self._stop_watching()          # one reader at a time (COPY inside a FETCH)
            if self.session is None:
                await self.flush()
            data = await self._read_between_statements()
            if not data:
                raise Closed()
            self.events.extend(self.core.receive_data(data))
        event = self.events.popleft()
        if isinstance(event, Fatal):
            await self._flush_quietly()
            raise Closed()
        return event

    async def _read_between_statements(self) -> bytes:
        """The client's next bytes; a client silent longer than
        idle_in_transaction_session_timeout inside a transaction block loses its session."""
        limit = self.session.idle_in_transaction_limit() if self.session else None
        if limit is None:
            return await self.reader.read(65536)
        try:
            return await asyncio.wait_for(self.reader.read(65536), limit)
        except asyncio.TimeoutError:
            log.info("pid=%d idle in a transaction too long; session ended", self.session.pid)
            raise IdleInTransactionTimeout(
                "terminating connection due to idle-in-transaction timeout") from None

    def send(self, data: bytes) -> None:
        self.core.send(data)

    async def flush(self) -> None:
        data = self.core.data_to_send()
        if data:
            self.writer.write(data)
        await self.writer.drain()

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except (ConnectionError, OSError):
            pass

    async def maybe_flush(self) -> None:
        if self.core.buffered >= FLUSH_AT:
            await self.flush()

    def client_closed(self) -> asyncio.Task:
        """A task that ends when the client disconnects, reading (and keeping) whatever it
        sends meanwhile; a handler that waits for a continuous query's rows waits on it too.
        Stopped once the handler is done, so only one reader is ever active."""
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self._watch())
        return self._watcher

    async def _watch(self) -> None:
        while True:
            data = await self.reader.read(65536)
            if not data:
                return
            # a statement is with the shell, so the core only keeps the bytes for later
            self.events.extend(self.core.receive_data(data))

    async def _stop_watching(self) -> None:
        w, self._watcher = self._watcher, None
        if w is not None and not w.done():
            w.cancel()
            try:
                await w
            except asyncio.CancelledError:
                pass
        elif w is not None and w.exception() is None:
            raise Closed()     # the client went away while we waited

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        self._task = asyncio.current_task()
        try:
            if await self.startup():
                await self.serve()
        except Closed:
            pass
        except asyncio.CancelledError:
            if not self._terminated:
                raise
            await self._fatal(AdminShutdown("terminating connection due to administrator "
                                            "command"))
        except PgError as e:
            await self._fatal(e)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        except Exception as e:  # noqa: BLE001 - a bug must end only this connection
            log.exception("internal error on connection from %s", self.peer)
            await self._fatal(PgError(f"internal error: {e}"))
        finally:
            await self.cleanup()

    def terminate(self) -> None:
        """pg_terminate_backend: the running statement is interrupted, the client gets
        57P01 and the connection ends, whatever it was waiting for."""
        if self.session is not None:
            self.session.cancel()
        if self._task is not None and not self._task.done():
            self._terminated = True
            self._task.cancel()

    async def _fatal(self, e: PgError) -> None:
        self.core.fatal(e)
        await self._flush_quietly()

    async def cleanup(self) -> None:
        if self.session is not None:
            self.services.sessions.pop(self.session.pid, None)
            log.info("client disconnected: pid=%d user=%s", self.session.pid, self.session.user)
            s = self.session
            self.session = None
            s.portals.clear()          # ends this client's continuous queries now
            await s.settled()          # a statement interrupted by a cancel or terminate
            await asyncio.get_running_loop().run_in_executor(self.services.pool, s.close)
        try:
            self.writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass

    async def startup(self) -> bool:
        """SSL/GSSENC answers and authentication happen in the core; this starts TLS, passes a
        cancel on and opens the session. False: the connection has nothing more to do."""
        while self.session is None:
            event = await self.next_event()
            await self.STARTUP[type(event)](self, event)
            if self.core.state is State.CLOSED:
                return False
        return True

    async def _start_tls(self, event: StartTLS) -> None:
        await self.flush()
        await self.writer.start_tls(self.server.ssl_context)
        self.core.tls_started()

    async def _cancel(self, event: M.CancelRequest) -> None:
        self.server.cancel(event.pid, event.secret)

    async def _start_session(self, event: Authenticated) -> None:
        user, params = event.user, event.params
        if len(self.services.sessions) >= self.services.config.max_connections:
            raise TooManyConnections("sorry, too many clients already")
        pid = self.server.next_pid()
        secret = random.getrandbits(31)
        loop = asyncio.get_running_loop()
        self.session = await loop.run_in_executor(
            self.services.pool, lambda: Session(self.services, pid, secret, user=user,
                                                database=params.get("database") or user))
        role = self.services.roles.get(user)
        if role is not None:
            self.session.apply_role_settings(role.config)
        self.session.apply_startup_options(params)
        self.session.client_closed = self.client_closed
        self.session.terminate = self.terminate
        peer = self.writer.get_extra_info("peername")
        self.session.peer = tuple(peer[:2]) if isinstance(peer, tuple) else ()
        self.session.pending_status.clear()
        self.services.sessions[pid] = self.session
        self.core.session_started(pid, secret, [(name, self.session.settings.get(name, ""))
                                                for name in S.REPORTED])
        await self.flush()
        log.info("client connected: pid=%d user=%s database=%s application=%s from %s", pid,
                 user, params.get("database") or user, params.get("application_name", ""),
                 self.peer)

    STARTUP = {StartTLS: _start_tls, M.CancelRequest: _cancel, Authenticated: _start_session}

    async def serve(self) -> None:
        while True:
            event = await self.next_event()
            if isinstance(event, M.Terminate):
                return
            if log.isEnabledFor(logging.DEBUG):
                log.debug("pid=%d <- %r", self.session.pid, event)
            try:
                try:
                    await self.HANDLERS[type(event)](self, event)
                finally:
                    await self._stop_watching()
            except PgError as e:
                if e.severity == "FATAL":
                    raise
                self.send_error(e)
                if not isinstance(event, M.Query):
                    await self.flush()    # asyncpg waits for the error after a Flush
            except (Closed, ConnectionError, OSError, asyncio.CancelledError):
                raise
            except Exception as e:  # noqa: BLE001 - report a bug, keep the session
                log.exception("internal error in %s", type(event).__name__)
                self.send_error(PgError(f"internal error: {e}"))
                if isinstance(event, M.Query) and self.core.ready_owed:
                    self.ready()
                    await self.flush()
            self.core.done()
            await self.maybe_flush()

    # ------------------------------------------------------------------ helpers
    def send_error(self, e: PgError) -> None:
        self.core.fail(e)
        if self.session is not None:
            self.session.fail_transaction()

    def send_session_news(self) -> None:
        s = self.session
        for severity, sqlstate, message in s.notices:
            self.send(M.notice_response(message, severity=severity, sqlstate=sqlstate))
        s.notices.clear()
        for name, value in s.pending_status:
            self.send(M.parameter_status(name, value))
        s.pending_status.clear()

    def ready(self) -> None:
        self.core.ready(self.session.status_letter())

    # ------------------------------------------------------------------ simple query
    async def on_query(self, msg: M.Query) -> None:
        s = self.session
        try:
            stmts = split(msg.sql)
        except PgError as e:
            self.send_error(e)
            self.ready()
            await self.flush()
            return
        if not stmts:
            self.send(M.empty_query_response())
        for stmt in stmts:
            try:
                p = s.prepare_statement("", stmt)
                res = await s.execute(p, [])
                await self.emit(res, [], 0, describe=True)
            except PgError as e:
                self.send_session_news()
                self.send_error(e)
                break
            finally:
                self.send_session_news()
            await self.maybe_flush()
        if s.status == TxStatus.IDLE:
            s.drop_portals(keep_holdable=True)
        self.ready()
        await self.flush()

    async def emit(self, res, formats: tuple, max_rows: int, *, describe: bool,
                   portal: Portal | None = None) -> None:
        emit = next(self.EMIT[t] for t in type(res).__mro__ if t in self.EMIT)
        await emit(self, res, formats, max_rows, describe=describe, portal=portal)

    async def _emit_copy(self, req: CopyRequest, formats, max_rows, *, describe, portal):
        await self.COPY[req.direction](self, req)

    async def _emit_done(self, res: Done, formats, max_rows, *, describe, portal):
        self.send(M.command_complete(res.tag) if res.tag else M.empty_query_response())

    async def _emit_rows(self, res: Rows, formats: tuple, max_rows: int, *, describe: bool,
                         portal: Portal | None) -> None:
        s = self.session
        fmts = resolve_formats(formats, len(res.fields))
        if describe:
            self.send(row_description(res.fields, fmts))
        sent = 0
        while True:
            chunk = max_rows - sent if max_rows > 0 else ENCODE_BATCH
            if chunk <= 0:
                break
            n = min(chunk, ENCODE_BATCH, res.remaining)
            if n <= 0:
                break
            self.send(await self._encoded(lambda t: encode_rows(Rows(res.fields, t), 0, fmts,
                                                                s.tz)[0],
                                          res.table.slice(res.pos, n)))
            res.pos += n
            sent += n
            await self.maybe_flush()
            if s.canceled:
                raise QueryCanceled("canceling statement due to user request")
        self.core.end_execute(s.rows_tag(res, sent), max_rows=max_rows, more=res.remaining > 0)

    async def _emit_live(self, live: LiveRows, formats: tuple, max_rows: int, *,
                         describe: bool, portal: Portal | None) -> None:
        """Rows of a continuous query as they come: each arrival is sent (and flushed) at
        once. Stops at ``max_rows`` (PortalSuspended), at the query's end, on cancel (57014)
        or when the client disconnects; without a portal the query ends with this
        statement."""
        s = self.session
        fmts = resolve_formats(formats, len(live.fields))
        if describe:
            self.send(row_description(live.fields, fmts))

        def encode(table):
            return encode_rows(Rows(live.fields, table), 0, fmts, s.tz)[0]

        try:
            sent = await self._send_live(live, encode, max_rows)
        finally:
            if portal is None:
                live.close()
        self.core.end_execute(f"SELECT {sent}", max_rows=max_rows, more=not live.exhausted)

    EMIT = {CopyRequest: _emit_copy, Done: _emit_done, Rows: _emit_rows, LiveRows: _emit_live}

    # ------------------------------------------------------------------ extended query
    async def on_parse(self, msg: M.Parse) -> None:
        s = self.session
        if msg.name and msg.name in s.statements:
            raise DuplicatePreparedStatement(f'prepared statement "{msg.name}" already exists')
        s.statements[msg.name] = s.prepare(msg.name, msg.sql, msg.param_oids)
        self.send(M.parse_complete())

    async def on_bind(self, msg: M.Bind) -> None:
        s = self.session
        p = s.statements.get(msg.statement)
        if p is None:
            raise InvalidSqlStatementName(f'prepared statement "{msg.statement}" does not exist')
        if msg.portal and msg.portal in s.portals:
            raise DuplicateCursor(f'portal "{msg.portal}" already exists')
        if len(msg.params) != len(p.param_oids):
            raise PgError(f"bind message supplies {len(msg.params)} parameters, but prepared "
                          f'statement "{msg.statement}" requires {len(p.param_oids)}',
                          sqlstate="08P01")
        fmts = resolve_formats(msg.param_formats, len(msg.params))
        values = [T.decode_param(raw, oid, f)
                  for raw, oid, f in zip(msg.params, p.param_oids, fmts)]
        s.portals[msg.portal] = Portal(msg.portal, p, values, msg.result_formats)
        self.send(M.bind_complete())

    async def on_describe(self, msg: M.Describe) -> None:
        s = self.session
        if msg.kind == "S":
            p = s.statements.get(msg.name)
            if p is None:
                raise InvalidSqlStatementName(f'prepared statement "{msg.name}" does not exist')
            fields = await s.describe_statement(p)
            self.send(M.parameter_description(p.param_oids))
            self.send(row_description(fields, [0] * len(fields)) if fields else M.no_data())
            return
        portal = s.portals.get(msg.name)
        if portal is None:
            raise InvalidCursorName(f'portal "{msg.name}" does not exist')
        if portal.result is None and portal.prepared.returns_rows:
            portal.result = await s.execute(portal.prepared, portal.params)
        if isinstance(portal.result, (Rows, LiveRows)):
            fmts = resolve_formats(portal.result_formats, len(portal.result.fields))
            self.send(row_description(portal.result.fields, fmts))
        else:
            self.send(M.no_data())

    async def on_execute(self, msg: M.Execute) -> None:
        s = self.session
        portal = s.portals.get(msg.portal)
        if portal is None:
            raise InvalidCursorName(f'portal "{msg.portal}" does not exist')
        try:
            if portal.result is None:
                portal.result = await s.execute(portal.prepared, portal.params)
                if isinstance(portal.result, CopyRequest):
                    req, portal.result = portal.result, Done("")
                    await self.emit(req, (), 0, describe=False)
                    return
            await self.emit(portal.result, portal.result_formats, msg.max_rows, describe=False,
                            portal=portal)
        finally:
            self.send_session_news()

    async def on_close(self, msg: M.Close) -> None:
        s = self.session
        (s.statements if msg.kind == "S" else s.portals).pop(msg.name, None)
        self.send(M.close_complete())

    async def on_sync(self, msg: M.Sync) -> None:
        s = self.session
        if s.status == TxStatus.IDLE:
            s.drop_portals(keep_holdable=True)
        self.send_session_news()
        self.ready()
        await self.flush()

    async def on_flush(self, msg: M.Flush) -> None:
        await self.flush()

    HANDLERS = {
        M.Query: on_query, M.Parse: on_parse, M.Bind: on_bind, M.Describe: on_describe,
        M.Execute: on_execute, M.Close: on_close, M.Sync: on_sync, M.Flush: on_flush,
    }

    # ------------------------------------------------------------------ COPY
    async def copy_in(self, req: CopyRequest) -> None:
        s = self.session
        cols = await s.in_thread(copy_data.columns, s, req)
        self.core.start_copy_in(len(cols), req.format == "binary")
        await self.flush()
        end = await self.next_event()           # the core collects the CopyData meanwhile
        if isinstance(end, CopyInFailed):
            raise end.error
        n = await settle(await s.in_thread(copy_data.load, s, req, cols, end.data), s.in_thread)
        self.send(M.command_complete(f"COPY {n}"))

    async def copy_out(self, req: CopyRequest) -> None:
        """COPY … TO STDOUT: CopyData messages, one a row. A continuous query's rows go out as
        they come, until its LIMIT, an error, a cancel or the client's going (as
        Materialize's COPY (SUBSCRIBE …) TO STDOUT)."""
        s = self.session
        res = await copy_data.source(s, req)
        try:
            binary = copy_binary.BinaryRows(res.fields) if req.format == "binary" else None
        except PgError:
            if isinstance(res, LiveRows):
                res.close()
            raise

        oids = [f.type_oid for f in res.fields]

        def encode(table):
            if table.schema == ENCODED:               # encoded by the back end
                data = encoded_bytes(table)
                return binary.forward(data) if binary is not None else data
            if binary is not None:
                return binary.rows(table)
            return copy_messages(oids, table, s.tz, req.csv, req.delimiter, req.null,
                                 req.quote)

        # a continuous query's rows are encoded where they are produced (binary ones when
        # every column's binary form is one Arrow operation)
        if isinstance(res, LiveRows) and oids and \
                (binary is None or res.schema is not None and binary_fast(oids, res.schema)):
            res.encode_at_source(oids, getattr(s.tz, "key", "UTC"), req.csv, req.delimiter,
                                 req.null, req.quote, binary=binary is not None)

        self.core.start_copy_out(len(res.fields), binary is not None)
        if req.csv and req.header:
            self.send(copy_header(res.fields, req.delimiter, req.quote))
        if isinstance(res, LiveRows):
            try:
                n = await self._send_live(res, encode)
            finally:
                res.close()
        else:
            n = res.table.num_rows
            for i in range(0, n, ENCODE_BATCH):
                self.send(await s.in_thread(encode, res.table.slice(i, ENCODE_BATCH)))
                await self.maybe_flush()
        if binary is not None:
            self.send(binary.end())
        self.core.end_copy_out()
        self.send(M.command_complete(f"COPY {n}"))

    COPY = {"in": copy_in, "out": copy_out}

    async def _encoded(self, encode, table):
        """``encode(table)``; a big table in a worker thread (Arrow lets go of the GIL), so
        the loop goes on taking stream data and serving clients meanwhile, a small one at
        once (the hand-over would only add latency)."""
        if table.num_rows < THREAD_ROWS or table.schema == ENCODED:
            return encode(table)
        return await asyncio.get_running_loop().run_in_executor(self.services.pool, encode,
                                                                table)

    async def _send_live(self, live: LiveRows, encode, max_rows: int = 0) -> int:
        """A continuous query's rows, made messages by ``encode``, sent and flushed as they
        come, until ``max_rows`` (0: no limit) or the query's end; returns how many went.
        Waiting ends with 57014 on a cancel or statement_timeout, and when the client goes."""
        s = self.session
        sent = 0
        deadline = s.statement_deadline()
        while max_rows <= 0 or sent < max_rows:
            want = None if max_rows <= 0 else max_rows - sent
            if live.n_pending == 0:
                await self.flush()            # what is already said goes out before waiting
            table = await live.take(want, None, s.cancel_event, self.client_closed(),
                                    notices=True, statement_deadline=deadline)
            s.notices.extend(live.take_notices())
            self.send_session_news()
            for i in range(0, table.num_rows, ENCODE_BATCH):
                self.send(await self._encoded(encode, table.slice(i, ENCODE_BATCH)))
                await self.maybe_flush()
            sent += table.num_rows
            await self.flush()
            if live.exhausted:
                break
        return sent
