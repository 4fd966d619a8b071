"""The oracle: DuckDB evaluating a case's plain SQL on the snapshot of each of its stream
references at an instant. Each reference's tuples are kept with the validity interval its
window gives them (``world.validity``) and read through a table macro ``snapN(at_us)`` that
keeps those valid at that instant; the table is the same at every instant. The answer only
changes where some reference's snapshot does, so it is computed once per such change point.

Values are compared in a normal form that tells types apart (a text '1' is not the integer
1, nor TRUE the integer 1), numbers exact up to 9 significant digits."""
from __future__ import annotations

import bisect
import datetime as dt
import decimal
import math
from collections import Counter

import duckdb

from .grammar import INSTANT
from .world import (INF, ORACLE_FUNCTION, RELATIONS, T0, TABLES, Data, Window, copies,
                    python_function, session_bounds, validity, window_columns)


def normal(v):
    """A value in the form both sides are compared in."""
    if v is None:
        return None
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float, decimal.Decimal)):
        f = float(v)
        if math.isnan(f):
            return ("num", "nan")
        return ("num", float(f"{f:.9g}"))
    if isinstance(v, str):
        return ("text", v)
    if isinstance(v, dt.datetime):
        return ("time", v.replace(tzinfo=None).isoformat())
    if isinstance(v, (dt.date, dt.time, dt.timedelta)):
        return ("time", str(v))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(normal(x) for x in v))
    if isinstance(v, dict):
        return ("struct", tuple(sorted((k, normal(x)) for k, x in v.items())))
    if isinstance(v, (bytes, memoryview)):
        return ("bytes", bytes(v))
    return ("other", str(v))


# type families: a column typed text where the snapshot's is a number is a wrong answer
_PG_FAMILIES = {16: "bool", 20: "num", 21: "num", 23: "num", 700: "num", 701: "num",
                1700: "num", 25: "text", 1043: "text", 18: "text", 19: "text",
                1114: "time", 1184: "time", 1082: "time", 1083: "time", 1186: "interval"}


def pg_family(oid: int) -> str:
    return _PG_FAMILIES.get(oid, "other")


def duck_family(t: str) -> str | None:
    """The family of a DuckDB type, or None for the NULL type (any family will do)."""
    base = t.split("(")[0].upper()
    if base == '"NULL"' or base == "NULL":
        return None
    if base == "BOOLEAN":
        return "bool"
    if base in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL"):
        return "num"
    if base == "VARCHAR":
        return "text"
    if base.startswith(("TIMESTAMP", "DATE", "TIME")):
        return "time"
    if base == "INTERVAL":
        return "interval"
    return "other"


class OracleError(Exception):
    """DuckDB cannot evaluate the case's plain SQL."""


class Oracle:
    """One case's oracle over ``data``: ``at(t)`` is the multiset of the answer's rows at
    instant ``t``; ``changes`` are the instants where some snapshot changes."""

    def __init__(self, sql: str, refs: list, data: Data, optimized: bool = True):
        self.sql = sql
        self.con = duckdb.connect()
        if not optimized:       # every part evaluated, as PostgreSQL evaluates both sides
            self.con.execute("PRAGMA disable_optimizer")        # of EXCEPT over an empty one
        self.con.execute("SET integer_division = true")
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute(ORACLE_FUNCTION)
        self.con.create_function("pyfn_body", python_function, ["VARCHAR", "BIGINT"],
                                 "VARCHAR", null_handling="special")
        # cqgate's SUM of integers is a bigint (PostgreSQL's), DuckDB's a HUGEINT: the
        # function takes whatever integer its argument is, as the bigint it is declared with
        self.con.execute("CREATE MACRO pyfn(s, n) AS pyfn_body(s, CAST(n AS BIGINT))")
        tb = RELATIONS["tb"]
        self.con.execute("CREATE TABLE tb (" + ", ".join(f"{n} {t}" for n, t, _ in tb.columns)
                         + ")")
        if data.table:
            self.con.executemany(f"INSERT INTO tb VALUES ({', '.join('?' * len(tb.columns))})",
                                 [[r[c] for c, _, _ in tb.columns] for r in data.table])
        points = {T0}
        for r in refs:
            rel = RELATIONS[r.relation]
            if rel.kind == "table":
                continue
            rows = data.tuples[r.relation]
            if r.window is not None and r.window.kind in TABLES:   # a tuple per window
                made = copies(r.window, rows)
                rows, spans = [rows[i] for i, _, _ in made], [s for _, s, _ in made]
                bounds, names = [b for _, _, b in made], window_columns(r.window)
            else:
                spans = validity(r.window or Window("none"), rel, rows,
                                 lambda pred, rel=rel, rows=rows: self._passes(rel, rows, pred))
                bounds = session_bounds(r.window, rows) if r.window is not None and \
                    r.window.kind == "session" else None
                names = ("wstart", "wend")
            self._snapshot_table(r.index, rel, rows, spans, bounds, names)
            for span in spans:
                if span is not None and span[0] < span[1]:
                    points.update(x for x in span if T0 <= x < data.end)
        self.changes = sorted(points)
        self._answers: dict = {}
        self.types: list | None = None

    def _passes(self, rel, rows, pred: str) -> list:
        """Which of ``rows`` a count window's WHERE keeps, by DuckDB."""
        cols = [c for c, _, _ in rel.columns]
        self.con.execute("CREATE OR REPLACE TEMP TABLE raw_rows (i INT, "
                         + ", ".join(f"{n} {t}" for n, t, _ in rel.columns) + ")")
        if rows:
            self.con.executemany(
                f"INSERT INTO raw_rows VALUES ({', '.join('?' * (len(cols) + 1))})",
                [[i] + [r[c] for c in cols] for i, r in enumerate(rows)])
        got = self.con.execute(f"SELECT coalesce({pred}, false) FROM raw_rows ORDER BY i"
                               ).fetchall()
        return [bool(x[0]) for x in got]

    def _snapshot_table(self, index: int, rel, rows: list, spans: list,
                        sessions: list | None = None, names: tuple = ()) -> None:
        """``sessions``: under a session window, each tuple's session (start, end), read as
        the columns ``names``, wstart and wend (cqgate's wstart(*), wend(*)); under a window
        table function, each copy's window_start, window_end (, window_time)."""
        cols = list(rel.columns) + [("t", rel.time, "time")]
        if rel.own:
            cols.append(("te", "TIMESTAMP", "time"))
        if sessions is not None:
            cols += [(n, "TIMESTAMP", "time") for n in names]
        self.con.execute(f"CREATE TABLE ref{index} (" + ", ".join(f"{n} {t}" for n, t, _ in cols)
                         + ", vf BIGINT, vt BIGINT)")
        values = []
        for i, (r, span) in enumerate(zip(rows, spans)):
            if span is None or span[0] >= span[1]:
                continue
            row = [r[n] for n, _, _ in rel.columns] + [_ts(r["ts"])]
            if rel.own:
                row.append(_ts(r["te"]))
            if sessions is not None:
                row += [_ts(x) for x in sessions[i]]
            values.append(row + [span[0], min(span[1], INF)])
        if values:
            self.con.executemany(f"INSERT INTO ref{index} VALUES "
                                 f"({', '.join('?' * (len(cols) + 2))})", values)
        names = ", ".join(n for n, _, _ in cols)
        self.con.execute(f"CREATE MACRO snap{index}(at_us) AS TABLE SELECT {names} FROM "
                         f"ref{index} WHERE vf <= at_us AND at_us < vt")

    def at(self, t: int) -> Counter:
        """The answer at instant ``t``: the same as at the last change point at or before t."""
        point = self.changes[max(0, bisect.bisect_right(self.changes, t) - 1)]
        if point not in self._answers:
            self._answers[point] = self._evaluate(point)
        return self._answers[point]

    def _evaluate(self, t: int) -> Counter:
        try:
            rel = self.con.sql(self.sql.replace(INSTANT, str(t)))
            if self.types is None:
                self.types = [str(x) for x in rel.types]
            rows = rel.fetchall()
        except duckdb.Error as e:
            raise OracleError(f"{type(e).__name__}: {e}") from None
        return Counter(tuple(normal(v) for v in r) for r in rows)

    def close(self) -> None:
        self.con.close()


def _ts(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
