"""The gateway's side of the back end: starts ``python -m executor.backend`` as its own process
on one end of a socket pair, sends it plans and stream data, and sorts what comes back into
one result queue per running query (``LiveRows``), which cursors and portals read.

With ``workers`` > 1, more back ends run beside the first: a continuous keyed aggregate is split
across all of them by its key (``shards.py``), each getting the stream's rows; everything else
runs on the first. If a back end dies, a new one starts; a query that can go on from its last
watermark (``resumption.py``) is started again there from the archive and its cursor sees no
seam, any other ends with an error (57P02); the queries the server itself keeps (named
windows, derived streams) start again as at the server's start (``relaunch``).
"""
from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import functools
import itertools
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Awaitable, Callable

import pyarrow as pa

from executor import checkpoints
from executor import plan as P
from executor import wire

from gateway.clock import SYSTEM, Clock
from gateway.link.frames import BackendFrames
from gateway.link.outbox import Outbox
from gateway.pgwire import errors as E
from gateway.link.live_rows import UNBOUNDED, Bounds, LiveRows
from gateway.link.resumption import Resumption
from gateway.link.shards import ShardMerge, shard_key, shard_plan

log = logging.getLogger("cqgate")
HIGH_WATER = 8 << 20       # bytes queued towards the back end before ingest waits
BEHIND = HIGH_WATER // 2   # queued bytes at which the back end counts as behind (ON OVERLOAD)
SHED_LIMIT = 8 * HIGH_WATER  # a load-shedding stream waits only past this many queued bytes
ANSWER_S = 60.0            # the longest a request to the back end waits for its answer


def _one_line(sql: str, width: int = 120) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _instant(us: int | None) -> str:
    return "?" if us is None else str(dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us))


class _Worker:
    """One back-end process: the process, the transport its frames come back on, the frames
    to it, and the last MARK it echoed."""

    def __init__(self, index: int):
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.transport: asyncio.Transport | None = None
        self.out: Outbox | None = None
        self.echoed = 0

    async def start(self, loop, aggregates: str | None, on_frame, on_lost) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env["CQGATE_AGGREGATES"] = aggregates or ""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "executor.backend", "--fd", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        self.transport, _ = await loop.create_unix_connection(
            lambda: BackendFrames(on_frame, on_lost), sock=ours)
        if self.out is not None:
            self.out.close()
        self.out = Outbox(ours, loop, HIGH_WATER)

    async def stop(self) -> None:
        if self.out is not None:
            self.out.close()
        if self.transport is not None:
            self.transport.close()
        if self.proc is not None:
            # the socket's end asks it to stop; a back end busy in a query is told by SIGTERM,
            # then killed: the server exits within seconds whatever it was doing
            for ask, wait_s in ((None, 1.0), (self.proc.terminate, 2.0), (self.proc.kill, 5.0)):
                if ask is not None:
                    ask()
                if await self._exited(wait_s):
                    return

    async def _exited(self, seconds: float) -> bool:
        """Whether the process ends within ``seconds`` (polled: the loop goes on; a process's
        exit is the machine's time, whatever clock the server runs on)."""
        deadline = time.monotonic() + seconds
        while self.proc.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True


class Overtaken(E.PgError):
    """A restart that a newer crash (or the cursor's close) overtook: the newer one's restart
    starts the query instead."""

    def __init__(self):
        super().__init__("the query's restart was overtaken", sqlstate="57P02")


def _go_on_if(still) -> None:
    """A restart that a newer crash or its cursor's close overtook stops here."""
    if still is not None and not still():
        raise Overtaken()


# the crash whose restart the running task is (its number, ``BackendLink.restarts``): the
# named windows and derived streams that restart starts, through the server's DDL, carry it
_RESTART: contextvars.ContextVar = contextvars.ContextVar("cqgate_restart", default=None)


class BackendLink:
    def __init__(self, aggregates: str | None = None, clock: Clock = SYSTEM, workers: int = 1):
        self.aggregates = aggregates        # user aggregate specs, loaded by the back end too
        self.clock = clock                  # the time result queues wait by
        self.loop: asyncio.AbstractEventLoop | None = None
        self.workers = [_Worker(i) for i in range(max(1, workers))]
        self.merges: dict = {}              # qid -> ShardMerge of a query split across them
        self.split_reads: dict = {}         # stream -> the columns split queries read of it
        self.marks = 0                      # MARKs sent so far
        self._live: dict = {}              # qid -> LiveRows
        self.persistent: dict = {}        # qid -> (plan, feeds): re-sent after a restart
        # those a restart is starting again and has not yet: a newer crash meanwhile takes
        # them over, with those it did start (on the back end that died)
        self._relaunching: dict = {}
        # qid -> the feeds it reads in arrival order (stream@arrival) or by arrival time
        # (stream@proctime)
        self.arrivals: dict = {}
        self.answers: dict = {}           # req -> (Future, the back end asked)
        self.tables_in_use: dict = {}     # table name -> number of running queries reading it
        self._tables_of: dict = {}        # qid -> the tables it reads
        self.labels: dict = {}            # qid -> how the log names a running query
        self._ids = itertools.count(1)
        self._restart: asyncio.Task | None = None
        self._stopping = False
        self.restarts = 0
        self.replies = {wire.Ended: self._on_ended, wire.Answer: self._on_answer,
                        wire.Mark: self._on_mark, wire.Reached: self._on_reached}
        self.sent_upto: dict = {}         # stream -> the latest event time sent to back ends
        self.recovered = 0                # queries started again after a back end died
        # the server's: ``await relaunch(qids)`` starts those kept queries (named windows,
        # derived streams) again on a new back end as at the server's start: primed from
        # the archive, their tables read anew. Without it (or for one it did not start) a
        # kept query is planned again from live data
        self.relaunch: Callable[[set], Awaitable] | None = None
        # where cursors that can go on after a crash save their operators' state, and how
        # often (seconds; 0: never, a restart reads the archive as far back as it reaches)
        self.checkpoint_root: str | None = None
        self.checkpoint_every = 0.0

    # ------------------------------------------------------------------ process
    @property
    def proc(self) -> subprocess.Popen | None:
        return self.workers[0].proc

    @property
    def out(self) -> Outbox | None:
        """Frames to the first back end (every query's, except the split copies)."""
        return self.workers[0].out

    def pids(self) -> dict:
        """{how metrics name it (backend, backend_1, …): pid} of the back ends running."""
        return {f"backend_{w.index}" if w.index else "backend": w.proc.pid
                for w in self.workers if w.proc is not None and w.proc.poll() is None}

    async def start(self, generation: int | None = None) -> None:
        """Start the back ends not running yet, then plan again the queries the server
        keeps (after crash number ``generation``: a newer crash meanwhile takes over)."""
        self.loop = asyncio.get_running_loop()
        if generation is not None:
            _RESTART.set(generation)    # (the task's own: the kept relations' DDL reads it)
        for w in self.workers:
            if w.proc is None or w.proc.poll() is not None:
                await self._start_worker(w)
        kept = {**self._relaunching, **self.persistent}
        self._relaunching, self.persistent = dict(kept), {}
        still = None if generation is None else (lambda: self.restarts == generation)
        if kept and self.relaunch is not None:
            for qid in kept:            # the new back end holds none of their tables
                self._release_tables(qid)
            await self.relaunch(set(kept))
        for qid, (plan, feeds) in kept.items():
            if still is not None and not still():
                return
            if qid in self.persistent:
                log.info("query restarted: %s", self.labels.get(qid, f"#{qid}"))
                continue
            await self._register(qid, plan, feeds)
            self._kept(qid, plan, feeds)
            log.info("query restarted: %s (from live data)", self.labels.get(qid, f"#{qid}"))

    async def _start_worker(self, w: _Worker) -> None:
        await w.start(self.loop, self.aggregates,
                      functools.partial(self._on_frame, worker=w.index),
                      functools.partial(self._lost, w))
        w.echoed = self.marks               # it has seen none of the marks sent so far
        log.info("back end %sstarted (pid %d)", f"{w.index} " if w.index else "", w.proc.pid)

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.gather(*(w.stop() for w in self.workers))

    def _lost(self, w: _Worker) -> None:
        """The socket to a back end closed: unless the server is stopping, it crashed."""
        if not self._stopping:
            self._restart = asyncio.ensure_future(self._crashed(w))

    async def _crashed(self, w: _Worker) -> None:
        code = w.proc.wait() if w.proc else None
        log.error("the back end%s stopped (exit code %s); restarting it",
                  f" {w.index}" if w.index else "", code)
        self.restarts += 1
        generation = self.restarts       # a newer crash during this one's restart takes over
        err = E.PgError("the back end stopped; this query was lost", sqlstate="57P02",
                        hint="Run the query again; a query over archived streams declared "
                             "WITH (progress = true) can go on with resume_from = its last "
                             "progress.")
        # the first back end runs every query (the split ones in part); another only the
        # split ones, whose copies on the back ends still running are dropped
        lost = list(self._live) if w.index == 0 else list(self.merges)
        again = []
        for qid in lost:
            live = self._live.get(qid)
            if live is not None and qid not in self.merges and not live.ended and \
                    live.resumption is not None and live.resumption.lost():
                again.append(live)
                self._release_tables(qid)
                continue
            live = self._live.pop(qid, None)
            if live is not None:
                live.finish(err)
            self._release_tables(qid)
            self._log_stop(qid, "lost with the back end")
            self._unsplit(qid, but=w.index)
        for req, (fut, asked) in list(self.answers.items()):
            if asked == w.index:
                del self.answers[req]
                if not fut.done():
                    fut.set_exception(err)
        if w.index == 0:
            await self.start(generation)
        else:
            await self._start_worker(w)
        for live in again:
            await self._go_on(live, err, generation)

    async def _go_on(self, live: LiveRows, err: E.PgError, generation: int) -> None:
        """Start a query the dead back end ran again, from its last watermark. If the new
        back end dies too meanwhile, that crash's restart goes on with it (``restarts``
        says so), and this one stops."""
        r = live.resumption
        if live.ended or self.restarts != generation:  # its cursor closed, or a newer crash
            return                                      # restarts it
        try:
            await r.restart(live, r.reached, r.started, generation)
        except Exception as e:  # noqa: BLE001 - a cursor that cannot go on ends alone
            if self.restarts != generation:
                return
            why = e.message if isinstance(e, E.PgError) else f"{type(e).__name__}: {e}"
            self._live.pop(live.qid, None)
            self._log_stop(live.qid, f"lost with the back end ({why})")
            live.finish(E.PgError(f"{err.message}: {why}", sqlstate="57P02", hint=err.hint))
            return
        self.recovered += 1

    # ------------------------------------------------------------------ replies
    def _on_frame(self, kind: bytes, payload, worker: int = 0) -> None:
        if kind == wire.ROWS:            # Arrow rows: read where they lie, never through JSON
            self._on_rows(payload, worker)
        else:
            msg = wire.decode(kind, payload)
            self.replies[type(msg)](msg, worker)

    def _on_rows(self, payload: bytes, worker: int) -> None:
        qid, table = wire.parse_rows(payload)
        merge = self.merges.get(qid)
        if merge is not None:
            merge.add(worker, self.workers[worker].echoed, table)
            return
        live = self._live.get(qid)
        if live is not None:
            live.put(table)

    def _on_mark(self, msg: wire.Mark, worker: int) -> None:
        self.workers[worker].echoed = msg.n
        upto = min(w.echoed for w in self.workers)
        for merge in list(self.merges.values()):
            merge.release(upto)

    def _mark(self) -> None:
        """After frames that may bring rows of split queries, a MARK to every back end."""
        if self.merges:
            self.marks += 1
            frame = wire.encode(wire.Mark(self.marks))
            for w in self.workers:
                w.out.write(frame)

    def _on_ended(self, msg: wire.Ended, worker: int) -> None:
        merge = self.merges.get(msg.qid)
        if merge is not None:
            if not msg.error:            # a split query ends when all its copies have
                merge.ended.add(worker)
                if len(merge.ended) < len(self.workers):
                    return
                merge.release(None)
            self._unsplit(msg.qid, but=worker)
        # a failed query stays listed (cq_queries shows why) until its cursor closes
        live = self._live.get(msg.qid) if msg.error else self._live.pop(msg.qid, None)
        self._release_tables(msg.qid)
        self._log_stop(msg.qid, f"failed: {msg.error}" if msg.error else "ended")
        if live is None:
            return
        err = None
        if msg.error:
            err = E.PgError(msg.error, sqlstate=msg.sqlstate or "XX000")
            live.failure = msg.error
        live.finish(err)

    def _on_reached(self, msg: wire.Reached, worker: int) -> None:
        live = self._live.get(msg.qid)
        if live is not None and msg.qid not in self.merges:
            live.reached(msg.ts)

    def _on_answer(self, msg: wire.Answer, worker: int) -> None:
        fut, _ = self.answers.pop(msg.req, (None, None))
        if fut is not None and not fut.done():
            fut.set_result(msg)

    async def _ask(self, request: type, worker: int = 0, **fields) -> wire.Answer:
        """Send a request (a message class with a ``req`` field) to a back end and wait for
        its ANSWER; one that did not succeed raises its error."""
        return await self._answer(self._request(request, worker, **fields))

    def _request(self, request: type, worker: int = 0, **fields) -> asyncio.Future:
        """Send a request now; the future of its ANSWER."""
        req = next(self._ids)
        fut = self.loop.create_future()
        self.answers[req] = (fut, worker)
        self.workers[worker].out.write(wire.encode(request(req=req, **fields)))
        return fut

    @staticmethod
    async def _answer(fut: asyncio.Future) -> wire.Answer:
        try:
            answer = await asyncio.wait_for(fut, timeout=ANSWER_S)
        except asyncio.TimeoutError:
            # a back end far behind its input: the statement fails, its session goes on
            raise E.PgError(f"the back end did not answer within {ANSWER_S:.0f} s: it is "
                            "behind its input", sqlstate="53000",
                            hint="See cq_queries and the back end's busy share in the "
                            "console; try again when it has caught up.") from None
        if not answer.ok:
            raise E.PgError(answer.error, sqlstate=answer.sqlstate or "XX000")
        return answer

    # ------------------------------------------------------------------ queries
    def new_qid(self) -> int:
        return next(self._ids)

    def checkpoint_dir(self, qid: int) -> str | None:
        """Where query ``qid``'s checkpoints are (None: checkpoints are off)."""
        if self.checkpoint_root is None:
            return None
        return os.path.join(self.checkpoint_root, str(qid))

    async def _register(self, qid: int, plan: P.Plan, feeds: str | None,
                        seam: int | None = None, resume: bool = False,
                        upto: dict | None = None, restore: str | None = None) -> None:
        merge = self.merges.get(qid)
        if merge is None:
            live = self._live.get(qid)
            if live is not None and live.resumption is not None and \
                    live.resumption.started is None:
                # the query sees no tuple of a stream sent before its plan (every one since
                # is later)
                live.resumption.started = {s: self.sent_upto[s] for s in
                                           P.streams_read(plan.root) if s in self.sent_upto}
            saves = live is not None and live.resumption is not None and \
                live.resumption.restart is not None and self.checkpoint_every > 0
            await self._ask(wire.PlanQuery, qid=qid, plan=P.to_dict(plan), feeds=feeds,
                            seam=seam, resume=resume, upto=upto, restore=restore,
                            checkpoint=self.checkpoint_dir(qid) if saves else None,
                            every=self.checkpoint_every)
            return
        # every back end gets its copy before any other frame, so all see the same rows
        n = len(self.workers)
        asks = [self._answer(self._request(
            wire.PlanQuery, worker=i, qid=qid, feeds=None, seam=None,
            plan=P.to_dict(shard_plan(plan, merge.key, i, n)))) for i in range(n)]
        results = await asyncio.gather(*asks, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            self._unsplit(qid)
            raise failed

    def _split_key(self, plan: P.Plan) -> P.Expr | None:
        return shard_key(plan) if len(self.workers) > 1 else None

    def split_by(self, plan: P.Plan) -> str | None:
        """How a continuous query starting now without archived tuples would be split across
        the back ends (EXPLAIN's line), or None when it runs on one."""
        key = self._split_key(plan)
        return None if key is None else \
            f"across {len(self.workers)} back ends by the key {key.sql}"

    def _split(self, qid: int, plan: P.Plan, live: LiveRows) -> None:
        """Split a keyed query across the back ends when there are several and it can be."""
        key = self._split_key(plan)
        if key is not None:
            self.merges[qid] = ShardMerge(len(self.workers), live.put, key, plan)
            self._split_reads()

    def _split_reads(self) -> None:
        reads: dict = {}
        for merge in self.merges.values():
            for name in merge.streams:
                reads.setdefault(name, set()).update(merge.columns)
        self.split_reads = reads

    def _unsplit(self, qid: int, but: int | None = None) -> None:
        """A split query is over: its copies on the back ends (``but`` one) are dropped."""
        if self.merges.pop(qid, None) is None:
            return
        self._split_reads()
        frame = wire.encode(wire.Drop(qid))
        for w in self.workers:
            if w.index != but and w.out is not None:
                w.out.write(frame)

    async def _start_query(self, qid: int, plan: P.Plan, feeds: str | None,
                           tables: dict | None, history: dict | None = None,
                           seam: int | None = None, resume: bool = False,
                           upto: dict | None = None, still=None,
                           restore: str | None = None) -> None:
        """Send the tables its stream–table joins read and the archived tuples that prime it
        ({stream: table}; rows valid at ``seam`` and later go out; ``resume``: rows that
        begin at ``seam`` or later, the query going on from there), then the plan; count the
        tables. ``still()``: whether to go on, asked before the first frame and before the plan
        (a restart that a newer crash or the cursor's close overtook stops there)."""
        # every frame to the back end running when it began: if that one dies meanwhile,
        # the rest go nowhere, rather than to its successor, which would take them as the
        # first part of the history of a restart under the same qid
        _go_on_if(still)
        out = self.out
        for tname, table in (tables or {}).items():
            await self.send_table(tname, table, out)
        await self._send_history(qid, history, out)
        _go_on_if(still)
        await self._register(qid, plan, feeds, seam if history is not None or resume else None,
                             resume, upto, restore)
        arrivals = {s + P.ARRIVAL for s in P.arrival_streams(plan.root)} | \
            {s + P.PROCTIME for s in P.proctime_streams(plan.root)}
        if arrivals:
            self.arrivals[qid] = arrivals
        merge = self.merges.get(qid)
        log.info("query started: %s%s%s", self.labels.get(qid, f"#{qid}"),
                 f" (primed from the archive up to {_instant(seam)})" if history else "",
                 f" (split across {len(self.workers)} back ends by {merge.key.sql})"
                 if merge is not None else "")
        self._tables_of[qid] = list(tables or {})
        for t in self._tables_of[qid]:
            self.tables_in_use[t] = self.tables_in_use.get(t, 0) + 1

    async def open(self, plan: P.Plan, fields: list, schema: pa.Schema, sql: str, owner: int,
                   name: str, tables: dict | None = None, history: dict | None = None,
                   seam: int | None = None, label: str = "query",
                   bounds: Bounds = UNBOUNDED, resumption: Resumption | None = None,
                   resume: bool = False, upto: dict | None = None) -> LiveRows:
        """Start a continuous query; its rows arrive in the returned queue. ``tables``: the
        current contents of the tables it joins; ``history``/``seam``: archived tuples its
        windows reach back to, and where live data takes over; ``label``: how the log names
        it (a cursor, or a plain query); ``bounds``: how much its queue may hold;
        ``resumption``: its progress and restart (its rows then carry their interval in two
        more columns); ``resume``: it goes on from ``seam`` rather than starting there (and
        ``upto``: each stream's BOUNDARY when its history was read)."""
        qid = self.new_qid()
        live = LiveRows(fields, schema, qid, sql, owner, name, self, self.clock, bounds)
        live.streams = P.streams_read(plan.root)
        live.resumption = resumption
        if resumption is not None:
            resumption.seam = seam if history is not None else None
        self._live[qid] = live
        self.labels[qid] = f"{label} of pid {owner}: {_one_line(sql)}"
        # a split query's rows are merged from several back ends, which report no progress:
        # it runs split unless it asks for progress rows (and then cannot go on after a crash)
        if not tables and history is None and (resumption is None or not resumption.progress):
            self._split(qid, plan, live)
            if qid in self.merges and resumption is not None:
                resumption.restart = None       # (its copies report no watermark)
        try:
            await self._start_query(qid, plan, None, tables, history, seam, resume, upto)
        except E.PgError:
            self._unsplit(qid)
            self._live.pop(qid, None)
            self.labels.pop(qid, None)
            raise
        return live

    async def reopen(self, live: LiveRows, plan: P.Plan, tables: dict | None, history: dict,
                     since: int | None, upto: dict | None, generation: int,
                     restore: str | None = None, primed: bool = False) -> None:
        """Start ``live``'s query again (its back end died) so that it goes on from ``since``
        with the archived tuples ``history``; its rows come into the same queue. It stops
        before its plan goes if a crash newer than ``generation`` (the one it restarts
        after) has come meanwhile: that one's restart runs instead. ``restore``: the
        checkpoint its operators start from (``history`` then begins where it stands).
        ``primed``: it starts as it first did, primed at ``since`` (None: from the tuples
        in ``history``), rather than going on from there."""
        self._live[live.qid] = live
        self.labels[live.qid] = f"{live.label()} (restarted" + \
            (" from a checkpoint" if restore else "") + f"): {_one_line(live.sql)}"
        await self._start_query(live.qid, plan, None, tables, history, since, not primed, upto,
                                still=lambda: self.restarts == generation and not live.ended,
                                restore=restore)
        if live.ended:                  # closed while it started: it stops now
            self.end_query(live.qid, "stopped")

    async def keep(self, qid: int, plan: P.Plan, feeds: str, tables: dict | None = None,
                   history: dict | None = None, seam: int | None = None,
                   kind: str = "window") -> None:
        """Run a named window's or derived stream's query for as long as the server keeps it
        (``history``/``seam`` as for ``open``; ``kind`` names it in the log)."""
        self.labels[qid] = f"{kind} {feeds}"
        generation = _RESTART.get()
        still = None if generation is None else (lambda: self.restarts == generation)
        try:
            await self._start_query(qid, plan, feeds, tables, history, seam, still=still)
        except E.PgError:
            if still is not None and not still():
                raise Overtaken() from None     # (its back end died while it started)
            raise
        self._kept(qid, plan, feeds)

    def _kept(self, qid: int, plan: P.Plan, feeds: str) -> None:
        self.persistent[qid] = (plan, feeds)
        self._relaunching.pop(qid, None)

    def _release_tables(self, qid: int) -> None:
        for t in self._tables_of.pop(qid, []):
            self.tables_in_use[t] -= 1
            if not self.tables_in_use[t]:
                del self.tables_in_use[t]

    async def send_table(self, name: str, table: pa.Table, out: Outbox | None = None) -> None:
        out = out or self.out
        out.write(wire.data_parts(name, table, wire.TABLE))
        await out.drain()

    async def snapshot(self, plan: P.Plan, relations: list, history: dict | None = None,
                       seam: int | None = None, at: int | None = None) -> pa.Table | None:
        """A one-time query at now over the back end's recent tuples; ``relations`` are
        (name, plan) of the named windows it reads, dependencies first; ``history``: the
        archived streams' tuples up to the seam, read instead of the recent ones; ``at``:
        the instant it answers for (None: the newest watermark of what it reads)."""
        return await self._one_time(wire.Snapshot, history, plan=P.to_dict(plan),
                                    relations=[[n, P.to_dict(p)] for n, p in relations],
                                    at=at)

    async def recompute(self, plan: P.Plan, history: dict, seam: int, spans: list,
                        by_start: bool = False) -> pa.Table | None:
        """The query over ``history`` (archived tuples up to ``seam``) as though no tuple had
        been late: its rows that began by the seam and overlap ``spans`` ([from, to) µs),
        or, ``by_start``, began within them."""
        return await self._one_time(wire.Recompute, history, plan=P.to_dict(plan), seam=seam,
                                    spans=spans, by_start=by_start)

    async def _one_time(self, request: type, history: dict | None,
                        **fields) -> pa.Table | None:
        qid = self.new_qid()
        live = LiveRows([], None, qid, "", 0, "", self, self.clock)
        self._live[qid] = live
        try:
            await self._send_history(qid, history)
            await self._ask(request, qid=qid, **fields)
        finally:
            self._live.pop(qid, None)
        return pa.concat_tables(live.pending) if live.pending else None

    async def _send_history(self, qid: int, history: dict | None,
                            out: Outbox | None = None) -> None:
        """``history`` for query ``qid`` to the back end of ``out`` (the first one's now)."""
        out = out or self.out
        for stream, table in (history or {}).items():
            for batch in table.to_batches(max_chunksize=1 << 16):
                out.write(wire.history(qid, stream, batch))
                await out.drain()

    def running(self) -> list:
        """The result queues of the continuous queries running now (a copy: safe to
        iterate while queries end)."""
        return list(self._live.values())

    def reading(self, names) -> list:
        """The running queries that read any of the streams or named relations ``names``
        (lower case)."""
        names = set(names)
        return [live for live in self.running()
                if (live.streams | live.through) & names and not live.ended]

    def dropped_relation(self, name: str) -> None:
        """Derived stream ``name`` was dropped: the queries that read it through its query
        end as the back end ends a dropped stream's readers."""
        for live in self.running():
            if name in live.through and not live.ended:
                self.end_query(live.qid, f"failed: stream {name} was dropped")
                live.failure = f'stream "{name}" was dropped'
                live.finish(E.PgError(live.failure, sqlstate="57014"))

    def forget(self, qid: int) -> None:
        """A query that already ended leaves the registry of running ones."""
        self._live.pop(qid, None)
        self.arrivals.pop(qid, None)

    def reads_arrivals(self, stream: str) -> bool:
        """Whether a running query reads ``stream``'s tuples in arrival order (QJoin)."""
        name = stream.lower() + P.ARRIVAL
        return any(name in feeds for feeds in self.arrivals.values())

    def reads_by_arrival_time(self, stream: str) -> bool:
        """Whether a running query reads ``stream`` by arrival time (``[… ON ARRIVAL]``)."""
        name = stream.lower() + P.PROCTIME
        return any(name in feeds for feeds in self.arrivals.values())

    def read_by_arrival_time(self) -> set:
        """The streams running queries read by arrival time."""
        return {P.stream_of(f) for feeds in list(self.arrivals.values()) for f in feeds
                if f.endswith(P.PROCTIME)}

    def drop(self, qid: int) -> None:
        """End a query (safe from any thread)."""
        self._live.pop(qid, None)
        self.end_query(qid, "stopped")

    def end_query(self, qid: int, how: str) -> None:
        """End a query in the back end; its queue stays listed (cq_queries shows why it
        failed) until its cursor closes."""
        self.persistent.pop(qid, None)
        self._relaunching.pop(qid, None)        # (dropped while a restart starts it)
        self.arrivals.pop(qid, None)
        if self.checkpoint_root is not None:     # (the back end that saved them may be gone)
            checkpoints.remove(self.checkpoint_dir(qid))
        self._release_tables(qid)
        self._log_stop(qid, how)
        self._write_soon(wire.encode(wire.Drop(qid)))
        if qid in self.merges:               # (on the loop: this may run in another thread)
            self.loop.call_soon_threadsafe(self._unsplit, qid, 0)

    def encode_rows(self, qid: int, how: dict) -> bool:
        """Ask the back end to send the query's rows encoded for a COPY client from now on
        (``how``: the fields of ``wire.EncodeRows``); False where it cannot: a query split
        across back ends, whose rows the gateway merges by valid_from, or one not running."""
        if qid in self.merges or qid not in self._live:
            return False
        self._write_soon(wire.encode(wire.EncodeRows(qid=qid, **how)))
        return True

    def _log_stop(self, qid: int, how: str) -> None:
        label = self.labels.pop(qid, None)
        if label is not None:           # one line per query, however it ends
            log.info("query %s: %s", how, label)

    def drop_stream(self, name: str) -> None:
        self._write_soon(wire.encode(wire.DropStream(name)), everywhere=True)

    def _write_soon(self, data: bytes, everywhere: bool = False) -> None:
        for w in self.workers if everywhere else self.workers[:1]:
            if w.out is not None:
                w.out.write(data)              # safe from any thread, in order

    # ------------------------------------------------------------------ data
    async def send_data(self, stream: str, table: pa.Table, latest: int | None,
                        wait: bool = True) -> None:
        """Stream rows, then how far the stream has got (``latest``: its newest event time,
        for cq_streams and snapshots; not a BOUNDARY). ``wait``: back pressure, wait while
        the back end is behind (a stream that sheds load instead waits only past
        ``SHED_LIMIT`` bytes, so memory stays bounded either way)."""
        # the rows of a stream that split queries read go to every back end, each of which
        # keeps its keys' share; the others get only the columns the split queries read
        split = self.split_reads.get(stream.lower())
        to = self.workers if split is not None else self.workers[:1]
        if table.num_rows:
            self.out.write(wire.data_parts(stream, table))
            if split is not None:
                parts = wire.data_parts(stream, table.select(
                    [c for c in table.column_names if c in split]))
                for w in self.workers[1:]:
                    w.out.write(parts)
        if latest is not None:
            self.out.write(wire.encode(wire.Progress(stream, latest)))
            self._sent(stream, latest)
        self._mark()
        for w in to:
            if wait or w.out.get_write_buffer_size() > SHED_LIMIT:
                await w.out.drain()

    def _sent(self, stream: str, ts: int) -> None:
        name = stream.lower()
        if ts > self.sent_upto.get(name, ts - 1):
            self.sent_upto[name] = ts

    def behind(self) -> bool:
        """Whether a back end has fallen behind: more than BEHIND bytes wait for it."""
        return any(w.out is not None and w.out.get_write_buffer_size() > BEHIND
                   for w in self.workers)

    async def watermark(self, stream: str, ts: int, wait: bool = True) -> None:
        """A BOUNDARY, to every back end (so that all close a split query's windows at the
        same instant); ``wait``: until each has taken what is queued for it."""
        frame = wire.encode(wire.Watermark(stream, ts))
        self._sent(stream, ts)
        for w in self.workers:
            w.out.write(frame)
        self._mark()
        if wait:
            for w in self.workers:
                await w.out.drain()

    async def stats(self) -> dict:
        """{"queries": [...], "streams": [...], "backend": {...}}: one dict of counters per
        running query and per stream the back end has seen, and the back end's own."""
        answers = await asyncio.gather(*(self._ask(wire.Stats, worker=w.index)
                                         for w in self.workers))
        queries = answers[0].queries
        by_qid = {q["qid"]: q for q in queries}
        for answer in answers[1:]:        # a split query's copies: each saw every row in,
            for q in answer.queries:      # each sent and holds its keys' share
                mine = by_qid.get(q["qid"])
                if mine is not None:
                    mine["rows_out"] += q["rows_out"]
                    mine["state"] += q["state"]
        backend = dict(answers[0].backend or {}, workers=len(self.workers))
        return {"queries": queries, "streams": answers[0].streams, "backend": backend}

    async def analyze(self, qids: list) -> dict:
        """{qid: its operators with their counters (EXPLAIN ANALYZE's tree)} of the queries
        ``qids`` that still run."""
        answer = await self._ask(wire.Analyze, qids=list(qids))
        return {int(q): tree for q, tree in answer.operators.items()}
