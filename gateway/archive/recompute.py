"""``RECOMPUTE query``: seed 003's batch module over stored history. Tuples later than a
stream's slack are skipped by live processing but kept in the archive; this runs the
continuous query over the archive as though every tuple had come in time, and answers with
its rows whose validity interval meets the reach of a late tuple (those that would have been
different), ordered by valid_from, each with valid_from / valid_to.

A late tuple at ts reaches [ts, ts + size) in ``[RANGE size]``, [ts, ts + size + slide) in a
hopping window, the rest of its fixed window, and from ts on in windows without an end
(``[UNBOUNDED]``, ``[ROWS n]``, loops). Rows are settled up to the seam (the streams'
watermark): a row still holding there comes with valid_to NULL. The late tuples known are the
ones ``cq_late_tuples`` lists (since the server started, the newest 10,000 per stream).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from executor import plan as P
from executor.wire import INF

from gateway.archive.priming import History
from gateway.pgwire import errors as E
from gateway.pgwire import types as T
from gateway.pgwire.results import Field, Rows
from gateway.streams import queries as Q

# per window kind: where a tuple at ``t`` stops mattering, and how far back from the
# earliest late tuple the archive must be read for the window's state there
_REACH = {
    P.RangeWindow: (lambda w, t: t + w.size_us, lambda w, t: t - w.size_us),
    P.SlideWindow: (lambda w, t: t + w.size_us + w.slide_us,
                    lambda w, t: t - w.size_us - w.slide_us),
    P.NowWindow: (lambda w, t: t + 1, lambda w, t: t),
    P.FixedWindow: (lambda w, t: np.where((t >= w.low_us) & (t < w.high_us), w.high_us, t),
                    lambda w, t: w.low_us),
}
_FOREVER = (lambda w, t: np.full(np.shape(t), INF), lambda w, t: None)
_ROW_WISE = (P.Map, P.Filter)        # above a pattern: each match is its own row


@dataclass(frozen=True)
class _Read:
    """A stream the query reads: ``reach(t)``, where a tuple at ``t`` (array) stops
    changing the answer, and ``since(t)``, from when the archive is read for the state at
    ``t`` (None: from its beginning)."""
    stream: str
    reach: Callable
    since: Callable


def _window_read(window, stream: str) -> _Read:
    end, since = _REACH.get(type(window), _FOREVER)
    return _Read(stream, lambda t: end(window, t), lambda t: since(window, t))


def _pattern_reads(pattern: P.Pattern, window, row_wise: bool, out: list) -> None:
    """A pattern's streams: a late event changes only the matches known within WITHIN of it
    (a match spans less than WITHIN; a closing negation's match is known at its first
    event plus WITHIN), unless a skip makes each match depend on the one before (AFTER
    MATCH SKIP PAST LAST ROW, TO FIRST/LAST), MATCH_NUMBER() counts the matches before, or
    no WITHIN bounds it: then from it on. The
    window over the matches carries that reach on; under an aggregate, the unbounded one
    reaches from it on, and its state is read from the archive's beginning."""
    w = pattern.within_us
    numbered = any(m.func == "match_number" for m in pattern.measures)
    if w is None or pattern.skip != "all" or numbered:
        end, since = (lambda t: _FOREVER[0](None, t)), (lambda t: None)
    elif window is None or (isinstance(window, P.UnboundedWindow) and row_wise):
        # a closing negation's match is known at first + W, itself included
        end, since = (lambda t: t + w + 1), (lambda t: t - w)
    elif type(window) in _REACH:
        outer_end, outer_since = _REACH[type(window)]
        end, since = (lambda t: outer_end(window, t + w)), \
            (lambda t: outer_since(window, t) - w)
    else:
        end, since = (lambda t: _FOREVER[0](None, t)), (lambda t: None)
    out += [_Read(scan.stream, end, since) for scan in _scans(pattern)]


def _scans(node) -> list:
    if isinstance(node, P.StreamScan):
        return [node]
    if isinstance(node, P.WindowRelationScan):
        raise E.FeatureNotSupported(
            f"RECOMPUTE reads streams' archives; {node.name} is a named window or derived "
            "stream", hint="Write the query over the stream the relation reads.")
    return [s for c in P.children(node) for s in _scans(c)]


def _reads(node, out: list, row_wise: bool = True) -> list:
    """How each stream the plan reads is read (its window, or its pattern's);
    ``row_wise``: only Map and Filter above ``node``."""
    if isinstance(node, P.Window) and isinstance(node.input, P.StreamScan):
        out.append(_window_read(node.window, node.input.stream))
        return out
    if isinstance(node, P.Window) and isinstance(node.input, P.Pattern):
        _pattern_reads(node.input, node.window, row_wise, out)
        return out
    if isinstance(node, P.Pattern):
        _pattern_reads(node, None, row_wise, out)
        return out
    if isinstance(node, P.StreamScan):
        out.append(_window_read(None, node.stream))
    if isinstance(node, P.WindowRelationScan):
        raise E.FeatureNotSupported(
            f"RECOMPUTE reads streams' archives; {node.name} is a named window or derived "
            "stream", hint="Write the query over the stream the relation reads.")
    for c in P.children(node):
        _reads(c, out, row_wise and isinstance(node, _ROW_WISE))
    return out


def _matches_by_start(node) -> bool:
    """A query that passes a pattern's matches on row by row, through the unbounded window
    a stream of matches has by default: a match's row never changes once made, so only
    those beginning within a late event's reach are new or gone."""
    while isinstance(node, _ROW_WISE):
        node = node.input
    return (isinstance(node, P.Window) and isinstance(node.window, P.UnboundedWindow)
            and isinstance(node.input, P.Pattern))


def _merged(spans: np.ndarray) -> np.ndarray:
    """Sorted, disjoint [from, to) spans covering the same instants."""
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    ends = np.maximum.accumulate(spans[:, 1])
    new = np.ones(len(spans), bool)
    new[1:] = spans[1:, 0] > ends[:-1]
    starts = spans[new, 0]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(spans) - 1)
    return np.stack([starts, ends[last]], axis=1)


def _shape(session, p: P.Plan) -> tuple[list, pa.Schema]:
    """The answer's fields and Arrow schema: the query's, then valid_from / valid_to unless
    it selects them."""
    fields, schema = Q.typed_fields(session, p)
    for name in ("valid_from", "valid_to"):
        if name not in schema.names:
            fields = fields + [Field(name, T.duck_to_pg("TIMESTAMP").oid)]
            schema = schema.append(pa.field(name, pa.timestamp("us")))
    return fields, schema


def fields(session, p: P.Plan) -> list:
    return _shape(session, p)[0]


def _streams(session, p: P.Plan) -> list:
    """(how it is read, catalog object) of each stream the query reads, all archived."""
    out = []
    for read in _reads(p.root, []):
        obj = session.services.streams.by_relation(read.stream, kinds=("stream",))
        if obj is None or not obj.archived:
            raise E.PgError(f'stream "{read.stream}" is not archived, so late tuples cannot be '
                            "recomputed", sqlstate="55000",
                            hint="CREATE STREAM … TYPE ARCHIVED keeps every tuple, late ones "
                            "too.")
        out.append((read, obj))
    return out


def run(session, tree) -> Rows:
    query, tail = Q.without_order(tree.this)
    p = Q.plan_query(session, query)
    if p.mode == "snapshot":
        raise E.FeatureNotSupported("RECOMPUTE applies to continuous queries over streams",
                                    hint="A query over named windows only reads them at now.")
    out_fields, schema = _shape(session, p)
    read = _streams(session, p)
    spans = []
    for how, _ in read:
        late = session.services.ingest.log.late_times(how.stream)
        ends = np.asarray(how.reach(late), np.int64)
        spans.append(np.stack([late, ends], axis=1)[ends > late])
    spans = np.concatenate(spans) if spans else np.empty((0, 2), np.int64)
    if not len(spans):
        session.notices.append(("NOTICE", "00000", "no tuple the query reads has arrived "
                                "late since the server started: nothing to recompute"))
        return Rows(out_fields, schema.empty_table(), "SELECT")
    merged = _merged(spans)
    earliest = int(merged[0, 0])            # every stream is read from there, back its reach
    history = [History(how.stream, obj.key, obj.timestamp_column, obj.options.get("fragment"),
                       since_us=how.since(earliest)) for how, obj in read]
    link = session.services.backend
    by_start = _matches_by_start(p.root)

    def replay(primed, seam):
        return link.recompute(p, primed, seam, merged.tolist(), by_start)

    table = link.call(session.services.ingest.start_primed(history, replay))
    table = schema.empty_table() if table is None else table.cast(schema)
    return Rows(out_fields, Q.order_and_limit(session, table, tail), "SELECT")
