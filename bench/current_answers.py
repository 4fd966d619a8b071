"""Benchmark: how soon a continuous answer is current, and what keeping quiet keys current costs.

    python -m bench.current_answers [--samples 20] [--keys 10000] [--quiet-seconds 10]

- latency: the time from the INSERT of a key's first reading (event time now()) until its row
  reaches a FETCH blocked on the cursor, for ``[PARTITION BY k ROWS 1]`` and for an
  ``[UNBOUNDED]`` SUM grouped by key, at the default heartbeat (1 s). Such a row is open
  (nothing closes it), so it comes when the stream's watermark passes its instant: a heartbeat
  of quiet moves a stream that follows the wall clock on.
- heartbeat cost: 10,000 keys with one reading each, then quiet: the rows per second the client
  receives (each key's row is split once a heartbeat) and the CPU the gateway and the back end
  spend on it, against the wall time.

Starts its own server on a free port with a temporary data directory; prints one JSON record
per measurement (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time

import psycopg

from bench.nexmark.run import CpuMeter, ServerProcess

QUERIES = {
    "partition_rows_1": "SELECT k, v FROM {s} [PARTITION BY k ROWS 1]",
    "unbounded_sum": "SELECT k, SUM(v) FROM {s} [UNBOUNDED] GROUP BY k",
}


def _machine() -> str:
    return f"{platform.machine()}, Python {platform.python_version()}"


def latency(dsn: str, name: str, query: str, samples: int) -> dict:
    """Milliseconds from each new key's INSERT until its row is fetched."""
    s = f"cur_{name}"
    took = []
    with psycopg.connect(dsn, autocommit=True) as feed, psycopg.connect(dsn) as reader:
        feed.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        cur = reader.cursor()
        cur.execute(f"DECLARE c CURSOR FOR {query.format(s=s)}")
        for key in range(samples):
            time.sleep(0.3)                  # readings arrive now and then, not in a burst
            t0 = time.perf_counter()
            feed.execute(f"INSERT INTO {s} VALUES (%s, 1, now())", [key])
            seen = False
            while not seen:
                cur.execute("FETCH ALL FROM c WITH (timeout = '10s')")
                rows = cur.fetchall()
                if not rows:
                    raise RuntimeError(f"key {key}: no row in 10 s")
                seen = any(r[0] == key for r in rows)
            took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return {"measurement": "first reading to a blocked FETCH", "query": name,
            "heartbeat_s": 1.0, "samples": samples,
            "p50_ms": round(statistics.median(took), 1),
            "p95_ms": round(took[int(0.95 * (len(took) - 1))], 1),
            "max_ms": round(took[-1], 1)}


def heartbeat_cost(srv, keys: int, quiet_s: float) -> dict:
    """Rows per second and CPU while ``keys`` quiet keys are kept current."""
    s = "cur_quiet"
    with psycopg.connect(srv.dsn, autocommit=True) as feed, \
            psycopg.connect(srv.dsn) as reader:
        feed.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        cur = reader.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s} [PARTITION BY k ROWS 1]")
        feed.execute(f"INSERT INTO {s} SELECT i, 1, now() FROM range({keys}) t(i)")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:     # until every key has been delivered once
            cur.execute("FETCH ALL FROM c WITH (timeout = '2s')")
            if len({r[0] for r in cur.fetchall()}) >= keys:
                break
        rows = 0
        with CpuMeter(srv.proc.pid) as cpu:
            t0 = time.monotonic()
            while time.monotonic() - t0 < quiet_s:
                cur.execute("FETCH ALL FROM c WITH (timeout = '200ms')")
                rows += len(cur.fetchall())
            wall = time.monotonic() - t0
    return {"measurement": "heartbeat cost", "query": "partition_rows_1", "keys": keys,
            "quiet_s": round(wall, 1), "rows_per_s": round(rows / wall),
            "cpu_share": {k: round(v / wall, 3) for k, v in cpu.spent.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--quiet-seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(tmp, "--log-level", "WARNING")
        try:
            for name, query in QUERIES.items():
                print(json.dumps({**latency(srv.dsn, name, query, args.samples),
                                  "machine": _machine()}), flush=True)
            print(json.dumps({**heartbeat_cost(srv, args.keys, args.quiet_seconds),
                              "machine": _machine()}), flush=True)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
