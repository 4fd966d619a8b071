"""The NEXMark event generator, vectorised: persons, auctions and bids in the proportions
1:3:46, written once as Parquet and CSV so every engine reads identical events.

    python -m bench.nexmark.generate OUT_DIR [--events 10000000] [--rate 1000000] [--delayed]

Follows the reference generator (Beam/Flink NexmarkGenerator): event n is a person, an auction
or a bid by n mod 50; person and auction ids count up from 1000; at most 1,000 people are
active and 100 auctions in flight; a bid goes to the hottest auction one time in two (the
hot-auction ratio 2) and comes from a hot bidder three times in four (ratio 4); a seller is hot
three times in four; prices are 100 × 10^U(0,6) cents; a bid's channel is one of four hot
ones one time in two, else one of 10,000 whose id its URL carries (channel_id=…); every event
has an ``extra`` string of 1–15 letters. Event time advances by 1/rate s per
event from 2026-11-01 00:00:00. With --delayed, 10 % of events arrive up to 3 s late: the
files list events in arrival order, so event time is then out of order.

Writes OUT_DIR/{persons,auctions,bids}.{parquet,csv}; the CSVs have no header and list
columns in the order of ``SCHEMAS``."""
from __future__ import annotations

import argparse
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

PERSON, AUCTION, BID = 1, 3, 46          # proportions within each 50 events
EPOCH = PERSON + AUCTION + BID
FIRST_PERSON, FIRST_AUCTION = 1000, 1000
ACTIVE_PEOPLE, IN_FLIGHT_AUCTIONS = 1000, 100
HOT_AUCTION_RATIO, HOT_BIDDER_RATIO, HOT_SELLER_RATIO = 2, 4, 4
START_US = 1_793_491_200_000_000         # 2026-11-01 00:00:00 UTC
CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond",
          "Seattle", "Kent", "Cheyenne"]
STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]

HOT_CHANNEL_RATIO, CHANNELS_NUMBER = 2, 10_000
SCHEMAS = {
    "persons": ["id", "name", "email_address", "credit_card", "city", "state", "date_time",
                "extra"],
    "auctions": ["id", "item_name", "description", "initial_bid", "reserve", "date_time",
                 "expires", "seller", "category", "extra"],
    "bids": ["auction", "bidder", "price", "channel", "url", "date_time", "extra"],
}
DDL = {      # the streams as cqgate declares them
    "persons": "id BIGINT, name TEXT, email_address TEXT, credit_card TEXT, city TEXT, "
               "state TEXT, date_time TIMESTAMP TIMESTAMPCOLUMN, extra TEXT",
    "auctions": "id BIGINT, item_name TEXT, description TEXT, initial_bid BIGINT, "
                "reserve BIGINT, date_time TIMESTAMP TIMESTAMPCOLUMN, expires TIMESTAMP, "
                "seller BIGINT, category BIGINT, extra TEXT",
    "bids": "auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT, "
            "date_time TIMESTAMP TIMESTAMPCOLUMN, extra TEXT",
}
# the same streams as the Flink suite names them (person, auction, bid; dateTime …): the
# same files, columns in the same order
FLINK_STREAMS = {"persons": "person", "auctions": "auction", "bids": "bid"}


def flink_name(column: str) -> str:
    """date_time -> dateTime, as the Flink suite spells its columns."""
    head, *rest = column.split("_")
    return head + "".join(w.capitalize() for w in rest)


FLINK_DDL = {FLINK_STREAMS[s]: ", ".join(
    " ".join([flink_name(c.split(" ", 1)[0]), c.split(" ", 1)[1]])
    for c in DDL[s].split(", ")) for s in DDL}


def _last_person(n: np.ndarray) -> np.ndarray:
    """The id of the newest person at event n (events before the first person: the first)."""
    return FIRST_PERSON + n // EPOCH * PERSON


def _last_auction(n: np.ndarray) -> np.ndarray:
    return FIRST_AUCTION + n // EPOCH * AUCTION + np.clip(n % EPOCH - PERSON, 0, AUCTION - 1)


def _pick(rng, newest: np.ndarray, span: int, first: int) -> np.ndarray:
    """A random id, uniform among the ``span`` newest up to ``newest`` (fewer at the start,
    when fewer than ``span`` exist)."""
    low = np.maximum(first, newest - span + 1)
    return low + (rng.random(len(newest)) * (newest - low + 1)).astype(np.int64)


def _strings(prefix: str, values: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(prefix, pa.array(values).cast(pa.string()), "")


def _words(rng, count: int, pool: int = 1000) -> pa.Array:
    """``count`` strings of 1 to 15 letters, drawn from ``pool`` random ones (the reference
    generator's padding, shorter)."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(1, 16, pool)     # (an empty one would be NULL in the CSV)
    words = np.array(["".join(letters[rng.integers(0, 26, n)]) for n in lengths])
    return pa.array(words[rng.integers(0, pool, count)])


def _channels(rng, count: int) -> tuple[pa.Array, pa.Array]:
    """Channel and URL as the reference generator makes them: one bid in two from a hot
    channel (Google, Facebook, Baidu, Apple, each with its URL), the others from one of 10,000
    channels "channel-k", whose URL carries channel_id=k with k's digits reversed."""
    def base(n):
        parts = [np.array(["".join(w) for w in rng.choice(list("abcde_"), (n, 5))])
                 for _ in range(3)]
        return np.char.add(np.char.add(np.char.add(np.char.add(np.char.add(
            "https://www.nexmark.com/", parts[0]), "/"), parts[1]), "/"),
            np.char.add(parts[2], "/item.htm?query=1"))
    hot_urls = base(len(CHANNELS))
    k = np.arange(CHANNELS_NUMBER)
    cold_channels = np.char.add("channel-", k.astype(str))
    cold_urls = np.char.add(np.char.add(base(CHANNELS_NUMBER), "&channel_id="),
                            np.array([str(i)[::-1] for i in k]))
    hot = rng.integers(0, HOT_CHANNEL_RATIO, count) > 0
    which = rng.integers(0, len(CHANNELS), count)
    cold = rng.integers(0, CHANNELS_NUMBER, count)
    channel = np.where(hot, np.array(CHANNELS)[which], cold_channels[cold])
    url = np.where(hot, hot_urls[which], cold_urls[cold])
    return pa.array(channel), pa.array(url)


def generate(events: int, rate: float, delayed: bool, seed: int = 1,
             offset: int = 0) -> dict[str, pa.Table]:
    """``events`` events from event number ``offset`` on (a long run generates piece by
    piece: ids and event times continue)."""
    rng = np.random.default_rng(seed + offset)
    n = np.arange(offset, offset + events, dtype=np.int64)
    ts = START_US + (n * 1_000_000 / rate).astype(np.int64)
    arrival = ts.copy()
    if delayed:                     # 10 % of events reach the system up to 3 s after their time
        late = rng.random(events) < 0.1
        arrival[late] += rng.integers(0, 3_000_000, int(late.sum()))
    kind = n % EPOCH
    out = {}

    p = n[kind < PERSON]
    pid = _last_person(p)
    out["persons"] = (p, {
        "id": pa.array(pid),
        "name": _strings("person ", pid),
        "email_address": _strings("p", pid),
        "credit_card": _strings("4000 0000 0000 ", pid % 10_000),
        "city": pa.array(np.array(CITIES)[rng.integers(0, len(CITIES), len(p))]),
        "state": pa.array(np.array(STATES)[rng.integers(0, len(STATES), len(p))]),
        "extra": _words(rng, len(p)),
    })

    a = n[(kind >= PERSON) & (kind < PERSON + AUCTION)]
    aid = _last_auction(a)
    hot = rng.integers(0, HOT_SELLER_RATIO, len(a)) > 0
    seller = np.where(hot, _last_person(a) // HOT_SELLER_RATIO * HOT_SELLER_RATIO,
                      _pick(rng, _last_person(a), ACTIVE_PEOPLE, FIRST_PERSON))
    initial = np.round(10 ** (rng.random(len(a)) * 6) * 100).astype(np.int64)
    out["auctions"] = (a, {
        "id": pa.array(aid),
        "item_name": _strings("item ", aid),
        "description": _strings("lot ", aid % 997),
        "initial_bid": pa.array(initial),
        "reserve": pa.array(initial + np.round(10 ** (rng.random(len(a)) * 6) * 100)
                            .astype(np.int64)),
        "expires": pa.array(ts[a - offset] + rng.integers(2_000_000, 20_000_000, len(a)))
        .cast(pa.timestamp("us")),
        "seller": pa.array(seller),
        "category": pa.array(10 + rng.integers(0, 5, len(a))),
        "extra": _words(rng, len(a)),
    })

    b = n[kind >= PERSON + AUCTION]
    hot = rng.integers(0, HOT_AUCTION_RATIO, len(b)) > 0
    auction = np.where(hot, _last_auction(b) // HOT_AUCTION_RATIO * HOT_AUCTION_RATIO,
                       _pick(rng, _last_auction(b), IN_FLIGHT_AUCTIONS, FIRST_AUCTION))
    hot = rng.integers(0, HOT_BIDDER_RATIO, len(b)) > 0
    bidder = np.where(hot, _last_person(b) // HOT_BIDDER_RATIO * HOT_BIDDER_RATIO + 1,
                      _pick(rng, _last_person(b), ACTIVE_PEOPLE, FIRST_PERSON))
    out["bids"] = (b, {
        "auction": pa.array(auction),
        "bidder": pa.array(bidder),
        "price": pa.array(np.round(10 ** (rng.random(len(b)) * 6) * 100).astype(np.int64)),
    })
    out["bids"][1]["channel"], out["bids"][1]["url"] = _channels(rng, len(b))
    out["bids"][1]["extra"] = _words(rng, len(b))

    tables = {}
    for name, (rows, cols) in out.items():
        cols["date_time"] = pa.array(ts[rows - offset]).cast(pa.timestamp("us"))
        # the files are in arrival order
        order = np.argsort(arrival[rows - offset], kind="stable")
        tables[name] = pa.table({c: cols[c] for c in SCHEMAS[name]}).take(pa.array(order))
    return tables


def csv_bytes(table: pa.Table) -> bytes:
    """The table as the CSV lines a source sends: no header, columns in ``SCHEMAS`` order."""
    sink = pa.BufferOutputStream()
    pcsv.write_csv(table, sink, pcsv.WriteOptions(include_header=False, quoting_style="none"))
    return sink.getvalue().to_pybytes()


def write(tables: dict, out_dir: str) -> dict[str, bytes]:
    """Write each table as Parquet and CSV; returns the CSV contents by stream."""
    os.makedirs(out_dir, exist_ok=True)
    out = {}
    for name, table in tables.items():
        pq.write_table(table, os.path.join(out_dir, f"{name}.parquet"))
        out[name] = csv_bytes(table)
        with open(os.path.join(out_dir, f"{name}.csv"), "wb") as f:
            f.write(out[name])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--rate", type=float, default=1_000_000,
                    help="events per second of event time (default 1,000,000)")
    ap.add_argument("--delayed", action="store_true", help="10 %% of events up to 3 s late")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    tables = generate(args.events, args.rate, args.delayed, args.seed)
    write(tables, args.out_dir)
    print(", ".join(f"{k}: {t.num_rows}" for k, t in tables.items()))


if __name__ == "__main__":
    main()
