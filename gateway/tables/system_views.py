"""``cq_queries``, ``cq_joins``, ``cq_streams`` and the clearinghouse's logs (``cq_ingest_errors``,
``cq_late_tuples``, ``cq_shed``): what runs and what came in, as tables of the emulated catalog
that plain SQL reads. A statement that names one of them gets them as they are when it starts
(registered on its session's connection: ``gateway/tables/catalog_live.py``)."""
from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa

from gateway.tables.activity import HIDDEN

_NAMES = re.compile(r"\bcq_(queries|joins|streams|ingest_errors|late_tuples|shed)\b", re.I)


def wanted(sql: str) -> bool:
    return _NAMES.search(sql) is not None


def _when(seconds: float | None):
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def _micros(us: int | None):
    return None if us is None else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)


def _follows(p) -> str:
    """What moves a stream's watermark when it is quiet: the wall clock, or only its data."""
    return "wall clock" if p.wall_clock and p.follows_wall else "data"


async def gather(services, viewer: str, stats: dict | None = None) -> dict:
    """The views' new contents, from the back end's counters (``stats``, if just read) and the
    clearinghouse's logs; a cursor's query text only for roles with its session's role's
    privileges or pg_read_all_stats's (``pg_stat_activity``'s rule)."""
    link = services.backend
    stats = stats or await link.stats()
    counters = {q["qid"]: q for q in stats["queries"]}
    rows, listed = [], []                  # listed: each row's back end counters
    spark = services.spark_streams
    for engine, live, c in [("backend", live, counters.get(live.qid, {}))
                            for live in link.running()] + \
            [("spark", live, spark.counters(live.qid)) for live in spark.running()]:
        listed.append(c)
        state = "failed" if live.failure else "waiting" if live.n_pending == 0 else "ready"
        session = services.sessions.get(live.owner)
        sql = live.sql if session is None or \
            services.roles.sees_activity_of(viewer, session.user) else HIDDEN
        rows.append((live.owner, live.name, "cursor", sql, state, _when(live.started),
                     c.get("rows_in", 0), c.get("rows_out", 0), c.get("state", 0),
                     _when(c.get("last_emit")), live.failure, live.n_pending,
                     live.memory_bytes, live.spilled_bytes, engine))
    kinds = {o.relation().name.lower(): o.kind for o in services.streams.objects.values()}
    for qid, (plan, feeds) in list(link.persistent.items()):
        c = counters.get(qid, {})
        listed.append(c)
        rows.append((None, feeds, kinds.get(feeds.lower(), "window"), plan.sql, "running",
                     _when(c.get("started")), c.get("rows_in", 0), c.get("rows_out", 0),
                     c.get("state", 0), _when(c.get("last_emit")), None, 0, 0, 0, "backend"))
    for name, sql, c, failure in spark.derived():
        listed.append(c)
        rows.append((None, name, "derived", sql, "failed" if failure else "running", None, 0,
                     c["rows_out"], 0, None, failure, 0, 0, 0, "spark"))
    joins = _joins(rows, listed)
    names = ["pid", "name", "kind", "query", "state", "started", "rows_in", "rows_out",
             "state_size", "last_emit", "error", "unread_rows", "memory_bytes", "spill_bytes",
             "engine"]
    types = [pa.int32(), pa.string(), pa.string(), pa.string(), pa.string(),
             pa.timestamp("us", tz="UTC"), pa.int64(), pa.int64(), pa.int64(),
             pa.timestamp("us", tz="UTC"), pa.string(), pa.int64(), pa.int64(), pa.int64(),
             pa.string()]
    queries = pa.table({n: pa.array([r[i] for r in rows], t)
                        for i, (n, t) in enumerate(zip(names, types))})
    s = stats["streams"]
    progress = [services.ingest.progress(x["stream"]) for x in s]
    streams = pa.table({
        "stream": pa.array([x["stream"] for x in s], pa.string()),
        "tuples": pa.array([x["tuples"] for x in s], pa.int64()),
        "rate": pa.array([x["rate"] for x in s], pa.float64()),
        "watermark": pa.array([_micros(x["watermark"]) for x in s], pa.timestamp("us")),
        "late": pa.array([p.late for p in progress], pa.int64()),
        "errors": pa.array([p.bad for p in progress], pa.int64()),
        "dropped": pa.array([p.dropped for p in progress], pa.int64()),
        "slack": pa.array([p.slack for p in progress], pa.duration("us")),
        "heartbeat": pa.array([p.heartbeat for p in progress], pa.duration("us")),
        "watermark_follows": pa.array([_follows(p) for p in progress], pa.string()),
    })
    return {"cq_queries": queries, "cq_joins": joins, "cq_streams": streams,
            **services.ingest.log.tables()}


_JOIN_COLUMNS = [
    ("recall_target", pa.float64()), ("recall_estimate", pa.float64()),
    ("delay_left_us", pa.duration("us")), ("delay_right_us", pa.duration("us")),
    ("buffered_left", pa.int64()), ("buffered_right", pa.int64()), ("results", pa.int64()),
    ("late_left", pa.int64()), ("late_right", pa.int64()), ("adaptations", pa.int64()),
    ("held", pa.int64())]


def _joins(rows: list, counters: list) -> pa.Table:
    """One row per quality-driven join of each query listed in cq_queries (``rows``, with
    their back end counters in the same order)."""
    out = [(row[0], row[1], row[3], join) for row, c in zip(rows, counters)
           for join in c.get("joins", [])]
    cols = {"pid": pa.array([r[0] for r in out], pa.int32()),
            "name": pa.array([r[1] for r in out], pa.string()),
            "query": pa.array([r[2] for r in out], pa.string())}
    for key, typ in _JOIN_COLUMNS:
        cols[key.removesuffix("_us")] = pa.array([r[3].get(key) for r in out], typ)
    return pa.table(cols)
