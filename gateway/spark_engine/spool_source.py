"""``cqgate_spool``: a PySpark streaming data source over one stream's spool (see
gateway.clearinghouse.spool). An offset is ``{"seq": n}``: every file up to n has been read.
Each micro-batch reads the files after the last offset, one partition a file, as Arrow
batches; ``commit`` tells the spool so it can delete what every reader has. Spark keeps the
offsets in the query's checkpoint, so a query restarted from it reads on from there: no
tuple lost or read twice.

Options: ``path`` (the spool directory), ``schema`` (a DDL string), ``reader`` (this query's
name, for commits; none: never commits).
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from gateway.clearinghouse import spool

NAME = "cqgate_spool"


class SpoolFile(InputPartition):
    def __init__(self, seq: int):
        super().__init__(seq)
        self.seq = seq


class SpoolReader(DataSourceStreamReader):
    def __init__(self, options: dict):
        self.path = options["path"]
        self.reader = options.get("reader")

    def initialOffset(self) -> dict:
        mine = spool.committed(self.path).get(self.reader, 0) if self.reader else 0
        return {"seq": mine}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        known = spool.sequences(self.path)
        return {"seq": known[-1] if known else (start or {}).get("seq", 0)}

    def partitions(self, start: dict, end: dict) -> list:
        return [SpoolFile(seq) for seq in spool.sequences(self.path)
                if start["seq"] < seq <= end["seq"]]

    def read(self, partition: SpoolFile):
        table, _ = spool.read(self.path, partition.seq)
        yield from table.to_batches()

    def commit(self, end: dict) -> None:
        if self.reader:
            spool.commit(self.path, self.reader, end["seq"])


class SpoolSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return self.options["schema"]

    def streamReader(self, schema) -> SpoolReader:
        return SpoolReader(self.options)
