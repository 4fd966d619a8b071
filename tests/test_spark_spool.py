"""A stream's spool read by Spark Structured Streaming through the ``cqgate_spool`` source:
a query restarted from its checkpoint reads on where it stopped (every tuple once), commits
let the spool delete what was read, and a writer reopened after that numbers on."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from gateway.clearinghouse import spool
from gateway.spark_engine.spool_source import NAME, SpoolSource

SCHEMA = pa.schema([("k", pa.int32()), ("v", pa.string()), ("ts", pa.timestamp("us"))])
DDL = "k INT, v STRING, ts TIMESTAMP_NTZ"
T0 = dt.datetime(2026, 11, 1)


def _release(first: int, n: int) -> pa.Table:
    return pa.table({"k": pa.array([i % 3 for i in range(first, first + n)], pa.int32()),
                     "v": [f"v{i}" for i in range(first, first + n)],
                     "ts": [T0 + dt.timedelta(seconds=i) for i in range(first, first + n)]},
                    schema=SCHEMA)


def _run(spark, path: str, checkpoint: str) -> dict:
    """Read what the spool has now (availableNow) from the checkpoint; rows by batch id."""
    seen: dict = {}

    def collect(frame, batch_id):
        seen[batch_id] = [tuple(r) for r in frame.collect()]     # again on a retry: same id

    query = (spark.readStream.format(NAME).option("path", path).option("schema", DDL)
             .option("reader", "q1").load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the streaming query did not finish"
    assert query.exception() is None
    return seen


def test_a_restarted_query_reads_every_tuple_once(spark, tmp_path):
    spark.dataSource.register(SpoolSource)
    path, checkpoint = str(tmp_path / "spool" / "bids"), str(tmp_path / "checkpoint")
    writer = spool.SpoolWriter(path, SCHEMA)
    assert [writer.append(_release(i * 4, 4), (i * 4 + 4) * 1_000_000) for i in range(3)] \
        == [1, 2, 3]
    assert writer.append(None, 13_000_000) == 4               # punctuation only
    assert spool.read(path, 4) == (SCHEMA.empty_table(), 13_000_000)

    first = _run(spark, path, checkpoint)
    rows = [r for b in sorted(first) for r in first[b]]
    assert sorted(rows) == sorted(tuple(r.values()) for r in _release(0, 12).to_pylist())

    for i in range(3, 5):
        writer.append(_release(i * 4, 4), (i * 4 + 4) * 1_000_000)
    again = _run(spark, path, checkpoint)                      # restarted from its checkpoint
    assert min(again) > max(first)                             # batch ids go on
    later = [r for b in sorted(again) for r in again[b]]
    assert sorted(later) == sorted(tuple(r.values()) for r in _release(12, 8).to_pylist())

    # what the reader committed may go but the newest of it, whose watermark a reader reading
    # on asks for; a writer reopened numbers on after it
    done = spool.committed(path)["q1"]
    assert done >= 4
    assert writer.prune() == done - 1 and spool.sequences(path) == list(range(done, 7))
    assert spool.watermark_at(path, done) == {4: 13, 5: 16, 6: 20}[done] * 1_000_000
    assert spool.SpoolWriter(path, SCHEMA).append(_release(20, 1), None) == 7


def test_a_reader_name_must_be_plain(tmp_path):
    with pytest.raises(ValueError):
        spool.commit(str(tmp_path), "../x", 1)
