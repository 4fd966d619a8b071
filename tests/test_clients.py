"""Every program under clients/ runs against a real server and prints what it promises: the
psql walkthrough (its output is kept beside it, and compared whole), the Python programs
(psycopg 3, psycopg2, asyncpg, SQLAlchemy, ADBC with polars), pgjdbc, psqlODBC, and the shell
source."""
import os
import shutil
import subprocess
import sys

import psycopg
import pytest

from conftest import ServerProcess
from test_jdbc import _driver_jar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = os.path.join(ROOT, "clients")


@pytest.fixture(scope="module")
def clients_server(tmp_path_factory):
    """One server for the examples: each creates (and first drops) streams of its own."""
    s = ServerProcess(str(tmp_path_factory.mktemp("cqgate-clients")))
    yield s
    s.stop()


@pytest.fixture()
def cqgate_on_path(tmp_path):
    """``cqgate`` as the README installs it, run from this checkout."""
    shim = tmp_path / "cqgate"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gateway "$@"\n')
    shim.chmod(0o755)
    return {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _run(*args, env=None, cwd=None, timeout=90):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_python_static_tables(start_server):
    s = start_server()     # its own server: the example drops and creates "nodes"
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "static_tables.py"), s.dsn)
    assert r.stdout.splitlines() == ["hall: 1", "lab: 2"]


def test_psql_walkthrough(clients_server, cqgate_on_path):
    """psql -f walkthrough.sql from its folder, as the file says; stdout must be exactly the
    output kept beside it (walkthrough.out), and stderr says what the script expects."""
    folder = os.path.join(CLIENTS, "psql")
    r = _run("psql", "-X", "-h", "127.0.0.1", "-p", str(clients_server.port), "-U", "cq",
             "-f", "walkthrough.sql", cwd=folder,
             env={**cqgate_on_path, "CQGATE_INGEST_PORT": str(clients_server.ingest_port)})
    with open(os.path.join(folder, "walkthrough.out")) as f:
        assert r.stdout == f.read()
    assert "ERROR:  canceling statement due to statement timeout" in r.stderr
    assert "Traceback" not in r.stderr


def test_python_follow_psycopg(clients_server):
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "follow_psycopg.py"),
             clients_server.dsn)
    assert r.stdout.splitlines() == ["08:00:01 sensor 1: 26.5", "08:00:03 sensor 1: 27.0",
                                     "08:00:04 sensor 0: 30.5"]


def test_python_follow_asyncpg(clients_server):
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "follow_asyncpg.py"),
             f"postgresql://cq@127.0.0.1:{clients_server.port}/cq")
    assert r.stdout.splitlines() == ["meter 2: 20.0 kWh", "meter 0: 30.0 kWh",
                                     "meter 1: 40.0 kWh"]


def test_python_arrow_adbc_polars(clients_server):
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "arrow_adbc_polars.py"),
             f"postgresql://cq@127.0.0.1:{clients_server.port}/cq")
    assert r.stdout.splitlines() == ["[('ACME', 72.0), ('INIT', 78.0)]",
                                     "Datetime(time_unit='us', time_zone=None)"]


def test_python_follow_psycopg2(clients_server):
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "follow_psycopg2.py"),
             clients_server.dsn)
    assert r.stdout.splitlines() == ["08:00:00 front opened", "08:00:03 garage opened",
                                     "08:00:04 back opened"]


def test_python_bi_sqlalchemy(clients_server):
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "bi_sqlalchemy.py"),
             f"postgresql+psycopg://cq@127.0.0.1:{clients_server.port}/cq")
    assert r.stdout.splitlines() == ["Lyon: 15.0", "Porto: 5.0",
                                     "sales in the last 30 minutes: 1"]


def _java(example: str, port: int, folder) -> list:
    """clients/jdbc/<example>.java compiled into ``folder`` and run against the server on
    ``port``: the lines it prints."""
    if shutil.which("javac") is None:
        pytest.fail("javac (JDK 17) is required for the JDBC examples")
    _run("javac", "-d", str(folder), os.path.join(CLIENTS, "jdbc", f"{example}.java"),
         timeout=120)
    r = _run("java", "-cp", f"{folder}{os.pathsep}{_driver_jar()}", example,
             f"jdbc:postgresql://127.0.0.1:{port}/cq", timeout=120)
    return r.stdout.splitlines()


def test_jdbc_follow_trips(clients_server, tmp_path):
    assert _java("FollowTrips", clients_server.port, tmp_path) == \
        ["zone 1: 12.5", "zone 2: 30.0", "zone 1: 11.0"]


RESUMED = ["08:00:01 node 1: 2.5", "08:00:03 node 1: 3.0", "-- dropped; resuming from {}",
           "08:00:05 node 2: 4.0", "08:00:06 node 1: 1.5", "total: 11.0"]


def test_python_resume_psycopg(clients_server, tmp_path):
    """Progress rows and resume_from with psycopg: each row counted once across a dropped
    connection."""
    r = _run(sys.executable, os.path.join(CLIENTS, "python", "resume_psycopg.py"),
             clients_server.dsn, str(tmp_path / "state.json"))
    assert r.stdout.splitlines() == [x.format("2026-10-01 08:00:04") for x in RESUMED]


def test_jdbc_resume(clients_server, tmp_path):
    """The same with pgjdbc: cq_progress read with getTimestamp and wasNull."""
    assert _java("ResumeUsage", clients_server.port, tmp_path) == \
        [x.format("2026-10-01 08:00:04.0") for x in RESUMED]


def test_odbc_follow(clients_server):
    folder = os.path.join(CLIENTS, "odbc")
    r = _run(sys.executable, os.path.join(folder, "follow.py"), str(clients_server.port),
             env={"ODBCINI": os.path.join(folder, "odbc.ini")})
    assert r.stdout.splitlines() == ["zone 1: 12.5", "zone 2: 30.0", "zone 1: 11.0"]


def test_shell_source_with_nc(clients_server):
    """clients/sources/source.sh: three readings through nc reach a running query, and a bad
    stream name comes back as the ingest port's one ERROR line."""
    with psycopg.connect(clients_server.dsn, autocommit=True) as admin:
        admin.execute("DROP STREAM IF EXISTS meter CASCADE")
        admin.execute("CREATE STREAM meter (reading INT, load DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN)")
        with psycopg.connect(clients_server.dsn) as conn, conn.cursor() as cur:
            cur.execute("DECLARE c CURSOR FOR SELECT reading, load >= 0 FROM meter")
            env = {"COUNT": "3", "EVERY": "0", "PORT": str(clients_server.ingest_port)}
            r = _run("sh", os.path.join(CLIENTS, "sources", "source.sh"), "meter", env=env)
            assert r.stdout == ""
            cur.execute("FETCH 3 FROM c WITH (timeout = '30s')")
            assert cur.fetchall() == [(0, True), (1, True), (2, True)]
    r = _run("sh", os.path.join(CLIENTS, "sources", "source.sh"), "no_such_stream", env=env)
    assert r.stdout.startswith("ERROR:") and "no_such_stream" in r.stdout
