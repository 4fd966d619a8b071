"""The NEXMark queries q0, q1, q2, q5, q7 and q8 in cqgate's dialect, and the interval join of
q4, q6 and q9 (``ij``), each with its definition in DuckDB SQL over the generated files (the
oracle the tests compare with).

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
]}


def oracle(query: Query, files: dict) -> list[tuple]:
    """The query's answer computed by DuckDB over ``files`` ({stream: parquet path}), sorted."""
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    sql = query.duckdb.format(**{s: f"read_parquet('{p}')" for s, p in files.items()})
    return sorted(con.execute(sql).fetchall(), key=repr)
