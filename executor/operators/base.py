"""The operator lifecycle: ``open(context)`` takes what running needs (a DuckDB cursor, ST,
tables) from the ``OperatorContext``; ``on_batch(batch, port)`` and ``on_watermark(ts, port)``
return the messages the operator emits (batches in (ts, te) order, then possibly a watermark);
``on_end()`` flushes whatever is still held; ``close()`` gives back what ``open`` took.

Everything else the graph tells an operator goes through the methods and capabilities declared
here, whose defaults do nothing, so the graph treats every operator alike. Operators keep no
clock of their own: time is what their inputs say (or the context's clock)."""
from __future__ import annotations

import pyarrow as pa

from ..batches import Watermark
from ..context import OperatorContext


class QueryError(Exception):
    """An error of the query, not of the system: the client gets its SQLSTATE (and hint)
    instead of XX000."""

    def __init__(self, message: str, sqlstate: str, hint: str | None = None):
        super().__init__(message)
        self.sqlstate, self.hint = sqlstate, hint


class Operator:
    inputs = 1
    source: str | None = None       # a scan: the stream or relation (lower) whose rows enter
    tables: tuple = ()              # the lookup tables (lower) it reads: set_table tells it
    predicate: str | None = None    # a σ: one DuckDB pass serves all σ's reading one input
    iterates = False                # a StreaQueL loop's window: ``starts`` are its iterations
    con = None                      # the DuckDB cursor taken in ``open``
    # the attributes that hold what the operator has taken in: a checkpoint saves them and
    # an operator opened anew for the same plan node gets them back (``checkpoint``/
    # ``restore``); None: its state cannot be checkpointed (its query replays instead)
    checkpointed: tuple | None = None

    def open(self, context: OperatorContext) -> None:
        """Before the first message."""

    def close(self) -> None:
        """After the last message: the cursor ``open`` took is closed."""
        if self.con is not None:
            self.con.close()
            self.con = None

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list:
        raise NotImplementedError

    def on_watermark(self, ts: int, port: int = 0) -> list:
        return [Watermark(ts)]

    def on_end(self) -> list:
        return []

    def on_mask(self, batch: pa.RecordBatch, mask: pa.Array) -> list:
        """A σ's batch whose predicate (``predicate``) was computed elsewhere, as ``mask``."""
        raise NotImplementedError

    def on_start(self, ts: int) -> None:
        """The streams this operator reads began at ``ts`` (their first tuple or BOUNDARY
        reached a scan below it)."""

    def set_table(self, name: str, table: pa.Table) -> None:
        """Lookup table ``name`` (one of ``tables``) has new contents."""

    def follow_loop(self, loop: "Operator") -> None:
        """This operator reads the StreaQueL loop's window ``loop`` through one-input
        operators."""

    def exhausted(self) -> bool:
        """Nothing more can come out, whatever comes in (a LIMIT reached)."""
        return False

    def state_size(self) -> int:
        """Rows (or index elements) held, for cq_queries and memory checks."""
        return 0

    def checkpoint(self) -> dict:
        """What the operator has taken in (``checkpointed``), for a checkpoint."""
        return {name: getattr(self, name) for name in self.checkpointed or ()}

    def restore(self, state: dict) -> None:
        """Take back a checkpoint's state, after ``open``."""
        for name, value in state.items():
            setattr(self, name, value)

    def quality(self) -> dict | None:
        """A quality-driven join's target and what it measures, for cq_joins."""
        return None


class Stateless(Operator):
    """An operator that maps each batch on its own (σ, μ, stateless ω)."""
    checkpointed = ()

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        raise NotImplementedError

    def on_batch(self, batch, port=0):
        out = self.transform(batch)
        return [out] if out is not None and out.num_rows else []
