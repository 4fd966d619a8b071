"""The window kinds a plan's ``Window`` node carries (ω's configurations, seed 000 §2, DESIGN §5):
frozen plan data ``plan.py`` re-exports, each the one home of what the executor knows of its
kind: the interval it gives a tuple (``assign``, on whole batches, for the kinds that decide it
from the tuple alone), how far back it reaches when its query starts (``reach``: what a query
over an archived stream is primed with), and how far a late tuple's effect reaches
(``late_end`` / ``late_since``: what RECOMPUTE reads again). A kind whose ω keeps state (ROWS,
sessions, loops, Flink's window tables) has its operator beside it (``rows_window.py``,
``session_window.py``, ``loop_window.py``, ``grid_window.py``; ``time_window.py`` runs every
``assign``). A new kind is a class here, its syntax in ``dialect/window_kinds.py`` and, where
its ω keeps state, its operator here.

>>> RangeWindow(10).reach(100), SlideWindow(10, 5).reach(100), FixedWindow(2, 5).reach(100)
(91, 86, 2)
>>> RangeWindow(10).reach(None), FixedWindow(2, 5).reach(None), UnboundedWindow().reaches_back
(None, 2, False)
"""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck
from ..batches import INF, TS, with_interval
from .loops import iterations


EARLIEST = -(1 << 62)     # µs: before every tuple (a reach that takes the whole archive)


def _int64(a) -> np.ndarray:
    return a.to_numpy(zero_copy_only=False).astype(np.int64)


class _Kind:
    """What a kind does unless it says otherwise: it starts with its query (nothing from
    before it), a late tuple changes the answer from its time on, and its ω keeps state."""
    assign = None                 # (batch) -> batch with each tuple's interval, if stateless

    @property
    def reaches_back(self) -> bool:
        """Whether the window holds tuples from before its query started (it says how far
        back in ``reach``: [NOW] only those at that instant); [UNBOUNDED] and count windows
        start with the query, as a TelegraphCQ query does."""
        return type(self).reach is not _Kind.reach

    @property
    def late_bounded(self) -> bool:
        """Whether a late tuple's effect ends (it says where in ``late_end``) before forever."""
        return type(self).late_end is not _Kind.late_end

    def reach(self, st: int | None, con=None) -> int | None:
        """The earliest instant (µs) whose tuples the window needs when its query starts at
        ``st``; None when it needs nothing from before ``st``, or when ``st`` is None (not
        known yet) and the reach depends on it. ``con``: a DuckDB cursor for a loop's
        expressions."""
        return None

    def late_end(self, t: np.ndarray) -> np.ndarray:
        """Where a tuple at ``t`` (an array of µs) stops changing the window's answers."""
        return np.full(np.shape(t), INF)

    def late_since(self, t: int) -> int | None:
        """From when the archive is read for the window's state at ``t`` (None: from its
        beginning)."""
        return None


@dataclass(frozen=True)
class RangeWindow(_Kind):
    """[RANGE i]: te = ts + i. At instant t the window holds tuples with t - i < ts <= t."""
    size_us: int

    def assign(self, batch):
        return with_interval(batch, batch.column(TS), pc.add(batch.column(TS), self.size_us))

    def reach(self, st, con=None):
        return None if st is None else st - self.size_us + 1

    def late_end(self, t):
        return t + self.size_us

    def late_since(self, t):
        return t - self.size_us


@dataclass(frozen=True)
class SlideWindow(_Kind):
    """[RANGE i SLIDE j]: the range window sampled at τ = start + k·j; the answer for
    τ - i < ts <= τ is valid for [τ, τ + j) and wtime(*) is τ. ``start_us`` None means the
    largest multiple of j before the query started (TelegraphCQ's rule)."""
    size_us: int
    slide_us: int
    start_us: int | None = None

    def assign(self, batch):
        """A tuple is in the answers for the τ in [ts, ts + i), each valid for [τ, τ + j):
        together [τ_first, τ_last + j); a slide longer than the range leaves gaps."""
        start = self.start_us or 0
        ts = _int64(batch.column(TS))
        first = start + -((start - ts) // self.slide_us) * self.slide_us      # ceil to grid
        last = start + ((ts + self.size_us - 1 - start) // self.slide_us) * self.slide_us
        keep = first <= last
        if keep.all():                  # the usual case: no copy of the rows
            return with_interval(batch, pa.array(first), pa.array(last + self.slide_us))
        kept = batch.filter(pa.array(keep))
        return with_interval(kept, pa.array(first[keep]), pa.array(last[keep] + self.slide_us))

    def reach(self, st, con=None):
        # it answers for a slide instant τ in (st - j, st], over τ - i < ts <= τ
        return None if st is None else st - self.size_us - self.slide_us + 1

    def late_end(self, t):
        return t + self.size_us + self.slide_us

    def late_since(self, t):
        return t - self.size_us - self.slide_us


@dataclass(frozen=True)
class GridWindow(_Kind):
    """Flink's window table functions, TUMBLE, HOP and CUMULATE: windows [start, end) on a grid
    of ``step_us`` from ``offset_us``, ``size_us`` long (CUMULATE: windows that all start at a
    multiple of the size and end a step apart). A tuple comes once per window holding it, with
    that window's start and end as the columns ``columns`` names (window_start, window_end,
    window_time = end - 1 µs), each copy valid for [end - 1 µs, end - 1 µs + step): the answer
    for a window holds from its last instant until the next window's, as a slide's does."""
    size_us: int
    step_us: int
    cumulative: bool = False
    offset_us: int = 0
    columns: tuple = ()           # (start, end, time) columns the window adds

    def copies(self, batch):
        """Each tuple of ``batch`` once per window holding it (``grid_window.py`` releases
        them in the order of their intervals' starts)."""
        ts = _int64(batch.column(TS))
        if self.cumulative:
            start = self.offset_us + (ts - self.offset_us) // self.size_us * self.size_us
            first = start + ((ts - start) // self.step_us + 1) * self.step_us
            last = start + self.size_us
        else:   # the ends e on the grid with e - size <= ts < e
            first = self.offset_us + ((ts - self.offset_us) // self.step_us + 1) * self.step_us
            last = self.offset_us + (ts + self.size_us - self.offset_us) // self.step_us \
                * self.step_us
        counts = np.maximum((last - first) // self.step_us + 1, 0)
        rows = np.repeat(np.arange(len(ts)), counts)
        # the k-th copy of a row ends k steps after its first window's end
        k = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        end = first[rows] + k * self.step_us
        copies = batch.take(pa.array(rows)) if len(rows) != len(ts) or not counts.all() \
            else batch
        begin = start[rows] if self.cumulative else end - self.size_us
        stamped = with_interval(copies, pa.array(end - 1), pa.array(end - 1 + self.step_us))
        for name, values in zip(self.columns, (begin, end, end - 1)):
            stamped = stamped.append_column(name, pa.array(values).cast(pa.timestamp("us")))
        return stamped

    def first_copy(self, ts: int) -> int:
        """Where the earliest copy of a tuple at ``ts`` or later starts: its first window's
        end - 1 µs (``copies``' ``first``, which grows with ts)."""
        if self.cumulative:
            start = self.offset_us + (ts - self.offset_us) // self.size_us * self.size_us
            return start + ((ts - start) // self.step_us + 1) * self.step_us - 1
        return self.offset_us + ((ts - self.offset_us) // self.step_us + 1) * self.step_us - 1

    def reach(self, st, con=None):
        return None if st is None else st - self.size_us - self.step_us + 1

    def late_end(self, t):
        return t + self.size_us + self.step_us

    def late_since(self, t):
        return t - self.size_us - self.step_us


@dataclass(frozen=True)
class RowsWindow(_Kind):
    """[ROWS n] / [PARTITION BY keys ROWS n WHERE p]: te = ts of the n-th later tuple in the
    same partition; ``where`` filters before windowing (``rows_window.py``)."""
    rows: int
    partition_by: tuple = ()      # tuple[Expr]
    where: object = None          # Expr | None


@dataclass(frozen=True)
class VersionWindow(_Kind):
    """A PostgreSQL table's changes as its row versions (``version_window.py``): a change
    (``op`` column: I insert, U update, D delete, T truncate) holds from its commit until
    the next change of the same key (``partition_by``), or a truncate; deletes and
    truncates end versions and are no rows. Every version still valid may be as old as
    the table, so a query over it starts with the whole archive."""
    partition_by: tuple = ()      # tuple[Expr]: the table's key
    op: str = ""                  # the internal name of the change's kind column

    def reach(self, st, con=None):
        return EARLIEST


@dataclass(frozen=True)
class NowWindow(_Kind):
    """[NOW]: te = ts + 1 µs. It reaches back to its start's own instant: the tuples at the
    seam are in its answer there, and a query started over an archive opens there, so an
    aggregate with no GROUP BY answers COUNT(*) = 0 from its start rather than from the
    stream's next BOUNDARY."""

    def assign(self, batch):
        return with_interval(batch, batch.column(TS), pc.add(batch.column(TS), 1))

    def reach(self, st, con=None):
        return st

    def late_end(self, t):
        return t + 1

    def late_since(self, t):
        return t


@dataclass(frozen=True)
class UnboundedWindow(_Kind):
    """[UNBOUNDED] (also a stream without a window): te = ∞."""

    def assign(self, batch):
        return with_interval(batch, batch.column(TS), pa.array(np.full(batch.num_rows, INF)))


@dataclass(frozen=True)
class FixedWindow(_Kind):
    """[BETWEEN t1 AND t2]: the tuples with t1 <= ts < t2, valid over [t1, t2)."""
    low_us: int
    high_us: int

    def assign(self, batch):
        ts = batch.column(TS)
        kept = batch.filter(pc.and_(pc.greater_equal(ts, self.low_us),
                                    pc.less(ts, self.high_us)))
        return with_interval(kept, kept.column(TS),
                             pa.array(np.full(kept.num_rows, self.high_us)))

    def reach(self, st, con=None):
        return self.low_us              # whatever st is

    def late_end(self, t):
        return np.where((t >= self.low_us) & (t < self.high_us), self.high_us, t)

    def late_since(self, t):
        return self.low_us


@dataclass(frozen=True)
class SessionWindow(_Kind):
    """[SESSION gap] / [PARTITION BY keys SESSION gap]: a session is a run of a partition's
    tuples each less than ``gap_us`` after the one before; it ends ``gap_us`` after its last
    tuple, and from then on its tuples are valid for one gap: [end, end + gap), as a tumbling
    window's answer holds for one slide. Its tuples gain its start and end as the columns
    ``columns`` names (``wstart(*)``, ``wend(*)``; ``session_window.py``)."""
    gap_us: int
    partition_by: tuple = ()      # tuple[Expr]
    columns: tuple = ()           # (start column, end column) the window adds


@dataclass(frozen=True)
class IntervalWindow(_Kind):
    """A stream with an ENDTIMESTAMPCOLUMN keeps each tuple's own [ts, te)."""

    def assign(self, batch):
        return batch


@dataclass(frozen=True)
class LoopWindow(_Kind):
    """A StreaQueL loop: for (t = init; condition; t = next) { WindowIs(S, left, right) }.
    Each expression is DuckDB SQL in the loop variable (a TIMESTAMP) and the names ``ST`` (the
    query's start) and ``NOW`` (the current time), which the back end binds; numbers written
    in the loop are seconds. Edges that do not mention the variable are landmarks
    (``loop_window.py``)."""
    var: str
    init: object                  # each an Expr
    condition: object
    next: object
    left: object
    right: object

    def reach(self, st, con=None):
        """The left edge of the loop's first window (iterations in time order; edges never
        move back), None when it has no iteration. The archive gives the past, so the loop
        may run backwards from ``st``."""
        if st is None:
            return None
        if con is None:
            with closing(duck.Database()) as database, closing(database()) as cursor:
                return self.reach(st, cursor)
        it = iterations(self, st, con, primed=True)
        return int(it.left[0]) if len(it.starts) else None


WindowKind = Union[RangeWindow, SlideWindow, GridWindow, RowsWindow, VersionWindow, NowWindow,
                   UnboundedWindow, FixedWindow, IntervalWindow, LoopWindow, SessionWindow]
