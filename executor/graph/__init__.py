"""The graph the back end runs: ``Graph``, every query in one shared graph (``running_graph``; plans
lowered by ``lowering``) with its one-time modes (``one_time``), and ``RunningQuery``, one alone."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import plan as P
from ..context import wall_clock
from ..operators.base import QueryError
from . import one_time
from .lowering import NotRunnable  # noqa: F401 - re-exported
from .running_graph import RunningGraph


class Graph(RunningGraph):
    """The running graph with its one-time modes (``one_time`` says what each does)."""

    def prime(self, qid, history: dict, seam: int | None, upto: dict | None = None) -> dict:
        return one_time.prime(self, qid, history, seam, upto)

    def resume(self, qid, history: dict, since: int, upto: dict | None = None,
               restore: str | None = None) -> dict:
        return one_time.resume(self, qid, history, since, upto, restore)

    def snapshot(self, qid, batches: dict, at: int | None) -> pa.Table | None:
        return one_time.snapshot(self, qid, batches, at)

    def replay(self, qid, batches: dict, seam: int, spans: np.ndarray,
               by_start: bool = False) -> pa.Table | None:
        return one_time.replay(self, qid, batches, seam, spans, by_start)


class RunningQuery:
    """One query on a graph of its own: the executor driven directly (tests, benchmarks), fed
    with the batches and watermarks of the streams it reads:

        q = RunningQuery(plan)
        rows = q.push("sensors", batch)      # record batches of the stream, in event-time order
        rows += q.watermark("sensors", ts)   # BOUNDARY: nothing earlier than ts will follow
        rows += q.end()
    """

    def __init__(self, p: P.Plan, clock=wall_clock):
        self.graph = Graph(clock)
        self.graph.add(0, p)

    def push(self, stream: str, batch: pa.RecordBatch) -> list:
        return self._raised(self.graph.push(stream, batch).get(0, []))

    def watermark(self, stream: str, ts: int) -> list:
        return self._raised(self.graph.watermark(stream, ts).get(0, []))

    def end(self) -> list:
        return self._raised(self.graph.end(0))

    def _raised(self, out: list) -> list:
        # the graph ends a failed query and goes on with the others; alone, it is the caller's
        failed = self.graph.take_failures().get(0)
        if failed is not None:
            raise QueryError(*failed)
        return out

    def state_size(self) -> int:
        return self.graph.state_size(0)

    def close(self) -> None:
        self.graph.close()
