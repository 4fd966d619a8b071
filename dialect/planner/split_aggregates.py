"""Two-phase aggregation (seed 000 §3.3): cut each select expression through its aggregate
calls; phase one computes the partial aggregates, phase two the expression over them.
AVG(x) becomes sum(x) / count(x); (MIN(v) + MAX(v)) / 2 uses partials min and max; equal
partials are computed once.

>>> import sqlglot, dialect
>>> e = sqlglot.parse_one("(MIN(v) + MAX(v)) / 2 + AVG(v)", read="cql")
>>> final, partials = split_aggregates([e], lambda n: False)
>>> [(p.name, p.func, p.arg.sql("cql") if p.arg is not None else None) for p in partials]
[('p0', 'min', 'v'), ('p1', 'max', 'v'), ('p2', 'sum', 'v'), ('p3', 'count', 'v')]
>>> final[0].sql("cql")
'(p0 + p1) / 2 + CAST(p2 AS DOUBLE PRECISION) / p3'
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ..errors import Unsupported


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
    return isinstance(e, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)) or \
        is_user_aggregate(e, user_aggregate)


def _phase_one(e: exp.Expression, user_aggregate) -> list:
    """[(func, arg)] the call needs, and how to combine them (a function of partial names)."""
    if is_user_aggregate(e, user_aggregate):
        args = e.expressions if isinstance(e, exp.Anonymous) else [e.this]
        return [(func_name(e), args[0] if args else None)], lambda n: exp.column(n[0])
    arg = e.this
    if isinstance(e, exp.Count):
        if isinstance(e.this, exp.Star):
            return [("count_star", None)], lambda n: exp.column(n[0])
        if isinstance(e.this, exp.Distinct):
            inner = e.this.expressions
            if len(inner) != 1:
                raise Unsupported("COUNT(DISTINCT ...) of several columns is not supported",
                                  hint="Count one expression, e.g. COUNT(DISTINCT (a || b)).")
            return [("count_distinct", inner[0])], lambda n: exp.column(n[0])
        return [("count", arg)], lambda n: exp.column(n[0])
    if isinstance(e, exp.Avg):
        return [("sum", arg), ("count", arg)], lambda n: exp.Div(
            this=exp.Cast(this=exp.column(n[0]), to=exp.DataType.build("DOUBLE")),
            expression=exp.column(n[1]))
    if isinstance(e, (exp.Sum, exp.Min, exp.Max)):
        return [(type(e).__name__.lower(), arg)], lambda n: exp.column(n[0])
    raise Unsupported(f"aggregate {e.sql('cql')} is not supported")


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
        if is_aggregate(node, user_aggregate):
            if any(is_aggregate(x, user_aggregate) for x in node.find_all(exp.Func)
                   if x is not node):
                raise Unsupported("aggregate calls cannot be nested")
            needs, combine = _phase_one(node, user_aggregate)
            return combine([partial_name(f, a) for f, a in needs])
        return node

    finals = [e.copy().transform(cut) for e in expressions]
    return finals, partials
