"""A running sink: its query in the back end (a cursor the server owns), its rows turned into
changes (``sink_state``) and written to its target (``postgres_sink``, ``parquet_sink``) one
batch a transaction with the sink's progress.

Anything that goes wrong (the target down, the back end lost, the sink's queue over its bound
because the target is slow) ends the query and starts over from the target's last committed
progress: the query is started again primed from the archive so that it goes on from that
watermark (every stream a sink reads is archived), and what the target holds is the state.
So a slow target slows only its sink, with memory bounded as a slow cursor's is.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from executor import plan as P

from gateway.archive.priming import start_primed
from gateway.connectors.postgres_wire import PgError
from gateway.connectors.sink_state import NEVER, Appended, Current, KeyNotUnique
from gateway.link.live_rows import Bounds
from gateway.pgwire import errors as E

log = logging.getLogger("cqgate.sinks")

TAKE_S = 1.0                # how long the sink waits for rows before looking again
BACKOFF_S = (0.25, 10.0)


@dataclass
class SinkPlan:
    """What the sink's query is, planned when the sink is made (and at each server start)."""
    plan: P.Plan
    fields: list
    schema: pa.Schema           # the answer's columns, then valid_from and valid_to
    histories: tuple            # archive histories that prime it (gateway/archive/priming.py)
    tables: dict                # the tables its stream–table joins read
    bounds: Bounds
    sql: str


@dataclass
class SinkProgress:
    state: str = "starting"
    rows: int = 0
    errors: int = 0
    last_error: str | None = None
    watermark: int | None = None
    since: float = field(default_factory=time.time)


class Sink:
    def __init__(self, obj, planned: SinkPlan, target, parts, *, threaded: bool):
        self.obj = obj
        self.planned = planned
        self.target = target
        self.parts = parts                   # runtime.Connectors: link, ingest, archive, pool
        self.threaded = threaded             # the target's methods block (files): in a thread
        self.progress = SinkProgress()
        self.task: asyncio.Task | None = None
        self.live = None
        self._cancel = asyncio.Event()
        self._duck = duckdb.connect()
        names = [f.name for f in planned.schema][:-2]
        self._text = ", ".join(f'CAST("{n}" AS VARCHAR)' for n in names) + \
            ', epoch_us(valid_from), epoch_us(valid_to)'

    async def _call(self, method: str, *args):
        fn = getattr(self.target, method)
        if self.threaded:
            return await asyncio.get_running_loop().run_in_executor(self.parts.pool, fn, *args)
        return await fn(*args)

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.parts.pool, fn, *args)

    async def start(self, fresh: bool) -> None:
        """Make the target ready (errors reach the CREATE SINK that asked), then run."""
        await self._call("prepare", fresh)
        self.task = asyncio.get_running_loop().create_task(self.run(prepared=True))

    def resume(self) -> None:
        """Run a kept sink (at server start): its target is reached by the task, which
        retries while it does not answer."""
        self.task = asyncio.get_running_loop().create_task(self.run(prepared=False))

    async def run(self, prepared: bool) -> None:
        wait = BACKOFF_S[0]
        while True:
            try:
                if not prepared:
                    await self._call("prepare", False)
                prepared = False
                await self._follow()
            except KeyNotUnique as e:
                self._failed("stopped", f"{e}: the sink's KEY must name one row at a time")
                return
            except (E.PgError, PgError, OSError, asyncio.TimeoutError) as e:
                self._failed("retrying", str(getattr(e, "message", None) or e))
                log.warning("sink %s: %s; starting again in %.1f s", self.obj.name,
                            self.progress.last_error, wait)
            finally:
                self._end_query()
            await asyncio.sleep(wait)
            wait = min(wait * 2, BACKOFF_S[1])

    def _failed(self, state: str, message: str) -> None:
        self.progress.state = state
        self.progress.errors += 1
        self.progress.last_error = message

    async def _follow(self) -> None:
        watermark, saved = await self._call("load")
        mode = self.obj.options.get("mode", "append")
        if mode == "upsert":
            names = [f.name for f in self.planned.schema][:-2]
            state = Current([names.index(k) for k in self.obj.options["key"].split(",")])
        else:
            state = Appended()
        state.resume(watermark, saved)
        self.live = await self._open(watermark)
        self.progress.state, self.progress.watermark = "running", watermark
        while True:
            batch = await self.live.take(None, TAKE_S, self._cancel)
            if not batch.num_rows:
                continue
            pieces = await self._in_thread(self._pieces, batch)
            changes = state.feed(pieces)
            if changes or state.watermark != self.progress.watermark:
                await self._call("write", changes, state.watermark)
            self.progress.rows += len(changes.inserts) + len(changes.upserts) + \
                len(changes.deletes)
            self.progress.watermark = state.watermark
            self.progress.last_error = None

    def _pieces(self, batch: pa.Table) -> list:
        """The batch's rows as (values' text, start µs, end µs or NEVER)."""
        self._duck.register("sink_batch", batch)
        try:
            table = self._duck.sql(f"SELECT {self._text} FROM sink_batch").to_arrow_table()
        finally:
            self._duck.unregister("sink_batch")
        cols = [c.to_pylist() for c in table.columns]
        return [(tuple(row[:-2]), row[-2], NEVER if row[-1] is None else row[-1])
                for row in zip(*cols)]

    async def _open(self, since: int | None):
        p, link = self.planned, self.parts.link

        def start(history=None, seam=None):
            return link.open(p.plan, p.fields, p.schema, p.sql, 0, self.obj.name, p.tables,
                             history, seam, label=f"sink {self.obj.name}", bounds=p.bounds)
        if p.histories:
            return await start_primed(self.parts, list(p.histories), start, since)
        return await start()

    def _end_query(self) -> None:
        if self.live is not None:
            live, self.live = self.live, None
            live.close()

    async def stop(self, forget: bool) -> None:
        """End the sink (``forget``: DROP SINK, whose progress goes; else a shutdown)."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self._end_query()
        if forget:
            try:
                await self._call("forget")
            except (E.PgError, PgError, OSError) as e:
                log.warning("sink %s: its progress was not removed: %s", self.obj.name, e)
        else:
            await self._call("close")
