"""CREATE SINK … INTO POSTGRES | PARQUET (…) AS <query> (or AS TABLE s), and the same sink
started again at server start. The query is a continuous query's, with its rows' intervals
added (``valid_from``, ``valid_to``); it must read archived streams only, so that after a
restart it can be started again primed to go on from the sink's watermark (a window that
reaches back from there; a window that does not, from the sink's creation). Like CREATE
SOURCE, it is for superusers (it writes to other systems, or files)."""
from __future__ import annotations

import dataclasses
import time

from sqlglot import exp

from dialect.errors import PlanError
from dialect.names import folded
from dialect.planner import plan
from executor import plan as P

from gateway.connectors.ddl import connector_options, exists, keep, secret_password
from gateway.connectors.runtime import SINK
from gateway.connectors.sinks import SinkPlan
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.security.redaction import redacted
from gateway.streams.queries import archive_reach, plan_error, tables_of, typed_fields
from gateway.streams.registry import SessionCatalog, StreamObject
from gateway.tables.statement_context import AwaitOnLoop, StatementContext

OPTIONS = {"POSTGRES": ("connection", "password", "table", "mode", "key"),
           "PARQUET": ("path",)}
MODES = ("append", "upsert")


def _histories(ctx: StatementContext, p: P.Plan, created_us: int) -> tuple:
    """Every stream the query reads, from where its window needs it (gateway/archive/
    priming.py); 0A000 for one that is not archived, or a named window or derived stream."""
    reg = ctx.services.streams

    def check(node) -> None:
        if isinstance(node, P.WindowRelationScan):
            raise E.FeatureNotSupported(
                f"a sink reads streams, not the named {node.kind} {node.name}",
                hint="Write the query over the streams it reads.")
        if isinstance(node, P.StreamScan):
            obj = reg.by_relation(node.stream, kinds=("stream",))
            if obj is None or not obj.archived:
                raise E.FeatureNotSupported(
                    f"a sink reads archived streams only: {node.stream} is not",
                    hint="A sink goes on after a restart from the archive: CREATE STREAM … "
                    "TYPE ARCHIVED.")
        for c in P.children(node):
            check(c)
    check(p.root)
    return archive_reach(ctx, p, every_since=created_us)


def sink_plan(ctx: StatementContext, query: exp.Expression, created_us: int) -> SinkPlan:
    if not isinstance(query, exp.Select):
        raise E.FeatureNotSupported("a sink's query is a SELECT",
                                    hint="Wrap it: SELECT * FROM (…) AS q.")
    access.check_reads(ctx, query)
    query = query.copy().select("valid_from", "valid_to", copy=False)
    try:
        p = plan(query, SessionCatalog(ctx.services.streams, ctx.columns),
                 joins_in_order=True)
    except PlanError as e:
        raise plan_error(e) from None
    if p.mode != "continuous":
        raise E.FeatureNotSupported(f"a sink writes a continuous answer; this query is "
                                    f"{p.mode}", hint="Read a stream in the query.")
    fields, schema = typed_fields(ctx, p)
    # its rows wait in memory up to cq.result_memory, then on disk: a sink resumes by
    # replaying its answer from the archive, which no bound smaller than that answer lets
    # through, so its backlog is bounded by the archive, not by cq.result_spill
    bounds = dataclasses.replace(ctx.result_bounds(), spill=None)
    return SinkPlan(p, fields, schema, _histories(ctx, p, created_us), tables_of(ctx, p),
                    bounds, query.sql("cql"))


def _target_options(ctx: StatementContext, kind: str, given: dict, columns: list) -> tuple:
    """(options kept with the sink, objects it depends on) for a POSTGRES or PARQUET sink."""
    if kind == "PARQUET":
        if not isinstance(given.get("path"), str) or not given["path"].strip():
            raise E.PgError("a Parquet sink needs PATH '…'", sqlstate="42601")
        return {"path": given["path"], "mode": "append"}, []
    for required in ("connection", "table"):
        if not isinstance(given.get(required), str):
            raise E.PgError(f"a PostgreSQL sink needs the option {required.upper()} '…'",
                            sqlstate="42601")
    mode = str(given.get("mode", "append")).lower()
    if mode not in MODES:
        raise E.InvalidParameterValue(f'invalid MODE "{mode}"', hint="MODE is 'append' or "
                                      "'upsert'.")
    options = {"connection": given["connection"], "table": given["table"], "mode": mode}
    if mode == "upsert":
        key = [k.strip() for k in str(given.get("key", "")).split(",") if k.strip()]
        if not key:
            raise E.PgError("an upsert sink needs KEY 'column, …'", sqlstate="42601")
        names = [n for n, _ in columns]
        for k in key:
            if k not in names:
                raise E.UndefinedColumn(f'KEY column "{k}" is not in the sink\'s query',
                                        hint="Columns: " + ", ".join(names) + ".")
        options["key"] = ",".join(key)
    elif "key" in given:
        raise E.InvalidParameterValue("KEY applies to MODE 'upsert'")
    depends = []
    password = secret_password(ctx, given.get("password"))
    if password is not None:
        options["password_secret"] = password.name
        depends.append(password.key)
    return options, depends


def create_sink(ctx: StatementContext, tree, params):
    access.require_superuser(ctx, "create a sink")
    name = folded(tree.this)
    if exists(ctx, SINK, name, "sink", tree.args.get("exists")):
        return Done("CREATE SINK")
    kind = tree.args["kind"]
    given = connector_options(tree, OPTIONS[kind], "sink")
    created_us = time.time_ns() // 1000
    planned = sink_plan(ctx, tree.expression, created_us)
    columns = [(f.name, str(f.type)) for f in planned.schema][:-2]
    options, depends = _target_options(ctx, kind, given, columns)
    reads = sorted({f"{t.db or 'public'}.{t.name}".lower()
                    for t in tree.expression.find_all(exp.Table)})
    obj = StreamObject(ctx.services.streams.next_oid(), "sink", SINK, name,
                       redacted(tree.sql("cql")),
                       options={**options, "kind": kind.lower(), "created_us": str(created_us)},
                       depends_on=reads + depends)
    return AwaitOnLoop(lambda: ctx.services.connectors.start_sink(obj, planned, fresh=True),
                       lambda _: keep(ctx, obj, "CREATE SINK"))


def keep_sink(ctx: StatementContext, obj: StreamObject) -> AwaitOnLoop:
    """A kept sink, started again at server start: its query planned anew, its target
    reached by its task (which retries while the target is down)."""
    planned = sink_plan(ctx, obj.tree.expression, int(obj.options["created_us"]))
    return AwaitOnLoop(lambda: ctx.services.connectors.start_sink(obj, planned, fresh=False))
