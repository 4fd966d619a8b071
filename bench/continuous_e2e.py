"""Benchmark: events/s end to end through a running server — COPY into a stream, the back-end
process, a continuous query, rows fetched through a cursor — and the latency of one INSERT
until its row reaches a blocked FETCH (percentiles).

    python bench/continuous_e2e.py [--events 1000000] [--latency-samples 200]

Starts its own server on a free port with a temporary data directory; prints one JSON record
per measurement (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import ServerProcess  # noqa: E402

T0 = 1_793_491_200                      # 2026-11-01 00:00:00 UTC, seconds


def csv_lines(n: int, rate: int) -> bytes:
    out = io.StringIO()
    for i in range(n):
        us = i * 1_000_000 // rate
        out.write(f"{i % 10_000},{i % 997},{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(T0 + us // 1_000_000))}.{us % 1_000_000:06d}\n")
    return out.getvalue().encode()


def throughput(dsn: str, events: int, query: str, expect_rows) -> dict:
    data = csv_lines(events, 100_000)
    with psycopg.connect(dsn, autocommit=True) as feed, psycopg.connect(dsn) as reader:
        cur = reader.cursor()
        cur.execute(f"DECLARE c CURSOR FOR {query}")
        got = [0]

        def read():
            while got[0] < expect_rows:
                cur.execute("FETCH ALL FROM c WITH (timeout = '5s')")
                rows = cur.fetchall()
                if not rows:
                    return
                got[0] += len(rows)

        t0 = time.perf_counter()
        reader_thread = threading.Thread(target=read)
        reader_thread.start()
        with feed.cursor().copy("COPY bids (auction, price, ts) FROM STDIN (FORMAT csv)") as cp:
            for i in range(0, len(data), 1 << 20):
                cp.write(data[i:i + (1 << 20)])
        feed.execute("ALTER STREAM bids ADVANCE TO '2030-01-01'")
        reader_thread.join(600)
        secs = time.perf_counter() - t0
        reader.rollback()
    return {"events": events, "result_rows": got[0], "seconds": round(secs, 3),
            "events_per_s": round(events / secs)}


def latency(dsn: str, samples: int) -> dict:
    waits = []
    with psycopg.connect(dsn, autocommit=True) as feed, psycopg.connect(dsn) as reader:
        cur = reader.cursor()
        cur.execute("DECLARE l CURSOR FOR SELECT auction FROM bids [NOW] WHERE price = -1")
        for i in range(samples):
            sent = [0.0]

            def insert(i=i):
                time.sleep(0.002)
                sent[0] = time.perf_counter()
                feed.execute("INSERT INTO bids VALUES (%s, -1, TIMESTAMP '2031-01-01' + "
                             "%s * INTERVAL '1 second')", [i, i])

            t = threading.Thread(target=insert)
            t.start()
            cur.execute("FETCH 1 FROM l")
            cur.fetchall()
            waits.append((time.perf_counter() - sent[0]) * 1000)
            t.join()
        reader.rollback()
    waits.sort()
    pct = lambda p: round(waits[min(len(waits) - 1, int(p * len(waits)))], 2)  # noqa: E731
    return {"samples": samples, "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
            "mean_ms": round(statistics.mean(waits), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--latency-samples", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        srv = ServerProcess(data_dir)
        try:
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                c.execute("CREATE STREAM bids (auction BIGINT, price BIGINT, "
                          "ts TIMESTAMP TIMESTAMPCOLUMN)")
            machine = f"{platform.machine()} {os.cpu_count()} cores"
            for name, query, rows in [
                    ("filter", "SELECT auction, price FROM bids WHERE price < 10",
                     args.events * 10 // 997),
                    ("tumbling SUM/COUNT, 1000 groups",
                     "SELECT auction % 1000 AS g, SUM(price), COUNT(*) FROM bids "
                     "[RANGE 1 SECOND SLIDE 1 SECOND] GROUP BY auction % 1000",
                     1000 * max(1, args.events // 100_000))]:
                r = throughput(srv.dsn, args.events, query, rows)
                print(json.dumps({"engine": "cqgate-server", "measurement": name, **r,
                                  "machine": machine}), flush=True)
                with psycopg.connect(srv.dsn, autocommit=True) as c:    # a fresh stream
                    c.execute("DROP STREAM bids")
                    c.execute("CREATE STREAM bids (auction BIGINT, price BIGINT, "
                              "ts TIMESTAMP TIMESTAMPCOLUMN)")
            print(json.dumps({"engine": "cqgate-server", "measurement":
                              "INSERT to FETCH latency", **latency(srv.dsn,
                                                                   args.latency_samples),
                              "machine": machine}), flush=True)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
