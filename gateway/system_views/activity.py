"""``pg_stat_activity``: one row a session, as the statement that reads it starts, with
PostgreSQL's columns; a session waiting for a continuous query's rows says so in
``wait_event_type`` / ``wait_event`` (``Extension`` / ``ContinuousQuery``)."""
from __future__ import annotations

import datetime as dt


def wanted(reads: frozenset) -> bool:
    """Whether a statement reads pg_stat_activity (``reads``: the catalog relations its
    translation reads); only then are the rows gathered."""
    return "pg_stat_activity" in reads


def _when(seconds: float | None):
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


HIDDEN = "<insufficient privilege>"


def tables(services, viewer: str) -> dict:
    """The rows as role ``viewer`` may see them: what other roles' sessions run (their
    statements, addresses and times) only with those roles' privileges or
    pg_read_all_stats's, as PostgreSQL."""
    rows = []
    for s in list(services.sessions.values()):
        a = s.activity
        role = services.roles.get(s.user)
        head = (16384, s.database, s.pid, None, role.oid if role else None, s.user,
                s.settings.get("application_name", ""))
        if not services.roles.sees_activity_of(viewer, s.user):
            rows.append(head + (None,) * 13 + (HIDDEN, "client backend"))
            continue
        addr, port = (s.peer + (None, None))[:2] if s.peer else (None, -1)
        waiting = a.state == "active" and a.waits_on_stream
        rows.append(head + (addr, None, port, _when(a.backend_start), _when(a.xact_start),
                            _when(a.query_start), _when(a.state_change),
                            "Extension" if waiting else None,
                            "ContinuousQuery" if waiting else None, a.state, None, None, None,
                            a.query, "client backend"))
    return {"pg_stat_activity": services.store.live_table("pg_stat_activity", rows)}
