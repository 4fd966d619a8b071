"""Benchmark: what checking privileges costs a statement, beside the same statement run by a
superuser (whom nothing is checked for), on one server in one run.

    python -m bench.privileges [--statements 2000]

- point queries: ``SELECT a FROM t WHERE a = $1`` (prepared, the extended protocol), as the
  superuser and as a role granted SELECT through a group: statements/s and p50/p99 latency;
- the same through a view the role may read (its owner's privileges are checked too);
- connecting: the time from connect to the first ``SELECT 1``, and to the first catalog query
  (``\\dt``'s), which registers the session's live catalog rows.

Starts its own server on a free port with a temporary data directory; prints one JSON record
per measurement (not a test: nothing here asserts a speed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import psycopg

from bench.nexmark.run import ServerProcess

CATALOG_QUERY = ("SELECT n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner) "
                 "FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n "
                 "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
                 "AND n.nspname <> 'pg_catalog' ORDER BY 1, 2")


def _dsn(server, user: str) -> str:
    return f"host=127.0.0.1 port={server.port} user={user} dbname=cq"


def point_queries(dsn: str, table: str, n: int) -> dict:
    with psycopg.connect(dsn, autocommit=True) as c:
        took = []
        for i in range(n):
            t0 = time.perf_counter()
            c.execute(f"SELECT a FROM {table} WHERE a = %s", [i % 1000], prepare=True)\
                .fetchall()
            took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return {"statements_per_s": round(n / (sum(took) / 1000)),
            "p50_ms": round(statistics.median(took), 3),
            "p99_ms": round(took[int(len(took) * 0.99) - 1], 3)}


def connecting(dsn: str, samples: int = 50) -> dict:
    first, catalog = [], []
    for _ in range(samples):
        t0 = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT 1").fetchall()
            t1 = time.perf_counter()
            c.execute(CATALOG_QUERY).fetchall()
            t2 = time.perf_counter()
        first.append((t1 - t0) * 1000)
        catalog.append((t2 - t1) * 1000)
    return {"connect_to_first_select_ms": round(statistics.median(first), 2),
            "first_catalog_query_ms": round(statistics.median(catalog), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--statements", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(tmp, "--log-level", "WARNING")
        try:
            with psycopg.connect(_dsn(server, "cq"), autocommit=True) as su:
                for sql in ["CREATE TABLE t (a INT PRIMARY KEY, b TEXT)",
                            "INSERT INTO t SELECT g, 'x' || g FROM generate_series(0, 999) g",
                            "CREATE VIEW v AS SELECT a, b FROM t",
                            "CREATE ROLE readers", "CREATE ROLE reader LOGIN IN ROLE readers",
                            "GRANT SELECT ON t, v TO readers"]:
                    su.execute(sql)
            for role in ("cq", "reader"):
                for table in ("t", "v"):
                    print(json.dumps({"bench": "privileges", "what": f"point query on {table}",
                                      "role": role, **point_queries(_dsn(server, role), table,
                                                                     args.statements)}))
                print(json.dumps({"bench": "privileges", "what": "connecting", "role": role,
                                  **connecting(_dsn(server, role))}))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
