"""A stream that follows one PostgreSQL table (``CREATE STREAM s FROM SOURCE pg TABLE t``): its
rows at the slot's snapshot, then every committed change from its own logical replication slot
(``pgoutput``), each a tuple stamped with its transaction's commit time (DESIGN §5).

Exactly once: every tuple carries its transaction's end LSN (``__cq_lsn``) into the archive,
and the slot's confirmed LSN moves only after the archive has the tuples on disk; after a
restart of either side, a transaction at or before the archive's newest LSN is skipped. Event
time never goes back: a commit stamped earlier than what the stream has already announced
(punctuation, a clock step) takes the announced time.
"""
from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from executor import plan as P

from gateway.pgwire import errors as E
from gateway.connectors import pgoutput
from gateway.connectors.postgres_wire import (PgConnection, PgError, XLogData, parse_lsn,
                                              quote_ident, quote_literal)

log = logging.getLogger("cqgate.sources")

COMMIT, OP, LSN = "__cq_commit", P.CHANGE_KIND, "__cq_lsn"    # the stream's bookkeeping
FLUSH_ROWS = 50_000         # changes taken in before they go to the archive together
SNAPSHOT_PART = 16 << 20    # bytes of the first copy's CSV typed and archived together
FLUSH_S = 0.05              # the longest a received change waits for more
GAP_S = 0.002               # … and, once the server has nothing more at hand, for this long
IDLE_S = 0.2                # a quiet slot is asked for the server's time this often
MARGIN_US = 100_000         # punctuation stays this far behind the server's clock
BACKOFF_S = (0.25, 10.0)    # first and longest wait before reconnecting
CONNECT_S = 10.0

# PostgreSQL types (pg_type.typname) whose text DuckDB reads as the same value; any other
# type is kept as its text
_TYPES = {"int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "float4": "REAL",
          "float8": "DOUBLE", "bool": "BOOLEAN", "text": "VARCHAR", "varchar": "VARCHAR",
          "bpchar": "VARCHAR", "name": "VARCHAR", "date": "DATE", "timestamp": "TIMESTAMP",
          "timestamptz": "TIMESTAMP WITH TIME ZONE", "time": "TIME", "interval": "INTERVAL",
          "uuid": "UUID", "json": "JSON", "jsonb": "JSON", "bytea": "BLOB"}

_COLUMNS = """
SELECT a.attname, t.typname, a.atttypmod, format_type(a.atttypid, a.atttypmod),
       coalesce(a.attnum = ANY(i.indkey), false), c.relreplident
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_index i ON i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary)
                                              OR (c.relreplident = 'i' AND i.indisreplident))
WHERE n.nspname = {schema} AND c.relname = {table} AND c.relkind IN ('r', 'p')
ORDER BY a.attnum"""


def slot_name(oid: int) -> str:
    """The replication slot a stream reads (one a stream: each has its own snapshot)."""
    return f"cqgate_{oid}"


def duck_type(typname: str, typmod: int) -> str:
    if typname == "numeric":        # unconstrained numeric has no DuckDB twin: a double
        if typmod < 4:
            return "DOUBLE"
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        return f"DECIMAL({precision}, {scale})" if precision <= 38 else "DOUBLE"
    return _TYPES.get(typname, "VARCHAR")


def pg_error(e: PgError, what: str) -> E.PgError:
    """A PostgreSQL server's error, as the statement's own, saying where it came from."""
    return E.PgError(f"{what}: {e.message}", sqlstate=e.sqlstate or "08000",
                     detail=e.detail, hint=e.hint)


@dataclass
class TableShape:
    columns: list               # [(name, DuckDB type)]
    key: list                   # the replica identity's columns


async def connect(dsn: dict, *, replication: bool = False) -> PgConnection:
    try:
        return await PgConnection.connect(dsn, replication=replication, timeout=CONNECT_S)
    except PgError as e:
        raise pg_error(e, f"cannot connect to PostgreSQL at {dsn.get('host')}:"
                          f"{dsn.get('port')}") from None


async def check_source(dsn: dict, publication: str) -> None:
    """CREATE SOURCE's check: the server answers with these credentials, speaks logical
    replication and has the publication."""
    con = await connect(dsn)
    try:
        level = (await con.query("SHOW wal_level"))[0].rows[0][0]
        if level != "logical":
            raise E.PgError(f"PostgreSQL's wal_level is {level}, not logical",
                            sqlstate="55000", hint="Set wal_level = logical in "
                            "postgresql.conf and restart PostgreSQL.")
        found = await con.query(f"SELECT 1 FROM pg_publication WHERE pubname = "
                                f"{quote_literal(publication)}")
        if not found[0].rows:
            raise E.PgError(f'publication "{publication}" does not exist', sqlstate="42704",
                            hint=f"CREATE PUBLICATION {quote_ident(publication)} FOR TABLE … in "
                            "PostgreSQL first.")
    except PgError as e:
        raise pg_error(e, "PostgreSQL") from None
    finally:
        await con.close()


async def describe(dsn: dict, publication: str, schema: str, table: str) -> TableShape:
    """The table's columns (as DuckDB types) and key; 42P01 when it does not exist, 55000
    when the publication leaves it out or it has no key to follow rows by."""
    con = await connect(dsn)
    try:
        rows = (await con.query(_COLUMNS.format(schema=quote_literal(schema),
                                                table=quote_literal(table))))[0].rows
        if not rows:
            raise E.UndefinedTable(f'relation "{schema}.{table}" does not exist in '
                                   "PostgreSQL")
        published = await con.query(
            f"SELECT 1 FROM pg_publication_tables WHERE pubname = {quote_literal(publication)} "
            f"AND schemaname = {quote_literal(schema)} AND tablename = {quote_literal(table)}")
    except PgError as e:
        raise pg_error(e, "PostgreSQL") from None
    finally:
        await con.close()
    if not published[0].rows:
        raise E.PgError(f'publication "{publication}" does not publish {schema}.{table}',
                        sqlstate="55000", hint=f"ALTER PUBLICATION {quote_ident(publication)} ADD "
                        f"TABLE {quote_ident(schema)}.{quote_ident(table)} in PostgreSQL.")
    key = [r[0] for r in rows if r[4] == "t"]
    if not key:
        raise E.PgError(f"{schema}.{table} has no primary key or replica identity index",
                        sqlstate="55000", hint="A row is followed by its key: ALTER TABLE … "
                        "ADD PRIMARY KEY (…), or REPLICA IDENTITY USING INDEX ….")
    return TableShape([(r[0], duck_type(r[1], int(r[2]))) for r in rows], key)


def _cast_sql(columns: list) -> str:
    casts = [f"CAST({quote_ident(f'c{i}')} AS {t}) AS {quote_ident(n)}"
             for i, (n, t) in enumerate(columns)]
    return (f"SELECT {', '.join(casts)}, make_timestamp({COMMIT}) AS {COMMIT}, {OP}, {LSN} "
            "FROM changes")


@dataclass
class Progress:
    """What ``cq_sources`` shows of a follower."""
    state: str = "starting"
    rows: int = 0
    errors: int = 0
    last_error: str | None = None
    confirmed_lsn: int = 0
    server_lsn: int = 0
    last_commit_us: int | None = None
    since: float = field(default_factory=time.time)


class Follower:
    """One stream following one table: ``snapshot()`` once, at CREATE STREAM, then ``run()``
    until cancelled. ``push(table)`` takes tuples into the clearinghouse (on disk when it
    returns) and ``punctuate(us)`` says no earlier tuple follows; ``floor()`` is the stream's
    watermark now."""

    def __init__(self, obj, dsn: dict, publication: str, shape: TableShape, *, push,
                 punctuate, floor, save_snapshot, run_in_thread, resume_lsn):
        self.obj = obj
        self.dsn = dsn
        self.publication = publication
        self.shape = shape
        self.schema, self.table = obj.options["table"].split(".", 1)
        self.slot = slot_name(obj.oid)
        self.push, self.punctuate, self._floor = push, punctuate, floor
        self._save_snapshot, self.in_thread = save_snapshot, run_in_thread
        self._resume_lsn = resume_lsn          # () -> the archive's newest LSN (blocking)
        self.progress = Progress()
        self._duck = duckdb.connect()
        self._cast_text = _cast_sql(shape.columns)
        self._last_us = 0

    # ------------------------------------------------------------------ typing
    def typed(self, texts: list, commits: list, ops: list, lsns: list) -> pa.Table:
        """Rows of text (the server's output) as the stream's typed columns, by DuckDB."""
        cols = {f"c{i}": pa.array(texts[i], pa.string()) for i in range(len(texts))}
        cols[COMMIT] = pa.array(commits, pa.int64())
        cols[OP] = pa.array(ops, pa.string())
        cols[LSN] = pa.array(lsns, pa.int64())
        return self._cast(pa.table(cols))

    def _cast(self, changes: pa.Table) -> pa.Table:
        # (make_timestamp of one BIGINT takes µs since the epoch)
        self._duck.register("changes", changes)
        try:
            return self._duck.sql(self._cast_text).to_arrow_table()
        finally:
            self._duck.unregister("changes")

    def stamp(self, commit_us: int) -> int:
        """A commit's event time: its commit time, never before what the stream has said."""
        self._last_us = max(commit_us, self._last_us, self._floor() or 0)
        return self._last_us

    # ------------------------------------------------------------------ snapshot
    async def snapshot(self, now_us: int) -> int:
        """Create the slot, copy the table as the slot's snapshot shows it (each row an
        insert at ``now_us``), make the rows durable, and return the slot's consistent LSN."""
        self.progress.state = "snapshot"
        repl = await connect(self.dsn, replication=True)
        try:
            made = (await repl.query(f"CREATE_REPLICATION_SLOT {quote_ident(self.slot)} LOGICAL "
                                     "pgoutput (SNAPSHOT 'export')"))[0]
            row = dict(zip(made.columns, made.rows[0]))
            consistent = parse_lsn(row["consistent_point"])
            con = await connect(self.dsn)
            try:
                await con.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
                await con.query(f"SET TRANSACTION SNAPSHOT {quote_literal(row['snapshot_name'])}")
                await self._copy(con, self.stamp(now_us), consistent)
                await con.query("COMMIT")
            finally:
                await con.close()
        except PgError as e:
            raise pg_error(e, f"snapshot of {self.schema}.{self.table}") from None
        finally:
            await repl.close()
        self.progress.confirmed_lsn = consistent
        await self._save_snapshot(consistent)
        return consistent

    async def _copy(self, con: PgConnection, at: int, lsn: int) -> None:
        """The table's rows, each an insert at ``at``, into the stream a part at a time (a
        CopyData message is one row, so a part ends where a message does)."""
        names = ", ".join(quote_ident(n) for n, _ in self.shape.columns)
        parts, size = [], 0
        async for piece in con.copy_out(f"COPY (SELECT {names} FROM {quote_ident(self.schema)}."
                                        f"{quote_ident(self.table)}) TO STDOUT WITH (FORMAT csv)"):
            parts.append(piece)
            size += len(piece)
            if size >= SNAPSHOT_PART:
                await self._snapshot_part(b"".join(parts), at, lsn)
                parts, size = [], 0
        if parts:
            await self._snapshot_part(b"".join(parts), at, lsn)

    async def _snapshot_part(self, data: bytes, at: int, lsn: int) -> None:
        table = await self.in_thread(self._snapshot_rows, data, at, lsn)
        await self.push(table)
        await self.punctuate(at)
        self.progress.rows += table.num_rows

    def _snapshot_rows(self, data: bytes, at: int, lsn: int) -> pa.Table:
        """CSV lines of the table's rows, typed, each an insert at ``at``."""
        names = [f"c{i}" for i in range(len(self.shape.columns))]
        strings = pacsv.read_csv(
            io.BytesIO(data), read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, null_values=[""],
                strings_can_be_null=True, quoted_strings_can_be_null=False))
        n = strings.num_rows
        return self._cast(strings.append_column(COMMIT, pa.array(np.full(n, at, np.int64)))
                          .append_column(OP, pa.array(["I"] * n, pa.string()))
                          .append_column(LSN, pa.array(np.full(n, lsn, np.int64))))

    # ------------------------------------------------------------------ following
    async def run(self) -> None:
        """Follow the slot until cancelled; a lost connection or a server that is down is
        retried with growing waits, its error shown meanwhile."""
        wait = BACKOFF_S[0]
        while True:
            try:
                await self._follow()
                return
            except (PgError, E.PgError, OSError, asyncio.TimeoutError) as e:
                self.progress.errors += 1
                self.progress.last_error = str(getattr(e, "message", None) or e)
                self.progress.state = "retrying"
                log.warning("source %s (%s.%s): %s; retrying in %.1f s", self.obj.name,
                            self.schema, self.table, self.progress.last_error, wait)
            except Stopped as e:
                self.progress.state = "stopped"
                self.progress.errors += 1
                self.progress.last_error = str(e)
                log.error("source %s (%s.%s) stopped: %s", self.obj.name, self.schema,
                          self.table, e)
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, BACKOFF_S[1])

    async def _follow(self) -> None:
        done = await self.in_thread(self._resume_lsn)
        done = max(done or 0, int(self.obj.options.get("snapshot_lsn", 0)))
        repl = await connect(self.dsn, replication=True)
        clock = None
        try:
            clock = await connect(self.dsn)
            stream = await repl.start_replication(
                self.slot, done, {"proto_version": "1",
                                  "publication_names": self.publication})
            self.progress.state = "running"
            self.progress.last_error = None
            await _Session(self, stream, done, clock).run()
        finally:
            await repl.close()
            if clock is not None:
                await clock.close()

    async def drop_slot(self) -> None:
        """The slot goes with its stream (PostgreSQL keeps WAL for a slot nobody reads)."""
        con = await connect(self.dsn)
        try:
            for _ in range(20):         # the walsender may take a moment to let go
                try:
                    await con.query(f"SELECT pg_drop_replication_slot(slot_name) FROM "
                                    f"pg_replication_slots WHERE slot_name = "
                                    f"{quote_literal(self.slot)}")
                    return
                except PgError as e:
                    if e.sqlstate != "55006":       # object in use
                        raise pg_error(e, f"dropping slot {self.slot}") from None
                    await asyncio.sleep(0.25)
        finally:
            await con.close()


class Stopped(Exception):
    """The table changed in a way the stream cannot follow: the follower stops."""


class _Session:
    """One replication connection's life: decode, gather committed changes, hand them to
    the clearinghouse in batches, confirm what is on disk."""

    def __init__(self, follower: Follower, stream, done: int, clock: PgConnection):
        self.f = follower
        self.stream = stream
        self.clock = clock              # a plain connection: the server's WAL end and clock
        self.mark: tuple | None = None  # (WAL insert LSN, server µs) read while quiet
        self.done = done                # the newest LSN on disk: later ones are new
        self.oid = None                 # the table's relation OID, from its Relation message
        self.txn: list | None = None    # (op, values) of the open transaction
        self.commit_us = 0
        self.pending: list = []         # (commit µs, lsn, op, values) taken, not yet pushed
        self.first_pending = 0.0
        self.asked = 0.0                # when the server was last asked for its time
        self.names = [n for n, _ in follower.shape.columns]
        self.key_at = [self.names.index(k) for k in follower.shape.key]
        self.handlers = {pgoutput.Begin: self._begin, pgoutput.Commit: self._commit,
                         pgoutput.Relation: self._relation, pgoutput.Insert: self._insert,
                         pgoutput.Update: self._update, pgoutput.Delete: self._delete,
                         pgoutput.Truncate: self._truncate}

    async def run(self) -> None:
        while True:
            msg = await self.stream.next(timeout=GAP_S if self.pending else FLUSH_S)
            if isinstance(msg, XLogData):
                decoded = pgoutput.decode(msg.payload)
                handler = self.handlers.get(type(decoded))
                if handler is not None:
                    handler(decoded)
            elif msg is not None:
                await self._keepalive(msg)
            if self.pending and (len(self.pending) >= FLUSH_ROWS or msg is None or
                                 time.monotonic() - self.first_pending >= FLUSH_S):
                await self._flush()
            if msg is None and self.txn is None and not self.pending and \
                    time.monotonic() - self.asked >= IDLE_S:
                self.asked = time.monotonic()
                if self.mark is None:
                    self.mark = await self._server_now()
                await self._confirm(reply=True)

    # ------------------------------------------------------------------ messages
    def _begin(self, m) -> None:
        self.txn, self.commit_us = [], m.commit_time_us

    def _commit(self, m) -> None:
        txn, self.txn = self.txn or [], None
        progress = self.f.progress
        progress.server_lsn = max(progress.server_lsn, m.end_lsn)
        if m.end_lsn <= self.done or not txn:
            return                      # already on disk (a replay after a restart), or not ours
        if not self.pending:
            self.first_pending = time.monotonic()
        self.pending += [(m.commit_time_us, m.end_lsn, op, values) for op, values in txn]

    def _relation(self, m) -> None:
        if m.namespace != self.f.schema or m.name != self.f.table:
            return
        columns = [c.name for c in m.columns]
        if columns != self.names:
            raise Stopped(f"{self.f.schema}.{self.f.table} changed its columns from "
                          f"({', '.join(self.names)}) to ({', '.join(columns)}): DROP STREAM "
                          f"{self.f.obj.name} and CREATE it again to follow the new shape")
        self.oid = m.oid

    def _ours(self, m) -> bool:
        return m.oid == self.oid and self.txn is not None

    def _insert(self, m) -> None:
        if self._ours(m):
            self.txn.append(("I", self._complete(m.new, None)))

    def _update(self, m) -> None:
        if not self._ours(m):
            return
        new = self._complete(m.new, m.old if m.old_kind == "O" else None)
        if m.old is not None:
            old_key = [m.old[i] for i in self.key_at]
            if old_key != [new[i] for i in self.key_at]:       # the key itself changed
                self.txn.append(("D", self._key_only(m.old)))
        self.txn.append(("U", new))

    def _delete(self, m) -> None:
        if self._ours(m):
            self.txn.append(("D", self._key_only(m.old)))

    def _truncate(self, m) -> None:
        if self.oid in m.oids and self.txn is not None:
            self.txn.append(("T", (None,) * len(self.names)))

    def _key_only(self, old) -> tuple:
        return tuple(old[i] if i in self.key_at else None for i in range(len(self.names)))

    def _complete(self, new, old) -> tuple:
        """A new row version; a value the server left out because it did not change (a
        TOASTed value) is taken from the old row when the server sent it."""
        if pgoutput.UNCHANGED not in new:
            return tuple(new)
        if old is None:
            raise Stopped(f"{self.f.schema}.{self.f.table} has large values that an update "
                          "left unchanged, and the server does not send them: ALTER TABLE "
                          "… REPLICA IDENTITY FULL in PostgreSQL, then DROP and CREATE the "
                          "stream again")
        return tuple(o if v is pgoutput.UNCHANGED else v for v, o in zip(new, old))

    # ------------------------------------------------------------------ hand-over
    async def _flush(self) -> None:
        rows, self.pending = self.pending, []
        k = len(self.names)
        texts = [[r[3][i] for r in rows] for i in range(k)]
        commits = [self.f.stamp(r[0]) for r in rows]
        table = await self.f.in_thread(self.f.typed, texts, commits, [r[2] for r in rows],
                                       [r[1] for r in rows])
        await self.f.push(table)
        await self.f.punctuate(commits[-1])
        self.done = rows[-1][1]
        progress = self.f.progress
        progress.rows += len(rows)
        progress.last_commit_us = rows[-1][0]
        await self._confirm(reply=False)

    async def _confirm(self, reply: bool) -> None:
        """Tell the server what is on disk: it may forget the WAL before it."""
        self.f.progress.confirmed_lsn = self.done
        await self.stream.send_status(self.done, self.done, self.done, reply=reply)

    async def _server_now(self) -> tuple:
        """(the server's WAL insert position, its clock in µs), read in that order: a commit
        stamped before that instant (less a margin for the moment between a commit's stamp
        and its record) lies before that position."""
        row = (await self.clock.query(
            "SELECT pg_current_wal_insert_lsn()::text, "
            "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"))[0].rows[0]
        return parse_lsn(row[0]), int(row[1])

    async def _keepalive(self, k) -> None:
        """The WAL the server has sent (``wal_end``): once it passes the position of a quiet
        moment's reading (``mark``), every commit stamped before that moment is here, so the
        stream's watermark may move there. (The keepalive's own clock says nothing of that:
        a WAL sender behind its WAL sends commits stamped long before.)"""
        self.f.progress.server_lsn = max(self.f.progress.server_lsn, k.wal_end)
        if self.txn is None and not self.pending:
            if self.mark is not None and k.wal_end >= self.mark[0]:
                await self.f.punctuate(self.f.stamp(self.mark[1] - MARGIN_US))
                self.mark = None
            # everything the server sent is handled (other tables' changes need nothing), so
            # its WAL may go: a quiet table in a busy database holds none back, and a server
            # shutting down, which waits for its WAL senders' clients, is not held up
            self.done = max(self.done, k.wal_end)
        if k.reply_requested or self.done > self.f.progress.confirmed_lsn:
            await self._confirm(reply=False)
