"""A stream's spool: the tuples the clearinghouse releases (after the slack, in valid_from
order) and the punctuation after them, as numbered Arrow files a reader can replay from any
offset, for engines outside the back end (Spark Structured Streaming) that restart from a
checkpoint.

Each release is one file ``<seq>.arrow`` (an Arrow IPC file, seq counting from 1 with no
gaps), written to a hidden name, flushed to disk and renamed into place, so a reader never
sees half a file; its schema's metadata holds the watermark that follows it. A reader says
how far it has committed (``commit``); files every registered reader has committed are
deleted. Unlike the archive, whose compaction renames files, a spool file keeps its name
until it is deleted.
"""
from __future__ import annotations

import os
import re
import shutil
import threading

import pyarrow as pa
import pyarrow.ipc as ipc

from gateway.durable import fsync_dir, write_text

FOLDER = "spool"          # the spools' folder, under the data directory
WATERMARK_KEY = b"cqgate.watermark"
_FILE = re.compile(r"^(\d{16})\.arrow$")
_READER = re.compile(r"^committed\.([A-Za-z0-9_.-]+)$")


def file_name(seq: int) -> str:
    return f"{seq:016d}.arrow"


def sequences(path: str) -> list[int]:
    """The spool's file numbers, in order."""
    if not os.path.isdir(path):
        return []
    return sorted(int(m.group(1)) for m in map(_FILE.match, os.listdir(path)) if m)


def read(path: str, seq: int) -> tuple[pa.Table, int | None]:
    """File ``seq``: its tuples and the watermark after them (None if it has none)."""
    with ipc.open_file(os.path.join(path, file_name(seq))) as f:
        table = f.read_all()
    mark = (table.schema.metadata or {}).get(WATERMARK_KEY)
    return table.replace_schema_metadata(None), int(mark) if mark is not None else None


def watermark_at(path: str, seq: int) -> int | None:
    """The watermark after file ``seq`` (None: it has none, or it is gone)."""
    try:
        with ipc.open_file(os.path.join(path, file_name(seq))) as f:
            mark = (f.schema.metadata or {}).get(WATERMARK_KEY)
    except FileNotFoundError:
        return None
    return int(mark) if mark is not None else None


def with_columns(table: pa.Table, names: list, schema: pa.Schema | None = None) -> pa.Table:
    """``table`` with exactly the columns ``names``, in that order: one it lacks (added to the
    stream after the table was written) as NULLs of ``schema``'s type (or null)."""
    n = table.num_rows
    cols = [table.column(c) if c in table.column_names else
            pa.nulls(n, schema.field(c).type if schema is not None else pa.null())
            for c in names]
    return pa.table(cols, names=names)


class SpoolWriter:
    """Appends releases to one stream's spool directory, numbering on from what is there."""

    def __init__(self, path: str, schema: pa.Schema):
        self.path = path
        self.schema = schema
        os.makedirs(path, exist_ok=True)
        known = sequences(path)
        self.last = known[-1] if known else self._committed_floor()

    def append(self, batch: pa.RecordBatch | pa.Table | None, watermark: int | None) -> int:
        """Write one release (tuples, possibly none, and the watermark after them); its
        number."""
        seq = self.last + 1
        table = batch if isinstance(batch, pa.Table) else \
            pa.Table.from_batches([batch] if batch is not None else [], schema=self.schema)
        meta = {WATERMARK_KEY: str(watermark).encode()} if watermark is not None else None
        table = with_columns(table, self.schema.names, self.schema).cast(self.schema) \
            .replace_schema_metadata(meta)
        hidden = os.path.join(self.path, f".{seq}.tmp")
        with open(hidden, "wb") as out:
            with ipc.new_file(out, table.schema) as w:
                w.write_table(table)
            out.flush()
            os.fsync(out.fileno())
        os.replace(hidden, os.path.join(self.path, file_name(seq)))
        fsync_dir(self.path)
        self.last = seq
        return seq

    def prune(self) -> int:
        """Delete the files every registered reader has committed but the newest of them,
        whose watermark a reader that reads on from there still asks for; how many went."""
        floor = self._committed_floor()
        gone = 0
        for seq in sequences(self.path):
            if seq >= floor:
                break
            os.remove(os.path.join(self.path, file_name(seq)))
            gone += 1
        return gone

    def _committed_floor(self) -> int:
        marks = committed(self.path)
        return min(marks.values()) if marks else 0


def committed(path: str) -> dict[str, int]:
    """How far each registered reader has committed."""
    out = {}
    if os.path.isdir(path):
        for name in os.listdir(path):
            m = _READER.match(name)
            if m:
                with open(os.path.join(path, name)) as f:
                    out[m.group(1)] = int(f.read().strip() or 0)
    return out


def commit(path: str, reader: str, seq: int) -> None:
    """Reader ``reader`` has what came up to file ``seq`` (written atomically)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", reader):
        raise ValueError(f"bad spool reader name {reader!r}")
    write_text(os.path.join(path, f"committed.{reader}"), str(seq),
               tmp=os.path.join(path, f".committed.{reader}.tmp"))


def forget(path: str, reader: str) -> None:
    """Reader ``reader`` is gone: what it had not read need not be kept for it."""
    try:
        os.remove(os.path.join(path, f"committed.{reader}"))
    except FileNotFoundError:
        pass


def clean_start(root: str, keep) -> None:
    """At a server's start: the marks of readers that do not go on (``keep(reader)`` false:
    a cursor's query) go, and with them every spool no reader is left for."""
    if not os.path.isdir(root):
        return
    for stream in os.listdir(root):
        path = os.path.join(root, stream)
        for reader in committed(path):
            if not keep(reader):
                forget(path, reader)
        if not committed(path):
            shutil.rmtree(path, ignore_errors=True)


PRUNE_EVERY = 32        # releases between two looks for files every reader has committed


class Spools:
    """The spools of the streams that queries outside the back end read, one folder each
    under ``root``: a stream is spooled from the moment its first reader comes (which reads
    from there on) until its last goes (then its folder goes too)."""

    def __init__(self, root: str):
        self.root = root
        self.writers: dict = {}         # stream (lower) -> SpoolWriter
        self.readers: dict = {}         # stream (lower) -> set of reader names
        self.marks: dict = {}           # stream (lower) -> the last watermark written
        self._lock = threading.Lock()   # readers come and go while releases are written

    def path(self, stream: str) -> str:
        return os.path.join(self.root, stream.lower())

    def tapped(self, stream: str) -> bool:
        return stream.lower() in self.writers

    def open(self, stream: str, schema: pa.Schema, reader: str, resume: bool = False) -> str:
        """Spool ``stream`` for ``reader``, who reads what comes from now on (``resume``: from
        where it committed, if it did: a query restarted from its checkpoint); its folder."""
        name = stream.lower()
        with self._lock:
            writer = self.writers.get(name)
            if writer is None:
                writer = self.writers[name] = SpoolWriter(self.path(name), schema)
            wider = [f for f in schema if f.name not in writer.schema.names]
            if wider:           # a column added to the stream since: written from now on
                writer.schema = pa.schema(list(writer.schema) + wider)
            if not (resume and reader in committed(writer.path)):
                commit(writer.path, reader, writer.last)
            self.readers.setdefault(name, set()).add(reader)
            return writer.path

    def close(self, stream: str, reader: str) -> None:
        name = stream.lower()
        with self._lock:
            left = self.readers.get(name, set())
            left.discard(reader)
            if name not in self.writers:
                return
            forget(self.writers[name].path, reader)
            if not left:
                writer = self.writers.pop(name)
                self.readers.pop(name, None)
                self.marks.pop(name, None)
                if not committed(writer.path):     # a reader that did not start yet stays
                    shutil.rmtree(writer.path, ignore_errors=True)

    def release(self, stream: str, table: pa.Table | None, watermark: int | None) -> None:
        """What the slack let go of ``stream`` (maybe nothing) and its watermark after, as
        one file when either is new."""
        name = stream.lower()
        rows = table is not None and table.num_rows > 0
        with self._lock:
            writer = self.writers.get(name)
            if writer is None or (not rows and watermark == self.marks.get(name)):
                return
            seq = writer.append(table if rows else None, watermark)
            self.marks[name] = watermark
            if seq % PRUNE_EVERY == 0:
                writer.prune()
