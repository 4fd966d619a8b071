"""Spark, for finite queries over archived streams: one SparkSession per server, started on
the first archive query (or at start with ``--spark-warm``) and kept warm; ``local[*]`` by
default, a standalone cluster with ``--spark-master spark://host:7077``.

``start`` runs Spark SQL over temporary views, each view the archive files of one stream
restricted to a time range, in a thread of its own (a Job): Arrow batches come back as
Spark's partitions finish, and progress (stages done / total) as lines. Timestamps are
TIMESTAMP_NTZ in UTC throughout, as the archive writes them.

A cancelled Job (a cancel, statement_timeout, a closed cursor) cancels its Spark job group, and
again every _RECANCEL_S until its thread ends: Spark cancels only the jobs running at that
moment, and one query runs several (broadcasts, then the stages after them), so a cancel that
falls between two would leave the next to run to its end. Once Spark's tracker reports the
group's jobs ended the server logs "archive query cancelled on Spark (pid …, job group …)" at
INFO. Spark stops a cancelled job's running tasks at their next check (between the batches
a task reads).
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from sqlglot import exp

log = logging.getLogger("cqgate")
_SETTLE_S = 2.0       # how long the last progress line waits for the tracker to hear the end
_RECANCEL_S = 0.1     # how often a cancelled Job cancels its group again while it runs


@dataclass(frozen=True)
class ArchiveView:
    """The tuples of one archived stream with low ≤ ts < high, read from ``files``."""
    files: tuple
    columns: tuple            # ((name, DuckDB type), ...)
    ts_column: str
    low: str                  # timestamp literals, 'YYYY-MM-DD HH:MM:SS[.ffffff]'
    high: str


# DuckDB's timestamps without a zone, in seconds, milliseconds or microseconds: Spark's
# TIMESTAMP_NTZ holds each exactly (its microseconds; nanoseconds it has not)
_NTZ = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMP_S,
        exp.DataType.Type.TIMESTAMP_MS)


def spark_type(duck_type: str) -> str:
    t = exp.DataType.build(duck_type, dialect="duckdb")
    if t.this in _NTZ:
        return "TIMESTAMP_NTZ"
    return t.sql("spark")


class SparkCall:
    """A Python function (``P.PythonFunction``) as Spark's Arrow UDF calls it: Arrow arrays in,
    one out; pickled to Spark's Python workers with its definition, compiled there once."""

    def __init__(self, fn):
        self.fn = fn
        self._call = None

    def __call__(self, *arrays):
        if self._call is None:
            self._call = self.fn.batch_callable()
        return self._call(*arrays)

    def __getstate__(self):
        return {"fn": self.fn, "_call": None}


def register_functions(spark, functions) -> None:
    """Give the SparkSession ``spark`` these Python functions, by their DuckDB names (a name
    holds a hash of its definition: registering one again changes nothing)."""
    from pyspark.sql import functions as F
    from pyspark.util import PythonEvalType
    for f in functions:
        spark.udf.register(f.duck_name, F.arrow_udf(
            SparkCall(f), spark_type(f.returns),
            functionType=PythonEvalType.SQL_SCALAR_ARROW_UDF))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Spark:
    def __init__(self, master: str = "local[*]", data_dir: str = "",
                 settings: dict | None = None, jars=None):
        self.master = master
        self.data_dir = data_dir
        self.settings = settings or {}       # --spark-conf: over the defaults below
        self.jars = jars                     # () -> a jar's path or None: the session's own
        self._session = None
        self._lock = threading.Lock()

    def _driver_host(self) -> str:
        """Where executors reach this driver: loopback for local work and a cluster on this
        machine; otherwise CQGATE_SPARK_DRIVER_HOST, or this host's name."""
        named = os.environ.get("CQGATE_SPARK_DRIVER_HOST")
        if named:
            return named
        if self.master.startswith("local") or "://127.0.0.1" in self.master or \
                "://localhost" in self.master:
            return "127.0.0.1"
        return socket.gethostname()

    def session(self):
        with self._lock:
            if self._session is None:
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                from pyspark.sql import SparkSession
                b = (SparkSession.builder.master(self.master).appName("cqgate")
                     .config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.session.timeZone", "UTC")
                     .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
                     .config("spark.sql.shuffle.partitions", "4")
                     .config("spark.driver.host", self._driver_host())
                     .config("spark.driver.bindAddress",
                             os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")))
                if self.data_dir:
                    b = b.config("spark.local.dir", os.path.join(self.data_dir, "spark-tmp"))
                settings = dict(self.settings)
                own = self.jars() if self.jars else None
                if own:             # beside the jars --spark-conf names
                    settings["spark.jars"] = ",".join(
                        filter(None, (settings.get("spark.jars"), own)))
                for key, value in settings.items():
                    b = b.config(key, value)
                self._session = b.getOrCreate()
                self._session.sparkContext.setLogLevel("ERROR")
                log.info("Spark session started (master %s)", self.master)
            return self._session

    def start(self, sql: str, views: dict, *, ordered: bool, every: float, on_batch,
              on_progress, on_end, label: str = "", functions: tuple = ()) -> "Job":
        """Start ``sql`` (Spark SQL) with each name in ``views`` bound to its ArchiveView and
        ``functions`` (Python functions) callable by their DuckDB names; Spark's analysis
        errors are raised here, before any row; see Job for the rest. ``label`` names whose
        query it is in the log (``pid 42``)."""
        spark = self.session()
        register_functions(spark, functions)
        made = []

        def drop():
            for name in made:
                spark.catalog.dropTempView(name)

        try:
            for name, v in views.items():
                cols = ", ".join(_q(c) for c, _ in v.columns)
                if v.files:
                    raw = f"cq_raw_{uuid.uuid4().hex}"
                    spark.read.parquet(*v.files).createOrReplaceTempView(raw)
                    made.append(raw)
                    body = (f"SELECT {cols} FROM {raw} WHERE {_q(v.ts_column)} >= "
                            f"TIMESTAMP_NTZ '{v.low}' AND {_q(v.ts_column)} < "
                            f"TIMESTAMP_NTZ '{v.high}'")
                else:
                    body = "SELECT " + ", ".join(
                        f"CAST(NULL AS {spark_type(t)}) AS {_q(c)}" for c, t in v.columns) + \
                        " WHERE false"
                spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {body}")
                made.append(name)
            df = spark.sql(sql)
        except BaseException:
            drop()
            raise
        return Job(self, df, ordered, every, on_batch, on_progress, on_end, drop,
                   label).start()

    def active_jobs(self) -> int:
        """Spark jobs running now (archive queries' and continuous queries' micro-batches);
        none while no SparkSession has started (asking must not start one)."""
        session = self._session          # no lock: a session starting holds it for seconds
        if session is None:
            return 0
        return len(session.sparkContext.statusTracker().getActiveJobsIds())

    def stop(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None


# ---------------------------------------------------------------------- one running query
def _arrow_batches(df, ordered: bool):
    """The answer's Arrow record batches as Spark's partitions finish: in partition order
    when ``ordered`` (an ORDER BY's answer), otherwise as they arrive. PySpark's public
    ``toArrow`` waits for the whole answer, so this reads the same socket it reads."""
    try:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.serializers import UTF8Deserializer, read_int
        from pyspark.sql.pandas.serializers import (ArrowCollectSerializer,
                                                    ArrowStreamSerializer)
        from pyspark.traceback_utils import SCCallSiteSync
        from pyspark.util import _create_local_socket
        collect = df._jdf.collectAsArrowToPython
    except (ImportError, AttributeError):          # a PySpark whose internals moved
        yield from df.toArrow().to_batches()
        return
    with SCCallSiteSync(df.sparkSession.sparkContext):
        port, secret, server = collect()
    stream, sock = _create_local_socket((port, secret))
    try:
        if ordered:
            yield from ArrowCollectSerializer().load_stream(stream)
        else:
            yield from ArrowStreamSerializer().load_stream(stream)
            n = read_int(stream)          # then the order Spark would have put them in
            if n == -1:
                raise RuntimeError(UTF8Deserializer().loads(stream))
            for _ in range(n):
                read_int(stream)
    finally:
        stream.close()
        sock.close()
        with unwrap_spark_exception():
            server.getResult()


class Progress:
    """Stages done / total of the Spark jobs in one job group, read from the status
    tracker. A stage is counted once however many jobs list it; a stage a finished job
    never ran (Spark skipped it: its output was already there) is left out."""

    def __init__(self, sc, group: str):
        self.sc, self.group = sc, group

    def read(self) -> tuple[int, int, int, int]:
        """(stages done, stages, tasks done, tasks)."""
        tracker = self.sc.statusTracker()
        stages: dict = {}                 # stage id -> (done, tasks done, tasks) or None
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            over = job.status == "SUCCEEDED"
            for stage_id in job.stageIds:
                st = tracker.getStageInfo(stage_id)
                complete = st is not None and st.numActiveTasks == 0 and \
                    st.numCompletedTasks >= st.numTasks
                if stage_id in stages or (over and not complete):
                    continue
                stages[stage_id] = None if st is None else \
                    (complete, st.numCompletedTasks, st.numTasks)
        known = [v for v in stages.values() if v is not None]
        return (sum(v[0] for v in known), len(stages), sum(v[1] for v in known),
                sum(v[2] for v in known))

    def settled(self) -> bool:
        """Whether the tracker has heard every job of the group end: it learns from Spark's
        listener bus, a moment after the job's results are in."""
        tracker = self.sc.statusTracker()
        infos = [tracker.getJobInfo(i) for i in tracker.getJobIdsForGroup(self.group)]
        return all(j is None or j.status in ("SUCCEEDED", "FAILED") for j in infos)


class Job:
    """A query running on Spark in a thread of its own: ``on_batch`` gets each Arrow batch
    as it comes, ``on_progress`` a line every ``every`` seconds while the job runs (with
    ``every`` 0: at every change) and a last one when it ends if any went before or
    ``every`` is 0, ``on_end`` the error or None; ``cancel`` stops the Spark jobs."""

    def __init__(self, spark: "Spark", df, ordered: bool, every: float, on_batch, on_progress,
                 on_end, cleanup, label: str = ""):
        self.spark, self.df, self.ordered, self.every = spark, df, ordered, every
        self.label = label
        self.on_batch, self.on_progress, self.on_end, self.cleanup = \
            on_batch, on_progress, on_end, cleanup
        self.group = f"cqgate-{uuid.uuid4().hex}"
        self.cancelled = False
        self._over = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cqgate-spark", daemon=True)

    def start(self) -> "Job":
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Cancel the Spark jobs, from a thread of its own: the caller (the server's loop)
        does not wait for Spark."""
        if self.cancelled:
            return
        self.cancelled = True
        threading.Thread(target=self._cancel_until_over, name="cqgate-spark-cancel",
                         daemon=True).start()

    def _cancel_until_over(self) -> None:
        """cancelJobGroup now and every _RECANCEL_S until the query's thread ends, so a job
        the query submits after a cancel (its next one) is cancelled too. The query's own
        SparkContext, never ``Spark.session()``: that would start a new one after a stop."""
        from py4j.protocol import Py4JError
        sc = self.df.sparkSession.sparkContext
        try:
            sc.cancelJobGroup(self.group)
            while not self._over.wait(_RECANCEL_S):
                sc.cancelJobGroup(self.group)
        except (Py4JError, AttributeError):     # Spark stopped (shutdown): its jobs with it
            pass

    def _run(self) -> None:
        sc = self.spark.session().sparkContext
        sc.setJobGroup(self.group, "cqgate archive query", interruptOnCancel=True)
        progress = Progress(sc, self.group)
        watcher = threading.Thread(target=self._watch, args=(progress,),
                                   name="cqgate-spark-progress", daemon=True)
        watcher.start()
        error = None
        try:
            for batch in _arrow_batches(self.df, self.ordered):
                if self.cancelled:
                    break
                if batch.num_rows:
                    self.on_batch(batch)
        except Exception as e:  # noqa: BLE001 - Spark's failure is the query's answer
            error = e
        finally:
            self._over.set()
            watcher.join()
            self.cleanup()
            self.on_end(None if self.cancelled else error)
        if self.cancelled:
            self._log_cancelled(progress)

    def _log_cancelled(self, progress: Progress) -> None:
        """Say (once Spark's tracker has heard, or after _SETTLE_S) that the group's jobs
        ended: what an operator, and the tests, see of a cancel reaching Spark."""
        from py4j.protocol import Py4JError
        waited = time.monotonic() + _SETTLE_S
        try:
            while not progress.settled() and time.monotonic() < waited:
                time.sleep(0.02)
            settled = progress.settled()
        except (Py4JError, AttributeError):     # Spark stopped (shutdown): its jobs with it
            return
        whose = f"{self.label}, " if self.label else ""
        if settled:
            log.info("archive query cancelled on Spark (%sjob group %s): its jobs ended",
                     whose, self.group)
        else:
            log.warning("archive query cancelled on Spark (%sjob group %s): Spark still lists "
                        "jobs of it running after %.0f s", whose, self.group, _SETTLE_S)

    def _watch(self, progress: Progress) -> None:
        said = None                       # what the last line reported
        seen = (lambda n: n) if self.every else (lambda n: n[:2])
        while not self._over.wait(self.every or 0.05):
            now = progress.read()
            if now[1] and (said is None or seen(now) != seen(said)):
                self.on_progress(_progress_line(*now))
                said = now
        if said is not None or not self.every:
            waited = time.monotonic() + _SETTLE_S
            while not progress.settled() and time.monotonic() < waited:
                time.sleep(0.02)
            final = progress.read()
            if final[1] and final != said:
                self.on_progress(_progress_line(*final))


def _progress_line(done: int, total: int, tasks_done: int, tasks: int) -> str:
    return f"archive query on Spark: {done} of {total} stages done ({tasks_done} of " \
           f"{tasks} tasks)"
