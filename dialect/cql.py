"""``class CQL(Postgres)``: a thin sqlglot dialect declaration, registered as ``read="cql"``.

For now it differs from Postgres only where PostgreSQL clients need it (``oid`` as a type that
takes ``[]``); the stream syntax of later layers is added here through the dispatch tables.
"""
from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.postgres import Postgres
from sqlglot.tokens import TokenType


class CQL(Postgres):
    class Tokenizer(Postgres.Tokenizer):
        # PostgreSQL's oid is an unsigned 4-byte integer; as a type token it also takes [].
        KEYWORDS = {**Postgres.Tokenizer.KEYWORDS, "OID": TokenType.UINT}


Dialect.classes["cql"] = CQL
