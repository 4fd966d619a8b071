"""How far back a window reaches when its query starts at instant ``st``: the earliest event
time whose tuples its answers from ``st`` on depend on, so that a query over an archived stream
is primed with exactly those. Pure, except that a StreaQueL loop's edges are evaluated by DuckDB.

>>> from executor.windows import FixedWindow, RangeWindow, SlideWindow, UnboundedWindow
>>> reach(RangeWindow(10), 100), reach(SlideWindow(10, 5), 100), reach(FixedWindow(2, 5), 100)
(91, 86, 2)
>>> reach(RangeWindow(10), None), reach(FixedWindow(2, 5), None), reaches_back(UnboundedWindow())
(None, 2, False)
"""
from __future__ import annotations

from contextlib import closing

from .. import duck
from . import FixedWindow, LoopWindow, RangeWindow, SlideWindow
from .loops import iterations


def _loop(window: LoopWindow, st: int, con) -> int | None:
    """The left edge of a loop's first window (iterations in time order; edges never move
    back), None when it has no iteration. The archive gives the past, so the loop may run
    backwards from ``st``."""
    if con is None:
        with closing(duck.Database()) as database, closing(database()) as cursor:
            return _loop(window, st, cursor)
    it = iterations(window, st, con, primed=True)
    return int(it.left[0]) if len(it.starts) else None


# window kind -> (the earliest instant needed from a start at st, whether that depends on st).
# At st a range window holds st - i < ts <= st; a hopping one answers for a slide instant τ in
# (st - j, st], over τ - i < ts <= τ; a fixed one starts at its low end whatever st is.
_REACH = {
    RangeWindow: (lambda w, st, con: st - w.size_us + 1, True),
    SlideWindow: (lambda w, st, con: st - w.size_us - w.slide_us + 1, True),
    FixedWindow: (lambda w, st, con: w.low_us, False),
    LoopWindow: (_loop, True),
}


def reaches_back(window) -> bool:
    """Whether ``window`` holds tuples from before its query started; [UNBOUNDED], [NOW] and
    count windows start with the query, as a TelegraphCQ query does."""
    return type(window) in _REACH


def reach(window, st: int | None, con=None) -> int | None:
    """The earliest instant (µs) whose tuples ``window`` needs when its query starts at
    ``st``; None when it needs nothing from before ``st`` (a loop: no iteration), or when
    ``st`` is None (not known yet) and the reach depends on it. ``con``: a DuckDB cursor for
    a loop's expressions; without one a short-lived database is used and closed."""
    edge, from_st = _REACH.get(type(window), (None, False))
    if edge is None or (from_st and st is None):
        return None
    return edge(window, st, con)
