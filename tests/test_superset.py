"""Apache Superset, a BI tool from PyPI, in a venv of its own (made once, with its metadata
database initialised once): it tests and adds cqgate as a database with
options=-c cq.mode=snapshot, lists tables, streams and named windows with their columns,
runs SQL Lab queries on a table, a named window and a stream at now, and a chart over a named
window returns its data, all through Superset's REST API."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import psycopg
import pytest

from continuous import lit, unique
from tool_venvs import superset_env, superset_metadata

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def superset(tmp_path_factory):
    """(python, environment) of a Superset whose metadata database is a copy of the one made
    with the venv (tests/tool_venvs.py)."""
    home, ready = superset_metadata()
    db = str(tmp_path_factory.mktemp("superset") / "superset.db")
    shutil.copy(ready, db)
    return os.path.join(home, "bin", "python"), superset_env(home, db)


def test_superset_adds_browses_queries_and_charts_cqgate(server, superset):
    t, s, w = unique("ss_t"), unique("ss_s"), unique("ss_w")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, label TEXT)")
        c.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two')")
        c.execute(f"CREATE STREAM {s} (a INT, ts TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE WINDOW {w} AS SELECT a, count(*) AS n FROM {s} [RANGE UNBOUNDED] "
                  "GROUP BY a")
        c.execute(f"INSERT INTO {s} VALUES (1, {lit(1)}), (2, {lit(2)}), (1, {lit(3)})")
    python, env = superset
    entry = os.path.join(os.path.dirname(HERE), "clients", "superset", "database.json")
    run = subprocess.run([python, os.path.join(HERE, "drivers", "superset_check.py"),
                          str(server.port), s, w, t, entry], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["test_connection"][0] == 200, got["test_connection"]
    assert {(t, "table"), (s, "table"), (w, "view")} <= {tuple(x) for x in got["tables"]}
    assert [c[0] for c in got["window_columns"]] == ["a", "n"]
    assert got["sql_table"] == [200, [{"id": 1, "label": "one"}, {"id": 2, "label": "two"}]]
    assert got["sql_window"] == [200, [{"a": 1, "n": 2}, {"a": 2, "n": 1}]]
    assert got["sql_stream"] == [200, [{"a": 1, "c": 2}, {"a": 2, "c": 1}]]
    status, chart_id, data = got["chart"]
    assert status == 200 and chart_id, got["chart"]
    assert data == [{"a": 1, "total": 2}, {"a": 2, "total": 1}]
