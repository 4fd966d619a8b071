"""Benchmark: rows/s through the whole gateway path (DuckDB -> Arrow -> wire -> psycopg) for a
large SELECT in text and binary formats, COPY TO STDOUT and COPY FROM STDIN.

    python bench/gateway_select.py [--rows 1000000]

Starts its own server on a free port with a temporary data directory; prints one JSON record
per measurement (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import ServerProcess  # noqa: E402


def server_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def record(name: str, rows: int, seconds: float, pid: int) -> None:
    print(json.dumps({"engine": "cqgate-gateway", "measurement": name, "rows": rows,
                      "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
                      "server_peak_rss_mb": round(server_rss_mb(pid), 1),
                      "machine": f"{platform.machine()} {os.cpu_count()} cores"}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.rows
    with tempfile.TemporaryDirectory() as data:
        srv = ServerProcess(data)
        try:
            pid = srv.proc.pid
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                c.execute("CREATE TABLE bench (id BIGINT, x DOUBLE, name TEXT, ts TIMESTAMP, "
                          "flag BOOLEAN)")
                c.execute("INSERT INTO bench SELECT g, g / 7.0, 'name ' || g, "
                          "TIMESTAMP '2024-01-01' + g * INTERVAL 1 SECOND, g % 2 = 0 "
                          f"FROM range({n}) t(g)")
                for binary in (False, True):
                    t0 = time.perf_counter()
                    with c.cursor(binary=binary) as cur:
                        cur.execute("SELECT * FROM bench")
                        got = len(cur.fetchall())
                    record(f"select 5 columns ({'binary' if binary else 'text'})", got,
                           time.perf_counter() - t0, pid)
                t0 = time.perf_counter()
                buf = io.BytesIO()
                with c.cursor().copy("COPY bench TO STDOUT") as copy:
                    for chunk in copy:
                        buf.write(chunk)
                record("copy to stdout (text)", n, time.perf_counter() - t0, pid)
                c.execute("CREATE TABLE bench2 AS SELECT * FROM bench LIMIT 0")
                payload = buf.getvalue()
                t0 = time.perf_counter()
                with c.cursor().copy("COPY bench2 FROM STDIN") as copy:
                    copy.write(payload)
                record("copy from stdin (text)", n, time.perf_counter() - t0, pid)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
