"""Keyed aggregates split across back-end workers (``--backend-workers``): which plans split,
random keyed aggregates on a two-worker server right at every instant (DuckDB's snapshots, as
the differential tester judges them), rows in valid_from order, and a lost worker."""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import urllib.request

import psycopg
import pytest
import sqlglot

import dialect  # noqa: F401 - registers the dialects
from conftest import ROOT, ServerProcess, logged_tracebacks
from continuous import at, follow, lit, wait_for, wait_running
from differential.grammar import Generator, RefItem, Select, Wrapped
from differential.runner import ACCEPTED, Round
from differential.world import random_data
from dialect.planner import plan
from gateway.link.shards import shard_key
from planner_catalog import seed_catalog

SEED = 20261129
CASES = 60


@pytest.fixture(scope="module")
def split_server(tmp_path_factory):
    s = ServerProcess(str(tmp_path_factory.mktemp("cqgate-split")), "--backend-workers", "2",
                      "--http-port", "0")
    yield s
    s.stop()
    tracebacks = logged_tracebacks(s.lines)
    assert not tracebacks, tracebacks[0]


def _key(sql: str):
    key = shard_key(plan(sqlglot.parse_one(sql, read="cql"), seed_catalog(), now_us=0))
    return None if key is None else key.sql


@pytest.mark.parametrize("sql, key", [
    ("SELECT node, avg(airtemp) FROM sensors [RANGE '10 seconds'] GROUP BY node",
     '"sensors.node"'),
    # HAVING, a WHERE and a hopping window stay with each key; an integer key is preferred
    ("SELECT type, customer_id % 3, count(*) FROM S [RANGE '10 seconds' SLIDE '5 seconds'] "
     "WHERE call_length > 1 GROUP BY type, customer_id % 3 HAVING count(*) > 1",
     '"S.customer_id" % 3'),
    ("SELECT type, count(*) FROM S [RANGE '1 minute'] GROUP BY type", '"S.type"'),
    # no key, or one whose groups need every row in one place: one back end
    ("SELECT count(*) FROM sensors [RANGE '10 seconds']", None),
    # a key DuckDB computes is hashed by DuckDB
    ("SELECT airtemp, count(*) FROM sensors [RANGE '10 seconds'] GROUP BY airtemp",
     '"sensors.airtemp"'),
    ("SELECT greatest(node, 3), count(*) FROM sensors [RANGE '10 seconds'] "
     "GROUP BY greatest(node, 3)", 'GREATEST("sensors.node", 3)'),
    ("SELECT node, count(*) FROM sensors [ROWS 10] GROUP BY node", None),
    ("SELECT 'a', count(*) FROM sensors [RANGE '10 seconds'] GROUP BY 'a'", None),
    ("SELECT node, airtemp FROM sensors [RANGE '10 seconds'] WHERE node > 1", None),
    ("SELECT DISTINCT node FROM sensors [RANGE '10 seconds']", None),
    ("SELECT R.sid, count(*) FROM R [RANGE '5 seconds'], P [RANGE '5 seconds'] "
     "WHERE R.sid = P.sid GROUP BY R.sid", None),
])
def test_which_plans_split(sql, key):
    assert _key(sql) == key


def _keyed_cases(seed: int, n: int) -> list:
    """The first ``n`` random cases of the differential grammar that group one stream."""
    gen, out = Generator(seed), []
    while len(out) < n:
        case = gen.case()
        q = case.query.query if isinstance(case.query, Wrapped) else case.query
        if isinstance(q, Select) and q.group and len(q.from_) == 1 and not q.joins and \
                isinstance(q.from_[0], RefItem):
            out.append(case)
    return out


def test_split_keyed_aggregates_are_right_at_every_instant(split_server):
    cases, rng = _keyed_cases(SEED, CASES), random.Random(SEED)
    outcomes = []
    for start in range(0, CASES, 30):
        outcomes += Round(split_server.dsn, cases[start:start + 30], random_data(rng),
                          variants=()).run()
    bad = [(o.how, o.status, o.sqlstate, o.message, o.detail) for o in outcomes if o.failed]
    assert not bad, bad
    accepted = [o for o in outcomes if o.status in ACCEPTED]
    assert len(accepted) > CASES // 2 and sum(o.rows for o in accepted) > CASES
    # most of them ran split (the rest: keys of floats, ROWS windows, …)
    split = [ln for ln in split_server.lines if "(split across 2 back ends by" in ln]
    assert len(split) >= CASES // 3, len(split)


def test_split_rows_arrive_in_valid_from_order(split_server):
    with follow(split_server, "sp") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT valid_from, k, count(*) AS n, sum(v) AS sv "
                    f"FROM {s} [RANGE '3 seconds' SLIDE '1 second'] GROUP BY k")
        wait_running(split_server.dsn, f"FROM {s} [RANGE")
        plan_lines = [r[0] for r in admin.execute(
            f"EXPLAIN SELECT k, count(*) FROM {s} [RANGE '3 seconds'] GROUP BY k")]
        assert any(ln.startswith("Split across 2 back ends by the key") for ln in plan_lines)
        for t in range(30):
            admin.execute(f"INSERT INTO {s} VALUES " + ", ".join(
                f"({k}, {t}, {lit(t + k / 10)})" for k in range(-3, 7)))
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(40)}")
        # every key's every slide: 30 s of 10 keys, each tuple in three slides of 1 s
        rows: list = []
        wait_for(lambda: rows.extend(cur.execute("FETCH ALL FROM c").fetchall())
                 or sum(r[2] for r in rows) >= 3 * 30 * 10, what="the split query's rows")
        assert sum(r[2] for r in rows) == 3 * 30 * 10
        assert {r[1] for r in rows} == set(range(-3, 7))
        starts = [r[0] for r in rows]
        assert starts == sorted(starts)


def _worker_pid(server: ServerProcess, index: int) -> int:
    lines = [ln for ln in server.lines if f"back end {index} started (pid" in ln]
    return int(re.search(r"pid (\d+)", lines[-1]).group(1))


def test_a_lost_worker_ends_only_the_split_queries(split_server):
    with follow(split_server, "lw") as (s, admin, cur), \
            psycopg.connect(split_server.dsn) as other:
        cur.execute(f"DECLARE split CURSOR FOR SELECT k, count(*) FROM {s} [RANGE '5 seconds'] "
                    "GROUP BY k")
        plain = other.cursor()
        plain.execute(f"DECLARE plain CURSOR FOR SELECT k, v FROM {s} WHERE v > 0")
        wait_running(split_server.dsn, f"FROM {s}", 2)
        admin.execute(f"INSERT INTO {s} VALUES (1, 1, {lit(1)}), (2, 2, {lit(2)})")
        pid = _worker_pid(split_server, 1)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _worker_pid(split_server, 1) != pid, what="a new back end 1")
        with pytest.raises(psycopg.errors.lookup("57P02")):
            cur.execute("FETCH ALL FROM split")
        admin.execute(f"INSERT INTO {s} VALUES (3, 3, {lit(3)})")
        got = wait_for(lambda: len(rows := plain.execute("FETCH ALL FROM plain").fetchall())
                       and rows, what="the plain query's rows")
        assert {r[0] for r in got} <= {1, 2, 3}
    # a split query started after it runs on both again
    with follow(split_server, "lw") as (s, admin, cur):
        cur.execute(f"DECLARE again CURSOR FOR SELECT k, count(*) AS n, valid_from, valid_to "
                    f"FROM {s} [RANGE '5 seconds'] GROUP BY k")
        wait_running(split_server.dsn, f"FROM {s}")
        admin.execute(f"INSERT INTO {s} VALUES (1, 1, {lit(1)}), (2, 2, {lit(2)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")
        rows: list = []
        wait_for(lambda: rows.extend(cur.execute("FETCH ALL FROM again").fetchall())
                 or {r[0] for r in rows} == {1, 2}, what="rows from both back ends")
        # each key counted one tuple for the five seconds after it (in one row or more)
        assert {r[:2] for r in rows} == {(1, 1), (2, 1)}
        assert {k: (min(r[2] for r in rows if r[0] == k), max(r[3] for r in rows if r[0] == k))
                for k in (1, 2)} == {1: (at(1), at(6)), 2: (at(2), at(7))}


def test_metrics_show_every_back_end(split_server):
    with urllib.request.urlopen(f"http://127.0.0.1:{split_server.http_port}/metrics",
                                timeout=10) as r:
        text = r.read().decode()
    for process in ("gateway", "backend", "backend_1"):
        assert f'cqgate_process_cpu_seconds_total{{process="{process}"}}' in text


def test_backend_workers_must_be_positive():
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--backend-workers", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--backend-workers must be at least 1" in out.stderr
