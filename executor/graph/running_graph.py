"""The running graph: every continuous query in one graph of operators. Queries reading a
stream share its scan, identical per-tuple operators (scan, time window, σ, μ) run once, and
each query ends in its own sink; batches and watermarks are routed up from the scans, and what
reaches a sink leaves with the client's columns. ``push``/``watermark`` return {query id:
[result batches]}. The graph owns the DuckDB database its operators take cursors of."""
from __future__ import annotations

from dataclasses import replace
from time import perf_counter_ns

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from .. import plan as P
from ..batches import TE, TS, Watermark, micros
from ..context import OperatorContext, wall_clock
from ..duck import Database, data_error
from ..operators.base import QueryError
from ..operators.filter_map import GroupedFilter
from . import lowering
from .results import client_batch


class _Vertex:
    """One operator in the shared graph. ``parents`` are (vertex, port) edges; a query's sink
    is a vertex without an operator whose ``sinks`` say which queries read it. ``node`` is
    the plan node it runs; the counters (rows in and out, batches in, ns spent in the
    operator) are EXPLAIN ANALYZE's, since the vertex was made."""
    __slots__ = ("op", "parents", "children", "key", "sinks", "grouped", "node", "fused",
                 "unannounced", "rows_in", "rows_out", "batches", "ns")

    def __init__(self, op, key=None, node=None):
        self.op, self.key, self.node = op, key, node
        self.fused = False          # the operator runs its node's input (a window) too
        self.parents: list = []
        self.children: list = []
        self.sinks: list = []
        self.grouped = None         # the GroupedFilter of the σ's reading this vertex
        self.unannounced = True     # a scan: operators above may not know the stream began
        self.rows_in = self.rows_out = self.batches = self.ns = 0

    def counted(self, started: int, taken, given) -> list:
        """Account for one call of the operator: begun at ``started`` (perf_counter_ns,
        read as the argument list is, before the call that makes ``given``), ``taken`` the
        messages it was given, ``given`` those it returned (passed on)."""
        self.ns += perf_counter_ns() - started
        for m in taken:                 # a watermark or an empty batch: no rows, no batch
            if n := m.num_rows:
                self.rows_in += n
                self.batches += 1
        for m in given:
            self.rows_out += m.num_rows
        return given

    def counters(self) -> tuple:
        return self.rows_in, self.rows_out, self.batches, self.ns


class _Query:
    __slots__ = ("qid", "plan", "sink", "out_names", "rows_in", "rows_out", "feeds", "streams",
                 "unopened", "baseline", "reached", "floor", "since", "private", "marks")

    def __init__(self, qid, plan, feeds=None):
        self.qid, self.plan, self.feeds = qid, plan, feeds
        self.reached: int | None = None     # the latest BOUNDARY that reached its sink
        self.streams: set = set()
        self.out_names = [c.name for c in plan.root.schema]
        self.rows_in = self.rows_out = 0
        self.unopened: list = []    # vertices of a private query, opened when it is primed
        self.baseline: dict = {}    # id(vertex) -> its counters when the query began sharing it
        # a query primed at a seam answers from there: none of its rows ends by then (a
        # window slide or a BETWEEN that closed before the seam, given at the first BOUNDARY
        # after it, is not sent)
        self.floor: int | None = None
        # a query resumed from a watermark: every row that begins before it was sent
        self.since: int | None = None
        self.private = False        # it shares no vertex (it was primed or resumed)
        self.marks: dict = {}       # stream -> BOUNDARYs of it the graph had when it began


_ALL = (None,)          # a message whose rows the grouped pass did not decide (len 1)


def _keeps_none(masks: list, op) -> bool:
    """Whether σ ``op`` keeps no row of any message (a watermark it must pass on)."""
    return all(len(m.get(op, _ALL)) == 0 for m in masks)


def below(sink: _Vertex) -> list:
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


def _loop_below(v: _Vertex):
    """The loop window an operator reads through a chain of one-input operators, if any."""
    while len(v.children) == 1:
        v = v.children[0]
        if v.op.iterates:
            return v.op
    return None


def _label(v: _Vertex) -> str:
    """How EXPLAIN names a vertex's operator; an aggregate fused with its window below names
    both (they run as one operator)."""
    label = P.explain_label(v.node)
    if v.fused:
        label += f" over {P.explain_label(v.node.input)}"
    return label


def _step(op, m, port: int) -> list:
    """Message ``m`` (a batch or a watermark) into ``op``'s ``port``."""
    return op.on_watermark(m.ts, port) if isinstance(m, Watermark) else op.on_batch(m, port)


class RunningGraph:
    """Every running query in one graph (see the module's docstring). ``clock``: µs, for the
    operators' context; ``database``: one to borrow (a one-time query's graph may use the
    running graph's, which costs no new database), else the graph makes its own."""

    def __init__(self, clock=wall_clock, database: Database | None = None):
        self.database = database if database is not None else Database()
        self._owns_database = database is None
        self.context = OperatorContext(cursor=self.database, clock=clock)
        self.scans: dict = {}           # stream name (lower) -> [vertex]
        self.shared: dict = {}          # canonical subtree -> vertex
        self.queries: dict = {}         # query id -> _Query
        self.failures: dict = {}   # query id -> (error, SQLSTATE), for queries an operator failed
        self.failed: dict = {}     # relation (lower) -> (error, SQLSTATE): its query failed
        self.tables: dict = {}          # table name (lower) -> [operators reading it]
        self._private = False           # building a query that shares nothing
        self._qid = None                # the query being built
        self._new: list = []            # the vertices built for it
        self.advanced: dict = {}        # query id -> its sink's BOUNDARY, since last taken
        # per stream (lower): its latest BOUNDARY, how many came, its latest tuple's time and
        # (``keep_edges``) its tuples at that time, which say where a query's state stands
        # (``checkpoint``)
        self.marks: dict = {}
        self.mark_counts: dict = {}
        self.latest: dict = {}
        self.keep_edges = False
        self.edges: dict = {}           # stream -> [its raw tuples at its latest time]

    @property
    def table_data(self) -> dict:
        """Table name (lower) -> its latest contents, as stream–table joins read them."""
        return self.context.tables

    @table_data.setter
    def table_data(self, tables: dict) -> None:
        # a one-time query's graph reads the running graph's tables
        self.context = replace(self.context, tables=tables)

    # ------------------------------------------------------------------ building
    def add(self, qid, plan: P.Plan, feeds: str | None = None, private: bool = False) -> None:
        """Run ``plan`` as query ``qid``; with ``feeds``, its results are also the tuples of
        the relation of that name (a named window or derived stream) other queries read.
        ``private``: share no vertex; the query is about to be primed with history
        (``open_query``), which opens its operators with the seam as ST."""
        q = _Query(qid, plan, feeds.lower() if feeds else None)
        q.private, q.marks = private, dict(self.mark_counts)
        self.database.define(plan.functions)      # the Python functions its SQL calls
        sink = _Vertex(None)
        sink.sinks.append(qid)
        q.sink = sink
        self._private, self._qid, self._new = private, qid, []
        try:
            self._build(plan.root, sink, 0)
        except lowering.NotRunnable:
            self._release(sink)
            raise
        finally:
            self._private = False
        self.queries[qid] = q
        q.streams = self._reads(sink)
        for v in below(sink):       # its operators above shared scans: not told yet
            v.unannounced = True
        if q.feeds is not None:
            self.failed.pop(q.feeds, None)          # made anew
        broken = next((self.failed[f] for f in sorted(q.streams) if f in self.failed), None)
        if broken is not None:          # it reads a relation whose query failed: no answer
            self.remove(qid)            # it gives can be right
            self._new = []
            raise QueryError(*broken)
        # a vertex shared with earlier queries has counted their rows: EXPLAIN ANALYZE shows
        # what happened since this query began
        q.baseline = {id(v): v.counters() for v in below(sink)
                      if v.op is not None and any(v.counters())}
        if private:
            q.unopened = self._new
        else:
            try:
                for v in self._new:
                    self._open(v, self.context)
            except Exception:
                self._new = []
                self.remove(qid)        # its vertices go; the queries that share none stay
                raise
        self._new = []

    def open_query(self, qid, st: int) -> None:
        """Open the operators of privately built query ``qid``, which starts at ``st``."""
        q = self.queries[qid]
        context = replace(self.context, st=st)
        for v in q.unopened:
            self._open(v, context)
        q.unopened = []

    def _open(self, v: _Vertex, context: OperatorContext) -> None:
        v.op.open(context)
        for name in v.op.tables:
            self.tables.setdefault(name, []).append(v.op)

    def _build(self, node, parent: _Vertex, port: int) -> _Vertex:
        node = lowering.rewritten(node)
        key = None if self._private else lowering.share_key(node, self._qid)
        v = self.shared.get(key) if key is not None else None
        if v is not None:
            self._link(v, parent, port)
            return v
        op, kids = lowering.lower(node)
        v = _Vertex(op, key, node)
        v.fused = bool(kids) and kids[0] is not P.children(node)[0]
        self._link(v, parent, port)
        self._new.append(v)
        if key is not None:
            self.shared[key] = v
        if op.source is not None:
            self.scans.setdefault(op.source, []).append(v)
        for i, child in enumerate(kids):
            self._build(child, v, i)
        loop = _loop_below(v)
        if loop is not None:
            op.follow_loop(loop)        # one row per iteration of a StreaQueL loop
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

    def close(self) -> None:
        """End every query (each operator closes) and close the database if it is its own."""
        for qid in list(self.queries):
            self.remove(qid)
        if self._owns_database:
            self.database.close()

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
            op.set_table(name.lower(), table)

    def _drop(self, v: _Vertex) -> None:
        for name in v.op.tables:
            readers = self.tables.get(name, [])
            if v.op in readers:
                readers.remove(v.op)
        v.op.close()
        self._regroup(v, None)
        if v.key is not None:
            self.shared.pop(v.key, None)
        for name, lst in list(self.scans.items()):
            if v in lst:
                lst.remove(v)
                if not lst:
                    del self.scans[name]
        self._release(v)

    @staticmethod
    def _reads(sink: _Vertex) -> set:
        names, stack, seen = set(), [sink], set()
        while stack:
            v = stack.pop()
            if id(v) not in seen:
                seen.add(id(v))
                if v.op is not None and v.op.source is not None:
                    names.add(v.op.source)
                stack.extend(v.children)
        return names

    # ------------------------------------------------------------------ routing
    def deliver(self, v: _Vertex, messages: list, out: dict) -> None:
        """``v``'s output ``messages`` to the operators and sinks above it, and on up."""
        if not messages:
            return
        for qid in v.sinks:
            out.setdefault(qid, []).extend(m for m in messages if not isinstance(m, Watermark))
            self._reach(qid, messages)
            feeds = self.queries[qid].feeds if qid in self.queries else None
            for scan in self.scans.get(feeds, ()) if feeds else ():
                started = perf_counter_ns()
                stepped = self._guarded(scan, lambda: [x for m in messages
                                                       for x in _step(scan.op, m, 0)])
                if stepped is not None:
                    self.deliver(scan, scan.counted(started, messages, stepped), out)
        started = perf_counter_ns()
        masks = self._grouped_masks(v, messages)
        # the grouped pass's time, shared by the σ's it ran for
        share = (perf_counter_ns() - started) // len(v.grouped.filters) if masks else 0
        for parent, port in v.parents:
            op = parent.op
            if op is None:
                self.deliver(parent, messages, out)
                continue
            started = perf_counter_ns() - (share if op.predicate is not None else 0)
            if masks is not None and _keeps_none(masks, op):
                parent.counted(started, messages, ())     # the index found no row for it
                continue
            nxt = self._guarded(parent, lambda: [
                x for k, m in enumerate(messages)
                for x in (op.on_watermark(m.ts, port) if isinstance(m, Watermark) else
                          op.on_mask(m, masks[k][op]) if masks is not None and op in masks[k]
                          else op.on_batch(m, port))])
            if nxt is not None:
                self.deliver(parent, parent.counted(started, messages, nxt), out)

    def _reach(self, qid, messages: list) -> None:
        """A BOUNDARY among the messages reaching query ``qid``'s sink: every row of it that
        begins before that instant has now been given (operators emit in valid_from order and
        a watermark after the rows it releases). A primed query's answer begins at its seam
        (its floor): a BOUNDARY before it, given while it was primed, says nothing of it (a
        restart from there would give rows that ended before the answer began)."""
        q = self.queries.get(qid)
        for m in messages:
            if isinstance(m, Watermark) and q is not None and (q.reached is None
                                                               or m.ts > q.reached) and \
                    (q.floor is None or m.ts >= q.floor):
                q.reached = self.advanced[qid] = m.ts

    def take_advanced(self) -> dict:
        """{query id: the BOUNDARY its sink reached} for those that moved since last asked."""
        out, self.advanced = self.advanced, {}
        return {qid: ts for qid, ts in out.items() if qid in self.queries}

    def _guarded(self, v: _Vertex, call) -> list | None:
        """``call()``'s messages from ``v``'s operator, or None when it failed: its queries end
        with the error (the query's own SQLSTATE where it is the query's), the others go on."""
        try:
            return call()
        except QueryError as e:            # the query asked for too much: its SQLSTATE
            self._fail(v, str(e), e.sqlstate)
        except duckdb.Error as e:          # over the query's values (a cast that fails) or not
            self._fail(v, *(data_error(e) or (f"{type(e).__name__}: {e}",)))
        except Exception as e:  # noqa: BLE001 - an operator's error ends its queries only
            self._fail(v, f"{type(e).__name__}: {e}")
        return None

    def _grouped_masks(self, v: _Vertex, messages: list) -> list | None:
        """For each message, {σ: its mask} when several σ's read ``v`` (one DuckDB pass for
        them all); None when fewer than two do. If the grouped pass fails (one predicate's
        error), each σ runs on its own, so the error ends only its own queries."""
        filters = [p.op for p, _ in v.parents if p.op is not None and p.op.predicate is not None]
        if len(filters) < 2:
            self._regroup(v, None)
            return None
        if v.grouped is None or v.grouped.filters != filters:
            self._regroup(v, filters)
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

    def _regroup(self, v: _Vertex, filters: list | None) -> None:
        """The σ's reading ``v`` changed: a grouped filter for ``filters`` (None: none)."""
        if v.grouped is not None:
            v.grouped.close()
        v.grouped = GroupedFilter(filters, self.context.cursor()) if filters else None

    def _fail(self, v: _Vertex, error: str, sqlstate: str = "XX000") -> None:
        """The queries ``v`` serves end with the error; so do those that read the rows of a
        named window or derived stream among them (now, and when they are planned later)."""
        for qid in v.sinks:
            if qid in self.failures:
                continue
            self.failures[qid] = (error, sqlstate)
            feeds = self.queries[qid].feeds if qid in self.queries else None
            if feeds is not None:
                self.failed[feeds] = (f'{error} (in "{feeds}", which this query reads)',
                                      sqlstate)
                for scan in list(self.scans.get(feeds, ())):
                    self._fail(scan, *self.failed[feeds])
        for parent, _ in v.parents:
            self._fail(parent, error, sqlstate)

    def take_failures(self) -> dict:
        out, self.failures = self.failures, {}
        return out

    def finished(self) -> list:
        """Queries that can produce nothing more (their LIMIT is reached)."""
        return [qid for qid, q in self.queries.items()
                if q.sink.children and q.sink.children[0].op.exhausted()]

    def announce_start(self, v: _Vertex, ts: int) -> None:
        """An aggregate without GROUP BY answers at every instant from when the streams it
        reads begin (COUNT(*) = 0 over an empty window): tell the operators above a scan
        when that scan's first tuple came."""
        for parent, _ in v.parents:
            if parent.op is not None:
                parent.op.on_start(ts)
            self.announce_start(parent, ts)

    def flush(self, sink: _Vertex, out: dict) -> None:
        """The input has ended: every operator below ``sink`` gives up what it holds (one
        that fails ends its queries, as in ``deliver``)."""
        for v in below(sink):
            if v.op is None:
                continue
            started = perf_counter_ns()
            given = self._guarded(v, v.op.on_end)
            if given is not None:
                self.deliver(v, v.counted(started, (), given), out)

    def feed(self, stream: str, batch: pa.RecordBatch, out: dict) -> int | None:
        """A stream's batch into every scan of it; returns its latest ts (µs), if any."""
        latest = None
        for v in list(self.scans.get(stream.lower(), ())):
            for first in v.counted(perf_counter_ns(), (batch,), v.op.on_batch(batch)):
                lo, hi = pc.min_max(first.column(TS)).values()
                if v.unannounced:           # once, not for every batch: it walks the graph
                    self.announce_start(v, lo.as_py())
                    v.unannounced = False
                latest = hi.as_py() if latest is None else max(latest, hi.as_py())
                self.deliver(v, [first], out)
        if latest is not None:
            self._taken(stream.lower(), batch, latest)
        return latest

    def _taken(self, name: str, batch: pa.RecordBatch, latest: int) -> None:
        before = self.latest.get(name)
        self.latest[name] = latest if before is None else max(before, latest)
        if not self.keep_edges or (before is not None and latest < before):
            return
        scan = self.scans[name][0].op
        if getattr(scan.node, "timestamp_column", None) is None:
            return                      # a relation's rows: no archive holds them
        edge = batch.filter(pc.equal(micros(batch.column(scan.node.timestamp_column)), latest))
        if before is None or latest > before:
            self.edges[name] = [edge]
        else:
            self.edges.setdefault(name, []).append(edge)

    def feed_every(self, stream: str, batch: pa.RecordBatch, out: dict) -> int | None:
        """A stream's batch, in event-time order, into its ordered and its arrival-order
        scans alike (one-time queries over stored tuples, where both orders are one)."""
        arrivals = self.feed(stream + P.ARRIVAL, batch, out)
        latest = self.feed(stream, batch, out)
        return latest if latest is not None else arrivals

    def push(self, stream: str, batch: pa.RecordBatch) -> dict:
        out: dict = {}
        self.feed(stream, batch, out)
        return self.client(out, batch.num_rows, stream)

    def watermark(self, stream: str, ts: int) -> dict:
        """A stream's BOUNDARY, to its ordered scans and to those reading its arrivals (a
        quiet stream's time still moves on for them)."""
        out: dict = {}
        self.mark(stream, ts, out)
        return self.client(out)

    def mark(self, stream: str, ts: int, out: dict) -> None:
        """``watermark``'s routing: what it releases stays in ``out`` as the sinks got it."""
        name = stream.lower()
        self.marks[name] = ts
        self.mark_counts[name] = self.mark_counts.get(name, 0) + 1
        for feed in (stream.lower(), stream.lower() + P.ARRIVAL):
            for v in list(self.scans.get(feed, ())):
                self.deliver(v, v.counted(perf_counter_ns(), (), v.op.on_watermark(ts)), out)

    def end(self, qid) -> list:
        """Flush what query ``qid`` still holds (its input has ended)."""
        out: dict = {}
        self.flush(self.queries[qid].sink, out)
        return self.client({qid: out.get(qid, [])}).get(qid, [])

    def checkpoint(self, qid) -> tuple[dict, list, dict] | None:
        """({stream: where its state stands}, [each operator's state, in ``below``'s order],
        {stream: its tuples at that instant the state has}) of private query ``qid``: the
        state has every tuple of a stream before its position, and at it those (a tuple at
        a BOUNDARY's instant may still come after it), so the archive from there on less
        those is exactly what it has not seen. None when it cannot be saved now: an operator
        whose state cannot, a stream with tuples past its latest BOUNDARY, or one that has
        had no BOUNDARY since the query began."""
        q = self.queries.get(qid)
        if q is None or not q.private or q.unopened:
            return None
        positions, edges = {}, {}
        for feed in q.streams:
            mark = self.marks.get(feed)
            if mark is None or self.mark_counts[feed] == q.marks.get(feed, 0) or \
                    self.latest.get(feed, mark - 1) > mark:
                return None
            positions[P.stream_of(feed)] = mark
            if self.latest.get(feed) == mark:
                if feed not in self.edges:
                    return None         # (tuples taken before edges were kept)
                edges[P.stream_of(feed)] = pa.Table.from_batches(self.edges[feed])
        ops = [v.op for v in below(q.sink) if v.op is not None]
        if not positions or any(op.checkpointed is None for op in ops):
            return None
        return positions, [op.checkpoint() if op.checkpointed else None for op in ops], edges

    def restore(self, qid, states: list) -> None:
        """Give privately built, opened query ``qid`` its operators' state from a
        checkpoint (``checkpoint``'s list) of the same plan."""
        ops = [v.op for v in below(self.queries[qid].sink) if v.op is not None]
        if len(ops) != len(states):
            raise ValueError(f"a checkpoint of {len(states)} operators, a query of {len(ops)}")
        for op, state in zip(ops, states):
            if state:
                op.restore(state)

    def state_size(self, qid) -> int:
        """Rows held by the operators query ``qid`` reads (shared ones included)."""
        return sum(v.op.state_size() for v in below(self.queries[qid].sink)
                   if v.op is not None)

    def analyze(self, qids) -> dict:
        """EXPLAIN ANALYZE of the queries ``qids``: {qid: its operators as a tree of dicts
        (``label``, ``rows_in``, ``rows_out``, ``batches``, ``ms``, ``state`` rows held now,
        ``shared``: how many running queries read the operator, ``inputs``)}, counted since
        the query began, however long the operator has run for others. An operator a query
        reads twice (q5's aggregate) is shown once; its second place says ``repeat``."""
        readers: dict = {}
        for other in self.queries.values():
            for v in below(other.sink):
                readers[id(v)] = readers.get(id(v), 0) + 1
        return {qid: self._tree(self.queries[qid], readers) for qid in qids}

    @staticmethod
    def _tree(q: _Query, readers: dict) -> dict:
        shown: set = set()

        def node(v) -> dict:
            if id(v) in shown:
                return {"label": _label(v), "repeat": True, "inputs": []}
            shown.add(id(v))
            base = q.baseline.get(id(v), (0, 0, 0, 0))
            rows_in, rows_out, batches, ns = (a - b for a, b in zip(v.counters(), base))
            return {"label": _label(v), "rows_in": rows_in, "rows_out": rows_out,
                    "batches": batches, "ms": ns / 1e6, "state": v.op.state_size(),
                    "shared": readers[id(v)], "inputs": [node(c) for c in v.children]}

        return node(q.sink.children[0])

    def quality(self, qid) -> list:
        """What each quality-driven join of query ``qid`` measures (cq_joins)."""
        return [q for v in below(self.queries[qid].sink)
                if v.op is not None and (q := v.op.quality()) is not None]

    # ------------------------------------------------------------------ output
    def client(self, out: dict, rows_in: int = 0, stream: str | None = None) -> dict:
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
            if q.floor is not None:
                batches = [b.filter(pc.greater(b.column(TE), q.floor)) for b in batches]
            if q.since is not None:
                batches = [b.filter(pc.greater_equal(b.column(TS), q.since)) for b in batches]
            client = [client_batch(q.plan, q.out_names, b) for b in batches if b.num_rows]
            q.rows_out += sum(b.num_rows for b in client)
            if client:
                result[qid] = client
        return result
