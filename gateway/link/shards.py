"""Keyed queries split across back-end workers (``--backend-workers N``): which plans split by
a key (``shard_key``), each worker's copy of a plan (``shard_plan``), and the merge of the
workers' rows into one queue in valid_from order (``ShardMerge``).

A plan splits when it is a keyed aggregate (under projections and HAVING) over time windows
and filters of one stream: its groups are independent, so each worker keeps the groups whose
key hashes to it and the union of the workers' rows is the answer. Every worker gets every row
of the stream and every BOUNDARY, so all of them close windows at the same instants; the gateway
sends a MARK after each frame and releases the rows of a mark once every worker has echoed it.
"""
from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from executor import plan as P

# windows that give each tuple its interval from its own time alone, never from other tuples
# (a ROWS or SESSION window over the whole stream depends on the tuples of every key)
_BY_TIME = (P.RangeWindow, P.SlideWindow, P.GridWindow, P.NowWindow, P.UnboundedWindow,
            P.FixedWindow, P.IntervalWindow)
_INTEGERS = {"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "INT2", "INT4", "INT8"}
_VALID_FROM = "valid_from"


def shard_key(plan: P.Plan) -> P.Expr | None:
    """The grouping key a continuous plan can be split by (an integer key Arrow computes
    first, then any), or None when its answer needs all the stream's rows in one place."""
    if plan.mode != "continuous" or any(c.name == _VALID_FROM and c.name not in plan.pseudo
                                        for c in plan.output):
        return None     # (a column of its own named valid_from: no room to sort by ours)
    node = plan.root
    while isinstance(node, (P.Map, P.Filter)):
        node = node.input
    if not isinstance(node, P.Aggregate) or not node.keys:
        return None
    keys = [k.expr for k in node.keys]
    node = node.input
    while isinstance(node, (P.Filter, P.Window)):
        if isinstance(node, P.Window) and not isinstance(node.window, _BY_TIME):
            return None
        node = node.input
    if not isinstance(node, P.StreamScan) or node.arrival or node.proctime or node.of_table:
        return None
    columns = {c.name for c in node.schema}
    # a key of the stream's columns (its value is the same on every back end: the planner
    # refuses volatile functions in a continuous query)
    usable = [k for k in keys if k.columns and set(k.columns) <= columns]
    return next((k for k in usable if k.tree is not None and k.type.upper() in _INTEGERS),
                usable[0] if usable else None)


def _predicate(key: P.Expr, i: int, n: int) -> P.Expr:
    """True for the rows worker ``i`` of ``n`` keeps: an integer key by its residue (Arrow's
    kernels), any other by DuckDB's hash (equal groups, -0.0 and 0.0 too, hash alike); a NULL
    integer key goes to worker 0."""
    if key.tree is not None and key.type.upper() in _INTEGERS:
        tree = ("eq", ("pmod", key.tree, ("int", str(n))), ("int", str(i)))
        sql = f"((({key.sql}) % {n} + {n}) % {n} = {i})"
        if i == 0:
            tree = ("or", tree, ("is_null", key.tree))
            sql = f"({sql} OR ({key.sql}) IS NULL)"
        return P.Expr(sql, key.columns, "BOOLEAN", tree)
    return P.Expr(f"(hash({key.sql}) % {n} = {i})", key.columns, "BOOLEAN", None)


def _read(obj) -> set:
    """The input columns the expressions of a node (not of its input) read."""
    if isinstance(obj, P.Expr):
        return set(obj.columns)
    if isinstance(obj, (tuple, list)):
        return set().union(*map(_read, obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return set().union(*(_read(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                             if f.name != "input"))
    return set()


def _chain(plan: P.Plan) -> tuple[list, P.StreamScan, set]:
    """A split plan's nodes from its aggregate down to (not including) its scan, the scan,
    and the scan's columns those nodes read."""
    node, chain = plan.root, []
    while not isinstance(node, P.StreamScan):
        if chain or isinstance(node, P.Aggregate):
            chain.append(node)
        node = node.input
    return chain, node, {c.name for c in node.schema} & set().union(*map(_read, chain))


def read_columns(plan: P.Plan) -> set:
    """The columns of its stream a split plan reads (as the stream's batches name them): its
    copies are sent only those."""
    _, scan, used = _chain(plan)
    names = {c.split(".", 1)[1] for c in used}
    return names | {c for c in (scan.timestamp_column, scan.end_column) if c}


def shard_plan(plan: P.Plan, key: P.Expr, i: int, n: int) -> P.Plan:
    """Worker ``i``'s copy of ``plan``: the same, with a filter right above its stream's scan
    keeping the rows whose ``key`` falls to it, and its rows' valid_from last when the query
    does not select it (``ShardMerge`` sorts by it, then drops it). The scan and the nodes up
    to the aggregate carry only the stream's columns the aggregate and what is under it read:
    the filter copies those, not every string of the stream."""
    (_, *below), scan, used = _chain(plan)
    unused = {c.name for c in scan.schema} - used

    def narrow(node):
        return dataclasses.replace(node, schema=tuple(c for c in node.schema
                                                      if c.name not in unused))

    def down(node):
        if isinstance(node, P.StreamScan):
            node = narrow(node)
            return P.Filter(node, _predicate(key, i, n), node.schema)
        inside = any(node is b for b in below)      # a σ or ω between the α and the scan
        node = dataclasses.replace(node, input=down(node.input))
        return narrow(node) if inside else node
    plan = dataclasses.replace(plan, root=down(plan.root))
    if _VALID_FROM not in plan.pseudo:
        plan = dataclasses.replace(plan, output=(*plan.output, P.Column(_VALID_FROM, "TIMESTAMP")),
                                   pseudo=(*plan.pseudo, _VALID_FROM))
    return plan


class ShardMerge:
    """One split query's rows from its ``n`` workers: a worker's rows wait until every worker
    has echoed the mark that follows them, then go out together, in valid_from order."""

    def __init__(self, n: int, put, key: P.Expr, plan: P.Plan):
        self.put = put                    # a table -> the query's queue
        self.key = key                    # what it is split by
        self.streams = P.streams_read(plan.root)
        self.columns = read_columns(plan)   # of its stream, all its copies read
        # where its rows' valid_from is: selected by the query, or added last (and dropped)
        self.extra = _VALID_FROM not in plan.pseudo
        self.order = len(plan.output) if self.extra else \
            [c.name for c in plan.output].index(_VALID_FROM)
        self.held: list = [[] for _ in range(n)]   # per worker: [(mark, table)]
        self.ended: set = set()           # the workers whose copy ended without an error

    def add(self, worker: int, after: int, table: pa.Table) -> None:
        """Rows from ``worker`` that arrived after it echoed mark ``after``."""
        self.held[worker].append((after + 1, table))

    def release(self, upto: int | None) -> None:
        """Send the rows that come before mark ``upto`` on every worker (None: all held)."""
        out = []
        for i, held in enumerate(self.held):
            ready = [t for m, t in held if upto is None or m <= upto]
            if ready:
                out += ready
                self.held[i] = [(m, t) for m, t in held if upto is not None and m > upto]
        if not out:
            return
        # a batch typed otherwise (the queue casts to the client's types anyway) joins the
        # rest by the first one's types: names may repeat, so not by unifying schemas
        table = pa.concat_tables([t if t.schema.equals(out[0].schema) else
                                  t.cast(out[0].schema) for t in out])
        if len(out) > 1:
            # Arrow's sort is stable: a key's rows, all from one worker, keep their order
            table = table.take(pc.sort_indices(table.column(self.order)))
        if self.extra:
            table = table.remove_column(self.order)
        self.put(table)
