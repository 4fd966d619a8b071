"""``cqgate serve --http-port N``: ``/metrics`` in Prometheus' text format (version 0.0.4), read
from the same counters as the system views (cq_streams, cq_queries) and from /proc for the
gateway's and the back end's processes. Off by default and on loopback by default; a request
from another host must carry the bearer token printed on the ready line."""
from __future__ import annotations

import asyncio
import datetime as dt
import hmac
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


async def render(services) -> str:
    """Every metric, as Prometheus' text format."""
    views = await system_views.gather(services, services.roles.bootstrap)
    streams, queries = views["cq_streams"].to_pylist(), views["cq_queries"].to_pylist()
    now = time.time()
    f = {name: Family(name, kind, help_) for name, kind, help_ in [
        ("cqgate_stream_tuples_total", "counter", "Tuples a stream took in"),
        ("cqgate_stream_rate_tuples_per_second", "gauge", "Tuples a second, lately"),
        ("cqgate_stream_watermark_lag_seconds", "gauge",
         "Wall clock minus the stream's watermark"),
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
    ]}
    for s in streams:
        name = s["stream"]
        f["cqgate_stream_tuples_total"].add(s["tuples"], stream=name)
        f["cqgate_stream_rate_tuples_per_second"].add(s["rate"], stream=name)
        if s["watermark"] is not None:          # event time, in UTC
            lag = now - s["watermark"].replace(tzinfo=dt.timezone.utc).timestamp()
            f["cqgate_stream_watermark_lag_seconds"].add(lag, stream=name)
        f["cqgate_stream_late_tuples_total"].add(s["late"], stream=name)
        f["cqgate_stream_bad_lines_total"].add(s["errors"], stream=name)
        f["cqgate_stream_shed_tuples_total"].add(s["dropped"], stream=name)
        f["cqgate_stream_slack_seconds"].add(_seconds(s["slack"]), stream=name)
    for q in queries:
        labels = {"query": q["name"] or "", "pid": q["pid"] if q["pid"] is not None else "",
                  "kind": q["kind"], "engine": q["engine"]}
        f["cqgate_query_rows_in_total"].add(q["rows_in"], **labels)
        f["cqgate_query_rows_out_total"].add(q["rows_out"], **labels)
        f["cqgate_query_state_rows"].add(q["state_size"], **labels)
        f["cqgate_query_unread_rows"].add(q["unread_rows"], **labels)
        f["cqgate_query_result_queue_bytes"].add(q["memory_bytes"], **labels)
        f["cqgate_query_result_spill_bytes"].add(q["spill_bytes"], **labels)
        if q["last_emit"] is not None:
            f["cqgate_query_last_emit_timestamp_seconds"].add(q["last_emit"].timestamp(),
                                                              **labels)
        f["cqgate_query_failed"].add(1 if q["error"] else 0, **labels)
    f["cqgate_sessions"].add(len(services.sessions))
    for process, pid in (("gateway", os.getpid()), ("backend", services.backend.pid())):
        got = _proc(pid) if pid else None
        if got is not None:
            f["cqgate_process_resident_memory_bytes"].add(got[0], process=process)
            f["cqgate_process_cpu_seconds_total"].add(got[1], process=process)
    return "".join(family.text() for family in f.values())


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
        if peer and peer[0] not in _LOOPBACK and not hmac.compare_digest(
                headers.get("authorization", ""), f"Bearer {self.token}"):
            return "401 Unauthorized", "a bearer token is needed from another host\n", \
                "text/plain"
        if method != "GET":
            return "405 Method Not Allowed", "GET only\n", "text/plain"
        if target.split("?", 1)[0] != "/metrics":
            return "404 Not Found", "see /metrics\n", "text/plain"
        return "200 OK", await render(self.services), "text/plain; version=0.0.4; charset=utf-8"
