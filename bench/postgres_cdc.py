"""Benchmark: a PostgreSQL table followed by cqgate under pgbench-like load (clients updating
random accounts, one transaction each): the changes per second cqgate takes in and hands to a
continuous cursor over the table, how long it needs after the load to have taken everything,
and the latency from a commit to its row at a cursor (p50, p99), beside the same changes read
straight from PostgreSQL with ``pg_logical_slot_get_changes`` (test_decoding) as the reference.

    python -m bench.postgres_cdc [--accounts 10000] [--seconds 20] [--clients 4]

Starts its own PostgreSQL 18 (scripts/embedded_postgres.py, fsync off for both paths alike)
and its own cqgate; prints one JSON record (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)
from conftest import ServerProcess  # noqa: E402
from scripts.embedded_postgres import EmbeddedPostgres  # noqa: E402

UTC = dt.timezone.utc


def _now() -> dt.datetime:
    return dt.datetime.now(UTC).replace(tzinfo=None)


def load(dsn: str, accounts: int, seconds: float, clients: int) -> tuple[int, float]:
    """Clients updating random accounts, one transaction an update, for ``seconds``: the
    number of changes committed and the seconds it took."""
    done, stop = [0] * clients, time.monotonic() + seconds

    def client(k: int):
        rng = random.Random(k)
        with psycopg.connect(dsn, autocommit=True) as c:
            while time.monotonic() < stop:
                c.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s",
                          (rng.randrange(-100, 100), rng.randrange(1, accounts + 1)))
                done[k] += 1
    began = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), time.monotonic() - began


def pings(pg_dsn: str, cq_dsn: str, seconds: float, every: float = 0.05) -> list:
    """A ping row inserted and deleted every ``every`` s; its row reaches a cursor once the
    delete has ended it: the latency is from the delete's commit (the row's valid_to) to the
    row's arrival, in ms."""
    out, stop = [], threading.Event()
    with psycopg.connect(cq_dsn) as reader:
        cur = reader.cursor()
        cur.execute("DECLARE p CURSOR FOR SELECT id, valid_from, valid_to FROM pings")

        def ping():
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                n = 0
                while not stop.is_set():
                    n += 1
                    c.execute("INSERT INTO pings VALUES (%s)", (n,))
                    c.execute("DELETE FROM pings WHERE id = %s", (n,))
                    time.sleep(every)
        writer = threading.Thread(target=ping)
        writer.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            cur.execute("FETCH ALL FROM p WITH (timeout = '0.5s')")
            at = _now()
            for _, start, end in cur.fetchall():
                if end is not None and end < at:
                    out.append((at - end).total_seconds() * 1000)
        stop.set()
        writer.join()
    return out


def _pct(values: list, p: float):
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(p * len(values)))], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accounts", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=4)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cqgate-cdc-"))
    pg = EmbeddedPostgres()
    pg.start(work / "pg", fast=True)
    srv = ServerProcess(str(work / "cq"))
    try:
        pg.psql(f"CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL); "
                f"INSERT INTO accounts SELECT i, 0 FROM generate_series(1, {args.accounts}) i; "
                "CREATE TABLE pings (id int PRIMARY KEY); "
                "CREATE PUBLICATION bench FOR TABLE accounts, pings")
        pg.psql("SELECT pg_create_logical_replication_slot('reference', 'test_decoding')")
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute(f"CREATE SOURCE pg FROM POSTGRES (CONNECTION 'host=127.0.0.1 port="
                      f"{pg.port} dbname=postgres user=postgres password={pg.password}', "
                      "PUBLICATION 'bench')")
            c.execute("CREATE STREAM accounts FROM SOURCE pg TABLE accounts")
            c.execute("CREATE STREAM pings FROM SOURCE pg TABLE pings")
        quiet = pings(pg.dsn, srv.dsn, 5)
        record = {"bench": "postgres_cdc", "accounts": args.accounts, "clients": args.clients,
                  "machine": platform.machine(), "cpus": os.cpu_count(),
                  "quiet_latency_ms": {"n": len(quiet), "p50": _pct(quiet, 0.5),
                                       "p99": _pct(quiet, 0.99)}}
        with psycopg.connect(srv.dsn, autocommit=True) as c, psycopg.connect(srv.dsn) as r:
            taken0 = _taken(c)
            total = r.cursor()
            total.execute("DECLARE t CURSOR FOR SELECT count(*), sum(balance) FROM accounts")
            busy: dict = {}
            loader = threading.Thread(target=lambda: busy.update(zip(
                ("changes", "seconds"), load(pg.dsn, args.accounts, args.seconds,
                                             args.clients))))
            loader.start()
            under = pings(pg.dsn, srv.dsn, args.seconds)
            loader.join()
            ended = time.monotonic()
            want = taken0 + busy["changes"]
            while _taken(c) < want and time.monotonic() - ended < 300:
                time.sleep(0.05)
            drained = time.monotonic() - ended
            expect = int(pg.psql("SELECT sum(balance) FROM accounts")[0][0])
            last = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (last is None or last[1] != expect):
                total.execute("FETCH ALL FROM t WITH (timeout = '1s')")
                rows = total.fetchall()
                last = rows[-1] if rows else last
        # catching up: cqgate stopped while the load runs, then started again on the same
        # data directory; how fast it takes in what it missed
        srv.stop()
        behind, _ = load(pg.dsn, args.accounts, args.seconds / 2, args.clients)
        began = time.monotonic()
        srv = ServerProcess(str(work / "cq"))
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            while _taken(c) < behind and time.monotonic() - began < 300:
                time.sleep(0.05)
        caught_up = time.monotonic() - began
        record["catch_up"] = {"changes": behind, "seconds": round(caught_up, 2),
                              "changes_per_s": round(behind / caught_up),
                              "note": "from the server's start, its start included"}
        began = time.monotonic()
        decoded = int(pg.psql("SELECT count(*) FROM pg_logical_slot_get_changes("
                              "'reference', NULL, NULL) WHERE data LIKE 'table public."
                              "accounts: UPDATE%'")[0][0])   # both loads' changes
        reference_s = time.monotonic() - began
        record.update({
            "changes": busy["changes"], "load_seconds": round(busy["seconds"], 2),
            "postgres_commits_per_s": round(busy["changes"] / busy["seconds"]),
            "cqgate_changes_per_s": round(busy["changes"] / (busy["seconds"] + drained)),
            "drained_after_load_s": round(drained, 2),
            "cursor_sum_matches": last is not None and last[1] == expect,
            "under_load_latency_ms": {"n": len(under), "p50": _pct(under, 0.5),
                                      "p99": _pct(under, 0.99),
                                      "mean": round(statistics.mean(under), 2) if under
                                      else None},
            "reference_pg_logical_slot_get_changes": {
                "changes": decoded, "seconds": round(reference_s, 2),
                "changes_per_s": round(decoded / reference_s) if reference_s else None}})
        print(json.dumps(record, indent=1))
    finally:
        srv.stop()
        pg.stop()
        sys.stderr.write("".join(srv.lines[-25:]))


def _taken(c) -> int:
    return int(c.execute("SELECT coalesce(sum(rows), 0) FROM cq_sources "
                         "WHERE stream = 'accounts'").fetchone()[0])


if __name__ == "__main__":
    main()
