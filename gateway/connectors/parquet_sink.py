"""A folder of Parquet files a sink writes (``CREATE SINK s INTO PARQUET (PATH '…') AS …``), on
the archive's format: each row, once its interval is over, with its columns and ``valid_from``
/ ``valid_to``, in hive partitions ``fragment=<start µs>`` by valid_from, so DuckDB, Spark and
pandas read the folder as one table (``read_parquet('PATH/*/*.parquet', hive_partitioning =
true)``).

Exactly once: batch ``n``'s files (``part-<n>-….parquet``) are on disk before the progress file
(``_cqgate_sink.json``: the batch number, the watermark and the rows still open) names ``n``;
files of a batch the progress file does not name are a crash's leftovers, removed at start.
"""
from __future__ import annotations

import glob
import json
import os

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dialect.intervals import interval_us

from gateway.connectors.sink_state import Changes
from gateway.durable import fsync_dir, make_dirs, write_text

PROGRESS = "_cqgate_sink.json"
FRAGMENT = "1 hour"


class ParquetTarget:
    """``schema``: the answer's columns (Arrow); rows come as their values' text."""

    def __init__(self, sink: str, path: str, schema: pa.Schema):
        self.sink, self.path, self.schema = sink, path, schema
        self.fragment_us = interval_us(FRAGMENT)
        self.seq = 0
        self.open: dict = {}                 # run id -> (values, start) of the rows open
        self.duck = duckdb.connect()
        self.casts = ""                      # text to the answer's types, in DuckDB

    def _cast_sql(self) -> str:
        self.duck.register("typed_empty", self.schema.empty_table())
        try:
            types = self.duck.sql("SELECT * FROM typed_empty").types
        finally:
            self.duck.unregister("typed_empty")
        return ", ".join(f'CAST(c{i} AS {t}) AS "{f.name}"'
                         for i, (f, t) in enumerate(zip(self.schema, types)))

    # (each method below runs in a worker thread: file I/O)
    def prepare(self, fresh: bool) -> None:
        make_dirs(self.path)
        progress = os.path.join(self.path, PROGRESS)
        if fresh and os.path.exists(progress):
            os.remove(progress)
            fsync_dir(self.path)
        self.casts = self._cast_sql()

    def load(self) -> tuple:
        progress = os.path.join(self.path, PROGRESS)
        if not os.path.exists(progress):
            saved = {"seq": 0, "watermark": None, "open": []}
        else:
            with open(progress) as f:
                saved = json.load(f)
        self.seq = saved["seq"]
        for leftover in glob.glob(os.path.join(self.path, "fragment=*", "part-*.parquet")):
            if int(os.path.basename(leftover).split("-")[1]) > self.seq:
                os.remove(leftover)          # a batch the progress file never named
        self.open = {r: (tuple(v), s) for v, s, r in saved["open"]}
        return saved["watermark"], [(tuple(v), s, r) for v, s, r in saved["open"]]

    def write(self, changes: Changes, watermark: int | None) -> None:
        self.seq += 1
        if changes.inserts:
            self._files(changes.inserts)
        for run in changes.closed:
            self.open.pop(run, None)
        self.open.update(changes.opened)
        write_text(os.path.join(self.path, PROGRESS), json.dumps(
            {"sink": self.sink, "seq": self.seq, "watermark": watermark,
             "open": [[list(v), s, r] for r, (v, s) in self.open.items()]}))

    def _files(self, rows: list) -> None:
        k = len(self.schema)
        texts = {f"c{i}": pa.array([r[0][i] for r in rows], pa.string()) for i in range(k)}
        self.duck.register("sink_rows", pa.table(texts))
        try:
            table = self.duck.sql(f"SELECT {self.casts} FROM sink_rows").to_arrow_table()
        finally:
            self.duck.unregister("sink_rows")
        starts = pa.array([r[1] for r in rows], pa.int64())
        table = table.append_column("valid_from", starts.cast(pa.timestamp("us")))
        table = table.append_column("valid_to", pa.array([r[2] for r in rows], pa.int64())
                                    .cast(pa.timestamp("us")))
        fragments = pa.array(starts.to_numpy() // self.fragment_us * self.fragment_us)
        for n, fragment in enumerate(pc.unique(fragments).sort().to_pylist()):
            part = table.filter(pc.equal(fragments, fragment))
            folder = os.path.join(self.path, f"fragment={fragment}")
            make_dirs(folder)
            path = os.path.join(folder, f"part-{self.seq}-{n}.parquet")
            tmp = os.path.join(folder, f".part-{self.seq}-{n}.parquet.tmp")
            pq.write_table(part, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(folder)

    def forget(self) -> None:
        """DROP SINK: its progress goes; its files stay, for whoever reads them."""
        progress = os.path.join(self.path, PROGRESS)
        if os.path.exists(progress):
            os.remove(progress)
            fsync_dir(self.path)

    def close(self) -> None:
        self.duck.close()
