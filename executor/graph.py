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
from .batches import INF, TE, TS, Watermark, micros
from .operators import (aggregate, filter_map, join, loop_window, range_aggregate,
                        rows_window, slide_aggregate, union, window)
from .operators.base import Operator, Stateless


class NotRunnable(Exception):
    """A plan shape the back end cannot run yet."""


class Scan(Stateless):
    """A stream's raw batch → internal columns ``alias.col`` plus its interval (µs)."""

    def __init__(self, node: P.StreamScan):
        self.node = node
        self.source = node.stream.lower()
        self.names = [c.name.split(".", 1)[1] for c in node.schema]

    def transform(self, batch):
        cols = {f"{self.node.alias}.{n}": batch.column(n) for n in self.names}
        ts = micros(batch.column(self.node.timestamp_column))
        te = micros(batch.column(self.node.end_column)) if self.node.end_column else ts
        cols[TS], cols[TE] = ts, te
        return pa.RecordBatch.from_pydict(cols)


class RelationScan(Stateless):
    """A named window's or derived stream's result rows (their own columns and intervals)
    → internal columns ``alias.col``."""

    def __init__(self, node: P.WindowRelationScan):
        self.node = node
        self.source = node.name.lower()
        self.names = [c.name for c in node.schema]

    def transform(self, batch):
        return batch.rename_columns(self.names + [TS, TE])


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
    if isinstance(node.window, P.RowsWindow):
        return rows_window.RowsWindow(node.window)
    if isinstance(node.window, P.LoopWindow):
        return loop_window.LoopWindow(node.window)
    if not window.supports(node.window):
        raise NotRunnable(f"{type(node.window).__name__} windows do not run in the back end "
                          "yet")
    return window.TimeWindow(node.window)


def _build_aggregate(node: P.Aggregate):
    slide = _slide_of(node.input)
    return aggregate.Aggregate(node, slide_us=slide.slide_us if slide else None,
                               slide_start_us=(slide.start_us or 0) if slide else 0)


def _col(name: str, typ: str) -> P.Expr:
    return P.Expr(f'"{name}"', (name,), typ, ("col", name))


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
    kept = P.Filter(agg, _col("__keep", "BOOLEAN"), agg.schema)
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
    P.WindowRelationScan: RelationScan,
    P.Window: _build_window,
    P.Filter: filter_map.Filter,
    P.Map: filter_map.Map,
    P.Union_: union.Union,
    P.Aggregate: _build_aggregate,
    P.Limit: Limit,
    P.Join: join.StreamJoin,
}


def _loop_below(v: "_Vertex"):
    """The loop window an aggregate reads through a chain of one-input operators, if any."""
    while len(v.children) == 1:
        v = v.children[0]
        if isinstance(v.op, loop_window.LoopWindow):
            return v.op
    return None


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


class _Vertex:
    """One operator in the shared graph. ``parents`` are (vertex, port) edges; a query's sink
    is a vertex without an operator whose ``sinks`` say which queries read it."""
    __slots__ = ("op", "parents", "children", "key", "sinks", "grouped")

    def __init__(self, op, key=None):
        self.op, self.key = op, key
        self.parents: list = []
        self.children: list = []
        self.sinks: list = []
        self.grouped = None         # the GroupedFilter of the σ's reading this vertex


# Scans, windows, σ and μ: identical ones over the same stream share one vertex (one scan,
# one window state) whatever number of queries read them. A count window's state is the
# stream's last n tuples, the same for every reader; a loop's iterations start with the first
# tuple its query sees, so each query keeps its own.
_SHAREABLE = (P.StreamScan, P.WindowRelationScan, P.Window, P.Filter, P.Map)


def _shareable(node) -> bool:
    if isinstance(node, P.Window) and isinstance(node.window, P.LoopWindow):
        return False
    return isinstance(node, _SHAREABLE) and all(_shareable(c) for c in P.children(node))


class _Query:
    __slots__ = ("qid", "plan", "sink", "out_names", "rows_in", "rows_out", "feeds", "streams")

    def __init__(self, qid, plan, feeds=None):
        self.qid, self.plan, self.feeds = qid, plan, feeds
        self.streams: set = set()
        self.out_names = [c.name for c in plan.root.schema]
        self.rows_in = self.rows_out = 0


class Graph:
    """Every running query in one graph: queries reading a stream share its feed, identical
    per-tuple operators (scan, time window, σ, μ) are built once, and each query ends in its
    own sink. ``push``/``watermark`` return {query id: [result batches]}."""

    def __init__(self):
        self.scans: dict = {}           # stream name (lower) -> [vertex]
        self.shared: dict = {}          # canonical subtree -> vertex
        self.queries: dict = {}         # query id -> _Query
        self.failures: dict = {}        # query id -> error, for queries an operator failed
        self.tables: dict = {}          # table name (lower) -> [TableJoin] reading it
        self.table_data: dict = {}      # table name (lower) -> its latest contents
        self._private = False           # building a query that shares nothing
        self._qid = None                # the query being built

    # ------------------------------------------------------------------ building
    def add(self, qid, plan: P.Plan, feeds: str | None = None, private: bool = False) -> None:
        """Run ``plan`` as query ``qid``; with ``feeds``, its results are also the tuples of
        the relation of that name (a named window or derived stream) other queries read.
        ``private``: share no vertex (the query is about to be primed with history)."""
        q = _Query(qid, plan, feeds.lower() if feeds else None)
        sink = _Vertex(None)
        sink.sinks.append(qid)
        q.sink = sink
        self._private = private
        self._qid = qid
        try:
            self._build(plan.root, sink, 0)
        except NotRunnable:
            self._release(sink)
            raise
        finally:
            self._private = False
        self.queries[qid] = q
        q.streams = self._reads(sink)

    def _build(self, node, parent: _Vertex, port: int) -> _Vertex:
        rewrite = _REWRITES.get(type(node))
        if rewrite is not None:
            return self._build(rewrite(node), parent, port)
        key = None
        if self._private:
            pass
        elif _shareable(node):
            key = P.to_json(node)
        elif isinstance(node, P.Aggregate):
            # the same aggregate twice in one query (q5: the counts and their maximum) runs
            # once; across queries it is not shared, as each query's first windows hold only
            # what came after it started
            key = f"{self._qid!r}:{P.to_json(node)}"
        v = self.shared.get(key) if key is not None else None
        if v is not None:
            self._link(v, parent, port)
            return v
        fused = _fused(node)
        if fused is not None:
            # a time window and the aggregate above it run as one vectorised operator
            v = _Vertex(fused(node, node.input.window), key)
            kids = (node.input.input,)
        elif isinstance(node, P.Join) and node.kind == "stream-table":
            op = join.TableJoin(node, *_table_side(node.right))
            self.tables.setdefault(op.table_name, []).append(op)
            if op.table_name in self.table_data:
                op.set_table(self.table_data[op.table_name])
            v = _Vertex(op)
            kids = (node.left,)
        else:
            builder = _BUILDERS.get(type(node))
            if builder is None:
                raise NotRunnable(f"{type(node).__name__.strip('_')} does not run in the back "
                                  "end yet")
            v = _Vertex(builder(node), key)
            kids = P.children(node)
        self._link(v, parent, port)
        if key is not None:
            self.shared[key] = v
        if isinstance(node, (P.StreamScan, P.WindowRelationScan)):
            name = node.stream if isinstance(node, P.StreamScan) else node.name
            self.scans.setdefault(name.lower(), []).append(v)
        for i, child in enumerate(kids):
            self._build(child, v, i)
        if isinstance(v.op, aggregate.Aggregate):
            v.op.loop = _loop_below(v)      # one row per iteration of a StreaQueL loop
        return v

    @staticmethod
    def _link(child: _Vertex, parent: _Vertex, port: int) -> None:
        child.parents.append((parent, port))
        parent.children.append(child)

    def remove(self, qid) -> None:
        """End a query and free its state at once; shared vertices go with their last reader."""
        q = self.queries.pop(qid, None)
        if q is not None:
            self._release(q.sink)

    def _release(self, v: _Vertex) -> None:
        for child in v.children:
            child.parents = [(p, port) for p, port in child.parents if p is not v]
            if not child.parents:
                self._drop(child)
        v.children = []

    def set_table(self, name: str, table: pa.Table) -> None:
        """A table's contents changed: stream–table joins use them from now on."""
        self.table_data[name.lower()] = table
        for op in self.tables.get(name.lower(), ()):
            op.set_table(table)

    def _drop(self, v: _Vertex) -> None:
        if isinstance(v.op, join.TableJoin):
            readers = self.tables.get(v.op.table_name, [])
            if v.op in readers:
                readers.remove(v.op)
        if v.key is not None:
            self.shared.pop(v.key, None)
        for name, lst in list(self.scans.items()):
            if v in lst:
                lst.remove(v)
                if not lst:
                    del self.scans[name]
        self._release(v)

    # ------------------------------------------------------------------ feeding
    def _deliver(self, v: _Vertex, messages: list, out: dict) -> None:
        if not messages:
            return
        for qid in v.sinks:
            out.setdefault(qid, []).extend(m for m in messages if not isinstance(m, Watermark))
            feeds = self.queries[qid].feeds if qid in self.queries else None
            for scan in self.scans.get(feeds, ()) if feeds else ():
                self._deliver(scan, [scan.op.transform(m) if not isinstance(m, Watermark)
                                     else m for m in messages], out)
        masks = self._grouped_masks(v, messages)
        for parent, port in v.parents:
            op = parent.op
            if op is None:
                self._deliver(parent, messages, out)
                continue
            nxt = []
            try:
                for k, m in enumerate(messages):
                    if isinstance(m, Watermark):
                        nxt.extend(op.on_watermark(m.ts, port))
                    elif masks is not None and op in masks[k]:
                        nxt.extend(op.on_mask(m, masks[k][op]))
                    else:
                        nxt.extend(op.on_batch(m, port))
            except Exception as e:  # noqa: BLE001 - an operator's error ends its queries only
                self._fail(parent, f"{type(e).__name__}: {e}")
                continue
            self._deliver(parent, nxt, out)

    @staticmethod
    def _grouped_masks(v: _Vertex, messages: list) -> list | None:
        """For each message, {σ: its mask} when several σ's read ``v`` (one DuckDB pass for
        them all); None when fewer than two do. If the grouped pass fails (one predicate's
        error), each σ runs on its own, so the error ends only its own queries."""
        filters = [p.op for p, _ in v.parents if isinstance(p.op, filter_map.Filter)]
        if len(filters) < 2:
            v.grouped = None
            return None
        if v.grouped is None or v.grouped.filters != filters:
            v.grouped = filter_map.GroupedFilter(filters)
        masks = []
        for m in messages:
            if isinstance(m, Watermark) or m.num_rows == 0:
                masks.append({})
                continue
            try:
                masks.append(dict(zip(filters, v.grouped.masks(m))))
            except Exception:  # noqa: BLE001 - found again, per σ, by on_batch
                masks.append({})
        return masks

    def _fail(self, v: _Vertex, error: str) -> None:
        for qid in v.sinks:
            self.failures.setdefault(qid, error)
        for parent, _ in v.parents:
            self._fail(parent, error)

    def take_failures(self) -> dict:
        out, self.failures = self.failures, {}
        return out

    def finished(self) -> list:
        """Queries that can produce nothing more (their LIMIT is reached)."""
        return [qid for qid, q in self.queries.items()
                if q.sink.children and isinstance(q.sink.children[0].op, Limit)
                and q.sink.children[0].op.left <= 0]

    def _start(self, v: _Vertex, ts: int) -> None:
        """An aggregate without GROUP BY answers at every instant from when the streams it
        reads begin (COUNT(*) = 0 over an empty window): tell the aggregates above a scan
        when that scan's first tuple came."""
        for parent, _ in v.parents:
            if isinstance(parent.op, aggregate.Aggregate):
                parent.op.start(ts)
            self._start(parent, ts)

    def prime(self, qid, history: dict, seam: int) -> dict:
        """Feed a privately built query the archived tuples its windows reach back to
        ({stream: table in event-time order}), as though it had run all along; of what that
        gives, only rows still valid at ``seam`` (the instant live data takes over) go out,
        except in a loop, which starts at the seam (ST) and answers for every iteration."""
        out: dict = {}
        sink = self.queries[qid].sink
        loops = [v.op for v in self._all(sink) if isinstance(v.op, loop_window.LoopWindow)]
        for op in loops:                 # ST is when the query started, not its first tuple
            op.st = seam
        for v in self._all(sink):
            if isinstance(v.op, Scan) and v.op.source in history:
                for batch in history[v.op.source].to_batches():
                    first = v.op.transform(batch)
                    if first.num_rows:
                        self._start(v, pc.min(first.column(TS)).as_py())
                        self._deliver(v, [first], out)
        # a loop says which stretch of time it answers for; other windows answer from now
        rows = [b if loops else b.filter(pc.greater(b.column(TE), seam))
                for b in out.get(qid, [])]
        return self._client({qid: rows} if rows else {})

    def snapshot(self, qid, batches: dict, at: int | None) -> pa.Table | None:
        """Query ``qid`` run over ``batches`` ({stream: [batch]}, each in event-time order)
        to the end: its rows valid at instant ``at`` (default: the latest tuple's time)."""
        out: dict = {}
        latest = [self._feed(name, b, out) for name, group in batches.items() for b in group]
        latest = [t for t in latest if t is not None]
        last = at if at is not None else (max(latest) if latest else None)
        for other in list(self.queries.values()):      # relations first: they were added first
            self._flush(other.sink, out)
        q = self.queries[qid]
        rows = [b for b in out.get(qid, []) if b.num_rows]
        if not rows or last is None:
            return None
        table = pa.Table.from_batches(rows)
        table = table.filter(pc.and_(pc.less_equal(table.column(TS), last),
                                     pc.greater(table.column(TE), last)))
        return pa.Table.from_batches([_client_batch(q, b) for b in table.to_batches()])

    def replay(self, qid, batches: dict, seam: int, spans: np.ndarray) -> pa.Table | None:
        """Query ``qid`` run over ``batches`` ({stream: [batch]}, each in event-time order)
        to the end, as though every tuple had come in time: its rows that began by ``seam``
        and overlap one of ``spans`` (an (n, 2) array of [from, to) µs, sorted, disjoint),
        a row still holding at the seam open-ended; with valid_from / valid_to always."""
        out: dict = {}
        for name, group in batches.items():
            for b in group:
                self._feed(name, b, out)
        q = self.queries[qid]
        self._flush(q.sink, out)
        rows = [b for b in out.get(qid, []) if b.num_rows]
        if not rows or not len(spans):
            return None
        table = pa.Table.from_batches(rows).combine_chunks()
        ts = table.column(TS).to_numpy(zero_copy_only=False)
        te = table.column(TE).to_numpy(zero_copy_only=False)
        first = np.searchsorted(spans[:, 1], ts, side="right")    # first span ending after ts
        hit = (first < len(spans)) & (ts <= seam)
        hit &= spans[np.minimum(first, len(spans) - 1), 0] < te
        table = table.filter(pa.array(hit))
        te = np.where(te[hit] > seam, INF, te[hit])
        table = table.set_column(table.schema.get_field_index(TE), TE, pa.array(te, pa.int64()))
        table = table.sort_by([(TS, "ascending")])
        out_batches = []
        for b in table.to_batches():
            c = _client_batch(q, b)
            for name, src in (("valid_from", TS), ("valid_to", TE)):
                if name not in c.schema.names:
                    c = c.append_column(name, _timestamps(b.column(src)))
            out_batches.append(c)
        return pa.Table.from_batches(out_batches) if out_batches else None

    def _flush(self, sink: _Vertex, out: dict) -> None:
        """The input has ended: every operator below ``sink`` gives up what it holds."""
        for v in self._all(sink):
            if v.op is not None:
                self._deliver(v, v.op.on_end(), out)

    @staticmethod
    def _all(sink: _Vertex) -> list:
        """Every vertex below ``sink`` (and ``sink``), children before parents."""
        order, seen = [], set()

        def visit(v):
            if id(v) in seen:
                return
            seen.add(id(v))
            for c in v.children:
                visit(c)
            order.append(v)

        visit(sink)
        return order

    def _feed(self, stream: str, batch: pa.RecordBatch, out: dict) -> int | None:
        """A stream's batch into every scan of it; returns its latest ts (µs), if any."""
        latest = None
        for v in list(self.scans.get(stream.lower(), ())):
            first = v.op.transform(batch)
            if first is not None and first.num_rows:
                lo, hi = pc.min_max(first.column(TS)).values()
                self._start(v, lo.as_py())
                latest = hi.as_py() if latest is None else max(latest, hi.as_py())
                self._deliver(v, [first], out)
        return latest

    def push(self, stream: str, batch: pa.RecordBatch) -> dict:
        out: dict = {}
        self._feed(stream, batch, out)
        return self._client(out, batch.num_rows, stream)

    def watermark(self, stream: str, ts: int) -> dict:
        out: dict = {}
        for v in list(self.scans.get(stream.lower(), ())):
            self._deliver(v, v.op.on_watermark(ts), out)
        return self._client(out)

    def end(self, qid) -> list:
        """Flush what query ``qid`` still holds (its input has ended)."""
        out: dict = {}
        self._flush(self.queries[qid].sink, out)
        return self._client({qid: out.get(qid, [])}).get(qid, [])

    def state_size(self, qid) -> int:
        """Rows held by the operators query ``qid`` reads (shared ones included)."""
        return sum(v.op.state_size() for v in self._all(self.queries[qid].sink)
                   if v.op is not None)

    @staticmethod
    def _reads(sink: _Vertex) -> set:
        names, stack, seen = set(), [sink], set()
        while stack:
            v = stack.pop()
            if id(v) not in seen:
                seen.add(id(v))
                if isinstance(v.op, (Scan, RelationScan)):
                    names.add(v.op.source)
                stack.extend(v.children)
        return names

    # ------------------------------------------------------------------ output
    def _client(self, out: dict, rows_in: int = 0, stream: str | None = None) -> dict:
        """Result batches with the client's columns, pseudo-columns as timestamps."""
        result = {}
        if stream is not None:
            for q in self.queries.values():
                if stream.lower() in q.streams:
                    q.rows_in += rows_in
        for qid, batches in out.items():
            q = self.queries.get(qid)
            if q is None:
                continue
            client = [_client_batch(q, b) for b in batches if b.num_rows]
            q.rows_out += sum(b.num_rows for b in client)
            if client:
                result[qid] = client
        return result


def _client_batch(q: _Query, b: pa.RecordBatch) -> pa.RecordBatch:
    cols, names = [], []
    real = iter(q.out_names)
    for c in q.plan.output:
        if c.name in P.PSEUDO_COLUMNS and c.name in q.plan.pseudo:
            src = TE if c.name == "valid_to" else TS
            cols.append(_timestamps(b.column(src)))
        else:
            cols.append(b.column(next(real)))
        names.append(c.name)
    return pa.RecordBatch.from_arrays(cols, names=names)


class RunningQuery:
    """One query on a graph of its own: the executor driven directly (tests, benchmarks)."""

    def __init__(self, p: P.Plan):
        self.graph = Graph()
        self.graph.add(0, p)

    def push(self, stream: str, batch: pa.RecordBatch) -> list:
        return self.graph.push(stream, batch).get(0, [])

    def watermark(self, stream: str, ts: int) -> list:
        return self.graph.watermark(stream, ts).get(0, [])

    def end(self) -> list:
        return self.graph.end(0)

    def state_size(self) -> int:
        return self.graph.state_size(0)


def _timestamps(col) -> pa.Array:
    """µs → TIMESTAMP; ∞ (valid forever) becomes NULL."""
    values = col.to_numpy(zero_copy_only=False)
    mask = values >= INF
    return pa.array(np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")) \
        if not mask.any() else pc.if_else(pa.array(mask), None, pa.array(
            np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")))
