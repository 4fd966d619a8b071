"""Statements with stream syntax, dispatched by the statement's node type (``HANDLERS``): stream
DDL, INSERT into a stream, EXPLAIN, RECOMPUTE and queries over streams. Parameters are bound as
literals before planning (a continuous query's plan is fixed once bound)."""
from __future__ import annotations

import datetime as dt
import decimal

from sqlglot import exp

from dialect import expressions as X

from gateway.connectors import ddl as connector_ddl
from gateway.connectors import sink_ddl
from gateway.pgwire import errors as E
from gateway.streams import function_ddl, recompute
from gateway.streams.ddl import (alter, create_stream, create_view, create_window, create_wrapper,
                                 drop, drop_view)
from gateway.streams.inserts import insert, refuse_change
from gateway.streams.queries import (QUERY_PLAN, continuous_query, explain_statement, plan_query,
                                     result_fields)
from gateway.tables import translate as TR
from gateway.tables.statement_context import StatementContext

HANDLERS = {
    X.CreateStream: create_stream,
    X.CreateWindow: create_window,
    X.CreateWrapper: create_wrapper,
    X.CreateSecret: connector_ddl.create_secret,
    X.CreateSource: connector_ddl.create_source,
    X.CreateSink: sink_ddl.create_sink,
    X.DropStreamObject: drop,
    X.AlterStream: alter,
    X.Explain: explain_statement,
    X.Recompute: lambda ctx, tree, params: recompute.run(ctx, tree),
    exp.Insert: insert,
    exp.Update: refuse_change,
    exp.Delete: refuse_change,
    # a Python function's CREATE FUNCTION and DROP FUNCTION, a view's over streams
    exp.Create: lambda ctx, tree, params: _by_kind(_CREATES, tree)(ctx, tree, params),
    exp.Drop: lambda ctx, tree, params: _by_kind(_DROPS, tree)(ctx, tree, params),
}
_CREATES = {"FUNCTION": function_ddl.create, "VIEW": create_view}
_DROPS = {"FUNCTION": function_ddl.drop, "VIEW": drop_view}


def _by_kind(handlers: dict, tree):
    """The handler of CREATE or DROP ``kind`` over streams: other kinds are 0A000 (CREATE
    TABLE AS over a stream would be a table of one instant)."""
    kind = (tree.args.get("kind") or "").upper()
    handler = handlers.get(kind)
    if handler is None:
        verb = "CREATE" if isinstance(tree, exp.Create) else "DROP"
        raise E.FeatureNotSupported(f"{verb} {kind} cannot name a stream",
                                    hint="Streams have CREATE STREAM … AS, CREATE WINDOW "
                                    "and CREATE VIEW.")
    return handler


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


def run(ctx: StatementContext, tree, params):
    handler = HANDLERS.get(type(tree), continuous_query)
    if params and handler is not insert:        # INSERT binds through DuckDB
        tree = _bind(tree, params)
    return handler(ctx, tree, params)


def describe(ctx: StatementContext, tree) -> list | None:
    if isinstance(tree, X.Explain):
        return QUERY_PLAN
    if isinstance(tree, X.Recompute):
        return recompute.fields(ctx, plan_query(ctx, tree.this))
    if type(tree) in HANDLERS:
        return None
    return result_fields(ctx, plan_query(ctx, tree), tree)
