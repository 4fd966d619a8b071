"""Top-N over rows that hold for ever: ``SELECT … FROM (SELECT …, ROW_NUMBER() OVER (PARTITION
BY p ORDER BY o) AS rn FROM …) WHERE rn <= N`` over an append-only input (streams without
windows, joins of them) is planned as τ (``executor/plan.py``'s TopN), which keeps N rows per
partition, rather than as Σ, which would number every row at every instant (NEXMark q9, q18,
q19). ``mark`` finds the shape around a query in FROM; ``plan`` plans that query through τ, or
returns None when it cannot, and Σ computes it as before.

>>> import sqlglot, dialect
>>> sel = sqlglot.parse_one("SELECT k FROM (SELECT k, ROW_NUMBER() OVER (PARTITION BY g "
...                         "ORDER BY v DESC) AS rn FROM s) AS t WHERE rn <= 3", read="cql")
>>> mark(sel)
>>> sel.args["from_"].this.meta["top_n"]
(3, 'rn')
"""
from __future__ import annotations

from sqlglot import exp

from executor import plan as P
from executor.duck import quote

from ..errors import Unsupported

TOP_N = "top_n"                  # a query in FROM's meta: (N, the row number's name)
_BOUNDS = {exp.LTE: 0, exp.LT: -1, exp.EQ: 0}          # rn <= N, rn < N, rn = 1


def _row_number(sel: exp.Select) -> exp.Alias | None:
    """The select item ``ROW_NUMBER() OVER (…) AS name``."""
    for e in sel.expressions:
        if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window) and \
                isinstance(e.this.this, exp.RowNumber):
            return e
    return None


def _is_rank(node, rank: str, alias: str) -> bool:
    return isinstance(node, exp.Column) and node.name.lower() == rank.lower() and \
        (not node.table or node.table.lower() == alias.lower())


def _bound(conjunct, rank: str, alias: str) -> int | None:
    """N of a conjunct ``rn <= N`` (``N >= rn``, ``rn < N + 1``, ``rn = 1``)."""
    if isinstance(conjunct, (exp.GTE, exp.GT)):          # N >= rn: rn <= N
        flipped = exp.LTE if isinstance(conjunct, exp.GTE) else exp.LT
        conjunct = flipped(this=conjunct.expression, expression=conjunct.this)
    shift = _BOUNDS.get(type(conjunct))
    n = conjunct.expression if shift is not None else None
    if not (_is_rank(conjunct.this, rank, alias) and isinstance(n, exp.Literal) and n.is_int):
        return None
    count = int(n.name) + shift
    if isinstance(conjunct, exp.EQ) and count != 1:
        return None
    return count if count > 0 else None


def mark(sel: exp.Select) -> None:
    """Mark each query in ``sel``'s FROM that numbers its rows with ROW_NUMBER() and that
    ``sel`` keeps the first N of (the bound stays in ``sel``'s WHERE)."""
    from_, where = sel.args.get("from_"), sel.args.get("where")
    if from_ is None or where is None:
        return
    items = [from_.this] + [j.this for j in sel.args.get("joins") or []]
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    for sub in items:
        if not (isinstance(sub, exp.Subquery) and isinstance(sub.this, exp.Select)):
            continue
        item = _row_number(sub.this)
        if item is None:
            continue
        alias = sub.alias or "unnamed_subquery"
        counts = [n for c in conjuncts if (n := _bound(c, item.alias, alias)) is not None]
        if counts:
            sub.meta[TOP_N] = (min(counts), item.alias)


def append_only(node) -> bool:
    """Whether every row of ``node`` holds for ever once it starts: streams read without a
    window, filtered, mapped, and inner joins of such."""
    if isinstance(node, P.Window):
        inner = node.input
        while isinstance(inner, P.Filter):
            inner = inner.input
        return isinstance(node.window, P.UnboundedWindow) and isinstance(inner, P.StreamScan)
    if isinstance(node, (P.Filter, P.Map)):
        return append_only(node.input)
    if isinstance(node, P.Join):
        return node.kind == "stream-stream" and not node.outer and \
            append_only(node.left) and append_only(node.right)
    return False


def plan(builder, sub: exp.Subquery, count: int, rank: str):
    """(root, output) of the query ``sub`` through τ: its rows without the row number, each
    partition's first ``count`` numbered; None when its shape or input is not one τ runs."""
    inner = sub.this
    item = _row_number(inner)
    window = item.this
    orders = window.args["order"].expressions if window.args.get("order") else []
    others = [w for e in inner.expressions if e is not item for w in e.find_all(exp.Window)]
    if not orders or others or any(inner.args.get(k) for k in (
            "group", "having", "distinct", "order", "limit", "qualify", "windows")):
        return None
    position = inner.expressions.index(item)
    if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and
           isinstance(e.this, exp.Star) for e in inner.expressions[position + 1:]):
        return None             # (where the number stands among what stars give: unknown)
    parts = window.args.get("partition_by") or []
    hidden = [exp.alias_(p.copy(), f"__topn_p{i}") for i, p in enumerate(parts)] + \
        [exp.alias_(o.this.copy(), f"__topn_o{i}") for i, o in enumerate(orders)]
    plain = inner.copy()
    plain.set("expressions", [e.copy() for e in inner.expressions if e is not item] + hidden)
    try:
        root, output, pseudo = builder.statement(plain)
    except Unsupported:
        return None
    if pseudo or not append_only(root):
        return None
    names = [c.name for c in root.schema]
    kept = len(names) - len(hidden)
    number = P.Column(item.alias if item.alias not in names else "__topn_rank", "BIGINT")
    order = tuple((c, bool(o.args.get("desc")), bool(o.args.get("nulls_first")))
                  for c, o in zip(names[kept + len(parts):], orders))
    node = P.TopN(root, tuple(names[kept:kept + len(parts)]), order, count, number.name,
                  root.schema + (number,))
    # the query's own columns, its row number where it was written
    after = len(inner.expressions) - position - 1
    at = kept - after
    columns = list(root.schema[:kept])
    columns.insert(at, number)
    shown = list(output[:kept])
    shown.insert(at, P.Column(item.alias, "BIGINT"))
    outputs = tuple(P.NamedExpr(c.name, P.Expr(quote(c.name), (c.name,), c.type))
                    for c in columns)
    return P.Map(node, outputs, tuple(columns)), tuple(shown)
