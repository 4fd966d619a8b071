"""A small PostgreSQL lexer: splits a query string into statements at top-level semicolons (not
inside parentheses or braces, where a StreaQueL loop has its own) and normalises ``$n``
parameters; ``tokens`` reads one statement into words, names, strings, numbers and symbols for
the session commands' reader. Both honour quotes, E-strings, dollar quotes and nested comments.

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


def _end_of_dquote(sql: str, start: int) -> int:
    j = sql.find('"', start + 1)
    while j >= 0 and sql[j + 1:j + 2] == '"':
        j = sql.find('"', j + 2)
    if j < 0:
        raise SyntaxError_("unterminated quoted identifier", position=start + 1)
    return j + 1


def _end_of_dollar(sql: str, m: re.Match) -> int:
    j = sql.find(m.group(), m.end())
    if j < 0:
        raise SyntaxError_("unterminated dollar-quoted string", position=m.start() + 1)
    return j + len(m.group())


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
            i = _end_of_dquote(sql, m.start())
        elif kind == "dollar":
            i = _end_of_dollar(sql, m)
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


@dataclass(frozen=True)
class Token:
    kind: str       # word | name (a quoted identifier) | string | number | param | symbol
    value: str      # a word as written, a name or string with its quoting undone
    start: int      # where it starts and ends in the statement text
    end: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.lower() in words


_NEXT = re.compile(
    r"""(?P<space>\s+)|(?P<line>--[^\n]*)|(?P<block>/\*)|(?P<squote>[eE]?')|(?P<dquote>")
      |(?P<param>\$\d+)|(?P<dollar>\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$)|(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)
      |(?P<word>[^\W\d][\w$]*)|(?P<symbol>.)""", re.X | re.S)

_E_ESCAPES = re.compile(r"\\(.)", re.S)


def _string_value(raw: str, escapes: bool) -> str:
    body = raw[2:-1] if escapes else raw[1:-1]
    body = body.replace("''", "'")
    return _E_ESCAPES.sub(lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)),
                          body) if escapes else body


def tokens(text: str) -> list[Token]:
    """The tokens of one statement, comments and blanks left out."""
    out: list[Token] = []
    i = 0
    while i < len(text):
        m = _NEXT.match(text, i)
        kind, start = m.lastgroup, m.start()
        if kind == "block":
            i = _end_of_block(text, m.end())
            continue
        if kind == "squote":
            escapes = m.group().lower().startswith("e")
            i = _end_of_squote(text, m.end(), escapes=escapes)
            out.append(Token("string", _string_value(text[start:i], escapes), start, i))
            continue
        if kind == "dquote":
            i = _end_of_dquote(text, start)
            out.append(Token("name", text[start + 1:i - 1].replace('""', '"'), start, i))
            continue
        if kind == "dollar":
            i = _end_of_dollar(text, m)
            out.append(Token("string", text[m.end():i - len(m.group())], start, i))
            continue
        i = m.end()
        if kind not in ("space", "line"):
            out.append(Token(kind, m.group(), start, i))
    return out
