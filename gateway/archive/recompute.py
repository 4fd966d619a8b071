"""How far a late tuple reaches in a continuous query's answer, and from when the archive must
be read for the query's state there: RECOMPUTE's archive half (its statement is
``gateway/streams/recompute.py``).

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

from executor import plan as P

from gateway.pgwire import errors as E

_ROW_WISE = (P.Map, P.Filter)        # above a pattern: each match is its own row


@dataclass(frozen=True)
class Read:
    """A stream the query reads: ``reach(t)``, where a tuple at ``t`` (array) stops
    changing the answer, and ``since(t)``, from when the archive is read for the state at
    ``t`` (None: from its beginning)."""
    stream: str
    reach: Callable
    since: Callable


# a late tuple's effect that never ends (a window's default: ``executor/windows``)
_FOREVER = P.UnboundedWindow()


def _window_read(window, stream: str) -> Read:
    """A stream read through ``window`` (None: no window of its own): its kind says how far
    a late tuple reaches (``executor/windows``)."""
    window = _FOREVER if window is None else window
    return Read(stream, window.late_end, window.late_since)


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
        end, since = _FOREVER.late_end, _FOREVER.late_since
    elif window is None or (isinstance(window, P.UnboundedWindow) and row_wise):
        # a closing negation's match is known at first + W, itself included
        end, since = (lambda t: t + w + 1), (lambda t: t - w)
    elif window.late_bounded:
        end, since = (lambda t: window.late_end(t + w)), (lambda t: window.late_since(t) - w)
    else:
        end, since = _FOREVER.late_end, _FOREVER.late_since
    out += [Read(scan.stream, end, since) for scan in _scans(pattern)]


def _scans(node) -> list:
    if isinstance(node, P.StreamScan):
        return [node]
    if isinstance(node, P.WindowRelationScan):
        raise E.FeatureNotSupported(
            f"RECOMPUTE reads streams' archives; {node.name} is a named window or derived "
            "stream", hint="Write the query over the stream the relation reads.")
    return [s for c in P.children(node) for s in _scans(c)]


def reads(node, out: list, row_wise: bool = True) -> list:
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
        reads(c, out, row_wise and isinstance(node, _ROW_WISE))
    return out


def matches_by_start(node) -> bool:
    """A query that passes a pattern's matches on row by row, through the unbounded window
    a stream of matches has by default: a match's row never changes once made, so only
    those beginning within a late event's reach are new or gone."""
    while isinstance(node, _ROW_WISE):
        node = node.input
    return (isinstance(node, P.Window) and isinstance(node.window, P.UnboundedWindow)
            and isinstance(node.input, P.Pattern))


def merged(spans: np.ndarray) -> np.ndarray:
    """Sorted, disjoint [from, to) spans covering the same instants."""
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    ends = np.maximum.accumulate(spans[:, 1])
    new = np.ones(len(spans), bool)
    new[1:] = spans[1:, 0] > ends[:-1]
    starts = spans[new, 0]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(spans) - 1)
    return np.stack([starts, ends[last]], axis=1)
