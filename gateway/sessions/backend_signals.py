"""``pg_cancel_backend`` and ``pg_terminate_backend``: one DuckDB function for the whole server
(the translator gives it the caller's pid), checking PostgreSQL's rule (one's own role's
sessions, or ``pg_signal_backend``'s privileges; a superuser's only by a superuser) and passing
the signal to the target session on the event loop."""
from __future__ import annotations

import asyncio

import duckdb
from duckdb.sqltypes import BIGINT, BOOLEAN, VARCHAR

from gateway.security.roles import SIGNAL_BACKEND
from gateway.tables.translate import SIGNAL_FUNCTION

_DENIED = {"cancel": ("permission denied to cancel query", "cancel this query"),
           "terminate": ("permission denied to terminate process", "terminate this process")}


def install(db: duckdb.DuckDBPyConnection, services, loop: asyncio.AbstractEventLoop) -> None:
    """Register the one signal function on the server's DuckDB (every session sees it)."""
    def signal(pid: int, action: str, caller_pid: int) -> bool:
        return send(services, loop, caller_pid, pid, action)
    db.create_function(SIGNAL_FUNCTION, signal, [BIGINT, VARCHAR, BIGINT], BOOLEAN,
                       side_effects=True)


def send(services, loop, caller_pid: int, pid: int, action: str) -> bool:
    """True once the signal is on its way; False (with PostgreSQL's WARNING) for a pid that
    is no session. Raises PermissionError, which the session reports as 42501."""
    caller = services.sessions.get(caller_pid)
    target = services.sessions.get(pid)
    if target is None or caller is None:
        if caller is not None:
            caller.notices.append(("WARNING", "01000",
                                   f"PID {pid} is not a cqgate server process"))
        return False
    roles = services.roles
    message, what = _DENIED[action]
    if roles.is_superuser(target.user) and not roles.is_superuser(caller.user):
        raise PermissionError(f"{message}: only superusers can {what} of a superuser")
    if not (roles.has_privs_of(caller.user, target.user)
            or roles.has_privs_of(caller.user, SIGNAL_BACKEND)):
        raise PermissionError(f'{message}: only roles with privileges of the role whose '
                              f'process it is, or of "{SIGNAL_BACKEND}", may {what}')
    loop.call_soon_threadsafe(target.cancel if action == "cancel" else target.terminate)
    return True
