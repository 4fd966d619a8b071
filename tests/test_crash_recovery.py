"""Crash recovery through real clients (psycopg), faults injected repeatedly:

- ``kill -9`` of the back end while a source pushes rows and cursors read them: each running
  cursor ends with 57P02, the server stays up, a new back end starts, new cursors see new
  rows, and the named window and derived stream the server keeps run again;
- ``kill -9`` of the whole server mid-COPY into an archived stream, round after round on one
  data directory: after each restart the archive holds every acknowledged row exactly once,
  and an interrupted COPY's rows all or none (COPY is one statement, as in PostgreSQL);
- SIGTERM with a long statement, a cursor mid-FETCH, a source and an open COPY into an
  archived stream: exit 0 within 5 seconds, the back end gone, a clean restart.

Each test prints one ``crash: …`` line counting what it did (faults, restarts, rows checked).
"""
from __future__ import annotations

import collections
import datetime as dt
import glob
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import duckdb
import psycopg

from conftest import ServerProcess
from continuous import at

LONG = "SELECT count(*) FROM range(100000000) a, range(100000) b"    # minutes of DuckDB work


# ---------------------------------------------------------------------- helpers
def _wait(what: str, ok, timeout: float = 20, every: float = 0.02):
    """``ok()``'s first true value, polled until ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = ok()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(every)


def _parent(pid: int) -> int | None:
    """The parent of a live process (None when it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[1])


def _backend_pid(srv: ServerProcess, old: int | None = None, timeout: float = 20) -> int:
    """The pid of the server's running back end, from its log ("back end started (pid N)"),
    waiting for one other than ``old`` (one killed) to have started."""
    def found():
        pids = re.findall(r"back end started \(pid (\d+)\)", "".join(list(srv.lines)))
        assert srv.alive(), "the server died:\n" + "".join(srv.lines[-30:])
        if pids and int(pids[-1]) != old and _parent(int(pids[-1])) == srv.proc.pid:
            return int(pids[-1])
        return None
    return _wait("a new back end", found, timeout)


def _count(srv: ServerProcess, text: str) -> int:
    return sum(text in line for line in list(srv.lines))


def _kill9(srv: ServerProcess) -> int:
    """kill -9 the whole server (so far without a traceback in its log); returns its back
    end's pid (the gateway's child)."""
    assert _count(srv, "Traceback") == 0, "".join(srv.lines)
    backend = _backend_pid(srv)
    srv.proc.send_signal(signal.SIGKILL)
    assert srv.proc.wait(10) == -signal.SIGKILL
    return backend


def _gone(pid: int, timeout: float = 10) -> None:
    """A back end left without its gateway (its socket closed) exits on its own."""
    _wait(f"back end {pid} to exit", lambda: _parent(pid) is None, timeout)


class Source(threading.Thread):
    """A source on the ingest port (``csvwrapper``) sending ``id,v,t`` lines, ``per_tick``
    every ``tick`` seconds, until ``finish``; ids count from 0 and t is id milliseconds
    after the seed epoch. ``error`` is the OSError that ended it, if one did."""

    def __init__(self, port: int, stream: str, per_tick: int = 20, tick: float = 0.01):
        super().__init__(daemon=True)
        self.port, self.stream, self.per_tick, self.tick = port, stream, per_tick, tick
        self.sent = 0
        self.answer: bytes | None = None
        self.error: OSError | None = None
        self._done = threading.Event()
        self.start()

    def run(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
                sock.sendall(f"csvwrapper,{self.stream}\n".encode())
                while not self._done.is_set():
                    ids = range(self.sent, self.sent + self.per_tick)
                    sock.sendall("".join(f"{i},{i % 7},{at(i / 1000).isoformat(sep=' ')}\n"
                                         for i in ids).encode())
                    self.sent += self.per_tick
                    time.sleep(self.tick)
                sock.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
                self.answer = answer
        except OSError as e:
            self.error = e

    def finish(self, timeout: float = 30) -> None:
        self._done.set()
        self.join(timeout)
        assert not self.is_alive(), "the source did not finish"


def _fetch_until_lost(cur, name: str, timeout: float = 20) -> tuple[list, psycopg.Error]:
    """FETCH from cursor ``name`` (rows queued before the crash come first) until the error
    that ends it; (the rows read, the error)."""
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        try:
            cur.execute(f"FETCH 100000 FROM {name} WITH (timeout = '500ms')")
        except psycopg.Error as e:
            return rows, e
        rows += cur.fetchall()
    raise AssertionError(f"cursor {name} did not end within {timeout} s of the crash")


# ---------------------------------------------------------------------- back end kill -9
def test_backend_kill_9_mid_stream_repeatedly(tmp_path):
    """Three times: a source pushes rows, cursors over the stream, a derived stream and a
    named window read them, and the back end is killed; each cursor ends with 57P02, the
    server and the source go on, and new cursors read new rows from the restarted queries."""
    kills = 3
    srv = ServerProcess(str(tmp_path / "data"))
    source = None
    conns = []
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as admin:
            admin.execute("CREATE STREAM feed (id INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
            admin.execute("CREATE STREAM tens AS SELECT id FROM feed [NOW] WHERE id % 10 = 0")
            admin.execute("CREATE WINDOW per_v AS SELECT v, count(*) AS n FROM feed "
                          "[RANGE '1 second' SLIDE '1 second'] GROUP BY v")
            source = Source(srv.ingest_port, "feed")
            # one connection per cursor: each ends on its own, in its own transaction
            conns = [psycopg.connect(srv.dsn) for _ in range(3)]
            cursors = {"c": "SELECT id FROM feed", "d": "SELECT id FROM tens",
                       "w": "SELECT v, n FROM Stream(per_v)"}
            last_id, lost, reads = -1, 0, 0
            for k in range(kills + 1):
                backend = _backend_pid(srv)
                # the kept window and derived stream run (again) in this back end
                kept = dict(admin.execute("SELECT name, kind FROM cq_queries WHERE pid IS NULL")
                            .fetchall())
                assert kept == {"tens": "derived", "per_v": "window"}, kept
                curs = {}
                for conn, (name, sql) in zip(conns, cursors.items()):
                    cur = conn.cursor()
                    cur.execute(f"DECLARE {name} CURSOR FOR {sql}")
                    curs[name] = cur
                # new rows flow through each: the stream's, the derived stream's (ids made
                # after the last kill) and the window's (the counts of whole slides)
                for name in ("c", "d"):
                    curs[name].execute(f"FETCH 50 FROM {name} WITH (timeout = '10s')")
                    ids = [r[0] for r in curs[name].fetchall()]
                    assert len(ids) == 50 and ids == sorted(ids) and ids[0] > last_id, \
                        (k, name, ids[:5], last_id)
                    assert name == "c" or all(i % 10 == 0 for i in ids)
                    reads += len(ids)
                curs["w"].execute("FETCH 14 FROM w WITH (timeout = '10s')")
                counts = curs["w"].fetchall()
                assert len(counts) == 14 and {v for v, _ in counts} <= set(range(7)), counts
                assert all(0 < n <= 143 for _, n in counts), counts   # 1000 ids a slide / 7
                reads += len(counts)
                assert admin.execute("SELECT count(*) FROM per_v").fetchone()[0] <= 7
                last_id = max(last_id, ids[-1])
                if k == kills:
                    break
                os.kill(backend, signal.SIGKILL)
                for conn, (name, cur) in zip(conns, curs.items()):
                    rows, err = _fetch_until_lost(cur, name)
                    if name == "c" and rows:       # the newest id the old back end gave out
                        last_id = max(last_id, rows[-1][0])
                    assert isinstance(err, psycopg.errors.CrashShutdown), (name, err)
                    assert err.sqlstate == "57P02" and "the back end stopped" in str(err)
                    # (a stream that is not archived: its cursors cannot go on)
                    assert err.diag.message_hint.startswith("Run the query again")
                    conn.rollback()
                    lost += 1
                    reads += len(rows)
                assert srv.alive()
                _backend_pid(srv, old=backend)
                _wait("the kept queries to restart",
                      lambda: _count(srv, "query restarted:") == 2 * (k + 1))
            assert admin.execute("SELECT 1").fetchone() == (1,)
        source.finish()
        # the source kept its one connection through every crash; nothing was refused
        assert source.error is None and source.answer == b"", (source.error, source.answer)
        assert _count(srv, "the back end stopped (exit code -9); restarting it") == kills
        assert _count(srv, "Traceback") == 0, "".join(srv.lines)
        assert srv.stop() == 0
    finally:
        srv.stop()                          # first: whatever failed, no server is left behind
        for conn in conns:
            conn.close()
        if source is not None and source.is_alive():
            source.finish()
    print(f"\ncrash: {kills} back-end kills, {lost} cursors ended with 57P02, "
          f"{kills} back-end restarts, {2 * kills} kept queries restarted, "
          f"{source.sent} source rows sent, {reads} rows read")


# ---------------------------------------------------------------------- server kill -9 mid-COPY
FRAGMENT_S = 10           # the archived stream's fragment length, seconds


class Ledger:
    """The rows COPY sent into the archived stream ``ledger``, by outcome: ids are distinct
    across COPYs, event times only grow (nothing is late)."""

    def __init__(self):
        self.next_id = 0
        self.clock = 0.0                   # event time, seconds after the seed epoch
        self.acked: list[range] = []       # COPYs that returned COMMAND COMPLETE
        self.interrupted: list[range] = []  # COPYs the kill interrupted: all rows or none

    def rows(self, n: int, step: float) -> tuple[range, list]:
        ids = range(self.next_id, self.next_id + n)
        rows = [(i, at(self.clock + j * step)) for j, i in enumerate(ids)]
        self.next_id += n
        self.clock += n * step + FRAGMENT_S
        return ids, rows


def _copy(conn: psycopg.Connection | str, rows: list, kill=None) -> bool:
    """COPY ``rows`` into ledger (on ``conn``, or a connection of its own to that DSN);
    whether it was acknowledged. ``kill``: called after half the rows were sent (the COPY
    still open); the COPY then fails."""
    if isinstance(conn, str):
        try:
            with psycopg.connect(conn, autocommit=True) as own:
                return _copy(own, rows, kill)
        except psycopg.Error:
            return False
    try:
        with conn.cursor().copy("COPY ledger (id, t) FROM STDIN") as cp:
            for j, row in enumerate(rows):
                cp.write_row(row)
                if kill is not None and j == len(rows) // 2:
                    time.sleep(0.2)        # psycopg's buffer has gone out
                    kill()
        return True
    except psycopg.Error:
        return False


def _archived(srv: ServerProcess) -> collections.Counter:
    """id -> copies, as the server reads the archive (a snapshot over the stream's past)."""
    with psycopg.connect(srv.dsn + " options='-c cq.mode=snapshot'", autocommit=True) as c:
        rows = c.execute("SELECT id FROM ledger [RANGE '30 days']").fetchall()
    return collections.Counter(r[0] for r in rows)


def _check(ledger: Ledger, kept: collections.Counter) -> int:
    """Every acknowledged row once, each interrupted COPY all or none, nothing else;
    returns how many acknowledged rows were checked."""
    twice = {i: n for i, n in kept.items() if n > 1}
    assert not twice, f"{len(twice)} ids archived more than once, e.g. {list(twice)[:5]}"
    acked = set().union(*ledger.acked) if ledger.acked else set()
    lost = acked - kept.keys()
    assert not lost, f"{len(lost)} acknowledged rows lost, e.g. {sorted(lost)[:5]}"
    for ids in ledger.interrupted:
        got = len(kept.keys() & set(ids))
        assert got in (0, len(ids)), \
            f"an interrupted COPY left {got} of its {len(ids)} rows (ids {ids})"
    whole = acked.union(*[set(i) for i in ledger.interrupted if i[0] in kept])
    assert kept.keys() == whole, sorted(kept.keys() - whole)[:5]
    return len(acked)


def test_server_kill_9_mid_copy_keeps_exactly_the_acknowledged_rows(tmp_path):
    """Round after round on one data directory: COPYs acknowledged, then one interrupted by
    ``kill -9``: while the client still sends (the server has not got the whole COPY: none of
    it may appear), or after it sent it all, while the server writes a COPY spanning hundreds
    of fragments (one file each) to the archive: as soon as the first file is being written,
    or once the first is in place. Either way all of it or none (a COPY is one statement)."""
    data = str(tmp_path / "data")
    ledger, checked, restarts = Ledger(), 0, 0
    modes = ("sending", "writing", "sending", "written")
    srv = ServerProcess(data)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM ledger (id BIGINT, note TEXT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      f"TYPE ARCHIVED WITH (fragment = '{FRAGMENT_S} seconds')")
        for k, mode in enumerate(modes):
            if k:
                srv = ServerProcess(data)                 # recovers the archive at start
                restarts += 1
                checked += _check(ledger, _archived(srv))
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                for _ in range(4):                        # several COPYs, each acknowledged
                    ids, rows = ledger.rows(1500, 0.002)
                    assert _copy(c, rows)
                    ledger.acked.append(ids)
                if mode == "sending":
                    ids, rows = ledger.rows(6000, 0.001)
                    killed = []
                    assert not _copy(c, rows, kill=lambda: killed.append(_kill9(srv)))
                    ledger.interrupted.append(ids)
                    _gone(killed[0])
                    continue
            # one row a fragment: the archive writes (and fsyncs) one file per fragment
            ids, rows = ledger.rows(600, FRAGMENT_S)
            first = os.path.join(data, "archive", "public.ledger",
                                 f"fragment={_fragment(rows[0][1])}")
            done = []
            writer = threading.Thread(target=lambda: done.append(_copy(srv.dsn, rows)),
                                      daemon=True)
            writer.start()
            # kill as the first file is being written (under a temporary name), or once it
            # is in place (renamed)
            def due():
                names = os.listdir(first) if os.path.isdir(first) else []
                return done or any(n.endswith(".parquet" if mode == "written" else ".tmp")
                                   and (mode == "writing") == n.startswith(".") for n in names)
            _wait(f"the COPY's first archive file ({mode})", due, every=0.001)
            backend = _kill9(srv)
            writer.join(20)
            assert done, "the COPY did not return after the kill"
            (ledger.acked if done[0] else ledger.interrupted).append(ids)
            _gone(backend)
        srv = ServerProcess(data)
        restarts += 1
        checked += _check(ledger, _archived(srv))
        with psycopg.connect(srv.dsn, autocommit=True) as c:    # the server works on
            ids, rows = ledger.rows(100, 0.01)
            assert _copy(c, rows)
            ledger.acked.append(ids)
            assert c.execute("SELECT late FROM cq_streams WHERE stream = 'ledger'"
                             ).fetchone() == (0,)
        assert srv.stop() == 0
        assert _count(srv, "Traceback") == 0, "".join(srv.lines)
        # the files themselves, read by DuckDB with no server running
        files = glob.glob(os.path.join(data, "archive", "public.ledger", "*", "*.parquet"))
        kept = collections.Counter(dict(duckdb.sql(
            f"SELECT id, count(*) FROM read_parquet({files!r}) GROUP BY id").fetchall()))
        checked += _check(ledger, kept)
        assert not glob.glob(os.path.join(data, "archive", "**", ".*"), recursive=True)
    finally:
        srv.stop()
    partial = sum(1 for i in ledger.interrupted if i[0] in kept)
    print(f"\ncrash: {len(modes)} server kills mid-COPY ({modes.count('sending')} while "
          f"sending, {len(modes) - modes.count('sending')} while writing the archive), "
          f"{restarts} restarts, {sum(map(len, ledger.acked))} acknowledged rows checked "
          f"({checked} row checks over the restarts and a read of the files), "
          f"{len(ledger.interrupted)} interrupted COPYs ({partial} kept whole, "
          f"{len(ledger.interrupted) - partial} left nothing, none partial)")


def _fragment(t: dt.datetime) -> int:
    """The archive folder (its start, Unix µs; event times are UTC) of event time ``t``."""
    us = (t - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    return us // (FRAGMENT_S * 1_000_000) * (FRAGMENT_S * 1_000_000)


CUT_APPEND = """
import os, signal, sys
import pyarrow as pa, pyarrow.parquet as pq
from gateway.archive import storage
data, first, n, cut = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rename = os.replace
def replace(src, dst):                 # kill -9 at the chosen point of the append
    if cut == "before-journal" and os.path.basename(dst).startswith(".append-"):
        os.kill(os.getpid(), signal.SIGKILL)
    rename(src, dst)
    if cut == "after-first-file" and dst.endswith(".parquet"):
        os.kill(os.getpid(), signal.SIGKILL)
os.replace = replace
schema = pq.read_schema(storage.Archive(data).files("public.ledger")[0])
ids = list(range(first, first + n))
t = pa.array([(i - first) * 10_000_000 + int(sys.argv[5]) for i in ids], pa.int64())
table = pa.table({"id": pa.array(ids, pa.int64()), "note": pa.nulls(n, pa.string()),
                  "t": t.cast(pa.timestamp("us"))}).cast(schema)
storage.Archive(data).append("public.ledger", "t", "10 seconds", table)
"""


def test_an_append_cut_by_kill_9_is_finished_or_undone_at_restart(tmp_path):
    """The archive's side of an interrupted COPY, cut at exact points: a process appending
    rows over several fragments (the server's code) is killed before its journal is on disk
    (the restart removes its files: none) or after its first file was renamed (the restart
    renames the rest: all); acknowledged rows stay, once each."""
    data = str(tmp_path / "data")
    ledger = Ledger()
    srv = ServerProcess(data)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM ledger (id BIGINT, note TEXT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      f"TYPE ARCHIVED WITH (fragment = '{FRAGMENT_S} seconds')")
            ids, rows = ledger.rows(1000, 0.01)
            assert _copy(c, rows)
            ledger.acked.append(ids)
        assert srv.stop() == 0
        cuts = {"before-journal": 0, "after-first-file": 50}       # rows kept after restart
        for cut in cuts:
            ids, rows = ledger.rows(50, FRAGMENT_S)                # one fragment each
            epoch_us = (rows[0][1] - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
            r = subprocess.run([sys.executable, "-c", CUT_APPEND, data, str(ids[0]),
                                str(len(ids)), cut, str(epoch_us)],
                               cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == -signal.SIGKILL, r.stderr
            ledger.interrupted.append(ids)
        srv = ServerProcess(data)
        kept = _archived(srv)
        checked = _check(ledger, kept)
        assert [len(kept.keys() & set(i)) for i in ledger.interrupted] == list(cuts.values())
        assert srv.stop() == 0
        assert not glob.glob(os.path.join(data, "archive", "**", ".*"), recursive=True)
    finally:
        srv.stop()
    print(f"\ncrash: 2 archive appends cut by kill -9 (before the journal: none kept; after "
          f"the first file: all kept), 1 restart, {checked} acknowledged rows checked")


# ---------------------------------------------------------------------- SIGTERM
def test_sigterm_with_open_copy_fetch_and_source_repeatedly(tmp_path):
    """What tests/test_shutdown.py does not: an open COPY into an archived stream (its rows
    none after), COPYs acknowledged just before (all after), a source mid-stream and a cursor
    mid-FETCH over it, twice on one data directory; the back end exits with the server."""
    data = str(tmp_path / "data")
    ledger, rounds, checked = Ledger(), 2, 0
    srv = ServerProcess(data)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM ledger (id BIGINT, note TEXT, t TIMESTAMP "
                      f"TIMESTAMPCOLUMN) TYPE ARCHIVED WITH (fragment = '{FRAGMENT_S} seconds')")
            c.execute("CREATE STREAM feed (id INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        for k in range(rounds):
            if k:
                srv = ServerProcess(data)
                checked += _check(ledger, _archived(srv))
            source = Source(srv.ingest_port, "feed")
            out: dict = {}
            long_c = psycopg.connect(srv.dsn, autocommit=True)
            fetch_c = psycopg.connect(srv.dsn)
            copy_c = psycopg.connect(srv.dsn, autocommit=True)
            try:
                for _ in range(3):
                    ids, rows = ledger.rows(1000, 0.002)
                    assert _copy(copy_c, rows)
                    ledger.acked.append(ids)
                cur = fetch_c.cursor()
                cur.execute("DECLARE w CURSOR FOR SELECT id FROM feed")
                cur.execute("FETCH 10 FROM w WITH (timeout = '10s')")
                assert len(cur.fetchall()) == 10                  # rows flow
                open_ids, open_rows = ledger.rows(100000, 0.0001)
                sending = threading.Event()

                def copy_open():            # sends slowly and never finishes the COPY
                    try:
                        with copy_c.cursor().copy("COPY ledger (id, t) FROM STDIN") as cp:
                            for j, row in enumerate(open_rows):
                                cp.write_row(row)
                                if j % 1000 == 999:
                                    sending.set()
                                    time.sleep(0.05)
                        out["copy"] = None
                    except psycopg.Error as e:
                        out["copy"] = e.sqlstate

                def run(key, conn, sql):
                    try:
                        conn.execute(sql).fetchall()
                        out[key] = None
                    except psycopg.Error as e:
                        out[key] = e.sqlstate
                threads = [threading.Thread(target=copy_open, daemon=True),
                           threading.Thread(target=run, args=("long", long_c, LONG),
                                            daemon=True),
                           threading.Thread(target=run, daemon=True, args=(
                               "fetch", fetch_c, "FETCH 10000000 FROM w WITH (timeout = '60s')"))]
                for t in threads:
                    t.start()
                assert sending.wait(10)
                time.sleep(1.0)                           # all three running
                backend = _backend_pid(srv)
                started = time.monotonic()
                srv.proc.send_signal(signal.SIGTERM)
                try:
                    code = srv.proc.wait(10)
                except subprocess.TimeoutExpired:
                    code = None
                took = time.monotonic() - started
                assert code == 0 and took < 5, (code, took, "".join(srv.lines[-40:]))
                for t in threads:
                    t.join(10)
                    assert not t.is_alive()
                # the open COPY, the long statement and the FETCH are told 57P01; a COPY
                # whose socket closed first may see the connection go (None: no SQLSTATE)
                assert out["long"] == "57P01" and out["fetch"] == "57P01", out
                assert out["copy"] in ("57P01", None), out
                ledger.interrupted.append(open_ids)
                _gone(backend, timeout=2)
                source.finish()
                assert source.error is not None or source.answer is not None
            finally:
                srv.stop()
                for conn in (long_c, fetch_c, copy_c):
                    conn.close()
                if source.is_alive():
                    source.finish()
        srv = ServerProcess(data)
        kept = _archived(srv)
        checked += _check(ledger, kept)
        assert [len(kept.keys() & set(i)) for i in ledger.interrupted] == [0] * rounds
        with psycopg.connect(srv.dsn) as c:                     # queries work after
            cur = c.cursor()
            cur.execute("DECLARE w CURSOR FOR SELECT id FROM feed")
            with psycopg.connect(srv.dsn, autocommit=True) as a:
                a.execute(f"INSERT INTO feed VALUES (1, 1, TIMESTAMP '{at(0)}')")
            cur.execute("FETCH 1 FROM w WITH (timeout = '10s')")
            assert cur.fetchall() == [(1,)]
        assert srv.stop() == 0
        assert _count(srv, "Traceback") == 0, "".join(srv.lines)
    finally:
        srv.stop()
    print(f"\ncrash: {rounds} SIGTERMs (each within 5 s, exit 0) with an open COPY, a FETCH, "
          f"a long statement and a source, {rounds} restarts, "
          f"{sum(map(len, ledger.acked))} acknowledged rows checked ({checked} row checks), "
          f"{rounds} open COPYs left no rows")
