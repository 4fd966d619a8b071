"""Queries over the past on Spark: ``[BETWEEN t1 AND t2]`` over an archived stream, through
the real server (its one warm SparkSession), each answer compared with DuckDB reading the same
Parquet files on its own; a long archive query ended by statement_timeout, a CancelRequest and
pg_cancel_backend (57014, its Spark jobs cancelled, the session and Spark free after); and
one query on a real standalone Spark master and worker started here on 127.0.0.1. Waits are
generous, for a busy machine: how soon a cancel ends a query is a benchmark's question."""
from __future__ import annotations

import glob
import os
import re
import threading
import time

import duckdb
import psycopg
import pytest

from bench.nexmark.spark_engine import standalone
from conftest import ServerProcess, psql
from continuous import at, unique

ROWS = [(i % 4, round(i * 0.75, 2), at(i * 0.5)) for i in range(120)]     # 60 s of tuples


def _archived(c, name: str) -> None:
    c.execute(f"CREATE STREAM {name} (k INT, v DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
              "TYPE ARCHIVED WITH (fragment = '10 seconds')")
    with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
        for row in ROWS:
            cp.write_row(row)


def _duckdb(data_dir: str, stream: str, sql: str) -> list:
    """``sql`` with ``{s}`` for the stream's archive, read by DuckDB itself."""
    files = glob.glob(os.path.join(data_dir, "archive", f"public.{stream}", "*", "*.parquet"))
    return duckdb.sql(sql.format(s=f"read_parquet({files!r})")).fetchall()


def _lit(seconds: float) -> str:
    return f"'{at(seconds).isoformat(sep=' ')}'"


def test_a_past_window_runs_on_spark_and_matches_duckdb(server):
    s = unique("past")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _archived(c, s)
        lo, hi = 12.5, 41
        got = c.execute(f"SELECT k, count(*) AS n, sum(v) AS total, valid_from, valid_to "
                        f"FROM {s} [BETWEEN {_lit(lo)} AND {_lit(hi)}] "
                        "GROUP BY k ORDER BY k").fetchall()
        want = _duckdb(server.data_dir, s,
                       f"SELECT k, count(*), sum(v), TIMESTAMP {_lit(lo)}, TIMESTAMP {_lit(hi)} "
                       f"FROM {{s}} WHERE t >= TIMESTAMP {_lit(lo)} AND t < TIMESTAMP {_lit(hi)} "
                       "GROUP BY k ORDER BY k")
        assert got == want and len(got) == 4
        # a Python function runs in Spark's workers (an Arrow UDF), with the same values
        f = unique("pastf")
        c.execute(f"CREATE FUNCTION {f}(k INT, v DOUBLE) RETURNS DOUBLE LANGUAGE python "
                  "STRICT AS $$ return round(v * 3 + k, 2) $$")
        got = c.execute(f"SELECT k, sum({f}(k, v)) FROM {s} [BETWEEN {_lit(lo)} AND {_lit(hi)}] "
                        "GROUP BY k ORDER BY k").fetchall()
        rows = [(k, v) for k, v, t in ROWS if at(lo) <= t < at(hi)]
        assert [(k, round(x, 6)) for k, x in got] == [
            (key, round(sum(round(v * 3 + k, 2) for k, v in rows if k == key), 6))
            for key in sorted({k for k, _ in rows})]
        # a call inside a call's argument is the function too
        got = c.execute(f"SELECT max({f}(k, {f}(k, v))) FROM {s} [BETWEEN {_lit(lo)} AND "
                        f"{_lit(hi)}]").fetchall()
        assert round(got[0][0], 6) == round(max(round(round(v * 3 + k, 2) * 3 + k, 2)
                                                for k, v in rows), 6)
        # parameters ($1) are bound before Spark sees the query
        got = c.execute(f"SELECT count(*) FROM {s} [BETWEEN {_lit(lo)} AND {_lit(hi)}] "
                        "WHERE k = %s", (2,)).fetchall()
        assert got == [(sum(n for k, n, *_ in want if k == 2),)]
        # two windows: a row holds over their intersection
        got = c.execute(f"SELECT a.v, b.v, valid_from, valid_to "
                        f"FROM {s} [BETWEEN {_lit(0)} AND {_lit(30)}] a, "
                        f"{s} [BETWEEN {_lit(20)} AND {_lit(50)}] b "
                        "WHERE a.t = b.t ORDER BY a.v").fetchall()
        want = _duckdb(server.data_dir, s,
                       f"SELECT v, v, TIMESTAMP {_lit(20)}, TIMESTAMP {_lit(30)} FROM {{s}} "
                       f"WHERE t >= TIMESTAMP {_lit(20)} AND t < TIMESTAMP {_lit(30)} "
                       "ORDER BY v")
        assert got == want and len(got) == 20
        assert c.execute(f"SELECT count(*) FROM {s} [BETWEEN {_lit(0)} AND {_lit(10)}] a, "
                         f"{s} [BETWEEN {_lit(10)} AND {_lit(20)}] b").fetchall() == [(0,)]
        plan = [r[0] for r in c.execute(f"EXPLAIN SELECT v FROM {s} "
                                        f"[BETWEEN {_lit(0)} AND {_lit(10)}]").fetchall()]
        assert plan[0] == "archive query (Spark, over the archive) → v"
        assert plan[-2].endswith("between 2026-11-01 00:00:00 and 2026-11-01 00:00:10")
        live = unique("live")
        c.execute(f"CREATE STREAM {live} (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="not archived"):
            c.execute(f"SELECT k FROM {live} [BETWEEN {_lit(0)} AND {_lit(10)}]")
        assert c.execute("SELECT 1").fetchone() == (1,)     # the session goes on


def test_archive_answers_stream_back_with_progress_notices_psql_prints(server):
    s = unique("progress")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _archived(c, s)
    query = (f"SELECT a.k, count(*) AS n FROM {s} [BETWEEN {_lit(0)} AND {_lit(60)}] a, "
             f"{s} [BETWEEN {_lit(0)} AND {_lit(60)}] b WHERE a.k = b.k GROUP BY a.k "
             "ORDER BY a.k")
    # cq.progress_interval = 0: a line at every change of stages done, and one at the end
    r = psql(server, "-A", "-t", "-c", "SET cq.progress_interval = 0", "-c", query,
             timeout=180)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "archive query on Spark" in ln]
    assert lines and all(ln.startswith("NOTICE:  archive query on Spark: ") for ln in lines)
    done, total = map(int, re.search(r"(\d+) of (\d+) stages done", lines[-1]).groups())
    assert done == total >= 2, lines       # a join and an aggregate: several stages
    want = _duckdb(server.data_dir, s, "SELECT a.k, count(*) FROM {s} a, {s} b "
                   "WHERE a.k = b.k GROUP BY a.k ORDER BY a.k")
    assert [tuple(map(int, ln.split("|"))) for ln in r.stdout.split()[1:]] == want
    # a short job at the default interval (1 s) says nothing; a cursor reads it forward,
    # and closing it early ends the Spark job
    with psycopg.connect(server.dsn) as c:
        heard = []
        c.add_notice_handler(lambda d: heard.append(d.message_primary))
        with c.cursor(name="past") as cur:
            cur.itersize = 7
            cur.execute(f"SELECT k, v FROM {s} [BETWEEN {_lit(0)} AND {_lit(60)}]")
            first = cur.fetchmany(7)
        assert len(first) == 7 and heard == []
        got = c.execute(f"SELECT k, v FROM {s} [BETWEEN {_lit(0)} AND {_lit(30)}]").fetchall()
        assert sorted(got) == sorted((k, v) for k, v, _ in ROWS[:60])
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        with psycopg.connect(server.dsn) as c:
            c.execute("SET cq.progress_interval = 'soon'")


# ---------------------------------------------------------------- cancelling a long query
def _cancelled_line(pid: int) -> str:
    return f"archive query cancelled on Spark (pid {pid}, job group cqgate-"


@pytest.fixture(scope="module")
def long_archive(server):
    """Two archived streams of the same 120 tuples: ``sparse`` one tuple a Parquet file (Spark
    checks a cancelled task's kill flag between the batches it reads, here after every
    tuple), ``dense`` all in two files (few files for Spark to list)."""
    names = unique("sparse"), unique("dense")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for name, fragment in zip(names, ("1 second", "1 minute")):
            c.execute(f"CREATE STREAM {name} (k INT, v DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
                      f"TYPE ARCHIVED WITH (fragment = '{fragment}')")
            with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
                for i in range(120):
                    cp.write_row((i % 4, 1 + i / 1000, at(i)))
    return names


def _long_query(names) -> str:
    """A 5-way cross join over the archive (120⁵ rows summed): about 90 s on Spark's two
    cores here, and a task stops within a fraction of a second of its kill flag."""
    sparse, dense = names
    w = f"[BETWEEN {_lit(0)} AND {_lit(120)}]"
    return (f"SELECT sum(a.v * b.v * c.v * d.v * e.v) FROM {sparse} {w} a, {dense} {w} b, "
            f"{dense} {w} c, {dense} {w} d, {dense} {w} e")


def _quick(c, names) -> None:
    """An archive query over the one-tuple files, checked: a few seconds when no cancelled
    job holds Spark's cores."""
    got = c.execute(f"SELECT count(*) FROM {names[0]} [BETWEEN {_lit(0)} AND {_lit(120)}]") \
        .fetchall()
    assert got == [(120,)]


def _spark_is_free(c, names) -> None:
    """Spark's cores are free: ``_quick`` ends, with its answer, within 60 s, where tasks of
    a cancelled job that ran on would hold them for most of the long query's ~90 s (60 s is
    generous, for a busy machine; how soon Spark is free again is a benchmark's figure)."""
    c.execute("SET statement_timeout = '60s'")
    try:
        _quick(c, names)
    except psycopg.errors.QueryCanceled as e:
        raise AssertionError("a short archive query did not end within 60 s: the cancelled "
                             "query's tasks still hold Spark's cores") from e
    c.execute("SET statement_timeout = 0")


def _in_thread(c, sql: str, params=None) -> tuple[threading.Thread, dict, threading.Event]:
    """Run ``sql`` on ``c`` in a thread; ``out`` gets the error (or None); the event is set at
    the first progress NOTICE (Spark lists the job's stages: it runs). The connection must
    have cq.progress_interval = 0 for the event."""
    out, on_spark = {}, threading.Event()
    c.add_notice_handler(lambda d: "archive query on Spark" in (d.message_primary or "")
                         and on_spark.set())

    def run():
        try:
            c.execute(sql, params).fetchall()
            out["error"] = None
        except psycopg.Error as e:
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out, on_spark


def _wait_cancelled_on_spark(server, c, timeout: float = 60) -> None:
    """Wait for the server to log that Spark ended the jobs of ``c``'s cancelled query."""
    said = _cancelled_line(c.info.backend_pid)
    deadline = time.monotonic() + timeout
    while not any(said in ln for ln in server.lines):
        assert time.monotonic() < deadline, "Spark's jobs were not reported cancelled:\n" + \
            "".join(server.lines[-20:])
        time.sleep(0.05)
    assert not any("Spark still lists jobs" in ln for ln in server.lines)


def _cancelled(server, c, names, out, t, why: str) -> None:
    """The long query in ``t`` ended with 57014 for ``why`` (it would run ~90 s: ending
    within the generous 60 s wait shows it was interrupted), its Spark jobs ended, and the
    session and Spark's cores are free."""
    t.join(60)
    assert not t.is_alive(), "the archive query was not interrupted"
    assert isinstance(out["error"], psycopg.errors.QueryCanceled), out
    assert str(out["error"]) == f"canceling statement due to {why}"
    _wait_cancelled_on_spark(server, c)
    assert c.execute("SELECT 1").fetchone() == (1,)            # the session goes on
    _spark_is_free(c, names)


def test_statement_timeout_ends_a_long_archive_query_and_its_spark_jobs(server,
                                                                       long_archive):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _quick(c, long_archive)                       # Spark started and warm
        c.execute("SET statement_timeout = '1s'")
        t, out, _ = _in_thread(c, _long_query(long_archive))
        _cancelled(server, c, long_archive, out, t, "statement timeout")


def test_a_cancel_request_interrupts_a_long_archive_query(server, long_archive):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _quick(c, long_archive)
        c.execute("SET cq.progress_interval = 0")
        # with a parameter: the extended protocol, its portal dropped at Sync
        t, out, on_spark = _in_thread(c, _long_query(long_archive) + " WHERE a.k >= %s", [0])
        # the first NOTICE comes as the broadcasts run: a cancel now often falls between two
        # of the query's Spark jobs, and the next must not run on
        assert on_spark.wait(60), out
        c.cancel()                                    # psycopg's CancelRequest
        _cancelled(server, c, long_archive, out, t, "user request")


def test_pg_cancel_backend_interrupts_a_long_archive_query(server, long_archive):
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn, autocommit=True) as other:
        _quick(c, long_archive)
        c.execute("SET cq.progress_interval = 0")
        t, out, on_spark = _in_thread(c, _long_query(long_archive))
        assert on_spark.wait(60), out
        assert other.execute("SELECT pg_cancel_backend(%s)",
                             [c.info.backend_pid]).fetchone() == (True,)
        _cancelled(server, c, long_archive, out, t, "user request")


def _tumbling_counts_on_spark(srv) -> dict:
    """{(k, window end in seconds): count} of a tumbling count run with cq.engine = spark over
    a live stream of 30 seconds, 10 tuples each second-ten, keys 0 and 1."""
    live = unique("live")
    with psycopg.connect(srv.dsn, autocommit=True) as admin, psycopg.connect(srv.dsn) as c:
        admin.execute(f"CREATE STREAM {live} (k INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "WITH (heartbeat = 'none')")
        c.execute("SET cq.engine = spark")
        c.execute(f"DECLARE w CURSOR FOR SELECT k, COUNT(*) AS n, wtime(*) FROM {live} "
                  "[RANGE '10 seconds' SLIDE '10 seconds'] GROUP BY k")
        admin.execute(f"INSERT INTO {live} VALUES " + ", ".join(
            f"({i % 2}, TIMESTAMP {_lit(i + 0.5)})" for i in range(30)))
        admin.execute(f"ALTER STREAM {live} ADVANCE TO TIMESTAMP {_lit(40)}")
        rows = c.execute("FETCH 6 FROM w WITH (timeout = '60s')").fetchall()
        return {(k, int((t - at(0)).total_seconds())): n for k, n, t in rows}


def test_an_archive_query_on_a_standalone_spark_cluster(tmp_path):
    with standalone(1, str(tmp_path), memory="1g") as (master_url, _):
        srv = ServerProcess(str(tmp_path / "data"), "--spark-master", master_url)
        try:
            s = unique("cluster")
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                _archived(c, s)
                got = c.execute(f"SELECT k, count(*), sum(v) FROM {s} "
                                f"[BETWEEN {_lit(5)} AND {_lit(55)}] GROUP BY k ORDER BY k") \
                    .fetchall()
            want = _duckdb(srv.data_dir, s, f"SELECT k, count(*), sum(v) FROM {{s}} WHERE "
                           f"t >= TIMESTAMP {_lit(5)} AND t < TIMESTAMP {_lit(55)} "
                           "GROUP BY k ORDER BY k")
            assert got == want and len(got) == 4
            # a continuous query on the cluster (cq.engine = spark): its executor reads the
            # spool
            assert _tumbling_counts_on_spark(srv) == {(k, 10 * (w + 1)): 5 for k in range(2)
                                                      for w in range(3)}
            # the cluster ran it: the worker launched an executor for the server's application
            assert glob.glob(str(tmp_path / "work" / "app-*"))
        finally:
            srv.stop()
