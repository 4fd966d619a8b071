"""A cursor over one statement's tokens (from the lexer) with PostgreSQL's syntax errors, for the
readers of session commands (``command_syntax.py``, ``role_syntax.py``)."""
from __future__ import annotations

from gateway.pgwire import errors as E
from gateway.syntax.lexer import Statement, Token, tokens


class TokenReader:
    """A cursor over one statement's tokens, with PostgreSQL's syntax errors."""

    def __init__(self, stmt: Statement):
        self.stmt = stmt
        self.toks = tokens(stmt.text)
        while self.toks and self.toks[-1].value == ";":
            self.toks.pop()
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> Token:
        tok = self.peek()
        if tok is None:
            self.error()
        self.i += 1
        return tok

    def at(self, *words: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.is_word(*words)

    def accept(self, *words: str) -> str | None:
        """The next word, lower-cased and consumed, if it is one of ``words``."""
        if self.at(*words):
            return self.take().value.lower()
        return None

    def expect(self, *words: str) -> str:
        word = self.accept(*words)
        if word is None:
            self.error()
        return word

    def symbol(self, char: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kind == "symbol" and tok.value == char:
            self.i += 1
            return True
        return False

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def end(self) -> None:
        if not self.at_end():
            self.error()

    def name(self) -> str:
        """An identifier as PostgreSQL keeps it: quoted keeps its case, unquoted folds."""
        tok = self.take()
        if tok.kind == "name":
            return tok.value
        if tok.kind != "word":
            self.error(tok)
        return tok.value.lower()

    def dotted(self) -> str:
        """A setting's name: identifiers joined by dots (cq.mode), case as written."""
        parts = [self._part()]
        while self.symbol("."):
            parts.append(self._part())
        return ".".join(parts)

    def _part(self) -> str:
        tok = self.take()
        if tok.kind not in ("word", "name"):
            self.error(tok)
        return tok.value

    def text_from(self, tok: Token) -> str:
        return self.stmt.text[tok.start:].strip()

    def error(self, tok: Token | None = None):
        tok = tok or self.peek()
        if tok is None:
            raise E.SyntaxError_("syntax error at end of input",
                                 position=self.stmt.offset + len(self.stmt.text.rstrip()) + 1)
        raise E.SyntaxError_(f'syntax error at or near "{self.stmt.text[tok.start:tok.end]}"',
                             position=self.stmt.offset + tok.start + 1)
