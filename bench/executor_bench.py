"""Benchmark of the back end's operators, driven directly (no server): events/s and peak memory
for a filter, tumbling and hopping window aggregates over 1,000 groups, a range-window
aggregate, and a windowed equi-join.

    python bench/executor_bench.py [--events 2000000] [--batch 100000] [--only filter]

Each batch is followed by a watermark (BOUNDARY), as the gateway's ingest sends them; the join
reads two streams, fed alternately. Only the operators' time is measured. Memory is sampled
at each quarter of the run (resident set size and the query's state in rows), so a flat
profile shows that state is purged as the windows move. Prints one JSON record per query;
asserts nothing (benchmarks are not tests).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

import numpy as np
import pyarrow as pa
import sqlglot

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dialect  # noqa: E402,F401
from dialect.planner import MemoryCatalog, Relation, plan  # noqa: E402
from executor.graph import NotRunnable, RunningQuery  # noqa: E402

CATALOG = MemoryCatalog()
for name in ("bids", "asks"):
    CATALOG.add(Relation(name, "stream", (("auction", "BIGINT"), ("price", "BIGINT"),
                                          ("ts", "TIMESTAMP")), "ts"))

QUERIES = {
    "filter": "SELECT auction, price FROM bids WHERE price > 900",
    "tumbling SUM/COUNT, 1000 groups":
        "SELECT auction % 1000 AS g, SUM(price), COUNT(*) FROM bids "
        "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY auction % 1000",
    "hopping SUM/COUNT, 1000 groups":
        "SELECT auction % 1000 AS g, SUM(price), COUNT(*) FROM bids "
        "[RANGE 10 SECONDS SLIDE 2 SECONDS] GROUP BY auction % 1000",
    "range window SUM, 100 groups":
        "SELECT auction % 100 AS g, SUM(price) FROM bids [RANGE 1 SECONDS] "
        "GROUP BY auction % 100",
    "windowed equi-join": "SELECT b.price, a.price FROM bids [RANGE 1 SECONDS] AS b, "
                          "asks [RANGE 1 SECONDS] AS a WHERE b.auction = a.auction",
}


def batches(n: int, size: int, rate: int, seed: int = 1):
    """``n`` events at ``rate`` events per second of event time, in batches of ``size``."""
    rng = np.random.default_rng(seed)
    t0 = 1_793_491_200_000_000
    for start in range(0, n, size):
        k = min(size, n - start)
        idx = np.arange(start, start + k)
        ts = t0 + (idx * 1_000_000) // rate
        yield pa.RecordBatch.from_pydict({
            "auction": pa.array(rng.integers(0, 10_000, k)),
            "price": pa.array(rng.integers(1, 1000, k)),
            "ts": pa.array(ts).cast(pa.timestamp("us"))})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=100_000, help="event-time events per second")
    ap.add_argument("--only", default=None, help="run only queries containing this text")
    args = ap.parse_args()
    for name, sql in QUERIES.items():
        if args.only and args.only not in name:
            continue
        try:
            q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
        except NotRunnable as e:
            print(json.dumps({"engine": "cqgate-executor", "query": name,
                              "error": f"not runnable yet: {e}"}), flush=True)
            continue
        streams = ["bids", "asks"] if "join" in name else ["bids"]
        rows, secs, samples = 0, 0.0, []
        n_batches = -(-args.events // args.batch)
        for i, b in enumerate(batches(args.events, args.batch, args.rate)):
            stream = streams[i % len(streams)]
            last = b.column("ts")[-1].value
            t0 = time.perf_counter()
            out = q.push(stream, b)
            for s in streams:
                out += q.watermark(s, last)
            rows += sum(r.num_rows for r in out)
            secs += time.perf_counter() - t0
            if (i + 1) % max(1, n_batches // 4) == 0:
                samples.append({"events": (i + 1) * args.batch, "rss_mb": round(rss_mb(), 1),
                                "state_rows": q.state_size()})
        t0 = time.perf_counter()
        rows += sum(r.num_rows for r in q.end())
        secs += time.perf_counter() - t0
        print(json.dumps({"engine": "cqgate-executor", "query": name, "events": args.events,
                          "seconds": round(secs, 3),
                          "events_per_s": round(args.events / secs),
                          "result_rows": rows, "memory": samples,
                          "peak_rss_mb": round(peak_rss_mb(), 1),
                          "machine": f"{platform.machine()} {os.cpu_count()} cores"}),
              flush=True)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


if __name__ == "__main__":
    main()
