"""Statements with stream syntax, run by the gateway through the planner: stream DDL (CREATE /
DROP / ALTER STREAM, CREATE / DROP WINDOW, CREATE / DROP WRAPPER), EXPLAIN, and continuous
queries. Dispatch is by the statement's node type (``HANDLERS``).

Continuous queries are planned here (so every planning error reaches the client with its
SQLSTATE) and come back as ``Planned``; the session hands them to the back end. INSERT into a
stream evaluates its rows on DuckDB and delivers them through ``gateway/ingest.py``.
"""
from __future__ import annotations

import datetime as dt
import decimal
import re
import time
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dialect import expressions as X
from dialect.errors import PlanError
from dialect.intervals import interval_us
from dialect.planner import explain, is_continuous, plan
from executor import plan as P
from executor.operators.loop_window import LoopWindow as LoopWindowOp

from . import archive_query, recompute
from .protocol import errors as E
from .protocol import types as T
from .results import Done, Field, Rows
from .ingest import History, micros
from .streams import BUILTIN_WRAPPERS, SessionCatalog, StreamObject
from .sql import translate as TR
from .store import pg_error

# WITH (...) options a stream accepts, each with a check of its value
STREAM_OPTIONS = {
    "slack": lambda v: v.lower() in ("none", "adaptive") or interval_us(v) >= 0,
    "heartbeat": lambda v: interval_us(v) > 0,
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


def _pg(e: PlanError) -> E.PgError:
    return E.PgError(e.message, sqlstate=e.sqlstate, hint=e.hint, detail=e.detail,
                     position=e.position)


def _folded(ident) -> str:
    """An identifier as PostgreSQL keeps it: unquoted ones fold to lower case."""
    if ident is None:
        return ""
    return ident.name if getattr(ident, "quoted", False) else ident.name.lower()


def _names(tree: exp.Expression) -> tuple[str, str]:
    """(schema, name) of the object a DDL statement names."""
    t = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if isinstance(t, exp.Identifier):
        return "public", _folded(t)
    return (_folded(t.args.get("db")) or "public"), _folded(t.this)


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


def _duck_type(session, declared: str) -> str:
    """The DuckDB type a declared column type becomes (and a check that it exists)."""
    try:
        duck = exp.DataType.build(declared, dialect="postgres").sql("duckdb")
        return session.con.execute(f"SELECT typeof(CAST(NULL AS {duck}))").fetchall()[0][0]
    except (duckdb.Error, ValueError, ParseError):
        raise E.UndefinedObject(f'type "{declared}" does not exist') from None


def _columns(session, schema_node: exp.Schema) -> tuple[list, str | None, str | None]:
    cols, ts, te = [], None, None
    for col in schema_node.expressions:
        if not isinstance(col, exp.ColumnDef):
            raise E.FeatureNotSupported("table constraints are not supported on streams")
        kinds = [c.args.get("kind") for c in col.args.get("constraints") or []]
        marker = next((k for k in kinds if isinstance(k, X.TimestampColumnConstraint)), None)
        not_null = any(isinstance(k, exp.NotNullColumnConstraint) for k in kinds)
        typ = _duck_type(session, col.args["kind"].sql("postgres"))
        if marker is not None:
            if typ not in ("TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS",
                           "TIMESTAMP_MS", "TIMESTAMP_S"):
                raise E.DatatypeMismatch(f'column "{col.name}" must be a TIMESTAMP to mark '
                                         "event time")
            if marker.args.get("end"):
                if te is not None:
                    raise E.PgError("a stream has at most one ENDTIMESTAMPCOLUMN",
                                    sqlstate="42P16")
                te = _folded(col.this)
            else:
                if ts is not None:
                    raise E.PgError("a stream has exactly one TIMESTAMPCOLUMN",
                                    sqlstate="42P16")
                ts = _folded(col.this)
        cols.append([_folded(col.this), typ, not_null])
    if ts is None:
        raise E.PgError("a stream needs exactly one TIMESTAMPCOLUMN", sqlstate="42P16",
                        hint="Mark the event-time column, e.g. t TIMESTAMP TIMESTAMPCOLUMN.")
    names = [c[0].lower() for c in cols]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise E.PgError(f'column "{dup}" specified more than once', sqlstate="42701")
    return cols, ts, te


def _exists_check(session, schema: str, name: str, if_not_exists: bool, what: str):
    reg = session.server.streams
    if reg.get(schema, name) is not None or session._columns(
            schema if schema != "public" else None, name):
        if if_not_exists:
            session.notices.append(("NOTICE", "42P07",
                                    f'relation "{name}" already exists, skipping'))
            return True
        raise E.DuplicateTable(f'relation "{name}" already exists')
    return False


def _schema_exists(session, schema: str) -> None:
    row = session.con.execute("SELECT count(*) FROM duckdb_schemas() WHERE database_name = ? "
                              "AND schema_name = ?", [session.server.store.name, schema]
                              ).fetchall()[0]
    if not row[0]:
        raise E.UndefinedObject(f'schema "{schema}" does not exist',
                                hint=f"CREATE SCHEMA {schema} first.", sqlstate="3F000")


# ---------------------------------------------------------------------- DDL
def create_stream(session, tree: X.CreateStream, params) -> Done:
    if tree.args.get("expression") is not None:
        return _create_from_query(session, tree, "derived", "CREATE STREAM")
    schema, name = _names(tree)
    _schema_exists(session, schema)
    if _exists_check(session, schema, name, bool(tree.args.get("exists")), "stream"):
        return Done("CREATE STREAM")
    cols, ts, te = _columns(session, tree.this)
    options = _options(tree.args.get("options"), STREAM_OPTIONS, "stream")
    if tree.args.get("overload"):
        if tree.args.get("archived"):
            raise E.FeatureNotSupported("an archived stream keeps every tuple: ON OVERLOAD "
                                        "applies to unarchived streams")
        options["overload"] = tree.args["overload"]
    reg = session.server.streams
    obj = StreamObject(reg.next_oid(), "stream", schema, name, tree.sql("cql"), cols, ts, te,
                       bool(tree.args.get("archived")), options)
    _check_stream_options(obj)
    reg.save(obj)
    return Done("CREATE STREAM")


def _create_from_query(session, tree, kind: str, tag: str) -> Done:
    schema, name = _names(tree)
    _schema_exists(session, schema)
    if _exists_check(session, schema, name, bool(tree.args.get("exists")), kind):
        return Done(tag)
    query = tree.args["expression"]
    catalog = SessionCatalog(session.server.streams, session)
    try:
        p = plan(query, catalog)
    except PlanError as e:
        raise _pg(e) from None
    reads = sorted({f"{t.db or 'public'}.{t.name}".lower() for t in query.find_all(exp.Table)})
    cols = [[c.name, _duck_type(session, c.type) if c.type != "UNKNOWN" else "VARCHAR", False]
            for c in p.output]
    reg = session.server.streams
    obj = StreamObject(reg.next_oid(), kind, schema, name, tree.sql("cql"), cols,
                       depends_on=reads)
    _keep(session, obj, p)                 # refuses what cannot run
    reg.save(obj)
    return Done(tag)


def _tables(session, p: P.Plan) -> dict:
    """The current contents of the tables a plan's stream–table joins read."""
    return {name: session.table_contents(name) for name in P.tables_read(p.root)}


def _keep(session, obj: StreamObject, p: P.Plan) -> None:
    """Start a named window's or derived stream's query; windows reaching into an archived
    stream's past start primed from the archive, as a cursor's do."""
    link, history, tables = session.server.backend, _history(session, p), _tables(session, p)

    def start(primed=None, seam=None):
        return link.keep(-obj.oid, p, obj.relation().name, tables, primed, seam,
                         kind="window" if obj.kind == "window" else "derived stream")

    link.call(session.server.ingest.start_primed(list(history), start) if history
              else start())


def keep_relation(session, obj: StreamObject) -> None:
    """Run a stored named window or derived stream again (at server start)."""
    tree = sqlglot.parse_one(obj.definition, read="cql").args["expression"]
    _keep(session, obj, plan(tree, SessionCatalog(session.server.streams, session)))


def create_window(session, tree: X.CreateWindow, params) -> Done:
    return _create_from_query(session, tree, "window", "CREATE WINDOW")


def create_wrapper(session, tree: X.CreateWrapper, params) -> Done:
    name = tree.this.name
    reg = session.server.streams
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
    reg.save(StreamObject(reg.next_oid(), "wrapper", "public", name, tree.sql("cql"),
                          options=options))
    return Done("CREATE WRAPPER")


_KIND_OF = {"STREAM": ("stream", "derived"), "WINDOW": ("window",), "WRAPPER": ("wrapper",)}


def drop(session, tree: X.DropStreamObject, params) -> Done:
    word = tree.args["kind"]
    tag = f"DROP {word}"
    t = tree.this
    schema, name = (t.db or "public"), t.name
    reg = session.server.streams
    obj = reg.get(schema, name, kinds=_KIND_OF[word])
    if obj is None:
        if tree.args.get("exists"):
            session.notices.append(("NOTICE", "00000",
                                    f'{word.lower()} "{name}" does not exist, skipping'))
            return Done(tag)
        raise E.UndefinedTable(f'{word.lower()} "{name}" does not exist')
    dependents = _all_dependents(reg, obj)
    readers = _readers(session, [obj, *dependents]) if obj.kind != "wrapper" else []
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
        session.notices.append(("NOTICE", "00000", f"drop cascades to {d.kind} {d.name}"))
        _stop(session, d)
        reg.remove(d)
    _stop(session, obj)
    reg.remove(obj)
    return Done(tag)


def _readers(session, objs: list) -> list:
    """The running cursors' queries that read any of ``objs``."""
    names = {o.relation().name.lower() for o in objs}
    return [live for live in list(session.server.backend.live.values())
            if live.streams & names and not live.ended]


def _stop(session, obj: StreamObject) -> None:
    """End what the back end runs for ``obj``: its own query, and every query reading it;
    an archived stream's archive goes too."""
    link = session.server.backend
    if obj.kind in ("window", "derived"):
        link.drop(-obj.oid)
    if obj.kind != "wrapper":
        link.drop_stream(obj.relation().name)
        session.server.ingest.forget(obj.relation().name)
    if obj.kind == "stream" and obj.archived:
        session.server.archive.drop(obj.key)


def _all_dependents(reg, obj) -> list:
    out, todo = [], [obj]
    while todo:
        for d in reg.dependents(todo.pop()):
            if d not in out:
                out.append(d)
                todo.append(d)
    return out


def alter(session, tree: X.AlterStream, params) -> Done:
    t = tree.this
    reg = session.server.streams
    obj = reg.get(t.db or "public", t.name, kinds=("stream",))
    if obj is None:
        raise E.UndefinedTable(f'stream "{t.name}" does not exist')
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
        obj.columns.append([_folded(col.this),
                            _duck_type(session, col.args["kind"].sql("postgres")), False])
        _tell_readers(session, obj, f'stream "{obj.name}" has a new column '
                      f'"{_folded(col.this)}"; this query keeps the columns it started with')
    elif action == "ADVANCE":
        ts = _event_time(session, obj, tree.args["to"], params)
        srv = session.server
        srv.backend.call(srv.ingest.advance(obj.relation().name, ts))
        return Done("ALTER STREAM")
    else:
        changed = _options(tree.args.get("options"), STREAM_OPTIONS, "stream")
        _check_stream_options(StreamObject(obj.oid, obj.kind, obj.schema, obj.name, "",
                                           obj.columns, options={**obj.options, **changed}))
        obj.options.update(changed)
    reg.save(obj)
    return Done("ALTER STREAM")


def _tell_readers(session, obj: StreamObject, message: str) -> None:
    """A NOTICE at the next FETCH of every running query that reads ``obj``."""
    name = obj.relation().name.lower()
    for live in list(session.server.backend.live.values()):
        if name in live.streams:
            live.notices.append(("NOTICE", "00000", message))


def _event_time(session, obj: StreamObject, value: exp.Expression, params) -> int:
    """A timestamp expression as µs of the stream's event time."""
    ts_type = next(c[1] for c in obj.columns if c[0] == obj.timestamp_column)
    sql = TR.translate("SELECT CAST(" + value.sql("cql") + f" AS {ts_type})").duck_sql
    try:
        col = session.con.sql(session.bind_session_values(sql), params=params or None) \
            .to_arrow_table().column(0)
    except duckdb.Error as e:
        raise pg_error(e) from None
    if col.null_count:
        raise E.InvalidParameterValue("ADVANCE TO needs a timestamp, not NULL")
    return int(micros(col.combine_chunks())[0])


# ---------------------------------------------------------------------- stream data
def _target(session, tree) -> tuple[StreamObject, list]:
    """The stream an INSERT writes to, and the columns it names (all when none)."""
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    reg = session.server.streams
    obj = reg.get(target.db or "public", target.name,
                  kinds=("stream", "window", "derived"))
    if obj is None:
        raise E.UndefinedTable(f'relation "{target.name}" does not exist')
    if obj.kind != "stream":
        raise E.PgError(f'cannot insert into {obj.kind} "{obj.name}"', sqlstate="42809",
                        hint="Insert into the stream it reads.")
    names = [c.name for c in tree.this.expressions] if isinstance(tree.this, exp.Schema) \
        else [c[0] for c in obj.columns]
    known = {c[0].lower(): c[0] for c in obj.columns}
    for n in names:
        if n.lower() not in known:
            raise E.UndefinedColumn(f'column "{n}" of relation "{obj.name}" does not exist')
    return obj, [known[n.lower()] for n in names]


def stream_rows_sql(obj: StreamObject, names: list, source: str) -> str:
    """DuckDB SQL giving the stream's columns, typed, from ``source`` whose columns are
    ``names`` in order; columns not named are NULL."""
    given = {n.lower(): i for i, n in enumerate(names)}
    alias = ", ".join(f"c{i}" for i in range(len(names)))
    cols = ", ".join(
        (f"CAST(v.c{given[c[0].lower()]} AS {c[1]})" if c[0].lower() in given
         else f"CAST(NULL AS {c[1]})") + ' AS "' + c[0].replace('"', '""') + '"'
        for c in obj.columns)
    return f"SELECT {cols} FROM ({source}) AS v({alias})"


def deliver(session, obj: StreamObject, table: pa.Table, origin: str = "INSERT") -> int:
    """Hand typed stream rows to the back end; late ones are counted and reported."""
    srv = session.server
    try:
        n, late = srv.backend.call(srv.ingest.push(obj.relation().name, obj.timestamp_column,
                                                   table, obj.options,
                                                   f"{origin} (pid {session.pid})",
                                                   one_by_one=origin == "COPY",
                                                   archive=obj.key if obj.archived else None))
    except ValueError as e:
        raise E.NotNullViolation(f'{e} (column "{obj.timestamp_column}" of stream '
                                 f'"{obj.name}")') from None
    if late:
        session.notices.append((
            "WARNING", "01000", f"{late} tuple(s) earlier than the watermark of stream "
            f'"{obj.name}" were not delivered to running queries'))
    return n + late


def insert(session, tree: exp.Insert, params) -> Done:
    if tree.args.get("returning"):
        raise E.FeatureNotSupported("INSERT into a stream has no RETURNING")
    obj, names = _target(session, tree)
    source = TR.translate(tree.expression.sql("cql")).duck_sql
    sql = session.bind_session_values(stream_rows_sql(obj, names, source))
    try:
        table = session.con.sql(sql, params=params or None).to_arrow_table()
    except duckdb.Error as e:
        raise pg_error(e) from None
    return Done(f"INSERT 0 {deliver(session, obj, table)}")


def refuse_change(session, tree, params) -> Done:
    raise E.PgError("a stream's tuples cannot be updated or deleted", sqlstate="42809",
                    hint="Streams are append-only: INSERT new tuples instead.")


# ---------------------------------------------------------------------- queries
def _plan(session, tree) -> P.Plan:
    catalog = SessionCatalog(session.server.streams, session)
    snapshot = session.settings.get("cq.mode", "continuous").lower() == "snapshot"
    try:
        return plan(tree, catalog, now_us=time.time_ns() // 1000, snapshot=snapshot)
    except PlanError as e:
        raise _pg(e) from None


_QUERY_PLAN = [Field("QUERY PLAN", 25)]


def explain_statement(session, tree: X.Explain, params) -> Rows:
    inner = tree.this
    if isinstance(inner, X.Recompute):
        lines = explain(_plan(session, inner.this))
        lines[0] = "recompute (back end, over the archive) →" + lines[0].split("→", 1)[1]
    elif X.is_stream_syntax(inner) or is_continuous(inner, SessionCatalog(
            session.server.streams, session)):
        lines = explain(_plan(session, inner))
    else:
        tr = TR.translate(inner.sql("cql"))
        try:
            rows = session.con.execute("EXPLAIN " + session.bind_session_values(tr.duck_sql),
                                       params or None).fetchall()
        except duckdb.Error as e:
            raise pg_error(e) from None
        lines = ["table query (DuckDB)"] + [ln for r in rows for ln in r[1].splitlines()]
    return Rows(_QUERY_PLAN, pa.table({"QUERY PLAN": pa.array(lines, pa.string())}), "EXPLAIN")


@dataclass(frozen=True)
class Planned:
    """A continuous query, planned, for the session to start in the back end."""
    plan: P.Plan
    fields: list
    schema: pa.Schema             # the Arrow types the rows are sent with
    tables: dict                  # name -> contents of the tables its stream–table joins read
    history: tuple = ()           # ingest.History of archived streams its windows reach into


def _without_order(tree):
    """The query without ORDER BY / LIMIT / OFFSET, and those clauses."""
    tree = tree.copy()
    tail = {k: tree.args.get(k) for k in ("order", "limit", "offset")}
    for k in tail:
        tree.set(k, None)
    return tree, tail


def continuous_query(session, tree, params) -> Planned | Rows:
    """A query over streams: continuous (planned, for the session to start in the back end),
    or finite: evaluated at now (snapshot) or over the archive (on Spark), where ORDER BY and
    LIMIT apply."""
    ordered = tree.args.get("order") is not None
    p = _plan(session, _without_order(tree)[0] if ordered else tree)
    if p.mode == "archive":
        fields, schema = _typed_fields(session, p)
        return archive_query.run(session, tree, fields, schema)
    if p.mode == "snapshot":
        return snapshot_query(session, tree)
    if ordered:        # every planning error reaches the client with its SQLSTATE
        p = _plan(session, tree)
    fields, schema = _typed_fields(session, p)
    return Planned(p, fields, schema, _tables(session, p), _history(session, p))


# how far back each window kind reaches from the instant a query starts: (reach, since).
# [UNBOUNDED] (also a stream read without a window) starts with the query, as a TelegraphCQ
# query does; a window written to reach back is primed from the archive.
_REACH = {
    P.RangeWindow: lambda w: (w.size_us, None),
    P.SlideWindow: lambda w: (w.size_us + w.slide_us, None),
    P.FixedWindow: lambda w: (None, w.low_us),
}


def _loop_edge(window: P.LoopWindow):
    """seam -> the earliest instant a loop's windows reach when it starts at the seam."""
    return lambda seam: LoopWindowOp(window).earliest(seam)


def _history(session, p: P.Plan) -> tuple:
    """The archived streams whose past the plan's windows reach into."""
    out, reg = [], session.server.streams

    def visit(node):
        if isinstance(node, P.Window) and isinstance(node.input, P.StreamScan) \
                and (type(node.window) in _REACH or isinstance(node.window, P.LoopWindow)):
            obj = reg.by_relation(node.input.stream, kinds=("stream",))
            if obj is not None and obj.archived:
                reach, since = _REACH[type(node.window)](node.window) \
                    if type(node.window) in _REACH else (None, None)
                edge = _loop_edge(node.window) if isinstance(node.window, P.LoopWindow) \
                    else None
                out.append(History(node.input.stream, obj.key, obj.timestamp_column,
                                   obj.options.get("fragment"), reach, since, edge))
        for c in P.children(node):
            visit(c)

    visit(p.root)
    return tuple(out)


def _relations(session, p: P.Plan) -> list:
    """(name, plan) of the named windows and derived streams ``p`` reads, dependencies first."""
    out, reg = [], session.server.streams
    catalog = SessionCatalog(reg, session)

    def visit(node):
        if isinstance(node, P.WindowRelationScan) and all(n != node.name for n, _ in out):
            obj = reg.by_relation(node.name, kinds=("window", "derived"))
            inner = plan(sqlglot.parse_one(obj.definition, read="cql").args["expression"],
                         catalog)
            visit(inner.root)
            out.append((node.name, inner))
        for c in P.children(node):
            visit(c)

    visit(p.root)
    return out


def snapshot_query(session, tree) -> Rows:
    """A query evaluated at now (cq.mode = snapshot, or one that reads only named windows):
    the plan without ORDER BY / LIMIT / OFFSET runs in the back end over recent tuples (an
    archived stream's, as far back as the windows reach, from its archive), and those
    clauses are applied to its answer by DuckDB."""
    tree, tail = _without_order(tree)
    p = _plan(session, tree)
    link = session.server.backend
    fields, schema = _typed_fields(session, p)
    relations = _relations(session, p)
    history = [h for q in [p, *(r for _, r in relations)] for h in _history(session, q)]

    # the tables its stream–table joins read, as this session sees them; a table running
    # queries read already has its committed contents there, kept current at each commit
    names = {n for q in [p, *(r for _, r in relations)] for n in P.tables_read(q.root)}
    tables = {n: session.table_contents(n) for n in names - set(link.tables_in_use)}

    async def evaluate(primed=None, seam=None):
        for name, table in tables.items():
            await link.send_table(name, table)
        return await link.snapshot(p, relations, primed, seam)

    table = link.call(session.server.ingest.start_primed(history, evaluate) if history
                      else evaluate())
    table = schema.empty_table() if table is None else table.cast(schema)
    return Rows(fields, order_and_limit(session, table, tail), "SELECT")


def order_and_limit(session, table: pa.Table, tail: dict) -> pa.Table:
    """A finite answer with its query's ORDER BY / LIMIT / OFFSET applied, by DuckDB."""
    if not any(tail.values()):
        return table
    clauses = " ".join(v.sql("duckdb") for v in tail.values() if v is not None)
    try:
        session.con.register("cq_answer", table)
        return session.con.sql(f"SELECT * FROM cq_answer {clauses}").to_arrow_table()
    except duckdb.Error as e:
        raise pg_error(e) from None
    finally:
        session.con.unregister("cq_answer")


def _typed_fields(session, p: P.Plan) -> tuple[list, pa.Schema]:
    """The result's fields, with the plan's types spelled as DuckDB spells them, and the
    Arrow schema rows are cast to before they are encoded."""
    casts = ", ".join(f"CAST(NULL AS {c.type if c.type != 'UNKNOWN' else 'VARCHAR'}) AS c{i}"
                      for i, c in enumerate(p.output))
    try:
        rel = session.con.sql(f"SELECT {casts}")
        types, schema = [str(t) for t in rel.types], rel.to_arrow_table().schema
    except duckdb.Error as e:
        raise pg_error(e) from None
    fields = [Field(c.name, T.duck_to_pg(t).oid, T.duck_typmod(t))
              for c, t in zip(p.output, types)]
    names = [c.name for c in p.output]
    return fields, pa.schema([pa.field(n, f.type) for n, f in zip(names, schema)])


def _fields(session, p: P.Plan) -> list:
    return _typed_fields(session, p)[0]


HANDLERS = {
    X.CreateStream: create_stream,
    X.CreateWindow: create_window,
    X.CreateWrapper: create_wrapper,
    X.DropStreamObject: drop,
    X.AlterStream: alter,
    X.Explain: explain_statement,
    X.Recompute: lambda session, tree, params: recompute.run(session, tree),
    exp.Insert: insert,
    exp.Update: refuse_change,
    exp.Delete: refuse_change,
}


def is_query(tree) -> bool:
    """Whether a stream statement returns rows (a query, EXPLAIN or RECOMPUTE)."""
    return type(tree) not in HANDLERS or isinstance(tree, (X.Explain, X.Recompute))


def _literal(value) -> exp.Expression:
    """A bound parameter's value as a typed SQL literal."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, decimal.Decimal)):
        return exp.Literal.number(str(value))
    kind = {dt.datetime: "TIMESTAMPTZ" if getattr(value, "tzinfo", None) else "TIMESTAMP",
            dt.date: "DATE", dt.time: "TIME", dt.timedelta: "INTERVAL"}.get(type(value))
    if kind == "INTERVAL":
        return exp.Interval(this=exp.Literal.string(f"{value.total_seconds()} seconds"))
    text = value.isoformat(sep=" ") if isinstance(value, dt.datetime) else str(value)
    lit = exp.Literal.string(text)
    return exp.Cast(this=lit, to=exp.DataType.build(kind)) if kind else lit


def _bind(tree, params: list):
    """The statement with its $n parameters replaced by their values (the planner works on
    literal SQL; the plan is fixed once bound, as a continuous query's is)."""
    def swap(node):
        idx = TR.param_index(node)
        if idx is not None and idx <= len(params):
            return _literal(params[idx - 1])
        return node
    return tree.transform(swap)


def run(session, tree, params):
    handler = HANDLERS.get(type(tree), continuous_query)
    if params and handler is not insert:        # INSERT binds through DuckDB
        tree = _bind(tree, params)
    return handler(session, tree, params)


def describe(session, tree) -> list | None:
    if isinstance(tree, X.Explain):
        return _QUERY_PLAN
    if isinstance(tree, X.Recompute):
        return recompute.fields(session, _plan(session, tree.this))
    if type(tree) in HANDLERS:
        return None
    return _fields(session, _plan(session, tree))
