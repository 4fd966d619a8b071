"""Refuse plans whose state can grow without bound: a stream-stream join, a difference, an
intersection or a Σ over several inputs, with an input that keeps every tuple forever (an
unbounded stream), can never purge its state, unless the join's condition or state_ttl frees
that input's tuples (``join_state``).
(A table is bounded by its size, and ``Stream(t)`` without a window reads as the table t.)

>>> from executor import plan as P
>>> s = P.StreamScan("s", "s", (), "t")
>>> endless = P.Window(s, P.UnboundedWindow(), ())
>>> unbounded(endless), unbounded(P.Window(s, P.RangeWindow(1), ()))
(True, False)
"""
from __future__ import annotations

from executor import plan as P

from ..errors import Unsupported

_HINT = ("Give one of them a window, e.g. {name} [RANGE '1 minute'] or {name} [ROWS 100]; "
         "a stream without a window is [UNBOUNDED]. Or SET cq.unbounded_state = on to keep "
         "every tuple (Flink's default: memory grows with the input).")
_JOIN_HINT = ("Give {name} a window (e.g. {name} [RANGE '1 minute']), bound the join by "
              "event time (e.g. b.t BETWEEN a.t AND a.t + INTERVAL '1 hour', with b.t the "
              "other stream's TIMESTAMPCOLUMN), write WITH (state_ttl = '1 hour') after the "
              "query, or SET cq.unbounded_state = on to keep every tuple (Flink's default: "
              "memory grows with the input).")


def unbounded(node) -> bool:
    """Whether ``node`` keeps tuples valid forever (so a join partner must keep them all)."""
    if isinstance(node, P.Window):
        return isinstance(node.window, P.UnboundedWindow)
    if isinstance(node, (P.TableScan, P.WindowRelationScan, P.Aggregate)):
        return False
    return any(unbounded(c) for c in P.children(node))


def _stream_name(node) -> str:
    if isinstance(node, P.StreamScan):
        return node.alias
    kids = P.children(node)
    return _stream_name(kids[0]) if kids else "s"


_WHAT = {P.Join: "a join", P.Difference: "a difference", P.Intersection: "an intersection"}


def check_bounded_state(node) -> None:
    """A stream-stream join, a difference or an intersection must purge its state: an input
    that keeps its tuples forever forces the other side's partner state (and its own) to grow
    forever."""
    if (isinstance(node, P.Join) and node.kind == "stream-stream") or \
            isinstance(node, (P.Difference, P.Intersection)):
        what = _WHAT[type(node)]
        # (a join's state_ttl sets both sides' keep)
        freed = node.keep if isinstance(node, P.Join) else (None, None)
        endless = [side for side, kept in zip((node.left, node.right), freed)
                   if unbounded(side) and kept is None]
        names = [_stream_name(side) for side in endless]
        hint = _JOIN_HINT if isinstance(node, P.Join) else _HINT
        if len(endless) == 2:
            raise Unsupported(f"{what} of two unbounded streams ({names[0]}, {names[1]}) "
                              "would keep every tuple forever",
                              hint=hint.format(name=names[1]))
        if endless:
            raise Unsupported(f"{what} with the unbounded stream {names[0]} would keep all "
                              "of its tuples forever", hint=hint.format(name=names[0]))
    if isinstance(node, P.SnapshotQuery) and len(node.inputs) > 1:
        # Σ keeps every input's valid tuples, as a join does; over one input alone its state
        # is that input's (EXPLAIN says it grows)
        endless = [_stream_name(i) for i in node.inputs if unbounded(i)]
        if endless:
            raise Unsupported(f"{node.reason} over the unbounded stream {endless[0]} and other "
                              "inputs would keep all of its tuples forever",
                              hint=_HINT.format(name=endless[0]))
    for child in P.children(node):
        check_bounded_state(child)
