"""Tuples into a stream from SQL: INSERT's rows are evaluated by DuckDB, typed as the stream
declares them, and delivered through the clearinghouse; UPDATE and DELETE are refused."""
from __future__ import annotations

import duckdb
import pyarrow as pa
from sqlglot import exp

from dialect.names import quote

from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.streams.registry import StreamObject
from gateway.tables import translate as TR
from gateway.tables.statement_context import AwaitOnLoop, StatementContext, chain
from gateway.tables.store import pg_error


def _target(ctx: StatementContext, tree) -> tuple[StreamObject, list]:
    """The stream an INSERT writes to, and the columns it names (all when none)."""
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    reg = ctx.services.streams
    obj = reg.get(target.db or "public", target.name,
                  kinds=("stream", "window", "derived"))
    if obj is None:
        raise E.UndefinedTable(f'relation "{target.name}" does not exist')
    if obj.kind != "stream":
        raise E.PgError(f'cannot insert into {obj.kind} "{obj.name}"', sqlstate="42809",
                        hint="Insert into the stream it reads.")
    access.require(ctx, "INSERT", obj.schema, obj.name)
    obj.refuse_writes()
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
         else f"CAST(NULL AS {c[1]})") + " AS " + quote(c[0])
        for c in obj.columns)
    return f"SELECT {cols} FROM ({source}) AS v({alias})"


def deliver(ctx: StatementContext, obj: StreamObject, table: pa.Table,
            origin: str = "INSERT") -> AwaitOnLoop:
    """Hand typed stream rows to the clearinghouse, on the event loop; late ones are counted
    and reported. Settled, it gives the number of rows."""
    svc = ctx.services

    async def push():
        try:
            return await svc.ingest.push(obj.relation().name, obj.timestamp_column, table,
                                         obj.options, f"{origin} (pid {ctx.pid})",
                                         one_by_one=origin == "COPY",
                                         archive=obj.key if obj.archived else None)
        except ValueError as e:
            raise E.NotNullViolation(f'{e} (column "{obj.timestamp_column}" of stream '
                                     f'"{obj.name}")') from None

    def pushed(counts) -> int:
        n, late = counts
        if late:
            ctx.notices.append((
                "WARNING", "01000", f"{late} tuple(s) earlier than the watermark of stream "
                f'"{obj.name}" were not delivered to running queries'))
        return n + late
    return AwaitOnLoop(push, pushed)


def insert(ctx: StatementContext, tree: exp.Insert, params) -> AwaitOnLoop:
    if tree.args.get("returning"):
        raise E.FeatureNotSupported("INSERT into a stream has no RETURNING")
    obj, names = _target(ctx, tree)
    access.check_reads(ctx, tree.expression)       # what the rows come from
    with ctx.server_files():
        source = TR.translate_tree(tree.expression.copy()).ast
        if access.needs(source).files:     # check_reads let through: a role that may
            source = ctx.services.files.substitute(ctx, source)
        sql = stream_rows_sql(obj, names, ctx.bind_session_values(source))
        try:
            table = ctx.con.sql(sql, params=params or None).to_arrow_table()
        except duckdb.Error as e:
            raise pg_error(e) from None
    return chain(deliver(ctx, obj, table), lambda n: Done(f"INSERT 0 {n}"))


def refuse_change(ctx: StatementContext, tree, params) -> Done:
    raise E.PgError("a stream's tuples cannot be updated or deleted", sqlstate="42809",
                    hint="Streams are append-only: INSERT new tuples instead.")
