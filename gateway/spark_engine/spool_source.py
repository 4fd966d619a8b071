"""``cqgate_spool``: a PySpark streaming data source over one stream's spool (see
gateway.clearinghouse.spool). An offset is ``{"seq": n, "spool": path}``: every file up to n
has been read (the path lets whoever reads a checkpoint's offsets tell the spools apart).
Each micro-batch reads the files after the last offset, consecutive files split over at
most ``tasks`` partitions (4), as Arrow batches; ``commit`` tells the spool so it can delete
what every reader has. Spark keeps the offsets in the query's checkpoint, so a query
restarted from it reads on from there: no tuple lost or read twice.

Options: ``path`` (the spool directory), ``schema`` (a DDL string), ``reader`` (this query's
name, for commits; none: never commits), ``ts_column`` (the stream's event-time column: each
task's watermark, its last file's, then also comes as a row, ``PUNCT`` true and every other
column null but that one, so Spark's event-time watermark follows the stream's even when no
tuple comes), ``order`` (any value: each row also gets ``ORDER``, its place in the stream,
the file's number × 2³² + its row there; ROWS and SESSION windows order tuples at one instant
by it, as the back end does by their arrival), ``tasks`` (at most this many partitions a
micro-batch; 4), ``arrow_schema`` (the stream's columns the query reads, as ``schema_option``
writes them: a file written before one was added to the stream has it as NULLs).
"""
from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from gateway.clearinghouse import spool

NAME = "cqgate_spool"
PUNCT = "__punct"        # true on a watermark's row, false on the stream's tuples
ORDER = "__order"        # a tuple's place in the stream (with the option ``order``)
TASKS = 4                # a micro-batch's files are read by at most this many tasks


class SpoolFiles(InputPartition):
    """Consecutive files of the spool, read by one task."""

    def __init__(self, seqs: list):
        super().__init__(seqs)
        self.seqs = seqs


class SpoolReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.path = options["path"]
        self.reader = options.get("reader")
        self.ts_column = options.get("ts_column")
        self.order = bool(options.get("order"))
        self.tasks = int(options.get("tasks", TASKS))
        self.columns = arrow_schema(options["arrow_schema"]) if options.get("arrow_schema") \
            else None

    def initialOffset(self) -> dict:
        mine = spool.committed(self.path).get(self.reader, 0) if self.reader else 0
        return {"seq": mine, "spool": self.path}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        known = spool.sequences(self.path)
        return {"seq": known[-1] if known else (start or {}).get("seq", 0), "spool": self.path}

    def partitions(self, start: dict, end: dict) -> list:
        seqs = [seq for seq in spool.sequences(self.path) if start["seq"] < seq <= end["seq"]]
        if not seqs:
            return []
        n = -(-len(seqs) // self.tasks)            # files a task, the tasks as even as can be
        return [SpoolFiles(seqs[i:i + n]) for i in range(0, len(seqs), n)]

    def read(self, partition: SpoolFiles):
        mark = None
        for seq in partition.seqs:
            table, mark = spool.read(self.path, seq)
            if self.columns is not None:
                table = spool.with_columns(table, self.columns.names, self.columns)
            table = in_microseconds(table)
            if self.ts_column is not None:
                table = table.append_column(PUNCT, pa.array(np.zeros(table.num_rows, bool)))
            if self.order:
                table = table.append_column(ORDER, pa.array(
                    (seq << 32) + np.arange(table.num_rows, dtype=np.int64)))
            yield from table.to_batches()
        # the last file's watermark is the task's: a stream's watermarks only grow
        if self.ts_column is not None and mark is not None:
            yield punctuation(table.schema, self.ts_column, mark)

    def commit(self, end: dict) -> None:
        if self.reader:
            spool.commit(self.path, self.reader, end["seq"])


class SpoolSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        extra = f", {PUNCT} BOOLEAN" if self.options.get("ts_column") else ""
        return self.options["schema"] + extra + \
            (f", {ORDER} BIGINT" if self.options.get("order") else "")

    def streamReader(self, schema) -> SpoolReader:
        return SpoolReader(self.options)


def in_microseconds(table: pa.Table) -> pa.Table:
    """``table`` with its timestamps in seconds or milliseconds (a stream's TIMESTAMP(0) or
    TIMESTAMP(3) columns) in microseconds, the one unit Spark takes them in."""
    coarse = [i for i, f in enumerate(table.schema)
              if pa.types.is_timestamp(f.type) and f.type.unit in ("s", "ms")]
    for i in coarse:
        f = table.schema.field(i)
        table = table.set_column(i, f.name, table.column(i).cast(pa.timestamp("us", f.type.tz)))
    return table


def punctuation(schema: pa.Schema, ts_column: str, mark: int) -> pa.RecordBatch:
    """The row that carries watermark ``mark`` (µs) through Spark: nulls but its time."""
    cols = [pa.array([mark], pa.int64()).cast(f.type) if f.name == ts_column
            else pa.array([True]) if f.name == PUNCT else pa.nulls(1, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def schema_option(schema: pa.Schema) -> str:
    """An Arrow schema as an option's text."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def arrow_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
