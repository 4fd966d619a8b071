"""Read a continuous query as Arrow record batches with the ADBC PostgreSQL driver (binary
COPY under the hood) and turn each batch into a polars DataFrame as it arrives.

    python clients/python/arrow_adbc_polars.py postgresql://cq@127.0.0.1:55433/cq
"""
import datetime as dt
import sys
import threading
import time

import adbc_driver_postgresql.dbapi as adbc
import polars as pl
import psycopg

uri = sys.argv[1] if len(sys.argv) > 1 else "postgresql://cq@127.0.0.1:55433/cq"
start = dt.datetime(2026, 10, 1, 8, 0)

with psycopg.connect(uri, autocommit=True) as admin:
    admin.execute("DROP STREAM IF EXISTS trades CASCADE")
    admin.execute("CREATE STREAM trades (symbol TEXT, price DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN)")


def feed():
    """Trades in two bursts, once the query runs."""
    with psycopg.connect(uri, autocommit=True) as c:
        while not c.execute("SELECT count(*) FROM cq_queries WHERE query LIKE '%FROM trades%'"
                            ).fetchone()[0]:
            time.sleep(0.05)
        for burst in range(2):
            with c.cursor().copy("COPY trades FROM STDIN") as copy:
                for i in range(3):
                    k = burst * 3 + i
                    copy.write_row((["ACME", "INIT"][k % 2], 10.0 + k,
                                    start + dt.timedelta(seconds=k)))
            time.sleep(0.3)


threading.Thread(target=feed, daemon=True).start()
with adbc.connect(uri) as conn, conn.cursor() as cur:
    # hand over each batch as soon as rows come, rather than filling 16MB first
    cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": "1"})
    cur.execute("SELECT symbol, price * 2 AS doubled, valid_from FROM trades LIMIT 6")
    frames = [pl.from_arrow(batch) for batch in cur.fetch_record_batch()]
whole = pl.concat(frames)
print(whole.group_by("symbol").agg(pl.col("doubled").sum()).sort("symbol").rows())
print(whole.schema["valid_from"])
