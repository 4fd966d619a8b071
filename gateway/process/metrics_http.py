"""``cqgate serve --http-port N``: ``/metrics`` in Prometheus' text format (version 0.0.4) and a
live console (``/``, reading ``/api/state``), from the same counters as the system views
(cq_streams, cq_queries) and from /proc for the gateway's and the back end's processes. Off by
default and on loopback by default; the console, and the metrics from another host, need the
token printed on the ready line (``Authorization: Bearer …``, or ``?token=…``)."""
from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import json
import logging
import os
import time

from gateway.tables import system_views

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


async def snapshot(services) -> dict:
    """What the metrics and the console show, read at once: streams, queries (with their
    SQL), sessions, and the two processes' memory and CPU."""
    views = await system_views.gather(services, services.roles.bootstrap)
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
    processes = []
    for process, pid in (("gateway", os.getpid()), ("backend", services.backend.pid())):
        got = _proc(pid) if pid else None
        if got is not None:
            processes.append({"process": process, "resident_bytes": got[0],
                              "cpu_seconds": got[1]})
    return {"streams": streams, "queries": queries, "sessions": len(services.sessions),
            "processes": processes}


async def render(services) -> str:
    """Every metric, as Prometheus' text format."""
    state = await snapshot(services)
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
    f["cqgate_sessions"].add(state["sessions"])
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
    ("cqgate_sessions", "gauge", "Client sessions"),
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
CONSOLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "console", "index.html")


class MetricsServer:
    """The HTTP listener: GET /metrics; anything else 404 (405 for other methods)."""

    def __init__(self, services, token: str):
        self.services, self.token = services, token
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
            status, body, kind = await self._answer(head, writer.get_extra_info("peername"))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError, UnicodeDecodeError, ValueError):
            status, body, kind = "400 Bad Request", "bad request\n", "text/plain"
        try:
            data = body.encode()
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                         .encode() + data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes, peer) -> tuple[str, str, str]:
        if len(head) > REQUEST_LIMIT:
            raise ValueError("request too long")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}
        path, _, query = target.partition("?")
        given = headers.get("authorization", "").removeprefix("Bearer ")
        given = given or dict(p.partition("=")[::2] for p in query.split("&")).get("token", "")
        # the console shows every session's SQL: it always needs the token (pg_stat_activity
        # hides other roles' SQL); the metrics name no SQL, and loopback may read them freely
        free = path == "/metrics" and peer and peer[0] in _LOOPBACK
        if not free and not hmac.compare_digest(given, self.token):
            return "401 Unauthorized", "the token printed at start is needed\n", "text/plain"
        if method != "GET":
            return "405 Method Not Allowed", "GET only\n", "text/plain"
        route = self.ROUTES.get(path)
        if route is None:
            return "404 Not Found", "see /metrics or /\n", "text/plain"
        return await route(self)

    async def _metrics(self):
        return "200 OK", await render(self.services), "text/plain; version=0.0.4; charset=utf-8"

    async def _console(self):
        with open(CONSOLE, encoding="utf-8") as f:
            return "200 OK", f.read(), "text/html; charset=utf-8"

    async def _state(self):
        return "200 OK", json.dumps(await snapshot(self.services), default=str), \
            "application/json"

    ROUTES = {"/metrics": _metrics, "/": _console, "/api/state": _state}
