"""The ingest port: programs that know nothing about SQL send stream data over TCP, as to
TelegraphCQ's port 5533 (``cat log | nc host 55533``). The first line names the wrapper and the
stream, ``csvwrapper,sensors`` (the stream may be schema-qualified), and may name the role that
writes with its password, ``csvwrapper,sensors,loader,secret`` (``_may_feed``); every later line
is data, or punctuation, ``#punctuate <timestamp>``: nothing earlier will follow.

Wrappers: ``csvwrapper`` (TelegraphCQ's rules: extra fields are dropped, missing ones are NULL,
a line without the event time is stamped with its arrival time; the stream's ``delimiter``,
``quote`` and ``columns`` options say how lines read), ``jsonwrapper`` (one object a line, keys
by column name), user wrappers (CREATE WRAPPER: Python ``init``/``next``/``done``, served
to a stream once attached with ALTER STREAM … ADD WRAPPER), and ``arrowwrapper``: no lines
after the head line, one Arrow IPC stream (``ArrowSource``).

Clean CSV chunks are parsed and typed by Arrow at once; otherwise lines are read one by one
and typed by DuckDB (``TRY_CAST``), so a bad line (a value its column cannot hold, broken
quoting, not JSON, a wrapper's exception) is counted, logged with its line number and reason
(``cq_ingest_errors``) and skipped while the rest is kept. Rows go on to
``gateway/clearinghouse/ingest.py`` in arrival order. An unknown wrapper or stream, or a line
over ``--max-line-bytes``, or a role that may not write the stream, gets one ``ERROR:`` line
back and the connection closes.
"""
from __future__ import annotations

import asyncio
import collections
import csv
import datetime as dt
import importlib
import importlib.machinery
import io
import json
import logging
import os
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv as pacsv

from gateway.clearinghouse.slack import micros
from gateway.security.roles import check_password
from gateway.services import Services
from gateway.sources.seam import Batch, feed
from gateway.sources.source_stream import LineTooLong, SourceStream

log = logging.getLogger("cqgate")
# bytes read before a chunk of lines is parsed: only a source sending faster than the server
# takes fills one, and its bigger batches pay the per-batch work (ordering, framing, a DuckDB
# call per operator) less often (q5 through the ingest port: 18-24 % more events/s than 1 MB)
CHUNK = 1 << 22
THREAD_BYTES = 64 << 10         # chunks at least this big are parsed in a worker thread
PUNCTUATE = "#punctuate "
PUNCTUATE_BYTES = PUNCTUATE.strip().encode()


WRAPPERS = {"csvwrapper": "csv", "jsonwrapper": "json"}
ARROW_WRAPPER = "arrowwrapper"
_ARROW_PARSES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string,
                 pa.types.is_boolean, pa.types.is_date32,
                 lambda t: pa.types.is_timestamp(t) and t.tz is None)


def _arrival(typ: pa.DataType, now_s: float) -> pa.Scalar:
    """``now_s`` (wall clock), as a value of the event-time column's type."""
    now = dt.datetime.fromtimestamp(now_s, dt.timezone.utc).replace(tzinfo=None)
    return pa.scalar(now, pa.timestamp("us")).cast(typ)


class Source:
    """One connected source feeding one stream through one wrapper: the seam's Source
    (``gateway/sources/seam.py``) over a connection's lines."""

    def __init__(self, services: Services, obj, wrapper: str, peer: str, user=None,
                 reader: SourceStream | None = None):
        self.obj, self.wrapper, self.peer = obj, wrapper, peer
        self.services = services
        self.reader = reader              # the connection's lines
        self.pending: collections.deque = collections.deque()   # batches not yet handed out
        self.ended = False                # the sender closed and the last batches are made
        self.failure: _BadLine | None = None   # raised once the batches before it are out
        self.ingest = services.ingest     # whose logs count and keep its bad lines
        self.user = user                  # a user wrapper's (init, next, done), or None
        self.clock = services.clock       # stamps lines that carry no event time
        self.origin = f"source {peer}"
        self.con = services.store.db.cursor()
        self.line_no = 1
        self.bad = 0
        self.accepted = 0
        self._configure()
        self.state = self.user[0](list(self.names)) if self.user else None

    def _configure(self) -> None:
        """The stream's columns and CSV options (again after ALTER STREAM … ADD COLUMN)."""
        obj = self.obj
        self.names = [c[0] for c in obj.columns]
        self.types = [c[1] for c in obj.columns]
        self.ts_index = self.names.index(obj.timestamp_column)
        self.schema = self.con.sql("SELECT " + ", ".join(
            f'CAST(NULL AS {t}) AS "{n}"' for n, t in zip(self.names, self.types))).arrow().schema
        # Arrow parses these types exactly as DuckDB casts them; others go through TRY_CAST
        self.direct = all(any(check(f.type) for check in _ARROW_PARSES) and
                          t.upper() not in ("UUID", "JSON")
                          for f, t in zip(self.schema, self.types))
        self.delimiter = obj.options.get("delimiter", ",")
        self.quote = obj.options.get("quote", '"')
        listed = obj.options.get("columns")
        lower = [n.lower() for n in self.names]
        # the stream column each field of a line holds, in the line's order
        self.order = [lower.index(c.strip().lower()) for c in listed.split(",")] if listed \
            else list(range(len(self.names)))

    # ------------------------------------------------------------------ parsing
    def parse(self, lines: list) -> pa.Table | None:
        """Typed stream rows from a list of data lines, by the line rules; bad lines are
        counted and logged."""
        first = self.line_no + 1
        self.line_no += len(lines)
        parse_line = _PARSERS[self.wrapper]
        rows, numbers, texts = [], [], []
        for i, line in enumerate(lines):
            try:
                got = parse_line(self, line)
            except _BadLine as e:
                self._bad(first + i, str(e), line)
                continue
            for r in got:
                rows.append(r)
                numbers.append(first + i)
                texts.append(line)
        return self._rows_typed(rows, numbers, texts)

    def _rows_typed(self, rows: list, numbers: list, texts: list) -> pa.Table | None:
        """Rows of text fields (line order), their line numbers and texts → typed rows."""
        if not rows:
            return None
        cols = {f"c{i}": pa.array([r[i] for r in rows], pa.string())
                for i in range(len(self.order))}
        cols["line"] = pa.array(numbers, pa.int64())
        return self._typed(pa.table(cols), texts)

    def read_fast(self, data: bytes) -> tuple:
        """Arrow's reading of well-formed CSV (every line with all its fields): (typed, None)
        when every value fits the stream's types, (None, text fields) when one does not,
        (None, None) when a line is ragged. It changes no state, so it may run in a worker
        thread; ``parse_fast`` does the rest on the loop."""
        names = [f"c{i}" for i in range(len(self.order))]
        if self.direct:
            try:
                return self._read_csv(data, names, [self.schema.field(j).type
                                                    for j in self.order]), None
            except pa.ArrowInvalid:
                pass                       # a value that does not fit: found by parse_fast
        try:
            return None, self._read_csv(data, names, [pa.string()] * len(names))
        except pa.ArrowInvalid:
            return None, None

    def parse_fast(self, data: bytes, read: tuple | None = None) -> pa.Table | None:
        """Well-formed CSV parsed by Arrow in one go (``read``: ``read_fast``'s answer, if it
        ran already), typed too when every value fits, else typed here line by line with the
        bad ones logged; None when a line is ragged, so the line rules apply."""
        typed, raw = read if read is not None else self.read_fast(data)
        if typed is not None:
            self.line_no += typed.num_rows
            return self._stamped(self._in_stream_order(typed))
        if raw is None:
            return None
        first = self.line_no + 1
        self.line_no += raw.num_rows
        return self._typed(raw.append_column(
            "line", pa.array(np.arange(first, first + raw.num_rows))), None)

    def _read_csv(self, data: bytes, names: list, types: list) -> pa.Table:
        return pacsv.read_csv(
            io.BytesIO(data), read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(delimiter=self.delimiter, quote_char=self.quote),
            # only an empty field is NULL (TelegraphCQ's rule, as line by line): not Arrow's
            # default list, which would read the text "NA" or "null" as NULL
            convert_options=pacsv.ConvertOptions(column_types=dict(zip(names, types)),
                                                 strings_can_be_null=True, null_values=[""]))

    def _in_stream_order(self, fields: pa.Table) -> pa.Table:
        """Fields in line order → the stream's columns (columns a line lacks are NULL)."""
        at = {j: i for i, j in enumerate(self.order)}
        return pa.table([fields.column(at[j]) if j in at else pa.nulls(fields.num_rows, f.type)
                         for j, f in enumerate(self.schema)], schema=self.schema)

    def _stamped(self, typed: pa.Table) -> pa.Table:
        ts = typed.column(self.ts_index)
        if ts.null_count:                  # no event time given: stamped on arrival
            typed = typed.set_column(self.ts_index, self.names[self.ts_index],
                                     pc.fill_null(ts, _arrival(ts.type, self.clock.now())))
        return typed

    def _typed(self, raw: pa.Table, texts: list | None) -> pa.Table:
        """Fields ``c0…`` of text (and ``line``) → the stream's typed columns; a line with a
        value its column's type cannot hold is skipped and logged with the reason."""
        at = {j: i for i, j in enumerate(self.order)}
        casts = ", ".join((f"TRY_CAST(c{at[j]} AS {t})" if j in at else f"CAST(NULL AS {t})")
                          + f' AS "{n}"' for j, (n, t) in enumerate(zip(self.names, self.types)))
        first_bad = " ".join(f"WHEN c{at[j]} IS NOT NULL AND TRY_CAST(c{at[j]} AS {t}) IS NULL "
                             f"THEN {j}" for j, t in enumerate(self.types) if j in at)
        self.con.register("src", raw)
        try:
            typed = self.con.sql(f"SELECT {casts}, CASE {first_bad} END AS __bad, "
                                 "line FROM src").to_arrow_table()
        finally:
            self.con.unregister("src")
        flags = pc.is_valid(typed.column("__bad"))
        if pc.any(flags).as_py():
            columns = typed.column("__bad").to_numpy(zero_copy_only=False)
            for k in np.flatnonzero(flags.to_numpy(zero_copy_only=False)):
                j, row = int(columns[k]), raw.slice(int(k), 1).to_pylist()[0]
                text = texts[k] if texts else self.delimiter.join(
                    row[f"c{i}"] or "" for i in range(len(self.order)))
                self._bad(row["line"], f'invalid input for column "{self.names[j]}" '
                          f"({self.types[j]}): {row[f'c{at[j]}']!r}", text)
            typed = typed.filter(pc.invert(flags))
        return self._stamped(typed.drop_columns(["__bad", "line"]).cast(self.schema))

    def _bad(self, line: int, reason: str, text: str = "") -> None:
        self.bad += 1
        stream = self.obj.relation().name
        self.ingest.progress(stream).bad += 1
        self.ingest.log.error(stream, self.origin, line, reason, text)
        log.warning("source %s, stream %s, line %d: %s; line skipped", self.peer, self.obj.name,
                    line, reason)

    # ------------------------------------------------------------------ the seam
    @property
    def stream(self):
        """The stream it feeds (the seam's name for ``obj``)."""
        return self.obj

    async def open(self) -> None:
        """Nothing to open: the connection is, and its head line was read."""

    async def next_batch(self) -> Batch | None:
        """The next rows or punctuation from the connection's lines, in order; None once
        the sender has closed and a user wrapper's ``done`` has given its last rows."""
        while not self.pending:
            if self.failure is not None:
                raise self.failure
            if self.ended:
                return None
            await self._read_chunk()
        return self.pending.popleft()

    async def commit(self, position: object) -> None:
        """A socket cannot replay: what was taken in is simply gone from its buffer."""

    async def close(self) -> None:
        self.con.close()

    async def _read_chunk(self) -> None:
        limit = self.services.config.max_line_bytes
        try:
            data = await self.reader.read_lines(CHUNK, limit)
        except LineTooLong:
            raise _BadLine(f"a line is longer than the limit ({limit} bytes)") from None
        if self.services.streams.objects.get(self.obj.key) is not self.obj:
            raise _BadLine(f'stream "{self.obj.name}" was dropped')
        if not data:
            self.pending.extend(self._last_batches())
            self.ended = True
            return
        if not data.endswith(b"\n"):             # the last line, at the end of the stream
            data += b"\n"
        # no line of a chunk shorter than the limit can be over it: skip the scan
        over = _first_long_line(data, limit) if limit < len(data) else -1
        # a chunk is read whole (its bad lines logged) before its first batch is handed out
        self.pending.extend(await self.batches_of(data[:over] if over >= 0 else data))
        if over >= 0:           # after the lines before it are handed out
            self.failure = _BadLine(f"a line is longer than the limit ({limit} bytes)")

    # ------------------------------------------------------------------ lines to batches
    def _punctuation(self, text: str) -> Batch | None:
        try:
            value = self.con.sql("SELECT CAST(? AS TIMESTAMP) AS t",
                                 params=[text.strip()]).to_arrow_table().column(0)
        except duckdb.Error:
            self._bad(self.line_no, "punctuation without a timestamp", PUNCTUATE + text)
            return None
        return Batch(punctuation=int(micros(value.combine_chunks())[0]))

    async def batches_of(self, data: bytes) -> list:
        """Whole lines: Arrow parses clean CSV at once; anything else goes line by line."""
        if not data or data.isspace():
            return []
        if len(self.obj.columns) != len(self.names):       # ALTER STREAM … ADD COLUMN
            self._configure()
        # memchr for "#" first: a search for the whole word costs 30 times more per megabyte
        if self.wrapper == "csv" and (data.find(b"#") < 0 or PUNCTUATE_BYTES not in data):
            # Arrow reads without the GIL: a big chunk (a source sending fast) is read in a
            # thread while the loop serves the back end and clients; a small one at once,
            # as the hand-over would only add to its latency
            read = await asyncio.get_running_loop().run_in_executor(
                None, self.read_fast, data) if len(data) >= THREAD_BYTES else None
            table = self.parse_fast(data, read)
            if table is not None:
                return [Batch(rows=table)]
        return self.batches_of_lines(data.decode("utf-8", "replace").split("\n"))

    def batches_of_lines(self, lines: list) -> list:
        data, marks = [], []
        for line in lines:
            if line.startswith(PUNCTUATE):
                marks.append((len(data), line[len(PUNCTUATE):]))
            elif line.strip():
                data.append(line.rstrip("\r"))
        out, start = [], 0
        for at, text in marks + [(len(data), None)]:
            if at > start:
                out.append(Batch(rows=self.parse(data[start:at])))
            start = at
            if text is not None:
                out.append(self._punctuation(text))
        return [b for b in out if b is not None]

    def _last_batches(self) -> list:
        """The sender closed: a user wrapper's ``done`` may give last rows."""
        if not self.user:
            return []
        try:
            rows = _as_rows(self, self.user[2](self.state))
        except Exception as e:            # noqa: BLE001 — a user function's failure
            self._bad(self.line_no, f"wrapper done raised {type(e).__name__}: {e}")
            return []
        return [Batch(rows=self._rows_typed(rows, [self.line_no] * len(rows),
                                            ["done"] * len(rows)))]


class _BadLine(Exception):
    """A line that cannot be read; the message is the reason."""


_END_OF_ARROW = b"\xff\xff\xff\xff\x00\x00\x00\x00"     # the IPC stream's end marker


class ArrowSource(Source):
    """``arrowwrapper``: after its head line the connection carries one Arrow IPC stream (what
    ``pyarrow.ipc.new_stream`` writes), whose batches become the stream's rows as they are,
    with no parsing. Its columns are the stream's by name (any case; a missing one is NULL,
    one the stream lacks closes the connection with an error); each is cast to its column's
    type (UTC for a zoned timestamp), and a batch a cast fails on is skipped and logged like
    a bad line (its number counts batches). A NULL event time is stamped with the arrival."""

    def __init__(self, services: Services, obj, peer: str, reader: SourceStream):
        super().__init__(services, obj, "arrow", peer, None, reader)
        self.buf = b""                    # the start of a message not complete yet …
        self.more: list = []              # … and bytes received since, not joined yet
        self.retry_at = 0                 # bytes held before a message is looked for again
        self.sent: pa.Schema | None = None   # the IPC stream's schema, once read
        self.batch_no = 0
        self.short = ""                   # why the bytes held are no message yet

    async def _read_chunk(self) -> None:
        data = await self.reader.read_some(CHUNK)
        if self.services.streams.objects.get(self.obj.key) is not self.obj:
            raise _BadLine(f'stream "{self.obj.name}" was dropped')
        self.more.append(data)
        held = len(self.buf) + sum(map(len, self.more))
        if data and held < self.retry_at:
            return
        # joined only when the bytes held have doubled since the last look: a message of
        # many receives is copied a few times, not once per receive
        self.buf, self.more = b"".join([self.buf, *self.more]), []
        self.pending.extend(Batch(rows=rows) for rows in self._messages())
        self.retry_at = 2 * len(self.buf)
        if not data:
            if self.buf:
                raise _BadLine(f"the Arrow stream ends inside a message ({self.short})")
            self.ended = True
        elif len(self.buf) > self.services.config.max_message_bytes:
            raise _BadLine(f"an Arrow message is longer than the limit "
                           f"({self.services.config.max_message_bytes} bytes): {self.short}")

    def _messages(self) -> list:
        """The rows of every complete message held (a schema gives none); the bytes left are
        the start of the next message."""
        out, source = [], pa.BufferReader(self.buf)
        # read in place; the bytes left are cut off once, at the end (cutting them after each
        # message copied the rest of the chunk once per message)
        while (at := source.tell()) < len(self.buf):
            if self.buf.startswith(_END_OF_ARROW, at):
                source.seek(at + len(_END_OF_ARROW))
                continue
            try:
                message = pa.ipc.read_message(source)
            except (pa.ArrowInvalid, OSError) as e:     # too short: more to come, or none will
                self.short = str(e)
                source.seek(at)
                break
            if message.type == "schema":
                self.sent = pa.ipc.read_schema(message)
                self._check_columns()
            elif message.type == "record batch" and self.sent is not None:
                self.batch_no += 1
                batch = pa.ipc.read_record_batch(message, self.sent)
                try:
                    # offsets and UTF-8 checked before any kernel reads them: bytes from the
                    # network must not be able to crash the server
                    batch.validate(full=True)
                except pa.ArrowInvalid as e:
                    raise _BadLine(f"batch {self.batch_no} is malformed: {e}") from None
                rows = self._typed_batch(batch)
                if rows is not None and rows.num_rows:
                    out.append(rows)
            else:
                raise _BadLine(f"an Arrow {message.type} message where a "
                               f"{'schema' if self.sent is None else 'record batch'} belongs "
                               "(dictionary-encoded columns are not read: send their values)")
        self.buf = self.buf[source.tell():]
        return out

    def _check_columns(self) -> None:
        lower = [n.lower() for n in self.names]
        unknown = [f.name for f in self.sent if f.name.lower() not in lower]
        if unknown:
            raise _BadLine(f'column "{unknown[0]}" of the Arrow stream is not a column of '
                           f'stream "{self.obj.name}"')

    def _typed_batch(self, batch: pa.RecordBatch) -> pa.Table | None:
        if len(self.obj.columns) != len(self.names):       # ALTER STREAM … ADD COLUMN
            self._configure()
        by_name = {f.name.lower(): i for i, f in enumerate(batch.schema)}
        columns = []
        for name, field in zip(self.names, self.schema):
            at = by_name.get(name.lower())
            if at is None:
                columns.append(pa.nulls(batch.num_rows, field.type))
                continue
            try:
                columns.append(batch.column(at).cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                self._bad(self.batch_no, f'batch {self.batch_no}, column "{name}" '
                          f"({batch.schema.field(at).type} to {field.type}): {e}")
                return None
        self.line_no += batch.num_rows
        return self._stamped(pa.Table.from_arrays(columns, schema=self.schema))


def _fields(values, n: int) -> list:
    """One row as exactly ``n`` text fields in line order (extra ones dropped, missing ones
    NULL, as TelegraphCQ's csvwrapper does)."""
    values = (list(values) + [None] * n)[:n]
    return [None if v is None or v == "" else str(v) for v in values]


def _csv_line(source: Source, line: str) -> list:
    """TelegraphCQ's csvwrapper: extra fields are dropped, missing ones are NULL."""
    try:
        fields = next(csv.reader([line], delimiter=source.delimiter, quotechar=source.quote,
                                 strict=True))
    except csv.Error as e:
        raise _BadLine(f"broken quoting ({e})") from None
    return [_fields(fields, len(source.order))]


def _json_line(source: Source, line: str) -> list:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise _BadLine(f"not JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise _BadLine("not a JSON object")
    low = {k.lower(): v for k, v in obj.items()}
    return [_fields((low.get(source.names[j].lower()) for j in source.order),
                    len(source.order))]


def _as_rows(source: Source, got) -> list:
    """A user wrapper's answer → rows of text fields in the stream's column order: one row
    (a dict by column name, or a sequence), a list of rows, or None (nothing)."""
    if got is None:
        return []
    if isinstance(got, dict) or (isinstance(got, (tuple, list)) and got and
                                 not isinstance(got[0], (dict, tuple, list))):
        got = [got]
    rows = []
    for r in got:
        if isinstance(r, dict):
            low = {str(k).lower(): v for k, v in r.items()}
            r = [low.get(source.names[j].lower()) for j in source.order]
        rows.append(_fields(r, len(source.order)))
    return rows


def _user_line(source: Source, line: str) -> list:
    try:
        return _as_rows(source, source.user[1](source.state, line))
    except Exception as e:                # noqa: BLE001 — a user function's failure is data
        raise _BadLine(f"wrapper raised {type(e).__name__}: {e}") from None


_PARSERS = {"csv": _csv_line, "json": _json_line, "user": _user_line}


def _inside(path: str | None, dirs: list) -> bool:
    real = os.path.realpath(path or "")
    return any(real.startswith(os.path.realpath(d) + os.sep) for d in dirs)


def load_wrapper(options: dict, dirs: list) -> tuple:
    """A user wrapper's (init, next, done), each imported from its module path. Only modules
    in the wrapper folders ``dirs`` may be named: CREATE WRAPPER is SQL any user may send, and
    must not reach ``os.rename`` or any other function the server could import."""
    importlib.invalidate_caches()
    sys.path.extend(d for d in dirs if d not in sys.path)
    where = f"the wrapper folders ({', '.join(dirs)}; more with --wrapper-path)"
    out = []
    for key in ("init", "next", "done"):
        module, _, func = options[key].rpartition(".")
        top = module.split(".")[0]
        if importlib.machinery.PathFinder.find_spec(top, dirs) is None:
            raise ImportError(f"module {top!r} is not in {where}")
        loaded = importlib.import_module(module)
        if not _inside(getattr(sys.modules[top], "__file__", None), dirs):
            raise ImportError(f"module name {top!r} is taken by a module outside {where}; "
                              "rename the wrapper's module")
        out.append(getattr(loaded, func))
    return tuple(out)


def _wrapper_for(services: Services, obj, name: str) -> tuple[str, tuple | None]:
    """(kind, user functions) of the wrapper a source names; user wrappers must be attached
    to the stream (ALTER STREAM s ADD WRAPPER w)."""
    kind = WRAPPERS.get(name)
    if kind is not None:
        return kind, None
    defined = services.streams.get("public", name, kinds=("wrapper",))
    if defined is None:
        raise _BadLine(f'unknown wrapper "{name}"')
    if name not in obj.options.get("wrappers", []):
        raise _BadLine(f'wrapper "{name}" is not attached to stream "{obj.name}" '
                       f"(ALTER STREAM {obj.name} ADD WRAPPER {name})")
    try:
        return "user", load_wrapper(defined.options, services.wrapper_dirs)
    except (ImportError, AttributeError) as e:
        raise _BadLine(f'wrapper "{name}" cannot be loaded: {e}') from None


def _source(services: Services, head: str, peer: str, reader: SourceStream) -> Source:
    """The source a first line ``<wrapper>,<stream>[,<role>[,<password>]]`` asks for, or
    _BadLine saying why not."""
    wrapper, target, role, password = (head.split(",", 3) + [None, None, None])[:4]
    wrapper = wrapper.strip().lower()
    schema, _, name = (target or "").strip().rpartition(".")
    obj = services.streams.get(schema or None, name, kinds=("stream",)) if name else None
    if obj is None:
        known = wrapper in (*WRAPPERS, ARROW_WRAPPER) or \
            services.streams.get("public", wrapper, kinds=("wrapper",)) is not None
        if not known:
            raise _BadLine(f'unknown wrapper "{wrapper}"')
        raise _BadLine(f'stream "{(target or "").strip()}" does not exist')
    _may_feed(services, obj, role.strip() if role else None, password)
    if obj.options.get("source"):
        raise _BadLine(f'stream "{obj.name}" follows a PostgreSQL table: its rows come only '
                       "from there")
    if wrapper == ARROW_WRAPPER:
        return ArrowSource(services, obj, peer, reader)
    kind, user = _wrapper_for(services, obj, wrapper)
    try:
        return Source(services, obj, kind, peer, user, reader)
    except Exception as e:                # noqa: BLE001 — a user init's failure
        raise _BadLine(f'wrapper "{wrapper}" failed to start: {type(e).__name__}: {e}') \
            from None


def _may_feed(services: Services, obj, role: str | None, password: str | None) -> None:
    """A source writes as the role its first line names (with its password unless the server
    trusts), or as ``--ingest-role``, or under trust as the bootstrap superuser; that role must
    be allowed to log in and needs INSERT on the stream (checked when the source connects)."""
    config, roles = services.config, services.roles
    named = role is not None
    if not named:
        role = config.ingest_role or (roles.bootstrap if config.auth == "trust" else None)
        if role is None:
            raise _BadLine("name a role and its password after the stream: "
                           "<wrapper>,<stream>,<role>,<password>")
    found = roles.get(role)
    if named and config.auth != "trust" and (
            found is None or password is None
            or not check_password(found.verifier, password.rstrip("\r"))):
        raise _BadLine(f'password authentication failed for user "{role}"')
    if found is None:
        raise _BadLine(f'role "{role}" does not exist')
    if not found.login:
        raise _BadLine(f'role "{role}" is not permitted to log in')
    if not services.grants.allowed(role, "INSERT", obj.key):
        raise _BadLine(f"permission denied for stream {obj.name}")


def _first_long_line(buf: bytes, limit: int) -> int:
    """Where the first line longer than ``limit`` bytes starts in ``buf`` (whole lines), or
    -1."""
    half = max(limit // 2, 1)
    # when every stretch of limit/2 bytes holds a newline, no line can be longer than the
    # limit: a few memchr calls instead of finding every newline
    if all(buf.find(b"\n", i, i + half) >= 0 for i in range(0, len(buf), half)):
        return -1
    ends = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
    starts = np.concatenate([[0], ends[:-1] + 1])
    long = np.flatnonzero(ends - starts > limit)
    return int(starts[long[0]]) if len(long) else -1


async def handle(services: Services, stream: SourceStream) -> None:
    peer = stream.peer()
    limit = services.config.max_line_bytes
    source = None
    try:
        head = (await stream.readline(limit)).decode("utf-8", "replace").strip()
        source = _source(services, head, peer, stream)
        log.info("source %s feeds stream %s with %s", peer, source.obj.name,
                 head.partition(",")[0].strip())
        await feed(source, services.ingest)
    except _BadLine as e:
        log.warning("source %s: %s; connection closed", peer, e)
        stream.write(f"ERROR: {e}\n".encode())
        await stream.linger()
    except (ConnectionError, LineTooLong, ValueError):
        pass
    finally:
        if source is not None:
            log.info("source %s done: %d tuple(s), %d bad line(s)", peer, source.accepted,
                     source.bad)
        stream.close()
