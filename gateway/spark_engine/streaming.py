"""Continuous queries on Spark Structured Streaming (``cq.engine = spark``): each runs as a
streaming query in the server's SparkSession over its streams' spools (the clearinghouse
writes one for every stream such a query reads, after the slack, with its watermarks), and
hands each micro-batch's rows, through ``foreachBatch``, to the same result queue
(``LiveRows``) the back end's queries fill, so FETCH, portals and COPY read them alike. A
cursor's query of one stream's rows runs in Spark's real-time mode instead while one of the
server's slots for it is free, its rows coming back as they are made (``real_time.py``).

A micro-batch whose id was already delivered is skipped (Spark runs a batch again after a
failure). Rows leave in valid_from order: a query of one stream's rows, or an aggregate that
Spark's watermark closes, gives them so; a union's or a join's are held until every input's
watermark has passed them. A cursor's query keeps its checkpoint under the data directory
while it runs and ends with its cursor, as on the back end; a derived stream's query keeps
its rows (a Parquet file a micro-batch), feeds the back end with them as the stream's tuples,
and goes on from its checkpoint after a restart.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import json
import logging
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from sqlglot import exp

from executor import plan as P
from executor import wire

from gateway.archive.spark import Spark, register_functions, spark_type
from gateway.clearinghouse import spool
from gateway.clearinghouse.spool import Spools
from gateway.durable import fsync_dir, write_text
from gateway.link.live_rows import UNBOUNDED, Bounds, LiveRows
from gateway.pgwire import errors as E
from gateway.spark_engine import jvm_parts
from gateway.spark_engine import translate as T
from gateway.spark_engine.real_time import BATCH, RowsBack, arrow_type_ok
from gateway.spark_engine.spool_source import NAME, PUNCT, SpoolSource, schema_option

log = logging.getLogger("cqgate")
FOLDER = "spark-streams"       # checkpoints, under the data directory
_SQLSTATE = re.compile(r"SQLSTATE: ([0-9A-Z]{5})")
FEED_WAIT_S = 60        # a derived stream's batch waits this long at most for the back end
_STATE_STORES = "org.apache.spark.sql.execution.streaming.state."
ROCKSDB = _STATE_STORES + "RocksDBStateStoreProvider"
HDFS = _STATE_STORES + "HDFSBackedStateStoreProvider"      # Spark's default: in memory
STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
NO_INFERRED_FILTERS = "org.apache.spark.sql.catalyst.optimizer.InferFiltersFromConstraints"
REAL_TIME_SOURCE = "cqgate.spark.SpoolRealTime"     # jvm/: the spool, read as it grows
ANSWERED = "answered"       # a named window's last instant answered, beside its rows
# a query that lost a Python worker of Spark's (one that did not start in time on a busy
# machine, or died) starts again from its checkpoint, this many times at most, after a
# pause of RESTART_PAUSE_S times its restarts so far, and up to as much again at random (the
# queries a busy moment stopped together do not all start their workers at once again)
RESTARTS = 3
RESTART_PAUSE_S = 1.0


class Stopping(Exception):
    """A derived stream's batch that ran into its query's stop: raised out of
    ``foreachBatch`` so that Spark does not commit it (the next start runs it again)."""


class _QuietStops(logging.Filter):
    """py4j logs, with its traceback, every exception a callback raises; a stop's is
    expected and says nothing (a real failure ends its query, whose error is reported)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], Stopping))


logging.getLogger("py4j.clientserver").addFilter(_QuietStops())


@dataclass(eq=False)
class SparkQuery:
    """One continuous query running on Spark, and what its batches left behind."""
    qid: int
    plan: P.Plan
    shape: T.Shape
    live: LiveRows | None                # a cursor's queue (None: a derived stream's query)
    reader: str
    checkpoint: str
    feed: str | None = None              # a derived stream's name: its rows go there …
    rows_dir: str | None = None          # … and are kept here, one file a micro-batch
    promised: int | None = None          # the last watermark the derived stream was given
    query: object = None                 # pyspark's StreamingQuery, once started
    last_batch: int = -1                 # the newest batch id delivered
    reached: int | None = None           # every row beginning before it was delivered (µs)
    held: pa.Table | None = None         # a union's rows its inputs' watermarks have not passed
    order: tuple = ()                    # the columns a batch's rows are sorted by
    sql: str = ""
    failure: str | None = None           # why Spark stopped it
    finish: object = None                # T.finish: the plan's end made here
    batches: int = 0
    rows_out: int = 0
    stopped: bool = False
    spent: dict = field(default_factory=dict)   # ms a phase, summed over the micro-batches
    noted: int = -1                      # the newest batch id whose progress is in ``spent``
    state: tuple = (0, 0)                # (rows, bytes) in its state stores, at the last batch
    real_time: str | None = None         # its token with RowsBack: it runs in real-time mode
    current: pa.Table | None = None      # a named window's rows not ended at its watermark
    kept_upto: int = -1                  # … which hold every kept batch up to this id
    answered: int | None = None          # … the last instant they answer for (µs)
    restarts: list = field(default_factory=list)    # why Spark's query was started again


class SparkStreams:
    def __init__(self, spark: Spark, spools: Spools, data_dir: str, backend, store,
                 real_time_slots: int = 0):
        self.spark = spark
        self.real_time_slots = real_time_slots   # real-time queries at once (real_time.py)
        self._rows_back: RowsBack | None = None
        self.spools = spools
        self.store = store                  # the tables a join with a table reads
        self.folder = os.path.join(data_dir, FOLDER)
        self.backend = backend              # query ids are its; derived streams feed it
        self.queries: dict = {}             # qid -> SparkQuery: cursors' queries
        self.kept: dict = {}                # oid -> SparkQuery: derived streams' queries
        self.loop: asyncio.AbstractEventLoop | None = None
        self._registered = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ start
    async def open(self, p: P.Plan, shape: T.Shape, fields: list, schema: pa.Schema, sql: str,
                   owner: int, name: str, pool, label: str = "query",
                   bounds: Bounds = UNBOUNDED) -> LiveRows:
        """Start ``p`` (checked: ``shape``) on Spark; its rows arrive in the returned queue.
        Spark's analysis errors come back here, before any row."""
        self.loop = asyncio.get_running_loop()
        qid = self.backend.new_qid()
        live = LiveRows(fields, schema, qid, sql, owner, name, self, bounds=bounds)
        live.streams = P.streams_read(p.root)
        sq = SparkQuery(qid, p, shape, live, f"q{qid}", os.path.join(self.folder, f"q{qid}"),
                        order=_order_of(p, shape), sql=sql)
        self.queries[qid] = sq
        started = self.loop.run_in_executor(pool, self._start, sq)
        try:
            await asyncio.shield(started)
        except asyncio.CancelledError:
            # cancelled while Spark starts it (a cancel, statement_timeout, a client gone):
            # once the start is over, whatever it started stops
            self.queries.pop(qid, None)
            sq.stopped = True
            started.add_done_callback(lambda _: threading.Thread(
                target=self._stop_one, args=(sq,), daemon=True).start())
            raise
        except Exception as e:             # Spark's analysis, or the spool's files
            self.queries.pop(qid, None)
            await self.loop.run_in_executor(pool, self._clean, sq)
            if isinstance(e, PySparkException):
                raise spark_error(e, "Spark could not start the query") from None
            raise
        log.info("query started on Spark: %s of pid %d: %s", label, owner, " ".join(sql.split()))
        return live

    def _session(self):
        session = self.spark.session()
        with self._lock:
            if not self._registered:
                session.dataSource.register(SpoolSource)
                # a filter Spark infers from a join (``v IS NOT NULL`` from ``v = top``) is
                # pushed below the event-time watermark, where it would drop the watermark
                # rows (their columns are NULL): that stream's watermark would stop
                session.conf.set("spark.sql.optimizer.excludedRules", NO_INFERRED_FILTERS)
                self._registered = True
        return session

    def _frame(self, p: P.Plan, shape: T.Shape, read):
        """The DataFrame Spark runs of ``p`` (``T.spark_root``): its root's columns, then the
        interval and PUNCT."""
        root = T.spark_root(p, shape)
        register_functions(self._session(), p.functions)
        df = T.Builder(read, p.functions).build(root)
        return df.select(*(T.q(c.name) for c in root.schema), T.TS, T.TE, PUNCT)

    def _table_contents(self, name: str) -> pa.Table:
        """A table's committed rows (what a join with it reads for a micro-batch)."""
        quoted = ".".join(exp.to_identifier(part, quoted=True).sql("duckdb")
                          for part in name.split("."))
        with self.store.connect() as con:
            return con.sql(f"SELECT * FROM {quoted}").to_arrow_table()

    def _reader_of(self, spark_session, reader: str | None, resume: bool = False,
                   real_time: bool = False):
        def read(scan: P.StreamScan, ordered: bool = False):
            columns = _arrow_schema(scan)
            path = self.spools.path(scan.stream) if reader is None else self.spools.open(
                scan.stream, columns, reader, resume)
            r = (spark_session.readStream.format(REAL_TIME_SOURCE if real_time else NAME)
                 .option("path", path).option("schema", _ddl(scan))
                 .option("ts_column", scan.timestamp_column))
            if not real_time:
                r = r.option("arrow_schema", schema_option(columns))
            if ordered:         # each tuple's place in the stream, for ROWS and SESSION
                r = r.option("order", "true")
            return (r.option("reader", reader) if reader else r).load()
        return read

    def _start(self, sq: SparkQuery, again: bool = False) -> None:
        """Start ``sq``'s streaming query; ``again``: once more, from its checkpoint, as it
        ran (in micro-batches), its readers reading on from where Spark committed."""
        session = self._session()
        real_time = not again and self._takes_real_time(sq)
        df = self._frame(sq.plan, sq.shape, self._reader_of(
            session, sq.reader, again or sq.feed is not None, real_time))
        sq.finish = T.finish(sq.plan, sq.shape, self._table_contents)
        os.makedirs(sq.checkpoint, exist_ok=True)
        writer = (df.writeStream.queryName(f"cqgate_{sq.reader}")
                  .option("checkpointLocation", sq.checkpoint))
        if real_time:
            writer = writer.outputMode("update").trigger(realTime=BATCH)
            # Spark's real-time mode takes a JVM ForeachWriter, not foreachBatch: RowsBack
            writer._jwrite = writer._jwrite.foreach(session._jvm.cqgate.spark.RowsBack(
                self._rows_back.host, self._rows_back.port, sq.real_time, df.schema.json()))
        else:
            writer = writer.foreachBatch(
                lambda batch, batch_id: self._deliver(sq, batch, batch_id))
        with self._lock:
            # a query takes the session's state store when it starts (and keeps it in its
            # checkpoint): RocksDB only where transformWithStateInPandas needs it (a RANGE
            # aggregate, a ROWS or SESSION window) and in real-time mode (which takes no
            # other), Spark's in-memory store elsewhere, which writes a micro-batch's state
            # about twice as fast (NEXMark q7's join: 9 s against 21 s for 368,000 bids)
            session.conf.set(STATE_STORE, ROCKSDB if sq.shape.held or real_time else HDFS)
            sq.query = writer.start()
        threading.Thread(target=self._watch, args=(sq,), daemon=True,
                         name=f"spark-{sq.reader}").start()

    def real_time_allowed(self, p: P.Plan, shape: T.Shape) -> str | None:
        """Why ``p`` cannot run in real-time mode (None: it can, given a free slot)."""
        if not shape.real_time:
            return ("Spark's real-time mode runs one stream's windowed rows, filtered and "
                    "projected, without Python functions")
        if not self.real_time_slots:
            return "the server runs no query in real-time mode (--spark-real-time 0)"
        odd = sorted({f"{c.name.split('.', 1)[1]} {c.type}"
                      for scan in _stream_scans(p.root)
                      for c, f in zip(scan.schema, _arrow_schema(scan))
                      if not arrow_type_ok(f.type)})
        if odd:
            return "Spark's Arrow reader does not take column " + ", ".join(odd)
        if jvm_parts.jar() is None:
            return "the engine's JVM parts did not compile (see the server's log)"
        return None

    def _takes_real_time(self, sq: SparkQuery) -> bool:
        """Whether a cursor's query runs in real-time mode: it can, and one of the server's
        real-time slots is free (taken here: its token with RowsBack)."""
        if sq.feed is not None or self.real_time_allowed(sq.plan, sq.shape) is not None:
            return False
        with self._lock:
            if sum(1 for q in self.queries.values() if q.real_time and not q.stopped) \
                    >= self.real_time_slots:
                return False
            if self._rows_back is None:
                self._rows_back = RowsBack(os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
            sq.real_time = self._rows_back.expect(lambda batch: self._take_real_time(sq, batch))
        return True

    # ------------------------------------------------------------------ rows
    def _deliver(self, sq: SparkQuery, batch, batch_id: int) -> None:
        """foreachBatch, in Spark's callback thread: the batch's rows, in valid_from order,
        to the query's queue (once per batch id). A stop while the batch runs cancels its
        job and removes its checkpoint: what that breaks ends the batch, quietly. A derived
        stream's batch must not count as done then (Spark commits a batch whose callback
        returns), so the next start runs it again: it ends with ``Stopping``."""
        stopping = f"derived stream {sq.feed} is stopping"
        if sq.stopped:
            if sq.feed is not None:
                raise Stopping(stopping)
            return
        try:
            self._take(sq, batch, batch_id)
        except Exception as e:       # Spark's cancelled job, the checkpoint's removed files
            if not sq.stopped:
                raise
            if sq.feed is not None:
                raise Stopping(stopping) from e
            log.debug("a batch of %s ended by its stop: %s", sq.reader, e)

    def _take(self, sq: SparkQuery, batch, batch_id: int) -> None:
        if batch_id <= sq.last_batch:
            return
        started = time.perf_counter()
        _note_progress(sq)
        table = batch.toArrow()
        punct = table.column(PUNCT).to_numpy(zero_copy_only=False).astype(bool)
        rows = table.filter(pa.array(~punct))
        if sq.finish is not None and rows.num_rows:    # a table join, sessions' α: here
            rows = sq.finish(rows)
        frontier = self._frontier(sq, batch_id)
        if sq.rows_dir is not None and rows.num_rows:      # kept before Spark commits it
            keep_rows(sq.rows_dir, batch_id, client_table(sq.plan, rows, intervals=True))
        if sq.current is not None:    # a batch run again after a restart: its rows are there
            self._hold_current(sq, internal_table(sq.plan, rows) if batch_id > sq.kept_upto
                               else None, frontier)
        if sq.shape.hold:
            rows = self._hold(sq, rows, frontier)
        # valid_from order; ties in the columns' order, so a batch always reads the same
        rows = self._sorted(sq, rows)
        sq.rows_out += rows.num_rows
        if sq.feed is not None:
            asyncio.run_coroutine_threadsafe(self._feed(sq, rows, frontier),
                                             self.loop).result(FEED_WAIT_S)
        else:
            if rows.num_rows:
                self.loop.call_soon_threadsafe(sq.live.put, client_table(sq.plan, rows))
            if frontier is not None:        # after its rows, on the loop that queues them
                self.loop.call_soon_threadsafe(self._reached, sq, frontier)
        sq.batches += 1
        sq.last_batch = batch_id
        # the batch's run, as foreachBatch sees it: toArrow runs the batch's plan
        _add(sq.spent, "foreachBatch", (time.perf_counter() - started) * 1000)

    def _take_real_time(self, sq: SparkQuery, batch: pa.RecordBatch) -> None:
        """A real-time task's rows, in RowsBack's thread: in the stream's order, which is
        valid_from order; a watermark's row says how far the query has reached."""
        if sq.stopped:
            return
        punct = batch.column(PUNCT).to_numpy(zero_copy_only=False).astype(bool)
        rows = pa.Table.from_batches([batch.filter(pa.array(~punct))])
        marks = batch.filter(pa.array(punct)).column(T.TS)
        sq.rows_out += rows.num_rows
        if rows.num_rows:
            self.loop.call_soon_threadsafe(sq.live.put, client_table(sq.plan, rows))
        if len(marks):
            frontier = pc.max(pc.cast(marks, pa.int64())).as_py()
            self.loop.call_soon_threadsafe(self._reached, sq, frontier)

    @staticmethod
    def _sorted(sq: SparkQuery, rows: pa.Table) -> pa.Table:
        if rows.num_rows < 2 or not sq.order:
            return rows
        return rows.take(pc.sort_indices(rows, [(c, "ascending") for c in sq.order]))

    @staticmethod
    def _reached(sq: SparkQuery, frontier: int) -> None:
        sq.reached = frontier if sq.reached is None else max(sq.reached, frontier)

    async def _feed(self, sq: SparkQuery, rows: pa.Table, frontier: int | None) -> None:
        """A derived stream's or named window's rows and watermark to the back end, where
        the queries that read it take them as its tuples (each with its interval)."""
        if rows.num_rows:
            await self.backend.send_data(sq.feed, internal_table(sq.plan, rows), None)
        if frontier is not None and (sq.promised is None or frontier > sq.promised):
            sq.promised = frontier
            await self.backend.watermark(sq.feed, frontier)

    @staticmethod
    def _frontier(sq: SparkQuery, batch_id: int) -> int | None:
        """Before which instant no row can come any more once batch ``batch_id`` is done
        (µs; None: not known yet): the least of the inputs' watermarks, from the batch's end
        offsets (which Spark wrote to the checkpoint before running it) and the watermark
        each spool file ends with. Where an α's window closes by Spark's watermark, its
        rows come in the batch after the one that moved it: then also no later than Spark's
        watermark in this batch (a window ending after it is still open)."""
        with open(os.path.join(sq.checkpoint, "offsets", str(batch_id))) as f:
            lines = f.read().splitlines()[1:]           # after the version
        meta, offsets = json.loads(lines[0]), map(json.loads, lines[1:])
        marks = [spool.watermark_at(o["spool"], o["seq"]) for o in offsets
                 if o and "spool" in o]
        if not marks or None in marks:
            return None
        if sq.shape.closes:       # a SLIDE window closed ends at most there; a RANGE
            # aggregate's next rows start there
            marks.append(int(meta.get("batchWatermarkMs", 0)) * 1000
                         + (0 if sq.shape.ranged else 1))
        return min(marks)

    @staticmethod
    def _hold(sq: SparkQuery, rows: pa.Table, frontier: int | None) -> pa.Table:
        """A union's or join's rows that nothing can still come before: those whose
        valid_from every input's watermark has passed; the rest wait in ``held``."""
        if sq.held is not None and sq.held.num_rows:
            rows = pa.concat_tables([sq.held, rows])
        if frontier is None:
            sq.held = rows
            return rows.slice(0, 0)
        start = pc.cast(rows.column(T.TS), pa.int64())
        early = pc.less(start, pa.scalar(frontier, pa.int64()))
        sq.held = rows.filter(pc.invert(early))
        return rows.filter(early)

    def _watch(self, sq: SparkQuery) -> None:
        """Wait for the streaming query to end; one that lost a Python worker starts again
        from its checkpoint (``RESTARTS`` times at most), one that failed otherwise ends its
        cursor's query."""
        try:
            sq.query.awaitTermination()
            err = None
        except Exception as e:               # pyspark's StreamingQueryException and kin
            err = e
        if err is None or sq.stopped:
            return
        lost = worker_lost(err)
        if lost and sq.real_time is None and len(sq.restarts) < RESTARTS:
            sq.restarts.append(lost)
            pause = RESTART_PAUSE_S * len(sq.restarts) * (1 + random.random())
            log.warning("query on Spark %s lost a Python worker (%s): started again from its "
                        "checkpoint in %.1f s (%d of at most %d)", sq.feed or sq.reader, lost,
                        pause, len(sq.restarts), RESTARTS)
            time.sleep(pause)
            if sq.stopped:                       # its cursor closed meanwhile
                return
            try:
                self._start(sq, again=True)      # (its own watcher follows it from here)
            except Exception as e:               # Spark's session stopping, its analysis
                err = e
            else:
                if sq.stopped:                   # stopped while it started again
                    self._stop_one(sq)
                return
        failure = spark_error(err, "the query failed on Spark")
        log.error("query failed on Spark: %s: %s", sq.feed or (
            f"{sq.live.name or 'query'} of pid {sq.live.owner}"), failure.message)
        self.loop.call_soon_threadsafe(self._failed, sq, failure)

    def _failed(self, sq: SparkQuery, err: E.PgError) -> None:
        sq.failure = err.message
        if sq.live is not None:
            sq.live.failure = err.message
            sq.live.finish(err)

    # ------------------------------------------------------------------ the queue's source
    def drop(self, qid: int) -> None:
        """End a query (its cursor closed)."""
        self.end_query(qid, "stopped")

    def end_query(self, qid: int, how: str) -> None:
        sq = self.queries.pop(qid, None)
        if sq is None:
            return
        sq.stopped = True
        log.info("query %s on Spark: %s", how, " ".join(sq.live.sql.split()))
        threading.Thread(target=self._stop_one, args=(sq,), daemon=True).start()

    def encode_rows(self, qid: int, how: dict) -> bool:
        """Spark's rows reach the gateway typed, and the gateway encodes them for COPY."""
        return False

    def forget(self, qid: int) -> None:
        self.end_query(qid, "ended")

    def _stop_one(self, sq: SparkQuery) -> None:
        if sq.query is not None:
            _note_progress(sq)
            log.info("query on Spark %s: %s", sq.feed or sq.reader, time_profile(sq))
            try:
                sq.query.stop()
            except Exception as e:          # a session already stopping: nothing to stop
                log.debug("stopping %s on Spark: %s", sq.reader, e)
        self._clean(sq)

    def _clean(self, sq: SparkQuery) -> None:
        if sq.real_time:
            self._rows_back.forget(sq.real_time)
        for stream in sq.shape.streams:
            self.spools.close(stream, sq.reader)
        shutil.rmtree(os.path.dirname(sq.rows_dir) if sq.rows_dir else sq.checkpoint,
                      ignore_errors=True)

    # ------------------------------------------------------------------ derived streams
    def keep(self, oid: int, name: str, p: P.Plan, shape: T.Shape, sql: str,
             window: bool = False) -> None:
        """Run derived stream ``name``'s query (``p``, checked: ``shape``) for as long as the
        server keeps it, from its checkpoint if it has one (a restart): its rows go to the
        back end as the stream's tuples and are kept under ``<FOLDER>/d<oid>/rows``.
        ``window``: ``name`` is a named window, whose answer at now is its rows that have not
        ended (``window_rows``), kept here from its rows, and after a restart from those
        kept."""
        self.loop = self.backend.loop
        home = os.path.join(self.folder, f"d{oid}")
        sq = SparkQuery(-oid, p, shape, None, f"d{oid}", os.path.join(home, "checkpoint"),
                        feed=name, rows_dir=os.path.join(home, "rows"),
                        order=_order_of(p, shape), sql=sql)
        os.makedirs(sq.rows_dir, exist_ok=True)
        if window:
            sq.current, sq.kept_upto = _kept_internal(p, sq.rows_dir)
            with contextlib.suppress(FileNotFoundError):
                with open(os.path.join(sq.rows_dir, ANSWERED)) as f:
                    sq.answered = int(f.read())
        self.kept[oid] = sq
        try:
            self._start(sq)
        except Exception as e:             # Spark's analysis, or the spool's files
            self.kept.pop(oid, None)
            self._clean(sq)
            if isinstance(e, PySparkException):
                raise spark_error(e, "Spark could not start the query") from None
            raise
        log.info("query started on Spark: %s %s", "named window" if window else
                 "derived stream", name)

    @staticmethod
    def _hold_current(sq: SparkQuery, rows: pa.Table, frontier: int | None) -> None:
        """A named window's rows valid at the last instant before its watermark (every row
        beginning before the watermark has come: its answer there is whole), or later; that
        instant is kept beside its rows (``ANSWERED``), for a restart."""
        table = sq.current
        if rows is not None and rows.num_rows:      # (types as Spark gives them, once any)
            table = pa.concat_tables([table, rows], promote_options="permissive") \
                if table.num_rows else rows
        if frontier is not None and (sq.answered is None or frontier - 1 > sq.answered):
            sq.answered = frontier - 1
            write_text(os.path.join(sq.rows_dir, ANSWERED), str(sq.answered))
        if sq.answered is not None:
            table = table.filter(pc.greater(table.column("__te"),
                                            pa.scalar(sq.answered, pa.int64())))
        sq.current = table

    def window_rows(self, oid: int) -> tuple:
        """A named window on Spark: (its rows valid at the last instant its query has
        answered for, or later, as the back end's operators carry them; that instant, µs,
        or None before its first micro-batch)."""
        sq = self.kept.get(oid)
        if sq is None or sq.current is None:
            return None, None
        return sq.current, sq.answered

    def drop_kept(self, oid: int) -> None:
        """A derived stream dropped: its query stops, its checkpoint and rows go."""
        sq = self.kept.pop(oid, None)
        if sq is not None:
            sq.stopped = True
            self._stop_one(sq)
            shutil.rmtree(os.path.dirname(sq.rows_dir), ignore_errors=True)

    # ------------------------------------------------------------------ views, DDL, shutdown
    def running(self) -> list:
        return [sq.live for sq in list(self.queries.values())]

    def derived(self) -> list:
        """(name, definition, counters, why it failed or None) of each derived stream's or
        named window's query (``reached``: every row beginning before it was given)."""
        return [(sq.feed, sq.sql, {"rows_out": sq.rows_out, "batches": sq.batches,
                                   "reached": _reached_by(sq)}, sq.failure)
                for sq in list(self.kept.values())]

    def counters(self, qid: int) -> dict:
        """Rows out and micro-batches of a cursor's or a derived stream's query, where its
        time went (``time_profile``), how far it has reached, whether in real-time mode."""
        sq = self._by_qid(qid)
        if sq is None:
            return {}
        _note_progress(sq)
        return {"rows_out": sq.rows_out, "batches": sq.batches, "time": time_profile(sq),
                "reached": sq.reached, "real_time": bool(sq.real_time),
                "restarts": list(sq.restarts)}

    def kept_queries(self) -> list:
        """(qid, derived stream's name) of each derived stream's query."""
        return [(sq.qid, sq.feed) for sq in list(self.kept.values())]

    def _by_qid(self, qid: int) -> SparkQuery | None:
        return self.queries.get(qid) or next(
            (sq for sq in list(self.kept.values()) if sq.qid == qid), None)

    def plan_of(self, qid: int) -> P.Plan | None:
        sq = self._by_qid(qid)
        return None if sq is None else sq.plan

    def progress(self, qid: int) -> dict | None:
        """Spark's progress of the query's last micro-batch (``StreamingQuery.lastProgress``:
        input rows, rate, durations, state operators), None before its first."""
        sq = self._by_qid(qid)
        return None if sq is None or sq.query is None else sq.query.lastProgress

    def reading(self, names) -> list:
        names = set(names)
        return [live for live in self.running() if live.streams & names and not live.ended]

    def drop_stream(self, name: str) -> None:
        """A dropped stream's readers end (as the back end's do); from any thread."""
        for live in self.reading({name.lower()}):
            err = E.PgError(f"stream {name} was dropped", sqlstate="57014")
            self.loop.call_soon_threadsafe(live.finish, err)
            self.end_query(live.qid, "ended: its stream was dropped")

    def explain(self, p: P.Plan, shape: T.Shape) -> list[str]:
        """Spark's plan of ``p`` (not started: no spool is opened for it)."""
        session = self._session()
        try:
            df = self._frame(p, shape, self._reader_of(session, None))
            text = session._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(),
                                                             "simple")
        except PySparkException as e:
            raise spark_error(e, "Spark cannot plan the query") from None
        lines = [ln for ln in str(text).splitlines() if ln.strip()] + [self._trigger(p, shape)]
        end = T.finish(p, shape, self._table_contents)
        if end is not None:
            lines.append(end.explain())
        return lines

    def _trigger(self, p: P.Plan, shape: T.Shape) -> str:
        """EXPLAIN's line on how Spark would run ``p``: real-time mode or micro-batches."""
        why = self.real_time_allowed(p, shape)
        if why is None:
            return (f"Trigger: real-time mode, a task reading the spool as it grows, if one "
                    f"of the server's {self.real_time_slots} real-time slots is free when the "
                    f"cursor opens (micro-batches otherwise)")
        return f"Trigger: micro-batches ({why})"

    def stop(self) -> None:
        """Every query stopped (the server is shutting down); a derived stream's keeps its
        checkpoint and rows, and goes on from them at the next start."""
        for qid in list(self.queries):
            sq = self.queries.pop(qid)
            sq.stopped = True
            self._stop_one(sq)
        if self._rows_back is not None:
            self._rows_back.close()
        for oid in list(self.kept):
            sq = self.kept.pop(oid)
            sq.stopped = True
            if sq.query is not None:
                with contextlib.suppress(PySparkException):
                    sq.query.stop()


def _reached_by(sq: SparkQuery) -> int | None:
    """Before which instant a derived stream's or named window's every row was given: its
    last watermark; a named window started again has its last one's kept beside its rows
    until its first micro-batch."""
    if sq.promised is None and sq.answered is not None:
        return sq.answered + 1
    return sq.promised


def _add(spent: dict, phase: str, ms: float) -> None:
    spent[phase] = spent.get(phase, 0) + ms


def _note_progress(sq: SparkQuery) -> None:
    """Spark's durations of the query's micro-batches not noted yet, into ``sq.spent``.
    Called at every batch (the one before is over then) and at the end; the last batch's
    progress is one object, Spark's last 100 (``recentProgress``) are read only when more
    than one is new."""
    try:
        last = sq.query.lastProgress if sq.query is not None else None
        if not last or last.get("batchId", -1) <= sq.noted:
            return
        recent = [last] if last["batchId"] == sq.noted + 1 else sq.query.recentProgress
    except PySparkException:          # a session that stops: nothing more to note
        return
    for progress in recent:
        if progress.get("batchId", -1) > sq.noted:
            sq.noted = progress["batchId"]
            for phase, ms in (progress.get("durationMs") or {}).items():
                _add(sq.spent, phase, ms)
            ops = progress.get("stateOperators") or []
            sq.state = (sum(op.get("numRowsTotal", 0) for op in ops),
                        sum(op.get("memoryUsedBytes", 0) for op in ops))
            log.debug("micro-batch %d of %s: %d rows in, ms %s, state %s", sq.noted,
                      sq.feed or sq.reader, progress.get("numInputRows", 0),
                      progress.get("durationMs"),
                      [{k: op.get(k) for k in _STATE_COUNTERS}
                       for op in progress.get("stateOperators") or []])


# what the debug log shows of a micro-batch's state operators
_STATE_COUNTERS = ("operatorName", "numRowsTotal", "commitTimeMs", "allUpdatesTimeMs")

# Spark's phases of a micro-batch (StreamingQueryProgress.durationMs), as a profile names them
_PHASES = (("triggerExecution", "in all"), ("latestOffset", "offsets"),
           ("queryPlanning", "planning"), ("addBatch", "running"),
           ("walCommit", "offset log"), ("commitOffsets", "commit log"))


def time_profile(sq: SparkQuery) -> str:
    """Where a query's time went over its micro-batches: Spark's phases (``durationMs``
    summed; running the batch includes foreachBatch, which here includes the batch's
    plan, run by toArrow, and the rows' way to the cursor or derived stream)."""
    spent = sq.spent
    parts = [f"{label} {spent[phase] / 1000:.2f} s" for phase, label in _PHASES
             if phase in spent]
    if "foreachBatch" in spent:
        parts.append(f"of which in foreachBatch {spent['foreachBatch'] / 1000:.2f} s")
    rows, size = sq.state
    held = f"; state {rows} rows, {size / 2 ** 20:.1f} MiB" if rows else ""
    if sq.real_time:
        return f"real-time mode; {sq.rows_out} rows" + ("; " if parts else "") + \
            ", ".join(parts)
    return f"{sq.batches} micro-batches; " + ", ".join(parts) + held


def kept_reader(reader: str) -> bool:
    """Whether a spool reader is a derived stream's (d<oid>), which goes on after a restart."""
    return reader.startswith("d")


def clean_start(data_dir: str) -> None:
    """At a server's start: cursors' checkpoints go; derived streams' stay."""
    folder = os.path.join(data_dir, FOLDER)
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if not kept_reader(name):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


# the exception a Python function raised, as a worker's traceback ends with it
_PYTHON_FUNCTION_ERROR = re.compile(r"^(\w+(?:Error|Exception): .*)$", re.M)


# what ends a query when one of Spark's Python workers is lost, by its Java cause: the worker
# did not connect back in time (Spark waits 10 s, fixed), or it died: its pipe, read or
# written in Spark's Python runners, closed
_WORKER_LOST = (("Python worker failed to connect back", "did not start in time"),
                ("Timed out while waiting for the Python worker", "did not start in time"),
                ("Python worker exited unexpectedly", "died"))
_PIPE_CLOSED = ("java.io.EOFException", "java.net.SocketException")


def worker_lost(err: Exception) -> str | None:
    """Why ``err`` (a failed streaming query's) is a Python worker of Spark's lost, not the
    query's own failure (None): read off its chain of Java causes."""
    cause = getattr(err, "_origin", None)
    while cause is not None:
        name = cause.getClass().getName()
        text = f"{name}: {cause.getMessage()}"
        for said, why in _WORKER_LOST:
            if said in text:
                return why
        if name in _PIPE_CLOSED and any(".python." in frame.getClassName()
                                        for frame in cause.getStackTrace()):
            return "died"
        cause = cause.getCause()
    return None


def spark_error(err: Exception, what: str) -> E.PgError:
    """A Spark error as the client sees it: its first line, and its SQLSTATE when Spark
    gives one (an error with none is Spark's own: XX000)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    raised = _PYTHON_FUNCTION_ERROR.findall(text) if "python_functions.py" in text else []
    if raised:               # a user's Python function raised in a Spark worker
        return E.PgError(raised[0], sqlstate="38000")
    m = _SQLSTATE.search(text)
    return E.PgError(f"{what}: {first}", sqlstate=m.group(1) if m else "XX000")


def client_table(p: P.Plan, rows: pa.Table, intervals: bool = False) -> pa.Table:
    """Rows of ``p``'s root (its columns, then the interval) with the client's columns:
    the plan's output, valid_from / wtime from ``__ts`` and valid_to from ``__te``;
    ``intervals``: valid_from and valid_to also when the query did not select them."""
    cols, names = [], []
    real = iter(c.name for c in p.root.schema)
    for c in p.output:
        if c.name in P.PSEUDO_COLUMNS and c.name in p.pseudo:
            cols.append(rows.column(T.TE if c.name == "valid_to" else T.TS))
        else:
            cols.append(rows.column(next(real)))
        names.append(c.name)
    for name, col in (("valid_from", T.TS), ("valid_to", T.TE)):
        if intervals and name not in names:
            cols.append(rows.column(col))
            names.append(name)
    return pa.table(cols, names=names)


def internal_table(p: P.Plan, rows: pa.Table) -> pa.Table:
    """Rows of ``p``'s root as the back end's operators carry them: its columns, then the
    interval in µs (∞: wire.INF)."""
    ts = pc.cast(rows.column(T.TS), pa.int64())
    te = pc.fill_null(pc.cast(rows.column(T.TE), pa.int64()), wire.INF)
    names = [c.name for c in p.root.schema]
    return pa.table([rows.column(n) for n in names] + [ts, te], names=names + ["__ts", "__te"])


def _kept_internal(p: P.Plan, folder: str) -> tuple:
    """The rows a derived stream or named window kept (``keep_rows``: the client's columns
    and the interval) as the back end's operators carry them (``internal_table``; none yet:
    an empty table of the interval alone), and the newest batch id among them (-1: none)."""
    files = sorted(glob.glob(os.path.join(folder, "batch-*.parquet")))
    if not files:       # (the first rows Spark gives take its place, with their columns)
        return pa.table({"__ts": pa.array([], pa.int64()),
                         "__te": pa.array([], pa.int64())}), -1
    newest = int(os.path.basename(files[-1])[6:18])
    names = [c.name for c in p.root.schema]
    outputs = [c.name for c in p.output
               if not (c.name in P.PSEUDO_COLUMNS and c.name in p.pseudo)]
    table = pq.read_table(files)
    ts = pc.cast(pc.cast(table.column("valid_from"), pa.timestamp("us")), pa.int64())
    te = pc.fill_null(pc.cast(pc.cast(table.column("valid_to"), pa.timestamp("us")),
                              pa.int64()), wire.INF)
    return pa.table([table.column(o) for o in outputs] + [ts, te],
                    names=names + ["__ts", "__te"]), newest


def keep_rows(folder: str, batch_id: int, table: pa.Table) -> None:
    """A derived stream's micro-batch, as one Parquet file named by its batch id: written
    under a hidden name, flushed, renamed and the folder flushed; Spark runs a batch again
    only when it had not committed it, and the same id then writes the same file over it."""
    path = os.path.join(folder, f"batch-{batch_id:012d}.parquet")
    hidden = os.path.join(folder, f".batch-{batch_id:012d}.tmp")
    with open(hidden, "wb") as out:
        pq.write_table(table, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(hidden, path)
    fsync_dir(folder)


def _order_of(p: P.Plan, shape: T.Shape) -> tuple:
    """The columns a micro-batch's rows are sorted by; none where they come in order: the
    rows of one stream's tuples, row by row, are in the spool's order (valid_from order, and
    the same order whenever a batch runs again), as Spark's tasks read consecutive files and
    toArrow keeps their order (sorting 1.8 million of them took 1.3 s)."""
    if not (shape.hold or shape.closes or shape.with_table):
        return ()
    return (T.TS, T.TE, *(c.name for c in p.root.schema if _sortable(c.type)))


def _sortable(duck_type: str) -> bool:
    """Whether Arrow sorts a column of this type (not lists, structs or maps)."""
    return not any(m in duck_type.upper() for m in ("[", "STRUCT", "MAP", "UNION"))


def _stream_scans(node) -> list:
    below = [s for c in P.children(node) for s in _stream_scans(c)]
    return [node] + below if isinstance(node, P.StreamScan) else below


def _ddl(scan: P.StreamScan) -> str:
    """The stream's columns as a Spark schema."""
    return ", ".join(f"{T.q(c.name.split('.', 1)[1])} {spark_type(c.type)}"
                     for c in scan.schema)


def _arrow_schema(scan: P.StreamScan) -> pa.Schema:
    """The stream's columns as Arrow types (DuckDB's mapping: the spool keeps what ingest
    gives)."""
    return _arrow_types(tuple((c.name.split('.', 1)[1], c.type) for c in scan.schema))


@functools.lru_cache(maxsize=256)
def _arrow_types(columns: tuple) -> pa.Schema:
    """(name, DuckDB type) pairs as an Arrow schema, by DuckDB (a connection each: a query
    asks when it starts, when it is explained and whether real-time mode takes it)."""
    casts = ", ".join(f"CAST(NULL AS {t}) AS " + exp.to_identifier(n, quoted=True).sql("duckdb")
                      for n, t in columns)
    return duckdb.connect().sql(f"SELECT {casts}").to_arrow_table().schema
