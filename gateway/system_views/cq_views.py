"""``cq_queries``, ``cq_joins``, ``cq_streams``, ``cq_sources``, ``cq_sinks`` and the
clearinghouse's logs (``cq_ingest_errors``, ``cq_late_tuples``, ``cq_shed``): what runs and what
came in, as tables of the emulated catalog that plain SQL reads. A statement that names one of them gets them as they are when it starts
(registered on its session's connection: ``gateway/system_views/catalog_live.py``)."""
from __future__ import annotations

import datetime as dt

from gateway.system_views.activity import HIDDEN

NAMES = frozenset({"cq_queries", "cq_joins", "cq_streams", "cq_ingest_errors",
                   "cq_late_tuples", "cq_shed", "cq_sources", "cq_sinks"})


def wanted(reads: frozenset) -> bool:
    """Whether a statement reads one of these views (``reads``: the catalog relations its
    translation reads); only then are they gathered."""
    return not NAMES.isdisjoint(reads)


def _when(seconds: float | None):
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def _micros(us: int | None):
    return None if us is None else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)


def _follows(p) -> str:
    """What moves a stream's watermark when it is quiet: the wall clock, or only its data."""
    return "wall clock" if p.wall_clock and p.follows_wall else "data"


def _progress(live, c: dict) -> tuple:
    """(the latest watermark its rows passed, how many times it was started again after its
    back end died) of a cursor's query (``c``: its counters; on Spark, what its last
    micro-batch reached)."""
    r = getattr(live, "resumption", None)
    return (_micros(c.get("reached")), 0) if r is None else (_micros(r.reached), r.recoveries)


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
                     live.memory_bytes, live.spilled_bytes, engine, *_progress(live, c),
                     _micros(c.get("checkpoint"))))
    kinds = {o.relation().name.lower(): o.kind for o in services.streams.objects.values()}
    for qid, (plan, feeds) in list(link.persistent.items()):
        c = counters.get(qid, {})
        listed.append(c)
        rows.append((None, feeds, kinds.get(feeds.lower(), "window"), plan.sql, "running",
                     _when(c.get("started")), c.get("rows_in", 0), c.get("rows_out", 0),
                     c.get("state", 0), _when(c.get("last_emit")), None, 0, 0, 0, "backend", None,
                     0, None))
    for name, sql, c, failure in spark.derived():
        listed.append(c)
        rows.append((None, name, kinds.get(name.lower(), "derived"), sql,
                     "failed" if failure else "running", None, 0, c["rows_out"], 0, None,
                     failure, 0, 0, 0, "spark", _micros(c.get("reached")), 0, None))
    store = services.store
    joins = store.live_table("cq_joins", _join_rows(rows, listed))
    queries = store.live_table("cq_queries", rows)
    s = stats["streams"]
    progress = [services.ingest.progress(x["stream"]) for x in s]
    streams = store.live_table("cq_streams", [
        (x["stream"], x["tuples"], x["rate"], _micros(x["watermark"]), p.late, p.bad,
         p.dropped, p.slack, p.heartbeat, _follows(p)) for x, p in zip(s, progress)])
    return {"cq_queries": queries, "cq_joins": joins, "cq_streams": streams,
            "cq_sources": store.live_table("cq_sources", services.connectors.rows()),
            "cq_sinks": store.live_table("cq_sinks", services.connectors.sink_rows()),
            **{name: store.live_table(name, rows)
               for name, rows in services.ingest.log.rows().items()}}


# the back end's counters of a join, in cq_joins' columns after pid, name and query
_JOIN_COUNTERS = ("recall_target", "recall_estimate", "delay_left_us", "delay_right_us",
                  "buffered_left", "buffered_right", "results", "late_left", "late_right",
                  "adaptations", "held")


def _join_rows(rows: list, counters: list) -> list:
    """One row per quality-driven join of each query listed in cq_queries (``rows``, with
    their back end counters in the same order)."""
    return [(row[0], row[1], row[3], *(join.get(k) for k in _JOIN_COUNTERS))
            for row, c in zip(rows, counters) for join in c.get("joins", [])]
