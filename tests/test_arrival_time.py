"""Arrival-time windows (``[… ON ARRIVAL]``) through the real server. Their answers depend on when
tuples arrive, so what is checked is what holds whatever the timing: each tuple lands in exactly
one tumbling window, the one whose interval holds the wall-clock time of its INSERT; tuples
that event time calls late are kept; windows close with the wall clock alone; what would need
the past is refused (0A000)."""
from __future__ import annotations

import datetime as dt
import random
import time

import psycopg
import pytest
import sqlglot

import dialect  # noqa: F401
from continuous import unique

SECOND = dt.timedelta(seconds=1)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def test_each_tuple_is_in_the_window_of_its_arrival_and_late_ones_count(server):
    s = unique("arr")
    rnd = random.Random(7)
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as reader:
        admin.execute(f"CREATE STREAM {s} (k INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "WITH (heartbeat = '200ms')")
        cur = reader.cursor()
        cur.execute(f"DECLARE arr CURSOR FOR SELECT k, t, wtime(*) FROM {s} "
                    "[RANGE '1 second' SLIDE '1 second' ON ARRIVAL]")
        cur.execute(f"DECLARE ev CURSOR FOR SELECT k FROM {s}")
        sent, k = {}, 0              # k -> (wall clock before its INSERT, after it)
        for _ in range(12):
            rows = []
            for _ in range(rnd.randrange(1, 4)):
                k += 1                   # event times out of order: many are late by them
                rows.append(f"({k}, TIMESTAMP '2030-01-01 00:00:00' + INTERVAL "
                            f"{rnd.randrange(60)} SECOND)")
            before = _utc_now()
            admin.execute(f"INSERT INTO {s} VALUES " + ", ".join(rows))
            after = _utc_now()
            sent.update({j: (before, after) for j in range(k - len(rows) + 1, k + 1)})
            time.sleep(rnd.choice([0.05, 0.2, 0.4]))
        # no ADVANCE: the wall clock closes the last window
        cur.execute(f"FETCH {k} FROM arr WITH (timeout = '10s')")
        got = cur.fetchall()
        cur.execute("FETCH ALL FROM ev WITH (timeout = '1s')")
        by_event = [r[0] for r in cur.fetchall()]
        late = admin.execute("SELECT late FROM cq_streams WHERE stream = %s", [s]).fetchone()[0]
    assert sorted(r[0] for r in got) == list(range(1, k + 1))        # each once
    for key, _, end in got:
        before, after = sent[key]
        # its window (end − 1 s, end] holds the instant it arrived, between before and after
        assert before - SECOND < end <= after + SECOND, (key, before, end, after)
        assert end.microsecond == 0                      # tumbling windows of whole seconds
    assert late > 0 and len(by_event) == k - late        # event time dropped the late ones


@pytest.mark.parametrize("sql, words", [
    ("SET cq.mode = snapshot; SELECT k FROM {s} [RANGE '1 second' ON ARRIVAL]",
     "snapshot mode"),
    ("SELECT k FROM {s} [BETWEEN '2030-01-01' AND '2030-01-02' ON ARRIVAL]", "fixed window"),
    ("SET cq.engine = spark; SELECT k FROM {s} [RANGE '1 second' SLIDE '1 second' ON ARRIVAL]",
     "arrival time"),
])
def test_what_needs_the_past_is_refused(server, sql, words):
    s = unique("arr")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        *settings, query = sql.format(s=s).split("; ")
        for setting in settings:
            c.execute(setting)
        c.execute("BEGIN")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            c.execute(f"DECLARE q CURSOR FOR {query}")
        assert words in str(e.value)
        c.execute("ROLLBACK")
        plan = [r[0] for r in c.execute(
            "EXPLAIN SELECT k FROM " + s + " [ROWS 3 ON ARRIVAL]").fetchall()] \
            if not settings else []
    assert not plan or plan[-1].endswith(f"stream {s} by arrival time")


def test_on_arrival_prints_back_after_every_window_kind():
    for window in ("RANGE '10 seconds' SLIDE '10 seconds'", "'2 seconds'", "ROWS 5",
                   "PARTITION BY k ROWS 2 WHERE v > 1", "SESSION '5 seconds'",
                   "PARTITION BY k SESSION '5 seconds'", "NOW", "UNBOUNDED"):
        sql = f"SELECT * FROM s [{window} ON ARRIVAL] AS x"
        assert sqlglot.parse_one(sql, read="cql").sql("cql") == sql
