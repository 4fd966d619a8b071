"""Stream DDL: CREATE / DROP / ALTER STREAM, CREATE / DROP WINDOW and derived streams, CREATE /
DROP WRAPPER. Objects are kept in the registry; a named window's or derived stream's query is
started in the back end when it is created (and again at server start)."""
from __future__ import annotations

import dataclasses
import json
import re

import duckdb
from sqlglot import exp
from sqlglot.errors import ParseError

from dialect import expressions as X
from dialect.errors import PlanError, written_at
from dialect.intervals import interval_us
from dialect.names import folded
from dialect.planner import plan, query_engine
from dialect.planner.types import normalize
from executor import plan as P

from gateway.archive.priming import start_primed, unborn
from gateway.connectors import ddl as connector_ddl
from gateway.connectors.runtime import SECRET, SINK, SOURCE
from gateway.clearinghouse.slack import micros
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.streams.queries import (archive_reach, plan_error, session_quality, spark_shape,
                                     tables_of)
from gateway.streams.registry import BUILTIN_WRAPPERS, SessionCatalog, StreamObject
from gateway.tables import translate as TR
from gateway.tables.statement_context import AwaitOnLoop, StatementContext, chain
from gateway.tables.store import pg_error

# WITH (...) options a stream accepts, each with a check of its value
STREAM_OPTIONS = {
    "slack": lambda v: v.lower() in ("none", "adaptive") or interval_us(v) >= 0,
    "heartbeat": lambda v: v.lower() == "none" or interval_us(v) > 0,
    "fragment": lambda v: interval_us(v) > 0,
    # how sources' lines read (csvwrapper): one-character delimiter and quote, and the order
    # of the fields in a line (column names; columns not listed are NULL)
    "delimiter": lambda v: len(v) == 1 and v not in "\r\n",
    "quote": lambda v: len(v) == 1 and v not in "\r\n",
    "columns": lambda v: all(c.strip() for c in v.split(",")),
    "sample": lambda v: 0 < float(v) <= 1,        # the share ON OVERLOAD KEEP SAMPLE keeps
}


def _check_stream_options(obj) -> None:
    """Options that name columns must name the stream's own."""
    listed = obj.options.get("columns")
    if listed:
        known = {c[0].lower() for c in obj.columns}
        for c in listed.split(","):
            if c.strip().lower() not in known:
                raise E.UndefinedColumn(f'column "{c.strip()}" of stream "{obj.name}" does not '
                                        'exist (option "columns")')


_FUNCTION_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")


def _names(tree: exp.Expression) -> tuple[str, str]:
    """(schema, name) of the object a DDL statement names."""
    t = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if isinstance(t, exp.Identifier):
        return "public", folded(t)
    return (folded(t.args.get("db")) or "public"), folded(t.this)


def _option_value(v: exp.Expression) -> str:
    return v.name if isinstance(v, (exp.Literal, exp.Identifier, exp.Var)) else v.sql("cql")


def _options(items, known: dict, what: str) -> dict:
    out = {}
    for item in items or []:
        key = item.this.name.lower()
        value = _option_value(item.args["value"])
        check = known.get(key)
        if check is None:
            raise E.InvalidParameterValue(
                f'unrecognized {what} option "{key}"',
                hint="Known options: " + ", ".join(sorted(known)) + ".")
        try:
            ok = check(value)
        except (PlanError, ValueError):
            ok = False
        if not ok:
            raise E.InvalidParameterValue(f'invalid value for {what} option "{key}": "{value}"')
        out[key] = value
    return out


def _duck_type(ctx: StatementContext, declared: str) -> str:
    """The DuckDB type a declared column type becomes (and a check that it exists)."""
    try:
        duck = normalize(declared)        # PostgreSQL's spelling, or DuckDB's own (a plan's)
        return ctx.con.execute(f"SELECT typeof(CAST(NULL AS {duck}))").fetchall()[0][0]
    except (duckdb.Error, ValueError, ParseError):
        raise E.UndefinedObject(f'type "{declared}" does not exist') from None


def _columns(ctx: StatementContext, schema_node: exp.Schema) -> tuple[list, str | None, str | None]:
    cols, ts, te = [], None, None
    for col in schema_node.expressions:
        if not isinstance(col, exp.ColumnDef):
            raise E.FeatureNotSupported("table constraints are not supported on streams")
        kinds = [c.args.get("kind") for c in col.args.get("constraints") or []]
        marker = next((k for k in kinds if isinstance(k, X.TimestampColumnConstraint)), None)
        not_null = any(isinstance(k, exp.NotNullColumnConstraint) for k in kinds)
        typ = _duck_type(ctx, col.args["kind"].sql("postgres"))
        if marker is not None:
            if typ not in ("TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS",
                           "TIMESTAMP_MS", "TIMESTAMP_S"):
                raise E.DatatypeMismatch(f'column "{col.name}" must be a TIMESTAMP to mark '
                                         "event time")
            if marker.args.get("end"):
                if te is not None:
                    raise E.PgError("a stream has at most one ENDTIMESTAMPCOLUMN",
                                    sqlstate="42P16")
                te = folded(col.this)
            else:
                if ts is not None:
                    raise E.PgError("a stream has exactly one TIMESTAMPCOLUMN",
                                    sqlstate="42P16")
                ts = folded(col.this)
        cols.append([folded(col.this), typ, not_null])
    if ts is None:
        raise E.PgError("a stream needs exactly one TIMESTAMPCOLUMN", sqlstate="42P16",
                        hint="Mark the event-time column, e.g. t TIMESTAMP TIMESTAMPCOLUMN.")
    names = [c[0].lower() for c in cols]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise E.PgError(f'column "{dup}" specified more than once', sqlstate="42701")
    return cols, ts, te


def _exists_check(ctx: StatementContext, schema: str, name: str, if_not_exists: bool, what: str):
    reg = ctx.services.streams
    if reg.get(schema, name) is not None or ctx.columns.of(
            schema if schema != "public" else None, name):
        if if_not_exists:
            ctx.notices.append(("NOTICE", "42P07",
                                f'relation "{name}" already exists, skipping'))
            return True
        raise E.DuplicateTable(f'relation "{name}" already exists')
    return False


def _schema_exists(ctx: StatementContext, schema: str) -> None:
    row = ctx.con.execute("SELECT count(*) FROM duckdb_schemas() WHERE database_name = ? "
                          "AND schema_name = ?", [ctx.services.store.name, schema]
                          ).fetchall()[0]
    if not row[0]:
        raise E.UndefinedObject(f'schema "{schema}" does not exist',
                                hint=f"CREATE SCHEMA {schema} first.", sqlstate="3F000")


# ---------------------------------------------------------------------- DDL
def create_stream(ctx: StatementContext, tree: X.CreateStream,
                  params) -> Done | AwaitOnLoop:
    if tree.args.get("expression") is not None:
        return _create_from_query(ctx, tree, "derived", "CREATE STREAM")
    schema, name = _names(tree)
    _schema_exists(ctx, schema)
    access.require_create(ctx, schema)
    if _exists_check(ctx, schema, name, bool(tree.args.get("exists")), "stream"):
        return Done("CREATE STREAM")
    if tree.args.get("source") is not None:
        return connector_ddl.create_stream_from_source(
            ctx, tree, schema, name, _options(tree.args.get("options"), STREAM_OPTIONS, "stream"))
    cols, ts, te = _columns(ctx, tree.this)
    options = _options(tree.args.get("options"), STREAM_OPTIONS, "stream")
    if tree.args.get("overload"):
        if tree.args.get("archived"):
            raise E.FeatureNotSupported("an archived stream keeps every tuple: ON OVERLOAD "
                                        "applies to unarchived streams")
        options["overload"] = tree.args["overload"]
    reg = ctx.services.streams
    obj = StreamObject(reg.next_oid(), "stream", schema, name, tree.sql("cql"), cols, ts, te,
                       bool(tree.args.get("archived")), options,
                       partitioned_by=_partition_columns(tree, cols)).made_from(tree.copy())
    _check_stream_options(obj)
    reg.save(obj)
    ctx.services.grants.created(obj.key, ctx.user)
    return Done("CREATE STREAM")


def _partition_columns(tree: X.CreateStream, cols: list) -> list:
    """PARTITIONED BY's columns (each one of the stream's; 42703 where one is not)."""
    names = {c[0].lower(): c[0] for c in cols}
    out = []
    for ident in tree.args.get("partitioned_by") or []:
        name = folded(ident)
        if name.lower() not in names:
            raise E.PgError(f'column "{name}" named in PARTITIONED BY does not exist',
                            sqlstate="42703", position=written_at(ident))
        out.append(names[name.lower()])
    return out


def _create_from_query(ctx: StatementContext, tree, kind: str,
                       tag: str) -> AwaitOnLoop | Done:
    schema, name = _names(tree)
    _schema_exists(ctx, schema)
    access.require_create(ctx, schema)
    if _exists_check(ctx, schema, name, bool(tree.args.get("exists")), kind):
        return Done(tag)
    query = tree.args["expression"]
    access.check_reads(ctx, query)
    catalog = SessionCatalog(ctx.services.streams, ctx.columns)
    try:
        p = plan(query, catalog, joins_in_order=True)
        _session_target_left(ctx, query, catalog, p)
    except PlanError as e:
        raise plan_error(e) from None
    reads = sorted({f"{t.db or 'public'}.{t.name}".lower() for t in query.find_all(exp.Table)})
    seen: set = set()
    for c in p.output:          # its columns are read by name, as a view's are
        if c.name.lower() in seen:
            raise E.PgError(f'column "{c.name}" specified more than once', sqlstate="42701",
                            hint="Name the columns apart in the select list (AS).")
        seen.add(c.name.lower())
    cols = [[c.name, _duck_type(ctx, c.type) if c.type != "UNKNOWN" else "VARCHAR", False]
            for c in p.output]
    reg = ctx.services.streams
    obj = StreamObject(reg.next_oid(), kind, schema, name, tree.sql("cql"), cols,
                       depends_on=reads).made_from(tree.copy())

    def kept(_) -> Done:
        reg.save(obj)
        ctx.services.grants.created(obj.key, ctx.user)
        return Done(tag)
    if kind == "view":              # nothing runs: its query is read where it is named
        return kept(None)
    return chain(_keep(ctx, obj, p, query), kept)     # _keep refuses what cannot run


def _session_target_left(ctx: StatementContext, query, catalog, p: P.Plan) -> None:
    """A stored definition says all it runs, so the session's cq.join_recall does not reach
    it (after a restart it would be gone); a NOTICE says so where it would have applied."""
    quality = session_quality(ctx)
    if quality is None or _has_quality_join(p.root):
        return
    if _has_quality_join(plan(query, catalog, join_quality=quality).root):
        ctx.notices.append((
            "NOTICE", "00000", "cq.join_recall does not apply to a named window or derived "
            "stream: write WITH (recall = …) in its query to give its join a recall target"))


def _has_quality_join(node) -> bool:
    return P.contains(node, lambda n: isinstance(n, P.QualityJoin))


def _keep(ctx: StatementContext, obj: StreamObject, p: P.Plan,
          query: exp.Expression) -> AwaitOnLoop | None:
    """Start a named window's or derived stream's query; windows reaching into an archived
    stream's past start primed from the archive, as a cursor's do, and its reads that start
    with it ([UNBOUNDED], ROWS, a session, a pattern) read from their birth: the stream's
    watermark when it first started, kept with it (``StreamObject.births``). A derived
    stream whose query says WITH (engine = 'spark') runs on Spark (a stored definition says
    all it runs: the session's cq.engine does not reach it)."""
    try:
        engine = query_engine(query)
    except PlanError as e:
        raise plan_error(e) from None
    if engine == "spark":
        ctx.services.spark_streams.keep(obj.oid, obj.relation().name, p,
                                        spark_shape(ctx, p), obj.definition,
                                        window=obj.kind == "window")
        return
    link, services = ctx.services.backend, ctx.services
    # its reads that start with it read from where they began when it first started: so
    # started again it holds the rows it held, and a cursor may read it through its query
    p = dataclasses.replace(p, root=P.born_from(p.root, obj.births))
    history, tables = archive_reach(ctx, p), tables_of(ctx, p)
    starting = unborn(p.root) - set(obj.births)

    def start(primed=None, seam=None):
        # (called while stream data stands still: each stream's watermark is where it begins)
        run = p
        if starting:
            obj.options["born"] = json.dumps({**obj.births, **{
                name: P.EVER if (at := services.ingest.seam(name)) is None else at + 1
                for name in sorted(starting)}})
            if services.streams.get(obj.schema, obj.name) is obj:    # (kept: started again)
                services.streams.save(obj)
            # (so they take none of the history its windows that reach back are primed with)
            run = dataclasses.replace(p, root=P.born_from(p.root, obj.births))
        return link.keep(-obj.oid, run, obj.relation().name, tables, primed, seam,
                         kind="window" if obj.kind == "window" else "derived stream")

    if history:
        return AwaitOnLoop(lambda: start_primed(services, list(history), start))
    return AwaitOnLoop(lambda: services.ingest.while_still(lambda _: start()))


def keep_relation(ctx: StatementContext, obj: StreamObject) -> AwaitOnLoop | None:
    """Run a stored named window or derived stream again (at server start)."""
    tree = obj.query()
    return _keep(ctx, obj, plan(tree, SessionCatalog(ctx.services.streams, ctx.columns),
                                joins_in_order=True), tree)


def create_window(ctx: StatementContext, tree: X.CreateWindow,
                  params) -> AwaitOnLoop | Done:
    return _create_from_query(ctx, tree, "window", "CREATE WINDOW")


def create_view(ctx: StatementContext, tree: exp.Create, params) -> Done:
    """CREATE VIEW v AS a query over streams (Flink's views over tables): kept as its
    definition, and each query that names v reads its query in its place, as PostgreSQL
    expands a view."""
    if tree.args.get("replace"):
        raise E.FeatureNotSupported("CREATE OR REPLACE VIEW over streams is not supported",
                                    hint="DROP VIEW it first.")
    return _create_from_query(ctx, tree, "view", "CREATE VIEW")


def create_wrapper(ctx: StatementContext, tree: X.CreateWrapper, params) -> Done:
    # a wrapper runs Python in the server, like an untrusted language's function
    access.require_superuser(ctx, "create wrappers")
    name = tree.this.name
    reg = ctx.services.streams
    if name.lower() in BUILTIN_WRAPPERS or reg.get("public", name) is not None:
        raise E.DuplicateObject(f'wrapper "{name}" already exists')
    funcs = {"init": _FUNCTION_PATH.match, "next": _FUNCTION_PATH.match,
             "done": _FUNCTION_PATH.match}
    options = _options(tree.args.get("options"), funcs, "wrapper")
    missing = [k for k in ("init", "next", "done") if k not in options]
    if missing:
        raise E.InvalidParameterValue(
            "a wrapper needs init, next and done", hint="Name each Python function by its "
            "module path, e.g. next = 'mymodule.parse_line'; missing: " + ", ".join(missing))
    obj = StreamObject(reg.next_oid(), "wrapper", "public", name, tree.sql("cql"),
                       options=options).made_from(tree.copy())
    reg.save(obj)
    ctx.services.grants.created(obj.key, ctx.user)
    return Done("CREATE WRAPPER")


_KIND_OF = {"STREAM": ("stream", "derived"), "WINDOW": ("window",), "WRAPPER": ("wrapper",),
            "VIEW": ("view",), "SOURCE": ("source",), "SINK": ("sink",), "SECRET": ("secret",)}
# connectors' objects live in schemas of their own (gateway/connectors/ddl.py)
_SCHEMA_OF = {"SOURCE": SOURCE, "SINK": SINK, "SECRET": SECRET}
NOT_RELATIONS = ("wrapper", "source", "sink", "secret")


def drop_view(ctx: StatementContext, tree: exp.Drop, params) -> Done:
    """DROP VIEW v of a view over streams (one at a time, as the stream objects drop)."""
    tables = tree.args.get("expressions") or tree.args.get("tables") or [tree.this]
    if len(tables) != 1:
        raise E.FeatureNotSupported("DROP VIEW of a view over streams names one view")
    return drop(ctx, X.DropStreamObject(this=tables[0], kind="VIEW",
                                        exists=tree.args.get("exists"),
                                        cascade=tree.args.get("cascade")), params)


def drop(ctx: StatementContext, tree: X.DropStreamObject, params) -> Done:
    word = tree.args["kind"]
    tag = f"DROP {word}"
    t = tree.this
    schema, name = _SCHEMA_OF.get(word, t.db or "public"), t.name
    reg = ctx.services.streams
    obj = reg.get(schema, name, kinds=_KIND_OF[word])
    if obj is None:
        if tree.args.get("exists"):
            ctx.notices.append(("NOTICE", "00000",
                                f'{word.lower()} "{name}" does not exist, skipping'))
            return Done(tag)
        missing = E.UndefinedObject if word in _SCHEMA_OF else E.UndefinedTable
        raise missing(f'{word.lower()} "{name}" does not exist')
    access.require_owner(ctx, obj.kind, obj.schema, obj.name)
    dependents = _all_dependents(reg, obj)
    readers = _readers(ctx.services, [o for o in (obj, *dependents)
                                      if o.kind not in NOT_RELATIONS])
    if (dependents or readers) and not tree.args.get("cascade"):
        if dependents:
            names = ", ".join(f"{d.kind} {d.name}" for d in dependents)
            msg, detail = "other objects depend on it", f"{names} depend(s) on it."
        else:
            msg = "running queries read it"
            detail = f"{len(readers)} running query(ies) read it: " + "; ".join(
                (live.name or live.sql)[:80] for live in readers[:3])
        raise E.PgError(f"cannot drop {word.lower()} {name} because {msg}", sqlstate="2BP01",
                        detail=detail, hint=f"Use DROP {word} ... CASCADE to drop the "
                        "dependent objects too and stop the queries that read them.")
    for d in dependents:
        ctx.notices.append(("NOTICE", "00000", f"drop cascades to {d.kind} {d.name}"))
        _stop(ctx.services, d)
        reg.remove(d)
        ctx.services.grants.dropped(d.key)
    _stop(ctx.services, obj)
    reg.remove(obj)
    ctx.services.grants.dropped(obj.key)
    return Done(tag)


def _readers(services, objs: list) -> list:
    """The running cursors' queries (on the back end or Spark) that read any of ``objs``."""
    names = {o.relation().name.lower() for o in objs}
    return services.backend.reading(names) + services.spark_streams.reading(names)


def _stop(services, obj: StreamObject) -> None:
    """End what the back end runs for ``obj``: its own query, and every query reading it;
    an archived stream's archive goes too."""
    link = services.backend
    if obj.kind in ("window", "derived"):
        link.drop(-obj.oid)
        services.spark_streams.drop_kept(obj.oid)
    if obj.kind == "sink" or (obj.kind == "stream" and obj.options.get("source")):
        services.connectors.stopped(obj)          # its task ends, its slot or progress goes
    if obj.kind in NOT_RELATIONS:
        return
    link.drop_stream(obj.relation().name)
    link.dropped_relation(obj.relation().name.lower())
    services.spark_streams.drop_stream(obj.relation().name)
    services.ingest.forget(obj.relation().name)
    if obj.kind == "stream" and obj.archived:
        services.archive.drop(obj.key)


def _all_dependents(reg, obj) -> list:
    out, todo = [], [obj]
    while todo:
        for d in reg.dependents(todo.pop()):
            if d not in out:
                out.append(d)
                todo.append(d)
    return out


def alter(ctx: StatementContext, tree: X.AlterStream, params) -> Done:
    t = tree.this
    reg = ctx.services.streams
    obj = reg.get(t.db or "public", t.name, kinds=("stream",))
    if obj is None:
        raise E.UndefinedTable(f'stream "{t.name}" does not exist')
    access.require_owner(ctx, "stream", obj.schema, obj.name)
    action = tree.args["action"]
    if action == "ADD WRAPPER":
        wrapper = tree.args["wrapper"].name
        if wrapper.lower() not in BUILTIN_WRAPPERS and reg.get("public", wrapper,
                                                                ("wrapper",)) is None:
            raise E.UndefinedObject(f'wrapper "{wrapper}" does not exist',
                                    hint="Built-in wrappers: " + ", ".join(BUILTIN_WRAPPERS)
                                    + "; CREATE WRAPPER defines others.")
        wrappers = obj.options.setdefault("wrappers", [])
        if wrapper.lower() not in wrappers:
            wrappers.append(wrapper.lower())
    elif action == "ADD COLUMN":
        col = tree.args["column"]
        if any(c[0].lower() == col.name.lower() for c in obj.columns):
            raise E.PgError(f'column "{col.name}" of relation "{obj.name}" already exists',
                            sqlstate="42701")
        if any(isinstance(c.args.get("kind"), X.TimestampColumnConstraint)
               for c in col.args.get("constraints") or []):
            raise E.FeatureNotSupported("a stream's event-time columns are fixed at CREATE")
        obj.columns.append([folded(col.this),
                            _duck_type(ctx, col.args["kind"].sql("postgres")), False])
        _tell_readers(ctx.services, obj, f'stream "{obj.name}" has a new column '
                      f'"{folded(col.this)}"; this query keeps the columns it started with')
    elif action == "ADVANCE":
        ts = _event_time(ctx, obj, tree.args["to"], params)
        return AwaitOnLoop(lambda: ctx.services.ingest.advance(obj.relation().name, ts),
                           lambda _: Done("ALTER STREAM"))
    else:
        changed = _options(tree.args.get("options"), STREAM_OPTIONS, "stream")
        _check_stream_options(StreamObject(obj.oid, obj.kind, obj.schema, obj.name, "",
                                           obj.columns, options={**obj.options, **changed}))
        obj.options.update(changed)
    reg.save(obj)
    return Done("ALTER STREAM")


def _tell_readers(services, obj: StreamObject, message: str) -> None:
    """A NOTICE at the next FETCH of every running query (on the back end or Spark) that
    reads ``obj``."""
    name = obj.relation().name.lower()
    for live in services.backend.running() + services.spark_streams.running():
        if name in live.streams:
            live.notices.append(("NOTICE", "00000", message))


def _event_time(ctx: StatementContext, obj: StreamObject, value: exp.Expression, params) -> int:
    """A timestamp expression as µs of the stream's event time."""
    ts_type = next(c[1] for c in obj.columns if c[0] == obj.timestamp_column)
    sql = ctx.bind_session_values(
        TR.translate_tree(exp.select(exp.cast(
            value.copy(), exp.DataType.build(ts_type, dialect="duckdb")))).ast)
    try:
        col = ctx.con.sql(sql, params=params or None) \
            .to_arrow_table().column(0)
    except duckdb.Error as e:
        raise pg_error(e) from None
    if col.null_count:
        raise E.InvalidParameterValue("ADVANCE TO needs a timestamp, not NULL")
    return int(micros(col.combine_chunks())[0])
