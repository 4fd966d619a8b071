"""Types of planner expressions, bottom-up, in DuckDB spellings; and the checks that report
42804 when an operation cannot apply to its operands.

>>> import sqlglot, dialect
>>> e = sqlglot.parse_one("a * 0.5 + 1", read="cql")
>>> infer(e, lambda col: "INTEGER")
'DOUBLE'
"""
from __future__ import annotations

from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import ParseError

from ..errors import DatatypeMismatch

_SMALL_INTS = ["TINYINT", "SMALLINT", "INT", "INTEGER"]
_INTS = _SMALL_INTS + ["BIGINT", "HUGEINT"]
INTEGERS = frozenset(_INTS + ["UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"])
_NUMERIC_ORDER = _INTS + ["DECIMAL", "FLOAT", "DOUBLE"]
UNKNOWN = "UNKNOWN"


@lru_cache(maxsize=1024)
def normalize(type_sql: str) -> str:
    """A declared type (any PostgreSQL spelling, or DuckDB's own, as a stream's columns keep
    TIMESTAMP(3) as TIMESTAMP_MS) as DuckDB spells it."""
    try:
        typ = exp.DataType.build(type_sql, dialect="postgres").sql("duckdb")
    except ParseError:
        typ = exp.DataType.build(type_sql, dialect="duckdb").sql("duckdb")
    return _DUCKDB_NAMES.get(typ, typ)


# sqlglot writes DuckDB's 128-bit integers by their aliases; the planner's type rules (and
# DuckDB's own type names) know them as HUGEINT
_DUCKDB_NAMES = {"INT128": "HUGEINT", "UINT128": "UHUGEINT"}


def family(t: str) -> str:
    base = t.split("(")[0].upper()
    if base in _NUMERIC_ORDER or base in ("REAL", "UBIGINT", "UINTEGER", "USMALLINT"):
        return "numeric"
    if base in ("VARCHAR", "TEXT", "CHAR"):
        return "text"
    if base == "BOOLEAN":
        return "boolean"
    if base in ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "DATE", "TIME",
                "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"):
        return "time"
    if base == "INTERVAL":
        return "interval"
    return "other" if base != UNKNOWN else UNKNOWN


def _wider(a: str, b: str) -> str:
    ba, bb = a.split("(")[0], b.split("(")[0]
    if ba not in _NUMERIC_ORDER or bb not in _NUMERIC_ORDER:
        return "DOUBLE"
    return a if _NUMERIC_ORDER.index(ba) >= _NUMERIC_ORDER.index(bb) else b


def _arith(e, column_type) -> str:
    a, b = infer(e.this, column_type), infer(e.expression, column_type)
    fa, fb = family(a), family(b)
    if UNKNOWN in (fa, fb):
        return UNKNOWN
    if fa == "numeric" and fb == "numeric":
        return _wider(a, b)          # int / int stays an integer, as in PostgreSQL
    if fa == "time" and fb == "interval" and isinstance(e, (exp.Add, exp.Sub)):
        return a
    if fa == "time" and fb == "time" and isinstance(e, exp.Sub):
        return "INTERVAL"
    op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.IntDiv: "/",
          exp.Mod: "%"}[type(e)]
    raise DatatypeMismatch(f"operator does not exist: {a} {op} {b}",
                           hint="Cast one side, e.g. CAST(x AS DOUBLE).")


def _literal(e: exp.Literal, column_type) -> str:
    if e.is_string:
        return "VARCHAR"
    return "INTEGER" if e.is_int else "DOUBLE"


def _rounded(t: str) -> str:
    """floor/ceil keep an integer's or a double's type; of a DECIMAL DuckDB gives a DECIMAL
    of its own precision, left for the back end to say."""
    return t if family(t) == "numeric" and not t.startswith("DECIMAL") else UNKNOWN


def _aggregate(e, column_type) -> str:
    if isinstance(e, exp.Count):
        return "BIGINT"
    arg = infer(e.this, column_type)
    if isinstance(e, (exp.Sum, exp.Avg)) and family(arg) not in ("numeric", UNKNOWN):
        name = "sum" if isinstance(e, exp.Sum) else "avg"
        raise DatatypeMismatch(f"function {name}({arg}) does not exist",
                               hint=f"{name.upper()} needs a number; cast the argument.")
    if isinstance(e, exp.Avg):
        return "DOUBLE"
    if isinstance(e, exp.Sum):
        # PostgreSQL: sum of int2/int4 is int8, of int8 numeric
        base = arg.split("(")[0]
        return ("BIGINT" if base in _SMALL_INTS else "HUGEINT") if base in _INTS else arg
    return arg


_RULES = {
    exp.Column: lambda e, ct: ct(e),
    exp.Literal: _literal,
    exp.Boolean: lambda e, ct: "BOOLEAN",
    exp.Null: lambda e, ct: UNKNOWN,
    exp.Cast: lambda e, ct: e.to.sql("duckdb"),
    exp.Paren: lambda e, ct: infer(e.this, ct),
    exp.Neg: lambda e, ct: infer(e.this, ct),
    exp.Interval: lambda e, ct: "INTERVAL",
    exp.Count: _aggregate, exp.Sum: _aggregate, exp.Avg: _aggregate, exp.Min: _aggregate,
    exp.Max: _aggregate,
    exp.DPipe: lambda e, ct: "VARCHAR",
    exp.Upper: lambda e, ct: "VARCHAR", exp.Lower: lambda e, ct: "VARCHAR",
    exp.Concat: lambda e, ct: "VARCHAR",
    exp.Coalesce: lambda e, ct: infer(e.this, ct),
    exp.Case: lambda e, ct: next((infer(i.args["true"], ct) for i in e.args.get("ifs", [])),
                                 UNKNOWN),
    exp.Abs: lambda e, ct: infer(e.this, ct),
    exp.Round: lambda e, ct: infer(e.this, ct),
    # the time functions dashboards group by (Grafana's $__timeGroup, date_trunc), as DuckDB
    # types them in the back end
    exp.TimestampTrunc: lambda e, ct: infer(e.this, ct),
    exp.Extract: lambda e, ct: "DOUBLE",
    exp.CurrentTimestamp: lambda e, ct: "TIMESTAMP WITH TIME ZONE",
    exp.UnixToTime: lambda e, ct: "TIMESTAMP WITH TIME ZONE",
    exp.Floor: lambda e, ct: _rounded(infer(e.this, ct)),
    exp.Ceil: lambda e, ct: _rounded(infer(e.this, ct)),
}
for _cls in (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not,
             exp.Like, exp.ILike, exp.In, exp.Between, exp.Is, exp.RegexpLike, exp.Exists):
    _RULES[_cls] = lambda e, ct: "BOOLEAN"
for _cls in (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod):
    _RULES[_cls] = _arith


def infer(e: exp.Expression, column_type) -> str:
    """The DuckDB type of ``e``; ``column_type(column_node)`` types columns. UNKNOWN where a
    function's result type is not known here (the back end's DuckDB still types it)."""
    rule = _RULES.get(type(e))
    return rule(e, column_type) if rule is not None else UNKNOWN


def check_boolean(e: exp.Expression, column_type, where: str) -> None:
    t = infer(e, column_type)
    if family(t) not in ("boolean", UNKNOWN):
        raise DatatypeMismatch(f"argument of {where} must be type boolean, not type {t}",
                               hint=f"Compare the value, e.g. {e.sql('cql')} <> 0.")
