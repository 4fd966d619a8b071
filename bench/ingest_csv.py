"""Benchmark: CSV rows/s from a source on the ingest port (``cqgate push``) into the back end,
for 5-column lines, and COPY FROM STDIN into the same stream with psycopg.

    python bench/ingest_csv.py [--rows 3000000]

Starts its own server on a free port with a temporary data directory; prints one JSON record
per measurement (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import ServerProcess  # noqa: E402

COLUMNS = "a INT, b DOUBLE, c TEXT, d BIGINT, t TIMESTAMP TIMESTAMPCOLUMN"


def write_csv(path: str, rows: int) -> None:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(f"{i % 1000},{i * 0.5},n{i % 97},{i},2026-11-01 "
                    f"{(i // 3_600_000) % 24:02d}:{(i // 60_000) % 60:02d}:"
                    f"{(i // 1000) % 60:02d}.{i % 1000:03d}\n")


def wait_for(conn, stream: str, rows: int, t0: float) -> float:
    while conn.execute("SELECT coalesce(max(tuples), 0) FROM cq_streams WHERE stream = %s",
                       [stream]).fetchone()[0] < rows:
        time.sleep(0.02)
    return time.perf_counter() - t0


def report(name: str, rows: int, secs: float, machine: str) -> None:
    print(json.dumps({"engine": "cqgate-server", "measurement": name, "rows": rows,
                      "seconds": round(secs, 3), "rows_per_s": round(rows / secs),
                      "machine": machine}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=3_000_000)
    args = ap.parse_args()
    machine = f"{platform.machine()} {os.cpu_count()} cores"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "five.csv")
        write_csv(path, args.rows)
        srv = ServerProcess(os.path.join(d, "data"))
        try:
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                for name in ("raw", "pushed", "copied"):
                    c.execute(f"CREATE STREAM {name} ({COLUMNS})")
                data = open(path, "rb").read()
                t0 = time.perf_counter()
                with socket.create_connection(("127.0.0.1", srv.ingest_port)) as sock:
                    sock.sendall(b"csvwrapper,raw\n")
                    sock.sendall(data)
                report("CSV from a TCP source on the ingest port", args.rows,
                       wait_for(c, "raw", args.rows, t0), machine)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "gateway", "push", "pushed", path,
                                "--port", str(srv.ingest_port)], check=True,
                               capture_output=True, cwd=ROOT)
                report("CSV from cqgate push (process start included)", args.rows,
                       wait_for(c, "pushed", args.rows, t0), machine)
                t0 = time.perf_counter()
                with c.cursor().copy("COPY copied FROM STDIN (FORMAT csv)") as cp:
                    for i in range(0, len(data), 1 << 20):
                        cp.write(data[i:i + (1 << 20)])
                report("COPY FROM STDIN into a stream", args.rows,
                       wait_for(c, "copied", args.rows, t0), machine)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
