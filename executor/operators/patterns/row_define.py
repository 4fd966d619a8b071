"""A row pattern's DEFINE terms that look at other rows of the match, evaluated row by row as
the matcher tries a row for a variable (the tree dialect/planner/row_define.py makes).

NULL is SQL's: comparisons and arithmetic with NULL are NULL, AND/OR/NOT three-valued, and
a row is the variable's only when the terms are true. A row that does not exist (no row of
X yet, an offset past the first) reads as NULL."""
from __future__ import annotations

import math
import operator
from decimal import Decimal

from ..base import QueryError


class Path:
    """A match attempt so far: ``chain`` labels the rows before ``i`` from the last back
    (nested pairs, as the matcher builds them), and row ``i`` is tried as ``var``'s."""
    __slots__ = ("var", "i", "chain")

    def __init__(self, var: str, i: int, chain):
        self.var, self.i, self.chain = var, i, chain

    def rows_back(self, x: str):
        """X's rows of the attempt, from the last back (row ``i`` first when X is var)."""
        if x == self.var:
            yield self.i
        k, chain = self.i - 1, self.chain
        while chain is not None:
            v, chain = chain
            if v == x:
                yield k
            k -= 1

    def row(self, how: str, x: str, offset: int):
        """The row (index in the run) a reference reads, or None."""
        if how == "first":
            rows = list(self.rows_back(x))
            return rows[-1 - offset] if offset < len(rows) else None
        last = next((r for n, r in enumerate(self.rows_back(x))
                     if n == (offset if how == "last" else 0)), None)
        if how == "prev" and last is not None:
            return last - offset if last - offset >= 0 else None
        return last


def _meet(a, b):
    """Two values as one type: an exact number meets a float as a float (as DuckDB
    casts DECIMAL and DOUBLE); other mixes are the query's error."""
    if isinstance(a, Decimal) and isinstance(b, float):
        return float(a), b
    if isinstance(a, float) and isinstance(b, Decimal):
        return a, float(b)
    return a, b


def _compare(f):
    def run(a, b):
        if a is None or b is None:
            return None
        a, b = _meet(a, b)
        try:
            return f(a, b)
        except TypeError:
            raise QueryError(f"cannot compare or combine {type(a).__name__} and "
                             f"{type(b).__name__} in DEFINE", "42804",
                             hint="Give both sides one type, or put the condition in a term "
                                  "about the row alone.") from None
    return run


def _divide(f):
    def run(a, b):
        if a is None or b is None:
            return None
        if b == 0:
            raise QueryError("division by zero", "22012")
        return _compare(f)(a, b)
    return run


def _modulo(a, b):
    """The remainder with the dividend's sign (C's, DuckDB's), exact for integers."""
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return math.fmod(a, b)


_BINARY = {"=": _compare(operator.eq), "<>": _compare(operator.ne),
           "<": _compare(operator.lt), "<=": _compare(operator.le),
           ">": _compare(operator.gt), ">=": _compare(operator.ge),
           "+": _compare(operator.add), "-": _compare(operator.sub),
           "*": _compare(operator.mul), "/": _divide(operator.truediv),    # DuckDB's /
           "%": _divide(_modulo)}


def _logic(decisive: bool):
    """AND (False decides) or OR (True decides), three-valued."""
    def run(t, path, cols):
        a = evaluate(t[2], path, cols)
        if a is decisive:
            return decisive
        b = evaluate(t[3], path, cols)
        if b is decisive:
            return decisive
        return None if a is None or b is None else not decisive
    return run


_LOGIC = {"AND": _logic(False), "OR": _logic(True)}


def _op(t, path, cols):
    if t[1] in _LOGIC:
        return _LOGIC[t[1]](t, path, cols)
    return _BINARY[t[1]](evaluate(t[2], path, cols), evaluate(t[3], path, cols))


def _ref(t, path, cols):
    _, how, var, column, offset = t
    row = path.row(how, var, offset)
    return None if row is None else cols[column][row]


def _not(t, path, cols):
    a = evaluate(t[1], path, cols)
    return None if a is None else not a


def _neg(t, path, cols):
    a = evaluate(t[1], path, cols)
    return None if a is None else -a


_EVAL = {"lit": lambda t, path, cols: t[1], "ref": _ref, "op": _op, "not": _not,
         "isnull": lambda t, path, cols: evaluate(t[1], path, cols) is None, "neg": _neg}


def evaluate(t, path: Path, cols: dict):
    """The tree's value on ``path``; ``cols``: column name -> the run's values (a list)."""
    return _EVAL[t[0]](t, path, cols)


def holds(t, path: Path, cols: dict) -> bool:
    return evaluate(t, path, cols) is True


def columns(t) -> set:
    """The input columns a tree reads."""
    if t[0] == "ref":
        return {t[3]}
    return set().union(*(columns(a) for a in t[1:] if isinstance(a, tuple)))


def prev_reach(t) -> int:
    """How many rows before a match's first a tree's PREV can read."""
    if t[0] == "ref":
        return t[4] if t[1] == "prev" else 0
    return max((prev_reach(a) for a in t[1:] if isinstance(a, tuple)), default=0)
