"""The whole NEXMark suite, q0–q23: each query as the Flink project's suite writes it
(``flink/q*.sql``, its SELECT without the sink, run unchanged over the streams ``person``,
``auction`` and ``bid`` with Flink's column names), the same query in cqgate's own dialect
(over ``persons``, ``auctions`` and ``bids``), and its definition in DuckDB SQL over the
generated files (the oracle).

Windows follow Flink's meaning, [start, end). ``answer`` says which rows compare: ``every``,
each row a cursor sends (an append-only answer: every window's rows, every pair of a join);
``final``, the rows still valid once the input has ended (an answer that changes: Flink's
updates and retractions, cqgate's rows with a valid_to); ``sums``, q12's windows of arrival
time, which no file can say, so its counts per bidder summed over the windows. ``compare``
picks the columns that ties cannot change (q19's ROW_NUMBER over equal prices)."""
from __future__ import annotations

import os
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = "SET cq.unbounded_state = on"      # Flink keeps a regular join's state for ever too


@dataclass(frozen=True)
class SuiteQuery:
    name: str
    title: str
    cqgate: str               # cqgate's own dialect, over persons, auctions, bids
    duckdb: str               # the oracle over {bids}, {persons}, {auctions}, {side_input}
    answer: str = "every"     # every | final | sums
    compare: tuple = ()       # the columns compared (all when empty)
    setup: tuple = ()         # the session's settings before either spelling
    ddl: tuple = ()           # Flink's DDL the query reads (q12's view), run once
    refused: str = ""         # the SQLSTATE Flink's text gets (q6's reads names out of scope)
    fixed: str = ""           # q6: Flink's text with its evident meaning

    @property
    def flink(self) -> str:
        with open(os.path.join(HERE, "flink", f"{self.name}.sql")) as f:
            return f.read()

    @property
    def reads(self) -> tuple:
        text = self.cqgate.lower()
        return tuple(s for s in ("persons", "auctions", "bids") if s in text)


def _tumble(table: str, size: int) -> str:
    """Each tuple of ``table`` with its window [window_start, window_end) of ``size`` s."""
    return (f"(SELECT *, make_timestamp(epoch_us(date_time) // {size * 10**6} * "
            f"{size * 10**6}) AS window_start, window_start + INTERVAL {size} SECOND AS "
            f"window_end FROM {table})")


def _hop(table: str, slide: int, size: int) -> str:
    """Each tuple once per hopping window [window_start, window_end) holding it."""
    return (f"(SELECT t.*, ws AS window_start, ws + INTERVAL {size} SECOND AS window_end "
            f"FROM {table} t, LATERAL (SELECT make_timestamp(epoch_us(t.date_time) // "
            f"{slide * 10**6} * {slide * 10**6} - k * {slide * 10**6}) AS ws "
            f"FROM range(0, {size // slide}) r(k)))")


_RANKS = ("count(*) FILTER (WHERE price < 10000), "
          "count(*) FILTER (WHERE price >= 10000 AND price < 1000000), "
          "count(*) FILTER (WHERE price >= 1000000)")
_DISTINCT = ", ".join(
    f"count(DISTINCT {c}), " + ", ".join(
        f"count(DISTINCT {c}) FILTER (WHERE {w})" for w in
        ("price < 10000", "price >= 10000 AND price < 1000000", "price >= 1000000"))
    for c in ("bidder", "auction"))
_INTERVAL_JOIN = ("{auctions} a JOIN {bids} b ON a.id = b.auction AND b.date_time BETWEEN "
                  "a.date_time AND a.expires")
_CHANNEL = ("CASE lower(channel) WHEN 'apple' THEN '0' WHEN 'google' THEN '1' WHEN "
            "'facebook' THEN '2' WHEN 'baidu' THEN '3' ELSE regexp_extract(url, "
            "'(&|^)channel_id=([^&]*)', 2) END")
_CHANNEL_DUCK = ("CASE lower(channel) WHEN 'apple' THEN '0' WHEN 'google' THEN '1' WHEN "
                 "'facebook' THEN '2' WHEN 'baidu' THEN '3' ELSE nullif(regexp_extract(url, "
                 "'(&|^)channel_id=([^&]*)', 2), '') END")
_BID_TIME = ("CASE WHEN extract(hour FROM date_time) BETWEEN 8 AND 18 THEN 'dayTime' "
             "WHEN extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 "
             "THEN 'nightTime' ELSE 'otherTime' END")
_Q6 = ("SELECT Q.seller, AVG(Q.price) OVER (PARTITION BY Q.seller ORDER BY Q.{t} ROWS "
       "BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price FROM (SELECT * FROM (SELECT A.id, "
       "A.seller, B.price, B.{t}, ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY "
       "B.price DESC, B.{t}) AS rownum FROM {a} AS A, {b} AS B WHERE A.id = B.auction AND "
       "B.{t} BETWEEN A.{t} AND A.expires) AS W WHERE rownum <= 1) AS Q")
_HOT = ("SELECT auction, count(*) AS num FROM {w} GROUP BY auction, window_start, window_end")


SUITE = {q.name: q for q in [
    SuiteQuery("q0", "pass-through",
               "SELECT auction, bidder, price, date_time, extra FROM bids",
               "SELECT auction, bidder, price, date_time, extra FROM {bids}"),
    SuiteQuery("q1", "currency conversion",
               "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bids",
               "SELECT auction, bidder, 0.908 * price, date_time, extra FROM {bids}"),
    SuiteQuery("q2", "selection",
               "SELECT auction, price FROM bids WHERE auction % 123 = 0",
               "SELECT auction, price FROM {bids} WHERE auction % 123 = 0"),
    SuiteQuery("q3", "local item suggestion: a join of two streams without windows",
               "SELECT p.name, p.city, p.state, a.id FROM auctions a JOIN persons p ON "
               "a.seller = p.id WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')",
               "SELECT p.name, p.city, p.state, a.id FROM {auctions} a JOIN {persons} p ON "
               "a.seller = p.id WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')",
               setup=(STATE,)),
    SuiteQuery("q4", "average price per category (the winning bid of each auction)",
               "SELECT q.category, AVG(q.final) FROM (SELECT MAX(b.price) AS final, "
               "a.category FROM " + _INTERVAL_JOIN.format(auctions="auctions", bids="bids")
               + " GROUP BY a.id, a.category) q GROUP BY q.category",
               "SELECT q.category, AVG(q.final) FROM (SELECT MAX(b.price) AS final, "
               "a.category FROM " + _INTERVAL_JOIN + " GROUP BY a.id, a.category) q "
               "GROUP BY q.category", answer="final"),
    SuiteQuery("q5", "hot items: the auctions with the most bids in 10 s windows every 2 s",
               "SELECT c.auction, c.num FROM (SELECT auction, COUNT(*) AS num FROM bids "
               "[RANGE '10 seconds' SLIDE '2 seconds' START AT '2026-11-01 00:00:01.999999'] "
               "GROUP BY auction) c, (SELECT MAX(num) AS top FROM (SELECT auction, COUNT(*) "
               "AS num FROM bids [RANGE '10 seconds' SLIDE '2 seconds' START AT "
               "'2026-11-01 00:00:01.999999'] GROUP BY auction) x) m WHERE c.num >= m.top",
               "WITH c AS (SELECT auction, window_start, count(*) AS num FROM "
               + _hop("{bids}", 2, 10) + " GROUP BY auction, window_start) SELECT auction, "
               "num FROM c WHERE num >= (SELECT max(num) FROM c AS m WHERE "
               "m.window_start = c.window_start)"),
    SuiteQuery("q6", "average selling price of each seller's last auctions (Flink's text "
               "reads names out of scope; its evident meaning)",
               _Q6.format(t="date_time", a="auctions", b="bids"),
               _Q6.format(t="date_time", a="{auctions}", b="{bids}"), answer="final",
               setup=(STATE,), refused="42P01",
               fixed=_Q6.format(t="`dateTime`", a="auction", b="bid")),
    SuiteQuery("q7", "the highest bids of each 10 s window",
               "SELECT b.auction, b.price, b.bidder, b.date_time, b.extra FROM bids "
               "[RANGE '10.000001 seconds' SLIDE '10 seconds' START AT '2026-11-01 00:00:00'] "
               "b, (SELECT MAX(price) AS maxprice FROM bids [RANGE '10 seconds' SLIDE "
               "'10 seconds' START AT '2026-11-01 00:00:09.999999']) m "
               "WHERE b.price = m.maxprice",
               "SELECT b.auction, b.price, b.bidder, b.date_time, b.extra FROM {bids} b JOIN "
               "(SELECT max(price) AS maxprice, window_end FROM " + _tumble("{bids}", 10) +
               " GROUP BY window_end) m ON b.price = m.maxprice WHERE b.date_time BETWEEN "
               "m.window_end - INTERVAL 10 SECOND AND m.window_end", setup=(STATE,)),
    SuiteQuery("q8", "new users: persons who opened an auction in the same 10 s window",
               "SELECT p.id, p.name, p.window_start FROM TABLE(TUMBLE(TABLE persons, "
               "DESCRIPTOR(date_time), INTERVAL '10' SECOND)) p, (SELECT seller FROM auctions "
               "[RANGE '10 seconds' SLIDE '10 seconds' START AT '2026-11-01 00:00:09.999999'] "
               "GROUP BY seller) a WHERE p.id = a.seller",
               "SELECT p.id, p.name, p.window_start FROM (SELECT DISTINCT id, name, "
               "window_start FROM " + _tumble("{persons}", 10) + ") p JOIN (SELECT DISTINCT "
               "seller, window_start FROM " + _tumble("{auctions}", 10) + ") a ON "
               "p.id = a.seller AND p.window_start = a.window_start"),
    SuiteQuery("q9", "winning bids: each auction's highest bid while it was open",
               "SELECT id, item_name, description, initial_bid, reserve, date_time, expires, "
               "seller, category, extra, auction, bidder, price, bid_date_time, bid_extra "
               "FROM (SELECT a.*, b.auction, b.bidder, b.price, b.date_time AS "
               "bid_date_time, b.extra AS bid_extra, ROW_NUMBER() OVER (PARTITION BY a.id "
               "ORDER BY b.price DESC, b.date_time) AS rownum FROM auctions a, bids b WHERE "
               "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires) w "
               "WHERE rownum <= 1",
               "SELECT * EXCLUDE (rownum) FROM (SELECT a.*, b.auction, b.bidder, b.price, "
               "b.date_time, b.extra, ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price "
               "DESC, b.date_time) AS rownum FROM " + _INTERVAL_JOIN + ") WHERE rownum <= 1",
               answer="final", setup=(STATE,)),
    SuiteQuery("q10", "log to files: each bid with its day and minute",
               "SELECT auction, bidder, price, date_time, extra, strftime(date_time, "
               "'%Y-%m-%d'), strftime(date_time, '%H:%M') FROM bids",
               "SELECT auction, bidder, price, date_time, extra, strftime(date_time, "
               "'%Y-%m-%d'), strftime(date_time, '%H:%M') FROM {bids}"),
    SuiteQuery("q11", "user sessions: each bidder's bids per session of 10 s inactivity",
               "SELECT bidder, COUNT(*) AS bid_count, wstart(*) AS starttime, wend(*) AS "
               "endtime FROM bids [PARTITION BY bidder SESSION '10 seconds'] GROUP BY bidder",
               "WITH o AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time) "
               "OVER (PARTITION BY bidder ORDER BY date_time) < INTERVAL 10 SECOND THEN 0 "
               "ELSE 1 END AS new FROM {bids}), s AS (SELECT *, sum(new) OVER (PARTITION BY "
               "bidder ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS sid FROM o) SELECT "
               "bidder, count(*), min(date_time), max(date_time) + INTERVAL 10 SECOND "
               "FROM s GROUP BY bidder, sid"),
    SuiteQuery("q12", "bids per bidder in 10 s windows of arrival time (PROCTIME())",
               "SELECT bidder, COUNT(*) AS bid_count FROM bids [RANGE '10 seconds' SLIDE "
               "'10 seconds' ON ARRIVAL] GROUP BY bidder",
               "SELECT bidder, count(*) FROM {bids} GROUP BY bidder", answer="sums",
               compare=(0, 1),
               ddl=("CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid",)),
    SuiteQuery("q13", "a join with a table as it stands when each bid arrives",
               "SELECT b.auction, b.bidder, b.price, b.date_time, s.value FROM bids b JOIN "
               "side_input s ON b.auction % 10000 = s.key",
               "SELECT b.auction, b.bidder, b.price, b.date_time, s.value FROM {bids} b "
               "JOIN {side_input} s ON b.auction % 10000 = s.key"),
    SuiteQuery("q14", "a Python function (count_char), a CASE on the hour, a price filter",
               "SELECT auction, bidder, 0.908 * price AS price, " + _BID_TIME + " AS "
               "bid_time_type, date_time, extra, count_char(extra, 'c') AS c_counts FROM bids "
               "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
               "SELECT auction, bidder, 0.908 * price, " + _BID_TIME + ", date_time, extra, "
               "length(extra) - length(replace(extra, 'c', '')) FROM {bids} "
               "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"),
    SuiteQuery("q15", "bidding statistics per day",
               "SELECT strftime(date_time, '%Y-%m-%d') AS day, count(*) AS total_bids, "
               + _RANKS + ", " + _DISTINCT + " FROM bids GROUP BY strftime(date_time, "
               "'%Y-%m-%d')",
               "SELECT strftime(date_time, '%Y-%m-%d'), count(*), " + _RANKS + ", "
               + _DISTINCT + " FROM {bids} GROUP BY 1", answer="final"),
    SuiteQuery("q16", "channel statistics per day",
               "SELECT channel, strftime(date_time, '%Y-%m-%d') AS day, max(strftime("
               "date_time, '%H:%M')) AS minute, count(*) AS total_bids, " + _RANKS + ", "
               + _DISTINCT + " FROM bids GROUP BY channel, strftime(date_time, '%Y-%m-%d')",
               "SELECT channel, strftime(date_time, '%Y-%m-%d'), max(strftime(date_time, "
               "'%H:%M')), count(*), " + _RANKS + ", " + _DISTINCT + " FROM {bids} "
               "GROUP BY 1, 2", answer="final"),
    SuiteQuery("q17", "auction statistics per day",
               "SELECT auction, strftime(date_time, '%Y-%m-%d') AS day, count(*) AS "
               "total_bids, " + _RANKS + ", min(price), max(price), avg(price), sum(price) "
               "FROM bids GROUP BY auction, strftime(date_time, '%Y-%m-%d')",
               "SELECT auction, strftime(date_time, '%Y-%m-%d'), count(*), " + _RANKS + ", "
               "min(price), max(price), avg(price), sum(price) FROM {bids} GROUP BY 1, 2",
               answer="final"),
    SuiteQuery("q18", "each bidder's last bid on each auction",
               "SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, "
               "ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS "
               "rank_number FROM bids) b WHERE rank_number <= 1",
               "SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, "
               "ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS "
               "rank_number FROM {bids}) WHERE rank_number <= 1", answer="final"),
    SuiteQuery("q19", "each auction's ten highest bids",
               "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY "
               "price DESC) AS rank_number FROM bids) b WHERE rank_number <= 10",
               "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY "
               "price DESC) AS rank_number FROM {bids}) WHERE rank_number <= 10",
               answer="final", compare=(0, 2, 7)),
    SuiteQuery("q20", "each bid with its auction, of category 10",
               "SELECT auction, bidder, price, channel, url, b.date_time, b.extra, item_name, "
               "description, initial_bid, reserve, a.date_time, expires, seller, category, "
               "a.extra FROM bids b JOIN auctions a ON b.auction = a.id WHERE a.category = 10",
               "SELECT auction, bidder, price, channel, url, b.date_time, b.extra, item_name, "
               "description, initial_bid, reserve, a.date_time, expires, seller, category, "
               "a.extra FROM {bids} b JOIN {auctions} a ON b.auction = a.id "
               "WHERE a.category = 10", setup=(STATE,)),
    SuiteQuery("q21", "each bid's channel id, from its name or its URL",
               "SELECT auction, bidder, price, channel, " + _CHANNEL + " AS channel_id FROM "
               "bids WHERE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL OR "
               "lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
               "SELECT auction, bidder, price, channel, " + _CHANNEL_DUCK + " FROM {bids} "
               "WHERE regexp_matches(url, '(&|^)channel_id=([^&]*)') OR lower(channel) IN "
               "('apple', 'google', 'facebook', 'baidu')"),
    SuiteQuery("q22", "the directories of each bid's URL",
               "SELECT auction, bidder, price, channel, string_split(url, '/')[4] AS dir1, "
               "string_split(url, '/')[5] AS dir2, string_split(url, '/')[6] AS dir3 "
               "FROM bids",
               "SELECT auction, bidder, price, channel, string_split(url, '/')[4], "
               "string_split(url, '/')[5], string_split(url, '/')[6] FROM {bids}"),
    SuiteQuery("q23", "each bid with its bidder and the bidder's own auctions",
               "SELECT bidder, price, channel, url, b.extra AS bid_extra, p.id AS person_id, "
               "name, email_address, credit_card, city, state, p.extra AS person_extra, "
               "item_name, description, initial_bid, reserve, a.date_time AS "
               "auction_date_time, expires, seller, category, a.extra AS auction_extra "
               "FROM bids b JOIN persons p ON p.id = b.bidder JOIN auctions a ON "
               "a.seller = b.bidder",
               "SELECT bidder, price, channel, url, b.extra, p.id, name, email_address, "
               "credit_card, city, state, p.extra, item_name, description, initial_bid, "
               "reserve, a.date_time, expires, seller, category, a.extra FROM {bids} b "
               "JOIN {persons} p ON p.id = b.bidder JOIN {auctions} a ON a.seller = b.bidder",
               setup=(STATE,)),
]}

# q13's side input: a table of 10,000 keys, as the Flink suite's side_input.txt
SIDE_INPUT = ("CREATE TABLE side_input (key BIGINT, value TEXT)",
              "INSERT INTO side_input SELECT k, 'v' || k FROM generate_series(0, 9999) AS k")
SIDE_INPUT_DUCKDB = "(SELECT k AS key, 'v' || k AS value FROM range(10000) t(k))"


def _number(v):
    """Numbers as one kind, so that DuckDB's DECIMAL, HUGEINT and DOUBLE compare with what
    a PostgreSQL client reads (numeric, bigint, float8)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) and \
            type(v).__name__ != "Decimal":
        return v
    return round(float(v), 6)


def normalised(rows, columns: tuple = ()) -> list[tuple]:
    """Rows as compared: the chosen columns, numbers as floats, sorted."""
    out = [tuple(_number(r[i]) for i in (columns or range(len(r)))) for r in rows]
    return sorted(out, key=repr)


def oracle(query: SuiteQuery, files: dict) -> list[tuple]:
    """The query's answer computed by DuckDB over ``files`` ({stream: parquet path})."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    sql = query.duckdb.format(side_input=SIDE_INPUT_DUCKDB, **{
        s: f"read_parquet('{p}')" for s, p in files.items()})
    return normalised(con.execute(sql).fetchall(), query.compare)
