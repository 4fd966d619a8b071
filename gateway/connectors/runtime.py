"""The connectors that run in the gateway: each stream that follows a PostgreSQL table has a
follower task (``postgres_source.py``), started when the stream is created and again at server
start, stopped (its slot dropped) when the stream goes; each sink a task (``sinks.py``) the
same way. ``rows()`` is ``cq_sources``, ``sink_rows()`` ``cq_sinks``.

Statements run in worker threads and reach this only through coroutines awaited on the event
loop (``AwaitOnLoop``), or, when they drop something, through ``stopped``, which hands the
work to the loop.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time

import pyarrow as pa
import pyarrow.compute as pc

from gateway.connectors import postgres_source as PS
from gateway.connectors.parquet_sink import ParquetTarget
from gateway.connectors.postgres_sink import PostgresTarget
from gateway.connectors.sinks import Sink, SinkPlan
from gateway.connectors.postgres_wire import format_lsn, parse_dsn

log = logging.getLogger("cqgate.sources")

SECRET, SOURCE, SINK = "cq_secret", "cq_source", "cq_sink"   # their objects' schemas


class Connectors:
    def __init__(self, streams, ingest, archive, pool, clock, link, data_dir: str):
        self.streams = streams            # gateway/streams/registry.py
        self.ingest = ingest
        self.archive = archive
        self.pool = pool
        self.clock = clock
        self.link = link                  # the back end: sinks' queries run there
        self.data_dir = data_dir          # a Parquet sink's relative PATH is under its sinks/
        self.followers: dict = {}         # stream oid -> (Follower, task)
        self.sinks: dict = {}             # sink oid -> Sink
        self.loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ credentials
    def dsn(self, source) -> dict:
        """A source's or sink's connection parameters, its secret's password filled in."""
        dsn = parse_dsn(source.options["connection"])
        secret = source.options.get("password_secret")
        if secret:
            obj = self.streams.get(SECRET, secret, kinds=("secret",))
            if obj is None:
                raise KeyError(f'secret "{secret}" does not exist')
            dsn["password"] = obj.options["value"]
        return dsn

    # ------------------------------------------------------------------ followers
    def _follower(self, obj, source, shape: PS.TableShape) -> PS.Follower:
        name = obj.relation().name
        loop = asyncio.get_running_loop()

        async def push(table):
            await self.ingest.push(name, PS.COMMIT, table, obj.options,
                                   f"source {source.name}", one_by_one=True, archive=obj.key)

        async def punctuate(us: int):
            await self.ingest.move(name, us)

        async def save_snapshot(lsn: int):
            obj.options["snapshot_lsn"] = str(lsn)
            await loop.run_in_executor(self.pool, self.streams.save, obj)

        async def in_thread(fn, *args):
            return await loop.run_in_executor(self.pool, fn, *args)

        return PS.Follower(obj, self.dsn(source), source.options["publication"], shape,
                           push=push, punctuate=punctuate,
                           floor=lambda: self.ingest.seam(name.lower()),
                           save_snapshot=save_snapshot, run_in_thread=in_thread,
                           resume_lsn=lambda: self._archived_lsn(obj))

    def _archived_lsn(self, obj) -> int:
        """The newest LSN in the stream's archive (what a restart need not read again)."""
        top = self.archive.latest(obj.key, PS.COMMIT)
        if top is None:
            return 0
        table = self.archive.read(obj.key, PS.COMMIT, top - 1, None,
                                  obj.options.get("fragment"))
        return 0 if table is None else int(pc.max(table.column(PS.LSN)).as_py())

    @staticmethod
    def shape_of(obj) -> PS.TableShape:
        return PS.TableShape([tuple(c[:2]) for c in obj.visible_columns],
                             obj.options["key"].split(","))

    async def follow_new(self, obj, source) -> None:
        """A new stream: its snapshot (in the archive when this returns), then its task."""
        self.loop = asyncio.get_running_loop()
        follower = self._follower(obj, source, self.shape_of(obj))
        try:
            await follower.snapshot(int(self.clock.now() * 1_000_000))
        except BaseException:
            await _quietly(follower.drop_slot())
            raise
        self._run(obj, follower)

    def _run(self, obj, follower: PS.Follower) -> None:
        task = asyncio.get_running_loop().create_task(follower.run())
        self.followers[obj.oid] = (follower, task)

    async def start(self) -> None:
        """At server start: every stream whose snapshot was taken follows its slot again."""
        self.loop = asyncio.get_running_loop()
        for obj in list(self.streams.objects.values()):
            if obj.kind != "stream" or not obj.options.get("source"):
                continue
            source = self.streams.get(SOURCE, obj.options["source"], kinds=("source",))
            if source is None:
                continue
            follower = self._follower(obj, source, self.shape_of(obj))
            if "snapshot_lsn" not in obj.options:
                follower.progress.state = "stopped"
                follower.progress.last_error = (
                    "the server stopped during the stream's first snapshot: DROP STREAM "
                    f"{obj.name} and CREATE it again")
                self.followers[obj.oid] = (follower, None)
                continue
            self._run(obj, follower)

    # ------------------------------------------------------------------ sinks
    def _target(self, obj, planned: SinkPlan):
        o = obj.options
        if o["kind"] == "parquet":
            path = os.path.join(self.data_dir, "sinks", o["path"]) \
                if not os.path.isabs(o["path"]) else o["path"]
            return ParquetTarget(obj.name, path, pa.schema(list(planned.schema)[:-2])), True
        columns = [(f.name, str(f.type)) for f in planned.schema][:-2]
        key = o["key"].split(",") if o.get("key") else []
        return PostgresTarget(obj.name, self.dsn(obj), o["table"], o["mode"], key,
                              columns), False

    async def start_sink(self, obj, planned: SinkPlan, fresh: bool) -> None:
        """A new sink (``fresh``: its target is made ready first, and an error reaches its
        CREATE), or a kept one at server start (its task retries until the target answers)."""
        self.loop = asyncio.get_running_loop()
        target, threaded = self._target(obj, planned)
        sink = Sink(obj, planned, target, self, threaded=threaded)
        if fresh:
            await sink.start(fresh=True)
        else:
            sink.resume()
        self.sinks[obj.oid] = sink

    def stopped(self, obj) -> None:
        """``obj`` (a stream that follows a table, or a sink) was dropped: its task ends, and
        its slot or its progress goes. Called from a worker thread; the work is done on the
        loop."""
        sink = self.sinks.pop(obj.oid, None)
        if sink is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(
                lambda: self.loop.create_task(sink.stop(forget=True)))
        entry = self.followers.pop(obj.oid, None)
        if entry is None or self.loop is None:
            return
        follower, task = entry

        async def end():
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await _quietly(follower.drop_slot())
        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(end()))

    async def stop(self) -> None:
        """At shutdown: every follower and sink ends (slots and progress stay, to go on
        after the restart)."""
        tasks = [t for _, t in self.followers.values() if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, *(s.stop(forget=False) for s in self.sinks.values()),
                             return_exceptions=True)

    # ------------------------------------------------------------------ cq_sources, cq_sinks
    def sink_rows(self) -> list:
        out = []
        for oid, sink in sorted(self.sinks.items()):
            p, o = sink.progress, sink.obj.options
            out.append((sink.obj.name, o["kind"], o.get("table") or o.get("path"), o["mode"],
                        p.state, p.rows, _instant(p.watermark), p.errors, p.last_error,
                        dt.datetime.fromtimestamp(p.since, dt.timezone.utc)))
        return out

    def rows(self) -> list:
        out, now = [], time.time()
        for oid, (f, task) in sorted(self.followers.items()):
            p = f.progress
            behind = max(0, p.server_lsn - p.confirmed_lsn)
            lag_s = (now - p.last_commit_us / 1e6) if behind and p.last_commit_us else 0.0
            out.append((f.obj.options["source"], f.obj.name, "postgres",
                        f.obj.options["table"], f.slot, p.state, p.rows, behind, lag_s,
                        format_lsn(p.confirmed_lsn), p.errors, p.last_error,
                        dt.datetime.fromtimestamp(p.since, dt.timezone.utc)))
        return out


def _instant(us: int | None):
    return None if us is None else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)


async def _quietly(work) -> None:
    """Clean-up that may fail (the server is down): logged, never raised."""
    try:
        await work
    except Exception as e:  # noqa: BLE001 - clean-up after a failure must not hide it
        log.warning("source clean-up failed: %s", e)
