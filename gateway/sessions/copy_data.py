"""The data of a COPY statement (read by ``command_syntax.py``): FROM STDIN's rows loaded into a
table or delivered to a stream, and TO STDOUT's rows, a table's or a query's, for the shell."""
from __future__ import annotations

import duckdb

from dialect.names import fold, quote

from gateway.link.live_rows import LiveRows
from gateway.pgwire import copy_binary
from gateway.pgwire import copy_format as C
from gateway.pgwire import types as T
from gateway.pgwire import errors as E
from gateway.pgwire.results import Rows
from gateway.security import access
from gateway.sessions.columns import table_key
from gateway.sessions.portals import TxStatus
from gateway.sessions.prepared import Kind
from gateway.streams import inserts
from gateway.tables.statement_context import AwaitOnLoop
from gateway.tables.store import pg_error


def columns(session, req) -> list:
    """[(name, duckdb type)] of the COPY target, in the order the data carries them."""
    schema, _, table = req.table.rpartition(".")
    stream = _stream(session, req)
    cols = [(c[0], c[1], None, None) for c in stream.columns] if stream is not None else \
        session.columns.of(fold(schema) if schema else None, fold(table))
    if not cols:
        raise E.UndefinedTable(f'relation "{fold(table)}" does not exist')
    access.require(session.ctx, "INSERT", fold(schema) if schema else None, fold(table))
    if req.columns is None:
        return [(c[0], c[1]) for c in cols]
    by_name = {c[0].lower(): c for c in cols}
    missing = [c for c in req.columns if c.lower() not in by_name]
    if missing:
        raise E.UndefinedColumn(f'column "{missing[0]}" of relation "{fold(table)}" '
                                "does not exist")
    return [(by_name[c.lower()][0], by_name[c.lower()][1]) for c in req.columns]


def _stream(session, req):
    schema, _, table = req.table.rpartition(".")
    obj = session.services.streams.get(fold(schema) if schema else None, fold(table),
                                       kinds=("stream",))
    if obj is not None:
        obj.refuse_writes()
    return obj


_PARSE = {
    "text": lambda req, cols, data: C.parse_text(data, len(cols), req.delimiter, req.null),
    "csv": lambda req, cols, data: C.parse_csv(data, len(cols), req.delimiter, req.null,
                                               req.quote, req.escape, req.header),
    # binary data is read by each target column's type, as PostgreSQL's receive functions do
    "binary": lambda req, cols, data: copy_binary.parse(
        data, [T.duck_to_pg(c[1]).oid for c in cols]),
}


def load(session, req, cols: list, data: bytes) -> int | AwaitOnLoop:
    """COPY … FROM STDIN: ``data`` parsed and inserted into the table, or delivered to the
    stream; the number of rows (for a stream, once its delivery is settled)."""
    table = _PARSE[req.format](req, cols, data)
    names = ", ".join(quote(c[0]) for c in cols)
    casts = ", ".join(f'CAST(c{i} AS {c[1]})' for i, c in enumerate(cols))
    con = session.con
    con.register("cq_copy_in", table)
    stream = _stream(session, req)
    try:
        if stream is not None:
            sql = inserts.stream_rows_sql(stream, [c[0] for c in cols], "SELECT * FROM cq_copy_in")
            return inserts.deliver(session.ctx, stream, con.sql(sql).to_arrow_table(), "COPY")
        con.execute(f"INSERT INTO {req.table} ({names}) SELECT {casts} FROM cq_copy_in")
    except duckdb.Error as e:
        raise pg_error(e) from None
    finally:
        con.unregister("cq_copy_in")
    if session.status == TxStatus.IN_BLOCK:
        session.writes_in_tx = True
    schema, _, name = req.table.rpartition(".")
    session.written_tables.add(table_key(schema.strip('"') or None, name.strip('"')))
    return table.num_rows


def load_file(session, req) -> int | AwaitOnLoop:
    """COPY … FROM 'file': the server's file, read as COPY FROM STDIN's data would be."""
    cols = columns(session, req)
    path = session.services.files.path(req.file)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise E.UndefinedFile(f'could not open file "{req.file}" for reading: '
                              f"{e.strerror}") from None
    return load(session, req, cols, data)


def save_file(session, req, rows: Rows) -> int:
    """COPY … TO 'file': the rows written as COPY TO STDOUT would send them."""
    path = session.services.files.path(req.file)
    if req.format == "binary":
        data = copy_binary.BinaryRows(rows.fields).file_data(rows.table)
    else:
        data = C.copy_file_data(rows.fields, rows.table, session.tz, req.csv, req.delimiter,
                                req.null, req.quote)
    try:
        with open(path, "wb") as f:
            if req.header and req.format != "binary":
                f.write(C.header_line(rows.fields, req.delimiter, req.quote))
            f.write(data)
    except OSError as e:
        raise E.UndefinedFile(f'could not open file "{req.file}" for writing: '
                              f"{e.strerror}") from None
    return rows.table.num_rows


async def source(session, req) -> Rows | LiveRows:
    """The rows COPY … TO STDOUT sends: a table's or a one-time query's, or, for a query
    over streams, a continuous query's as they come (in cq.mode = snapshot: its rows at
    now), just as the same SELECT would give them."""
    if req.query is not None:       # read once: the COPY's tokens placed it and said what it is
        p = None if req.query_is_command or not req.query.text.strip() else \
            session.prepare_statement("", req.query, may_be_command=False)
    else:
        cols = "*" if req.columns is None else ", ".join(
            quote(c) for c in req.columns)
        p = session.prepare("", f"SELECT {cols} FROM {req.table}")
    if p is None:
        raise E.FeatureNotSupported("COPY (query) TO needs a query that returns rows")
    res = await session.run_prepared(p, []) if p.kind in (Kind.STREAM, Kind.SQL) and \
        p.returns_rows else None
    if not isinstance(res, (Rows, LiveRows)):
        raise E.FeatureNotSupported("COPY (query) TO needs a query that returns rows")
    return res
