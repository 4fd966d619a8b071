"""A stream's spool and the ``cqgate_spool`` source's reader, driven as Spark drives it
(offsets, partitions, reads, commits) without a JVM: every file read once in order with its
watermark as a row, commits letting the spool delete what every reader has, a writer
reopened numbering on, readers that resume after a restart keeping their place, and a cursor
reader's spool going with it. Spark itself reads the spools in tests/test_spark_engine.py
(a derived stream restarted from its checkpoint after kill -9 among them)."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from gateway.clearinghouse import spool
from gateway.spark_engine.spool_source import PUNCT, SpoolFiles, SpoolReader, schema_option

SCHEMA = pa.schema([("k", pa.int32()), ("v", pa.string()), ("ts", pa.timestamp("us"))])
T0 = dt.datetime(2026, 11, 1)
S = 1_000_000
US0 = int((T0 - dt.datetime(1970, 1, 1)).total_seconds()) * S     # T0 in µs


def _release(first: int, n: int) -> pa.Table:
    return pa.table({"k": pa.array([i % 3 for i in range(first, first + n)], pa.int32()),
                     "v": [f"v{i}" for i in range(first, first + n)],
                     "ts": [T0 + dt.timedelta(seconds=i) for i in range(first, first + n)]},
                    schema=SCHEMA)


def _batch(reader: SpoolReader, start: dict) -> tuple[dict, list, list]:
    """One micro-batch as Spark runs it: the latest offset, the partitions after ``start``,
    each read; (end offset, tuples, watermark rows' times)."""
    end = reader.latestOffset(start)
    rows, marks = [], []
    for part in reader.partitions(start, end):
        for b in reader.read(part):
            for r in b.to_pylist():
                (marks.append(r["ts"]) if r[PUNCT] else rows.append((r["k"], r["v"], r["ts"])))
    reader.commit(end)
    return end, rows, marks


def test_a_reader_reads_every_file_once_and_commits_let_files_go(tmp_path):
    path = str(tmp_path / "spool" / "bids")
    writer = spool.SpoolWriter(path, SCHEMA)
    assert [writer.append(_release(i * 4, 4), US0 + (i * 4 + 4) * S) for i in range(3)] \
        == [1, 2, 3]
    assert writer.append(None, US0 + 13 * S) == 4             # punctuation only
    assert spool.read(path, 4) == (SCHEMA.empty_table(), US0 + 13 * S)
    spool.commit(path, "q1", 0)
    reader = SpoolReader({"path": path, "reader": "q1", "ts_column": "ts", "tasks": "2"})

    start = reader.initialOffset()
    assert start == {"seq": 0, "spool": path}
    end, rows, marks = _batch(reader, start)
    assert end == {"seq": 4, "spool": path}
    assert rows == [tuple(r.values()) for r in _release(0, 12).to_pylist()]
    # one watermark row a task (its last file's): two tasks of two files
    assert marks == [T0 + dt.timedelta(seconds=8), T0 + dt.timedelta(seconds=13)]
    assert _batch(reader, end)[1:] == ([], [])               # nothing new: nothing read

    for i in range(3, 5):
        writer.append(_release(i * 4, 4), US0 + (i * 4 + 4) * S)
    end2, rows, _ = _batch(reader, end)
    assert rows == [tuple(r.values()) for r in _release(12, 8).to_pylist()]

    # what every reader committed may go but the newest of it, whose watermark a reader
    # reading on asks for; a writer reopened numbers on after it
    assert spool.committed(path) == {"q1": 6}
    assert writer.prune() == 5 and spool.sequences(path) == [6]
    assert spool.watermark_at(path, 6) == US0 + 20 * S
    assert spool.SpoolWriter(path, SCHEMA).append(_release(20, 1), None) == 7


def test_readers_come_and_go_and_a_derived_streams_reader_resumes(tmp_path):
    spools = spool.Spools(str(tmp_path / "spool"))
    path = spools.open("Bids", SCHEMA, "q7")                   # a cursor's query
    spools.release("bids", _release(0, 2), 2_000_000)
    assert spools.open("bids", SCHEMA, "d3") == path           # a derived stream's, later
    assert spool.committed(path) == {"q7": 0, "d3": 1}         # each reads from its start
    spools.release("bids", None, 2_000_000)                    # nothing new: no file
    spools.release("bids", None, 3_000_000)
    assert spool.sequences(path) == [1, 2]

    # a restart: the cursor's mark goes, the derived stream's stays and it reads on
    spool.clean_start(spools.root, lambda reader: reader.startswith("d"))
    assert spool.committed(path) == {"d3": 1}
    again = spool.Spools(spools.root)
    again.open("bids", SCHEMA, "d3", resume=True)
    assert spool.committed(path) == {"d3": 1}
    assert again.release("bids", _release(2, 1), 4_000_000) is None
    assert spool.sequences(path) == [1, 2, 3]

    # the last reader gone, the spool goes; a stream no one reads is not spooled
    again.close("bids", "d3")
    assert spool.sequences(path) == [] and not again.tapped("bids")
    again.release("bids", _release(3, 1), 5_000_000)
    assert spool.sequences(path) == []


def test_a_column_added_to_the_stream_reads_as_null_in_older_files(tmp_path):
    spools = spool.Spools(str(tmp_path / "spool"))
    narrow = pa.schema([("k", pa.int32()), ("ts", pa.timestamp("us"))])
    path = spools.open("bids", narrow, "q1")
    spools.release("bids", _release(0, 2).select(["k", "ts"]), US0 + 2 * S)
    # ALTER STREAM bids ADD COLUMN v, and a query reading v: the spool widens for it
    spools.open("bids", SCHEMA, "q2")
    spools.release("bids", _release(2, 1), US0 + 3 * S)
    reader = SpoolReader({"path": path, "ts_column": "ts",
                          "arrow_schema": schema_option(SCHEMA)})
    rows = [r for seq in (1, 2) for b in reader.read(SpoolFiles([seq])) for r in b.to_pylist()
            if not r[PUNCT]]
    assert [(r["k"], r["v"]) for r in rows] == [(0, None), (1, None), (2, "v2")]
    assert all(b.schema.field("v").type == pa.string()
               for b in reader.read(SpoolFiles([1])))


def test_a_reader_name_must_be_plain(tmp_path):
    with pytest.raises(ValueError):
        spool.commit(str(tmp_path), "../x", 1)
