"""pgcli (in a venv of its own, tests/tool_venvs.py): its start-up and completion catalog
queries all succeed, so tables, streams, windows and their columns complete; and an
interactive session in a terminal (tmux) runs a snapshot and a continuous query with LIMIT."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import psycopg
import pytest

from continuous import Feeder, lit, unique
from tool_venvs import venv

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def pgcli_venv():
    return venv("pgcli")


def test_pgcli_completes_tables_streams_windows_and_columns(server, pgcli_venv):
    t, s, w = unique("cli_t"), unique("cli_s"), unique("cli_w")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, label TEXT)")
        c.execute(f"CREATE STREAM {s} (reading INT, at TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE WINDOW {w} AS SELECT reading, count(*) AS n FROM {s} "
                  "[RANGE '1 minute'] GROUP BY reading")
    run = subprocess.run([os.path.join(pgcli_venv, "bin", "python"),
                          os.path.join(HERE, "drivers", "pgcli_completion.py"),
                          str(server.port), s], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["search_path"] == ["pg_catalog", "public"]
    assert {t, s, w} <= set(got["relations"])
    assert {"reading", "at"} <= set(got["columns"])


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-200"],
                          capture_output=True, text=True, timeout=10).stdout


def _type(session: str, line: str) -> None:
    """``line`` typed and Enter pressed (-l: a trailing ; would separate tmux commands)."""
    subprocess.run(["tmux", "send-keys", "-t", session, "-l", line], check=True, timeout=10)
    subprocess.run(["tmux", "send-keys", "-t", session, "Enter"], check=True, timeout=10)


def _wait_for(session: str, text: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _screen(session)
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared:\n{_screen(session)}")


def test_an_interactive_pgcli_session_in_a_terminal(server, pgcli_venv, tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is required for the interactive pgcli test: run scripts/setup.sh")
    t, s = unique("tty_t"), unique("tty_s")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {t} (id INT, label TEXT)")
        c.execute(f"INSERT INTO {t} VALUES (1, 'first label'), (2, 'second label')")
        c.execute(f"CREATE STREAM {s} (reading INT, at TIMESTAMP TIMESTAMPCOLUMN)")
    rc = tmp_path / "pgclirc"
    rc.write_text("[main]\nenable_pager = False\nless_chatty = True\n"
                  "keyring = False\nhistory_file = default\n")
    session = unique("pgcli")
    cmd = (f"{os.path.join(pgcli_venv, 'bin', 'pgcli')} --pgclirc {rc} -h 127.0.0.1 "
           f"-p {server.port} -U cq -d cq")
    env = {**os.environ, "HOME": str(tmp_path), "TERM": "xterm"}
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd],
                   check=True, timeout=10, env=env)
    try:
        _wait_for(session, "cq>")
        _type(session, f"SELECT label FROM {t} ORDER BY id;")
        _wait_for(session, "second label")
        feeder = Feeder(server.dsn, f"FROM {s}", [
            f"INSERT INTO {s} VALUES (7, {lit(1)}), (8, {lit(2)}), (9, {lit(3)})"], delay=0.5)
        _type(session, f"SELECT reading * 100 AS hundred FROM {s} LIMIT 2;")
        _wait_for(session, "| 800")
        feeder.join_checked()
        answer = _wait_for(session, "SELECT 2\n", 10).split("hundred")[-1]
        assert "| 700" in answer and "| 800" in answer and "900" not in answer, answer
        assert "error" not in _screen(session).lower()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], timeout=10)
