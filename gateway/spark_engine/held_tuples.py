"""ω ROWS and ω SESSION over one stream, on Spark: the back end's windows per partition key,
inside Spark's arbitrary stateful processing (``transformWithStateInPandas``, RocksDB store).

A key's state is one value: its tuples the window still holds (the stream's columns, their
event time and their place in the stream, as a pickled pandas frame) and how far its rows
have gone out. Each micro-batch that moves Spark's watermark to W calls every key holding
tuples (new tuples, or the timer each key sets just past the watermark). ROWS: a tuple is
valid from its ts until the ts of the n-th later tuple of its key; its rows for [gone out, W)
leave, cut at W as a BOUNDARY cuts the back end's, and tuples whose end has passed are
dropped, so every row of a batch starts at the watermark of the batch before or later.
SESSION: a key's tuples less than the gap apart are one session, ending a gap after its
last; a session ended by W leaves whole, each tuple valid [end, end + gap) with the session's
start and end, so a batch's rows start after the watermark of the batch before. Tuples at
one instant keep the stream's order (``cq_seq``), as the back end's windows do.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# the columns in and out as a RANGE aggregate's: a tuple's event time and place in the
# stream (spool file, row), a row's interval (µs); its state per key
from gateway.spark_engine.range_aggregate import FROM, SEQ, TO, TS_US, KeyedState, rows_ends

START, END = "cq_start", "cq_end"   # a session's bounds in µs, in a session's output


class _HeldTuples(KeyedState):
    """The state both windows keep; ``columns``: the stream's columns carried to the output
    (``cq_c0``, …)."""

    def __init__(self, columns: list):
        self.columns = columns

    def _run(self, key, new, watermark_ms: int):
        st = self._load()
        if new is not None:
            new = new[[*self.columns, TS_US, SEQ]]
            held = new if st is None else pd.concat([st["held"], new], ignore_index=True)
            st = {"held": held.sort_values([TS_US, SEQ], kind="stable", ignore_index=True),
                  "out": st["out"] if st else int(new[TS_US].min())}
        if st is None:
            return
        now = watermark_ms * 1000
        rows = None
        if now > st["out"]:
            rows, st["held"] = self._step(st["held"], st["out"], now)
            st["out"] = now
        self._keep(st, len(st["held"]) > 0, watermark_ms)
        if rows is not None and len(rows):
            yield rows

    def _step(self, held: pd.DataFrame, out: int, now: int) -> tuple:
        """(the rows of [out, now), the tuples still held), ``held`` in (ts, seq) order."""
        raise NotImplementedError


class RowsWindow(_HeldTuples):
    """[ROWS n] / [PARTITION BY keys ROWS n]: the key is the partition (none: one key)."""

    def __init__(self, columns: list, n: int):
        super().__init__(columns)
        self.n = n

    def _step(self, held, out, now):
        ts = held[TS_US].to_numpy(np.int64)
        end = rows_ends(ts, self.n)
        start = np.maximum(ts, out)
        upto = np.minimum(end, now)
        # a tuple whose end is its own ts never holds (equal timestamps), as on the back end
        go = start < upto
        rows = held.loc[go, self.columns].reset_index(drop=True)
        rows[FROM], rows[TO] = start[go], upto[go]
        return rows, held[end > now].reset_index(drop=True)


class SessionWindow(_HeldTuples):
    """[SESSION gap] / [PARTITION BY keys SESSION gap]: the key is the partition."""

    def __init__(self, columns: list, gap_us: int):
        super().__init__(columns)
        self.gap = gap_us

    def _step(self, held, out, now):
        ts = held[TS_US].to_numpy(np.int64)
        sid = np.cumsum(np.concatenate([[1], np.diff(ts) >= self.gap]))
        first = np.searchsorted(sid, sid, "left")
        last = np.searchsorted(sid, sid, "right") - 1
        start, end = ts[first], ts[last] + self.gap
        done = end <= now
        rows = held.loc[done, self.columns].reset_index(drop=True)
        rows[START], rows[END] = start[done], end[done]
        rows[FROM], rows[TO] = end[done], end[done] + self.gap
        return rows, held[~done].reset_index(drop=True)
