"""ω for a PostgreSQL table followed by its changes (``VersionWindow``, DESIGN §5): each change
is a row version valid from its commit until the next change of the same key; a delete only
ends the version before it, a truncate ends every version; neither is a row.

It is a ``[PARTITION BY key ROWS 1]`` window (``rows_window.py``: open versions held, split at
each BOUNDARY) whose deletes leave the held set once they have ended the version before them,
and whose truncates close everything held. Truncates are rare, so a batch is cut at them.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..batches import TS
from . import RowsWindow as RowsKind
from .rows_window import START, RowsWindow

ROW_KINDS = pa.array(["I", "U"])      # changes that are rows; "D" and "T" only end rows


class VersionWindow(RowsWindow):
    def __init__(self, window):
        super().__init__(RowsKind(1, window.partition_by))
        self.op = window.op

    def on_batch(self, batch, port=0):
        ops = batch.column(self.op)
        cuts = np.flatnonzero(pc.fill_null(pc.equal(ops, "T"), False).to_numpy(
            zero_copy_only=False))
        if len(cuts) == 0:
            return self._versions(batch)
        out, at = [], 0
        ts = batch.column(TS)
        for cut in cuts:
            if cut > at:
                out += self._versions(batch.slice(at, cut - at))
            out += self._truncate(int(ts[cut].as_py()))
            at = cut + 1
        if at < batch.num_rows:
            out += self._versions(batch.slice(at))
        return out

    def _versions(self, batch) -> list:
        out = super().on_batch(batch)
        if self.held is not None and self.held.num_rows:
            # a delete has ended the version before it: nothing more to hold it for
            self.held = self.held.filter(pc.is_in(self.held.column(self.op), ROW_KINDS))
        return out

    def _truncate(self, at: int) -> list:
        """Every held version ends at ``at``."""
        held, self.held = self.held, None
        if held is None or held.num_rows == 0:
            return []
        start = held.column(START).to_numpy().astype(np.int64)
        return self._emit(start, np.full(held.num_rows, at, np.int64), held)

    def _rows(self, start, end, rows):
        out = super()._rows(start, end, rows)
        if out is None:
            return None
        out = out.filter(pc.is_in(out.column(self.op), ROW_KINDS))
        return out if out.num_rows else None
