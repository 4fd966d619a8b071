"""The Docker path: docker/compose.yaml (cqgate with a Spark master and worker built from the
same image) brought up with testcontainers, and an archive query run on that cluster. Where no
Docker engine runs, the test is skipped and says so; tests/test_archive_spark.py proves the
cluster path there with a master and worker started as local processes."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import psycopg
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _no_engine() -> str | None:
    """Why Docker cannot be used here, or None when it can."""
    if shutil.which("docker") is None:
        return "no Docker engine on this machine (no docker command)"
    r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    return None if r.returncode == 0 else "no Docker engine running (docker info failed)"


REASON = _no_engine()


@pytest.mark.skipif(REASON is not None, reason=f"{REASON}; the standalone-cluster path is "
                    "tested by tests/test_archive_spark.py with local master and worker processes")
@pytest.mark.timeout(900)
def test_compose_runs_an_archive_query_on_its_cluster():
    from testcontainers.compose import DockerCompose
    with DockerCompose(ROOT, compose_file_name="docker/compose.yaml", build=True):
        dsn = "host=127.0.0.1 port=55433 user=cq password=secret dbname=cq"
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = psycopg.connect(dsn, autocommit=True)
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "cqgate did not come up"
                time.sleep(1)
        with conn:
            conn.execute("CREATE STREAM dock (k INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED")
            conn.execute("INSERT INTO dock VALUES (1, '2026-11-01 00:00:01'), "
                         "(2, '2026-11-01 00:00:02'), (3, '2026-11-01 00:00:09')")
            got = conn.execute("SELECT count(*), sum(k) FROM dock [BETWEEN '2026-11-01 00:00:00' "
                               "AND '2026-11-01 00:00:05']").fetchall()
            assert got == [(2, 3)]
