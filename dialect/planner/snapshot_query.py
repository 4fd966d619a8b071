"""Σ in the planner: a SELECT whose own clauses need what the algebra's other operators do not
compute is planned as one Σ (``executor/plan.py``) over its FROM items, which are planned as usual.

What sends a SELECT here (``reason``): an outer join, a window function (and so a Top-N filter
over ROW_NUMBER), ORDER BY … LIMIT, a subquery in an expression, DISTINCT ON, and an aggregate the
aggregate index has no partials for (string_agg, quantiles, …). Its SQL is kept as written and
run by DuckDB on each instant's snapshot: every FROM item of it and of the subqueries in its
expressions becomes a read of that input's tuples valid at the instant ``"__c"."__t"``
(``input_read``), and the whole is a LATERAL join of the instants with it (``lateral``).
DuckDB binds it once at plan time, so a name or function that does not exist is refused then.

>>> import sqlglot, dialect
>>> sel = sqlglot.parse_one("SELECT a.k FROM s [RANGE '1 second'] AS a LEFT JOIN t AS b "
...                         "ON a.k = b.k", read="cql")
>>> reason(sel, lambda name: False)
'LEFT JOIN'
"""
from __future__ import annotations

import duckdb
import sqlglot
from sqlglot import exp

from executor import duck
from executor.batches import TE, TS
from executor.duck import quote

from .. import expressions as X
from ..errors import (AmbiguousColumn, GroupingError, PlanError, UndefinedColumn,
                      UndefinedRelation, Unsupported, written_at)
from .check_expressions import binding_error, is_aggregate_call
from .split_aggregates import is_aggregate

INSTANT = '"__c"."__t"'
PSEUDO = ("valid_from", "valid_to")


def _clauses(sel: exp.Select) -> list:
    """The expressions of ``sel``'s own clauses (its FROM items' queries are not among them)."""
    out = list(sel.expressions)
    for key in ("where", "having", "qualify", "order", "group"):
        if sel.args.get(key) is not None:
            out.append(sel.args[key])
    out += [j.args["on"] for j in sel.args.get("joins") or [] if j.args.get("on") is not None]
    distinct = sel.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        out.append(distinct.args["on"])
    return out


def _aggregate_without_partials(node, user_aggregate) -> bool:
    if isinstance(node, exp.Filter):
        node = node.this
    if not is_aggregate_call(node, user_aggregate):
        return False
    if not is_aggregate(node, user_aggregate):
        return True
    inner = node.this if isinstance(node.this, exp.Distinct) else None
    return (inner is not None and len(inner.expressions) != 1) or \
        node.find(exp.Order) is not None


def reason(sel: exp.Select, user_aggregate, joins: bool = True) -> str | None:
    """What in ``sel``'s own clauses only Σ computes (None: the algebra's operators do);
    ``joins``: outer joins count (the planner tries them as hash joins first)."""
    for j in sel.args.get("joins") or [] if joins else []:
        side = (j.side or "").upper()
        if side in ("LEFT", "RIGHT", "FULL"):
            return f"{side} JOIN"
    distinct = sel.args.get("distinct")
    if distinct is not None and distinct.args.get("on") is not None:
        return "DISTINCT ON"
    if sel.args.get("order") is not None and sel.args.get("limit") is not None:
        return "ORDER BY … LIMIT"
    for part in _clauses(sel):
        for node in part.walk():
            if isinstance(node, exp.Window):
                return "a window function"
            if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
                return "a subquery in an expression"
            if _aggregate_without_partials(node, user_aggregate):
                return f"the aggregate {node.sql('cql').split('(', 1)[0].lower()}()"
    if sel.args.get("qualify") is not None:
        return "QUALIFY"
    return None


def expression_selects(sel: exp.Select) -> list:
    """The SELECTs inside ``sel``'s expressions (at any depth, but not inside a query in some
    FROM: that one is planned on its own), outermost first."""
    out = []
    for part in _clauses(sel):
        for node in part.find_all(exp.Select):
            if not _in_from_item(node, sel):
                out.append(node)
    return out


def _in_from_item(node: exp.Expression, top: exp.Select) -> bool:
    while node is not top and node is not None:
        parent = node.parent
        if isinstance(node, exp.Subquery) and isinstance(parent, (exp.From, exp.Join)):
            return True
        node = parent
    return False


def from_items(sel: exp.Select) -> list:
    from_ = sel.args.get("from_")
    if from_ is None:
        raise Unsupported("a subquery over a stream needs a FROM clause")
    return [from_.this] + [j.this for j in sel.args.get("joins") or []]


def exposed(columns: list) -> list:
    """(column as the query names it, plan name) of an input: a name the input repeats
    (SELECT a.k, b.k in a query in FROM) is exposed by its plan name (k_2) after the first."""
    seen, out = set(), []
    for shown, plan_name in columns:
        name = shown if shown.lower() not in seen else plan_name.split(".", 1)[-1]
        seen.add(name.lower())
        out.append((name, plan_name))
    return out


def input_read(k: int, alias: str, columns: list, table: bool = False) -> exp.Expression:
    """FROM item ``alias`` as a read of input k's tuples valid at the instant (or lookup
    table k's rows), its columns ``exposed`` as the query names them."""
    cols = ", ".join(f"{quote(p)} AS {quote(n)}" for n, p in columns)
    source = f'"__tb{k}"' if table else \
        f'"__in{k}" WHERE "{TS}" <= {INSTANT} AND {INSTANT} < "{TE}"'
    text = f"(SELECT {cols} FROM {source}) AS {quote(alias)}"
    return sqlglot.parse_one(f"SELECT * FROM {text}", read="duckdb").args["from_"].this


def strip_stream_windows(sel: exp.Select) -> None:
    """Drop ``WINDOW s AS [RANGE …]`` (read into the inputs); SQL's named windows stay."""
    kept = [w for w in sel.args.get("windows") or [] if not isinstance(w, X.StreamWindowClause)]
    sel.set("windows", kept or None)


def refuse_pseudo(sel: exp.Select, has_column) -> None:
    """valid_from and valid_to belong to the outer query's select list alone."""
    for node in sel.walk():
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("wtime", "wstart", "wend"):
            raise Unsupported(f"{node.name.lower()}(*) cannot be read in this query",
                              position=written_at(node),
                              hint="Select it in a query over this one, or (wstart, wend) in "
                                   "a query in FROM under a name.")
        if isinstance(node, exp.Column) and not node.table and \
                node.name.lower() in PSEUDO and not has_column(node.name):
            raise Unsupported(f"{node.name.lower()} can only be selected, in the select list of "
                              "the outermost query here", position=written_at(node),
                              hint="Select it in a query over this one.")


def lateral(inner: str, names: list) -> str:
    """The query over every instant of ``"__c"``: ``__t`` and the inner query's columns."""
    return (f'SELECT {INSTANT} AS "__t", "__q".* FROM "__c", LATERAL ({inner}) AS "__q"('
            + ", ".join(map(quote, names)) + ")")


def typed(sql: str, inputs: list, tables: list, written: exp.Expression, function_exists) -> list:
    """(name, DuckDB type) of each column of the lateral query ``sql`` (without its column
    names), bound over empty inputs (each a list of plan Columns): the user's error, when
    DuckDB cannot bind it."""
    interval = f"0::BIGINT AS {TS}, 0::BIGINT AS {TE}"
    ctes = ['"__c" AS (SELECT 0::BIGINT AS "__t" LIMIT 0)']
    ctes += [f'"__in{k}" AS ({duck.empty_select(cols, interval)})'
             for k, cols in enumerate(inputs)]
    ctes += [f'"__tb{j}" AS ({duck.empty_select(cols)})' for j, cols in enumerate(tables)]
    try:
        return duck.query_columns("WITH " + ", ".join(ctes) + " " + sql)
    except duckdb.Error as e:
        raise _user_error(e, written, function_exists) from None


# DuckDB's binder messages, as PostgreSQL's errors
_BINDER = (
    ("Referenced column", lambda name: UndefinedColumn(
        f'column "{name}" does not exist',
        hint="Name a column of a relation in FROM (the query's or a subquery's).")),
    ("Referenced table", lambda name: UndefinedRelation(
        f'missing FROM-clause entry for table "{name}"',
        hint="Qualify columns with a relation or alias named in FROM.")),
    ("Ambiguous reference to column name", lambda name: AmbiguousColumn(
        f'column reference "{name}" is ambiguous',
        hint="Qualify it with the alias of its relation.")),
    ("must appear in the GROUP BY clause", lambda name: GroupingError(
        f'column "{name}" must appear in the GROUP BY clause or be used in an aggregate '
        "function", hint="Add it to GROUP BY, or aggregate it, e.g. MAX(...).")),
)


def _user_error(e: duckdb.Error, written: exp.Expression, function_exists) -> PlanError:
    text = str(e).split("\n")[0]
    if isinstance(e, duckdb.BinderException):
        for marker, make in _BINDER:
            if marker in text:
                name = text.split('"')[1] if text.count('"') >= 2 else "?"
                return make(name)
    return binding_error(e, written, function_exists)
