"""A StreaQueL loop's iterations, ``for (t = init; condition; t = next) { WindowIs(S, left,
right) }``, from the instant ST the query starts: DuckDB evaluates the loop's expressions (over
whole arrays of t) on a cursor the caller gives and keeps. Both the loop's window operator and
the reach of a loop (``reach.py``) are computed from here."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .. import duck
from ..batches import micros

MAX_ITERATIONS = 1_000_000


class NotLive(Exception):
    """A loop whose windows move back in time: it needs the archive."""


@dataclass(frozen=True)
class Iterations:
    """Iteration k starts at ``starts[k]`` (µs, in time order), answers over the tuples with
    ``left[k] <= ts <= right[k]`` and holds until ``ends[k]``."""
    starts: np.ndarray
    ends: np.ndarray
    left: np.ndarray
    right: np.ndarray


def _eval(con, window, expr: str, ts: np.ndarray, st: int) -> np.ndarray:
    """``expr`` of the loop variable at each of ``ts`` (µs), as µs or booleans."""
    t = pa.table({"t": pa.array(ts, pa.int64()).cast(pa.timestamp("us"))})
    out = duck.run(con, "it", t,
                   f"SELECT {expr} AS v FROM (SELECT t AS {duck.quote(window.var)}, "
                   f"make_timestamp({st}) AS \"ST\", make_timestamp({st}) AS \"NOW\" "
                   "FROM it)").column("v")
    if pa.types.is_timestamp(out.type):
        out = micros(out)
    return out.to_numpy(zero_copy_only=False)


def iterations(window, st: int, con, *, primed: bool) -> Iterations:
    """The iterations of loop ``window`` (a ``LoopWindow`` of the plan) when its query starts
    at ``st``. ``primed``: the archive gives the past, so a loop may move backwards (its
    iterations are then taken in time order, each valid for one step from its t)."""
    t0 = int(_eval(con, window, window.init.sql, np.array([st]), st)[0])
    t1 = int(_eval(con, window, window.next.sql, np.array([t0]), st)[0])
    step = t1 - t0
    if step == 0 or (step < 0 and not primed):
        raise NotLive("a loop whose variable does not move forward reads the past: make "
                      "the stream TYPE ARCHIVED")
    candidates = t0 + step * np.arange(MAX_ITERATIONS, dtype=np.int64)
    nxt = _eval(con, window, window.next.sql, candidates[:3], st)
    if not np.array_equal(np.diff(np.append(candidates[:3], nxt[-1])), np.full(3, step)):
        raise NotLive("a loop whose step changes does not run in the back end yet")
    ok = _eval(con, window, window.condition.sql, candidates, st).astype(bool)
    k = int(np.argmin(ok)) if not ok.all() else MAX_ITERATIONS
    starts = candidates[:k] if step > 0 else candidates[:k][::-1].copy()
    left = _eval(con, window, window.left.sql, starts, st) if k else starts
    right = _eval(con, window, window.right.sql, starts, st) if k else starts
    if k and (np.any(np.diff(left) < 0) or np.any(np.diff(right) < 0)):
        raise NotLive("a loop whose window's edges move against its variable does not run "
                      "in the back end yet")
    return Iterations(starts, starts + abs(step), left, right)
