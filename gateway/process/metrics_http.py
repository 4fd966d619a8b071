"""``cqgate serve --http-port N``: ``/metrics`` in Prometheus' text format (version 0.0.4) and a
live console (``/``, reading ``/api/state``, with every query's EXPLAIN ANALYZE), from the same
counters as the system views (cq_streams, cq_queries), the back end's own, the archive's folders,
Spark's status tracker and /proc for the gateway's and the back end's processes. Off by default
and on loopback by default; the console, and the metrics from another host, need the token
printed on the ready line (``Authorization: Bearer …``, or ``?token=…``) or a login of a role
with pg_read_all_stats's privileges (HTTP Basic, checked against the role's SCRAM verifier)."""
from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import hmac
import json
import logging
import os
import secrets
import time

from gateway.pgwire.scram import check_password, make_verifier
from gateway.security.roles import READ_ALL_STATS
from gateway.streams.explain_analyze import every_plan
from gateway.system_views import cq_views

log = logging.getLogger("cqgate")

REQUEST_LIMIT = 16 * 1024        # a request's head; a longer one is refused
REQUEST_TIMEOUT_S = 10
_LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _label(value) -> str:
    """A label value as the text format escapes it."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Family:
    """One metric family's HELP, TYPE and samples."""

    def __init__(self, name: str, kind: str, help_: str):
        self.name, self.kind, self.help = name, kind, help_
        self.samples: list = []

    def add(self, value, **labels) -> None:
        if value is not None:
            self.samples.append((labels, float(value)))

    def text(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{self.name}{{{inner}}} {value!r}" if inner
                         else f"{self.name} {value!r}")
        return "\n".join(lines) + "\n"


def _proc(pid: int) -> tuple[float, float] | None:
    """(resident bytes, CPU seconds) of a process, from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS      # utime + stime
    return int(fields[21]) * _PAGE, cpu                     # rss pages


def _seconds(value) -> float | None:
    return None if value is None else value.total_seconds()


async def snapshot(services, connections: int = 0, plans: bool = False) -> dict:
    """What the metrics and the console show, read at once: streams, queries (with their
    SQL; ``plans``: and their EXPLAIN ANALYZE), sessions and ``connections``, the back end's
    work, the archive, Spark's jobs, and the two processes' memory and CPU."""
    stats = await services.backend.stats()
    views = await cq_views.gather(services, services.roles.bootstrap, stats)
    backend = stats["backend"]
    archive = await asyncio.to_thread(services.archive.usage)
    spark_jobs = await asyncio.to_thread(services.spark.active_jobs)
    now = time.time()
    streams = []
    for s in views["cq_streams"].to_pylist():
        wm = s["watermark"]                    # event time, in UTC
        streams.append({**s, "watermark": None if wm is None else wm.isoformat(sep=" "),
                        "lag_seconds": None if wm is None else
                        now - wm.replace(tzinfo=dt.timezone.utc).timestamp(),
                        "slack_seconds": _seconds(s["slack"]),
                        "heartbeat": _seconds(s["heartbeat"])})
    queries = [{**q, "started": None if q["started"] is None else q["started"].timestamp(),
                "last_emit": None if q["last_emit"] is None else q["last_emit"].timestamp()}
               for q in views["cq_queries"].to_pylist()]
    if plans:
        trees = await every_plan(services, stats)
        for q in queries:
            q["plan"] = trees.get((q["pid"], q["name"]))
    processes = []
    for process, pid in {"gateway": os.getpid(), **services.backend.pids()}.items():
        got = _proc(pid)
        if got is not None:
            processes.append({"process": process, "resident_bytes": got[0],
                              "cpu_seconds": got[1]})
    spark = services.spark_streams
    sources = [{**x, "since": x["since"].timestamp()} for x in views["cq_sources"].to_pylist()]
    sinks = [{**x, "since": x["since"].timestamp(), "watermark": None if x["watermark"] is None
              else x["watermark"].isoformat(sep=" ")} for x in views["cq_sinks"].to_pylist()]
    return {"streams": streams, "queries": queries, "sources": sources, "sinks": sinks,
            "sessions": len(services.sessions),
            "connections": connections, "processes": processes, "backend": backend,
            "archive": [{"stream": k, "fragments": n, "bytes": b} for k, n, b in archive],
            "spark": {"active_jobs": spark_jobs,
                      "streaming_queries": len(spark.running()) + len(spark.derived())}}


async def render(services, connections: int = 0) -> str:
    """Every metric, as Prometheus' text format."""
    state = await snapshot(services, connections)
    f = {name: Family(name, kind, help_) for name, kind, help_ in _FAMILIES}
    for s in state["streams"]:
        name = s["stream"]
        for metric, key in _STREAM_SAMPLES:
            f[metric].add(s[key], stream=name)
    for q in state["queries"]:
        labels = {"query": q["name"] or "", "pid": q["pid"] if q["pid"] is not None else "",
                  "kind": q["kind"], "engine": q["engine"]}
        for metric, key in _QUERY_SAMPLES:
            f[metric].add(q[key], **labels)
        f["cqgate_query_failed"].add(1 if q["error"] else 0, **labels)
    for x in state["sources"]:
        labels = {"stream": x["stream"], "source": x["source"]}
        for metric, key in _SOURCE_SAMPLES:
            f[metric].add(x[key], **labels)
    for x in state["sinks"]:
        f["cqgate_sink_rows_total"].add(x["rows"], sink=x["sink"])
        f["cqgate_sink_errors_total"].add(x["errors"], sink=x["sink"])
    f["cqgate_sessions"].add(state["sessions"])
    f["cqgate_connections"].add(state["connections"])
    for metric, key in _BACKEND_SAMPLES:
        f[metric].add(state["backend"].get(key))
    for a in state["archive"]:
        f["cqgate_archive_fragments"].add(a["fragments"], stream=a["stream"])
        f["cqgate_archive_bytes"].add(a["bytes"], stream=a["stream"])
    f["cqgate_spark_active_jobs"].add(state["spark"]["active_jobs"])
    f["cqgate_spark_streaming_queries"].add(state["spark"]["streaming_queries"])
    for p in state["processes"]:
        f["cqgate_process_resident_memory_bytes"].add(p["resident_bytes"], process=p["process"])
        f["cqgate_process_cpu_seconds_total"].add(p["cpu_seconds"], process=p["process"])
    return "".join(family.text() for family in f.values())


_FAMILIES = [
    ("cqgate_stream_tuples_total", "counter", "Tuples a stream took in"),
    ("cqgate_stream_rate_tuples_per_second", "gauge", "Tuples a second, lately"),
    ("cqgate_stream_watermark_lag_seconds", "gauge", "Wall clock minus the stream's watermark"),
    ("cqgate_stream_late_tuples_total", "counter",
     "Tuples that came after the watermark passed them (archived, not answered)"),
    ("cqgate_stream_bad_lines_total", "counter", "Lines a source sent that did not parse"),
    ("cqgate_stream_shed_tuples_total", "counter", "Tuples shed under load"),
    ("cqgate_stream_slack_seconds", "gauge", "The slack in effect"),
    ("cqgate_query_rows_in_total", "counter", "Rows a continuous query took in"),
    ("cqgate_query_rows_out_total", "counter", "Rows a continuous query produced"),
    ("cqgate_query_state_rows", "gauge", "Rows a continuous query holds as state"),
    ("cqgate_query_unread_rows", "gauge", "Rows waiting for the client"),
    ("cqgate_query_result_queue_bytes", "gauge", "Unread rows held in memory"),
    ("cqgate_query_result_spill_bytes", "gauge", "Unread rows spilled to disk"),
    ("cqgate_query_last_emit_timestamp_seconds", "gauge", "When a row last came out"),
    ("cqgate_query_failed", "gauge", "1 when the query ended with an error"),
    ("cqgate_source_rows_total", "counter", "Changes a stream took from a PostgreSQL table"),
    ("cqgate_source_lag_bytes", "gauge", "WAL the server sent beyond what cqgate confirmed"),
    ("cqgate_source_lag_seconds", "gauge", "How far behind the server a source is"),
    ("cqgate_source_errors_total", "counter", "Errors a source met (it retries)"),
    ("cqgate_sink_rows_total", "counter", "Rows a sink wrote (upserts and deletes counted)"),
    ("cqgate_sink_errors_total", "counter", "Errors a sink met (it starts again)"),
    ("cqgate_sessions", "gauge", "Client sessions"),
    ("cqgate_connections", "gauge", "Client connections, sessions and ones still starting"),
    ("cqgate_backend_batches_total", "counter",
     "Batches of stream tuples the back end took (queued ones joined)"),
    ("cqgate_backend_batch_rows_total", "counter", "Tuples in those batches"),
    ("cqgate_backend_busy_seconds_total", "counter",
     "Time the back end spent working, not waiting for input"),
    ("cqgate_archive_fragments", "gauge", "Time fragments of an archived stream"),
    ("cqgate_archive_bytes", "gauge", "Parquet bytes of an archived stream"),
    ("cqgate_spark_active_jobs", "gauge", "Spark jobs running (once Spark has started)"),
    ("cqgate_spark_streaming_queries", "gauge", "Continuous queries running on Spark"),
    ("cqgate_process_resident_memory_bytes", "gauge", "Resident memory of a process"),
    ("cqgate_process_cpu_seconds_total", "counter", "CPU time of a process"),
]
# metric <- key of a stream's or a query's row in the snapshot
_STREAM_SAMPLES = [
    ("cqgate_stream_tuples_total", "tuples"), ("cqgate_stream_rate_tuples_per_second", "rate"),
    ("cqgate_stream_watermark_lag_seconds", "lag_seconds"),
    ("cqgate_stream_late_tuples_total", "late"), ("cqgate_stream_bad_lines_total", "errors"),
    ("cqgate_stream_shed_tuples_total", "dropped"),
    ("cqgate_stream_slack_seconds", "slack_seconds")]
_QUERY_SAMPLES = [
    ("cqgate_query_rows_in_total", "rows_in"), ("cqgate_query_rows_out_total", "rows_out"),
    ("cqgate_query_state_rows", "state_size"), ("cqgate_query_unread_rows", "unread_rows"),
    ("cqgate_query_result_queue_bytes", "memory_bytes"),
    ("cqgate_query_result_spill_bytes", "spill_bytes"),
    ("cqgate_query_last_emit_timestamp_seconds", "last_emit")]
_SOURCE_SAMPLES = [
    ("cqgate_source_rows_total", "rows"), ("cqgate_source_lag_bytes", "lag_bytes"),
    ("cqgate_source_lag_seconds", "lag_seconds"), ("cqgate_source_errors_total", "errors")]
_BACKEND_SAMPLES = [
    ("cqgate_backend_batches_total", "batches"),
    ("cqgate_backend_batch_rows_total", "batch_rows"),
    ("cqgate_backend_busy_seconds_total", "busy_seconds")]
CONSOLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "console", "index.html")


def _parse(head: bytes) -> tuple[str, str, str, dict]:
    """(method, path, query string, headers by lower-case name) of a request's head;
    ValueError for one that is not HTTP or too long."""
    if len(head) > REQUEST_LIMIT:
        raise ValueError("request too long")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    path, _, query = target.partition("?")
    return method, path, query, headers


class MetricsServer:
    """The HTTP listener: GET /metrics; anything else 404 (405 for other methods)."""

    def __init__(self, services, token: str, connections=lambda: 0):
        self.services, self.token = services, token
        self.connections = connections        # () -> client connections open now
        self._decoy = make_verifier(secrets.token_urlsafe(16))   # see _allowed
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._client, host, port)
        return self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            request = _parse(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, UnicodeDecodeError, ValueError):
            status, body, kind = "400 Bad Request", "bad request\n", "text/plain"
        else:
            try:
                status, body, kind = await self._answer(*request,
                                                        writer.get_extra_info("peername"))
            except Exception:  # noqa: BLE001 - a page that cannot be made: 500, never a hang
                log.exception("the metrics listener could not answer")
                status, body, kind = "500 Internal Server Error", "see the server's log\n", \
                    "text/plain"
        try:
            data = body.encode()
            # a browser asks for a role's login when the token is missing
            login = 'WWW-Authenticate: Basic realm="cqgate", charset="UTF-8"\r\n' \
                if status.startswith("401") else ""
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n{login}"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                         .encode() + data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, query: str, headers: dict,
                      peer) -> tuple[str, str, str]:
        # the console shows every session's SQL: it needs the token or a role that may see
        # it (pg_stat_activity's rule); the metrics name no SQL, and loopback reads them freely
        free = path == "/metrics" and peer and peer[0] in _LOOPBACK
        if not free and not await self._allowed(headers.get("authorization", ""), query):
            return "401 Unauthorized", ("the token printed at start, or the login of a role "
                                        "with pg_read_all_stats, is needed\n"), "text/plain"
        if method != "GET":
            return "405 Method Not Allowed", "GET only\n", "text/plain"
        route = self.ROUTES.get(path)
        if route is None:
            return "404 Not Found", "see /metrics or /\n", "text/plain"
        return await route(self)

    async def _allowed(self, authorization: str, query: str) -> bool:
        """The token (a Bearer header or ``?token=``), or HTTP Basic with the password of a
        LOGIN role that has pg_read_all_stats's privileges (a superuser has)."""
        scheme, _, credentials = authorization.partition(" ")
        given = dict(p.partition("=")[::2] for p in query.split("&")).get("token", "")
        if scheme.lower() == "bearer":
            given = credentials or given
        if hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(credentials, validate=True) \
                .decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        roles = self.services.roles
        role = roles.get(user)
        real = role is not None and role.login and role.verifier is not None
        # the verifier's PBKDF2 takes milliseconds: off the server's loop, and run on a decoy
        # for a role that cannot log in, so that the time taken names no role
        matches = await asyncio.to_thread(
            check_password, role.verifier if real else self._decoy, password)
        ok = real and matches and roles.has_privs_of(user, READ_ALL_STATS)
        if not ok:
            log.warning("console login refused for role %r", user)
        return ok

    async def _metrics(self):
        return "200 OK", await render(self.services, self.connections()), \
            "text/plain; version=0.0.4; charset=utf-8"

    async def _console(self):
        with open(CONSOLE, encoding="utf-8") as f:
            return "200 OK", f.read(), "text/html; charset=utf-8"

    async def _state(self):
        state = await snapshot(self.services, self.connections(), plans=True)
        return "200 OK", json.dumps(state, default=str), "application/json"

    ROUTES = {"/metrics": _metrics, "/": _console, "/api/state": _state}
