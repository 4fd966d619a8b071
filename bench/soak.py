"""Soak: a stream pushed at full speed for a while, read by fast cursors, one cursor that falls
behind and one client that vanishes, under a stream that blocks (back pressure) and one that
sheds load (ON OVERLOAD DROP); prints what each reader got and each process's peak memory.

    python bench/soak.py [--rows 5000000] [--fast 3] [--result-memory 16MB] [--result-spill 8MB]

Starts its own server for each policy on a free port with a temporary data directory; prints
one JSON record per policy (not a test: nothing here asserts a figure). Memory is the resident
set of the gateway and of the back end, read from /proc every 50 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import ServerProcess  # noqa: E402

CHUNK = 200_000                 # rows a source sends at a time


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


class Peaks(threading.Thread):
    """The peak resident memory of the gateway and of its back end, sampled."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.gateway, self.backend, self.spill = pid, 0, 0, 0
        self.baseline = (rss(pid), sum(rss(c) for c in children(pid)))
        self.done = threading.Event()
        self.start()

    def run(self):
        while not self.done.wait(0.05):
            self.gateway = max(self.gateway, rss(self.pid))
            self.backend = max(self.backend, sum(rss(c) for c in children(self.pid)))


def lines(first: int, n: int) -> bytes:
    # 1,000 events a second of event time; short rows, as the issue that asked for this saw
    return "".join(f"{i},{i % 997},2026-11-01 {i // 3_600_000 % 24:02d}:"
                   f"{i // 60_000 % 60:02d}:{i // 1000 % 60:02d}\n"
                   for i in range(first, first + n)).encode()


class FastReader(threading.Thread):
    def __init__(self, dsn: str, name: str, query: str):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn)
        self.conn.execute(f"DECLARE {name} CURSOR FOR {query}")
        self.name_, self.rows, self.stop, self.error = name, 0, threading.Event(), None
        self.start()

    def run(self):
        cur = self.conn.cursor()
        try:
            while not self.stop.is_set():
                cur.execute(f"FETCH ALL FROM {self.name_} WITH (timeout = '500ms')")
                self.rows += len(cur.fetchall())
        except psycopg.Error as e:
            self.error = e.sqlstate


def soak(args, policy: str) -> dict:
    with tempfile.TemporaryDirectory() as data_dir:
        srv = ServerProcess(data_dir, "--result-memory", args.result_memory,
                            "--result-spill", args.result_spill)
        try:
            return _run(args, srv, policy)
        finally:
            srv.stop()


def _run(args, srv, policy: str) -> dict:
    admin = psycopg.connect(srv.dsn, autocommit=True)
    admin.execute(f"CREATE STREAM soak (a INT, b INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                  f"ON OVERLOAD {policy}")
    fast = [FastReader(srv.dsn, f"fast{i}", "SELECT a, b FROM soak")
            for i in range(args.fast)]
    # a heavier query keeps the back end busy, so a shedding stream has something to shed
    busy = FastReader(srv.dsn, "busy", "SELECT b, count(*), sum(a) FROM soak "
                                       "[RANGE '1 minute' SLIDE '1 second'] GROUP BY b")
    slow = psycopg.connect(srv.dsn)
    slow.execute("DECLARE lagging CURSOR FOR SELECT a, b FROM soak")
    slow_read, slow_error = 0, None
    vanished = socket.create_connection(("127.0.0.1", srv.port))
    _vanishing_copy(vanished)
    peaks = Peaks(srv.proc.pid)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", srv.ingest_port)) as source:
        source.sendall(b"csvwrapper,soak\n")
        for first in range(0, args.rows, CHUNK):
            source.sendall(lines(first, min(CHUNK, args.rows - first)))
            try:                                   # the slow reader: a row now and then
                slow_read += len(slow.execute("FETCH 1 FROM lagging").fetchall())
            except psycopg.Error as e:
                slow_error = slow_error or e.sqlstate
                slow.rollback()
            if first == args.rows // 2:
                vanished.close()                   # gone mid-COPY, without a word
        source.shutdown(socket.SHUT_WR)
        answer = source.recv(4096)
    pushed_s = time.monotonic() - started
    # the fast readers drain what is left
    dropped = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        dropped = admin.execute("SELECT coalesce(sum(dropped), 0)::BIGINT FROM cq_streams "
                                "WHERE stream = 'soak'").fetchone()[0]
        if all(f.rows >= args.rows - dropped for f in fast):
            break
        time.sleep(0.2)
    queues = admin.execute("SELECT name, state, memory_bytes, spill_bytes, error "
                           "FROM cq_queries WHERE name = 'lagging'").fetchall()
    # what still runs: the fast and busy cursors and the slow one, not the vanished COPY
    running = admin.execute("SELECT count(*) FROM cq_queries").fetchone()[0]
    for f in fast + [busy]:
        f.stop.set()
        f.join(5)
    peaks.done.set()
    peaks.join()
    return {
        "policy": policy, "rows_pushed": args.rows, "push_seconds": round(pushed_s, 2),
        "events_per_s": round(args.rows / pushed_s), "source_answer": answer.decode(),
        "dropped": dropped, "fast_cursor_rows": [f.rows for f in fast],
        "fast_cursor_errors": [f.error for f in fast],
        "slow_cursor": {"rows_read": slow_read, "error": slow_error,
                        "queue": [list(map(str, q)) for q in queues]},
        "queries_running": running, "queries_opened": args.fast + 3,
        "result_memory": args.result_memory, "result_spill": args.result_spill,
        "rss_mb": {"gateway_start": peaks.baseline[0] >> 20, "gateway_peak": peaks.gateway >> 20,
                   "backend_start": peaks.baseline[1] >> 20, "backend_peak": peaks.backend >> 20},
    }


def _vanishing_copy(sock) -> None:
    """A raw client in COPY (SELECT …) TO STDOUT that never reads what comes."""
    body = (196608).to_bytes(4, "big") + b"user\0cq\0database\0cq\0\0"
    sock.sendall((len(body) + 4).to_bytes(4, "big") + body)
    got = b""
    while not got.endswith(b"Z\0\0\0\x05I"):
        got += sock.recv(65536)
    sql = b"COPY (SELECT a, b FROM soak) TO STDOUT\0"
    sock.sendall(b"Q" + (len(sql) + 4).to_bytes(4, "big") + sql)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--fast", type=int, default=3)
    ap.add_argument("--result-memory", default="16MB")
    ap.add_argument("--result-spill", default="8MB")
    ap.add_argument("--policy", action="append", choices=["BLOCK", "DROP"],
                    help="ON OVERLOAD policies to run (default both)")
    args = ap.parse_args()
    for policy in args.policy or ["BLOCK", "DROP"]:
        print(json.dumps(soak(args, policy)), flush=True)


if __name__ == "__main__":
    main()
