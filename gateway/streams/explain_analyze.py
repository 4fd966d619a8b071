"""EXPLAIN ANALYZE of a continuous query that is running, named by a cursor of the session or by
a named window or derived stream: each operator with its rows out and in, batches, time and state,
as the back end counted them since the query began (PostgreSQL's EXPLAIN ANALYZE, for a query
that runs on); a query on Spark shows its plan with Spark's progress counters."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from dialect import expressions as X
from dialect.names import folded
from executor import plan as P

from gateway.pgwire import errors as E
from gateway.pgwire.results import Rows
from gateway.security import access
from gateway.tables.statement_context import AwaitOnLoop, StatementContext


@dataclass
class Running:
    """A running query found by name: its query id, the queue its rows wait in (a cursor's;
    None for a window), its plan (when the gateway keeps it) and where it runs."""
    qid: int
    what: str                     # "cursor c1" / "window w" / "derived stream d"
    live: object = None
    plan: P.Plan | None = None
    engine: str = "backend"
    timing: bool = True           # EXPLAIN (ANALYZE, TIMING OFF): no times, as PostgreSQL


def _kind(kind: str) -> str:
    """How the lines name a relation's kind (``derived``: a derived stream)."""
    return "derived stream" if kind == "derived" else kind


def _number(ms: float) -> str:
    return f"{ms:.3f}"


def operator_lines(tree: dict, timing: bool = True) -> list[str]:
    """The back end's operator tree as EXPLAIN ANALYZE's indented lines."""
    def label(node: dict) -> str:
        if node.get("repeat"):
            return f"{node['label']}  (the same operator as above)"
        spent = f" time={_number(node['ms'])} ms" if timing else ""
        extra = f" state={node['state']}" if node["state"] else ""
        shared = f" shared={node['shared']}" if node["shared"] > 1 else ""
        return (f"{node['label']}  (actual rows={node['rows_out']} rows_in={node['rows_in']} "
                f"batches={node['batches']}{spent}{extra}{shared})")

    return P.tree_lines(tree, lambda node: node["inputs"], label)


def summary_lines(running: Running, counters: dict, now: float) -> list[str]:
    """The lines under the tree: what the query is, how long it has run, and where its rows
    went (for a cursor: read by the client, or waiting in its queue)."""
    live = running.live
    lines = [f"Query: {running.what}, {running.engine}"]
    started = counters.get("started") or (live.started if live is not None else None)
    if started is not None and running.timing:
        lines.append(f"Running for: {_number((now - started) * 1000)} ms")
    if "rows_in" in counters:
        lines.append(f"Rows in: {counters['rows_in']}")
    out = f"Rows out: {counters.get('rows_out', 0)}"
    if live is not None:
        out += f" (read by the client: {live.delivered}, waiting: {live.n_pending})"
    lines.append(out)
    if "state" in counters:
        lines.append(f"State: {counters['state']} rows")
    return lines


def backend_lines(running: Running, operators: dict, stats: dict) -> list[str]:
    """EXPLAIN ANALYZE's lines for a query in the back end, from its operator tree and the
    back end's counters."""
    counters = next((q for q in stats["queries"] if q["qid"] == running.qid), {})
    head = (P.explain_head(running.plan) if running.plan is not None
            else "continuous query (back end) → "
            + ", ".join(f.name for f in running.live.fields))
    return [head] + operator_lines(operators, running.timing) + \
        summary_lines(running, counters, time.time())


def spark_lines(services, running: Running) -> list[str]:
    """A query on Spark: its temporal-algebra plan, then Spark's own counters (micro-batches,
    the last one's rows and rate, each state operator's rows and memory)."""
    spark = services.spark_streams
    progress = spark.progress(running.qid)
    lines = P.explain(running.plan) if running.plan is not None else []
    if lines:
        lines[0] = "continuous query (Spark Structured Streaming) →" + lines[0].split("→", 1)[1]
    counters = spark.counters(running.qid) or {}
    lines.append("Spark trigger: real-time mode" if counters.get("real_time") else
                 f"Spark micro-batches: {counters.get('batches', 0)}")
    if counters.get("time"):
        lines.append(f"Spark time: {counters['time']}")
    if counters.get("restarts"):        # it lost a Python worker: from its checkpoint
        lines.append(f"Spark restarts: {len(counters['restarts'])} "
                     f"(a Python worker {counters['restarts'][-1]})")
    if progress:
        lines.append(f"Last micro-batch: {progress.get('numInputRows', 0)} input rows, "
                     f"{progress.get('processedRowsPerSecond', 0.0):.1f} rows/s, "
                     f"{progress.get('durationMs', {}).get('triggerExecution', 0)} ms")
        for i, op in enumerate(progress.get("stateOperators") or []):
            lines.append(f"  state operator {i} ({op.get('operatorName', '?')}): "
                         f"{op.get('numRowsTotal', 0)} rows, "
                         f"{op.get('memoryUsedBytes', 0)} bytes")
    return lines + summary_lines(running, counters, time.time())


async def _backend_plans(services, found: list, stats: dict | None = None) -> list:
    """(key, lines) of each query of ``found`` ((key, Running) pairs) still running in the
    back end: one request for all their trees, then one for the counters (``stats``: just
    read ones)."""
    link = services.backend
    trees = await link.analyze([running.qid for _, running in found])
    stats = stats or await link.stats()
    return [(key, backend_lines(running, trees[running.qid], stats))
            for key, running in found if running.qid in trees]


async def every_plan(services, stats: dict | None = None) -> dict:
    """EXPLAIN ANALYZE's lines of every running query, by (pid, name) as cq_queries lists
    them (pid None for a window or derived stream): what the console shows (``stats``: the
    back end's counters, just read)."""
    link, spark = services.backend, services.spark_streams
    kinds = {o.relation().name.lower(): o.kind for o in services.streams.objects.values()}
    found = [((live.owner, live.name), Running(live.qid, f"cursor {live.name}", live))
             for live in link.running() if not live.ended and live.failure is None]
    found += [((None, feeds), Running(qid, f"{_kind(kinds.get(feeds.lower(), 'window'))} "
                                           f"{feeds}", None, plan))
              for qid, (plan, feeds) in list(link.persistent.items())]
    out = dict(await _backend_plans(services, found, stats))
    on_spark = [((live.owner, live.name), Running(live.qid, f"cursor {live.name}", live,
                                                  spark.plan_of(live.qid), "spark"))
                for live in spark.running()]
    on_spark += [((None, name), Running(qid, f"derived stream {name}", None,
                                        spark.plan_of(qid), "spark"))
                 for qid, name in spark.kept_queries()]
    for key, running in on_spark:
        # Spark's progress is a call into its JVM: off the server's loop
        out[key] = await asyncio.to_thread(spark_lines, services, running)
    return out


def find(ctx: StatementContext, ref: X.RunningQueryName) -> Running:
    """The running query ``ref`` names: a cursor of this session first, then a named window
    or derived stream the role may read. 34000 if none runs under that name."""
    svc = ctx.services
    name, schema = ref.this, ref.args.get("db")
    text = folded(name)
    for live, engine in [(live, "backend") for live in svc.backend.running()] + \
            [(live, "spark") for live in svc.spark_streams.running()]:
        if schema is None and live.owner == ctx.pid and live.name == text \
                and not live.ended:
            plan = svc.spark_streams.plan_of(live.qid) if engine == "spark" else None
            return Running(live.qid, f"cursor {text}", live, plan, engine)
    obj = svc.streams.get(folded(schema) or None, text, ("window", "derived"))
    if obj is not None:
        access.check_reads(ctx, exp.select("*").from_(exp.Table(
            this=name.copy(), db=schema.copy() if schema is not None else None)))
        # a window's or derived stream's query runs as query -oid (streams/ddl.py)
        in_backend = svc.backend.persistent.get(-obj.oid)
        if in_backend is not None:
            return Running(-obj.oid, f"{_kind(obj.kind)} {obj.name}", None, in_backend[0])
        kept = svc.spark_streams.kept.get(obj.oid)
        if kept is not None:
            return Running(kept.qid, f"derived stream {obj.name}", None, kept.plan, "spark")
    shown = f"{folded(schema)}.{text}" if schema is not None else text
    raise E.PgError(f'no continuous query named "{shown}" is running', sqlstate="34000",
                    hint="EXPLAIN ANALYZE names a cursor of this session that runs a "
                         "continuous query, or a named window or derived stream.",
                    position=_position(schema if schema is not None else name))


def _position(ident: exp.Identifier) -> int | None:
    return ident.meta["start"] + 1 if "start" in ident.meta else None


def explain_running(ctx: StatementContext, ref: X.RunningQueryName, fields: list,
                    timing: bool = True) -> Rows | AwaitOnLoop:
    """EXPLAIN ANALYZE name: one row per line, in the QUERY PLAN column; ``timing`` False
    (``TIMING OFF``) leaves the times out."""
    running = find(ctx, ref)
    running.timing = timing
    if running.engine == "spark":
        lines = spark_lines(ctx.services, running)
        return _plan_rows(fields, lines)

    def answer(found) -> Rows:
        if not found:
            raise E.PgError(f"{running.what} is no longer running", sqlstate="55000")
        return _plan_rows(fields, found[0][1])
    return AwaitOnLoop(lambda: _backend_plans(ctx.services, [(None, running)]), answer)


def _plan_rows(fields: list, lines: list) -> Rows:
    return Rows(fields, pa.table({"QUERY PLAN": pa.array(lines, pa.string())}), "EXPLAIN")
