"""SQL cursors: DECLARE runs the query into a portal; FETCH / MOVE read it (a continuous query's
rows forward only, waiting until they exist or a timeout passes); CLOSE ends it."""
from __future__ import annotations

import pyarrow as pa

from dialect.errors import PlanError
from dialect.intervals import interval_us

from gateway.link.live_rows import LiveRows
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done, Rows
from gateway.sessions.portals import Portal, TxStatus
from gateway.sessions.prepared import Kind


async def declare(session, p, params):
    cmd = p.command
    name, holdable, query = cmd.name, cmd.hold, cmd.query
    if session.status == TxStatus.IDLE and not holdable:
        raise E.NoActiveTransaction("DECLARE CURSOR can only be used in transaction blocks")
    if name in session.portals:
        raise E.DuplicateCursor(f'cursor "{name}" already exists')
    inner = None if query is None or cmd.query_is_command else \
        session.prepare_statement("", query, may_be_command=False)
    if inner is None or inner.kind is Kind.COMMAND or not inner.returns_rows:
        at = p.stmt.offset + len(p.stmt.text.rstrip()) if query is None else query.offset
        raise E.SyntaxError_("DECLARE CURSOR needs a query that returns rows", position=at + 1)
    inner.cursor = name
    result = await session.execute(inner, params)
    if isinstance(result, LiveRows):
        result.name = name
    session.portals[name] = Portal(name, inner, params, (), holdable=holdable, result=result,
                                   sql_cursor=True)
    return Done("DECLARE CURSOR")


def _fetch_cursor(session, cmd):
    portal = session.portals.get(cmd.cursor)
    if portal is None or not isinstance(portal.result, (Rows, LiveRows)):
        raise E.InvalidCursorName(f'cursor "{cmd.cursor}" does not exist')
    if cmd.timeout is not None and not isinstance(portal.result, LiveRows):
        raise E.FeatureNotSupported("WITH (timeout) applies to cursors over continuous "
                                    "queries")
    return portal


def _fetch_indices(rows: Rows, d: str, c: str) -> list:
    """Row indices a FETCH/MOVE returns, moving ``rows.pos`` (the next row to return)."""
    n_total = rows.table.num_rows
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


def _timeout(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return interval_us(raw) / 1e6
    except PlanError:
        raise E.InvalidParameterValue(f"invalid timeout '{raw}'",
                                      hint="Write an interval such as '1s' or '500ms'.") \
            from None


async def _fetch_live(session, cmd, live: LiveRows):
    """FETCH from a continuous query: forward only; blocks until ``count`` rows exist (ALL:
    until at least one), the query ends, or the timeout passes."""
    d, c = cmd.direction, cmd.count
    if d in ("prior", "first", "last", "absolute", "relative", "backward") or c.startswith("-"):
        raise E.PgError("cursor can only scan forward", sqlstate="55000",
                        hint="A continuous query's rows arrive once, in valid_from order.")
    n = None if "all" in (d, c) else int(c) if c else 1
    table = await live.take(n, _timeout(cmd.timeout), session.cancel_event, session.client_closed(),
                            statement_deadline=session.statement_deadline())
    session.notices.extend(live.take_notices())
    if cmd.move:
        return Done(f"MOVE {table.num_rows}")
    return Rows(live.fields, table, "FETCH")


async def fetch(session, p, params):
    cmd = p.command
    rows = _fetch_cursor(session, cmd).result
    if isinstance(rows, LiveRows):
        return await _fetch_live(session, cmd, rows)
    idx = _fetch_indices(rows, cmd.direction, cmd.count)
    if cmd.move:
        return Done(f"MOVE {len(idx)}")
    table = rows.table.take(pa.array(idx, type=pa.int64())) if idx else rows.table.slice(0, 0)
    return Rows(rows.fields, table, "FETCH")


async def close_cursor(session, p, params):
    key = p.command.name
    if key is None:
        for k in [k for k, v in session.portals.items() if v.sql_cursor]:
            del session.portals[k]
        return Done("CLOSE CURSOR ALL")
    if key not in session.portals:
        raise E.InvalidCursorName(f'cursor "{key}" does not exist')
    del session.portals[key]
    return Done("CLOSE CURSOR")
