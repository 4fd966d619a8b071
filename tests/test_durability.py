"""The order of the durability calls of every writer that says its files survive a crash: the
catalog's documents (``catalog_files.save``), the archive's appends (one fragment, several
fragments under a journal) and compactions, the clearinghouse's spool releases and readers'
marks, a derived stream's Spark micro-batch files (``streaming.keep_rows``), and
``durable.fsync_dir`` itself.

The contract (gateway/durable.py): the data is written under a temporary name beside the
final one, that file is fsynced once all of it is written, it is renamed into place, then its
folder is fsynced. The crash tests cannot see this: ``kill -9`` keeps the page cache, so a
writer with no fsync at all passes them. Here ``os.fsync``, ``os.replace``/``os.rename`` and
each module's own ``fsync_dir`` are wrapped to record, in order, which path each call was for,
while the writers run for real on a temporary directory."""
from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gateway import catalog_files, durable
from gateway.archive import storage
from gateway.clearinghouse import spool
from gateway.spark_engine import streaming     # keep_rows alone: no Spark is started


def _real(path) -> str:
    """``path`` with its folder resolved, as /proc/self/fd names an open file (the file
    itself may be gone by the time it is compared)."""
    path = os.fspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


class Calls:
    """The durability calls made while a test runs, in order, each with the path it was for:
    ("fsync", path, size then), ("rename", src, dst, size of src then), ("fsync_dir", path)."""

    def __init__(self):
        self.events: list[tuple] = []

    def clear(self) -> None:
        self.events.clear()

    def renames_to(self, final) -> list[int]:
        final = _real(final)
        return [i for i, e in enumerate(self.events) if e[0] == "rename" and e[2] == final]

    def renames(self) -> list[tuple[int, tuple]]:
        return [(i, e) for i, e in enumerate(self.events) if e[0] == "rename"]

    def check_durable(self, final) -> int:
        """Assert ``final`` was written by the contract; the index of its rename."""
        final = _real(final)
        at = self.renames_to(final)
        assert len(at) == 1, f"one rename into {final} expected: {self.events}"
        r = at[0]
        _, src, dst, size = self.events[r]
        # a temporary name beside the final one: the rename stays in one folder (atomic)
        assert src != dst and os.path.dirname(src) == os.path.dirname(dst), self.events[r]
        fsyncs = [e for e in self.events[:r] if e[0] == "fsync" and e[1] == src]
        assert fsyncs, f"{src} renamed to {dst} without an fsync before: {self.events}"
        # the last fsync saw every byte the rename publishes: nothing written after it
        assert fsyncs[-1][2] == size, f"{src} fsynced at {fsyncs[-1][2]} bytes, renamed at {size}"
        folder = os.path.dirname(dst)
        after = [e for e in self.events[r + 1:] if e == ("fsync_dir", folder)]
        assert after, f"folder {folder} not fsynced after the rename into it: {self.events}"
        return r

    def first_dir_fsync_after(self, i: int, folder) -> int:
        folder = _real(folder)
        return next(j for j in range(i + 1, len(self.events))
                    if self.events[j] == ("fsync_dir", folder))


def _modules():
    """The writer modules whose ``fsync_dir`` is wrapped."""
    return [storage, catalog_files, spool, streaming]


@pytest.fixture
def calls(monkeypatch) -> Calls:
    rec = Calls()
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename
    real_fsync_dir = durable.fsync_dir

    def fsync(fd):
        fd = fd if isinstance(fd, int) else fd.fileno()
        rec.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))
        real_fsync(fd)

    def renamer(real):
        def rename(src, dst, *args, **kwargs):
            size = os.stat(src).st_size if os.path.isfile(src) else None
            rec.events.append(("rename", _real(src), _real(dst), size))
            return real(src, dst, *args, **kwargs)
        return rename

    def fsync_dir(path):
        rec.events.append(("fsync_dir", _real(path.rstrip(os.sep) or os.sep)))
        real_fsync_dir(path)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", renamer(real_replace))
    monkeypatch.setattr(os, "rename", renamer(real_rename))
    for mod in [durable, *_modules()]:     # each module calls the name it imported
        monkeypatch.setattr(mod, "fsync_dir", fsync_dir)
    return rec


def _rows(*hours: int) -> pa.Table:
    """Rows of an archived stream, one at each of ``hours`` past 2026-01-01 00:00 UTC."""
    base = dt.datetime(2026, 1, 1)
    return pa.table({"k": pa.array(list(range(len(hours))), pa.int64()),
                     "v": pa.array([f"row {h}" for h in hours]),
                     "ts": pa.array([base + dt.timedelta(hours=h, minutes=1) for h in hours],
                                    pa.timestamp("us"))})


def test_fsync_dir_fsyncs_the_folder_itself(calls, tmp_path):
    # the other tests trust fsync_dir; here it must fsync a descriptor of that very folder
    durable.fsync_dir(str(tmp_path))
    assert [e[:2] for e in calls.events if e[0] == "fsync"] == [("fsync", _real(tmp_path))]


def test_catalog_document_is_written_durably(calls, tmp_path):
    data = str(tmp_path)
    catalog_files.save(data, "roles.json", {"roles": ["cq"]})
    calls.check_durable(catalog_files.path(data, "roles.json"))
    calls.clear()
    # replacing an existing document: the old one stays whole until the rename
    catalog_files.save(data, "roles.json", {"roles": ["cq", "alice"]})
    calls.check_durable(catalog_files.path(data, "roles.json"))
    assert catalog_files.load(data, "roles.json") == {"roles": ["cq", "alice"]}


def test_archive_append_to_one_fragment_is_durable(calls, tmp_path):
    archive = storage.Archive(str(tmp_path))
    archive.append("public.s", "ts", "1 hour", _rows(0, 0, 0))
    files = archive.files("public.s")
    assert len(files) == 1
    calls.check_durable(files[0])
    assert pq.read_table(files[0]).num_rows == 3


def test_archive_append_over_fragments_commits_a_durable_journal_first(calls, tmp_path):
    archive = storage.Archive(str(tmp_path))
    archive.append("public.s", "ts", "1 hour", _rows(0, 1, 2))
    files = archive.files("public.s")
    assert len(files) == 3
    renames = {e[2]: i for i, e in calls.renames()}
    journals = [dst for dst in renames if os.path.basename(dst).startswith(storage.APPENDING)]
    assert len(journals) == 1, calls.events
    j = calls.check_durable(journals[0])
    # the journal's name is on disk (its folder fsynced) before any part becomes visible, so
    # a crash after one part's rename finds the journal that finishes the others
    on_disk = calls.first_dir_fsync_after(j, archive.path("public.s"))
    for f in files:
        assert calls.check_durable(f) > on_disk
    assert sum(pq.read_table(f).num_rows for f in files) == 3


def test_archive_compaction_writes_its_merged_file_durably(calls, tmp_path):
    archive = storage.Archive(str(tmp_path))
    for _ in range(storage.COMPACT_AT):
        archive.append("public.s", "ts", "1 hour", _rows(0))
    calls.clear()
    assert archive.compact("public.s") == storage.COMPACT_AT - 1
    (merged,) = archive.files("public.s")
    r = calls.check_durable(merged)
    # the compaction's journal is written by the same contract, and its name is on disk
    # (its folder fsynced) before the merged file appears (the code before wrote it in place:
    # a crash could leave half a journal, which the next start could not read)
    journal = os.path.join(os.path.dirname(merged), storage.JOURNAL)
    j = calls.check_durable(journal)
    assert calls.first_dir_fsync_after(j, os.path.dirname(merged)) < r
    assert pq.read_table(merged).num_rows == storage.COMPACT_AT


def test_spool_release_is_durable(calls, tmp_path):
    folder = str(tmp_path / "spool" / "public.s")
    writer = spool.SpoolWriter(folder, pa.schema([("k", pa.int64())]))
    for k in range(2):
        seq = writer.append(pa.table({"k": pa.array([k], pa.int64())}), watermark=k)
        calls.check_durable(os.path.join(folder, spool.file_name(seq)))
    assert spool.read(folder, 2)[0].column("k").to_pylist() == [1]


def test_spool_reader_mark_is_fsynced_before_its_rename(calls, tmp_path):
    # a crash must leave the old mark or the new one, whole
    folder = str(tmp_path)
    spool.commit(folder, "q1", 7)
    mark = os.path.join(folder, "committed.q1")
    (r,) = calls.renames_to(mark)
    _, src, _, size = calls.events[r]
    assert ("fsync", src, size) in calls.events[:r], calls.events
    assert spool.committed(folder) == {"q1": 7}


def test_spool_reader_mark_folder_is_fsynced(calls, tmp_path):
    # (the code before renamed the mark without fsyncing its folder: a reader's first mark
    # could be lost in a crash, and the server's start would drop the spool as unread)
    spool.commit(str(tmp_path), "q1", 7)
    calls.check_durable(os.path.join(str(tmp_path), "committed.q1"))


def test_spark_micro_batch_file_is_durable(calls, tmp_path):
    table = pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", None]})
    streaming.keep_rows(str(tmp_path), 3, table)
    path = os.path.join(str(tmp_path), "batch-000000000003.parquet")
    calls.check_durable(path)
    assert pq.read_table(path).equals(table)
    calls.clear()
    # Spark runs an uncommitted batch again: the same file is written over, as durably
    streaming.keep_rows(str(tmp_path), 3, table)
    calls.check_durable(path)
