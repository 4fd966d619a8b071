"""Two-phase aggregation (seed 000 §3.3): cut each select expression through its aggregate
calls; phase one computes the partial aggregates, phase two the expression over them.
AVG(x) becomes sum(x) / count(x); (MIN(v) + MAX(v)) / 2 uses partials min and max; equal
partials are computed once. ``DISTINCT`` inside COUNT, SUM and AVG counts each value once
(``count_distinct``, ``sum_distinct``); ``FILTER (WHERE p)`` feeds the partial only the rows
where p holds (its argument becomes ``CASE WHEN p THEN x END``, which every partial skips
where NULL). A SELECT with an aggregate that has no partials is planned as Σ instead
(``snapshot_query.reason``); one that still reaches here is 0A000, naming it.

>>> import sqlglot, dialect
>>> e = sqlglot.parse_one("(MIN(v) + MAX(v)) / 2 + AVG(v)", read="cql")
>>> final, partials = split_aggregates([e], lambda n: False)
>>> [(p.name, p.func, p.arg.sql("cql") if p.arg is not None else None) for p in partials]
[('p0', 'min', 'v'), ('p1', 'max', 'v'), ('p2', 'sum', 'v'), ('p3', 'count', 'v')]
>>> final[0].sql("cql")
'(p0 + p1) / 2 + CAST(p2 AS DOUBLE PRECISION) / p3'
>>> e = sqlglot.parse_one("COUNT(*) FILTER (WHERE v > 0)", read="cql")
>>> [(p.func, p.arg.sql("cql")) for p in split_aggregates([e], lambda n: False)[1]]
[('count', 'CASE WHEN v > 0 THEN 1 END')]
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import GroupingError, Unsupported, written_at
from .check_expressions import is_aggregate_call, shown_name

SUPPORTED = "COUNT, SUM, AVG, MIN and MAX (with DISTINCT and FILTER)"


@dataclass(frozen=True)
class PartialCall:
    name: str
    func: str
    arg: exp.Expression | None


def func_name(e: exp.Expression) -> str | None:
    """A call's name as written (MEDIAN(x) parses as a node of its own, not Anonymous)."""
    if isinstance(e, exp.Anonymous):
        return e.name.lower()
    return e.sql_name().lower() if isinstance(e, exp.Func) else None


def is_user_aggregate(e: exp.Expression, user_aggregate) -> bool:
    name = func_name(e)
    return name is not None and user_aggregate(name)


def is_aggregate(e: exp.Expression, user_aggregate) -> bool:
    """Whether ``e`` is an aggregate the back end computes."""
    return isinstance(e, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)) or \
        is_user_aggregate(e, user_aggregate)


def _distinct_arg(e: exp.Expression) -> exp.Expression | None:
    """x of ``F(DISTINCT x)``; None when the call is not DISTINCT."""
    if not isinstance(e.this, exp.Distinct):
        return None
    inner = e.this.expressions
    if len(inner) != 1:
        raise Unsupported(f"{shown_name(e).upper()}(DISTINCT ...) of several columns is not "
                          "supported", position=written_at(e),
                          hint="Aggregate one expression, e.g. COUNT(DISTINCT (a || b)).")
    return inner[0]


def _filtered(arg, cond):
    if cond is None or arg is None:
        return arg
    return exp.Case(ifs=[exp.If(this=cond.copy(), true=arg.copy())])


def _phase_one(e: exp.Expression, user_aggregate, cond) -> tuple:
    """[(func, arg)] the call needs, and how to combine them (a function of partial names);
    ``cond``: its FILTER's condition, or None."""
    if is_user_aggregate(e, user_aggregate):
        args = e.expressions if isinstance(e, exp.Anonymous) else [e.this]
        return [(func_name(e), _filtered(args[0], cond) if args else None)], _only
    distinct = _distinct_arg(e)
    if distinct is not None:
        arg = _filtered(distinct, cond)
        return _DISTINCT[type(e)](arg)
    if isinstance(e, exp.Count) and isinstance(e.this, exp.Star):
        if cond is None:
            return [("count_star", None)], _only
        return [("count", _filtered(exp.Literal.number(1), cond))], _only
    arg = _filtered(e.this, cond)
    if isinstance(e, exp.Count):
        return [("count", arg)], _only
    if isinstance(e, exp.Avg):
        return [("sum", arg), ("count", arg)], _average
    return [(type(e).__name__.lower(), arg)], _only


def _only(names):
    """The final of an aggregate that is its one partial."""
    return exp.column(names[0])


def _average(names):
    return exp.Div(this=exp.Cast(this=exp.column(names[0]), to=exp.DataType.build("DOUBLE")),
                   expression=exp.column(names[1]))


# F(DISTINCT x): each value once
_DISTINCT = {
    exp.Count: lambda a: ([("count_distinct", a)], _only),
    exp.Sum: lambda a: ([("sum_distinct", a)], _only),
    exp.Avg: lambda a: ([("sum_distinct", a), ("count_distinct", a)], _average),
    exp.Min: lambda a: ([("min", a)], _only),
    exp.Max: lambda a: ([("max", a)], _only),
}


def split_aggregates(expressions: list, user_aggregate) -> tuple[list, list]:
    """(final expressions over partial names ``p0``, ``p1``, …, partial calls)."""
    partials: list[PartialCall] = []
    index: dict = {}

    def partial_name(func: str, arg) -> str:
        key = (func, arg.sql("cql") if arg is not None else None)
        if key not in index:
            index[key] = f"p{len(partials)}"
            partials.append(PartialCall(index[key], func, arg))
        return index[key]

    def cut(node):
        cond = None
        call = node
        if isinstance(node, exp.Filter) and is_aggregate_call(node.this, user_aggregate):
            call, cond = node.this, node.expression.this
        if not is_aggregate_call(call, user_aggregate):
            return node
        if not is_aggregate(call, user_aggregate):
            raise Unsupported(f"aggregate function {shown_name(call)}() is not supported in "
                              "continuous queries yet", position=written_at(call),
                              hint=f"A continuous GROUP BY computes {SUPPORTED}, and "
                                   "user-defined aggregates.")
        nested = [y for y in call.walk() if y is not call] + \
            (list(cond.walk()) if cond is not None else [])
        if any(is_aggregate_call(y, user_aggregate) for y in nested):
            raise GroupingError("aggregate function calls cannot be nested",
                                position=written_at(call),
                                hint="Aggregate the inner aggregate's rows in an outer query: "
                                     "SELECT MAX(n) FROM (SELECT COUNT(*) AS n … GROUP BY …) "
                                     "AS c.")
        needs, combine = _phase_one(call, user_aggregate, cond)
        return combine([partial_name(f, a) for f, a in needs])

    finals = [e.copy().transform(cut) for e in expressions]
    return finals, partials
