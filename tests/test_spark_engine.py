"""Continuous queries on Spark Structured Streaming (``SET cq.engine = spark``), through the
real server and its one SparkSession (local[*]: two cores here): each query runs at once on
both engines over the same generated streams, and the rows of every cursor are compared,
sorted, with the back end's (themselves checked against DuckDB's snapshots elsewhere). Also
what Spark refuses (0A000 with a hint), the setting's check, EXPLAIN, cq_queries, and the
spool a Spark query reads going away with its cursor."""
from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request

import duckdb
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.nexmark.run import _children
from bench.nexmark.spark_engine import Cluster
from continuous import at, lit, unique, wait_for, wait_running

# (name, query over {s} and {s2}, the column holding valid_from): the shapes Spark runs
SHAPES = [
    ("filter_map", "SELECT k, CAST(v * 0.908 AS DOUBLE) AS w, valid_from, valid_to FROM {s} "
                   "[RANGE '5 seconds'] WHERE v % 3 <> 0", 2),
    ("unbounded", "SELECT k, v, valid_from, valid_to FROM {s} WHERE k = 1", 2),
    ("hopping", "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MIN(v) AS lo, MAX(v) AS hi, AVG(v) AS a, "
                "wtime(*), valid_to FROM {s} [RANGE '5 seconds' SLIDE '2 seconds'] GROUP BY k "
                "HAVING COUNT(*) > 1", 6),
    ("slide_rows", "SELECT k, v, wtime(*), valid_to FROM {s} [RANGE '4 seconds' SLIDE '2 seconds'] "
                   "WHERE v > 80", 2),
    ("range_agg", "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MIN(v) AS lo, MAX(t) AS latest, "
                  "valid_from, valid_to FROM {s} [RANGE '3 seconds'] WHERE v > 20 GROUP BY k", 5),
    ("union", "SELECT k, v, valid_from, valid_to FROM {s} [RANGE '3 seconds'] WHERE v > 50 "
              "UNION ALL SELECT k, v, valid_from, valid_to FROM {s2} [RANGE '4 seconds']", 2),
    ("grid_join", "SELECT b.k, b.v, m.top, valid_from FROM {s} [RANGE '2 seconds' SLIDE "
                  "'2 seconds'] b JOIN (SELECT k, MAX(v) AS top FROM {s2} [RANGE '2 seconds' "
                  "SLIDE '2 seconds'] GROUP BY k) m ON b.k = m.k", 3),
    # the join with a table and what is above it are made in the server's DuckDB, which
    # calls the Python function too
    ("table_join", "SELECT a.k, n.name, a.v, {f}(n.lim) AS w, valid_from, valid_to FROM {s} "
                   "[RANGE '2 seconds'] a JOIN {t} n ON a.k = n.k WHERE a.v > n.lim OR "
                   "n.name = 'three'", 4),
    ("python_function", "SELECT k, {f}(v) AS w, valid_from, valid_to FROM {s} [RANGE '2 seconds'] "
                        "WHERE {f}(v) % 3 <> 0", 2),
    ("hopping_distinct", "SELECT DISTINCT k, v % 3 AS m, valid_from, valid_to FROM {s} "
                         "[RANGE '4 seconds' SLIDE '2 seconds'] WHERE v > 30", 2),
    ("range_distinct", "SELECT DISTINCT k, valid_from, valid_to FROM {s} [RANGE '2 seconds'] "
                       "WHERE v > 40", 1),
    ("equi_join", "SELECT a.k, a.v AS av, b.v AS bv, valid_from, valid_to FROM "
                  "{s} [RANGE '2 seconds'] a JOIN {s2} [RANGE '3 seconds'] b ON a.k = b.k "
                  "WHERE a.v > b.v", 3),
    # per partition, in Python inside Spark (held_tuples.py); tuples at one instant keep the
    # stream's order, which decides which of them a ROWS window holds
    ("partition_rows", "SELECT k, v, t, valid_from, valid_to FROM {s} [PARTITION BY k ROWS 2]",
     3),
    ("rows_where", "SELECT k, v * 2 AS w, t, valid_from, valid_to FROM {s} "
                   "[PARTITION BY k % 2 ROWS 3 WHERE v > 30] WHERE v % 4 <> 0", 3),
    ("rows_union", "SELECT k, v, t, valid_from, valid_to FROM {s} [ROWS 4] WHERE v > 20 UNION "
                   "ALL SELECT k, v, t, valid_from, valid_to FROM {s2} [RANGE '2 seconds']", 3),
    ("keyed_range_agg", "SELECT k, COUNT(*) AS n, SUM(v) AS sv, CAST(AVG(v) AS INT) AS ai, "
                        "valid_from, valid_to FROM {s} [RANGE '2 seconds'] GROUP BY k", 4),
    ("rows_agg", "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MIN(v) AS lo, MAX(t) AS latest, "
                 "AVG(v) AS a, valid_from, valid_to FROM {s} [PARTITION BY k ROWS 3 WHERE v > 10] "
                 "GROUP BY k", 6),
    ("session", "SELECT k, v, t, wstart(*) AS ws, wend(*) AS we, valid_from, valid_to FROM {s} "
                "[PARTITION BY k SESSION '0.4 seconds']", 5),
    ("session_agg", "SELECT k, COUNT(*) AS n, SUM(v) AS sv, MAX(v) AS hi, AVG(v) AS a, "
                    "{f}(MAX(v)) AS fh, wstart(*) AS ws, wend(*) AS we, valid_from, valid_to "
                    "FROM {s} [PARTITION BY k SESSION '0.4 seconds'] GROUP BY k "
                    "HAVING MIN(v) > 5", 8),
    ("session_all", "SELECT COUNT(*) + 1 AS n, MIN(t) AS lo, wend(*) AS we, valid_from FROM {s} "
                    "[SESSION '0.3 seconds'] GROUP BY wend(*)", 3),
]
TUPLES = 200
# the engines cut these shapes' rows at other instants (the back end runs a DISTINCT over a
# SLIDE window's rows as it runs one over RANGE)
SPLIT = ("range_agg", "range_distinct", "hopping_distinct", "keyed_range_agg")
# ... and these hold their last tuples for good: cut at each engine's last watermark, they
# are compared up to HORIZON seconds after the last tuple
OPEN = ("partition_rows", "rows_where", "rows_union", "rows_agg")
HORIZON = 10


def _rows(n: int, seed: int, pace: float = 1, nulls: bool = False) -> list:
    """``n`` tuples (k, v, seconds) in event-time order, a few at the same instant; ``pace``
    stretches the gaps; ``nulls``: k is NULL where it would be 3."""
    rnd, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += pace * rnd.choice([0, 0.1, 0.25, 0.5, 1.0])
        k = rnd.randrange(4)
        out.append((None if nulls and k == 3 else k, rnd.randrange(100), round(t, 2)))
    return out


def _insert(c, streams: dict, chunk: int = 25, pause: float = 0.0) -> None:
    """{stream: rows}: each stream's rows in INSERTs of ``chunk``, the streams taking turns,
    ``pause`` seconds after each turn (so Spark reads them in several micro-batches)."""
    for i in range(0, max(map(len, streams.values())), chunk):
        for stream, rows in streams.items():
            if rows[i:i + chunk]:
                c.execute(f"INSERT INTO {stream} VALUES " + ", ".join(
                    f"({'NULL' if k is None else k}, {v}, {lit(t)})"
                    for k, v, t in rows[i:i + chunk]))
        time.sleep(pause)       # spacing, not a wait: the rows are the same however batched


def _drain(cur, name: str, want, deadline: float, quiet: str) -> list:
    """Every row of cursor ``name``: until ``want`` came (a row count, or a test of the rows
    so far; None: at once), then one more look that waits ``quiet`` for nothing."""
    got = []
    while time.monotonic() < deadline:
        done = want is None or (want(got) if callable(want) else len(got) >= want)
        cur.execute(f"FETCH ALL FROM {name} WITH (timeout = '{quiet if done else '1s'}')")
        rows = cur.fetchall()
        got += rows
        if done and not rows:
            return got
    raise AssertionError(f"cursor {name}: {len(got)} rows, not all of them, by the deadline")


def _stream(c, name: str) -> None:
    c.execute(f"CREATE STREAM {name} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
              "WITH (heartbeat = 'none')")


# the shapes in three groups, each its own run: a dozen Spark queries at once, each with its
# Python workers, on two cores, now and then kept a worker from connecting back to Spark in
# time ("Python worker failed to connect back")
GROUPS = [SHAPES[:6], SHAPES[6:12], SHAPES[12:]]


@pytest.mark.parametrize("shapes", GROUPS, ids=["first", "second", "held_tuples"])
def test_both_engines_give_the_same_rows(server, shapes):
    s, s2, t, f = unique("sp"), unique("sp2"), unique("spt"), unique("spf")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as back, psycopg.connect(server.dsn) as spark:
        _stream(admin, s)
        _stream(admin, s2)
        admin.execute(f"CREATE TABLE {t} (k INT PRIMARY KEY, name TEXT, lim INT)")
        admin.execute(f"INSERT INTO {t} VALUES (0, 'zero', 10), (1, 'one', 50), (3, 'three', 90)")
        # a Python function: Spark's workers run it as an Arrow UDF
        admin.execute(f"CREATE FUNCTION {f}(x INT) RETURNS INT LANGUAGE python STRICT AS "
                      "$$ return x * 7 // 3 $$")
        spark.execute("SET cq.engine = spark")
        for conn in (back, spark):
            for name, sql, _ in shapes:
                conn.execute(f"DECLARE {name} CURSOR FOR " + sql.format(s=s, s2=s2, t=t, f=f))
        wait_running(server.dsn, s, count=2 * len(shapes), timeout=60)
        engines = dict(admin.execute(
            "SELECT name, string_agg(DISTINCT engine, ',' ORDER BY engine) FROM cq_queries "
            "WHERE query LIKE %s GROUP BY name", [f"%{s}%"]).fetchall())
        assert engines == {name: "backend,spark" for name, *_ in shapes}
        # the first query of one stream's rows takes the server's real-time slot: its rows
        # come from Spark's real-time mode, the others' from micro-batches
        modes = {name: next(r[0] for r in spark.execute(f"EXPLAIN ANALYZE {name}")
                            if r[0].startswith("Spark ")) for name, *_ in shapes}
        if shapes is GROUPS[0]:
            assert modes["filter_map"] == "Spark trigger: real-time mode", modes
            assert modes["hopping"].startswith("Spark micro-batches: "), modes

        # s2's event time runs at s's pace, so each turn's s2 rows precede the s rows sent
        # just before them: a union's or join's rows from a later micro-batch start earlier
        # the keys Python holds state for are NULL too (Spark's state store took a NULL
        # key for another key there)
        nulls = shapes is GROUPS[2]
        data = {s: _rows(TUPLES, 1, nulls=nulls), s2: _rows(TUPLES // 2, 2, pace=2)}
        _insert(admin, data, pause=0.3)
        last = max(t for rows in data.values() for *_, t in rows)
        horizon, end = at(last + HORIZON), last + 2 * HORIZON
        for stream in (s, s2):
            admin.execute(f"ALTER STREAM {stream} ADVANCE TO {lit(end)}")

        # the back end takes what the gateway sends it in order, one frame at a time, and
        # answers a read of cq_queries after the frames before it, its rows ahead of the
        # answer: once the read returns, it has answered up to the end
        admin.execute("SELECT count(*) FROM cq_queries").fetchone()
        deadline = time.monotonic() + 90
        for name, _, at_column in shapes:
            expected = _drain(back.cursor(), name, None, deadline, quiet="0.2s")
            assert expected, f"{name}: the back end gave no rows"
            want = len(expected)
            upto = horizon if name in OPEN else None
            if name in SPLIT + OPEN:    # the back end's rows, once both are coalesced
                want = functools.partial(_covers, _whole(expected, at_column, upto),
                                         at_column, upto)
            got = _drain(spark.cursor(), name, want, deadline, quiet="0.3s")
            starts = [r[at_column] for r in got]
            assert starts == sorted(starts), f"{name}: not in valid_from order"
            if name in SPLIT + OPEN:    # the same answers, cut at other instants: coalesced
                got = _whole(got, at_column, upto)
                expected = _whole(expected, at_column, upto)
            assert sorted(got, key=_order) == sorted(expected, key=_order), name


def _coalesced(rows: list, at: int) -> list:
    """Rows (columns, then valid_from at ``at`` and valid_to after it) with each run of
    equal rows, one ending where the next begins, as one row: an aggregate's rows are cut
    where its engine's watermarks fell (the back end's heartbeats, Spark's micro-batches),
    not where the answers change."""
    out: dict = {}
    for r in sorted(rows, key=lambda r: r[at]):
        values, start, end = r[:at], r[at], r[at + 1]
        run = out.setdefault(values, [])
        if run and run[-1][0] == values and run[-1][2] == start:
            run[-1][2] = end
        else:
            run.append([values, start, end])
    return [(*v, a, b) for run in out.values() for v, a, b in run]


def _whole(rows: list, at: int, upto=None) -> list:
    """``rows`` coalesced (``_coalesced``) and sorted; with ``upto``, first cut there (the
    rows from it on dropped)."""
    if upto is not None:
        rows = [(*r[:at], r[at], min(r[at + 1], upto), *r[at + 2:]) for r in rows
                if r[at] < upto]
    return sorted(_coalesced(rows, at), key=_order)


def _covers(whole: list, at: int, upto, got: list) -> bool:
    return _whole(got, at, upto) == whole


def _order(row: tuple) -> tuple:
    return tuple((x is None, x) for x in row)


@pytest.mark.parametrize("sql, why", [
    ("SELECT COUNT(*) FROM {s} [RANGE '4 seconds' SLIDE '2 seconds']", "no GROUP BY key"),
    ("SELECT SUM(v) FROM {s} [RANGE '4 seconds']", "over a RANGE window with no GROUP BY"),
    ("SELECT a.k FROM {s} [RANGE '1 second'] a JOIN {s} [RANGE '1 second'] b ON a.v < b.v",
     "no equality to partition by"),
    ("SELECT a.k FROM (SELECT k, COUNT(*) AS n FROM {s} [RANGE '2 seconds' SLIDE '2 seconds'] "
     "GROUP BY k) a JOIN {s} [RANGE '1 second'] b ON a.k = b.k", "neither both"),
    ("SELECT b.k FROM {s} [RANGE '2 seconds' SLIDE '2 seconds'] b JOIN (SELECT COUNT(*) AS n "
     "FROM {s} [RANGE '2 seconds' SLIDE '2 seconds']) m ON b.k = m.n", "a COUNT that has no"),
    ("SELECT DISTINCT k FROM (SELECT k FROM {s} [RANGE '1 second'] UNION ALL SELECT v FROM "
     "{s} [RANGE '1 second']) u", "DISTINCT but over one stream's window"),
    ("SELECT k FROM {s} [NOW]", "window now"),
    ("SELECT v, COUNT(*) FROM {s} [PARTITION BY k ROWS 3] GROUP BY v",
     "not grouped by exactly its PARTITION BY keys"),
    ("SELECT COUNT(*) FROM {s} [ROWS 3]", "not grouped by exactly its PARTITION BY keys"),
    ("SELECT k, COUNT(*) FROM {s} [PARTITION BY k SESSION '1 second'] GROUP BY k",
     "not grouped by its end (wend(*))"),
    ("SELECT DISTINCT k, wend(*) FROM {s} [PARTITION BY k SESSION '1 second']",
     "DISTINCT over a session window"),
])
def test_what_spark_cannot_run_is_refused_with_a_hint(server, sql, why):
    s = unique("spr")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        c.execute("SET cq.engine = spark")
        for stmt in ("DECLARE x CURSOR FOR ", "EXPLAIN "):
            c.execute("BEGIN")
            with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
                c.execute(stmt + sql.format(s=s))
            c.execute("ROLLBACK")
            assert why in e.value.diag.message_primary
            assert "cq.engine = backend" in e.value.diag.message_hint
        c.execute("SET cq.engine = backend")             # the back end runs it
        c.execute("BEGIN")
        c.execute("DECLARE x CURSOR FOR " + sql.format(s=s))
        c.execute("ROLLBACK")


def test_the_setting_is_checked_and_explain_names_the_engine(server):
    s = unique("spx")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            c.execute("SET cq.engine = flink")
        assert e.value.diag.message_hint == "Available values: backend, spark."
        c.execute("SET cq.engine = 'SPARK'")
        assert c.execute("SHOW cq.engine").fetchone() == ("spark",)
        sql = f"SELECT k, COUNT(*) AS n FROM {s} [RANGE '4 seconds' SLIDE '2 seconds'] GROUP BY k"
        lines = [r[0] for r in c.execute("EXPLAIN " + sql).fetchall()]
        assert lines[0] == "continuous query (Spark Structured Streaming) → k, n"
        assert lines[1].startswith("μ k, n") and "Spark plan:" in lines
        spark_plan = "\n".join(lines[lines.index("Spark plan:"):])
        assert "StateStoreSave" in spark_plan and "EventTimeWatermark" in spark_plan
        # an aggregate keeps state: micro-batches, and EXPLAIN says why
        assert lines[-1].strip() == (
            "Trigger: micro-batches (Spark's real-time mode runs one stream's windowed rows, "
            "filtered and projected, without Python functions)"), lines
        # an α over sessions: Spark runs the window, the server groups each micro-batch
        lines = [r[0] for r in c.execute(
            f"EXPLAIN SELECT k, COUNT(*) AS n, wend(*) FROM {s} [PARTITION BY k SESSION "
            "'1 second'] GROUP BY k").fetchall()]
        assert "TransformWithStateInPySpark" in "\n".join(lines), lines
        assert lines[-1].strip().startswith(
            "then in the server, for each micro-batch: α keys"), lines
        c.execute("RESET cq.engine")
        assert c.execute("EXPLAIN " + sql).fetchone()[0].startswith(
            "continuous query (back end) →")
        # a query's own WITH (engine = …) wins over the session's
        assert c.execute(f"EXPLAIN {sql} WITH (engine = 'spark')").fetchone()[0].startswith(
            "continuous query (Spark Structured Streaming) →")
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            c.execute(f"EXPLAIN {sql} WITH (engine = flink)")
        assert e.value.diag.statement_position == str(len(f"EXPLAIN {sql} WITH (") + 1)
        # a stream PARTITIONED BY a key: its queries run on Spark unless they say otherwise
        ddl = f"CREATE STREAM {s}_p (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) PARTITIONED BY "
        with pytest.raises(psycopg.errors.UndefinedColumn) as e:
            c.execute(ddl + "(nope)")
        assert e.value.diag.statement_position == str(len(ddl) + 2)
        c.execute(ddl + "(k)")
        keyed = (f"SELECT k, COUNT(*) AS n FROM {s}_p [RANGE '4 seconds' SLIDE '2 seconds'] "
                 "GROUP BY k")
        assert c.execute("EXPLAIN " + keyed).fetchone()[0].startswith(
            "continuous query (Spark Structured Streaming) →")
        assert c.execute(f"EXPLAIN {keyed} WITH (engine = backend)").fetchone()[0].startswith(
            "continuous query (back end) →")
        # what Spark refuses there runs on the back end, as before the stream was partitioned
        assert c.execute(f"EXPLAIN SELECT k FROM {s}_p [NOW]") \
            .fetchone()[0].startswith("continuous query (back end) →")


def test_millisecond_times_bare_nulls_and_casts_to_integers_on_spark(server):
    """What the differential tester found Spark getting wrong (it waits for each cursor's
    progress in cq_queries, checked here too): starting a query over a
    stream whose event time is a TIMESTAMP(3) (Spark has one timestamp unit, and took
    DuckDB's TIMESTAMP_MS for a type's name) or with a bare NULL where a truth value goes
    (Spark gives it no type: CASE WHEN NULL, NULL OR …), both refused; and a cast of a
    fraction to an integer, which Spark cuts off where DuckDB rounds (a DECIMAL half away
    from zero, a DOUBLE half to even)."""
    s = unique("spm")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as c:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP(3) TIMESTAMPCOLUMN) "
                      "WITH (heartbeat = 'none')")
        c.execute("SET cq.engine = spark")
        sql = ("SELECT k, CASE WHEN NULL THEN k END AS n, t, CAST(v + 0.5 AS INT) AS half_up, "
               "CAST(CAST(v AS DOUBLE) + 0.5 AS INT) AS half_even, valid_from FROM "
               f"{s} [RANGE '1 second'] WHERE NULL OR v > 1")
        # Spark's Arrow reader takes microseconds only: micro-batches, whose source converts
        trigger = c.execute("EXPLAIN " + sql).fetchall()[-1][0].strip()
        assert trigger.startswith("Trigger: micro-batches (Spark's Arrow reader does not take "
                                  "column t TIMESTAMP"), trigger
        c.execute(f"DECLARE m CURSOR FOR {sql}")
        _insert(admin, {s: [(1, 1, 0.25), (2, 2, 0.5), (3, 3, 1.125)]})
        assert _drain(c.cursor(), "m", 2, time.monotonic() + 60, quiet="0.2s") == \
            [(2, None, at(0.5), 3, 2, at(0.5)), (3, None, at(1.125), 4, 4, at(1.125))]
        # cq_queries.progress: where its last micro-batch reached (the stream's watermark)
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(5)}")
        wait_for(lambda: c.execute("SELECT progress FROM cq_queries WHERE name = 'm' AND "
                                   "pid = pg_backend_pid()").fetchone() == (at(5),),
                 60, "the cursor's progress at the stream's watermark")


def test_a_query_cannot_call_into_sparks_jvm(server):
    """Spark's reflect / java_method would run any static Java method in the server's JVM
    (System.exit, getenv): a query's functions must be DuckDB's, and those never are."""
    s = unique("spj")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        c.execute("SET cq.engine = spark")
        for call in ("reflect('java.lang.System', 'exit', 0)",
                     "java_method('java.lang.System', 'getenv', 'HOME')"):
            for stmt in (f"EXPLAIN SELECT {call} AS x FROM {s}",
                         f"EXPLAIN SELECT k FROM {s} WHERE {call} IS NULL"):
                with pytest.raises(psycopg.errors.UndefinedFunction):
                    c.execute(stmt)
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_a_spark_query_reads_a_spool_that_goes_with_its_cursor(server):
    s = unique("sps")
    folder = os.path.join(server.data_dir, "spool", s)
    sql = f"SELECT v, valid_from FROM {s} [RANGE '1 second']"
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as c:
        _stream(admin, s)
        c.execute("SET cq.engine = spark")
        # one stream's rows, windowed, filtered, projected: Spark's real-time mode, while one
        # of the server's real-time slots is free (the shared server has one or more)
        trigger = c.execute("EXPLAIN " + sql).fetchall()[-1][0].strip()
        assert trigger.startswith("Trigger: real-time mode"), trigger
        slots = int(re.search(r"the server's (\d+) real-time slots", trigger).group(1))
        c.execute(f"DECLARE r CURSOR FOR {sql}")
        assert os.path.isdir(folder)
        # the stream cannot be dropped under its reader, as with the back end's
        with pytest.raises(psycopg.errors.DependentObjectsStillExist):
            admin.execute(f"DROP STREAM {s}")
        _insert(admin, {s: [(1, i, i) for i in range(5)]})
        assert _drain(c.cursor(), "r", 5, time.monotonic() + 60, quiet="0.2s") == \
            [(i, at(i)) for i in range(5)]
        # EXPLAIN ANALYZE shows Spark's counters; the metrics count the query and Spark's jobs
        lines = [r[0] for r in c.execute("EXPLAIN ANALYZE r").fetchall()]
        assert lines[0].startswith("continuous query (Spark Structured Streaming) → v")
        assert "Spark trigger: real-time mode" in lines, lines
        assert "Rows out: 5 (read by the client: 5, waiting: 0)" in lines, lines
        # the real-time query has reached the stream's watermark (its spool's rows say so)
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")
        wait_for(lambda: admin.execute(
            "SELECT progress FROM cq_queries WHERE name = 'r' AND engine = 'spark'")
            .fetchone()[0] == at(10), 60, "the real-time query's progress at 10 s")
        # with every slot taken, the same query runs in micro-batches
        others = []
        for i in range(slots):
            others.append(f"m{i}")
            c.execute(f"DECLARE m{i} CURSOR FOR {sql}")
        modes = {n: next(r[0] for r in c.execute(f"EXPLAIN ANALYZE {n}").fetchall()
                         if r[0].startswith("Spark "))
                 for n in others}
        assert any(m.startswith("Spark micro-batches: ") for m in modes.values()), modes
        _insert(admin, {s: [(1, i, i) for i in range(10, 13)]})
        for n in others:           # from where it began: the tuples after its start
            assert _drain(c.cursor(), n, 3, time.monotonic() + 60, quiet="0.2s") == \
                [(i, at(i)) for i in range(10, 13)], n
        assert _drain(c.cursor(), "r", 3, time.monotonic() + 60, quiet="0.2s") == \
            [(i, at(i)) for i in range(10, 13)]
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics",
                                    timeout=20) as page:
            metrics = {s.name: s.value for f in text_string_to_metric_families(
                page.read().decode()) for s in f.samples if not s.labels}
        assert metrics["cqgate_spark_streaming_queries"] >= 1
        c.execute("CLOSE r")
        for n in others:
            c.execute(f"CLOSE {n}")
        wait_for(lambda: not os.path.isdir(folder), 60, f"the spool {folder} gone")
        c.rollback()
        admin.execute(f"DROP STREAM {s}")


@contextlib.contextmanager
def _engines_side_by_side(dsn: str, s: str, sql: str):
    """(admin, spark, backend): an autocommit connection that has created stream ``s``, and
    one connection on each engine with cursor ``a`` declared for ``sql`` (over ``s``)."""
    with psycopg.connect(dsn, autocommit=True) as admin, \
            psycopg.connect(dsn) as spark, psycopg.connect(dsn) as backend:
        _stream(admin, s)
        spark.execute("SET cq.engine = spark")
        for conn in (spark, backend):
            conn.execute(f"DECLARE a CURSOR FOR {sql}")
        yield admin, spark, backend


def _source_runners(server) -> set:
    """The server's processes that read a query's spool for Spark's driver (pyspark's
    streaming source runner: one Python process a query, started with it)."""
    found = set()
    for pid in _children(server.proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"python_streaming_source_runner" in f.read():
                    found.add(pid)
        except OSError:                 # ended meanwhile
            continue
    return found


def test_a_spark_query_that_loses_a_python_worker_goes_on_from_its_checkpoint(server):
    """One of Spark's Python workers lost (here the one that reads the query's spool for
    Spark's driver, SIGKILLed as an out-of-memory killer would; on a busy machine, one that
    does not connect back within Spark's fixed 10 s ends the query alike) ends the streaming
    query; the server starts it again from its checkpoint, and the cursor's rows are the
    back end's for the same query over the same tuples: none lost, none twice."""
    s = unique("spw")
    sql = (f"SELECT k, COUNT(*) AS n, SUM(v) AS sv, wtime(*) FROM {s} "
           "[RANGE '4 seconds' SLIDE '2 seconds'] GROUP BY k")
    rows = _rows(160, seed=44)
    half = len(rows) // 2
    before = _source_runners(server)
    with _engines_side_by_side(server.dsn, s, sql) as (admin, spark, backend):
        _insert(admin, {s: rows[:half]}, chunk=20, pause=0.3)
        # Spark has answered for some of it: a micro-batch ran and was committed
        got = _drain(spark.cursor(), "a", 1, time.monotonic() + 60, quiet="0.2s")
        runner = wait_for(lambda: _source_runners(server) - before, 30,
                          "the query's source runner")
        assert len(runner) == 1, runner
        os.kill(runner.pop(), 9)
        _insert(admin, {s: rows[half:]}, chunk=20, pause=0.3)
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(rows[-1][2] + 10)}")
        want = _drain(backend.cursor(), "a", None, time.monotonic() + 60, quiet="1s")
        got += _drain(spark.cursor(), "a", len(want) - len(got), time.monotonic() + 90,
                      quiet="1s")
        assert len(want) >= 60
        assert sorted(got) == sorted(want)
        lines = [r[0] for r in spark.execute("EXPLAIN ANALYZE a").fetchall()]
        assert "Spark restarts: 1 (a Python worker died)" in lines, lines
        spark.execute("CLOSE a")
        backend.execute("CLOSE a")


def _progress(c, name: str):
    """cq_queries.progress of query ``name`` (None: it has answered for no instant yet)."""
    return c.execute("SELECT progress FROM cq_queries WHERE name = %s", [name]).fetchone()[0]


def _answer_at(rows: list, instant: float, low: float) -> list:
    """DuckDB's answer over ``rows`` (k, v, seconds) at ``instant`` (seconds): per k, the
    count and sum of the tuples with low < t <= instant."""
    con = duckdb.connect()
    con.execute("CREATE TABLE r (k INT, v INT, t DOUBLE)")
    con.executemany("INSERT INTO r VALUES (?, ?, ?)", rows)
    return con.execute("SELECT k, COUNT(*), SUM(v) FROM r WHERE t > ? AND t <= ? GROUP BY k "
                       "ORDER BY k NULLS LAST", [low, instant]).fetchall()


def test_a_named_window_on_spark_answers_from_the_rows_spark_gave(server):
    """CREATE WINDOW … WITH (engine = 'spark'): Spark runs its query; a query of the window
    answers from the rows Spark gave, at the last instant Spark has answered for (a
    microsecond before its watermark, cq_queries.progress): DuckDB's answer over the tuples
    at that instant, for a RANGE aggregate (all the tuples, NULL keys too) and a hopping one
    (the last window closed then)."""
    s, wr, wh = unique("spw"), unique("spwr"), unique("spwh")
    rows = _rows(60, 5, nulls=True)
    last = rows[-1][2]
    end = int(last) + 3              # the last SLIDE window closed by then holds tuples
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        c.execute(f"CREATE WINDOW {wr} AS SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {s} "
                  "[RANGE '1 hour'] GROUP BY k WITH (engine = 'spark')")
        c.execute(f"CREATE WINDOW {wh} AS SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {s} "
                  "[RANGE '4 seconds' SLIDE '2 seconds'] GROUP BY k WITH (engine = 'spark')")
        assert c.execute("SELECT name, kind, engine FROM cq_queries WHERE name IN (%s, %s) "
                         "ORDER BY name", [wr, wh]).fetchall() == \
            sorted([(wr, "window", "spark"), (wh, "window", "spark")])
        lines = [r[0] for r in c.execute(f"EXPLAIN SELECT * FROM {wr}").fetchall()]
        assert lines[-1] == (f"window {wr}: its rows from its query on Spark, at the last "
                             "instant that query has answered for"), lines
        _insert(c, {s: rows}, pause=0.3)
        c.execute(f"ALTER STREAM {s} ADVANCE TO {lit(end)}")
        # Spark's watermark reaches the stream's but for a millisecond or two (its watermark
        # is in whole milliseconds, a microsecond short of the stream's)
        for w in (wr, wh):
            wait_for(lambda: (_progress(c, w) or at(0)) >= at(end - 0.002), 90,
                     f"{w}'s query on Spark at the stream's watermark")
        for w, rng in ((wr, 3600), (wh, None)):
            reached = _progress(c, w)
            instant = (reached - at(0)).total_seconds() - 1e-6
            if rng is None:            # the last SLIDE window closed by then: (E − 4, E]
                closed = 2 * (instant // 2)
                want = _answer_at(rows, closed, closed - 4)
            else:
                want = _answer_at(rows, instant, instant - rng)
            assert want and c.execute(f"SELECT k, n, sv FROM {w} ORDER BY k NULLS LAST") \
                .fetchall() == want, w
        assert c.execute(f"SELECT SUM(n) FROM {wr} WHERE k IS NOT NULL").fetchone()[0] == \
            sum(1 for k, *_ in rows if k is not None)
        # read on its own: beside another input it would answer for another instant
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            c.execute(f"SELECT * FROM {wr} a JOIN {wh} b ON a.k = b.k")
        assert "runs on Spark and is read on its own" in e.value.diag.message_primary
        # … or read at now inside another window's query (the back end's, over its rows)
        c.execute(f"CREATE WINDOW {wr}_over AS SELECT k, n FROM {wr} WHERE n > 1")
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            c.execute(f"SELECT * FROM {wr}_over")
        assert e.value.diag.message_primary == \
            f"named window {wr} runs on Spark and is read on its own"
        c.execute(f"DROP WINDOW {wr}_over")
        for w in (wr, wh):
            c.execute(f"DROP WINDOW {w}")
        assert c.execute("SELECT count(*) FROM cq_queries WHERE name IN (%s, %s)",
                         [wr, wh]).fetchone() == (0,)


def _kept_rows(data_dir: str) -> list:
    """Every row a derived stream on Spark has kept (its micro-batches' Parquet files; not a
    named window's, which has no column w)."""
    files = glob.glob(os.path.join(data_dir, "spark-streams", "d*", "rows", "*.parquet"))
    if not files:
        return []
    return duckdb.sql(f"SELECT k, w, valid_from FROM read_parquet({files!r}, "
                      "union_by_name = true) WHERE w IS NOT NULL").fetchall()


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie that nobody has reaped yet has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# Two servers' Spark sessions in turn (or a cluster of three JVMs and a server's): 70-125 s
# on two idle cores, up to half as much again on a busy machine; each wait inside has its own
# bound and names what it waited for, so this bound is only the backstop for a hang.
SLOW_SPARK = pytest.mark.timeout(360)


@SLOW_SPARK
def test_a_derived_stream_on_spark_resumes_after_kill_9(start_server, tmp_path):
    """kill -9 of the server while a derived stream and a named window run on Spark; after
    the restart the rows the derived stream kept hold every input tuple exactly once, a
    cursor on the back end follows it as before, and the window answers from the rows
    Spark gave before the kill and after it."""
    data = str(tmp_path / "data")
    base, out, win = unique("kin"), unique("kout"), unique("kwin")
    rows = [(i % 3, i, i * 0.1) for i in range(300)]
    want = sorted((k, v * 10, at(t)) for k, v, t in rows)
    srv = start_server(data_dir=data)
    with psycopg.connect(srv.dsn, autocommit=True) as c:
        _stream(c, base)
        c.execute(f"CREATE STREAM {out} AS SELECT k, v * 10 AS w FROM {base} "
                  "[RANGE '1 second'] WITH (engine = 'spark')")
        c.execute(f"CREATE WINDOW {win} AS SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {base} "
                  "[RANGE '1 hour'] GROUP BY k WITH (engine = 'spark')")
        assert c.execute("SELECT kind, engine FROM cq_queries WHERE name = %s",
                         [out]).fetchall() == [("derived", "spark")]
        _insert(c, {base: rows[:100]})
        wait_for(lambda: len(_kept_rows(data)) >= 100, 60, "100 rows kept")
        assert len(_kept_rows(data)) == 100
        # EXPLAIN ANALYZE of the derived stream: Spark's counters, its 100 rows kept
        lines = [r[0] for r in c.execute(f"EXPLAIN ANALYZE {out}").fetchall()]
        assert lines[0].startswith("continuous query (Spark Structured Streaming)"), lines
        assert f"Query: derived stream {out}, spark" in lines, lines
        assert "Rows out: 100" in lines, lines
        assert int(next(ln for ln in lines if ln.startswith("Spark micro-batches: "))
                   .split(": ")[1]) >= 1
        wait_for(lambda: (_progress(c, win) or at(0)) >= at(5), 60,
                 f"{win} at 5 s")
        _window_answers(c, win, rows)
        _insert(c, {base: rows[100:200]})
    doomed = _children(srv.proc.pid)                 # the back end and Spark's JVM too
    srv.proc.kill()
    srv.proc.wait(10)
    for pid in doomed:                               # a JVM ends when its server's pipe does
        wait_for(lambda: _gone(pid), 60, f"process {pid} of the killed server ended")

    again = start_server(data_dir=data)
    with psycopg.connect(again.dsn, autocommit=True) as c, \
            psycopg.connect(again.dsn) as reader:
        # what it answered for before the kill, or since (its rows then, kept, and after)
        _window_answers(c, win, rows)
        reader.execute(f"DECLARE live CURSOR FOR SELECT k, w FROM {out}")
        _insert(c, {base: rows[200:]})
        c.execute(f"ALTER STREAM {base} ADVANCE TO {lit(40)}")
        wait_for(lambda: len(_kept_rows(data)) >= len(want), 60, f"{len(want)} rows kept")
        assert sorted(_kept_rows(data)) == want          # every tuple, once
        # the cursor follows what the derived stream gave since it began: the tuples sent
        # after the restart, and those sent before the kill that Spark had not read yet
        after = [(k, v * 10) for k, v, _ in rows[200:]]
        followed = _drain(reader.cursor(), "live", lambda got: set(after) <= set(got),
                          time.monotonic() + 60, quiet="1s")
        assert len(set(followed)) == len(followed) >= len(after)
        assert set(after) <= set(followed) <= {(k, v * 10) for k, v, _ in rows[100:]}
        wait_for(lambda: (_progress(c, win) or at(0)) >= at(40 - 0.002), 60,
                 f"{win} at the stream's watermark")
        assert _window_answers(c, win, rows) == _answer_at(rows, 40, -1)


def _window_answers(c, win: str, rows: list) -> list:
    """Named window ``win`` (per k, COUNT(*) and SUM(v) over [RANGE '1 hour'] of ``rows``)
    as read, checked against DuckDB's answer at the instant its query on Spark has answered
    for (a microsecond before its progress); it has answered for some instant already."""
    reached = _progress(c, win)
    assert reached is not None, f"{win} has answered for no instant"
    got = c.execute(f"SELECT k, n, sv FROM {win} ORDER BY k NULLS LAST").fetchall()
    assert got and got == _answer_at(rows, (reached - at(0)).total_seconds() - 1e-6, -1), \
        (reached, got)
    return got


def _ran_state(work_dir: str) -> bool:
    """Whether an executor a worker launched (in its work folder) opened a state store: ran
    a stateful operator's task (executors log at INFO to their stderr)."""
    for log in glob.glob(os.path.join(work_dir, "app-*", "*", "stderr")):
        with open(log, errors="replace") as f:
            if "Retrieved reference to StateStoreCoordinator" in f.read():
                return True
    return False


@SLOW_SPARK
def test_a_keyed_aggregate_on_two_workers_survives_a_killed_worker(start_server, tmp_path):
    """A standalone cluster of two workers, one core each, started here: a keyed hopping
    aggregate runs on Spark with its state split across both workers' executors; one worker
    is killed mid-run with its executor (SIGKILL, as a machine that dies) and a new one
    joins. The rows equal the back end's for the same query over the same tuples: none
    wrong, none missing, none twice."""
    cluster = Cluster(str(tmp_path / "cluster"), cores=1, memory="1g", workers=2)
    try:
        srv = start_server("--spark-master", cluster.url, data_dir=str(tmp_path / "data"))
        s = unique("two")
        sql = (f"SELECT k, COUNT(*) AS n, SUM(v) AS sv, MAX(v) AS hi, wtime(*) FROM {s} "
               "[RANGE '4 seconds' SLIDE '2 seconds'] GROUP BY k")
        rows = _rows(480, seed=43)
        half = len(rows) // 2
        with _engines_side_by_side(srv.dsn, s, sql) as (admin, spark, backend):
            _insert(admin, {s: rows[:half]}, chunk=40, pause=1.0)
            # both workers' executors hold some of the keys' state
            wait_for(lambda: all(_ran_state(cluster.work_dir(i)) for i in (0, 1)), 120,
                     "stateful tasks on both workers")
            cluster.kill_worker(1)
            cluster.add_worker()
            _insert(admin, {s: rows[half:]}, chunk=40, pause=1.0)
            admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(rows[-1][2] + 10)}")
            want = _drain(backend.cursor(), "a", None, time.monotonic() + 60, quiet="3s")
            got = _drain(spark.cursor(), "a", len(want), time.monotonic() + 240, quiet="3s")
            # the new worker took the lost one's place: the application has an executor there
            wait_for(lambda: glob.glob(os.path.join(cluster.work_dir(2), "app-*", "*")), 60,
                     "an executor on the new worker")
        assert len(want) >= 250
        assert sorted(got) == sorted(want)
    finally:
        cluster.stop()


def _state_stores(data_dir: str) -> dict:
    """{checkpoint: state store} of the running cursors' queries on Spark, from their
    checkpoints' first offsets (Spark keeps there the settings a query restarts with)."""
    found = {}
    for path in glob.glob(os.path.join(data_dir, "spark-streams", "q*", "offsets", "0")):
        with open(path) as f:
            meta = json.loads(f.read().splitlines()[1])
        found[os.path.basename(os.path.dirname(os.path.dirname(path)))] = \
            meta["conf"]["spark.sql.streaming.stateStore.providerClass"].rsplit(".", 1)[1]
    return found


def test_spark_settings_reach_spark_and_each_query_picks_its_state_store(
        start_server, tmp_path):
    """``--spark-conf`` settings reach the server's SparkSession (here the shuffle's
    partitions, seen in Spark's plan); a RANGE aggregate's query runs on RocksDB's state
    store (transformWithStateInPandas needs it), a hopping one on Spark's in-memory store;
    a setting that is not key=value stops the server at start."""
    bad = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "0",
                          "--data-dir", str(tmp_path / "bad"), "--spark-conf", "nonsense"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--spark-conf 'nonsense' is not key=value" in bad.stderr
    data = str(tmp_path / "data")
    srv = start_server("--spark-conf", "spark.sql.shuffle.partitions=3", data_dir=data)
    s = unique("conf")
    with psycopg.connect(srv.dsn, autocommit=True) as admin, psycopg.connect(srv.dsn) as c:
        _stream(admin, s)
        c.execute("SET cq.engine = spark")
        hopping = f"SELECT k, COUNT(*) AS n FROM {s} [RANGE '2 seconds' SLIDE '2 seconds'] " \
                  "GROUP BY k"
        plan = "\n".join(r[0] for r in c.execute(f"EXPLAIN {hopping}").fetchall())
        assert "numPartitions = 3]" in plan and "numPartitions = 4]" not in plan, plan
        c.execute(f"DECLARE h CURSOR FOR {hopping}")
        c.execute(f"DECLARE r CURSOR FOR SELECT k, COUNT(*) AS n, valid_from FROM {s} "
                  "[RANGE '2 seconds'] GROUP BY k")
        _insert(admin, {s: [(1, i, i) for i in range(6)]})
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(20)}")
        assert _drain(c.cursor(), "h", 3, time.monotonic() + 90, quiet="0.2s")
        assert _drain(c.cursor(), "r", 1, time.monotonic() + 90, quiet="0.2s")
        stores = _state_stores(data)
        assert sorted(stores.values()) == ["HDFSBackedStateStoreProvider",
                                           "RocksDBStateStoreProvider"], stores
        # EXPLAIN ANALYZE says where a query's time went, phase by phase
        lines = [r[0] for r in c.execute("EXPLAIN ANALYZE h").fetchall()]
        spent = next(ln for ln in lines if ln.startswith("Spark time: "))
        assert "micro-batches; in all " in spent and " planning " in spent and \
            "of which in foreachBatch" in spent, spent
        c.rollback()
