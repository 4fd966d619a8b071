"""Statements the gateway answers itself rather than DuckDB: transaction control, SET / SHOW /
RESET, SQL cursors (DECLARE / FETCH / MOVE / CLOSE), DEALLOCATE, DISCARD, LISTEN and COPY.

``command_for`` classifies a statement by its leading keywords; ``run_command`` dispatches
through the ``HANDLERS`` table. COPY returns a ``CopyRequest`` that the connection carries out,
because it reads or writes CopyData messages.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from dialect.errors import PlanError
from dialect.intervals import interval_us
from dialect.names import fold

from gateway.sessions import settings as S
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done, Field, Rows
from gateway.link.live_rows import LiveRows
from gateway.sessions.portals import Portal, TxStatus
from gateway.streams.statements import is_query
from gateway.sessions.lexer import Statement, strip_leading_comments

_NAME = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'

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


def _body(p) -> str:
    return strip_leading_comments(p.stmt.text).strip().rstrip(";").strip()


def _warn(session, sqlstate: str, message: str) -> None:
    session.notices.append(("WARNING", sqlstate, message))


# ---------------------------------------------------------------------- transaction control
async def _begin(session, p, params):
    if session.status != TxStatus.IDLE:
        _warn(session, "25001", "there is already a transaction in progress")
        return Done("BEGIN")
    await session._call(session.begin)
    return Done("BEGIN")


async def _commit(session, p, params):
    if session.status == TxStatus.IDLE:
        _warn(session, "25P01", "there is no transaction in progress")
        return Done("COMMIT")
    return Done(await session._call(session.end_transaction, True))


async def _rollback(session, p, params):
    if session.status == TxStatus.IDLE:
        _warn(session, "25P01", "there is no transaction in progress")
        return Done("ROLLBACK")
    await session._call(session.end_transaction, False)
    return Done("ROLLBACK")


def _need_block(session, what: str) -> None:
    if session.status == TxStatus.IDLE:
        raise E.NoActiveTransaction(f"{what} can only be used in transaction blocks")


async def _savepoint(session, p, params):
    _need_block(session, "SAVEPOINT")
    name = fold(re.sub(r"^savepoint\s+", "", _body(p), flags=re.I))
    session.savepoints.append((name, session.writes_in_tx))
    return Done("SAVEPOINT")


def _find_savepoint(session, name: str) -> int:
    for i in range(len(session.savepoints) - 1, -1, -1):
        if session.savepoints[i][0] == name:
            return i
    raise E.InvalidSavepoint(f'savepoint "{name}" does not exist')


async def _release(session, p, params):
    _need_block(session, "RELEASE SAVEPOINT")
    name = fold(re.sub(r"^release\s+(savepoint\s+)?", "", _body(p), flags=re.I))
    del session.savepoints[_find_savepoint(session, name):]
    return Done("RELEASE")


async def _rollback_to(session, p, params):
    """DuckDB has no nested transactions: a savepoint can be restored only while the transaction
    has written nothing, by restarting it (reads see a fresh snapshot)."""
    _need_block(session, "ROLLBACK TO SAVEPOINT")
    name = fold(re.sub(r"^rollback\s+(work\s+|transaction\s+)?to\s+(savepoint\s+)?", "",
                        _body(p), flags=re.I))
    i = _find_savepoint(session, name)
    if session.writes_in_tx:
        raise E.FeatureNotSupported(
            "ROLLBACK TO SAVEPOINT after writes is not supported by cqgate",
            hint="ROLLBACK the whole transaction and run it again.")
    del session.savepoints[i + 1:]
    kept = list(session.savepoints)

    def restart():
        try:
            session.con.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the DuckDB transaction may already be gone
            pass
        session.con.execute("BEGIN TRANSACTION")

    await session._call(restart)
    session.status = TxStatus.IN_BLOCK
    session.savepoints[:] = kept
    return Done("ROLLBACK")


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
    body = _body(p)
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
    name = re.sub(r"^reset\s+", "", _body(p), flags=re.I).strip()
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
    name = re.sub(r"^show\s+", "", _body(p), flags=re.I).strip()
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


# ---------------------------------------------------------------------- cursors
_DECLARE = re.compile(
    rf"^declare\s+(?P<name>{_NAME})\s+(?:binary\s+)?(?:(?:asensitive|insensitive)\s+)?"
    rf"(?:(?:no\s+)?scroll\s+)?cursor\s+(?:(?P<hold>with|without)\s+hold\s+)?for\s+",
    re.I | re.S)


async def _declare(session, p, params):
    text = strip_leading_comments(p.stmt.text)
    lead = len(p.stmt.text) - len(text)
    m = _DECLARE.match(text)
    if not m:
        raise E.SyntaxError_("syntax error in DECLARE", position=p.stmt.offset + lead + 1)
    name = fold(m.group("name"))
    holdable = (m.group("hold") or "").lower() == "with"
    if session.status == TxStatus.IDLE and not holdable:
        raise E.NoActiveTransaction("DECLARE CURSOR can only be used in transaction blocks")
    if name in session.portals:
        raise E.DuplicateCursor(f'cursor "{name}" already exists')
    query = Statement(text[m.end():], p.stmt.offset + lead + m.end(), p.stmt.max_param)
    inner = session.prepare("", query.text)
    inner.cursor = name
    inner.stmt = Statement(inner.stmt.text, query.offset, inner.stmt.max_param) \
        if inner.stmt else None
    if not _returns_rows(inner):
        raise E.SyntaxError_("DECLARE CURSOR needs a query that returns rows",
                             position=query.offset + 1)
    result = await session.execute(inner, params)
    if isinstance(result, LiveRows):
        result.name = name
    session.portals[name] = Portal(name, inner, params, (), holdable=holdable, result=result,
                                   sql_cursor=True)
    return Done("DECLARE CURSOR")


def _returns_rows(p) -> bool:
    if p.command == "stream":
        return is_query(p.translated.source)
    return p.command is None and p.translated is not None and p.translated.returns_rows


_FETCH = re.compile(
    rf"^(?P<verb>fetch|move)\s+(?:(?P<dir>next|prior|first|last|all|forward|backward|"
    rf"absolute|relative)\s*)?(?P<count>[+-]?\d+|all)?\s*(?:(?:from|in)\s+)?(?P<name>{_NAME})"
    r"(?:\s+with\s*\(\s*timeout\s*=\s*(?P<timeout>'[^']*'|[\d.]+)\s*\))?\s*$",
    re.I | re.S)


def _fetch_cursor(session, p):
    m = _FETCH.match(_body(p))
    if not m:
        raise E.SyntaxError_(f"syntax error in {_body(p).split()[0].upper()}",
                             position=p.stmt.offset + 1)
    name = fold(m.group("name"))
    portal = session.portals.get(name)
    if portal is None or not isinstance(portal.result, (Rows, LiveRows)):
        raise E.InvalidCursorName(f'cursor "{name}" does not exist')
    if m.group("timeout") and not isinstance(portal.result, LiveRows):
        raise E.FeatureNotSupported("WITH (timeout) applies to cursors over continuous "
                                    "queries")
    return m, portal


def _fetch_indices(rows: Rows, direction: str, count: str | None) -> list:
    """Row indices a FETCH/MOVE returns, moving ``rows.pos`` (the next row to return)."""
    n_total = rows.table.num_rows
    d = (direction or "").lower()
    c = (count or "").lower()
    if d in ("first", "last", "absolute"):
        k = 1 if d == "first" else n_total if d == "last" else int(c or 1)
        k = k if k >= 0 else n_total + k + 1
        if 1 <= k <= n_total:
            rows.pos = k
            return [k - 1]
        rows.pos = 0 if k < 1 else n_total + 1
        return []
    backward = d in ("prior", "backward")
    if d == "relative":
        k = int(c or 1)
        backward, c = k < 0, str(abs(k))
        if k == 0:
            return [rows.pos - 1] if 0 < rows.pos <= n_total else []
    k = n_total if c == "all" or d == "all" else int(c) if c else 1
    if k < 0:
        backward, k = not backward, -k
    cur = min(rows.pos, n_total)
    if backward:
        start = max(cur - 2 - k, -1)
        idx = list(range(cur - 2, start, -1)) if cur >= 2 else []
        rows.pos = max(cur - k, 0)
        return idx
    idx = list(range(cur, min(cur + k, n_total)))
    rows.pos = cur + len(idx)
    return idx


def _timeout(m) -> float | None:
    raw = m.group("timeout")
    if raw is None:
        return None
    try:
        return interval_us(raw.strip("'")) / 1e6
    except PlanError:
        raise E.InvalidParameterValue(f"invalid timeout {raw}",
                                      hint="Write an interval such as '1s' or '500ms'.") \
            from None


async def _fetch_live(session, m, live: LiveRows):
    """FETCH from a continuous query: forward only; blocks until ``count`` rows exist (ALL:
    until at least one), the query ends, or the timeout passes."""
    d, c = (m.group("dir") or "").lower(), (m.group("count") or "").lower()
    if d in ("prior", "first", "last", "absolute", "relative", "backward") or c.startswith("-"):
        raise E.PgError("cursor can only scan forward", sqlstate="55000",
                        hint="A continuous query's rows arrive once, in valid_from order.")
    n = None if "all" in (d, c) else int(c) if c else 1
    table = await live.take(n, _timeout(m), session.cancel_event, session.client_closed(),
                            statement_deadline=session.statement_deadline())
    session.notices.extend(live.take_notices())
    if m.group("verb").lower() == "move":
        return Done(f"MOVE {table.num_rows}")
    return Rows(live.fields, table, "FETCH")


async def _fetch(session, p, params):
    m, portal = _fetch_cursor(session, p)
    rows = portal.result
    if isinstance(rows, LiveRows):
        return await _fetch_live(session, m, rows)
    idx = _fetch_indices(rows, m.group("dir"), m.group("count"))
    if m.group("verb").lower() == "move":
        return Done(f"MOVE {len(idx)}")
    table = rows.table.take(pa.array(idx, type=pa.int64())) if idx else rows.table.slice(0, 0)
    return Rows(rows.fields, table, "FETCH")


async def _close(session, p, params):
    name = re.sub(r"^close\s+", "", _body(p), flags=re.I).strip()
    if name.lower() == "all":
        for k in [k for k, v in session.portals.items() if v.sql_cursor]:
            del session.portals[k]
        return Done("CLOSE CURSOR ALL")
    key = fold(name)
    if key not in session.portals:
        raise E.InvalidCursorName(f'cursor "{key}" does not exist')
    del session.portals[key]
    return Done("CLOSE CURSOR")


async def _deallocate(session, p, params):
    name = re.sub(r"^deallocate\s+(prepare\s+)?", "", _body(p), flags=re.I).strip()
    if name.lower() == "all":
        session.statements = {k: v for k, v in session.statements.items() if k == ""}
        return Done("DEALLOCATE ALL")
    key = fold(name)
    if key not in session.statements:
        raise E.InvalidSqlStatementName(f'prepared statement "{key}" does not exist')
    del session.statements[key]
    return Done("DEALLOCATE")


async def _discard(session, p, params):
    what = re.sub(r"^discard\s+", "", _body(p), flags=re.I).strip().lower()
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
    return Done(_body(p).split()[0].upper())


# ---------------------------------------------------------------------- COPY
@dataclass
class CopyRequest:
    """A COPY the connection carries out (it owns the CopyData stream)."""
    direction: str            # "in" | "out"
    table: str | None         # target/source table (schema-qualified text as written)
    columns: list | None
    query: str | None         # COPY (query) TO STDOUT
    csv: bool
    header: bool
    delimiter: str
    null: str
    quote: str
    escape: str


_COPY = re.compile(
    rf"^copy\s+(?:(?P<table>{_NAME}(?:\.{_NAME})?)\s*(?:\((?P<cols>[^)]*)\))?|\((?P<query>.*)\))"
    rf"\s+(?P<dir>from|to)\s+(?P<where>stdin|stdout)\s*(?P<opts>.*)$", re.I | re.S)


def _copy_options(text: str) -> dict:
    text = text.strip()
    if text.lower().startswith("with"):
        text = text[4:].strip()
    opts: dict = {}
    if text.startswith("(") and text.endswith(")"):
        for part in re.findall(r"(\w+)(?:\s+('(?:[^']|'')*'|\w+))?", text[1:-1]):
            key, val = part[0].lower(), part[1]
            opts[key] = val.strip("'").replace("''", "'") if val else "true"
        return opts
    for m in re.finditer(r"(csv|header|binary|delimiter|null|quote|escape)"
                         r"(?:\s+(?:as\s+)?('(?:[^']|'')*'))?", text, re.I):
        key, val = m.group(1).lower(), m.group(2)
        if key in ("csv", "binary"):
            opts["format"] = key
        else:
            opts[key] = val.strip("'").replace("''", "'") if val else "true"
    return opts


async def _copy(session, p, params):
    m = _COPY.match(_body(p))
    if not m:
        raise E.FeatureNotSupported(
            "COPY supports only FROM STDIN and TO STDOUT",
            hint="Use psql's \\copy to read or write files on the client.")
    opts = _copy_options(m.group("opts"))
    fmt = opts.get("format", "text").lower()
    if fmt == "binary":
        raise E.FeatureNotSupported("COPY BINARY is not supported; use text or CSV")
    csv = fmt == "csv"
    direction = "in" if m.group("dir").lower() == "from" else "out"
    if m.group("query") and direction == "in":
        raise E.SyntaxError_("COPY (query) can only be used with TO")
    cols = [fold(c) for c in m.group("cols").split(",")] if m.group("cols") else None
    return CopyRequest(
        direction, m.group("table"), cols, m.group("query"), csv,
        opts.get("header", "false").lower() in ("true", "on", "1", "match"),
        opts.get("delimiter", "," if csv else "\t"),
        opts.get("null", "" if csv else "\\N"),
        opts.get("quote", '"'), opts.get("escape", opts.get("quote", '"')))


HANDLERS = {
    "begin": _begin, "commit": _commit, "rollback": _rollback, "rollback_to": _rollback_to,
    "savepoint": _savepoint, "release": _release, "set": _set, "reset": _reset, "show": _show,
    "declare": _declare, "fetch": _fetch, "move": _fetch, "close": _close,
    "deallocate": _deallocate, "discard": _discard, "listen": _listen, "copy": _copy,
}


async def run_command(session, p, params):
    return await HANDLERS[p.command](session, p, params)


def describe_command(session, p) -> list | None:
    """Fields a command returns, for Describe before it runs."""
    if p.command == "show":
        return _show_fields(p)
    if p.command == "fetch":
        m = _FETCH.match(_body(p))
        if m and m.group("verb").lower() == "fetch":
            portal = session.portals.get(fold(m.group("name")))
            if portal is not None and isinstance(portal.result, (Rows, LiveRows)):
                return portal.result.fields
    return None
