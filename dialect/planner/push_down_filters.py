"""Place each conjunct of WHERE and ON as low as it keeps its meaning: a conjunct over one
relation filters that relation (below a time window, with which it commutes; above a ROWS
window, whose count it would change); one over several relations goes to the first join that
has them all, as a hash key when it is an equality between the two sides, else as a residual;
that join also gets its order facts (``join_state``: what lets it drop stored tuples).

>>> c = [Conjunct("a>1", frozenset("a")),
...      Conjunct("b.k=a.k", frozenset("ab"), ("b.k", "a.k"), ({"b"}, {"a"})),
...      Conjunct("a<b", frozenset("ab")), Conjunct("1=1", frozenset())]
>>> p = push_down_filters(c, ["a", "b"])
>>> p.scan["a"], p.joins[1], p.top
(['a>1'], ([('a.k', 'b.k')], ['a<b']), ['1=1'])
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from executor import plan as P


@dataclass(frozen=True)
class Conjunct:
    expr: object                  # the algebra Expr (opaque here)
    aliases: frozenset            # relations it reads
    equi: tuple | None = None     # (side expr, side expr) when it is an equality of two sides
    sides: tuple = ()             # (aliases of equi[0], aliases of equi[1])
    bounds: tuple = ()            # its order facts (join_state.Bound)


@dataclass
class Placement:
    scan: dict = field(default_factory=dict)     # alias -> [Expr]
    joins: dict = field(default_factory=dict)    # join step k -> ([equi], [residual])
    bounds: dict = field(default_factory=dict)   # join step k -> [Bound]
    top: list = field(default_factory=list)


def push_down_filters(conjuncts: list, order: list) -> Placement:
    """``order``: relation aliases in join order; join step k joins order[k] to order[:k]."""
    out = Placement()
    position = {a: i for i, a in enumerate(order)}
    for c in conjuncts:
        if not c.aliases:
            out.top.append(c.expr)
            continue
        if len(c.aliases) == 1:
            out.scan.setdefault(next(iter(c.aliases)), []).append(c.expr)
            continue
        k = max(position[a] for a in c.aliases)
        equi, residual = out.joins.setdefault(k, ([], []))
        out.bounds.setdefault(k, []).extend(c.bounds)
        before = set(order[:k])
        if c.equi is not None and _splits(c.sides, before, order[k]):
            # (earlier side, new side): the hash index is built on the new relation
            equi.append(c.equi if c.sides[0] <= before else (c.equi[1], c.equi[0]))
        else:
            residual.append(c.expr)
    return out


def outer_placement(on: list, where: list, order: list) -> Placement:
    """The conjuncts of an outer join of two relations (``order``): every one of ON stays
    in the join (the equalities of the two sides as hash keys), since a filter below would
    drop a tuple the join must keep padded, and every one of WHERE goes above it, where it
    sees the padded rows' NULLs.

    >>> on = [Conjunct("a.k=b.k", frozenset("ab"), ("a.k", "b.k"), ({"a"}, {"b"})),
    ...       Conjunct("b>1", frozenset("b"))]
    >>> p = outer_placement(on, [Conjunct("a<2", frozenset("a"))], ["a", "b"])
    >>> p.joins[1], p.top, p.scan
    (([('a.k', 'b.k')], ['b>1']), ['a<2'], {})
    """
    out = Placement(top=[c.expr for c in where])
    equi, residual = out.joins.setdefault(1, ([], []))
    for c in on:
        if c.equi is not None and _splits(c.sides, {order[0]}, order[1]):
            equi.append(c.equi if c.sides[0] == {order[0]} else (c.equi[1], c.equi[0]))
        else:
            residual.append(c.expr)
    return out


def _splits(sides: tuple, before: set, new: str) -> bool:
    a, b = sides
    return (a <= before and b == {new}) or (b <= before and a == {new})


def conjunction(exprs: list) -> P.Expr | None:
    """The AND of algebra expressions (None for none; kernel trees kept when all have one)."""
    if not exprs:
        return None
    if len(exprs) == 1:
        return exprs[0]
    cols = tuple(dict.fromkeys(c for e in exprs for c in e.columns))
    trees = [e.tree for e in exprs]
    tree = None if None in trees else functools.reduce(lambda a, b: ("and", a, b), trees)
    return P.Expr(" AND ".join(f"({e.sql})" for e in exprs), cols, "BOOLEAN", tree)
