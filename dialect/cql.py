"""``class CQL(Postgres)``: a thin sqlglot dialect declaration, registered as ``read="cql"``.

The tokenizer knows ``oid`` as a type (so ``$1::oid[]`` parses), keeps semicolons inside
parentheses and braces from ending a statement (the StreaQueL loop), and reads Flink's
spellings: a backtick-quoted name is read as the same name unquoted (a keyword too: `value`)
and ``SESSION(`` is a call (the group window); the parser and generator live in
``dialect/parser.py`` and ``dialect/generator.py``.
"""
from __future__ import annotations

from sqlglot.dialects.postgres import Postgres
from sqlglot.tokens import TokenType

from .generator import CQLGenerator
from .parser import LOOP_SEMICOLON, CQLParser

_OPEN = {TokenType.L_PAREN, TokenType.L_BRACE}
_CLOSE = {TokenType.R_PAREN, TokenType.R_BRACE}


class CQL(Postgres):
    # print function names as written: Stream(x), wtime(*), distance(a, b)
    NORMALIZE_FUNCTIONS = False

    class Tokenizer(Postgres.Tokenizer):
        # PostgreSQL's oid is an unsigned 4-byte integer; as a type token it also takes [].
        KEYWORDS = {**Postgres.Tokenizer.KEYWORDS, "OID": TokenType.UINT,
                    "EXPLAIN": TokenType.DESCRIBE, "RECOMPUTE": TokenType.DESCRIBE,
                    "MATCH_RECOGNIZE": TokenType.MATCH_RECOGNIZE}

        IDENTIFIERS = ['"', "`"]

        def tokenize(self, sql: str):
            tokens = super().tokenize(sql)
            depth = 0
            for i, tok in enumerate(tokens):
                if tok.token_type == TokenType.IDENTIFIER and sql[tok.start] == "`":
                    tok.token_type = TokenType.VAR
                elif tok.token_type == TokenType.SESSION and i + 1 < len(tokens) \
                        and tokens[i + 1].token_type == TokenType.L_PAREN:
                    tok.token_type = TokenType.VAR
                if tok.token_type in _OPEN:
                    depth += 1
                elif tok.token_type in _CLOSE:
                    depth = max(depth - 1, 0)
                elif tok.token_type == TokenType.SEMICOLON and depth:
                    tok.token_type = LOOP_SEMICOLON
            return tokens

    Parser = CQLParser
    Generator = CQLGenerator
