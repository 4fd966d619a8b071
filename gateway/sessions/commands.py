"""Statements the gateway answers itself rather than DuckDB: transaction control, SET / SHOW /
RESET, SQL cursors (DECLARE / FETCH / MOVE / CLOSE), DEALLOCATE, DISCARD, LISTEN and COPY.

``command_for`` classifies a statement by its leading keywords; ``run_command`` dispatches
through the ``HANDLERS`` table. COPY returns a ``CopyRequest`` that the connection carries out,
because it reads or writes CopyData messages.
"""
from __future__ import annotations

import re

import pyarrow as pa

from dialect.names import fold

from gateway.link.live_rows import LiveRows
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done, Field, Rows
from gateway.sessions import settings as S
from gateway.sessions.command_text import statement_body
from gateway.sessions.copy_command import copy_statement
from gateway.sessions.cursors import FETCH_PATTERN, close_cursor, declare, fetch
from gateway.sessions.lexer import strip_leading_comments
from gateway.sessions.portals import TxStatus
from gateway.sessions.transactions import begin, commit, release, rollback, rollback_to, savepoint

# (keyword name, pattern on the statement text with leading comments stripped)
CLASSIFY = [
    ("begin", re.compile(r"^(begin|start\s+transaction)\b", re.I)),
    ("commit", re.compile(r"^(commit|end)\b(?!\s+prepared)", re.I)),
    ("rollback_to", re.compile(r"^rollback\s+(work\s+|transaction\s+)?to\b", re.I)),
    ("rollback", re.compile(r"^(rollback|abort)\b(?!\s+prepared)", re.I)),
    ("savepoint", re.compile(r"^savepoint\b", re.I)),
    ("release", re.compile(r"^release\b", re.I)),
    ("set", re.compile(r"^set\b", re.I)),
    ("reset", re.compile(r"^reset\b", re.I)),
    ("show", re.compile(r"^show\b", re.I)),
    ("declare", re.compile(r"^declare\b", re.I)),
    ("fetch", re.compile(r"^fetch\b", re.I)),
    ("move", re.compile(r"^move\b", re.I)),
    ("close", re.compile(r"^close\b", re.I)),
    ("deallocate", re.compile(r"^deallocate\b", re.I)),
    ("discard", re.compile(r"^discard\b", re.I)),
    ("listen", re.compile(r"^(listen|unlisten)\b", re.I)),
    ("copy", re.compile(r"^copy\b", re.I)),
]


def command_for(text: str) -> str | None:
    body = strip_leading_comments(text)
    for name, pattern in CLASSIFY:
        if pattern.match(body):
            return name
    return None


# ---------------------------------------------------------------------- settings
_SET = re.compile(r"^set\s+(?:(session|local)\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_.]*|\"[^\"]+\")"
                  r"\s*(?:=|\s+to\s+)\s*(?P<value>.*)$", re.I | re.S)


_SET_TZ = re.compile(r"^set\s+(?:(session|local)\s+)?time\s+zone\s+(?P<value>.*)$", re.I | re.S)


_SET_IGNORED = re.compile(r"^set\s+(session\s+characteristics|transaction|constraints|"
                          r"session\s+authorization|role)\b", re.I)


def _set_value(raw: str) -> str | None:
    raw = raw.strip()
    if raw.lower() == "default":
        return None
    parts = re.findall(r"'((?:[^']|'')*)'|([^,\s]+)", raw)
    vals = [(q.replace("''", "'") if q or not u else u) for q, u in parts]
    return ", ".join(vals)


async def _set(session, p, params):
    body = statement_body(p)
    if _SET_IGNORED.match(body):
        return Done("SET")
    m = _SET_TZ.match(body)
    name = "TimeZone" if m else None
    if not m:
        m = _SET.match(body)
        if not m:
            raise E.SyntaxError_(f'syntax error at or near "{body[4:].split()[0] if body[4:].split() else body}"',
                                 position=p.stmt.offset + 1)
        name = m.group("name").strip('"')
    value = _set_value(m.group("value"))
    if value is None or (name == "TimeZone" and value.lower() == "local"):
        value = S.DEFAULTS.get(S.canonical(name), "")
    session.set_setting(name, value)
    return Done("SET")


async def _reset(session, p, params):
    name = re.sub(r"^reset\s+", "", statement_body(p), flags=re.I).strip()
    if name.lower() == "all":
        for k, v in S.DEFAULTS.items():
            if k not in S.READ_ONLY and k not in ("session_authorization",) and \
                    session.settings.get(k) != v:
                session.set_setting(k, v)
        return Done("RESET")
    session.set_setting(name, S.DEFAULTS.get(S.canonical(name), ""))
    return Done("RESET")


_SHOW_ALIASES = {"transaction isolation level": "transaction_isolation",
                 "time zone": "TimeZone", "session authorization": "session_authorization"}


def _show_target(p) -> str:
    name = re.sub(r"^show\s+", "", statement_body(p), flags=re.I).strip()
    return _SHOW_ALIASES.get(re.sub(r"\s+", " ", name.lower()), name)


def _show_fields(p) -> list:
    name = _show_target(p)
    if name.lower() == "all":
        return [Field("name", 25), Field("setting", 25), Field("description", 25)]
    return [Field(S.canonical(name).lower() if S.canonical(name) in S.DEFAULTS
                  else name.lower(), 25)]


async def _show(session, p, params):
    name = _show_target(p)
    fields = _show_fields(p)
    if name.lower() == "all":
        items = sorted(session.settings.items(), key=lambda kv: kv[0].lower())
        table = pa.table({"name": [k for k, _ in items], "setting": [v for _, v in items],
                          "description": [""] * len(items)})
        return Rows(fields, table, "SHOW")
    key = S.canonical(name)
    if key not in session.settings:
        raise E.UndefinedParameter(f'unrecognized configuration parameter "{name}"')
    return Rows(fields, pa.table({fields[0].name: [session.settings[key]]}), "SHOW")


async def _deallocate(session, p, params):
    name = re.sub(r"^deallocate\s+(prepare\s+)?", "", statement_body(p), flags=re.I).strip()
    if name.lower() == "all":
        session.statements = {k: v for k, v in session.statements.items() if k == ""}
        return Done("DEALLOCATE ALL")
    key = fold(name)
    if key not in session.statements:
        raise E.InvalidSqlStatementName(f'prepared statement "{key}" does not exist')
    del session.statements[key]
    return Done("DEALLOCATE")


async def _discard(session, p, params):
    what = re.sub(r"^discard\s+", "", statement_body(p), flags=re.I).strip().lower()
    if what == "all":
        if session.status != TxStatus.IDLE:
            raise E.PgError("DISCARD ALL cannot run inside a transaction block",
                            sqlstate="25001")
        session.portals.clear()
        session.statements.clear()
        for k, v in S.DEFAULTS.items():
            if k not in S.READ_ONLY and k != "session_authorization" and \
                    session.settings.get(k) != v:
                session.set_setting(k, v)
    elif what == "plans":
        pass
    return Done("DISCARD " + what.upper())


async def _listen(session, p, params):
    # Accepted so connection pools' reset queries work; cqgate sends no notifications.
    return Done(statement_body(p).split()[0].upper())


HANDLERS = {
    "begin": begin, "commit": commit, "rollback": rollback, "rollback_to": rollback_to,
    "savepoint": savepoint, "release": release, "set": _set, "reset": _reset, "show": _show,
    "declare": declare, "fetch": fetch, "move": fetch, "close": close_cursor,
    "deallocate": _deallocate, "discard": _discard, "listen": _listen, "copy": copy_statement,
}


async def run_command(session, p, params):
    return await HANDLERS[p.command](session, p, params)


def describe_command(session, p) -> list | None:
    """Fields a command returns, for Describe before it runs."""
    if p.command == "show":
        return _show_fields(p)
    if p.command == "fetch":
        m = FETCH_PATTERN.match(statement_body(p))
        if m and m.group("verb").lower() == "fetch":
            portal = session.portals.get(fold(m.group("name")))
            if portal is not None and isinstance(portal.result, (Rows, LiveRows)):
                return portal.result.fields
    return None
