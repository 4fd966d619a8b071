"""A result queue's overflow on disk: Arrow IPC files (LZ4-compressed) in the data directory,
written and read back first in, first out, one segment at a time; removed once read.

Segments are closed at ``segment_bytes`` of Arrow data, so reading one back never needs more
memory than that (plus one batch); ``disk_bytes`` is what the files take, compressed.
"""
from __future__ import annotations

import collections
import itertools
import os
import shutil

import pyarrow as pa

FOLDER = "result_spill"                          # under the data directory
_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_names = itertools.count(1)


def clear(data_dir: str) -> str:
    """The spill folder, emptied: files left by a server that did not stop cleanly belong to
    no query."""
    folder = os.path.join(data_dir, FOLDER)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    return folder


class _Segment:
    def __init__(self, path: str, schema: pa.Schema):
        self.path = path
        self.sink = pa.OSFile(path, "wb")
        self.writer = pa.ipc.new_file(self.sink, schema, options=_OPTIONS)
        self.rows = 0
        self.arrow_bytes = 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = None

    @property
    def disk_bytes(self) -> int:
        return self.sink.tell() if self.writer is not None else os.path.getsize(self.path)


class Spill:
    """Tables written in order, read back in the same order, a segment at a time."""

    def __init__(self, folder: str, prefix: str, segment_bytes: int):
        self.folder, self.prefix = folder, prefix
        self.segment_bytes = max(1 << 16, segment_bytes)
        self.segments: collections.deque = collections.deque()
        self.rows = 0                 # rows on disk, not yet read back
        self._closed_disk = 0         # compressed bytes of the closed, unread segments

    @property
    def disk_bytes(self) -> int:
        last = self.segments[-1] if self.segments else None
        open_bytes = last.disk_bytes if last is not None and last.writer is not None else 0
        return self._closed_disk + open_bytes

    def write(self, table: pa.Table) -> None:
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.writer is None or seg.arrow_bytes >= self.segment_bytes:
            if seg is not None and seg.writer is not None:
                self._seal(seg)
            path = os.path.join(self.folder, f"{self.prefix}-{next(_names)}.arrow")
            seg = _Segment(path, table.schema)
            self.segments.append(seg)
        seg.writer.write_table(table)
        seg.rows += table.num_rows
        seg.arrow_bytes += table.get_total_buffer_size()
        self.rows += table.num_rows

    def _seal(self, seg: _Segment) -> None:
        seg.close()
        self._closed_disk += os.path.getsize(seg.path)

    def read_next(self) -> pa.Table | None:
        """The oldest segment's rows, its file removed; None when nothing is spilled."""
        if not self.segments:
            return None
        seg = self.segments.popleft()
        if seg.writer is not None:
            self._seal(seg)
        self._closed_disk -= os.path.getsize(seg.path)
        with pa.OSFile(seg.path, "rb") as source:      # read into memory: the file goes now
            table = pa.ipc.open_file(source).read_all()
        os.remove(seg.path)
        self.rows -= seg.rows
        return table

    def discard(self) -> None:
        """Every segment removed, unread."""
        for seg in self.segments:
            seg.close()
            try:
                os.remove(seg.path)
            except FileNotFoundError:
                pass
        self.segments.clear()
        self.rows = 0
        self._closed_disk = 0
