"""Statements with stream syntax, run by the gateway through the planner: stream DDL (CREATE /
DROP / ALTER STREAM, CREATE / DROP WINDOW, CREATE / DROP WRAPPER), EXPLAIN, and continuous
queries. Dispatch is by the statement's node type (``HANDLERS``).

Continuous queries are planned here (so every planning error reaches the client with its
SQLSTATE) and handed to the back end once it exists; until then they end with 0A000.
"""
from __future__ import annotations

import re
import time

import duckdb
import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ParseError

from dialect import expressions as X
from dialect.errors import PlanError
from dialect.intervals import interval_us
from dialect.planner import explain, is_continuous, plan
from executor import plan as P

from .protocol import errors as E
from .protocol import types as T
from .results import Done, Field, Rows
from .streams import BUILTIN_WRAPPERS, SessionCatalog, StreamObject
from .sql import translate as TR
from .store import pg_error

# WITH (...) options a stream accepts, each with a check of its value
STREAM_OPTIONS = {
    "slack": lambda v: v.lower() in ("none", "adaptive") or interval_us(v) >= 0,
    "heartbeat": lambda v: interval_us(v) > 0,
    "fragment": lambda v: interval_us(v) > 0,
}
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
        except PlanError:
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
    reg.save(StreamObject(reg.next_oid(), "stream", schema, name, tree.sql("cql"), cols, ts, te,
                          bool(tree.args.get("archived")), options))
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
    reg.save(StreamObject(reg.next_oid(), kind, schema, name, tree.sql("cql"), cols,
                          depends_on=reads))
    return Done(tag)


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
    if dependents and not tree.args.get("cascade"):
        names = ", ".join(f"{d.kind} {d.name}" for d in dependents)
        raise E.PgError(f'cannot drop {word.lower()} {name} because other objects depend on '
                        "it", sqlstate="2BP01", detail=f"{names} depend(s) on it.",
                        hint=f"Use DROP {word} ... CASCADE to drop the dependent objects too.")
    for d in dependents:
        session.notices.append(("NOTICE", "00000", f"drop cascades to {d.kind} {d.name}"))
        reg.remove(d)
    reg.remove(obj)
    return Done(tag)


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
    else:
        obj.options.update(_options(tree.args.get("options"), STREAM_OPTIONS, "stream"))
    reg.save(obj)
    return Done("ALTER STREAM")


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
    if X.is_stream_syntax(inner) or is_continuous(inner, SessionCatalog(session.server.streams,
                                                                          session)):
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


def continuous_query(session, tree, params) -> Rows:
    _plan(session, tree)      # every planning error reaches the client with its SQLSTATE
    raise E.FeatureNotSupported(
        "continuous queries cannot run yet: the back end that runs them is not part of this "
        "version", hint="EXPLAIN shows the plan the back end will run.")


HANDLERS = {
    X.CreateStream: create_stream,
    X.CreateWindow: create_window,
    X.CreateWrapper: create_wrapper,
    X.DropStreamObject: drop,
    X.AlterStream: alter,
    X.Explain: explain_statement,
}


def run(session, tree, params):
    return HANDLERS.get(type(tree), continuous_query)(session, tree, params)


def describe(session, tree) -> list | None:
    if isinstance(tree, X.Explain):
        return _QUERY_PLAN
    if type(tree) in HANDLERS:
        return None
    return [Field(c.name, T.duck_to_pg(c.type).oid) for c in _plan(session, tree).output]
