"""The back-end process: every continuous query in one shared graph, fed by the gateway over a
socket (``executor/wire.py``), answering with result batches tagged by query id.

    python -m executor.backend --fd N      # N: a connected stream socket (the gateway's end)

It runs until the socket closes. A query whose operators fail ends alone (``ENDED`` with the
error); the others go on. The process keeps no durable state but the checkpoints of the
queries that ask for them: the gateway re-sends the plans of named windows, derived streams
and cursors when it restarts one, the cursors' with their latest checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import pickle
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from . import plan as P
from . import allocator, checkpoints, pg_text, udf, wire
from .graph import Graph, NotRunnable
from .operators.base import QueryError

log = logging.getLogger("cqgate.backend")


@dataclass
class StreamStats:
    tuples: int = 0
    watermark: int | None = None
    first_arrival: float | None = None
    last_arrival: float | None = None
    late: int = 0

    def rate(self) -> float:
        """Tuples per second over the stream's life in the back end."""
        if self.first_arrival is None or self.last_arrival == self.first_arrival:
            return 0.0
        return self.tuples / (self.last_arrival - self.first_arrival)


@dataclass
class QueryStats:
    started: float
    last_emit: float | None = None
    encode: Callable | None = None      # its rows -> what the client reads (EncodeRows)
    checkpoint: str | None = None       # the directory its checkpoints go to, if any
    every: float = 0.0                  # seconds between two of them, at least
    saved: float = 0.0                  # time.monotonic() of the latest
    position: int | None = None         # where the latest one stands (its latest BOUNDARY)


@dataclass
class BackendStats:
    """The back end's own work: the batches of stream tuples it took (after joining queued
    ones, so their size shows how far it is behind) and the time it spent busy, not waiting
    for a frame."""
    batches: int = 0
    batch_rows: int = 0
    busy_ns: int = 0

    def as_dict(self) -> dict:
        return {"batches": self.batches, "batch_rows": self.batch_rows,
                "busy_seconds": self.busy_ns / 1e9}


class Backend:
    def __init__(self, send, retain_rows: int = 1_000_000):
        self.send = send                  # a frame (bytes, or a list of parts) -> None
        self.flush: Callable[[], None] = lambda: None   # what was sent goes out now
        self.graph = Graph()
        self.streams: dict = {}           # name -> StreamStats
        self.queries: dict = {}           # qid -> QueryStats
        self.stats = BackendStats()
        # Arrow payloads by kind byte (read where they lie); JSON ones by message class
        self.data_handlers = {wire.DATA: self.on_data, wire.TABLE: self.on_table,
                              wire.HISTORY: self.on_history}
        self.handlers = {
            wire.PlanQuery: self.on_plan, wire.Watermark: self.on_watermark,
            wire.Drop: self.on_drop, wire.DropStream: self.on_drop_stream,
            wire.Stats: self.on_stats, wire.Snapshot: self.on_snapshot,
            wire.Recompute: self.on_recompute, wire.Progress: self.on_progress,
            wire.Analyze: self.on_analyze, wire.Mark: self.send_mark,
            wire.EncodeRows: self.on_encode_rows,
        }
        self.retained: dict = {}          # stream -> deque of recent batches (snapshots)
        self.history: dict = {}           # qid -> {stream: [tables]} to prime it with
        self.retain_rows = retain_rows

    def handle(self, kind: bytes, payload: bytes) -> None:
        on_data = self.data_handlers.get(kind)
        if on_data is not None:
            on_data(payload)
        else:
            self.dispatch(wire.decode(kind, payload))

    def dispatch(self, msg: wire.Control) -> None:
        self.handlers[type(msg)](msg)

    def _answer(self, req: int, **fields) -> None:
        self.send(wire.encode(wire.Answer(req=req, **fields)))

    # ------------------------------------------------------------------ control
    def on_plan(self, msg: wire.PlanQuery) -> None:
        history = self.history.pop(msg.qid, None)
        try:
            plan = P.from_dict(msg.plan)
            # a seam without history: its windows reach into an archive that holds nothing
            # before it yet, and it still starts there
            primed = history is not None or msg.resume or msg.seam is not None
            # a query that saves checkpoints has operators of its own: their state is its
            self.graph.add(msg.qid, plan, feeds=msg.feeds,
                           private=primed or msg.checkpoint is not None)
            if not primed and msg.checkpoint is not None:
                try:
                    self.graph.open_query(msg.qid, None)
                except Exception:       # (as ``add`` does when a shared query's open fails)
                    self.graph.remove(msg.qid)
                    raise
        except NotRunnable as e:
            self._answer(msg.req, ok=False, error=str(e), sqlstate="0A000")
            return
        except QueryError as e:          # it reads a relation whose query failed
            self._answer(msg.req, ok=False, error=str(e), sqlstate=e.sqlstate)
            return
        except Exception as e:  # noqa: BLE001 - a plan the back end cannot start fails alone
            log.exception("query %s could not start", msg.qid)
            self._answer(msg.req, ok=False, error=f"{type(e).__name__}: {e}", sqlstate="XX000")
            return
        self.queries[msg.qid] = QueryStats(time.time(), checkpoint=msg.checkpoint,
                                           every=msg.every, saved=time.monotonic())
        if msg.checkpoint is not None:
            # from now on, each stream's tuples at its latest instant are kept for them
            self.graph.keep_edges = True
        self._answer(msg.req, ok=True)
        if primed:                      # a window reaching into the past: primed
            self.flush()        # the answer before the priming, which may take long
            tables = {name: pa.concat_tables(parts) for name, parts in (history or {}).items()}
            try:
                self._emit(self.graph.resume(msg.qid, tables, msg.seam, msg.upto, msg.restore)
                           if msg.resume else self.graph.prime(msg.qid, tables, msg.seam,
                                                               msg.upto))
            except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:
                # a checkpoint that cannot be read ends its query, not the back end
                log.warning("query %s: checkpoint %s unreadable: %s", msg.qid, msg.restore, e)
                self._end(msg.qid, f"its checkpoint could not be read: {e}", "58030")
                return
        self._emit({})                   # LIMIT 0 ends at once

    def on_encode_rows(self, msg: wire.EncodeRows) -> None:
        """The query's rows go out as the client will read them, encoded here, where they
        are produced, rather than by the gateway's one event loop."""
        q = self.queries.get(msg.qid)
        if q is not None:
            q.encode = pg_text.copy_encoder(msg.oids, msg.tz, msg.csv, msg.delimiter, msg.null,
                                            msg.quote, msg.binary, msg.schema)

    def on_history(self, payload: bytes) -> None:
        qid, stream, table = wire.parse_history(payload)
        self.history.setdefault(qid, {}).setdefault(stream.lower(), []).append(table)

    def on_table(self, payload: bytes) -> None:
        name, table = wire.parse_data(payload)
        self.graph.set_table(name, table)

    def on_drop(self, msg: wire.Drop) -> None:
        self.graph.remove(msg.qid)
        self._forget(msg.qid)

    def _forget(self, qid) -> None:
        q = self.queries.pop(qid, None)
        if q is not None and q.checkpoint is not None:
            checkpoints.remove(q.checkpoint)

    def on_drop_stream(self, msg: wire.DropStream) -> None:
        name = msg.stream.lower()
        self.streams.pop(name, None)
        for qid in [q.qid for q in self.graph.queries.values()
                    if name in {P.stream_of(feed) for feed in q.streams}]:
            self._end(qid, f'stream "{name}" was dropped', "57014")

    def on_stats(self, msg: wire.Stats) -> None:
        queries = [{"qid": qid, "rows_in": q.rows_in, "rows_out": q.rows_out,
                    "state": self.graph.state_size(qid),
                    "joins": self.graph.quality(qid),
                    "started": self.queries[qid].started,
                    "last_emit": self.queries[qid].last_emit,
                    "checkpoint": self.queries[qid].position}
                   for qid, q in self.graph.queries.items() if qid in self.queries]
        streams = [{"stream": name, "tuples": s.tuples, "watermark": s.watermark,
                    "rate": s.rate(), "late": s.late} for name, s in self.streams.items()]
        self._answer(msg.req, ok=True, queries=queries, streams=streams,
                     backend=self.stats.as_dict())

    def on_analyze(self, msg: wire.Analyze) -> None:
        """{qid (as text: a JSON key): operator tree} of the queries asked for that still
        run; an error in it fails the request, never the back end."""
        try:
            trees = self.graph.analyze([q for q in msg.qids if q in self.graph.queries])
        except Exception as e:  # noqa: BLE001 - a failing EXPLAIN ANALYZE ends only itself
            self._answer(msg.req, ok=False, error=f"{type(e).__name__}: {e}", sqlstate="XX000")
            return
        self._answer(msg.req, ok=True, operators={str(q): t for q, t in trees.items()})

    # ------------------------------------------------------------------ data
    def on_data(self, payload: bytes) -> None:
        self.take(*wire.parse_data(payload))

    def take(self, name: str, table: pa.Table) -> None:
        """A stream's rows, in arrival order, through every query that reads the stream (a
        stream's raw arrivals only to the scans that read those)."""
        if name.endswith((P.ARRIVAL, P.PROCTIME)):
            for batch in table.to_batches():
                self._emit(self.graph.push(name, batch))
            return
        stats = self.streams.setdefault(name.lower(), StreamStats())
        now = time.time()
        stats.first_arrival = stats.first_arrival or now
        stats.last_arrival = now
        stats.tuples += table.num_rows
        self.stats.batches += 1
        self.stats.batch_rows += table.num_rows
        self._retain(name.lower(), table)
        # the batches queued since the last take as one: an operator's cost is mostly per
        # batch (a query's σ and aggregate, thousands of them), hardly per row
        for batch in table.combine_chunks().to_batches():
            self._emit(self.graph.push(name, batch))

    def _retain(self, name: str, table) -> None:
        """Keep the stream's latest tuples (up to ``retain_rows``) for snapshot queries."""
        kept = self.retained.setdefault(name, deque())
        if kept and kept[-1].schema != table.schema:     # the stream gained a column
            table = pa.concat_tables([*kept, table], promote_options="default")
            kept.clear()
        kept.append(table)
        total = sum(t.num_rows for t in kept)
        while kept and total - kept[0].num_rows >= self.retain_rows:
            total -= kept.popleft().num_rows

    def on_snapshot(self, msg: wire.Snapshot) -> None:
        """A one-time query evaluated at now over the retained tuples (an archived stream's
        tuples read from the archive, when the gateway sent them), in a graph of its own;
        ``relations`` are the named windows it reads, with their plans."""
        history = self.history.pop(msg.qid, {})        # archived streams: read to the seam

        def run():
            with self._one_time_graph() as graph:
                return evaluate(graph)

        def evaluate(graph):
            for i, (name, plan) in enumerate(msg.relations):
                graph.add(f"rel{i}", P.from_dict(plan), feeds=name)
            graph.add("q", P.from_dict(msg.plan))
            reads = set()
            for q in graph.queries.values():       # by stream: an arrival-order feed too
                reads |= {P.stream_of(feed) for feed in q.streams}
            batches = {name: [b for t in history.get(name) or self.retained.get(name, ())
                              for b in t.to_batches()]
                       for name in reads if name in self.retained or name in history}
            at = [msg.at] if msg.at is not None else [
                self.streams[n].watermark for n in reads
                if n in self.streams and self.streams[n].watermark is not None]
            return _settled(graph, graph.snapshot("q", batches, max(at) if at else None))

        self._one_time(msg, run)

    def on_recompute(self, msg: wire.Recompute) -> None:
        """A query run over archived tuples (its history) as though none had been late: the
        rows that began by the seam and overlap the spans late tuples reach."""
        history = self.history.pop(msg.qid, {})

        def run():
            with self._one_time_graph() as graph:
                graph.add("q", P.from_dict(msg.plan))
                batches = {name: [b for t in tables for b in t.to_batches()]
                           for name, tables in history.items()}
                spans = np.array(msg.spans, dtype=np.int64).reshape(-1, 2)
                return _settled(graph, graph.replay("q", batches, msg.seam, spans,
                                                    msg.by_start))

        self._one_time(msg, run)

    @contextlib.contextmanager
    def _one_time_graph(self):
        """A graph of its own for a one-time query, on the running graph's DuckDB database
        (a new database costs ~12 ms) and with its tables; its cursors close when done."""
        graph = Graph(database=self.graph.database)
        graph.table_data = self.graph.table_data
        try:
            yield graph
        finally:
            graph.close()

    def _one_time(self, msg: wire.Snapshot | wire.Recompute, run) -> None:
        """Answer a one-time query: ``run()``'s rows (a table or None), then ANSWER; its
        failure ends only itself."""
        try:
            table = run()
        except NotRunnable as e:
            self._answer(msg.req, ok=False, error=str(e), sqlstate="0A000")
            return
        except QueryError as e:          # the query's own error: its SQLSTATE
            self._answer(msg.req, ok=False, error=str(e), sqlstate=e.sqlstate)
            return
        except Exception as e:  # noqa: BLE001 - a failing one-time query ends only itself
            self._answer(msg.req, ok=False, error=f"{type(e).__name__}: {e}", sqlstate="XX000")
            return
        if table is not None:
            self.send(wire.rows(msg.qid, table))
        self._answer(msg.req, ok=True)

    def send_mark(self, msg: wire.Mark) -> None:
        """Echo a mark: the rows of everything sent before it have gone out before it."""
        self.send(wire.encode(msg))

    def on_progress(self, msg: wire.Progress | wire.Watermark) -> None:
        stats = self.streams.setdefault(msg.stream.lower(), StreamStats())
        stats.watermark = max(stats.watermark or msg.ts, msg.ts)

    def on_watermark(self, msg: wire.Watermark) -> None:
        if not msg.stream.endswith(P.PROCTIME):     # arrival time is no stream's own time
            self.on_progress(msg)
        self._emit(self.graph.watermark(msg.stream, msg.ts))
        self._checkpoint()

    def _checkpoint(self) -> None:
        """Save the checkpoints that are due (after a BOUNDARY, where a query's state may
        stand at one). The rows given before go to the socket first: a query restored from
        a checkpoint gives only rows that come after it."""
        now = time.monotonic()
        for qid, q in list(self.queries.items()):
            if q.checkpoint is None or now - q.saved < q.every:
                continue
            taken = self.graph.checkpoint(qid)
            if taken is None:
                continue
            self.flush()
            try:
                checkpoints.save(q.checkpoint, *taken)
                q.position = max(taken[0].values())
            except checkpoints.NotSaved as e:
                log.warning("query %s keeps no checkpoints: %s", qid, e)
                q.checkpoint = None
            except OSError as e:        # (a full disk: the previous one still stands)
                log.warning("query %s: checkpoint not saved: %s", qid, e)
            q.saved = now

    def _emit(self, results: dict) -> None:
        now = time.time()
        for qid, batches in results.items():
            q = self.queries.get(qid)
            if q is not None:
                q.last_emit = now
            try:
                if q is not None and q.encode is not None:
                    batches = [q.encode(b) for b in batches]
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                # a value with no text form ends its query, not the back end
                self._end(qid, f"could not encode a row for COPY: {e}", "XX000")
                continue
            for b in batches:
                self.send(wire.rows(qid, b))
        for qid, ts in self.graph.take_advanced().items():     # after the rows it covers
            self.send(wire.encode(wire.Reached(qid, ts)))
        for qid, (error, sqlstate) in self.graph.take_failures().items():
            self._end(qid, error, sqlstate)
        for qid in self.graph.finished():
            self._end(qid)

    def _end(self, qid, error: str | None = None, sqlstate: str | None = None) -> None:
        self.graph.remove(qid)
        self._forget(qid)
        self.send(wire.encode(wire.Ended(qid, error, sqlstate)))


def _settled(graph: Graph, table):
    """A one-time query's rows, or the error an operator of its graph ended it with (never
    a partial answer)."""
    failures = graph.take_failures()
    if failures:
        error, sqlstate = next(iter(failures.values()))
        raise QueryError(error, sqlstate)
    return table


COALESCE_ROWS = 8192      # queued batches are joined while they hold fewer rows than this


def serve(sock: socket.socket) -> None:
    frames = wire.Frames(sock)
    out: list = []
    # a frame is bytes, or a list of parts (result rows with Arrow's buffers uncopied)
    backend = Backend(lambda f: out.extend(f) if isinstance(f, list) else out.append(f))

    def flush() -> None:
        if out:
            wire.send_parts(sock, out)
            out.clear()
    backend.flush = flush
    while (got := frames.next()) is not None:
        started = time.perf_counter_ns()
        kind, payload = got
        if kind == wire.DATA:
            name, table, progress = _coalesced(frames, payload)
            backend.take(name, table)
            for p in progress:
                backend.dispatch(p)
        else:
            backend.handle(kind, payload)
        # busy: working, not waiting for a frame nor for the gateway to take the answers
        backend.stats.busy_ns += time.perf_counter_ns() - started
        flush()


def _coalesced(frames: wire.Frames, payload: bytes) -> tuple[str, pa.Table, list]:
    """A DATA frame and the DATA frames of the same stream already queued behind it, as one
    table, with the PROGRESS messages of that stream and the MARKs among them (each is handled
    after the table, which is still after all it marks): when the back end falls
    behind, small batches grow, so the cost per batch (a DuckDB call per operator) is paid
    once for many. Batches already big are left as they are (joining them would only copy
    their rows). Frames of other kinds or streams stop it, so the order of everything else
    is kept."""
    name, table = wire.parse_data(payload)
    tables, progress, rows = [table], [], table.num_rows
    while rows < COALESCE_ROWS and (nxt := frames.peek()) is not None:
        kind, body = nxt
        if kind in (wire.PROGRESS, wire.MARK):
            msg = wire.decode(kind, body)
            if kind == wire.PROGRESS and msg.stream != name:
                break
            progress.append(msg)
        elif kind == wire.DATA and wire.data_stream(body) == name:
            more = wire.parse_data(body)[1]
            if more.schema != table.schema:              # the stream gained a column
                break
            tables.append(more)
            rows += more.num_rows
        else:
            break
        frames.skip()
    if len(tables) > 1:
        table = pa.concat_tables(tables).combine_chunks()
    return name, table, progress


def _warm() -> None:
    """pyarrow imports pandas (about 0.3 s) the first time it converts a numpy array, to
    check for pandas' types: done here while the back end waits for work, so that the first
    batch of the first query does not pay for it."""
    pa.array(np.zeros(1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m executor.backend")
    ap.add_argument("--fd", type=int, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s backend %(levelname)s %(message)s")
    allocator.keep_freed_memory()
    udf.load(os.environ.get("CQGATE_AGGREGATES"))
    threading.Thread(target=_warm, name="warm", daemon=True).start()
    sock = socket.socket(fileno=args.fd)
    try:
        serve(sock)
    except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass
    # nothing here is durable: the interpreter's teardown (DuckDB, Arrow's pools, thousands of
    # objects) would only keep the gateway's shutdown waiting, about half a second
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
