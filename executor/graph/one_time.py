"""The one-time modes of a running graph: priming a new query with archived history up to its
seam, a snapshot (a query run over given batches, its rows valid at one instant), and a replay
(a query run over archived batches as though none had been late, for recomputing)."""
from __future__ import annotations

from time import perf_counter_ns

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import checkpoints
from .. import plan as P
from ..batches import INF, TE, TS, micros
from .results import client_batch, timestamps
from .running_graph import RunningGraph, below


def prime(graph: RunningGraph, qid, history: dict, seam: int | None,
          upto: dict | None = None) -> dict:
    """Feed privately built query ``qid`` the archived tuples its windows reach back to
    ({stream: table in event-time order}), as though it had run all along; of what that
    gives, only rows still valid at ``seam`` (the instant live data takes over; None: all)
    go out, except in a loop, which starts at the seam (ST) and answers for every
    iteration. ``upto``: each stream's BOUNDARY when its history was read, given after it
    (a query started again after a crash, whose history may reach past its seam)."""
    out: dict = {}
    graph.open_query(qid, seam)          # ST is when the query started, not its first tuple
    vertices = [v for v in below(graph.queries[qid].sink) if v.op is not None]
    loops = any(v.op.iterates for v in vertices)
    # a loop says which stretch of time it answers for; other windows answer from now on,
    # the rows that priming gives and those the first BOUNDARY closes alike
    if not loops:
        graph.queries[qid].floor = seam
    for v in vertices:
        if v.op.source is not None and P.stream_of(v.op.source) in history:
            for batch in history[P.stream_of(v.op.source)].to_batches():
                for first in v.counted(perf_counter_ns(), (batch,), v.op.on_batch(batch)):
                    graph.announce_start(v, pc.min(first.column(TS)).as_py())
                    graph.deliver(v, [first], out)
    for v in vertices:
        at = (upto or {}).get(P.stream_of(v.op.source)) if v.op.source is not None else None
        if at is not None and (seam is None or at > seam):
            graph.deliver(v, v.counted(perf_counter_ns(), (), v.op.on_watermark(at)), out)
    rows = out.get(qid, [])
    return graph.client({qid: rows} if rows else {})


def resume(graph: RunningGraph, qid, history: dict, since: int,
           upto: dict | None = None, restore: str | None = None) -> dict:
    """Feed privately built query ``qid`` the archived tuples it needs to go on from ``since``
    as though it had run all along (a cursor resumed from a progress watermark, or restarted
    with a new back end): the tuples before ``since``, a BOUNDARY there, which splits the rows
    open across it as the one that ran all along split them, then the rest up to the seam;
    only rows that begin at ``since`` or later go out, the earlier ones having been sent.
    ``upto``: each stream's BOUNDARY when its history was read (the query is private, so it
    alone gets them), so that its rows up to there need not wait for the stream's next.
    ``restore``: a checkpoint of the query (``checkpoints``) its operators start from, the
    history then holding each stream's tuples from the checkpoint's position on; where that
    is after ``since`` the operators are past it already and were split as the first ones."""
    out: dict = {}
    graph.open_query(qid, since)
    graph.queries[qid].since = since
    positions = {}
    scans = [v for v in below(graph.queries[qid].sink)
             if v.op is not None and v.op.source is not None]
    if restore is not None:
        states, edges = checkpoints.load(restore)
        graph.restore(qid, states)
        positions = checkpoints.positions(restore)
        history = dict(history)
        for v in scans:
            name = P.stream_of(v.op.source)
            table = history.get(name)
            if table is not None and name in edges:
                ts = micros(table.column(v.op.node.timestamp_column))
                history[name] = checkpoints.unseen(table, ts, positions[name], edges.pop(name))
    for before in (True, False):
        for v in scans:
            table = history.get(P.stream_of(v.op.source))
            for batch in table.to_batches() if table is not None else ():
                for first in v.counted(perf_counter_ns(), (batch,), v.op.on_batch(batch)):
                    ts = first.column(TS)
                    part = first.filter(pc.less(ts, since) if before else
                                        pc.greater_equal(ts, since))
                    if part.num_rows:
                        graph.announce_start(v, pc.min(part.column(TS)).as_py())
                        graph.deliver(v, [part], out)
        if before:
            for v in scans:
                if positions.get(P.stream_of(v.op.source), since - 1) < since:
                    graph.deliver(v, v.counted(perf_counter_ns(), (),
                                               v.op.on_watermark(since)), out)
    for v in scans:                 # where each stream stood when its history was read
        stream = P.stream_of(v.op.source)
        at = (upto or {}).get(stream)
        if at is not None and at > max(since, positions.get(stream, since)):
            graph.deliver(v, v.counted(perf_counter_ns(), (), v.op.on_watermark(at)), out)
    rows = out.get(qid, [])         # (``client`` keeps those that begin at ``since`` or later)
    return graph.client({qid: rows} if rows else {})


def snapshot(graph: RunningGraph, qid, batches: dict, at: int | None) -> pa.Table | None:
    """Query ``qid`` run over ``batches`` ({stream: [batch]}, each in event-time order)
    to the end: its rows valid at instant ``at`` (default: the latest tuple's time)."""
    out: dict = {}
    latest = [graph.feed_every(name, b, out) for name, group in batches.items() for b in group]
    latest = [t for t in latest if t is not None]
    last = at if at is not None else (max(latest) if latest else None)
    if last is not None:
        # nothing earlier than the instant will come: every stream read is there (an
        # aggregate without GROUP BY answers COUNT(*) = 0 over a stream with no tuple yet)
        relations = {q.feeds for q in graph.queries.values()}
        for name in {P.stream_of(feed) for q in graph.queries.values() for feed in q.streams}:
            if name not in relations:        # a named window's rows follow its streams'
                graph.mark(name, last, out)
    for other in list(graph.queries.values()):     # relations first: they were added first
        graph.flush(other.sink, out)
    q = graph.queries[qid]
    rows = [b for b in out.get(qid, []) if b.num_rows]
    if not rows or last is None:
        return None
    # an aggregate's rows from before its first tuple may have NULL-typed columns
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in rows],
                             promote_options="permissive")
    table = table.filter(pc.and_(pc.less_equal(table.column(TS), last),
                                 pc.greater(table.column(TE), last)))
    if not table.num_rows:          # rows there were, none valid at that instant
        return None
    return pa.Table.from_batches([client_batch(q.plan, q.out_names, b)
                                  for b in table.combine_chunks().to_batches()])


def replay(graph: RunningGraph, qid, batches: dict, seam: int, spans: np.ndarray,
           by_start: bool = False) -> pa.Table | None:
    """Query ``qid`` run over ``batches`` ({stream: [batch]}, each in event-time order)
    to the end, as though every tuple had come in time: its rows that began by ``seam``
    and overlap one of ``spans`` (an (n, 2) array of [from, to) µs, sorted, disjoint), or,
    ``by_start``, began within one; a row still holding at the seam open-ended; with
    valid_from / valid_to always."""
    out: dict = {}
    for name, group in batches.items():
        for b in group:
            graph.feed_every(name, b, out)
    q = graph.queries[qid]
    graph.flush(q.sink, out)
    rows = [b for b in out.get(qid, []) if b.num_rows]
    if not rows or not len(spans):
        return None
    table = pa.Table.from_batches(rows).combine_chunks()
    ts = table.column(TS).to_numpy(zero_copy_only=False)
    te = table.column(TE).to_numpy(zero_copy_only=False)
    first = np.searchsorted(spans[:, 1], ts, side="right")    # first span ending after ts
    hit = (first < len(spans)) & (ts <= seam)
    hit &= spans[np.minimum(first, len(spans) - 1), 0] < (ts + 1 if by_start else te)
    table = table.filter(pa.array(hit))
    te = np.where(te[hit] > seam, INF, te[hit])
    table = table.set_column(table.schema.get_field_index(TE), TE, pa.array(te, pa.int64()))
    table = table.sort_by([(TS, "ascending")])
    out_batches = []
    for b in table.to_batches():
        c = client_batch(q.plan, q.out_names, b)
        for name, src in (("valid_from", TS), ("valid_to", TE)):
            if name not in c.schema.names:
                c = c.append_column(name, timestamps(b.column(src)))
        out_batches.append(c)
    return pa.Table.from_batches(out_batches) if out_batches else None
