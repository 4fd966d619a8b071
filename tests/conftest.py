"""Fixtures: a real cqgate server started as a subprocess on a free port (port 0) with a
temporary data directory, shared by the tests of one run; helpers to start extra servers."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
import warnings

import pytest

from scripts.embedded_postgres import EmbeddedPostgres

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServerProcess:
    def __init__(self, data_dir: str, *args: str, env: dict | None = None,
                 python: tuple = ("-m", "gateway")):
        """``python``: what runs the server's command line (a test may wrap it)."""
        self.data_dir = data_dir
        cmd = [sys.executable, *python, "serve", "--port", "0", "--ingest-port", "0",
               "--data-dir", data_dir, *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.port = None
        ready = threading.Event()
        self.lines: list[str] = []

        def pump(stream):
            for line in stream:
                self.lines.append(line)
                m = re.search(r"ready: accepting PostgreSQL connections on [^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    s = re.search(r"stream sources on [^:]+:(\d+)", line)
                    self.ingest_port = int(s.group(1)) if s else None
                    h = re.search(r"metrics on http://[^:]+:(\d+)/metrics", line)
                    self.http_port = int(h.group(1)) if h else None
                    t = re.search(r"\?token=(\S+)", line)
                    self.http_token = t.group(1) if t else None
                    ready.set()

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        threading.Thread(target=pump, args=(self.proc.stderr,), daemon=True).start()
        if not ready.wait(60):
            self.stop()
            raise RuntimeError("server did not become ready:\n" + "".join(self.lines))

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=cq dbname=cq"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The server most tests share. The run fails if it logged a traceback: an internal
    error somewhere, whatever the test that caused it saw."""
    # NEXMark q14's count_char (clients/python/functions.py), a function the operator names
    s = ServerProcess(str(tmp_path_factory.mktemp("cqgate-data")), "--http-port", "0",
                      "--function", "count_char=functions:count_char",
                      env={"PYTHONPATH": os.pathsep.join(
                          [os.path.join(ROOT, "clients", "python"),
                           os.environ.get("PYTHONPATH", "")])})
    yield s
    s.stop()
    tracebacks = logged_tracebacks(s.lines)
    if tracebacks:
        pytest.fail("the shared server logged a traceback:\n" + tracebacks[0], pytrace=False)
    # a query on Spark whose Python worker missed Spark's 10 s to connect back (a busy
    # machine) went on from its checkpoint: the tests saw the right rows, and the run's
    # summary says it happened (the worker a test kills on purpose is not counted)
    late = [line.strip() for line in s.lines if "lost a Python worker (did not start" in line]
    if late:
        warnings.warn(f"the shared server started {len(late)} Spark queries again: "
                      + "; ".join(late))


# a record of the server's own log, which another process's traceback may be cut by (Spark's
# Python workers write to the same stderr)
_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def logged_tracebacks(lines: list) -> list:
    """The tracebacks in a server's log, each with the line before it (what it logged); not
    those of Spark's own Python workers (a worker that timed out reaching its JVM under
    load), which pass through no code of the server's and whose query reports the error, nor
    a bare header with no frames. A traceback's frames are read past the server's log records
    written in between."""
    out = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = next((j for j in range(i + 1, len(lines))
                        if not lines[j].startswith((" ", "Traceback"))
                        and not _LOG_RECORD.match(lines[j])), len(lines) - 1)
            frames = [x for x in lines[i:end + 1] if x.lstrip().startswith('File "')]
            if any("pyspark" in f for f in frames) and not any(ROOT in f for f in frames):
                continue
            # the server logs a traceback in one record, frames and all: a bare header is
            # another process's, cut off (a Spark worker stopped with its query mid-write)
            if not frames:
                continue
            out.append("".join(lines[max(0, i - 1):end + 1]))
    return out


@pytest.fixture
def start_server(tmp_path_factory):
    started = []

    def start(*args, data_dir=None, env=None):
        s = ServerProcess(data_dir or str(tmp_path_factory.mktemp("cqgate-extra")), *args,
                          env=env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def table_name():
    return "t_" + uuid.uuid4().hex[:8]


def psql(server, *args: str, stdin: str | None = None, env: dict | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = ["psql", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "cq", "-d", "cq",
           "-v", "ON_ERROR_STOP=0", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PGCONNECT_TIMEOUT": "10", **(env or {})})


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    """A PostgreSQL 18 of the module's own (scripts/embedded_postgres.py), with commit
    timestamps kept (the oracle's clock for streams that follow its tables)."""
    server = EmbeddedPostgres()
    server.start(tmp_path_factory.mktemp("pg") / "data", fast=True)
    server.psql("ALTER SYSTEM SET track_commit_timestamp = on")
    server.restart()
    yield server
    server.stop()
