"""The state a bounded operator holds over a long run, driven directly (no server): an interval
join of two streams without windows (a bid meets its auction while the auction is open, as
NEXMark q4/q9 join them), a session window per bidder (NEXMark q11), a Top-N over a
sliding window (by Σ) and a LEFT JOIN of two sliding windows. At ten points of the run it
prints the watermark, the rows the query's operators hold and the bytes Arrow has allocated;
flat columns mean the state is freed as the watermark moves. Also the events per second each
query ran at.

    python bench/state.py [--seconds 600] [--rate 2000] [--only session]

Each second of event time is one batch per stream followed by a watermark on each, as the
gateway's ingest sends them. Prints one JSON record per query; asserts nothing (benchmarks
are not tests).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import pyarrow as pa
import sqlglot

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dialect  # noqa: E402,F401
from dialect.planner import MemoryCatalog, Relation, plan  # noqa: E402
from executor.graph import RunningQuery  # noqa: E402

S = 1_000_000
T0 = 1_793_491_200_000_000
CATALOG = MemoryCatalog()
CATALOG.add(Relation("auctions", "stream", (("id", "BIGINT"), ("expires", "TIMESTAMP"),
                                            ("ts", "TIMESTAMP")), "ts"))
CATALOG.add(Relation("bids", "stream", (("auction", "BIGINT"), ("bidder", "BIGINT"),
                                        ("price", "BIGINT"), ("ts", "TIMESTAMP")), "ts"))

# (query, the rate it is run at as a share of --rate: Σ answers every instant of its window)
QUERIES = {
    "interval join": ("SELECT a.id, b.price FROM auctions a JOIN bids b ON a.id = b.auction "
                      "AND b.ts BETWEEN a.ts AND a.expires", 1.0),
    "session window": ("SELECT bidder, COUNT(*) AS bids, wstart(*), wend(*) FROM bids "
                       "[PARTITION BY bidder SESSION '2 seconds'] GROUP BY bidder", 1.0),
    "Top-N (Σ)": ("SELECT auction, price FROM bids [RANGE '2 seconds'] ORDER BY price DESC "
                  "LIMIT 3", 0.05),
    "outer join": ("SELECT a.id, b.price FROM auctions [RANGE '2 seconds'] a LEFT JOIN "
                   "bids [RANGE '2 seconds'] b ON a.id = b.auction", 1.0),
}


def second(k: int, rate: int, rng) -> dict:
    """One second of event time: an auction per ten bids, each open 1–5 s; bids on the
    auctions of the last few seconds, by 10,000 bidders."""
    start = T0 + k * S
    n_auctions = max(1, rate // 10)
    first_id = k * n_auctions
    a_ts = start + np.sort(rng.integers(0, S, n_auctions))
    auctions = pa.RecordBatch.from_pydict({
        "id": pa.array(np.arange(first_id, first_id + n_auctions)),
        "expires": pa.array(a_ts + rng.integers(1, 6, n_auctions) * S).cast(pa.timestamp("us")),
        "ts": pa.array(a_ts).cast(pa.timestamp("us"))})
    b_ts = start + np.sort(rng.integers(0, S, rate))
    bids = pa.RecordBatch.from_pydict({
        "auction": pa.array(rng.integers(max(0, first_id - 5 * n_auctions),
                                         first_id + n_auctions, rate)),
        "bidder": pa.array(rng.integers(0, 10_000, rate)),
        "price": pa.array(rng.integers(1, 10_000, rate)),
        "ts": pa.array(b_ts).cast(pa.timestamp("us"))})
    return {"auctions": auctions, "bids": bids}


def run(name: str, sql: str, seconds: int, rate: int) -> dict:
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    streams = ["auctions", "bids"] if "auctions" in sql else ["bids"]
    rng = np.random.default_rng(1)
    samples, rows, events, busy = [], 0, 0, 0.0
    for k in range(seconds):
        data = second(k, rate, rng)
        t = time.perf_counter()
        out = []
        for s in streams:
            out += q.push(s, data[s])
            events += data[s].num_rows
        for s in streams:
            out += q.watermark(s, T0 + (k + 1) * S)
        busy += time.perf_counter() - t
        rows += sum(b.num_rows for b in out)
        if (k + 1) % max(1, seconds // 10) == 0:
            samples.append({"watermark_s": k + 1, "state_rows": q.state_size(),
                            "arrow_bytes": pa.total_allocated_bytes()})
    q.close()
    return {"engine": "cqgate-executor", "query": name, "sql": sql, "events": events,
            "event_seconds": seconds, "events_per_s": round(events / busy),
            "result_rows": rows, "state": samples,
            "machine": f"{platform.machine()} {os.cpu_count()} cores"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=600, help="event-time seconds to run")
    ap.add_argument("--rate", type=int, default=2000, help="bids per event-time second")
    ap.add_argument("--only", default=None, help="run only queries containing this text")
    args = ap.parse_args()
    for name, (sql, share) in QUERIES.items():
        if args.only and args.only not in name:
            continue
        print(json.dumps(run(name, sql, args.seconds, max(10, int(args.rate * share)))),
              flush=True)


if __name__ == "__main__":
    main()
