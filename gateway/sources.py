"""The ingest port: programs that know nothing about SQL send stream data over TCP, as to
TelegraphCQ's port 5533 (``cat log | nc host 55533``). The first line names the wrapper and the
stream, ``csvwrapper,sensors`` (the stream may be schema-qualified); every later line is data.

Built-in wrappers: ``csvwrapper`` (TelegraphCQ's rules: extra columns are dropped, missing ones
are NULL, and when a line lacks the event-time column it is stamped with its arrival time)
and ``jsonwrapper`` (one JSON object a line, keys by column name). A source may also send a
punctuation line, ``#punctuate <timestamp>``: nothing earlier will follow.

Lines are parsed a chunk at a time, typed by DuckDB (``TRY_CAST``: a line with a value that
does not fit its column is counted, logged with its line number and reason, and skipped; the
rest of the chunk is kept) and handed to ``gateway/ingest.py`` like INSERT and COPY rows. An
unknown wrapper or stream gets one ``ERROR:`` line back and the connection closes.
"""
from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import logging

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv as pacsv

from .ingest import micros

log = logging.getLogger("cqgate")
CHUNK = 1 << 20                 # bytes read before a chunk of lines is parsed
MAX_LINE = 1 << 20              # a longer line ends the connection with an error
PUNCTUATE = "#punctuate "


def _csv_rows(lines: list, n: int) -> list:
    """TelegraphCQ's csvwrapper: each line to exactly ``n`` fields (extra dropped, missing
    NULL)."""
    return [(r + [None] * n)[:n] if len(r) != n else r for r in csv.reader(lines)]


def _json_rows(lines: list, names: list) -> list:
    rows = []
    for line in lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            rows.append(None)          # counted as a bad line
            continue
        low = {k.lower(): v for k, v in obj.items()}
        rows.append([None if low.get(c) is None else str(low.get(c)) for c in names])
    return rows


WRAPPERS = {"csvwrapper": "csv", "jsonwrapper": "json"}
_ARROW_PARSES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string,
                 pa.types.is_boolean, pa.types.is_date32,
                 lambda t: pa.types.is_timestamp(t) and t.tz is None)


def _arrival(typ: pa.DataType) -> pa.Scalar:
    """Now, as a value of the event-time column's type."""
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    return pa.scalar(now, pa.timestamp("us")).cast(typ)


class Source:
    """One connected source feeding one stream."""

    def __init__(self, server, obj, wrapper: str, peer: str):
        self.server, self.obj, self.wrapper, self.peer = server, obj, wrapper, peer
        self.names = [c[0] for c in obj.columns]
        self.types = [c[1] for c in obj.columns]
        self.ts_index = self.names.index(obj.timestamp_column)
        self.con = server.store.db.cursor()
        self.schema = self.con.sql("SELECT " + ", ".join(
            f'CAST(NULL AS {t}) AS "{n}"' for n, t in zip(self.names, self.types))).arrow().schema
        # Arrow parses these types exactly as DuckDB casts them; others go through TRY_CAST
        self.direct = all(any(check(f.type) for check in _ARROW_PARSES) and
                          t.upper() not in ("UUID", "JSON")
                          for f, t in zip(self.schema, self.types))
        self.line_no = 1
        self.bad = 0
        self.accepted = 0

    def parse(self, lines: list) -> pa.Table | None:
        """Typed stream rows from a list of data lines; bad lines are counted and logged."""
        first = self.line_no + 1
        self.line_no += len(lines)
        rows = _csv_rows(lines, len(self.names)) if self.wrapper == "csv" else \
            _json_rows(lines, self.names)
        numbers = [first + i for i, r in enumerate(rows) if r is not None]
        for i, r in enumerate(rows):
            if r is None:
                self._bad(first + i, "not a JSON object")
        rows = [r for r in rows if r is not None]
        if not rows:
            return None
        cols = {f"c{i}": pa.array([r[i] if r[i] != "" else None for r in rows], pa.string())
                for i in range(len(self.names))}
        cols["line"] = pa.array(numbers, pa.int64())
        return self._typed(pa.table(cols))

    def parse_fast(self, data: bytes) -> pa.Table | None:
        """Well-formed CSV (every line with all its columns) parsed by Arrow in one go, typed
        too when every value fits; None when a line is ragged, so the line rules apply."""
        n = len(self.names)
        names = [f"c{i}" for i in range(n)]
        if self.direct:
            try:
                typed = self._read_csv(data, names, self.schema.types)
            except pa.ArrowInvalid:
                pass                       # a value that does not fit: find it below
            else:
                self.line_no += typed.num_rows
                typed = typed.rename_columns(self.names)
                ts = typed.column(self.ts_index)
                if ts.null_count:          # no event time given: stamped on arrival
                    typed = typed.set_column(self.ts_index, self.names[self.ts_index],
                                             pc.fill_null(ts, _arrival(ts.type)))
                return typed
        try:
            raw = self._read_csv(data, names, [pa.string()] * n)
        except pa.ArrowInvalid:
            return None
        first = self.line_no + 1
        self.line_no += raw.num_rows
        return self._typed(raw.append_column(
            "line", pa.array(np.arange(first, first + raw.num_rows))))

    @staticmethod
    def _read_csv(data: bytes, names: list, types: list) -> pa.Table:
        return pacsv.read_csv(
            io.BytesIO(data), read_options=pacsv.ReadOptions(column_names=names),
            convert_options=pacsv.ConvertOptions(column_types=dict(zip(names, types)),
                                                 strings_can_be_null=True))

    def _typed(self, raw: pa.Table) -> pa.Table:
        """Columns ``c0…`` of text (and ``line``) → the stream's typed columns: a missing
        event time is the arrival time; a value its type cannot hold skips its line."""
        ts = f"c{self.ts_index}"
        if raw.column(ts).null_count:          # no event time given: stamped on arrival
            arrival = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None).isoformat(sep=" ")
            raw = raw.set_column(self.ts_index, ts, pc.fill_null(raw.column(ts), arrival))
        casts = ", ".join(f'TRY_CAST(c{i} AS {t}) AS "{n}"'
                          for i, (n, t) in enumerate(zip(self.names, self.types)))
        bad = " OR ".join(f"(c{i} IS NOT NULL AND TRY_CAST(c{i} AS {t}) IS NULL)"
                          for i, t in enumerate(self.types))
        self.con.register("src", raw)
        try:
            typed = self.con.sql(f"SELECT {casts}, ({bad}) AS __bad, line FROM src") \
                .to_arrow_table()
        finally:
            self.con.unregister("src")
        flags = typed.column("__bad")
        if pc.any(flags).as_py():
            for n in typed.filter(flags).column("line").to_pylist():
                self._bad(n, "a value does not fit its column's type")
            typed = typed.filter(pc.invert(flags))
        return typed.drop_columns(["__bad", "line"])

    def _bad(self, line: int, reason: str) -> None:
        self.bad += 1
        self.server.ingest.progress(self.obj.relation().name).bad += 1
        log.warning("source %s, stream %s, line %d: %s; line skipped", self.peer, self.obj.name,
                    line, reason)

    async def punctuate(self, text: str) -> None:
        try:
            value = self.con.sql("SELECT CAST(? AS TIMESTAMP) AS t",
                                 params=[text.strip()]).to_arrow_table().column(0)
        except duckdb.Error:
            self._bad(self.line_no, "punctuation without a timestamp")
            return
        await self.server.ingest.advance(self.obj.relation().name,
                                         int(micros(value.combine_chunks())[0]))

    async def feed_bytes(self, data: bytes) -> None:
        """Whole lines: Arrow parses clean CSV at once; anything else goes line by line."""
        if self.wrapper == "csv" and b"#punctuate" not in data:
            table = self.parse_fast(data)
            if table is not None:
                await self._push(table)
                return
        await self.feed(data.decode("utf-8", "replace").split("\n"))

    async def _push(self, table: pa.Table | None) -> None:
        if table is not None and table.num_rows:
            n, _ = await self.server.ingest.push(self.obj.relation().name,
                                                 self.obj.timestamp_column, table,
                                                 self.obj.options)
            self.accepted += n

    async def feed(self, lines: list) -> None:
        data, marks = [], []
        for line in lines:
            if line.startswith(PUNCTUATE):
                marks.append((len(data), line[len(PUNCTUATE):]))
            elif line.strip():
                data.append(line.rstrip("\r"))
        start = 0
        for at, text in marks + [(len(data), None)]:
            if at > start:
                await self._push(self.parse(data[start:at]))
            start = at
            if text is not None:
                await self.punctuate(text)


async def handle(server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    peer = writer.get_extra_info("peername")
    peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
    source = None
    try:
        head = (await reader.readline()).decode("utf-8", "replace").strip()
        wrapper, _, target = head.partition(",")
        kind = WRAPPERS.get(wrapper.strip().lower())
        schema, _, name = target.strip().rpartition(".")
        obj = server.streams.get(schema or None, name, kinds=("stream",)) if name else None
        if kind is None or obj is None:
            what = f'unknown wrapper "{wrapper}"' if kind is None else \
                f'stream "{target.strip()}" does not exist'
            writer.write(f"ERROR: {what}\n".encode())
            await writer.drain()
            return
        source = Source(server, obj, kind, peer)
        log.info("source %s feeds stream %s with %s", peer, obj.name, wrapper)
        rest = b""
        while True:
            chunk = await reader.read(CHUNK)
            if not chunk:
                break
            buf = rest + chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                if len(buf) > MAX_LINE:
                    writer.write(b"ERROR: line longer than the limit\n")
                    await writer.drain()
                    return
                rest = buf
                continue
            rest = buf[cut + 1:]
            await source.feed_bytes(buf[:cut + 1])
        if rest.strip():
            await source.feed_bytes(rest + b"\n")
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        if source is not None:
            log.info("source %s done: %d tuple(s), %d bad line(s)", peer, source.accepted,
                     source.bad)
            source.con.close()
        writer.close()

