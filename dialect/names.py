"""PostgreSQL's naming rules, shared by the gateway and the planner: the PostgreSQL name of a
type as written in SQL, and the name PostgreSQL gives an unaliased output column.

>>> import sqlglot, dialect
>>> pg_column_name(sqlglot.parse_one("SELECT count(*)", read="cql").expressions[0])
'count'
>>> pg_column_name(sqlglot.parse_one("SELECT x::int4[]", read="cql").expressions[0])
'x'
"""
from __future__ import annotations

from sqlglot import exp

# SQL spellings a user may write in a cast -> pg type name
TYPE_ALIASES = {
    "integer": "int4", "int": "int4", "int4": "int4", "smallint": "int2", "int2": "int2",
    "bigint": "int8", "int8": "int8", "real": "float4", "float4": "float4",
    "double precision": "float8", "double": "float8", "float8": "float8", "float": "float8",
    "boolean": "bool", "bool": "bool", "text": "text", "varchar": "varchar",
    "character varying": "varchar", "char": "bpchar", "character": "bpchar", "bpchar": "bpchar",
    "numeric": "numeric", "decimal": "numeric", "date": "date", "time": "time",
    "timestamp": "timestamp", "timestamptz": "timestamptz",
    "timestamp with time zone": "timestamptz", "timestamp without time zone": "timestamp",
    "interval": "interval", "uuid": "uuid", "json": "json", "jsonb": "jsonb", "bytea": "bytea",
    "oid": "oid", "name": "name", "regclass": "regclass", "regtype": "regtype",
    "regproc": "regproc", "xid": "xid", "timetz": "timetz", "money": "money",
    "uint": "oid",   # how the cql dialect spells oid
}



def fold(text: str) -> str:
    """An identifier as written, as PostgreSQL keeps it: quoted keeps its case (and its
    doubled quotes become one), unquoted folds to lower case.

    >>> fold('"Mixed""Case"'), fold('Plain')
    ('Mixed"Case', 'plain')
    """
    text = text.strip()
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1].replace('""', '"')
    return text.lower()


def folded(node) -> str:
    """A parsed identifier (sqlglot) as PostgreSQL keeps it; "" for none."""
    if node is None:
        return ""
    return node.name if getattr(node, "quoted", False) else node.name.lower()


def quote(name: str) -> str:
    """A name as a quoted identifier, safe in any SQL we generate.

    >>> quote('a"b')
    '"a""b"'
    """
    return '"' + name.replace('"', '""') + '"'


def pg_type_name(spelling: str) -> tuple[str | None, bool]:
    """(pg type name, is_array) for a SQL type spelling such as ``integer[]``."""
    n = spelling.strip().lower().replace("pg_catalog.", "").strip('"')
    arr = n.endswith("[]")
    if arr:
        n = n[:-2].strip()
    n = n.split("(")[0].strip()
    return TYPE_ALIASES.get(n, n), arr


def type_name(dt_: exp.DataType) -> str:
    """The lower-case PostgreSQL name of a sqlglot DataType (pg_catalog. stripped)."""
    this = dt_.this
    if this == exp.DataType.Type.USERDEFINED:
        kind = dt_.args.get("kind")
        name = kind.sql("postgres") if kind is not None else ""
        return name.replace("pg_catalog.", "").strip('"').lower() if name != '"char"' else '"char"'
    if isinstance(this, str):
        return this.lower()
    return dt_.sql("postgres").lower()


_FUNC_NAMES = {exp.CurrentTimestamp: "now", exp.CurrentDate: "current_date",
               exp.CurrentTime: "current_time", exp.CurrentUser: "current_user",
               exp.CurrentSchema: "current_schema", exp.Count: "count", exp.Sum: "sum",
               exp.Avg: "avg", exp.Min: "min", exp.Max: "max", exp.Coalesce: "coalesce",
               exp.Case: "case", exp.If: "case", exp.Array: "array", exp.ArrayAgg: "array_agg",
               exp.Exists: "exists", exp.Substring: "substring", exp.Lower: "lower",
               exp.Upper: "upper", exp.Length: "length", exp.Nullif: "nullif",
               exp.Greatest: "greatest", exp.Least: "least", exp.Round: "round",
               exp.Abs: "abs", exp.Concat: "concat", exp.Trim: "btrim", exp.Extract: "extract",
               exp.GroupConcat: "string_agg", exp.Stddev: "stddev", exp.Variance: "variance",
               exp.RowNumber: "row_number"}


def pg_column_name(e: exp.Expression) -> str:
    """The name PostgreSQL gives an unaliased output column (its FigureColname rules)."""
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Dot):
        return pg_column_name(e.expression)
    if isinstance(e, exp.Cast):
        inner = pg_column_name(e.this)
        if inner != "?column?":
            return inner
        # PostgreSQL names x::int4[] after int4, x::integer after int4
        return pg_type_name(type_name(e.to))[0]
    if isinstance(e, exp.Paren):
        return pg_column_name(e.this)
    if isinstance(e, exp.Anonymous):
        return e.name.split(".")[-1].lower()
    for cls, name in _FUNC_NAMES.items():
        if isinstance(e, cls):
            return name
    if isinstance(e, exp.Func) and not isinstance(e, (exp.Binary, exp.Unary)):
        return (e.sql_name() or "?column?").lower()
    if isinstance(e, exp.Subquery) and isinstance(e.this, exp.Select) and e.this.expressions:
        return e.this.expressions[0].alias_or_name or pg_column_name(e.this.expressions[0])
    return "?column?"


