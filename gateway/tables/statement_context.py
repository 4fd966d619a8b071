"""What a statement needs of the session that runs it, and no more: the DuckDB connection, the
role, the settings, notices, the columns it sees, the running parts (``services``) and a few
capabilities. Stream statements, security checks and archive queries take this, never the
session; the session makes one when it starts and keeps its own state (protocol, portals,
transactions) to itself.

Statements run in worker threads (DuckDB and planning block); one that needs a round trip to
the back end does not block its thread on it: it returns an ``AwaitOnLoop``, which ``settle``
awaits on the event loop before the rest of the statement goes on in a thread."""
from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import duckdb
from sqlglot import exp

from gateway.link import spill
from gateway.link.live_rows import Bounds
from gateway.tables import settings as S
from gateway.tables import translate as TR
from gateway.tables.store import pg_error


ROUND_TRIP_S = 60.0       # the longest a statement waits for one round trip to the back end


@dataclass(eq=False)
class StatementContext:
    services: object                   # gateway/services.py: the running parts
    con: duckdb.DuckDBPyConnection     # the session's own DuckDB connection
    user: str                          # the role the session runs as
    pid: int
    settings: dict                     # the session's settings (GUCs), shared with it
    columns: object                    # gateway/sessions/columns.py: columns as it sees them
    relation_facts: object             # gateway/security/access.py: views and temp tables
    on_commit: Callable                # (apply) -> None: now, or when the transaction commits
    notices: list = field(default_factory=list)   # (severity, sqlstate, text) to send
    file_tables: list = field(default_factory=list)   # server files read for the statement

    def _value(self, name: str) -> str | None:
        """The literal for a ``getvariable('cq_…')`` the translator left in the SQL."""
        if name == "cq_user":
            return self.user
        if name == "cq_pid":
            return str(self.pid)
        return self.settings.get(S.canonical(name[len(TR.SETTING_PREFIX):]))

    def bind_session_values(self, ast: exp.Expression) -> str:
        """DuckDB's SQL for ``ast``, the session's values in place of the translator's
        ``getvariable('cq_…')`` placeholders: put into the parse tree as literals, never into
        SQL text, where a value could close a quoted name and write SQL of its own."""
        def literal(node):
            if isinstance(node, exp.Anonymous) and node.name.lower() == "getvariable" \
                    and node.expressions and isinstance(node.expressions[0], exp.Literal) \
                    and node.expressions[0].name.startswith("cq_"):
                value = self._value(node.expressions[0].name)
                return exp.Null() if value is None else exp.Literal.string(str(value))
            return node
        return ast.transform(literal).sql("duckdb")

    def result_bounds(self) -> Bounds:
        """How much of a continuous query's unread rows this session's queues may hold."""
        return Bounds(S.size_bytes(self.settings["cq.result_memory"]),
                      S.size_bytes(self.settings["cq.result_spill"]),
                      os.path.join(self.services.config.data_dir, spill.FOLDER))

    def table_contents(self, name: str):
        try:
            return self.con.sql(f"SELECT * FROM {name}").to_arrow_table()
        except duckdb.Error as e:
            raise pg_error(e) from None

    @contextlib.contextmanager
    def server_files(self):
        """Server files read for one statement stay registered on the connection until its
        end (``gateway/security/server_files.py``)."""
        try:
            yield
        finally:
            while self.file_tables:
                self.con.unregister(self.file_tables.pop())


@dataclass(frozen=True)
class AwaitOnLoop:
    """A statement's round trip to the back end, asked for by code that runs in a worker
    thread: ``work()`` (a coroutine) is awaited on the event loop, never blocking a thread on
    it, then ``then(result)`` goes on in a worker thread and may ask for another."""
    work: Callable[[], Awaitable]
    then: Callable[[object], object] = lambda result: result

    def followed_by(self, after: Callable[[object], object]) -> "AwaitOnLoop":
        """This round trip, then ``after`` applied to what ``then`` gives."""
        return AwaitOnLoop(self.work, lambda result: chain(self.then(result), after))


def chain(res, after: Callable[[object], object]):
    """``after(res)``, or, while ``res`` still waits on the loop, after it has."""
    return res.followed_by(after) if isinstance(res, AwaitOnLoop) else after(res)


async def settle(res, in_thread, timeout: float = ROUND_TRIP_S):
    """``res`` with every round trip it asks for made: each awaited on the loop (at most
    ``timeout`` seconds), each continuation run by ``in_thread``. A round trip is never cut
    short: a statement cancelled or timed out while one runs leaves it to finish (tuples
    pushed go on to their queries, a named window that started gets its catalog entry's
    queries), as the back end's side of it cannot be taken back half-way."""
    while isinstance(res, AwaitOnLoop):
        res = await in_thread(res.then,
                              await asyncio.wait_for(asyncio.shield(res.work()), timeout))
    return res
