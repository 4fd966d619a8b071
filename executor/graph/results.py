"""Result batches as a client sees them: a query's output columns in its plan's order, the
pseudo-columns it selected (``valid_from`` / ``valid_to``) taken from the interval columns as
TIMESTAMPs, where ∞ (valid forever) is NULL."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import plan as P
from ..batches import INF, TE, TS


def client_batch(p: P.Plan, out_names: list, b: pa.RecordBatch) -> pa.RecordBatch:
    """Batch ``b`` of plan ``p``'s root (columns ``out_names``, then the interval) with the
    client's columns."""
    cols, names = [], []
    real = iter(out_names)
    for c in p.output:
        if c.name in P.PSEUDO_COLUMNS and c.name in p.pseudo:
            src = TE if c.name == "valid_to" else TS
            cols.append(timestamps(b.column(src)))
        else:
            cols.append(b.column(next(real)))
        names.append(c.name)
    return pa.RecordBatch.from_arrays(cols, names=names)


def timestamps(col) -> pa.Array:
    """µs → TIMESTAMP; ∞ (valid forever) becomes NULL."""
    values = col.to_numpy(zero_copy_only=False)
    mask = values >= INF
    return pa.array(np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")) \
        if not mask.any() else pc.if_else(pa.array(mask), None, pa.array(
            np.where(mask, 0, values), pa.int64()).cast(pa.timestamp("us")))
