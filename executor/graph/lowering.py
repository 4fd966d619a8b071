"""Lowering a plan into operators, one plan node at a time: δ, − and ∩ are rewritten into other
algebra first, a time window under an aggregate is fused with it, and each node says whether
identical copies of it may share one operator (``share_key``). ``NotRunnable``: a plan shape
the back end cannot run yet."""
from __future__ import annotations

from .. import plan as P
from ..duck import quote
from ..operators import (filter_map, join, outer_join, qjoin, repeat, snapshot_query,
                         top_n, union)
from ..operators.aggregates import (aggregate, range_aggregate, session_aggregate,
                                    slide_aggregate)
from ..operators.limit import Limit
from ..operators.patterns import pattern, row_pattern
from ..operators.scan import RelationScan, Scan
from ..windows import grid_window, loop_window, rows_window, session_window, version_window
from ..windows import time_window as window


class NotRunnable(Exception):
    """A plan shape the back end cannot run yet."""


# ---------------------------------------------------------------------- rewrites
# how many copies of a row each set operation keeps, from its count in the left input (l)
# and in the right one (r), NULL where that input has none
_COPIES = {
    (P.Difference, False): 'CASE WHEN "__l" > 0 AND coalesce("__r", 0) = 0 THEN 1 ELSE 0 END',
    (P.Difference, True): 'greatest(coalesce("__l", 0) - coalesce("__r", 0), 0)',
    (P.Intersection, False): 'CASE WHEN "__l" > 0 AND "__r" > 0 THEN 1 ELSE 0 END',
    (P.Intersection, True): 'least(coalesce("__l", 0), coalesce("__r", 0))',
}


def set_operation_as_aggregate(node):
    """EXCEPT and INTERSECT [ALL] at each instant: every distinct row of either input counted
    in each (a GROUP BY of every column over both inputs, each row marked with its side),
    then kept as many times as the operation says."""
    names = [c.name for c in node.schema]
    marks = (P.Column("__left", "INTEGER"), P.Column("__right", "INTEGER"))

    def marked(child, side: int):
        outs = tuple(P.NamedExpr(n, P.column_expr(rc.name, rc.type))
                     for n, rc in zip(names, child.schema))
        outs += (P.NamedExpr("__left", P.Expr(str(int(side == 0)), (), "INTEGER")),
                 P.NamedExpr("__right", P.Expr(str(int(side == 1)), (), "INTEGER")))
        return P.Map(child, outs, node.schema + marks)

    both = P.Union_((marked(node.left, 0), marked(node.right, 1)), node.schema + marks)
    keys = tuple(P.NamedExpr(c.name, P.column_expr(c.name, c.type)) for c in node.schema)
    copies = P.Expr(_COPIES[type(node), node.all], ("__l", "__r"), "BIGINT")
    counted = node.schema + (P.Column("__n", "BIGINT"),)
    agg = P.Aggregate(both, keys, (P.Partial("__l", "sum", P.column_expr("__left", "INTEGER")),
                                   P.Partial("__r", "sum", P.column_expr("__right", "INTEGER"))),
                      tuple(P.NamedExpr(c.name, P.column_expr(c.name, c.type)) for c in node.schema)
                      + (P.NamedExpr("__n", copies),), counted)
    kept = P.Filter(agg, P.Expr('"__n" > 0', ("__n",), "BOOLEAN"), counted)
    if node.all:
        kept = P.Repeat(kept, "__n", counted)
    return P.Map(kept, tuple(P.NamedExpr(c.name, P.column_expr(c.name, c.type))
                             for c in node.schema), node.schema)


# Algebra that runs as a combination of other operators.
_REWRITES = {P.Distinct: P.distinct_groups, P.Difference: set_operation_as_aggregate,
             P.Intersection: set_operation_as_aggregate}


def rewritten(node):
    """``node`` as algebra that has operators of its own."""
    while type(node) in _REWRITES:
        node = _REWRITES[type(node)](node)
    return node


# ---------------------------------------------------------------------- sharing
# Scans, windows, σ and μ: identical ones over the same stream share one vertex (one scan,
# one window state) whatever number of queries read them. A count window's state is the
# stream's last n tuples, the same for every reader; a loop's iterations start with the first
# tuple its query sees, so each query keeps its own.
_SHAREABLE = {
    P.StreamScan: lambda n: True,
    P.WindowRelationScan: lambda n: True,
    P.Window: lambda n: type(n.window) is not P.LoopWindow,
    P.Filter: lambda n: True,
    P.Map: lambda n: True,
}


def _shareable(node) -> bool:
    ok = _SHAREABLE.get(type(node))
    return ok is not None and ok(node) and all(_shareable(c) for c in P.children(node))


def share_key(node, qid) -> str | None:
    """The key under which identical copies of ``node`` share one operator (None: its own)."""
    if _shareable(node):
        return P.to_json(node)
    if type(node) is P.Aggregate:
        # the same aggregate twice in one query (q5: the counts and their maximum) runs
        # once; across queries it is not shared, as each query's first windows hold only
        # what came after it started
        return f"{qid!r}:{P.to_json(node)}"
    return None


# ---------------------------------------------------------------------- operators
def _slide_of(node) -> P.SlideWindow | None:
    while node is not None:
        if isinstance(node, P.Window):
            return node.window if isinstance(node.window, P.SlideWindow) else None
        kids = P.children(node)
        node = kids[0] if len(kids) == 1 else None
    return None


_WINDOWS = {P.RowsWindow: rows_window.RowsWindow, P.VersionWindow: version_window.VersionWindow,
            P.LoopWindow: loop_window.LoopWindow,
            P.SessionWindow: session_window.SessionWindow, P.GridWindow: grid_window.GridWindow}


def _window(node: P.Window):
    build = _WINDOWS.get(type(node.window))
    if build is not None:
        return build(node.window)
    if not window.supports(node.window):
        raise NotRunnable(f"{type(node.window).__name__} windows do not run in the back end "
                          "yet")
    return window.TimeWindow(node.window)


def _bare(expr) -> str | None:
    """The column ``expr`` only reads (None: it computes something)."""
    return expr.columns[0] if len(expr.columns) == 1 and expr.sql == quote(expr.columns[0]) \
        else None


def _window_column(node, name: str) -> tuple:
    """(window, column) the column ``name`` of ``node`` is, through one-input operators that
    at most rename it (a query in FROM does); (None, None) when it is computed."""
    while not isinstance(node, P.Window):
        if isinstance(node, P.Map):
            name = next((_bare(o.expr) for o in node.outputs if o.name == name), None)
        kids = P.children(node)
        if name is None or len(kids) != 1:
            return None, None
        node = kids[0]
    return node.window, name


def _groups_whole_windows(node: P.Aggregate) -> bool:
    """Whether the aggregate groups by the end column a window table or session adds: each
    group then is one window, whose tuples all come in one release."""
    for key in node.keys:
        column = _bare(key.expr)
        window, name = _window_column(node.input, column) if column else (None, None)
        columns = getattr(window, "columns", ())
        if len(columns) > 1 and name == columns[1]:
            return True
    return False


def _aggregate(node: P.Aggregate):
    slide = _slide_of(node.input)
    return aggregate.Aggregate(node, slide_us=slide.slide_us if slide else None,
                               slide_start_us=(slide.start_us or 0) if slide else 0,
                               whole=_groups_whole_windows(node))


def _table_side(node) -> tuple:
    """(table name, filters) of a stream–table join's table side: a table scan, perhaps
    under filters pushed down onto it."""
    filters = []
    while isinstance(node, P.Filter):
        filters.append(node.predicate.sql)
        node = node.input
    if not isinstance(node, P.TableScan):
        raise NotRunnable("a stream–table join whose table side is not a plain table does not "
                          "run in the back end yet")
    return node.table.lower(), filters


def _join(node: P.Join) -> tuple:
    if node.kind == "stream-table":
        return join.TableJoin(node, *_table_side(node.right)), (node.left,)
    if node.outer:
        return outer_join.OuterStreamJoin(node), P.children(node)
    return join.StreamJoin(node), P.children(node)


def _each(build):
    """A builder whose operator reads the node's own inputs."""
    return lambda node: (build(node), P.children(node))


_BUILDERS = {
    P.StreamScan: _each(Scan),
    P.WindowRelationScan: _each(RelationScan),
    P.Window: _each(_window),
    P.Filter: _each(filter_map.Filter),
    P.Map: _each(filter_map.Map),
    P.Union_: _each(union.Union),
    P.Aggregate: _each(_aggregate),
    P.Limit: _each(Limit),
    P.TopN: _each(top_n.TopN),
    P.Repeat: _each(repeat.Repeat),
    P.Join: _join,
    P.QualityJoin: _each(qjoin.QJoin),
    P.SnapshotQuery: _each(snapshot_query.SnapshotQuery),
    P.Pattern: _each(lambda n: (row_pattern.RowPattern if n.regex is not None
                                else pattern.Pattern)(n)),
}

# a time window under an aggregate runs with it as one vectorised operator, when the
# aggregate's functions allow: window kind -> (fused operator, whether it can run the node)
_FUSED = {
    P.SlideWindow: (slide_aggregate.SlideAggregate, slide_aggregate.supports),
    P.RangeWindow: (range_aggregate.RangeAggregate, range_aggregate.supports),
    P.SessionWindow: (session_aggregate.SessionAggregate, session_aggregate.supports),
}


def lower(node) -> tuple:
    """(operator, inputs): the operator that runs plan node ``node`` (already ``rewritten``)
    and the plan nodes whose rows reach its ports, in port order."""
    if type(node) is P.Aggregate and type(node.input) is P.Window:
        fused, supports = _FUSED.get(type(node.input.window), (None, None))
        if fused is not None and supports(node):
            return fused(node, node.input.window), (node.input.input,)
    build = _BUILDERS.get(type(node))
    if build is None:
        raise NotRunnable(f"{type(node).__name__.strip('_')} does not run in the back end yet")
    return build(node)
