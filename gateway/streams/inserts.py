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
from gateway.tables.store import pg_error


def _target(session, tree) -> tuple[StreamObject, list]:
    """The stream an INSERT writes to, and the columns it names (all when none)."""
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    reg = session.services.streams
    obj = reg.get(target.db or "public", target.name,
                  kinds=("stream", "window", "derived"))
    if obj is None:
        raise E.UndefinedTable(f'relation "{target.name}" does not exist')
    if obj.kind != "stream":
        raise E.PgError(f'cannot insert into {obj.kind} "{obj.name}"', sqlstate="42809",
                        hint="Insert into the stream it reads.")
    access.require(session, "INSERT", obj.schema, obj.name)
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


def deliver(session, obj: StreamObject, table: pa.Table, origin: str = "INSERT") -> int:
    """Hand typed stream rows to the back end; late ones are counted and reported."""
    svc = session.services
    try:
        n, late = svc.backend.call(svc.ingest.push(obj.relation().name, obj.timestamp_column,
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
    access.check_reads(session, tree.expression)       # what the rows come from
    with session.server_files():
        source = TR.translate(tree.expression.sql("cql")).ast
        if access.needs(source).files:     # check_reads let through: a role that may
            source = session.services.files.substitute(session, source)
        sql = stream_rows_sql(obj, names, session.bind_session_values(source))
        try:
            table = session.con.sql(sql, params=params or None).to_arrow_table()
        except duckdb.Error as e:
            raise pg_error(e) from None
    return Done(f"INSERT 0 {deliver(session, obj, table)}")


def refuse_change(session, tree, params) -> Done:
    raise E.PgError("a stream's tuples cannot be updated or deleted", sqlstate="42809",
                    hint="Streams are append-only: INSERT new tuples instead.")
