"""The window kinds a plan's ``Window`` node carries (ω's configurations, seed 000 §2, DESIGN §5),
frozen plan data ``plan.py`` re-exports, and how far each reaches back (``reach``, ``loops``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(frozen=True)
class RangeWindow:
    """[RANGE i]: te = ts + i. At instant t the window holds tuples with t - i < ts <= t."""
    size_us: int


@dataclass(frozen=True)
class SlideWindow:
    """[RANGE i SLIDE j]: the range window sampled at τ = start + k·j; the answer for
    τ - i < ts <= τ is valid for [τ, τ + j) and wtime(*) is τ. ``start_us`` None means the
    largest multiple of j before the query started (TelegraphCQ's rule)."""
    size_us: int
    slide_us: int
    start_us: int | None = None


@dataclass(frozen=True)
class RowsWindow:
    """[ROWS n] / [PARTITION BY keys ROWS n WHERE p]: te = ts of the n-th later tuple in the
    same partition; ``where`` filters before windowing."""
    rows: int
    partition_by: tuple = ()      # tuple[Expr]
    where: object = None          # Expr | None


@dataclass(frozen=True)
class NowWindow:
    """[NOW]: te = ts + 1 µs."""


@dataclass(frozen=True)
class UnboundedWindow:
    """[UNBOUNDED] (also a stream without a window): te = ∞."""


@dataclass(frozen=True)
class FixedWindow:
    """[BETWEEN t1 AND t2]: the tuples with t1 <= ts < t2, valid over [t1, t2)."""
    low_us: int
    high_us: int


@dataclass(frozen=True)
class IntervalWindow:
    """A stream with an ENDTIMESTAMPCOLUMN keeps each tuple's own [ts, te)."""


@dataclass(frozen=True)
class LoopWindow:
    """A StreaQueL loop: for (t = init; condition; t = next) { WindowIs(S, left, right) }.
    Each expression is DuckDB SQL in the loop variable (a TIMESTAMP) and the names ``ST`` (the
    query's start) and ``NOW`` (the current time), which the back end binds; numbers written
    in the loop are seconds. Edges that do not mention the variable are landmarks."""
    var: str
    init: object                  # each an Expr
    condition: object
    next: object
    left: object
    right: object


WindowKind = Union[RangeWindow, SlideWindow, RowsWindow, NowWindow, UnboundedWindow,
                   FixedWindow, IntervalWindow, LoopWindow]
