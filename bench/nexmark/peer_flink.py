"""NEXMark q0, q1, q2, q5, q7, q8, q11, q14 and the interval join ``ij``, windowed Top-N
``topn`` and windowed outer join ``oj`` through PyFlink's local engine
(streaming mode), reading the CSV files the generator wrote; run by ``bench.nexmark.peers`` in
PyFlink's own venv. With ``--suite``, the Flink suite's own texts (``flink/q*.sql``) over its
tables ``person``, ``auction``, ``bid``, each into the suite's sink, a blackhole (so Flink
writes no rows anywhere, where cqgate's travel to a client).

    python peer_flink.py EVENTS_DIR [--queries q0,q1] [--parallelism 2] [--suite]

Needs only PyFlink (it is not run in the project's environment). Each query reads the files
as a bounded stream with event-time watermarks and writes its rows to CSV files in a fresh
folder (the results are drained, as a client drains cqgate's); the rows written are counted
afterwards. Prints one JSON line per query: rows, and seconds from submitting the job to its
end (the JVM's start is not counted, as cqgate's server start is not)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

COLUMNS = {
    "persons": "id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, "
               "state STRING, date_time TIMESTAMP(3), extra STRING",
    "auctions": "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
                "reserve BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, "
                "category BIGINT, extra STRING",
    "bids": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
            "date_time TIMESTAMP(3), extra STRING",
}
# the Flink suite's tables over the same files (its names: person, dateTime …)
SUITE_TABLES = {
    "person": ("persons", "id BIGINT, name STRING, emailAddress STRING, creditCard STRING, "
                          "city STRING, state STRING, `dateTime` TIMESTAMP(3), extra STRING"),
    "auction": ("auctions", "id BIGINT, itemName STRING, description STRING, initialBid BIGINT, "
                            "reserve BIGINT, `dateTime` TIMESTAMP(3), expires TIMESTAMP(3), "
                            "seller BIGINT, category BIGINT, extra STRING"),
    "bid": ("bids", "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
                    "`dateTime` TIMESTAMP(3), extra STRING"),
}
SUITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink")


def _hop(table: str, slide: int, size: int) -> str:
    return (f"TABLE(HOP(TABLE {table}, DESCRIPTOR(date_time), INTERVAL '{slide}' SECOND, "
            f"INTERVAL '{size}' SECOND))")


def _tumble(table: str) -> str:
    return f"TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(date_time), INTERVAL '10' SECOND))"


# (result columns, query): Flink's windows hold start <= t < end; cqgate's end - r < t <= end
QUERIES = {
    "q0": ("auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
           "date_time TIMESTAMP(3)",
           "SELECT auction, bidder, price, channel, url, date_time FROM bids"),
    "q1": ("auction BIGINT, bidder BIGINT, price DOUBLE, date_time TIMESTAMP(3)",
           "SELECT auction, bidder, CAST(price * 0.908 AS DOUBLE), date_time FROM bids"),
    "q2": ("auction BIGINT, price BIGINT",
           "SELECT auction, price FROM bids WHERE MOD(auction, 123) = 0"),
    "q5": ("auction BIGINT, num BIGINT, window_end TIMESTAMP(3)",
           f"WITH c AS (SELECT auction, COUNT(*) AS num, window_start, window_end FROM "
           f"{_hop('bids', 2, 10)} GROUP BY auction, window_start, window_end) "
           "SELECT c.auction, c.num, c.window_end FROM c JOIN (SELECT MAX(num) AS top, "
           "window_start, window_end FROM c GROUP BY window_start, window_end) m "
           "ON c.window_start = m.window_start AND c.window_end = m.window_end "
           "WHERE c.num = m.top"),
    "q7": ("auction BIGINT, price BIGINT, bidder BIGINT, date_time TIMESTAMP(3)",
           f"SELECT b.auction, b.price, b.bidder, b.date_time FROM {_tumble('bids')} b JOIN "
           f"(SELECT MAX(price) AS top, window_start, window_end FROM {_tumble('bids')} "
           "GROUP BY window_start, window_end) m ON b.window_start = m.window_start AND "
           "b.window_end = m.window_end WHERE b.price = m.top"),
    "q8": ("id BIGINT, name STRING",
           f"SELECT p.id, p.name FROM (SELECT id, name, window_start, window_end FROM "
           f"{_tumble('persons')} GROUP BY id, name, window_start, window_end) p JOIN "
           f"(SELECT seller, window_start, window_end FROM {_tumble('auctions')} GROUP BY "
           "seller, window_start, window_end) a ON p.id = a.seller AND "
           "p.window_start = a.window_start AND p.window_end = a.window_end"),
    # a regular join to Flink (expires is no time attribute): its state is never freed
    "ij": ("id BIGINT, seller BIGINT, price BIGINT, date_time TIMESTAMP(3)",
           "SELECT a.id, a.seller, b.price, b.date_time FROM auctions a JOIN bids b ON "
           "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires"),
    "q11": ("bidder BIGINT, bid_count BIGINT, starttime TIMESTAMP(3), endtime TIMESTAMP(3)",
            "SELECT bidder, COUNT(*), window_start, window_end FROM TABLE(SESSION(TABLE bids "
            "PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) "
            "GROUP BY bidder, window_start, window_end"),
    # count_char as a vectorised (pandas) Python UDF, as cqgate's is vectorised over Arrow
    "q14": ("auction BIGINT, bidder BIGINT, price DOUBLE, bid_time_type STRING, "
            "date_time TIMESTAMP(3), c_counts INT",
            "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE), CASE WHEN HOUR(date_time) "
            "BETWEEN 8 AND 18 THEN 'dayTime' WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= "
            "20 THEN 'nightTime' ELSE 'otherTime' END, date_time, count_char(url, 'o') "
            "FROM bids WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"),
    # the same with a Python UDF called once per row, as cqgate's q14r
    "q14r": ("auction BIGINT, bidder BIGINT, price DOUBLE, date_time TIMESTAMP(3), "
             "c_counts INT",
             "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE), date_time, "
             "count_char_rows(url, 'o') FROM bids "
             "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"),
    "topn": ("auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3)",
             "SELECT auction, bidder, price, date_time FROM (SELECT auction, bidder, price, "
             "date_time, ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY "
             f"price DESC, auction, bidder, date_time) AS rn FROM {_tumble('bids')}) "
             "WHERE rn <= 3"),
    "oj": ("id BIGINT, seller BIGINT, price BIGINT",
           f"SELECT a.id, a.seller, b.price FROM (SELECT * FROM {_tumble('auctions')}) a "
           f"LEFT JOIN (SELECT * FROM {_tumble('bids')}) b ON a.id = b.auction AND "
           "a.window_start = b.window_start AND a.window_end = b.window_end"),
}


def _python_functions(env) -> None:
    """q14's count_char: vectorised (pandas), and once per row (count_char_rows)."""
    from pyflink.table import DataTypes
    from pyflink.table.udf import udf

    def count_char(text, char):       # a constant argument comes as one value
        return text.str.count(char if isinstance(char, str) else char.iloc[0]).astype("int32")

    def count_char_rows(text, char):
        return None if text is None or char is None else text.count(char)

    env.create_temporary_function("count_char", udf(
        count_char, result_type=DataTypes.INT(), func_type="pandas"))
    env.create_temporary_function("count_char_rows", udf(
        count_char_rows, result_type=DataTypes.INT()))


def _count_rows(folder: str) -> int:
    rows = 0
    for base, _, files in os.walk(folder):
        for f in files:
            with open(os.path.join(base, f), "rb") as fh:
                rows += sum(1 for _ in fh)
    return rows


def _reason(e: Exception) -> str:
    """Flink's own words for a failure: the Java exception's message, not Py4J's wrapper."""
    lines = [ln.strip() for ln in str(e).splitlines()]
    said = [ln for ln in lines if "Exception:" in ln and "Py4J" not in ln]
    return (said[-1] if said else f"{type(e).__name__}: {lines[0]}")[:400]


def _suite(env, events_dir: str, queries: list, parallelism: int) -> None:
    """The Flink suite's texts as written, each into a blackhole with its result's schema."""
    from pyflink.table import Schema, TableDescriptor
    for name, (stream, cols) in SUITE_TABLES.items():
        env.execute_sql(
            f"CREATE TABLE {name} ({cols}, WATERMARK FOR `dateTime` AS `dateTime`) WITH "
            f"('connector' = 'filesystem', 'format' = 'csv', "
            f"'path' = '{os.path.join(os.path.abspath(events_dir), stream + '.csv')}')")
    side = os.path.join(os.path.abspath(events_dir), "side_input.csv")
    with open(side, "w") as f:
        f.writelines(f"{k},v{k}\n" for k in range(10_000))
    env.execute_sql(f"CREATE TABLE side_input (key BIGINT, `value` STRING) WITH ("
                    f"'connector' = 'filesystem', 'format' = 'csv', 'path' = '{side}')")
    env.execute_sql("CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid")   # q12's
    for k, q in enumerate(["q2"] + queries):
        with open(os.path.join(SUITE_DIR, f"{q}.sql")) as f:
            text = f.read()
        try:
            table = env.sql_query(text)
            sink = f"sink_{k}"
            env.create_temporary_table(sink, TableDescriptor.for_connector("blackhole").schema(
                Schema.new_builder().from_row_data_type(
                    table.get_schema().to_row_data_type()).build()).build())
            t0 = time.perf_counter()
            table.execute_insert(sink).wait()
            secs = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - a query Flink refuses is reported, not fatal
            if k:
                print(json.dumps({"query": q, "error": _reason(e)}), flush=True)
            continue
        if k:
            print(json.dumps({"query": q, "rows": None, "seconds": round(secs, 3),
                              "parallelism": parallelism, "sink": "blackhole"}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("events_dir")
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--suite", action="store_true", help="the Flink suite's own texts")
    args = ap.parse_args()
    from pyflink.table import EnvironmentSettings, TableEnvironment
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", str(args.parallelism))
    env.get_config().set("table.local-time-zone", "UTC")
    if args.suite:
        _python_functions(env)
        _suite(env, args.events_dir, args.queries.split(","), args.parallelism)
        return
    for name, cols in COLUMNS.items():
        env.execute_sql(
            f"CREATE TABLE {name} ({cols}, WATERMARK FOR date_time AS date_time) WITH "
            f"('connector' = 'filesystem', 'format' = 'csv', "
            f"'path' = '{os.path.join(os.path.abspath(args.events_dir), name + '.csv')}')")
    _python_functions(env)
    # the first job in a fresh JVM pays for class loading and JIT: one untimed q2 first
    for k, q in enumerate(["q2"] + args.queries.split(",")):
        cols, sql = QUERIES[q]
        out = tempfile.mkdtemp(prefix=f"flink-{q}-")
        try:
            sink = f"out_{k}"
            env.execute_sql(f"CREATE TEMPORARY TABLE {sink} ({cols}) WITH ('connector' = "
                            f"'filesystem', 'format' = 'csv', 'path' = '{out}')")
            t0 = time.perf_counter()
            env.execute_sql(f"INSERT INTO {sink} {sql}").wait()
            secs = time.perf_counter() - t0
            if k == 0:
                continue
            print(json.dumps({"query": q, "rows": _count_rows(out), "seconds": round(secs, 3),
                              "parallelism": args.parallelism}), flush=True)
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
