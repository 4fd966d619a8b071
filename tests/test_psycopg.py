"""psycopg 3, in both its pure-Python and binary implementations, driven in subprocesses."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("impl", ["python", "binary"])
def test_psycopg_round_trips(server, table_name, impl):
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "drivers", "psycopg_check.py"), server.dsn,
         f"{table_name}_{impl}", impl],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PSYCOPG_IMPL": impl})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"ok {impl}"
