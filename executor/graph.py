"""A running query: the plan compiled into operators, fed with the batches and watermarks of
the streams it reads, producing result batches with the client's columns (pseudo-columns
``valid_from`` / ``valid_to`` / ``wtime`` included).

    q = RunningQuery(plan)
    rows = q.push("sensors", batch)      # record batches of the stream, in event-time order
    rows += q.watermark("sensors", ts)   # BOUNDARY: nothing earlier than ts will follow
    rows += q.end()
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import plan as P
from .batches import INF, TE, TS, Watermark
from .operators import (aggregate, filter_map, range_aggregate, slide_aggregate, union,
                        window)
from .operators.base import Operator, Stateless


class NotRunnable(Exception):
    """A plan shape the back end cannot run yet."""


class Scan(Stateless):
    """A stream's raw batch → internal columns ``alias.col`` plus its interval (µs)."""

    def __init__(self, node: P.StreamScan):
        self.node = node
        self.names = [c.name.split(".", 1)[1] for c in node.schema]

    def transform(self, batch):
        cols = {f"{self.node.alias}.{n}": batch.column(n) for n in self.names}
        ts = _micros(batch.column(self.node.timestamp_column))
        te = _micros(batch.column(self.node.end_column)) if self.node.end_column else ts
        cols[TS], cols[TE] = ts, te
        return pa.RecordBatch.from_pydict(cols)


def _micros(col) -> pa.Array:
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
    return col.cast(pa.int64())


class Limit(Operator):
    def __init__(self, node: P.Limit):
        self.left = node.count

    def on_batch(self, batch, port=0):
        if self.left <= 0:
            return []
        out = batch.slice(0, self.left)
        self.left -= out.num_rows
        return [out]


def _slide_of(node) -> P.SlideWindow | None:
    while node is not None:
        if isinstance(node, P.Window):
            return node.window if isinstance(node.window, P.SlideWindow) else None
        kids = P.children(node)
        node = kids[0] if len(kids) == 1 else None
    return None


def _build_window(node: P.Window):
    if not window.supports(node.window):
        raise NotRunnable(f"{type(node.window).__name__} windows do not run in the back end "
                          "yet")
    return window.TimeWindow(node.window)


def _build_aggregate(node: P.Aggregate):
    slide = _slide_of(node.input)
    return aggregate.Aggregate(node, slide_us=slide.slide_us if slide else None,
                               slide_start_us=(slide.start_us or 0) if slide else 0)


def _col(name: str, typ: str) -> P.Expr:
    return P.Expr(f'"{name}"', (name,), typ)


def distinct_as_aggregate(node: P.Distinct) -> P.Aggregate:
    """δ at each instant is a GROUP BY of every column: a row is there while any copy is."""
    keys = tuple(P.NamedExpr(c.name, _col(c.name, c.type)) for c in node.schema)
    return P.Aggregate(node.input, keys, (P.Partial("__n", "count_star"),),
                       tuple(P.NamedExpr(c.name, _col(c.name, c.type)) for c in node.schema),
                       node.schema)


def difference_as_aggregate(node: P.Difference):
    """EXCEPT at each instant: the rows of the left input that the right one lacks, as a
    GROUP BY of every column over both inputs, each row marked with its side."""
    names = [c.name for c in node.schema]

    def marked(child, side: int):
        outs = tuple(P.NamedExpr(n, _col(rc.name, rc.type))
                     for n, rc in zip(names, child.schema))
        outs += (P.NamedExpr("__left", P.Expr(str(int(side == 0)), (), "INTEGER")),
                 P.NamedExpr("__right", P.Expr(str(int(side == 1)), (), "INTEGER")))
        return P.Map(child, outs, node.schema + (P.Column("__left", "INTEGER"),
                                                 P.Column("__right", "INTEGER")))

    both = P.Union_((marked(node.left, 0), marked(node.right, 1)),
                    node.schema + (P.Column("__left", "INTEGER"),
                                   P.Column("__right", "INTEGER")))
    keys = tuple(P.NamedExpr(c.name, _col(c.name, c.type)) for c in node.schema)
    agg = P.Aggregate(both, keys, (P.Partial("__l", "sum", _col("__left", "INTEGER")),
                                   P.Partial("__r", "sum", _col("__right", "INTEGER"))),
                      tuple(P.NamedExpr(c.name, _col(c.name, c.type)) for c in node.schema)
                      + (P.NamedExpr("__keep", P.Expr('"__l" > 0 AND coalesce("__r", 0) = 0',
                                                      ("__l", "__r"), "BOOLEAN")),),
                      node.schema + (P.Column("__keep", "BOOLEAN"),))
    kept = P.Filter(agg, P.Expr('"__keep"', ("__keep",), "BOOLEAN"), agg.schema)
    return P.Map(kept, tuple(P.NamedExpr(c.name, _col(c.name, c.type)) for c in node.schema),
                 node.schema)


# Algebra that runs as a combination of other operators.
_REWRITES = {P.Distinct: distinct_as_aggregate, P.Difference: difference_as_aggregate}


def _fused(node):
    """The fused window+aggregate operator for ``node``, if there is one."""
    if not (isinstance(node, P.Aggregate) and isinstance(node.input, P.Window)):
        return None
    w = node.input.window
    if isinstance(w, P.SlideWindow) and slide_aggregate.supports(node):
        return slide_aggregate.SlideAggregate
    if isinstance(w, P.RangeWindow) and range_aggregate.supports(node):
        return range_aggregate.RangeAggregate
    return None


_BUILDERS = {
    P.StreamScan: Scan,
    P.Window: _build_window,
    P.Filter: filter_map.Filter,
    P.Map: filter_map.Map,
    P.Union_: union.Union,
    P.Aggregate: _build_aggregate,
    P.Limit: Limit,
}


class _Vertex:
    __slots__ = ("op", "parent", "port")

    def __init__(self, op, parent, port):
        self.op, self.parent, self.port = op, parent, port


class RunningQuery:
    def __init__(self, p: P.Plan):
        self.plan = p
        self.scans: dict = {}           # stream name (lower) -> [vertex]
        self.vertices: list = []
        self.root = self._build(p.root, None, 0)
        self.out_names = [c.name for c in p.root.schema]

    def _build(self, node, parent, port) -> _Vertex:
        rewrite = _REWRITES.get(type(node))
        if rewrite is not None:
            return self._build(rewrite(node), parent, port)
        fused = _fused(node)
        if fused is not None:
            # a time window and the aggregate above it run as one vectorised operator
            v = _Vertex(fused(node, node.input.window), parent, port)
            self.vertices.append(v)
            self._build(node.input.input, v, 0)
            return v
        builder = _BUILDERS.get(type(node))
        if builder is None:
            raise NotRunnable(f"{type(node).__name__.strip('_')} does not run in the back end "
                              "yet")
        v = _Vertex(builder(node), parent, port)
        self.vertices.append(v)
        if isinstance(node, P.StreamScan):
            self.scans.setdefault(node.stream.lower(), []).append(v)
        for i, child in enumerate(P.children(node)):
            self._build(child, v, i)
        return v

    # ------------------------------------------------------------------ feeding
    def _deliver(self, v: _Vertex, messages: list) -> list:
        out = []
        for m in messages:
            if v.parent is None:
                if not isinstance(m, Watermark):
                    out.append(m)
                continue
            op, port = v.parent.op, v.port
            nxt = op.on_watermark(m.ts, port) if isinstance(m, Watermark) else \
                op.on_batch(m, port)
            out.extend(self._deliver(v.parent, nxt))
        return out

    def _start(self, scan: _Vertex, ts: int) -> None:
        """An aggregate without GROUP BY answers at every instant from when the streams it
        reads begin (COUNT(*) = 0 over an empty window): tell the aggregates above a scan
        when that scan's first tuple came."""
        v = scan.parent
        while v is not None:
            if isinstance(v.op, aggregate.Aggregate):
                v.op.start(ts)
            v = v.parent

    def push(self, stream: str, batch: pa.RecordBatch) -> list:
        out = []
        for v in self.scans.get(stream.lower(), []):
            first = v.op.transform(batch)
            if first is not None and first.num_rows:
                self._start(v, pc.min(first.column(TS)).as_py())
                out.extend(self._deliver(v, [first]))
        return self._client(out)

    def watermark(self, stream: str, ts: int) -> list:
        out = []
        for v in self.scans.get(stream.lower(), []):
            out.extend(self._deliver(v, v.op.on_watermark(ts)))
        return self._client(out)

    def end(self) -> list:
        out = []
        for v in reversed(self.vertices):     # children before parents
            out.extend(self._deliver(v, v.op.on_end()))
        return self._client(out)

    def state_size(self) -> int:
        return sum(v.op.state_size() for v in self.vertices)

    # ------------------------------------------------------------------ output
    def _client(self, batches: list) -> list:
        """Result batches with the client's columns, pseudo-columns as timestamps."""
        out = []
        for b in batches:
            if b.num_rows == 0:
                continue
            cols, names = [], []
            real = iter(self.out_names)
            for c in self.plan.output:
                if c.name in P.PSEUDO_COLUMNS and c.name in self.plan.pseudo:
                    src = TE if c.name == "valid_to" else TS
                    cols.append(_timestamps(b.column(src)))
                else:
                    cols.append(b.column(next(real)))
                names.append(c.name)
            out.append(pa.RecordBatch.from_arrays(cols, names=names))
        return out


def _timestamps(col) -> pa.Array:
    """µs → TIMESTAMP; ∞ (valid forever) becomes NULL."""
    values = col.to_numpy(zero_copy_only=False)
    mask = values >= INF
    return pa.array(np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")) \
        if not mask.any() else pc.if_else(pa.array(mask), None, pa.array(
            np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")))
