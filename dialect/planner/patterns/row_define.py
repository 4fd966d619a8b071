"""A row pattern's DEFINE split in two: the terms about the row alone (SQL, decided for whole
batches) and the terms that look at other rows of the match (another variable's row, LAST or
FIRST with an offset, PREV) as a small expression tree the executor evaluates row by row as
a match grows (executor/operators/patterns/row_define.py reads it).

The tree is plain tuples, so the plan stays JSON: ``("lit", value)``, ``("ref", how, var,
column, offset)`` with ``how`` last / first / prev, ``("op", symbol, a, b)``, ``("not", a)``,
``("isnull", a)``, ``("neg", a)``. As the SQL standard reads DEFINE of V: the row being
classified is V's (its last so far), ``X.col`` is X's last row so far, ``LAST(X.col, n)`` the
n-th before it, ``FIRST(X.col, n)`` the n-th after X's first, ``PREV(X.col, n)`` the row n
before X.col's row in the partition, whether in the match or not.
"""
from __future__ import annotations

from sqlglot import exp

from ...errors import Unsupported, written_at

_OPS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
        exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
        exp.And: "AND", exp.Or: "OR"}
_NAVIGATION = ("PREV", "NEXT")


def looks_elsewhere(e: exp.Expression, var: str) -> bool:
    """Whether a DEFINE term of ``var`` reads a row other than the one it classifies."""
    for node in e.walk():
        if isinstance(node, (exp.First, exp.Last)):
            return True
        if isinstance(node, exp.Anonymous) and node.name.upper() in _NAVIGATION:
            return True
        if isinstance(node, exp.Column) and node.table and node.table.upper() != var:
            return True
    return False


def split(cond: exp.Expression, var: str) -> tuple[list, list]:
    """DEFINE's conjuncts: (about the row alone, looking at other rows)."""
    terms = list(cond.flatten()) if isinstance(cond, exp.And) else [cond]
    own = [t for t in terms if not looks_elsewhere(t, var)]
    return own, [t for t in terms if looks_elsewhere(t, var)]


def tree(e: exp.Expression, var: str, variables: list, column_name) -> tuple:
    """``e`` (a DEFINE term of ``var``) as the executor's tree; ``column_name(col)`` gives a
    column's name in the input. What it cannot evaluate row by row is refused (0A000)."""
    def ref(how: str, col: exp.Column, offset: int) -> tuple:
        of = col.table.upper() if col.table else var
        if of not in variables:
            raise Unsupported(f'DEFINE {var} names "{col.table}", which PATTERN does not use',
                              position=written_at(col))
        return ("ref", how, of, column_name(col.name), offset)

    def walk(node) -> tuple:
        if isinstance(node, exp.Paren):
            return walk(node.this)
        if type(node) in _OPS:
            return ("op", _OPS[type(node)], walk(node.this), walk(node.expression))
        if isinstance(node, exp.Not):
            return ("not", walk(node.this))
        if isinstance(node, exp.Neg):
            return ("neg", walk(node.this))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            test = ("isnull", walk(node.this))
            return ("not", test) if node.args.get("negate") else test
        if isinstance(node, exp.Column):
            return ref("last", node, 0)
        if isinstance(node, exp.Between):
            x = walk(node.this)
            return ("op", "AND", ("op", ">=", x, walk(node.args["low"])),
                    ("op", "<=", x, walk(node.args["high"])))
        nav = navigation(node)
        if nav is not None:
            how, col, n, default = nav
            return ref(how, col, offset(node, n, default))
        if isinstance(node, exp.Boolean):
            return ("lit", node.this)
        if isinstance(node, exp.Null):
            return ("lit", None)
        if isinstance(node, exp.Literal):
            return ("lit", node.this if node.is_string else
                    int(node.this) if node.this.isdigit() else float(node.this))
        raise Unsupported(f"{node.sql('cql')} in DEFINE {var}, which looks at other rows, is "
                          "not supported yet", position=written_at(node),
                          hint="Such a condition takes columns, constants, comparisons, "
                               "arithmetic, AND/OR/NOT, IS NULL, LAST, FIRST and PREV.")
    return walk(e)


def offset(node: exp.Expression, n: exp.Expression | None, default: int) -> int:
    """A navigation's offset (LAST(x, 2), PREV(x, 3)): a constant number of rows."""
    if n is None:
        return default
    if not (isinstance(n, exp.Literal) and not n.is_string and n.this.isdigit()):
        raise Unsupported(f"{node.sql('cql')}: the offset is a constant number",
                          position=written_at(node))
    return int(n.this)


def navigation(node: exp.Expression) -> tuple | None:
    """LAST/FIRST(X.col[, n]) or PREV(X.col[, n]) as (how, the column, the offset written or
    None, its default); None for anything else."""
    if isinstance(node, (exp.First, exp.Last)) and isinstance(node.this, exp.Column):
        return ("first" if isinstance(node, exp.First) else "last", node.this,
                node.args.get("expression"), 0)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "PREV" \
            and node.expressions and isinstance(node.expressions[0], exp.Column):
        more = node.expressions[1] if len(node.expressions) > 1 else None
        return "prev", node.expressions[0], more, 1
    return None


def as_one_row(e: exp.Expression, alias: str) -> exp.Expression:
    """``e`` with every row it reads taken as one input row: what type-checks it as SQL."""
    def fix(node):
        nav = navigation(node)
        col = nav[1] if nav is not None else node if isinstance(node, exp.Column) else None
        return exp.column(col.name, table=alias) if col is not None else node
    return e.copy().transform(fix)
