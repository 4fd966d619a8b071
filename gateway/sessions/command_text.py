"""What the session commands share in reading their text: a name as written (quoted or not),
the statement without leading comments or a trailing semicolon, and a WARNING for the client."""
from __future__ import annotations

from gateway.sessions.lexer import strip_leading_comments

NAME = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'


def statement_body(p) -> str:
    return strip_leading_comments(p.stmt.text).strip().rstrip(";").strip()


def warn(session, sqlstate: str, message: str) -> None:
    session.notices.append(("WARNING", sqlstate, message))
