"""A small PostgreSQL lexer: splits a query string into statements at top-level semicolons (not
inside parentheses or braces, where a StreaQueL loop has its own) and
normalises ``$n`` parameters, honouring quotes, E-strings, dollar quotes and nested comments.

Positions are kept so errors can point into the client's original text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.pgwire.errors import SyntaxError_

_TOKEN = re.compile(
    r"""(?P<squote>[eE]?')|(?P<dquote>")|(?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z0-9_]*)?\$)
      |(?P<param>\$\d+)|(?P<line>--)|(?P<block>/\*)|(?P<semi>;)|(?P<open>[({])|(?P<close>[)}])""",
    re.X)


@dataclass(frozen=True)
class Statement:
    text: str       # the statement text, parameters spaced for sqlglot
    offset: int     # where it starts in the original query string (0-based)
    max_param: int  # highest $n used


def _end_of_squote(sql: str, i: int, escapes: bool) -> int:
    while True:
        j = sql.find("'", i)
        if j < 0:
            raise SyntaxError_("unterminated quoted string", position=i)
        if escapes:
            k, n = j - 1, 0
            while k >= i and sql[k] == "\\":
                n += 1
                k -= 1
            if n % 2:
                i = j + 1
                continue
        if j + 1 < len(sql) and sql[j + 1] == "'":
            i = j + 2
            continue
        return j + 1


def _end_of_block(sql: str, i: int) -> int:
    depth = 1
    while depth:
        a, b = sql.find("/*", i), sql.find("*/", i)
        if b < 0:
            raise SyntaxError_("unterminated /* comment", position=i)
        if 0 <= a < b:
            depth, i = depth + 1, a + 2
        else:
            depth, i = depth - 1, b + 2
    return i


def split(sql: str) -> list[Statement]:
    """Split into statements; empty statements are dropped (an all-empty string gives [])."""
    out: list[Statement] = []
    start, i, pieces, max_param, seg = 0, 0, [], 0, 0
    depth = 0      # a StreaQueL loop keeps its semicolons inside ( ) and { }
    while True:
        m = _TOKEN.search(sql, i)
        if m is None:
            break
        kind = m.lastgroup if m.lastgroup != "tag" else "dollar"
        if kind == "squote":
            i = _end_of_squote(sql, m.end(), escapes=m.group().lower().startswith("e"))
        elif kind == "dquote":
            j = sql.find('"', m.end())
            while j >= 0 and sql[j + 1:j + 2] == '"':
                j = sql.find('"', j + 2)
            if j < 0:
                raise SyntaxError_("unterminated quoted identifier", position=m.start() + 1)
            i = j + 1
        elif kind == "dollar":
            j = sql.find(m.group(), m.end())
            if j < 0:
                raise SyntaxError_("unterminated dollar-quoted string", position=m.start() + 1)
            i = j + len(m.group())
        elif kind == "param":
            max_param = max(max_param, int(m.group()[1:]))
            # sqlglot reads "$1,$" as a dollar-quote tag; a space after each parameter avoids it.
            pieces.append(sql[seg:m.end()] + " ")
            seg = i = m.end()
        elif kind == "line":
            j = sql.find("\n", m.end())
            i = len(sql) if j < 0 else j + 1
        elif kind == "block":
            i = _end_of_block(sql, m.end())
        elif kind in ("open", "close"):
            depth = depth + 1 if kind == "open" else max(depth - 1, 0)
            i = m.end()
        elif depth:
            i = m.end()
        else:  # a semicolon at the top level
            pieces.append(sql[seg:m.start()])
            _emit(out, "".join(pieces), start, max_param)
            pieces, max_param = [], 0
            start = seg = i = m.end()
    pieces.append(sql[seg:])
    _emit(out, "".join(pieces), start, max_param)
    return out


_LEADING = re.compile(r"^(\s+|--[^\n]*(\n|$)|/\*.*?\*/)*", re.S)


def strip_leading_comments(text: str) -> str:
    return text[_LEADING.match(text).end():]


def _emit(out: list, text: str, offset: int, max_param: int) -> None:
    if strip_leading_comments(text):      # a statement of only comments is no statement
        out.append(Statement(text, offset, max_param))
