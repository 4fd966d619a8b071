"""The NEXMark queries q0, q1, q2, q5, q7, q8, q11 (sessions) and q14 (a Python function) in
cqgate's dialect, the interval join of q4, q6 and q9 (``ij``), a windowed Top-N (``topn``) and a
windowed outer join (``oj``), each with its definition in DuckDB SQL over the generated files
(the oracle the tests compare with).

Windows follow cqgate's semantics: ``[RANGE r SLIDE s]`` has windows ending at multiples of s,
each holding the tuples with end − r < date_time <= end, answered from the end on; the DuckDB
definitions spell that out with ``_ends``. Every query returns plain columns, so answers
compare as multisets of rows."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    cqgate: str          # the continuous query
    duckdb: str          # the same answer over the files: {bids}, {persons}, {auctions}
    reads: tuple         # the streams it reads
    setup: tuple = ()    # statements the server runs first (a Python function it calls)


def _ends(table: str, range_s: int, slide_s: int) -> str:
    """Each tuple of ``table`` once per window it belongs to, with that window's end ``e``."""
    return (f"(SELECT *, e FROM {table}, LATERAL (SELECT ceil_end + INTERVAL (k * {slide_s}) "
            f"SECOND AS e FROM (SELECT to_timestamp(ceil(epoch_us(date_time) / "
            f"{slide_s * 1_000_000}) * {slide_s}) :: TIMESTAMP AS ceil_end), "
            f"range(0, {(range_s + slide_s - 1) // slide_s}) AS r(k) "
            f"WHERE ceil_end + INTERVAL (k * {slide_s}) SECOND < date_time + INTERVAL "
            f"{range_s} SECOND))")


QUERIES = {q.name: q for q in [
    Query("q0", "pass-through",
          "SELECT auction, bidder, price, channel, url, date_time FROM bids",
          "SELECT auction, bidder, price, channel, url, date_time FROM {bids}", ("bids",)),
    Query("q1", "currency conversion (price × 0.908)",
          "SELECT auction, bidder, CAST(price * 0.908 AS DOUBLE) AS price, date_time FROM bids",
          "SELECT auction, bidder, CAST(price * 0.908 AS DOUBLE) AS price, date_time FROM {bids}",
          ("bids",)),
    Query("q2", "selection (auction % 123 = 0)",
          "SELECT auction, price FROM bids WHERE auction % 123 = 0",
          "SELECT auction, price FROM {bids} WHERE auction % 123 = 0", ("bids",)),
    Query("q5", "hot items: the auctions with the most bids in 10 s windows sliding every 2 s",
          "SELECT c.auction, c.num, valid_from FROM "
          "(SELECT auction, COUNT(*) AS num FROM bids [RANGE '10 seconds' SLIDE '2 seconds'] "
          "GROUP BY auction) c, "
          "(SELECT MAX(num) AS top FROM (SELECT auction, COUNT(*) AS num FROM bids "
          "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY auction) x) m WHERE c.num = m.top",
          "WITH c AS (SELECT auction, e, COUNT(*) AS num FROM " + _ends("{bids}", 10, 2) +
          " GROUP BY auction, e) SELECT auction, num, e FROM c "
          "WHERE num = (SELECT MAX(num) FROM c AS m WHERE m.e = c.e)", ("bids",)),
    Query("q7", "highest bid in each 10 s tumbling window, joined back to the bids",
          "SELECT b.auction, b.price, b.bidder, b.date_time FROM "
          "bids [RANGE '10 seconds' SLIDE '10 seconds'] b, "
          "(SELECT MAX(price) AS top FROM bids [RANGE '10 seconds' SLIDE '10 seconds']) m "
          "WHERE b.price = m.top",
          "WITH w AS (SELECT * FROM " + _ends("{bids}", 10, 10) + ") "
          "SELECT auction, price, bidder, date_time FROM w "
          "WHERE price = (SELECT MAX(price) FROM w AS m WHERE m.e = w.e)", ("bids",)),
    Query("q8", "new persons who opened an auction in the same 10 s tumbling window",
          "SELECT p.id, p.name FROM persons [RANGE '10 seconds' SLIDE '10 seconds'] p, "
          "(SELECT seller FROM auctions [RANGE '10 seconds' SLIDE '10 seconds'] "
          "GROUP BY seller) a WHERE p.id = a.seller",
          "SELECT p.id, p.name FROM " + _ends("{persons}", 10, 10) + " p JOIN "
          "(SELECT DISTINCT seller, e FROM " + _ends("{auctions}", 10, 10) + ") a "
          "ON p.id = a.seller AND p.e = a.e", ("persons", "auctions")),
    Query("ij", "interval join: each bid with its auction while the auction is open (the join "
          "of q4, q6 and q9), two streams without windows",
          "SELECT a.id, a.seller, b.price, b.date_time FROM auctions a JOIN bids b ON "
          "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires",
          "SELECT a.id, a.seller, b.price, b.date_time FROM {auctions} a JOIN {bids} b ON "
          "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires",
          ("auctions", "bids")),
    Query("q11", "user sessions: each bidder's bids counted per session of 10 s inactivity",
          "SELECT bidder, COUNT(*) AS bid_count, wstart(*) AS starttime, wend(*) AS endtime "
          "FROM bids [PARTITION BY bidder SESSION '10 seconds'] GROUP BY bidder",
          "WITH o AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time) OVER "
          "(PARTITION BY bidder ORDER BY date_time) < INTERVAL 10 SECOND THEN 0 ELSE 1 END "
          "AS new FROM {bids}), s AS (SELECT *, SUM(new) OVER (PARTITION BY bidder ORDER BY "
          "date_time ROWS UNBOUNDED PRECEDING) AS sid FROM o) SELECT bidder, COUNT(*), "
          "MIN(date_time), MAX(date_time) + INTERVAL 10 SECOND FROM s GROUP BY bidder, sid",
          ("bids",)),
    Query("q14", "a Python function (count_char, vectorised over Arrow) beside q1's "
          "conversion, a CASE on the hour and a price filter",
          "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE) AS price, CASE WHEN "
          "extract(hour FROM date_time) BETWEEN 8 AND 18 THEN 'dayTime' WHEN "
          "extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN "
          "'nightTime' ELSE 'otherTime' END AS bid_time_type, date_time, "
          "count_char(url, 'o') AS c_counts FROM bids "
          "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
          "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE), CASE WHEN "
          "extract(hour FROM date_time) BETWEEN 8 AND 18 THEN 'dayTime' WHEN "
          "extract(hour FROM date_time) <= 6 OR extract(hour FROM date_time) >= 20 THEN "
          "'nightTime' ELSE 'otherTime' END, date_time, "
          "length(url) - length(replace(url, 'o', '')) FROM {bids} "
          "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000", ("bids",)),
    Query("q14r", "q14 with count_char written in SQL (CREATE FUNCTION … LANGUAGE python): "
          "its body called once per row",
          "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE) AS price, date_time, "
          "count_char_rows(url, 'o') AS c_counts FROM bids "
          "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
          "SELECT auction, bidder, CAST(0.908 * price AS DOUBLE), date_time, "
          "length(url) - length(replace(url, 'o', '')) FROM {bids} "
          "WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000", ("bids",),
          ("CREATE OR REPLACE FUNCTION count_char_rows(s TEXT, c TEXT) RETURNS INT "
           "LANGUAGE python STRICT AS $$ return s.count(c) $$",)),
    Query("topn", "the 3 highest bids of each 10 s tumbling window (ROW_NUMBER, rn <= 3)",
          "SELECT auction, bidder, price, date_time FROM (SELECT auction, bidder, price, "
          "date_time, ROW_NUMBER() OVER (ORDER BY price DESC, auction, bidder, date_time) "
          "AS rn FROM bids [RANGE '10 seconds' SLIDE '10 seconds']) t WHERE rn <= 3",
          "SELECT auction, bidder, price, date_time FROM (SELECT *, ROW_NUMBER() OVER "
          "(PARTITION BY e ORDER BY price DESC, auction, bidder, date_time) AS rn FROM "
          + _ends("{bids}", 10, 10) + ") WHERE rn <= 3", ("bids",)),
    Query("oj", "each auction of a 10 s tumbling window with the bids on it in that window, "
          "or NULLs (LEFT JOIN)",
          "SELECT a.id, a.seller, b.price FROM auctions [RANGE '10 seconds' SLIDE "
          "'10 seconds'] a LEFT JOIN bids [RANGE '10 seconds' SLIDE '10 seconds'] b "
          "ON a.id = b.auction",
          "SELECT a.id, a.seller, b.price FROM " + _ends("{auctions}", 10, 10) + " a LEFT "
          "JOIN " + _ends("{bids}", 10, 10) + " b ON a.id = b.auction AND a.e = b.e",
          ("auctions", "bids")),
]}


# not among QUERIES (the peers run those): keyed aggregates ``run scale`` splits across
# back-end workers: q5's first stage on its own (little work per event), and the distinct
# bidders of each auction (much more)
KEYED = {q.name: q for q in [
    Query("keyed", "bids per auction in 10 s windows sliding every 2 s (q5's first stage)",
          "SELECT auction, COUNT(*) AS num, valid_from FROM bids "
          "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY auction",
          "SELECT auction, COUNT(*) AS num, e FROM " + _ends("{bids}", 10, 2) +
          " GROUP BY auction, e", ("bids",)),
    Query("distinct", "distinct bidders per auction in 10 s windows sliding every 2 s",
          "SELECT auction, COUNT(DISTINCT bidder) AS bidders, valid_from FROM bids "
          "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY auction",
          "SELECT auction, COUNT(DISTINCT bidder) AS bidders, e FROM " +
          _ends("{bids}", 10, 2) + " GROUP BY auction, e", ("bids",)),
]}


def oracle(query: Query, files: dict) -> list[tuple]:
    """The query's answer computed by DuckDB over ``files`` ({stream: parquet path}), sorted."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    sql = query.duckdb.format(**{s: f"read_parquet('{p}')" for s, p in files.items()})
    return sorted(con.execute(sql).fetchall(), key=repr)
