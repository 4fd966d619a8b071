"""Answers that are current, through the real server: a continuous query shows what is true
now, brought by the heartbeat, though no row of it closes (the latest reading of each key, a
steady aggregate); a replay of last year's data, fed slowly, loses nothing as late and still
answers every instant its data have passed; ``heartbeat = 'none'`` and what ``cq_streams``
says. How soon an answer is current is bench/current_answers.py's measure: the waits here are
generous, for a busy machine."""
from __future__ import annotations

import datetime as dt
import os
import re
import time

import duckdb
import psycopg

from continuous import follow as _follow


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _collect(cur, cursor: str, want, seconds: float = 60) -> list:
    """FETCH from ``cursor`` until ``want(rows)`` holds; the rows. An AssertionError if it
    does not within ``seconds`` (generous: a wait, not a bound on how soon)."""
    start = time.monotonic()
    rows: list = []
    while not want(rows):
        left = seconds - (time.monotonic() - start)
        assert left > 0, f"not current after {seconds}s: {rows}"
        cur.execute(f"FETCH ALL FROM {cursor} WITH (timeout = '{max(left, 0.01):.3f}s')")
        rows += cur.fetchall()
    return rows


def _current(rows: list) -> dict:
    """Each key's value at the latest instant the rows cover."""
    latest: dict = {}
    for k, v, valid_from, _ in sorted(rows, key=lambda r: r[2]):
        latest[k] = v
    return latest


def test_the_latest_reading_of_every_key_arrives_with_the_heartbeat(server):
    with _follow(server, "latest") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v, valid_from, valid_to "
                    f"FROM {s} [PARTITION BY k ROWS 1]")
        for k, v in ((1, 10), (2, 20), (3, 30), (1, 11)):
            admin.execute(f"INSERT INTO {s} VALUES (%s, %s, now())", [k, v])
        rows = _collect(cur, "c", lambda r: _current(r) == {1: 11, 2: 20, 3: 30})
        # key 1's first reading is closed by its second; each key is there from its reading
        assert (1, 10) in [(k, v) for k, v, *_ in rows]
        for k, v, valid_from, valid_to in rows:
            assert valid_to is None or valid_to > valid_from
        streams = admin.execute("SELECT heartbeat, watermark_follows FROM cq_streams "
                                "WHERE stream = %s", [s]).fetchone()
        assert streams == (dt.timedelta(seconds=1), "wall clock")


def test_a_steady_unbounded_sum_is_current_and_costs_a_row_a_heartbeat(server):
    with _follow(server, "steady") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, SUM(v), valid_from, valid_to "
                    f"FROM {s} [UNBOUNDED] GROUP BY k")
        admin.execute(f"INSERT INTO {s} VALUES (1, 5, now()), (2, 7, now())")
        admin.execute(f"INSERT INTO {s} VALUES (1, 6, now())")
        _collect(cur, "c", lambda r: _current(r) == {1: 11, 2: 7})
        # a group that does not change costs at most one row a heartbeat (1 s): over three
        # more seconds of quiet, a few rows, not one per check of the heartbeat loop. The
        # sleep is not a wait for anything: it lets wall-clock time, which heartbeats follow,
        # pass; the bound counts the heartbeats that fit in the time that really passed
        quiet_from = time.monotonic()
        time.sleep(3)
        later = _collect(cur, "c", lambda r: len(r) >= 2)     # a heartbeat's, at least
        quiet = time.monotonic() - quiet_from
        assert len(later) <= 2 * (quiet + 1), (quiet, later)
        assert {(k, v) for k, v, *_ in later} == {(1, 11), (2, 7)}


def test_a_slow_replay_of_last_year_loses_nothing_and_answers_what_it_has_passed(server):
    year_ago = _now().replace(microsecond=0) - dt.timedelta(days=365)
    with _follow(server, "replay") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v, valid_from, valid_to "
                    f"FROM {s} [PARTITION BY k ROWS 1]")
        readings = [(1, 10), (2, 20), (1, 11), (3, 30)]
        for i, (k, v) in enumerate(readings):
            admin.execute(f"INSERT INTO {s} VALUES (%s, %s, %s)",
                          [k, v, year_ago + dt.timedelta(seconds=i)])
            # not a wait for anything: in order, seconds apart in wall-clock time, so
            # heartbeats come between them (a replay fed slowly)
            time.sleep(1.5)
        # every instant up to the last reading's (the stream's watermark) is answered:
        # the rows valid at i + 0.5 s are the readings current then
        rows = _collect(cur, "c", lambda r: len(r) >= 4)
        for i in range(len(readings) - 1):
            t = year_ago + dt.timedelta(seconds=i + 0.5)
            valid = {(k, v) for k, v, f, to in rows if f <= t and (to is None or t < to)}
            expected = {}
            for k, v in readings[:i + 1]:
                expected[k] = v
            assert valid == set(expected.items()), (t, rows)
        late, follows = admin.execute(
            "SELECT late, watermark_follows FROM cq_streams WHERE stream = %s",
            [s]).fetchone()
        assert late == 0 and follows == "data"


def test_heartbeat_none_keeps_the_wall_clock_out(server):
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute("CREATE STREAM hb_none (k INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "WITH (heartbeat = 'none')")
        admin.execute("INSERT INTO hb_none VALUES (1, now())")
        # not a wait for anything: more than a heartbeat period of wall-clock time passes,
        # which must not move the stream on
        time.sleep(1.5)
        admin.execute("INSERT INTO hb_none VALUES (2, now())")    # never late
        row = admin.execute("SELECT late, heartbeat, watermark_follows FROM cq_streams "
                            "WHERE stream = 'hb_none'").fetchone()
        assert row == (0, dt.timedelta(seconds=1), "data")


def test_named_windows_and_derived_streams_are_current_too(server):
    with _follow(server, "derive") as (s, admin, cur):
        w, d = f"{s}_w", f"{s}_d"
        admin.execute(f"CREATE WINDOW {w} AS SELECT k, SUM(v) AS total FROM {s} [UNBOUNDED] "
                      "GROUP BY k")
        admin.execute(f"CREATE STREAM {d} AS SELECT k, v * 10 AS v10 FROM {s} "
                      "[PARTITION BY k ROWS 1] WHERE v > 0")
        cur.execute(f"DECLARE cw CURSOR FOR SELECT k, total, valid_from, valid_to "
                    f"FROM Stream({w})")
        cur.execute(f"DECLARE cd CURSOR FOR SELECT k, v10, valid_from, valid_to "
                    f"FROM {d}")
        admin.execute(f"INSERT INTO {s} VALUES (1, 2, now()), (2, 3, now())")
        admin.execute(f"INSERT INTO {s} VALUES (1, 4, now())")
        _collect(cur, "cw", lambda r: _current(r) == {1: 6, 2: 3})
        _collect(cur, "cd", lambda r: _current(r) == {1: 40, 2: 30})


def test_the_docs_way_to_coalesce_rows_gives_one_row_per_value(server):
    """concepts.md shows SQL that merges a key's consecutive rows of equal value; run it in
    DuckDB over rows a cursor delivered, split at heartbeats."""
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    with open(os.path.join(docs, "concepts.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    sql = re.search(r"`(SELECT k, v, min\(valid_from\).*?GROUP BY k, v, run)`", text).group(1)
    with _follow(server, "merge") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v, valid_from, valid_to "
                    f"FROM {s} [PARTITION BY k ROWS 1]")
        admin.execute(f"INSERT INTO {s} VALUES (1, 10, now())")
        # heartbeats split the row of 10 meanwhile: until two pieces of it have come
        rows = _collect(cur, "c", lambda r: sum(v == 10 for _, v, *_ in r) >= 2)
        admin.execute(f"INSERT INTO {s} VALUES (1, 11, now())")
        rows += _collect(cur, "c", lambda r: any(v == 11 for _, v, *_ in r))
    assert len([r for r in rows if r[1] == 10]) >= 2          # 10 came in pieces
    con = duckdb.connect()
    con.execute("CREATE TABLE fetched (k INT, v INT, valid_from TIMESTAMP, valid_to TIMESTAMP)")
    con.executemany("INSERT INTO fetched VALUES (?, ?, ?, ?)", rows)
    merged = sorted(con.execute(sql).fetchall(), key=lambda r: r[2])
    assert [(k, v) for k, v, *_ in merged] == [(1, 10), (1, 11)]
    ten = [r for r in rows if r[1] == 10]
    assert merged[0][2:] == (min(r[2] for r in ten), max(r[3] for r in ten))
