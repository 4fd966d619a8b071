"""Queries over streams, planned once by the dialect's planner: continuous ones come back as
``Planned`` for the session to start in the back end; finite ones are answered at once (at now in
snapshot mode, or over the archive on Spark). EXPLAIN prints the temporal-algebra plan."""
from __future__ import annotations

import dataclasses
import time
import weakref
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from dialect import expressions as X
from dialect.errors import PlanError
from dialect.planner import Delivery, delivery, explain, is_continuous, plan, query_engine
from dialect.planner.quality_join import session_options
from executor import plan as P

from gateway.archive import past_queries as archive_query
from gateway.archive import resume
from gateway.archive.priming import History, start_primed, unprimed_scans
from gateway.pgwire import errors as E
from gateway.pgwire import types as T
from gateway.pgwire.results import Field, Rows
from gateway.security import access
from gateway.spark_engine import translate as spark_plans
from gateway.streams import inlining
from gateway.streams.explain_analyze import explain_running
from gateway.streams.registry import SessionCatalog
from gateway.tables import translate as TR
from gateway.tables.statement_context import AwaitOnLoop, StatementContext
from gateway.tables.store import pg_error


def plan_error(e: PlanError) -> E.PgError:
    return E.PgError(e.message, sqlstate=e.sqlstate, hint=e.hint, detail=e.detail,
                     position=e.position)


def tables_of(ctx: StatementContext, p: P.Plan) -> dict:
    """The current contents of the tables a plan's stream–table joins read."""
    return {name: ctx.table_contents(name) for name in P.tables_read(p.root)}


# ---------------------------------------------------------------------- queries
PLANS_KEPT = 32     # plans a session keeps for statements it runs again


class _Kept:
    """A session's plans and their settled result types, for statements it runs again (the
    newest PLANS_KEPT of each)."""

    def __init__(self):
        self.plans: dict = {}
        self.result_types: dict = {}


# a statement context -> what its session keeps here; gone with the session
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _kept(ctx: StatementContext) -> _Kept:
    kept = _KEPT.get(ctx)
    if kept is None:
        kept = _KEPT[ctx] = _Kept()
    return kept


def session_quality(ctx: StatementContext) -> dict | None:
    """The session's recall target for joins of two streams (cq.join_recall), or None."""
    return session_options(ctx.settings.get("cq.join_recall", "off"),
                           ctx.settings.get("cq.join_recall_period", "1 minute"))


def plan_query(ctx: StatementContext, tree, inline: frozenset = frozenset()) -> P.Plan:
    """The statement's plan, made once: a statement described and then executed (or a
    prepared one run again) reuses it while the catalog and the session's settings stay as
    they were. A plan with a fixed window is made anew each time, since whether that window
    lies wholly in the past (archive) depends on the instant it is planned; so is one that
    reads now() (or calls a SQL function that does), which is that instant. ``inline``: the
    derived streams planned in their query's place (``inlining``)."""
    access.check_reads(ctx, tree)       # again each time: a REVOKE holds at once
    key = (tree.sql("cql"), ctx.services.store.catalog_version,
           tuple(sorted(ctx.settings.items())), inline)
    plans = _kept(ctx).plans
    kept = plans.get(key)
    if kept is not None:
        return kept
    catalog = SessionCatalog(ctx.services.streams, ctx.columns, inline)
    snapshot = ctx.settings.get("cq.mode", "continuous").lower() == "snapshot"
    try:
        quality = None if snapshot else session_quality(ctx)
        p = plan(tree, catalog, now_us=time.time_ns() // 1000, snapshot=snapshot,
                 join_quality=quality, unbounded_state=ctx.settings.get(
                     "cq.unbounded_state", "off").lower() == "on")
    except PlanError as e:
        raise plan_error(e) from None
    if not _has_fixed_window(p.root) and not p.reads_now:
        if len(plans) >= PLANS_KEPT:
            plans.pop(next(iter(plans)))
        plans[key] = p
    return p


def _has_fixed_window(node) -> bool:
    return P.contains(node, lambda n: isinstance(n, P.Window)
                      and isinstance(n.window, P.FixedWindow))


QUERY_PLAN = [Field("QUERY PLAN", 25)]
# what makes a statement change something, wherever it sits in it
CHANGES = (exp.Insert, exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Into, exp.Drop,
           exp.Alter, exp.Command)


def explain_statement(ctx: StatementContext, tree: X.Explain,
                      params) -> Rows | AwaitOnLoop:
    inner = tree.this
    options = tree.args.get("options") or ()
    if isinstance(inner, X.RunningQueryName):
        return explain_running(ctx, inner, QUERY_PLAN, "TIMING OFF" not in options)
    if isinstance(inner, X.Recompute):
        if "ANALYZE" in options:
            raise E.FeatureNotSupported("EXPLAIN ANALYZE of RECOMPUTE is not supported",
                                        hint="Run the RECOMPUTE, or EXPLAIN it.")
        lines = explain(plan_query(ctx, inner.this))
        lines[0] = "recompute (back end, over the archive) →" + lines[0].split("→", 1)[1]
    elif X.is_stream_syntax(inner) or is_continuous(inner, SessionCatalog(
            ctx.services.streams, ctx.columns)):
        if "ANALYZE" in options:
            raise E.FeatureNotSupported(
                "EXPLAIN ANALYZE of a query over streams names the running query",
                hint="Declare a cursor for it (DECLARE c CURSOR FOR …), then EXPLAIN ANALYZE "
                     "c; or EXPLAIN ANALYZE a named window or derived stream.")
        p = plan_query(ctx, inner)
        shape = spark_shape_for(ctx, inner, p) if p.mode == "continuous" else None
        if p.mode == "continuous" and shape is None:
            p = _as_it_runs(ctx, inner, p)
        lines = explain(p) + (_spark_window_lines(ctx, p) if p.mode != "continuous" else [])
        split = ctx.services.backend.split_by(p) if shape is None else None
        if split is not None:
            lines.append(f"Split {split} (unless its windows are primed from the archive)")
        if shape is not None:
            lines[0] = "continuous query (Spark Structured Streaming) →" + \
                lines[0].split("→", 1)[1]
            lines += ["Spark plan:"] + ["  " + ln for ln in ctx.services.spark_streams
                                          .explain(p, shape)]
    else:
        access.check_reads(ctx, inner)
        tr = TR.translate_tree(inner.copy())
        # ANALYZE runs the statement, as in PostgreSQL: only a query, never a change (nor a
        # query that changes something: a DML CTE, SELECT … INTO), checked as running it is
        analyze = "ANALYZE " if "ANALYZE" in options else ""
        if analyze and (not isinstance(tr.ast, (exp.Query, exp.Values))
                        or tr.ast.find(*CHANGES)):
            raise E.FeatureNotSupported("EXPLAIN ANALYZE runs only a query that changes "
                                        "nothing here",
                                        hint="EXPLAIN the statement without ANALYZE.")
        if analyze:
            access.check(ctx, access.needs(tr.ast))
        try:
            rows = ctx.con.execute(f"EXPLAIN {analyze}" + ctx.bind_session_values(tr.ast),
                                   params or None).fetchall()
        except duckdb.Error as e:
            raise pg_error(e) from None
        lines = ["table query (DuckDB)"] + [ln for r in rows for ln in r[1].splitlines()]
    return Rows(QUERY_PLAN, pa.table({"QUERY PLAN": pa.array(lines, pa.string())}), "EXPLAIN")


@dataclass(frozen=True)
class Planned:
    """A continuous query, planned, for the session to start in the back end (or on Spark,
    ``spark`` saying the shape the Spark engine found)."""
    plan: P.Plan
    fields: list
    schema: pa.Schema             # the Arrow types the rows are sent with
    tables: dict                  # name -> contents of the tables its stream–table joins read
    history: tuple = ()           # ingest.History of archived streams its windows reach into
    spark: spark_plans.Shape | None = None
    delivery: Delivery = Delivery()
    resumable: resume.Resumable | None = None   # how it goes on after a crash (None: it cannot)
    through: frozenset = frozenset()    # derived streams it reads through their query


def spark_shape_for(ctx: StatementContext, tree, p: P.Plan) -> spark_plans.Shape | None:
    """The Spark engine's shape of a continuous query that runs there, or None (the back
    end): its WITH (engine = …) says where; else the session's cq.engine; else Spark when
    every stream it reads is PARTITIONED BY and Spark can run it (what Spark refuses there
    runs on the back end, as before the streams were partitioned)."""
    try:
        written = query_engine(tree)
    except PlanError as e:
        raise plan_error(e) from None
    if written is None and ctx.settings.get("cq.engine", "backend") == "spark":
        written = "spark"
    if written is not None:
        return spark_shape(ctx, p) if written == "spark" else None
    reg = ctx.services.streams
    objs = [reg.by_relation(n, kinds=("stream",)) for n in P.streams_read(p.root)]
    if not objs or not all(o is not None and o.partitioned_by for o in objs):
        return None
    try:
        return spark_shape(ctx, p)
    except spark_plans.Refused:
        return None


def spark_shape(ctx: StatementContext, p: P.Plan) -> spark_plans.Shape:
    """The Spark engine's check of a continuous plan (0A000 for what it cannot run)."""
    shape = spark_plans.check(p)
    if archive_reach(ctx, p):
        raise spark_plans.Refused("its window reaches into an archived stream's past (on "
                                  "Spark a query starts with the stream's live tuples)")
    return shape


def without_order(tree):
    """The query without ORDER BY / LIMIT / OFFSET, and those clauses; they apply to the
    answer's columns, so an ORDER BY expression that is in the select list becomes that
    output column (``ORDER BY date_trunc('minute', ts)``, as BI tools write it)."""
    distinct = tree.args.get("distinct")
    if isinstance(distinct, sqlglot.exp.Distinct) and distinct.args.get("on") is not None:
        # ORDER BY says which row of each DISTINCT ON key is kept: it stays in the query
        return tree, {"order": None, "limit": None, "offset": None}
    tree = tree.copy()
    tail = {k: tree.args.get(k) for k in ("order", "limit", "offset")}
    for k in tail:
        tree.set(k, None)
    items = getattr(tree, "expressions", [])
    outputs = {e.unalias().sql("cql"): e.alias_or_name for e in items if e.alias_or_name}
    names = {e.alias_or_name for e in items}
    for ordered in tail["order"].expressions if tail["order"] is not None else []:
        item = ordered.this
        if isinstance(item, sqlglot.exp.Column) and not item.table and item.name in names:
            continue                # an output column's name: PostgreSQL reads it so first
        name = outputs.get(item.sql("cql"))
        if name is not None:
            ordered.set("this", sqlglot.exp.column(name, quoted=True))
    return tree, tail


def resumable(ctx: StatementContext, tree, p: P.Plan) -> tuple:
    """(the plan to run, how it goes on from a watermark) for continuous query ``tree``
    planned as ``p`` on the back end: ``p`` itself, or, where it reads derived streams whose
    rows are a function of the archive and cannot go on as it is, ``p`` with their queries
    in their place (``inlining``). The reason it cannot go on (0A000, 55000) otherwise."""
    try:
        return p, resume.resumable(ctx.services.streams, p)
    except E.PgError:
        found = inlining.inlined(ctx, p, lambda keys: plan_query(ctx, tree, keys))
        if found is None:
            raise
        return found


def _as_it_runs(ctx: StatementContext, tree, p: P.Plan) -> P.Plan:
    """The plan a continuous query runs on the back end (its derived streams' queries in their
    place where that lets it go on from a watermark)."""
    try:
        return resumable(ctx, tree, p)[0]
    except E.PgError:
        return p


def continuous_query(ctx: StatementContext, tree, params) -> Planned | Rows | AwaitOnLoop:
    """A query over streams: continuous (planned, for the session to start in the back end),
    or finite: evaluated at now (snapshot) or over the archive (on Spark), where ORDER BY and
    LIMIT apply."""
    ordered = tree.args.get("order") is not None
    p = plan_query(ctx, without_order(tree)[0] if ordered else tree)
    how = _delivery(tree)
    if p.mode != "continuous" and (how.progress or how.resume_from is not None):
        raise E.FeatureNotSupported("progress rows and resume_from apply to continuous "
                                    "queries", position=how.at,
                                    hint="Drop WITH (progress …), or read the query "
                                         "continuously (cq.mode = continuous).")
    if p.mode == "archive":
        fields, schema = typed_fields(ctx, p)
        return archive_query.run(ctx, tree, fields, schema)
    if p.mode == "snapshot":
        return snapshot_query(ctx, tree)
    if ordered:        # every planning error reaches the client with its SQLSTATE
        p = plan_query(ctx, tree)
    fields, schema = typed_fields(ctx, p)
    shape = spark_shape_for(ctx, tree, p)
    if shape is not None:
        if how.progress:
            raise E.FeatureNotSupported("progress rows are not supported on Spark",
                                        position=how.at, hint="Run the query on the back end "
                                        "(WITH (engine = backend)).")
        return Planned(p, fields, schema, {}, spark=shape)
    written = p
    try:
        p, again = resumable(ctx, tree, p)
    except E.PgError as e:
        if how.resume_from is not None:
            raise E.PgError(e.message, sqlstate=e.sqlstate, hint=e.hint,
                            position=how.at) from None
        again = None
    if how.progress:
        fields, schema = with_progress(fields, schema)
    # (a DROP of a derived stream read through its query still finds this query reading it)
    through = frozenset(n.lower() for n in inlining.relations_read(written.root)) \
        if p is not written else frozenset()
    if how.resume_from is not None:
        return Planned(p, fields, schema, {}, tuple(again.histories(
            ctx.services.streams, how.resume_from)), delivery=how, resumable=again,
            through=through)
    return Planned(p, fields, schema, tables_of(ctx, p), archive_reach(ctx, p), delivery=how,
                   resumable=again, through=through)


def archive_reach(ctx: StatementContext, p: P.Plan, every_since: int | None = None) -> tuple:
    """The archived streams whose past the plan's windows reach into. [UNBOUNDED] (also a
    stream read without a window) starts with the query, as a TelegraphCQ query does; a window
    written to reach back (over the stream, or over its tuples filtered or computed on) is
    primed from the archive, from where the window's ``reach`` says:
    a fixed window's edge is known now, the others' once the seam (the query's start) is.
    ``every_since``: the windows that do not reach back read the archive from that instant
    (a sink's creation, which it starts again from). A read that starts with a named
    window's or derived stream's query reads from where that query began (``born_us``).
    (Priming gives every read of a stream its history: the plan's reads that start with it
    are told to take none of it, ``priming.started_at``, when it starts.)"""
    out, reg = [], ctx.services.streams

    def read(stream: str, **where) -> None:
        obj = reg.by_relation(stream, kinds=("stream",))
        if obj is not None and obj.archived:
            out.append(History.of(obj, stream, **where))

    def visit(node):
        scan = P.scan_under(node.input) if isinstance(node, P.Window) else None
        if scan is not None and (node.window.reaches_back or every_since is not None):
            since = node.window.reach(None) if node.window.reaches_back else every_since
            read(scan.stream, since_us=since, edge=node.window.reach if since is None else None)
        if isinstance(node, P.StreamScan) and node.born_us is not None and every_since is None:
            read(node.stream, since_us=node.born_us)      # (from where its query began)
        for c in P.children(node):
            visit(c)

    visit(p.root)
    return tuple(out)


def whole_archive(ctx: StatementContext, p: P.Plan, read: set) -> list:
    """For a snapshot: the archived streams of ``read`` (those whose history it reads for a
    window that reaches back) that the plan also reads another way (a ROWS or session
    window, [UNBOUNDED], a pattern), read whole. Every reader of a stream sees the same
    tuples, and those readers need all of them, not only the other window's reach (alone,
    they read the back end's recent tuples)."""
    out, reg = [], ctx.services.streams
    for scan in unprimed_scans(p.root):
        if scan.stream.lower() not in read:
            continue
        out.append(History.of(reg.by_relation(scan.stream, kinds=("stream",)), scan.stream))
    return out


def _relations(ctx: StatementContext, p: P.Plan) -> list:
    """(name, plan) of the named windows and derived streams ``p`` reads, dependencies first;
    not the named windows Spark runs (``on_spark``), whose rows are Spark's."""
    out, reg = [], ctx.services.streams
    catalog = SessionCatalog(reg, ctx.columns)

    def visit(node, top: bool):
        if isinstance(node, P.WindowRelationScan) and all(n != node.name for n, _ in out):
            obj = reg.by_relation(node.name, kinds=("window", "derived"))
            if spark_window(obj):
                if not top:         # (read by p itself: _spark_window)
                    raise _read_alone(node.name)
                return
            inner = plan(obj.query(), catalog, joins_in_order=True)   # as the relation runs
            inner = dataclasses.replace(inner, root=P.born_from(inner.root, obj.births))
            visit(inner.root, False)
            out.append((node.name, inner))
        for c in P.children(node):
            visit(c, top)

    visit(p.root, True)
    return out


def spark_window(obj) -> bool:
    """Whether ``obj`` is a named window whose query runs on Spark."""
    return obj is not None and obj.kind == "window" and query_engine(obj.query()) == "spark"


def _spark_window(ctx: StatementContext, p: P.Plan) -> tuple:
    """A named window on Spark that snapshot ``p`` reads: ({name: its rows valid at the last
    instant its query on Spark has answered for}, that instant; None: it has answered for
    none yet, or ``p`` reads no such window). The back end evaluates ``p`` over those rows
    at that instant. Such a window is read on its own: its rows come a micro-batch after
    the instants they answer for, so beside another input (answered at its own, later
    watermark), or inside another named window's query read at now, it would answer for
    an instant Spark has not reached (0A000)."""
    for name, obj in _spark_windows(ctx, p):
        if len(P.streams_read(p.root)) > 1:
            raise _read_alone(name)
        rows, answered = ctx.services.spark_streams.window_rows(obj.oid)
        return ({name: rows} if rows is not None and rows.num_rows else {}), answered
    return {}, None


def _spark_windows(ctx: StatementContext, p: P.Plan) -> list:
    """(name, object) of the named windows on Spark that ``p`` reads, by name."""
    reg = ctx.services.streams
    found = [(name, reg.by_relation(name, kinds=("window", "derived")))
             for name in sorted(P.streams_read(p.root))]
    return [(name, obj) for name, obj in found if spark_window(obj)]


def _read_alone(name: str) -> E.PgError:
    return E.FeatureNotSupported(
        f"named window {name} runs on Spark and is read on its own",
        hint="Read it alone (SELECT … FROM it, with filters, projections, aggregates and "
             "ORDER BY), or read its query's streams instead.")


def _spark_window_lines(ctx: StatementContext, p: P.Plan) -> list:
    """EXPLAIN's lines on the named windows on Spark that ``p`` reads."""
    return [f"window {name}: its rows from its query on Spark, at the last instant that "
            "query has answered for" for name, _ in _spark_windows(ctx, p)]


def snapshot_query(ctx: StatementContext, tree) -> AwaitOnLoop:
    """A query evaluated at now (cq.mode = snapshot, or one that reads only named windows):
    the plan without ORDER BY / LIMIT / OFFSET runs in the back end over recent tuples (an
    archived stream's, as far back as the windows reach, from its archive), and those
    clauses are applied to its answer by DuckDB."""
    tree, tail = without_order(tree)
    p = plan_query(ctx, tree)
    link = ctx.services.backend
    fields, schema = typed_fields(ctx, p)
    relations = _relations(ctx, p)
    on_spark, answered = _spark_window(ctx, p)
    plans = [p, *(r for _, r in relations)]
    history = [h for q in plans for h in archive_reach(ctx, q)]
    read = {h.stream.lower() for h in history}
    history += [h for q in plans for h in whole_archive(ctx, q, read)]

    # the tables its stream–table joins read, as this session sees them; a table running
    # queries read already has its committed contents there, kept current at each commit
    names = {n for q in [p, *(r for _, r in relations)] for n in P.tables_read(q.root)}
    tables = {n: ctx.table_contents(n) for n in names - set(link.tables_in_use)}

    async def evaluate(primed=None, seam=None):
        for name, table in tables.items():
            await link.send_table(name, table)
        if on_spark:        # a named window on Spark: its rows, as its history
            primed = {**(primed or {}), **on_spark}
        return await link.snapshot(p, relations, primed, seam, at=answered)

    def answer(table) -> Rows:
        table = schema.empty_table() if table is None else table.cast(schema)
        return Rows(fields, order_and_limit(ctx, table, tail), "SELECT")
    return AwaitOnLoop(lambda: start_primed(ctx.services, history, evaluate) if history
                       else evaluate(), answer)


def order_and_limit(ctx: StatementContext, table: pa.Table, tail: dict) -> pa.Table:
    """A finite answer with its query's ORDER BY / LIMIT / OFFSET applied, by DuckDB."""
    if not any(tail.values()):
        return table
    clauses = " ".join(v.sql("duckdb") for v in tail.values() if v is not None)
    try:
        ctx.con.register("cq_answer", table)
        return ctx.con.sql(f"SELECT * FROM cq_answer {clauses}").to_arrow_table()
    except duckdb.Error as e:
        raise pg_error(e) from None
    finally:
        ctx.con.unregister("cq_answer")


def typed_fields(ctx: StatementContext, p: P.Plan) -> tuple[list, pa.Schema]:
    """The result's fields, with the plan's types spelled as DuckDB spells them, and the
    Arrow schema rows are cast to before they are encoded; settled once per plan."""
    types = _kept(ctx).result_types
    kept = types.get(tuple(p.output))
    if kept is None:
        kept = types[tuple(p.output)] = _settle_types(ctx, p)
        if len(types) > PLANS_KEPT:
            types.pop(next(iter(types)))
    return kept


def _settle_types(ctx: StatementContext, p: P.Plan) -> tuple[list, pa.Schema]:
    casts = ", ".join(f"CAST(NULL AS {c.type if c.type != 'UNKNOWN' else 'VARCHAR'}) AS c{i}"
                      for i, c in enumerate(p.output))
    try:
        rel = ctx.con.sql(f"SELECT {casts}")
        types, schema = [str(t) for t in rel.types], rel.to_arrow_table().schema
    except duckdb.Error as e:
        raise pg_error(e) from None
    fields = [Field(c.name, T.duck_to_pg(t).oid, T.duck_typmod(t))
              for c, t in zip(p.output, types)]
    names = [c.name for c in p.output]
    return fields, pa.schema([pa.field(n, f.type) for n, f in zip(names, schema)])


def result_fields(ctx: StatementContext, p: P.Plan, tree=None) -> list:
    """The result's fields (a continuous query's with cq_progress first when ``tree`` asks
    for progress rows)."""
    fields, schema = typed_fields(ctx, p)
    if tree is not None and p.mode == "continuous" and _delivery(tree).progress:
        fields, schema = with_progress(fields, schema)
    return fields


PROGRESS_FIELD = Field("cq_progress", T.duck_to_pg("TIMESTAMP").oid, -1)


def with_progress(fields: list, schema: pa.Schema) -> tuple[list, pa.Schema]:
    """A continuous query's fields and Arrow schema with cq_progress first."""
    return [PROGRESS_FIELD] + fields, pa.schema(
        [pa.field("cq_progress", pa.timestamp("us"))] + list(schema))


def _delivery(tree) -> Delivery:
    try:
        return delivery(tree)
    except PlanError as e:
        raise plan_error(e) from None
