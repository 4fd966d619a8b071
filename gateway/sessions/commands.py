"""Statements the gateway answers itself rather than DuckDB: transaction control, SET / SHOW /
RESET, SQL cursors (DECLARE / FETCH / MOVE / CLOSE), DEALLOCATE, DISCARD, LISTEN and COPY.

A statement is read into a typed command once, when it is prepared (``command_syntax``);
``run_command`` dispatches through the ``HANDLERS`` table, keyed by the command's type. COPY
returns its ``CopyRequest``, which the connection carries out, because it reads or writes
CopyData messages.
"""
from __future__ import annotations

import pyarrow as pa

from gateway.link.live_rows import LiveRows
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done, Field, Rows
from gateway.syntax import command_syntax as C
from gateway.security import server_files
from gateway.sessions import copy_data, role_commands
from gateway.tables import settings as S
from gateway.tables.statement_context import settle
from gateway.sessions.cursors import close_cursor, declare, fetch
from gateway.sessions.portals import TxStatus
from gateway.sessions.transactions import begin, commit, release, rollback, rollback_to, savepoint


async def _set(session, p, params):
    cmd = p.command
    if cmd.name is None:
        return Done("SET")
    value = cmd.value
    if value is None or (cmd.name == "TimeZone" and value.lower() == "local"):
        value = session.default_setting(S.canonical(cmd.name))
    session.set_setting(cmd.name, value)
    return Done("SET")


def _reset_all(session) -> None:
    """RESET ALL: every setting a session may change back to its default."""
    for k in S.DEFAULTS:
        v = session.default_setting(k)
        if k not in S.READ_ONLY and k != "session_authorization" and session.settings.get(k) != v:
            session.set_setting(k, v)


async def _reset(session, p, params):
    name = p.command.name
    if name is None:
        _reset_all(session)
        return Done("RESET")
    session.set_setting(name, session.default_setting(S.canonical(name)))
    return Done("RESET")


def _show_fields(p) -> list:
    name = p.command.name
    if name is None:
        return [Field("name", 25), Field("setting", 25), Field("description", 25)]
    return [Field(S.canonical(name).lower() if S.canonical(name) in S.DEFAULTS
                  else name.lower(), 25)]


async def _show(session, p, params):
    name = p.command.name
    fields = _show_fields(p)
    if name is None:
        items = sorted(session.settings.items(), key=lambda kv: kv[0].lower())
        table = pa.table({"name": [k for k, _ in items], "setting": [v for _, v in items],
                          "description": [""] * len(items)})
        return Rows(fields, table, "SHOW")
    key = S.canonical(name)
    if key not in session.settings:
        raise E.UndefinedParameter(f'unrecognized configuration parameter "{name}"')
    return Rows(fields, pa.table({fields[0].name: [session.settings[key]]}), "SHOW")


async def _deallocate(session, p, params):
    key = p.command.name
    if key is None:
        session.statements = {k: v for k, v in session.statements.items() if k == ""}
        return Done("DEALLOCATE ALL")
    if key not in session.statements:
        raise E.InvalidSqlStatementName(f'prepared statement "{key}" does not exist')
    del session.statements[key]
    return Done("DEALLOCATE")


async def _discard(session, p, params):
    what = p.command.what
    if what == "all":
        if session.status != TxStatus.IDLE:
            raise E.PgError("DISCARD ALL cannot run inside a transaction block",
                            sqlstate="25001")
        session.portals.clear()
        session.statements.clear()
        _reset_all(session)
    elif what == "plans":
        pass
    return Done("DISCARD " + what.upper())


async def _listen(session, p, params):
    # Accepted so connection pools' reset queries work; cqgate sends no notifications.
    return Done(p.command.tag)


async def _copy(session, p, params):
    req = p.command
    if req.file is None:
        return req                  # the connection carries it out: it owns the CopyData
    allowed = server_files.may_read if req.direction == "in" else server_files.may_write
    if not allowed(session.ctx):
        raise server_files.copy_denied(req.direction)
    if req.direction == "in":
        n = await settle(await session.in_thread(copy_data.load_file, session, req),
                         session.in_thread)
        return Done(f"COPY {n}")
    res = await copy_data.source(session, req)
    if isinstance(res, LiveRows):
        res.close()
        raise E.FeatureNotSupported("COPY of a continuous query to a file is not supported",
                                    hint="Use COPY … TO STDOUT, which sends rows as they come.")
    n = await session.in_thread(copy_data.save_file, session, req, res)
    return Done(f"COPY {n}")


HANDLERS = {
    C.Begin: begin, C.Commit: commit, C.Rollback: rollback, C.RollbackTo: rollback_to,
    C.Savepoint: savepoint, C.Release: release, C.Set: _set, C.Reset: _reset, C.Show: _show,
    C.Declare: declare, C.Fetch: fetch, C.Close: close_cursor, C.Deallocate: _deallocate,
    C.Discard: _discard, C.Listen: _listen, C.CopyRequest: _copy,
    **role_commands.HANDLERS,
}


async def run_command(session, p, params):
    return await HANDLERS[type(p.command)](session, p, params)


def describe_command(session, p) -> list | None:
    """Fields a command returns, for Describe before it runs."""
    cmd = p.command
    if isinstance(cmd, C.Show):
        return _show_fields(p)
    if isinstance(cmd, C.Fetch) and not cmd.move:
        portal = session.portals.get(cmd.cursor)
        if portal is not None and isinstance(portal.result, (Rows, LiveRows)):
            return portal.result.fields
    return None
