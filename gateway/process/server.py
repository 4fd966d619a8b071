"""The gateway process: listens for PostgreSQL clients, keeps the session registry used by
CancelRequest, owns the DuckDB store and the worker threads, and shuts down cleanly."""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import signal
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from executor import checkpoints
from executor import plan as P

from gateway.archive.spark import Spark
from gateway.archive.storage import Archive
from gateway.sources import ingest_port as sources
from gateway.clearinghouse.ingest import Ingest
from gateway.connectors.runtime import Connectors
from gateway.sources.source_stream import SourceStream
from gateway.clearinghouse import spool
from gateway.clock import SYSTEM, Clock
from gateway.link import spill
from gateway.link.backend_link import BackendLink, Overtaken
from gateway.pgwire.auth import METHODS
from gateway.pgwire.errors import PgError
from gateway.config import Config, spark_settings
from gateway.process.metrics_http import MetricsServer
from gateway.security.privileges import Grants
from gateway.security.roles import Roles, load_passwords
from gateway.security.server_files import ServerFiles
from gateway.services import Services
from gateway.sessions import backend_signals
from gateway.tables import settings
from gateway.spark_engine import jvm_parts, real_time, streaming
from gateway.sessions.connection import Connection
from gateway.sessions.session import Session
from gateway.streams import ddl
from gateway.connectors import sink_ddl
from gateway.streams.registry import StreamRegistry
from gateway.tables.statement_context import settle
from gateway.tables.store import Store

log = logging.getLogger("cqgate")
CHECKPOINTS = "checkpoints"         # the data directory's folder of cursors' checkpoints
COMPACT_EVERY_S = 5.0      # how often archived streams' small files are merged
WORKERS_WAIT_S = 3.0       # how long a shutdown waits for worker threads' running calls
SPARK_STOP_S = 10.0        # how long a shutdown waits for Spark's session to stop


# what runs again at server start, and how: windows and derived streams as they were made (one
# reads only those made before it), then sinks (which read streams only)
_KEEP = {"window": ddl.keep_relation, "derived": ddl.keep_relation,
         "sink": sink_ddl.keep_sink}


class ConfigError(ValueError):
    """A setting the server cannot start with: said in one line, no traceback."""


class Server:
    def __init__(self, config: Config, clock: Clock = SYSTEM):
        if config.auth not in METHODS:
            raise ConfigError(f"unknown auth method {config.auth!r}; use one of {METHODS}")
        try:
            store = Store(config.data_dir, config.duckdb_memory)
        except duckdb.Error as e:
            raise ConfigError(f"--duckdb-memory {config.duckdb_memory!r}: {e}") from None
        for flag, key in (("--result-memory", "result_memory"), ("--result-spill", "result_spill")):
            try:
                settings.size_bytes(getattr(config, key))
            except ValueError as e:
                raise ConfigError(f"{flag}: {e}") from None
        spill.clear(config.data_dir)
        streams = StreamRegistry(store, config.data_dir)
        self.roles = Roles(config.data_dir, config.superuser)
        try:
            self.roles.seed(load_passwords(config.users_file, config.users))
        except PgError as e:
            raise ConfigError(f"--users/--users-file: {e.message}") from None
        pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="cqgate-duckdb")
        P.load_user_aggregates(config.aggregates)          # fails at start, not at the first query
        store.functions.add_operators(P.load_python_functions(config.functions))
        backend = BackendLink(config.aggregates, clock, config.backend_workers)
        # a cursor's checkpoints serve its restart within this server's life (query ids
        # begin anew with the next): those of an earlier one go
        backend.checkpoint_root = os.path.join(config.data_dir, CHECKPOINTS)
        backend.checkpoint_every = config.checkpoint_interval
        checkpoints.remove(backend.checkpoint_root)
        archive = Archive(config.data_dir)
        try:
            spark_conf = spark_settings(config.spark_conf)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        slots = config.spark_real_time if config.spark_real_time is not None else \
            real_time.local_slots(config.spark_master)
        spark = Spark(config.spark_master, config.data_dir, spark_conf,
                      jars=jvm_parts.jar if slots > 0 else None)
        # a cursor's query on Spark ends with its cursor: nothing of one survives a restart;
        # a derived stream's goes on from its checkpoint and where it committed in its spools
        spools = spool.Spools(os.path.join(config.data_dir, spool.FOLDER))
        spool.clean_start(spools.root, streaming.kept_reader)
        streaming.clean_start(config.data_dir)
        ingest = Ingest(backend, archive, pool, clock, spools)
        # what sessions, sources and system views may use; the rest of this object is the process
        self.services = Services(
            config=config, clock=clock, store=store, streams=streams, pool=pool,
            backend=backend, archive=archive, spark=spark,
            spark_streams=streaming.SparkStreams(spark, spools, config.data_dir, backend,
                                                 store, real_time_slots=slots),
            ingest=ingest,
            # user wrappers (CREATE WRAPPER) are imported only from these folders
            wrapper_dirs=[os.path.join(config.data_dir, "wrappers")]
            + [d for d in (config.wrapper_path or "").split(os.pathsep) if d],
            sessions={}, roles=self.roles, grants=Grants(config.data_dir, self.roles),
            files=ServerFiles(config.data_dir),
            connectors=Connectors(streams, ingest, archive, pool, clock, backend,
                                  config.data_dir))
        self._pids = itertools.count(os.getpid() * 100 % 1_000_000 + 1)
        self.ssl_context = None
        if config.tls_cert and config.tls_key:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(config.tls_cert, config.tls_key)
            self.ssl_context = ctx
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set = set()
        self.abandoned = False     # a shutdown left busy worker threads behind
        self._connections: set = set()      # ended with 57P01 at shutdown
        self._source_tasks: set = set()     # one per source connection
        self._heartbeats: asyncio.Task | None = None
        self._sources: asyncio.base_events.Server | None = None
        self.ingest_port = 0
        # /metrics over HTTP (--http-port); the token lets another host in
        self.metrics = MetricsServer(self.services, secrets.token_urlsafe(24),
                                     lambda: len(self._connections))
        self.http_port: int | None = None

    def _resume_archived(self) -> None:
        """Archived streams go on from their archives' newest tuples (reads their files)."""
        svc = self.services
        for obj in list(svc.streams.objects.values()):
            if obj.kind == "stream" and obj.archived:
                top = svc.archive.latest(obj.key, obj.timestamp_column)
                if top is not None:
                    svc.ingest.resume(obj.relation().name, top)

    async def _keep_relations(self) -> None:
        """Start the queries of the named windows and derived streams kept in the catalog,
        archived streams first going on from their archives' newest tuples (so windows that
        reach back start primed)."""
        await asyncio.get_running_loop().run_in_executor(self.services.pool,
                                                         self._resume_archived)
        await self._start_kept(lambda obj: True)

    async def _relaunch(self, qids: set) -> None:
        """The back end died: its named windows and derived streams (``qids``, the back
        end's names for them) start again on the new one as at the server's start."""
        await self._start_kept(lambda obj: obj.kind in ("window", "derived") and
                               -obj.oid in qids)

    async def _start_kept(self, which) -> None:
        """Start the kept objects ``which(obj)`` chooses, each after those it reads; one that
        cannot start is logged."""
        svc = self.services
        loop = asyncio.get_running_loop()
        session = await loop.run_in_executor(
            svc.pool, lambda: Session(svc, 0, 0, user=svc.roles.bootstrap))
        try:
            kept = sorted((o for o in svc.streams.objects.values()
                           if o.kind in _KEEP and which(o)),
                          key=lambda o: (o.kind == "sink", o.oid))
            for obj in kept:
                try:
                    await settle(await session.in_thread(_KEEP[obj.kind], session.ctx, obj),
                                 session.in_thread)
                except Overtaken:           # a newer crash's restart starts it
                    log.info("%s %s: its restart was overtaken by a newer one", obj.kind,
                             obj.name)
                    return
                except Exception as e:  # noqa: BLE001 - one bad definition must not stop the rest
                    log.error("cannot start %s %s: %s", obj.kind, obj.name, e)
        finally:
            await loop.run_in_executor(svc.pool, session.close)

    def next_pid(self) -> int:
        return next(self._pids)

    def cancel(self, pid: int, secret: int) -> None:
        s = self.services.sessions.get(pid)
        if s is not None and s.secret == secret:
            log.info("cancel request for pid=%d", pid)
            s.cancel()

    async def _client(self, reader, writer) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        connection = Connection(self, reader, writer)
        self._connections.add(connection)
        try:
            await connection.run()
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            self._connections.discard(connection)

    async def start(self) -> int:
        svc, config = self.services, self.services.config
        svc.backend.relaunch = self._relaunch
        await svc.backend.start()
        backend_signals.install(svc.store.db, svc, asyncio.get_running_loop())
        await self._keep_relations()
        await svc.connectors.start()          # after the queries that read their streams
        self._heartbeats = asyncio.create_task(svc.ingest.heartbeats())
        self._compactor = asyncio.create_task(self._compact())
        if config.spark_warm:
            svc.pool.submit(svc.spark.session)
        self._server = await asyncio.start_server(self._client, config.host,
                                                  config.port, limit=1 << 20)
        high = 2 * max(config.max_line_bytes + 1, sources.CHUNK)
        self._sources = await asyncio.get_running_loop().create_server(
            lambda: SourceStream(lambda stream: sources.handle(svc, stream), high,
                                 self._source_tasks),
            config.host, config.ingest_port)
        self.ingest_port = self._sources.sockets[0].getsockname()[1]
        if config.http_port is not None:
            self.http_port = await self.metrics.start(config.http_host, config.http_port)
        return self._server.sockets[0].getsockname()[1]

    async def _compact(self) -> None:
        """Forever: merge archived streams' small files (in a worker thread)."""
        loop, svc = asyncio.get_running_loop(), self.services
        while True:
            await asyncio.sleep(COMPACT_EVERY_S)
            for obj in list(svc.streams.objects.values()):
                if obj.kind == "stream" and obj.archived:
                    try:
                        await loop.run_in_executor(svc.pool, svc.archive.compact, obj.key)
                    except OSError as e:
                        log.warning("compacting the archive of %s failed: %s", obj.name, e)

    async def stop(self) -> None:
        """A fast shutdown, as PostgreSQL's: no new connections; every session's running
        statement is interrupted and its client gets 57P01; then the back end and Spark stop.
        Each step's time is logged, so a slow shutdown says which step held it."""
        if self._server is not None:
            self._server.close()
        if self._sources is not None:
            self._sources.close()
        self.metrics.close()
        svc = self.services
        for step, run in (("sessions ended", self._end_sessions),
                          ("sources stopped", svc.connectors.stop),
                          ("back end stopped", svc.backend.stop),
                          ("Spark stopped", self._stop_spark)):
            began = time.monotonic()
            await run()
            log.info("shutdown: %s in %.2f s", step, time.monotonic() - began)
        began = time.monotonic()
        if await self._workers_ended(WORKERS_WAIT_S):
            svc.store.close()
            log.info("shutdown: worker threads and DuckDB closed in %.2f s",
                     time.monotonic() - began)
            return
        # a worker that ignores its interrupt must not hold the process: everything a client
        # was told is committed is already on disk (DuckDB's WAL, the archive's fsynced files)
        log.warning("shutdown: worker threads still busy after %.0f s; exiting without them",
                    WORKERS_WAIT_S)
        self.abandoned = True

    async def _workers_ended(self, seconds: float) -> bool:
        """The worker pool shut down (queued calls dropped), its running calls given
        ``seconds`` to end."""
        return await _bounded(lambda: self.services.pool.shutdown(wait=True,
                                                                  cancel_futures=True), seconds)

    async def _stop_spark(self) -> None:
        """Spark's session stopped in a thread of its own (not a worker: those may all be
        busy), given SPARK_STOP_S; a JVM that does not stop is left to the process's exit."""
        def stop():
            self.services.spark_streams.stop()
            self.services.spark.stop()
        if not await _bounded(stop, SPARK_STOP_S):
            log.warning("shutdown: Spark did not stop within %.0f s; going on", SPARK_STOP_S)
            self.abandoned = True

    async def _end_sessions(self) -> None:
        """Every connection terminated, every source cut; their tasks given 5 s to end."""
        for connection in list(self._connections):
            connection.terminate()
        tasks = self._tasks | self._source_tasks
        for t in list(self._source_tasks):
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            self._compactor.cancel()


async def _bounded(fn, seconds: float) -> bool:
    """``fn()`` in a daemon thread of its own; whether it ended within ``seconds`` (the wait
    is bounded whatever ``fn`` waits for)."""
    done = threading.Event()

    def run():
        try:
            fn()
        finally:
            done.set()
    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + seconds
    while not done.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return done.is_set()


async def serve(config: Config, ready=print) -> None:
    """Run until SIGTERM/SIGINT; calls ``ready`` with a line containing 'ready' once listening."""
    # pyarrow swaps its own SIGINT/SIGTERM handler in around each CSV parse on this thread
    # (COPY, stream sources); a signal that lands then is kept for Arrow's cancellation, which
    # may drop it, and the loop never hears of it: the server would not stop
    pa.enable_signal_handlers(False)
    server = Server(config)
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if config.auth == "trust" and config.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("auth is 'trust' on %s: anyone who reaches this address can connect; "
                    "use --auth scram-sha-256 with --users or --users-file", config.host)
    metrics = "" if server.http_port is None else (
        f", metrics on http://{config.http_host}:{server.http_port}/metrics, console on "
        f"http://{config.http_host}:{server.http_port}/?token={server.metrics.token}")
    ready(f"cqgate ready: accepting PostgreSQL connections on {config.host}:{port}, "
          f"stream sources on {config.host}:{server.ingest_port}{metrics} "
          f"(data directory {config.data_dir}, auth {config.auth}"
          f"{', TLS' if server.ssl_context else ''})")
    await stop.wait()
    log.info("shutting down: running statements are interrupted (a second signal exits at once)")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _exit_now)
    await server.stop()
    if server.abandoned:       # the interpreter's exit would join the busy worker threads
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)


def _exit_now() -> None:
    """A second SIGTERM or SIGINT during shutdown: PostgreSQL's immediate shutdown."""
    log.warning("exiting at once")
    os._exit(1)
