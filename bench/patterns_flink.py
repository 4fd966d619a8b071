"""The pattern of ``bench/patterns.py flink`` through PyFlink's local engine (streaming mode):
MATCH_RECOGNIZE over the CSV file ``k,kind,v,t``, partitioned by k, rows A then B then C in
strict contiguity; run in PyFlink's own venv. The watermark trails by 5 seconds: the file is
read in parallel splits, and with none a split's rows come late and are dropped.

    python patterns_flink.py EVENTS.csv [--parallelism 2]

Prints one JSON line: rows written, and seconds from submitting the job to its end (the JVM's
start is not counted, as cqgate's server start is not)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

QUERY = """SELECT * FROM ev MATCH_RECOGNIZE (
  PARTITION BY k ORDER BY t
  MEASURES A.v AS av, B.v AS bv, C.v AS cv
  ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW
  PATTERN (A B C) WITHIN INTERVAL '10' SECOND
  DEFINE A AS kind = 'A', B AS kind = 'B', C AS kind = 'C')"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("events")
    ap.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    from pyflink.table import EnvironmentSettings, TableEnvironment
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(args.parallelism))
    env.get_config().set("table.local-time-zone", "UTC")
    env.execute_sql(
        "CREATE TABLE ev (k INT, kind STRING, v BIGINT, t TIMESTAMP(3), "
        "WATERMARK FOR t AS t - INTERVAL '5' SECOND) WITH ('connector' = 'filesystem', "
        f"'format' = 'csv', 'path' = '{os.path.abspath(args.events)}')")
    out = tempfile.mkdtemp(prefix="flink-pattern-")
    try:
        env.execute_sql(f"CREATE TEMPORARY TABLE sink (k INT, av BIGINT, bv BIGINT, cv BIGINT) "
                        f"WITH ('connector' = 'filesystem', 'format' = 'csv', 'path' = '{out}')")
        t0 = time.perf_counter()
        env.execute_sql(f"INSERT INTO sink {QUERY}").wait()
        secs = time.perf_counter() - t0
        rows = 0
        for base, _, files in os.walk(out):
            for f in files:
                with open(os.path.join(base, f), "rb") as fh:
                    rows += sum(1 for _ in fh)
        print(json.dumps({"rows": rows, "seconds": round(secs, 3),
                          "parallelism": args.parallelism}), flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
