"""A statement, read once when it is prepared: its kind (empty, a command the session answers
itself, a statement with stream syntax or over streams, SQL on tables), whether it returns rows,
and what the lexer and the translator made of it. The session runs and describes statements
through one table by kind (``Session.RUN`` and ``Session.DESCRIBE``)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.syntax.command_syntax import Command
from gateway.syntax.lexer import Statement
from gateway.security.access import Needs
from gateway.streams.statements import is_query
from gateway.tables import translate as TR


class Kind(enum.Enum):
    EMPTY = "empty"          # nothing but comments and blanks
    COMMAND = "command"      # transaction control, SET/SHOW, cursors, COPY: gateway/sessions/commands.py
    STREAM = "stream"        # stream syntax or a query over streams: gateway/streams
    SQL = "sql"              # SQL on tables and the catalog, run by DuckDB


_RETURNS_ROWS = {
    Kind.EMPTY: lambda p: False,
    Kind.COMMAND: lambda p: p.command.returns_rows,
    Kind.STREAM: lambda p: is_query(p.translated.source),
    Kind.SQL: lambda p: p.translated.returns_rows,
}


@dataclass
class Prepared:
    name: str
    stmt: Statement | None       # None for an empty query
    param_oids: list             # final, after inference
    kind: Kind = Kind.SQL
    command: Command | None = None   # the session command, read (Kind.COMMAND)
    translated: TR.Translated | None = None
    cursor: str | None = None    # the SQL cursor (DECLARE) that runs it, for the log
    needs: Needs | None = None   # privileges it needs (Kind.SQL), checked each time it runs

    @property
    def returns_rows(self) -> bool:
        """Whether running it yields rows (a RowDescription), decided once for every caller."""
        return _RETURNS_ROWS[self.kind](self)

    @property
    def allowed_when_failed(self) -> bool:
        return self.kind is Kind.COMMAND and self.command.allowed_when_failed
