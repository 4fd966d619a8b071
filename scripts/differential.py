#!/usr/bin/env python3
"""The differential query tester's long run, before a release: thousands of seeded random
continuous queries through a real server (started here on a free port with a temporary data
directory, or the one --dsn names), each compared with DuckDB on the snapshots at every
instant where either side changes. Prints the counts (accepted, refused by reason, failed by
kind) and each failure shrunk to a small case; exits 1 when anything failed.

    python scripts/differential.py --seed 1 --queries 5000
    python scripts/differential.py --seed 1 --queries 200 --engine spark
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from conftest import ServerProcess, logged_tracebacks  # noqa: E402 - the tests' helpers
from differential.run import differential_run  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--dsn", help="a running server's DSN (default: start one)")
    ap.add_argument("--shrink", type=int, default=5, help="failures to shrink (the rest are "
                                                          "reported as found)")
    ap.add_argument("--parallel", type=int, default=2, help="rounds run at the same time")
    ap.add_argument("--engine", choices=("backend", "spark"), default="backend",
                    help="spark: every query as a cursor on Spark (cq.engine = spark), a "
                         "round at a time")
    args = ap.parse_args()
    server, data = None, None
    dsn = args.dsn
    if dsn is None:
        data = tempfile.mkdtemp(prefix="cqgate-differential-")
        server = ServerProcess(data)
        dsn = server.dsn

    def progress(r, result):          # outcomes so far, each with its round's data
        done = sum(o.how in ("cursor", "spark") for o, _ in result.outcomes)
        failed = sum(o.failed for o, _ in result.outcomes)
        print(f"  {done} queries, {failed} failed", file=sys.stderr, flush=True)
    try:
        result = differential_run(dsn, args.seed, args.queries, parallel=args.parallel,
                                  shrink_at_most=args.shrink, progress=progress,
                                  engine=args.engine)
    finally:
        tracebacks = []
        if server is not None:
            server.stop()
            tracebacks = logged_tracebacks(server.lines)
            shutil.rmtree(data, ignore_errors=True)
    print(f"seed {args.seed}")
    print(result.text())
    for tb in tracebacks:
        print("the server logged a traceback:\n" + tb)
    return 1 if result.failures or tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
