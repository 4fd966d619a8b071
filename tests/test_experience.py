"""What a newcomer meets outside SQL: ``cqgate --help`` and every command's help are complete
(every option explained, every CQGATE_* setting named), and ``cqgate serve`` logs one readable
line per event."""
import argparse
import dataclasses
import re
import socket
import subprocess
import sys
import time

import psycopg
import pytest

from gateway.process.cli import build_parser
from gateway.config import Config


def _help(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "gateway", *args, "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_command_and_option_has_help():
    top = _help()
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert re.search(rf"^\s+{name}\s+\S", top, re.M), f"{name} missing from cqgate --help"
        text = _help(name)
        assert "examples:" in text
        for action in sub._actions:
            assert action.help, f"cqgate {name} {action.option_strings or action.dest}: no help"
    serve = " ".join(_help("serve").split())
    for f in dataclasses.fields(Config):          # every setting says how to set it by name
        assert "CQGATE_" + f.name.upper() in serve, f.name
    assert "~/.cqgate/data" in serve
    v = subprocess.run([sys.executable, "-m", "gateway", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert re.fullmatch(r"cqgate \S+\n", v.stdout)


def _lines_after(server, mark: int, pattern: str, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hits = [ln for ln in server.lines[mark:] if re.search(pattern, ln)]
        if hits:
            # not a wait for anything: a moment in which a second line of the same event
            # (which must not come) could show up; a slow machine can only hide one
            time.sleep(0.3)
            return [ln for ln in server.lines[mark:] if re.search(pattern, ln)]
        time.sleep(0.05)
    raise AssertionError(f"no log line matching {pattern!r} in:\n" + "".join(server.lines[mark:]))


def test_serve_logs_one_line_per_event(start_server):
    s = start_server()
    mark = len(s.lines)
    with psycopg.connect(s.dsn, autocommit=True, application_name="logcheck") as admin:
        pid = admin.info.backend_pid
        assert _lines_after(s, mark, rf"client connected: pid={pid} user=cq database=cq "
                                     r"application=logcheck from 127\.0\.0\.1:\d+$")
        admin.execute("CREATE STREAM logged (v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        admin.execute("CREATE WINDOW recent AS SELECT COUNT(*) FROM logged [RANGE '1 minute']")
        assert len(_lines_after(s, mark, r"query started: window recent$")) == 1
        with admin.transaction():
            admin.execute("DECLARE follow CURSOR FOR SELECT v FROM logged WHERE v > 1")
            assert len(_lines_after(s, mark, rf"query started: cursor follow of pid {pid}: "
                                             r"SELECT v FROM logged WHERE v > 1$")) == 1
            admin.execute("CLOSE follow")
            assert len(_lines_after(s, mark, r"query stopped: cursor follow of pid")) == 1
        with socket.create_connection(("127.0.0.1", s.ingest_port), timeout=30) as src:
            src.sendall(b"csvwrapper,logged\n1,2026-11-01 00:00:05\n")
            src.shutdown(socket.SHUT_WR)
            assert src.recv(100) == b""
        assert len(_lines_after(s, mark, r"source 127\.0\.0\.1:\d+ feeds stream logged with "
                                         r"csvwrapper$")) == 1
        assert len(_lines_after(s, mark, r"source 127\.0\.0\.1:\d+ done: 1 tuple\(s\), "
                                         r"0 bad line\(s\)$")) == 1
        admin.execute("INSERT INTO logged VALUES (2, '2026-11-01 00:00:01')")      # late
        late = _lines_after(s, mark, r"WARNING stream logged: 1 late tuple\(s\) not delivered")
        assert len(late) == 1 and f"INSERT (pid {pid})" in late[0]
        assert "watermark 2026-11-01 00:00:05" in late[0] and "cq_late_tuples" in late[0]
        admin.execute("DROP WINDOW recent")
        assert len(_lines_after(s, mark, r"query stopped: window recent$")) == 1
    assert _lines_after(s, mark, rf"client disconnected: pid={pid} user=cq$")
    # every line is one event: a timestamp, the logger, a level, a message
    for line in s.lines[mark:]:
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} cqgate [A-Z]+ \S", line), line


@pytest.mark.parametrize("args, says", [
    (["push", "--port", "1", "s", "-"], "start the server (cqgate serve) or give its ingest port"),
])
def test_command_errors_say_what_to_do(args, says):
    r = subprocess.run([sys.executable, "-m", "gateway", *args], input="1\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and says in r.stderr
