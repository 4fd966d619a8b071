"""The soccer join run three ways over the same arrivals, with what seed 003 measures: QJoin
(the executor's quality-driven join at a recall target), MP-K-slack and K-slack (the
clearinghouse's slack policies ordering each stream before the executor's ordinary join).

Arrivals are replayed in ticks of arrival time (20 ms): each tick's tuples of each stream
enter together. Time here is the arrival clock of the data (a logical clock): a result's
latency is the end of the tick that produced it minus the arrival of the later of its two
tuples, so it does not depend on this machine's speed; the wall latency adds the time the
tick took to process (what a replay at the data's own pace would see while the engine keeps
up). Memory is tuples buffered: the join's state plus the tuples the slack holds.
"""
from __future__ import annotations

import dataclasses
import time

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot

import dialect  # noqa: F401 - registers the cql dialect
from dialect.planner import MemoryCatalog, Relation, plan
from executor.graph import RunningQuery
from executor.graph.running_graph import below
from executor.operators.qjoin import QJoin
from executor.plan import ARRIVAL
from gateway.clearinghouse import slack

TICK_US = 20_000
COLUMNS = (("sid", "INT"), ("x", "BIGINT"), ("y", "BIGINT"), ("arrival", "TIMESTAMP"),
           ("ts", "TIMESTAMP"))
CATALOG = MemoryCatalog().add(Relation("ball", "stream", COLUMNS, "ts")) \
    .add(Relation("players", "stream", COLUMNS, "ts"))
JOIN = ("SELECT r.sid AS r_sid, s.sid AS s_sid, r.ts AS r_ts, s.ts AS s_ts, "
        "r.arrival AS r_arrival, s.arrival AS s_arrival "
        "FROM ball [RANGE '{w} seconds'] r, players [RANGE '{w} seconds'] s "
        "WHERE (r.x - s.x) * (r.x - s.x) + (r.y - s.y) * (r.y - s.y) "
        "<= 25000000")
IDEAL = ("SELECT r.ts AS r_ts, s.sid AS s_sid, s.ts AS s_ts FROM ball r JOIN players s "
         "ON r.ts < s.ts + INTERVAL '{w} seconds' AND s.ts < r.ts + INTERVAL '{w} seconds' "
         "AND (r.x - s.x) * (r.x - s.x) + (r.y - s.y) * (r.y - s.y) "
         "<= 25000000")


@dataclasses.dataclass
class Outcome:
    """One run: every result (r_ts, s_sid, s_ts as µs), its logical and wall latency (µs),
    and the tuples buffered after each tick."""
    name: str
    keys: np.ndarray              # (n, 3) int64
    latency: np.ndarray           # µs, logical
    wall: np.ndarray              # µs
    buffered: np.ndarray
    seconds: float                # wall time of the whole run
    stats: dict = dataclasses.field(default_factory=dict)


def ideal(ball: pa.Table, players: pa.Table, window_s: float = 2) -> np.ndarray:
    """The join of the in-order input, by DuckDB: (r_ts, s_sid, s_ts) µs."""
    con = duckdb.connect()
    con.register("ball", ball)
    con.register("players", players)
    t = con.execute("SELECT epoch_us(r_ts), s_sid, epoch_us(s_ts) FROM ("
                    + IDEAL.format(w=window_s) + ")").fetchnumpy()
    return np.stack([t[k].astype(np.int64) for k in t], axis=1) if len(t) else \
        np.zeros((0, 3), np.int64)


def _ticks(ball: pa.Table, players: pa.Table, tick_us: int):
    """(tick end, ball batch, players batch) in arrival order, one tick of arrival time."""
    arr = [t.column("arrival").cast(pa.int64()).to_numpy() for t in (ball, players)]
    start = min(a[0] for a in arr if len(a)) // tick_us * tick_us
    end = max(a[-1] for a in arr if len(a)) + tick_us
    cuts = np.arange(start, end + tick_us, tick_us)
    idx = [np.searchsorted(a, cuts, side="left") for a in arr]
    for k in range(len(cuts) - 1):
        parts = [t.slice(i[k], i[k + 1] - i[k]) for t, i in zip((ball, players), idx)]
        yield int(cuts[k + 1]), parts[0], parts[1]


def _collect(out: list, tick: int, spent_us: float, keys: list, lat: list, wall: list):
    for b in out:
        if not isinstance(b, pa.RecordBatch) or not b.num_rows:
            continue
        r_ts = b.column("r_ts").cast(pa.int64()).to_numpy()
        s_ts = b.column("s_ts").cast(pa.int64()).to_numpy()
        later = np.maximum(b.column("r_arrival").cast(pa.int64()).to_numpy(),
                           b.column("s_arrival").cast(pa.int64()).to_numpy())
        keys.append(np.stack([r_ts, b.column("s_sid").to_numpy().astype(np.int64), s_ts],
                             axis=1))
        lat.append(tick - later)
        wall.append(tick - later + spent_us)


def _outcome(name, keys, lat, wall, buffered, seconds, stats=None) -> Outcome:
    cat = (lambda xs, shape: np.concatenate(xs) if xs else np.zeros(shape, np.int64))
    return Outcome(name, cat(keys, (0, 3)), cat(lat, (0,)), np.concatenate(wall) if wall
                   else np.zeros(0), np.array(buffered), seconds, stats or {})


def run_qjoin(ball: pa.Table, players: pa.Table, recall: float, *, period: str = "1 minute",
              adapt: str = "1 second", window_s: float = 2, tick_us: int = TICK_US,
              in_order: bool = False) -> Outcome:
    """QJoin: each tick's tuples pushed as they arrived (``in_order``: as a derived stream
    runs it, its results held to valid_from order)."""
    sql = JOIN.format(w=window_s) + (f" WITH (recall = {recall}, period = '{period}', "
                                     f"adapt = '{adapt}')")
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG, joins_in_order=in_order))
    op = next(v.op for v in below(q.graph.queries[0].sink) if isinstance(v.op, QJoin))
    keys, lat, wall, buffered = [], [], [], []
    began, tick = time.perf_counter(), 0
    for tick, b, p in _ticks(ball, players, tick_us):
        t0 = time.perf_counter()
        out = []
        for name, part in (("ball", b), ("players", p)):
            for batch in part.to_batches():
                out += q.push(name + ARRIVAL, batch)        # as they came, before any slack
        _collect(out, tick, (time.perf_counter() - t0) * 1e6, keys, lat, wall)
        buffered.append(q.state_size())
    _collect(q.end(), tick, 0.0, keys, lat, wall)
    seconds = time.perf_counter() - began
    stats = op.quality()
    q.close()
    return _outcome(f"QJoin {recall:g}" + (" in order" if in_order else ""), keys, lat, wall,
                    buffered, seconds, stats)


def run_slack(ball: pa.Table, players: pa.Table, policy: str, *, window_s: float = 2,
              name: str | None = None, tick_us: int = TICK_US) -> Outcome:
    """The streams ordered by a slack policy (``adaptive`` = MP-K-slack, or a K such as
    '250 milliseconds'), then the ordinary join, fed the released tuples and watermarks."""
    q = RunningQuery(plan(sqlglot.parse_one(JOIN.format(w=window_s), read="cql"), CATALOG))
    progress = {}
    for stream in ("ball", "players"):
        p = progress[stream] = slack.StreamProgress(ts_column="ts")
        p.configure({"slack": policy})
    keys, lat, wall, buffered = [], [], [], []
    late, tick = 0, 0
    began = time.perf_counter()
    for tick, b, pl in _ticks(ball, players, tick_us):
        t0 = time.perf_counter()
        out = []
        for stream, part in (("ball", b), ("players", pl)):
            p = progress[stream]
            if part.num_rows:
                ts = slack.micros(part.column("ts"))
                kept, kept_ts, gone = slack.judge(p, part, ts, one_by_one=True)
                late += 0 if gone is None else len(gone.ts)
                slack.hold(p, kept, kept_ts, 0.0, 0.0)
            bound = slack.slack_bound(p)
            if bound is None:
                continue
            released = slack.release(p, bound)
            if released is not None:
                for batch in released.to_batches():
                    out += q.push(stream, batch)
            out += q.watermark(stream, bound)
        _collect(out, tick, (time.perf_counter() - t0) * 1e6, keys, lat, wall)
        buffered.append(q.state_size() + sum(
            p.held.num_rows if p.held is not None else 0 for p in progress.values()))
    # the data end: what the slack still holds goes (the last periods are left out of the
    # comparison, since their latency here is cut short)
    out = []
    for stream, p in progress.items():
        rest = slack.release(p, int(slack.micros(p.held.column("ts")).max())) \
            if p.held is not None else None
        for batch in rest.to_batches() if rest is not None else []:
            out += q.push(stream, batch)
    _collect(out + q.end(), tick, 0.0, keys, lat, wall)
    seconds = time.perf_counter() - began
    q.close()
    label = name or ("MP-K-slack" if policy == "adaptive" else f"K-slack {policy}")
    return _outcome(label, keys, lat, wall, buffered, seconds,
                    {"late": late, "K_us": {s: p.slack for s, p in progress.items()}})


def k_for_recall(ball: pa.Table, players: pa.Table, pairs: np.ndarray, recall: float) -> int:
    """The least K (µs) whose K-slack keeps ``recall`` of the ideal pairs: a tuple is lost
    when it is more than K behind the newest tuple of its stream before it."""
    need = np.zeros(len(pairs), np.int64)
    # pairs' columns: the ball tuple's ts, then the player's sid and ts
    for t, sid_of, ts_of in ((ball, None, pairs[:, 0]), (players, pairs[:, 1], pairs[:, 2])):
        ts = slack.micros(t.column("ts"))
        prev = np.concatenate([ts[:1], np.maximum.accumulate(ts)[:-1]])
        behind = np.maximum(prev - ts, 0)
        sid = t.column("sid").to_numpy().astype(np.int64)
        for s in np.unique(sid) if sid_of is not None else [None]:
            mine = np.flatnonzero(sid == s) if s is not None else np.arange(len(ts))
            order = mine[np.argsort(ts[mine], kind="stable")]
            rows = np.flatnonzero(sid_of == s) if s is not None else np.arange(len(pairs))
            at = order[np.searchsorted(ts[order], ts_of[rows])]     # the pair's tuple
            need[rows] = np.maximum(need[rows], behind[at])
    return int(np.quantile(need, recall, method="higher")) if len(need) else 0


def recall_by_period(result: np.ndarray, pairs: np.ndarray, period_us: int,
                     until_us: int | None = None) -> tuple:
    """(period starts, recall of each period, precision overall): results and ideal pairs
    bucketed by valid_from (the later of the two tuples' times), periods that end by
    ``until_us`` only."""
    def bucket(keys):
        return np.maximum(keys[:, 0], keys[:, 2]) // period_us

    ideal_b, got_b = bucket(pairs), bucket(result)
    found = isin(result, pairs)
    periods = np.unique(ideal_b)
    if until_us is not None:
        periods = periods[(periods + 1) * period_us <= until_us]
    want = np.array([(ideal_b == p).sum() for p in periods])
    have = np.array([((got_b == p) & found).sum() for p in periods])
    precision = found.mean() if len(found) else 1.0
    return periods * period_us, have / np.maximum(want, 1), float(precision)


def isin(keys: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Whether each row of ``keys`` is a row of ``pairs`` (int64 rows of equal width): as one
    integer a row when the columns' ranges fit in 63 bits, else as structured records."""
    both = np.concatenate([keys, pairs]) if len(keys) and len(pairs) else None
    if both is not None:
        low = both.min(axis=0)
        bits = [int(r).bit_length() for r in both.max(axis=0) - low]
        if sum(bits) <= 63:
            shifts = np.cumsum([0] + bits[:-1]).astype(np.int64)
            return np.isin(((keys - low) << shifts).sum(axis=1),
                           ((pairs - low) << shifts).sum(axis=1))
    return np.isin(_records(keys), _records(pairs))


def _records(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view([("", a.dtype)] * a.shape[1]).ravel()


def summary(o: Outcome, pairs: np.ndarray, period_us: int, until_us: int,
            warm_periods: int = 1) -> dict:
    """What the tables show of one run, over the periods that end by ``until_us`` (the
    first ``warm_periods`` left out of the recall's spread)."""
    starts, recall, precision = recall_by_period(o.keys, pairs, period_us, until_us)
    upto = np.maximum(o.keys[:, 0], o.keys[:, 2]) < until_us if len(o.keys) else \
        np.zeros(0, bool)
    lat, wall = o.latency[upto], o.wall[upto]
    after = recall[warm_periods:] if len(recall) > warm_periods else recall
    return {"engine": o.name, "recall": float(recall.mean()) if len(recall) else 1.0,
            "recall_min": float(after.min()) if len(after) else 1.0,
            "precision": precision,
            "latency_ms": float(lat.mean() / 1000) if len(lat) else 0.0,
            "latency_p99_ms": float(np.percentile(lat, 99) / 1000) if len(lat) else 0.0,
            "wall_ms": float(wall.mean() / 1000) if len(wall) else 0.0,
            "buffered": float(o.buffered.mean()) if len(o.buffered) else 0.0,
            "seconds": o.seconds, "periods": recall}
