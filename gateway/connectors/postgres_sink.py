"""A PostgreSQL table a sink writes (``CREATE SINK s INTO POSTGRES (…) AS …``): made if missing,
then each batch of changes (``sink_state.Changes``) written in one transaction together with
the sink's progress (its watermark, and in append mode the rows still open) in the tables
``cqgate_sinks`` and ``cqgate_sink_open`` beside it, so a restart resumes exactly where the
last committed transaction left off: nothing twice, nothing lost.

Values go as text literals cast to the target column's type (``'1.50'::numeric(10,2)``), which
is how PostgreSQL reads them in COPY too.
"""
from __future__ import annotations

import datetime as dt
import json

from gateway.connectors import postgres_source as PS
from gateway.connectors.postgres_wire import PgError, quote_ident, quote_literal
from gateway.connectors.sink_state import Changes
from gateway.pgwire import errors as E

PROGRESS, OPEN = "cqgate_sinks", "cqgate_sink_open"
EPOCH = dt.datetime(1970, 1, 1)

# Arrow type names (str(pa.DataType)) -> PostgreSQL's, for a table the sink makes; others text
PG_TYPES = {"int16": "smallint", "int32": "integer", "int64": "bigint", "float": "real",
            "double": "double precision", "bool": "boolean", "string": "text",
            "large_string": "text", "date32[day]": "date", "timestamp[us]": "timestamp",
            "timestamp[us, tz=UTC]": "timestamptz", "time64[us]": "time"}


def pg_type(arrow_type: str) -> str:
    if arrow_type.startswith("decimal128("):
        precision, scale = arrow_type[len("decimal128("):-1].split(",")
        return f"numeric({precision.strip()},{scale.strip()})"
    return PG_TYPES.get(arrow_type, "text")


def micros_text(us: int) -> str:
    return (EPOCH + dt.timedelta(microseconds=us)).isoformat(sep=" ")


class PostgresTarget:
    """``columns``: the answer's (name, Arrow type name); ``key``: upsert mode's key."""

    def __init__(self, sink: str, dsn: dict, table: str, mode: str, key: list, columns: list):
        self.sink, self.dsn, self.mode, self.key = sink, dsn, mode, key
        schema, _, name = table.rpartition(".")
        self.schema, self.name = schema or "public", name
        self.columns = columns
        self.types: list = []            # the target's column types, as PostgreSQL spells them
        self.con = None

    @property
    def table(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"

    def _aside(self, name: str) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(name)}"

    async def _query(self, sql: str):
        try:
            return await self.con.query(sql)
        except PgError as e:
            raise PS.pg_error(e, f"sink {self.sink}") from None

    async def prepare(self, fresh: bool) -> None:
        """Connect; make the table and the progress tables if missing and check the table's
        columns. ``fresh``: a new sink, whose progress (of an older sink of that name) goes."""
        await self.close()
        self.con = await PS.connect(self.dsn)
        names = [n for n, _ in self.columns]
        cols = [f"{quote_ident(n)} {pg_type(t)}" for n, t in self.columns]
        if self.mode == "append":
            cols += ["valid_from timestamp NOT NULL", "valid_to timestamp NOT NULL"]
        else:
            cols.append(f"PRIMARY KEY ({', '.join(quote_ident(k) for k in self.key)})")
        await self._query(
            f"CREATE TABLE IF NOT EXISTS {self.table} ({', '.join(cols)}); "
            f"CREATE TABLE IF NOT EXISTS {self._aside(PROGRESS)} (sink text PRIMARY KEY, "
            "watermark bigint, updated timestamptz NOT NULL DEFAULT now()); "
            f"CREATE TABLE IF NOT EXISTS {self._aside(OPEN)} (sink text NOT NULL, "
            "run bigint NOT NULL, row_values text[] NOT NULL, valid_from bigint NOT NULL, "
            "PRIMARY KEY (sink, run))")
        found = (await self._query(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            f"WHERE a.attrelid = {quote_literal(self.table)}::regclass AND a.attnum > 0 AND NOT "
            "a.attisdropped ORDER BY a.attnum"))[0].rows
        have = {n: t for n, t in found}
        missing = [n for n in names if n not in have]
        if missing:
            raise E.PgError(f"the sink's table {self.schema}.{self.name} has no column "
                            f"{', '.join(missing)}", sqlstate="42703",
                            hint="Name a new table (the sink makes it), or add the columns.")
        self.types = [have[n] for n in names]
        if fresh:
            rows = (await self._query(f"SELECT count(*) FROM {self.table}"))[0].rows
            if self.mode == "upsert" and rows[0][0] != "0":
                raise E.PgError(f"the sink's table {self.schema}.{self.name} is not empty",
                                sqlstate="55000", hint="An upsert sink's table holds the "
                                "answer's rows now and nothing else: TRUNCATE it, or name "
                                "a new table.")
            await self._query(f"BEGIN; DELETE FROM {self._aside(PROGRESS)} WHERE sink = "
                              f"{quote_literal(self.sink)}; DELETE FROM {self._aside(OPEN)} "
                              f"WHERE sink = {quote_literal(self.sink)}; COMMIT")

    async def load(self) -> tuple:
        """(watermark or None, state): append mode's open rows (values, start, run id);
        upsert mode's rows in the table."""
        row = (await self._query(f"SELECT watermark FROM {self._aside(PROGRESS)} WHERE sink = "
                                 f"{quote_literal(self.sink)}"))[0].rows
        watermark = int(row[0][0]) if row and row[0][0] is not None else None
        if watermark is None:
            return None, []
        if self.mode == "append":
            rows = (await self._query(f"SELECT array_to_json(row_values), valid_from, run FROM "
                                      f"{self._aside(OPEN)} WHERE sink = "
                                      f"{quote_literal(self.sink)}"))[0].rows
            return watermark, [(tuple(json.loads(v)), int(s), int(r)) for v, s, r in rows]
        names = ", ".join(f"{quote_ident(n)}::text" for n, _ in self.columns)
        rows = (await self._query(f"SELECT {names} FROM {self.table}"))[0].rows
        return watermark, [tuple(r) for r in rows]

    def _value(self, v, typ: str) -> str:
        return "NULL" if v is None else f"{quote_literal(v)}::{typ}"

    def _row(self, values: tuple) -> str:
        return "(" + ", ".join(self._value(v, t) for v, t in zip(values, self.types)) + ")"

    async def write(self, changes: Changes, watermark: int | None) -> None:
        """One transaction: the changes and the sink's progress."""
        names = ", ".join(quote_ident(n) for n, _ in self.columns)
        me = quote_literal(self.sink)
        sql = ["BEGIN"]
        if changes.inserts:
            sql.append(f"INSERT INTO {self.table} ({names}, valid_from, valid_to) VALUES "
                       + ", ".join(self._row(v)[:-1] + f", {quote_literal(micros_text(s))}, "
                                   f"{quote_literal(micros_text(e))})"
                                   for v, s, e in changes.inserts))
        if changes.closed:
            sql.append(f"DELETE FROM {self._aside(OPEN)} WHERE sink = {me} AND run IN ("
                       + ", ".join(str(r) for r in changes.closed) + ")")
        if changes.opened:
            sql.append(f"INSERT INTO {self._aside(OPEN)} VALUES " + ", ".join(
                f"({me}, {r}, {_array(v)}, {s})" for r, (v, s) in changes.opened.items()))
        if changes.deletes:
            at = [[n for n, _ in self.columns].index(k) for k in self.key]
            sql.append(f"DELETE FROM {self.table} WHERE " + " OR ".join(
                "(" + " AND ".join(f"{quote_ident(self.key[j])} = "
                                   f"{self._value(k[j], self.types[at[j]])}"
                                   for j in range(len(self.key))) + ")"
                for k in changes.deletes))
        if changes.upserts:
            keys = ", ".join(quote_ident(k) for k in self.key)
            rest = [n for n, _ in self.columns if n not in self.key]
            update = ", ".join(f"{quote_ident(n)} = EXCLUDED.{quote_ident(n)}" for n in rest)
            sql.append(f"INSERT INTO {self.table} ({names}) VALUES "
                       + ", ".join(self._row(v) for v in changes.upserts.values())
                       + f" ON CONFLICT ({keys}) DO "
                       + (f"UPDATE SET {update}" if update else "NOTHING"))
        sql.append(f"INSERT INTO {self._aside(PROGRESS)} (sink, watermark) VALUES ({me}, "
                   f"{'NULL' if watermark is None else watermark}) ON CONFLICT (sink) DO "
                   "UPDATE SET watermark = EXCLUDED.watermark, updated = now()")
        sql.append("COMMIT")
        await self._query("; ".join(sql))

    async def forget(self) -> None:
        """DROP SINK: its progress goes; its table stays, for whoever reads it."""
        try:
            await self._query(f"DELETE FROM {self._aside(PROGRESS)} WHERE sink = "
                              f"{quote_literal(self.sink)}; DELETE FROM {self._aside(OPEN)} "
                              f"WHERE sink = {quote_literal(self.sink)}")
        finally:
            await self.close()

    async def close(self) -> None:
        if self.con is not None:
            con, self.con = self.con, None
            await con.close()


def _array(values: tuple) -> str:
    return "ARRAY[" + ", ".join("NULL" if v is None else quote_literal(v) for v in values) \
        + "]::text[]"
