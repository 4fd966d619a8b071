"""An expression as the small tree the back end's Arrow kernels evaluate
(``executor/expressions/kernels.py``), or None when it uses anything beyond them: columns,
number, text and boolean literals,
+ − × / %, CAST(… AS DOUBLE), comparisons, BETWEEN, AND/OR/NOT and IS [NOT] NULL."""
from __future__ import annotations

from sqlglot import exp

_BINARY = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div", exp.IntDiv: "div",
           exp.Mod: "mod",
           exp.EQ: "eq", exp.NEQ: "ne", exp.LT: "lt", exp.LTE: "le", exp.GT: "gt",
           exp.GTE: "ge", exp.And: "and", exp.Or: "or"}
_UNARY = {exp.Neg: "neg", exp.Not: "not"}


class _Beyond(Exception):
    pass


def _number(text: str) -> tuple:
    if text.isdigit():
        return ("int", text)
    if "e" in text.lower():
        return ("float", text)
    return ("dec", text)


def _literal(node: exp.Literal) -> tuple:
    return ("str", node.this) if node.is_string else _number(node.this)


def _is(node: exp.Is) -> tuple:
    if not isinstance(node.expression, exp.Null):
        raise _Beyond
    tree = ("is_null", _tree(node.this))
    return ("not", tree) if node.args.get("negate") else tree


def _cast(node: exp.Cast) -> tuple:
    if type(node) is not exp.Cast or node.to.this != exp.DataType.Type.DOUBLE:
        raise _Beyond                       # TRY_CAST, and other types: DuckDB
    return ("cast", _tree(node.this), "double")


def _between(node: exp.Between) -> tuple:
    if node.args.get("symmetric"):
        raise _Beyond
    # what BETWEEN means in SQL, NULLs included: low <= x AND x <= high
    this = _tree(node.this)
    return ("and", ("ge", this, _tree(node.args["low"])), ("le", this, _tree(node.args["high"])))


_LEAVES = {
    exp.Column: lambda node: ("col", node.name),
    exp.Literal: _literal,
    exp.Boolean: lambda node: ("bool", bool(node.this)),
    exp.Paren: lambda node: _tree(node.this),
    exp.Is: _is,
    exp.Cast: _cast,
    exp.Between: _between,
}


def _tree(node: exp.Expression) -> tuple:
    kind = type(node)
    if kind in _LEAVES:
        return _LEAVES[kind](node)
    if kind in _BINARY and not node.args.get("safe"):       # safe: NULL, not an error
        return (_BINARY[kind], _tree(node.this), _tree(node.expression))
    if kind in _UNARY:
        return (_UNARY[kind], _tree(node.this))
    raise _Beyond


def kernel_tree(node: exp.Expression) -> tuple | None:
    """``node`` (columns already renamed to the back end's names) as a kernel tree, or None."""
    try:
        return _tree(node)
    except _Beyond:
        return None
