"""The archive of ``TYPE ARCHIVED`` streams: every tuple the clearinghouse takes in, late ones
included, appended to Parquet under ``<data-dir>/archive/<schema>.<stream>/``, cut into time
fragments of the stream's ``fragment`` length r (seed 002's S[t0+ir, t0+(i+1)r], t0 the Unix
epoch) as hive partitions ``fragment=<start µs>``, so Spark and DuckDB prune by time.

Each append is durable before it returns (written to a temporary name, fsynced, renamed, the
directory fsynced), so an acknowledged COPY survives ``kill -9``. An append is all or nothing:
one that touches several fragments (a file each) names its files in a journal before it
renames any, so a crash part-way is finished at the next start, and one before the journal
leaves none of them (a COPY the server did not acknowledge is never half in). Small files are
compacted into one per fragment; readers hold ``reading(stream)`` while they list and read
files, and compaction waits for them, so no reader sees a tuple twice or misses one.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dialect.intervals import interval_us
from executor import wire
from gateway.durable import fsync_dir, make_dirs, write_text

DEFAULT_FRAGMENT = "1 hour"
COMPACT_AT = 8                 # parts in a fragment before they are merged into one


JOURNAL = ".compaction.json"
APPENDING = ".append-"         # + stamp + ".json": an append's journal, in the stream's folder


def _finish_compaction(folder: str) -> None:
    """After a compaction's journal: the merged file is there, so its parts go; or it is not,
    so the parts stay. Either way the journal goes."""
    journal = os.path.join(folder, JOURNAL)
    with open(journal) as f:
        job = json.load(f)
    if os.path.exists(os.path.join(folder, job["merged"])):
        for p in job["parts"]:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, p))
    os.remove(journal)
    fsync_dir(folder)


def _hidden(path: str) -> str:
    """The temporary name ``path`` is written under (readers and compaction skip it; the
    next start removes it unless an append's journal names it)."""
    return os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")


def _write_hidden(table: pa.Table, path: str) -> None:
    """``table`` as Parquet under ``path``'s temporary name, on disk, not yet visible."""
    make_dirs(os.path.dirname(path))
    tmp = _hidden(path)
    pq.write_table(table, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())


def _reveal(path: str) -> None:
    """The file written under ``path``'s temporary name becomes ``path``, durably."""
    os.replace(_hidden(path), path)
    fsync_dir(os.path.dirname(path))


def write_durably(table: pa.Table, path: str) -> None:
    """``table`` as the Parquet file ``path``, on disk before this returns."""
    _write_hidden(table, path)
    _reveal(path)


def _commit_together(base: str, paths: list) -> None:
    """Make ``paths`` (files under ``base`` already on disk under their temporary names)
    visible together: the journal naming them is on disk before the first rename, so a crash
    after it is finished at the next start (``_finish_append``), and one before it leaves
    only temporary files, which that start removes."""
    journal = os.path.join(base, f"{APPENDING}{time.time_ns()}-{threading.get_ident()}.json")
    write_text(journal, json.dumps([os.path.relpath(p, base) for p in paths]))
    _finish_append(base, journal)


def _finish_append(base: str, journal: str) -> None:
    """Rename every file an append's journal names to its visible name (one renamed before a
    crash is already there), then the journal goes."""
    with open(journal) as f:
        paths = [os.path.join(base, p) for p in json.load(f)]
    for path in paths:
        with contextlib.suppress(FileNotFoundError):    # renamed before the crash
            os.replace(_hidden(path), path)
    for folder in {os.path.dirname(p) for p in paths}:
        fsync_dir(folder)
    os.remove(journal)
    fsync_dir(base)


def _top(path: str, ts_column: str) -> int | None:
    """The largest ``ts_column`` value in one Parquet file, as µs."""
    meta = pq.ParquetFile(path).metadata
    j = meta.schema.to_arrow_schema().get_field_index(ts_column)
    tops = []
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(j).statistics
        if st is None or not st.has_min_max:           # no statistics: read the column
            col = pq.read_table(path, columns=[ts_column]).column(0)
            values = wire.micros(col.combine_chunks()).to_numpy(zero_copy_only=False)
            return int(values.max()) if len(values) else None
        tops.append(st.max)
    if not tops:
        return None
    top = max(tops)
    return top if isinstance(top, int) else wire.micros(pa.array([top])).to_pylist()[0]


class _ReadWriteLock:
    """Many readers, or one compactor."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextlib.contextmanager
    def read(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def write(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and self._readers == 0)
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class Archive:
    def __init__(self, data_dir: str):
        self.root = os.path.join(data_dir, "archive")
        self._locks: dict = {}
        self._guard = threading.Lock()
        self._seq = itertools.count()
        self._parts: dict = {}           # fragment folder -> files in it (what compaction sees)
        self._recover()

    def _recover(self) -> None:
        """Finish appends and compactions a crash interrupted; drop half-written temporary
        files (appends first: the temporary files their journals name are kept)."""
        streams = os.listdir(self.root) if os.path.isdir(self.root) else []
        for stream in streams:
            base = os.path.join(self.root, stream)
            if os.path.isdir(base):
                for n in sorted(os.listdir(base)):
                    if n.startswith(APPENDING) and n.endswith(".json"):
                        _finish_append(base, os.path.join(base, n))
        for folder, _, names in os.walk(self.root):
            if JOURNAL in names:
                _finish_compaction(folder)
            for n in names:
                if n.startswith(".") and n.endswith(".tmp"):
                    os.remove(os.path.join(folder, n))
            if os.path.basename(folder).startswith("fragment="):
                self._parts[folder] = len([n for n in os.listdir(folder)
                                           if n.endswith(".parquet") and not n.startswith(".")])

    def path(self, key: str) -> str:
        """The folder of stream ``key`` (``schema.name``)."""
        return os.path.join(self.root, key.lower())

    def _lock(self, key: str) -> _ReadWriteLock:
        with self._guard:
            return self._locks.setdefault(key.lower(), _ReadWriteLock())

    def append(self, key: str, ts_column: str, fragment: str | None, table: pa.Table) -> None:
        """Add ``table`` (the stream's typed rows) to the archive, one file per fragment it
        touches."""
        if table.num_rows == 0:
            return
        r = interval_us(fragment or DEFAULT_FRAGMENT)
        ts = wire.micros(table.column(ts_column).combine_chunks()).to_numpy(
            zero_copy_only=False)
        starts = ts // r * r
        stamp = f"{time.time_ns()}-{os.getpid()}"
        with self._lock(key).read():        # appends may run while others read, not compaction
            paths = []
            for start in np.unique(starts):
                rows = table.filter(pa.array(starts == start))
                folder = os.path.join(self.path(key), f"fragment={int(start)}")
                paths.append(os.path.join(folder, f"part-{stamp}-{next(self._seq)}.parquet"))
                _write_hidden(rows, paths[-1])
            if len(paths) == 1:              # one rename is all or nothing by itself
                _reveal(paths[0])
            else:
                _commit_together(self.path(key), paths)
            with self._guard:
                for path in paths:
                    folder = os.path.dirname(path)
                    self._parts[folder] = self._parts.get(folder, 0) + 1

    def reading(self, key: str):
        """Hold the stream's files still (no compaction) while a query lists and reads them."""
        return self._lock(key).read()

    def files(self, key: str, low_us: int | None = None, high_us: int | None = None,
              fragment: str | None = None) -> list:
        """The Parquet files holding tuples with low ≤ ts < high (fragments pruned by name)."""
        r = interval_us(fragment or DEFAULT_FRAGMENT)
        out = []
        base = self.path(key)
        if not os.path.isdir(base):
            return out
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("fragment="):
                continue
            start = int(entry.split("=", 1)[1])
            if (high_us is not None and start >= high_us) or \
                    (low_us is not None and start + r <= low_us):
                continue
            folder = os.path.join(base, entry)
            out += [os.path.join(folder, f) for f in sorted(os.listdir(folder))
                    if f.endswith(".parquet") and not f.startswith(".")]
        return out

    def read(self, key: str, ts_column: str, after_us: int | None, until_us: int | None,
             fragment: str | None = None) -> pa.Table | None:
        """The archived tuples with after < ts ≤ until (either edge open when None), in
        event-time order; None when there are none."""
        with self.reading(key):
            files = self.files(key, None if after_us is None else after_us + 1,
                               None if until_us is None else until_us + 1, fragment)
            if not files:
                return None
            table = pa.concat_tables([pq.read_table(f) for f in files],
                                     promote_options="default")
        ts = wire.micros(table.column(ts_column).combine_chunks())
        keep = np.ones(len(ts), bool)
        values = ts.to_numpy(zero_copy_only=False)
        if after_us is not None:
            keep &= values > after_us
        if until_us is not None:
            keep &= values <= until_us
        table = table.filter(pa.array(keep))
        return table.sort_by([(ts_column, "ascending")]) if table.num_rows else None

    def latest(self, key: str, ts_column: str) -> int | None:
        """The newest event time archived (µs), from the Parquet statistics of the last
        fragment's files; None for an empty archive."""
        with self.reading(key):
            base = self.path(key)
            folders = sorted((e for e in os.listdir(base) if e.startswith("fragment=")),
                             key=lambda e: int(e.split("=", 1)[1])) \
                if os.path.isdir(base) else []
            for entry in reversed(folders):
                folder = os.path.join(base, entry)
                tops = [_top(os.path.join(folder, f), ts_column) for f in os.listdir(folder)
                        if f.endswith(".parquet") and not f.startswith(".")]
                tops = [t for t in tops if t is not None]
                if tops:
                    return max(tops)
        return None

    def compact(self, key: str) -> int:
        """Merge the small files of each fragment that has gathered COMPACT_AT of them into
        one (only those folders are looked at); returns how many files went."""
        base = self.path(key) + os.sep
        with self._guard:
            due = [f for f, n in self._parts.items() if f.startswith(base) and n >= COMPACT_AT]
        gone = 0
        for folder in due:
            parts = sorted(f for f in os.listdir(folder)
                           if f.endswith(".parquet") and not f.startswith("."))
            with self._lock(key).write():
                merged = pa.concat_tables([pq.read_table(os.path.join(folder, p))
                                           for p in parts], promote_options="default")
                name = f"part-{time.time_ns()}-{os.getpid()}-c.parquet"
                # a journal first, whole and named on disk before the merged file is: a crash
                # part-way is finished (or undone) at the next start
                write_text(os.path.join(folder, JOURNAL),
                           json.dumps({"merged": name, "parts": parts}),
                           tmp=_hidden(os.path.join(folder, JOURNAL.lstrip("."))))
                write_durably(merged, os.path.join(folder, name))
                _finish_compaction(folder)
                with self._guard:
                    self._parts[folder] -= len(parts) - 1
            gone += len(parts) - 1
        return gone

    def drop(self, key: str) -> None:
        with self._lock(key).write():
            shutil.rmtree(self.path(key), ignore_errors=True)
        with self._guard:
            for folder in [f for f in self._parts if f.startswith(self.path(key) + os.sep)]:
                del self._parts[folder]

    def streams(self) -> list:
        return sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []

    def usage(self) -> list:
        """(stream key, fragments, bytes) of each archived stream, read while its files hold
        still (no compaction meanwhile); a stream dropped meanwhile is left out."""
        out = []
        for key in self.streams():
            with self.reading(key):
                try:
                    out.append((key, *self._usage_of(key)))
                except FileNotFoundError:
                    continue
        return out

    def _usage_of(self, key: str) -> tuple[int, int]:
        fragments = size = 0
        with os.scandir(self.path(key)) as entries:
            for entry in entries:
                if entry.name.startswith("fragment=") and entry.is_dir():
                    fragments += 1
                    with os.scandir(entry.path) as files:
                        size += sum(f.stat().st_size for f in files
                                    if f.name.endswith(".parquet") and f.is_file())
        return fragments, size
