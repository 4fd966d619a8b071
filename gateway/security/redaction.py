"""Statement text with its credentials blanked (a secret's value, a connection string's
password): what ``pg_stat_activity``, the server's log and stored definitions may show."""
from __future__ import annotations

import re

MASK = "********"
_SECRET = re.compile(r"(\bCREATE\s+SECRET\s+(?:IF\s+NOT\s+EXISTS\s+)?\S+\s+AS\s+)"
                     r"('(?:[^']|'')*'|\S+)", re.IGNORECASE)
# a connection string's password (not ``PASSWORD = SECRET s``, which names a secret)
_PASSWORD = re.compile(r"(\bpassword\s*=\s*)(?!SECRET\b)('(?:[^'\\]|\\.)*'|[^\s']+)",
                       re.IGNORECASE)


def redacted(sql: str) -> str:
    """
    >>> redacted("CREATE SECRET s AS 'x''y'")
    "CREATE SECRET s AS '********'"
    >>> redacted("CREATE SOURCE pg FROM POSTGRES (CONNECTION 'host=h password=pw user=u')")
    "CREATE SOURCE pg FROM POSTGRES (CONNECTION 'host=h password=******** user=u')"
    >>> redacted("CREATE SINK s INTO POSTGRES (PASSWORD = SECRET pw, TABLE = 't') AS TABLE x")
    "CREATE SINK s INTO POSTGRES (PASSWORD = SECRET pw, TABLE = 't') AS TABLE x"
    """
    if "secret" not in sql.lower() and "password" not in sql.lower():
        return sql
    sql = _SECRET.sub(lambda m: f"{m.group(1)}'{MASK}'", sql)
    return _PASSWORD.sub(lambda m: m.group(1) + MASK, sql)
