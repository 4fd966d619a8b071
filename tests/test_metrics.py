"""``--http-port``: /metrics in Prometheus' text format, parsed by prometheus_client's own
parser while a stream runs; the counters move as the data do (tuples in equal the rows pushed,
late tuples the late rows sent, a query's rows out the rows its cursor read), and agree with
cq_streams and cq_queries; the Grafana dashboard in docs/ asks only for metrics that exist.
The live console in headless Chromium. ``--log-format json``: every log line is one JSON
object."""
from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from bench.nexmark.run import _children
from continuous import unique

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _scrape(server) -> dict:
    """{(metric name, frozenset of labels): value}, as Prometheus would read them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics",
                                timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:               # gone meanwhile
        return ""


def _push(server, stream: str, seconds) -> None:
    """One CSV line per event-time second in ``seconds``, through the ingest port."""
    body = "".join(f"{k},2026-11-01 00:{k // 60:02d}:{k % 60:02d}\n" for k in seconds)
    with socket.create_connection(("127.0.0.1", server.ingest_port), timeout=30) as sock:
        sock.sendall(f"csvwrapper,{stream}\n{body}".encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4096) == b""


def test_metrics_move_with_the_data(start_server):
    s = start_server("--http-port", "0", "--log-format", "json")
    stream = unique("metered")
    with psycopg.connect(s.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                  "TYPE ARCHIVED WITH (slack = '2 seconds', fragment = '1 minute')")
        reader = psycopg.connect(s.dsn)
        reader.execute(f"DECLARE follow CURSOR FOR SELECT a FROM {stream}")
        key = frozenset({("stream", stream)})
        before = _scrape(s)
        assert before.get(("cqgate_stream_tuples_total", key), 0) == 0

        _push(s, stream, range(0, 600))                # ten minutes of event time, in order
        _push(s, stream, [10, 20, 30])                 # far behind the watermark: late
        _push(s, stream, [610])       # moves the watermark past 600; itself held by the slack
        got = reader.execute("FETCH ALL FROM follow WITH (timeout = '2s')").fetchall()
        after = _scrape(s)
        views = c.execute("SELECT tuples, late FROM cq_streams WHERE stream = %s",
                          [stream]).fetchone()
        assert after[("cqgate_stream_tuples_total", key)] == 600 == views[0]
        assert after[("cqgate_stream_late_tuples_total", key)] == 3 == views[1]
        assert after[("cqgate_stream_bad_lines_total", key)] == 0
        assert after[("cqgate_stream_slack_seconds", key)] == 2.0
        query = {("query", "follow"), ("kind", "cursor"), ("engine", "backend"),
                 ("pid", str(reader.info.backend_pid))}
        rows_out = after[("cqgate_query_rows_out_total", frozenset(query))]
        assert rows_out >= len(got) > 500                   # what the cursor has read
        assert after[("cqgate_sessions", frozenset())] == 2
        assert after[("cqgate_connections", frozenset())] == 2
        # the back end took every tuple in batches, and was busy for some of the time
        took = after[("cqgate_backend_batch_rows_total", frozenset())] - \
            before[("cqgate_backend_batch_rows_total", frozenset())]
        assert took == 600                     # the late ones and the held one are not sent
        assert 1 <= after[("cqgate_backend_batches_total", frozenset())] - \
            before[("cqgate_backend_batches_total", frozenset())] <= took
        assert after[("cqgate_backend_busy_seconds_total", frozenset())] > \
            before[("cqgate_backend_busy_seconds_total", frozenset())]
        # ten minutes of event time in one-minute fragments; the bytes are the files' own
        archived = frozenset({("stream", f"public.{stream}")})
        assert after[("cqgate_archive_fragments", archived)] == 11
        on_disk = sum(os.path.getsize(os.path.join(d, f))
                      for d, _, files in os.walk(os.path.join(s.data_dir, "archive",
                                                              f"public.{stream}"))
                      for f in files if f.endswith(".parquet") and not f.startswith("."))
        assert after[("cqgate_archive_bytes", archived)] == on_disk > 0
        assert after[("cqgate_spark_active_jobs", frozenset())] == 0
        # and asking did not start Spark: no JVM under the server
        assert not [p for p in _children(s.proc.pid) if _command(p) == "java"]
        assert after[("cqgate_spark_streaming_queries", frozenset())] == 0
        for process in ("gateway", "backend"):
            labels = frozenset({("process", process)})
            assert after[("cqgate_process_resident_memory_bytes", labels)] > 10 << 20
            assert after[("cqgate_process_cpu_seconds_total", labels)] >= \
                before[("cqgate_process_cpu_seconds_total", labels)]
        reader.close()
    # docs/grafana-dashboard.json asks for metrics the server serves
    with open(os.path.join(ROOT, "docs", "grafana-dashboard.json")) as f:
        asked = set(re.findall(r"cqgate_[a-z_]+", f.read()))
    assert asked and asked <= {name for name, _ in after}, asked - {name for name, _ in after}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{s.http_port}/nothing?token="
                               f"{s.http_token}", timeout=10)
    assert e.value.code == 404
    logged = [line for line in s.lines if line.startswith("{")]
    assert logged and all(set(json.loads(line)) >= {"time", "level", "logger", "message"}
                          for line in logged)
    assert not [line for line in s.lines if "cqgate INFO" in line]     # no text lines


def test_the_console_shows_streams_and_queries_moving(start_server, tmp_path):
    """The console in headless Chromium (Debian's, with its driver) while a query runs: the
    stream and the query appear and their numbers move; the screenshot is what
    docs/operations.md shows (CQGATE_CONSOLE_SCREENSHOT saves it there)."""
    s = start_server("--http-port", "0")
    stream = unique("console")
    with psycopg.connect(s.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE WINDOW {stream}_w AS SELECT a % 5 AS k, count(*) AS n "
                  f"FROM {stream} [RANGE '1 minute'] GROUP BY a % 5")
    reader = psycopg.connect(s.dsn)
    reader.execute(f"DECLARE watching CURSOR FOR SELECT a, a * 2 AS b FROM {stream} WHERE a > 0")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    service = webdriver.ChromeService(executable_path="/usr/bin/chromedriver")
    browser = webdriver.Chrome(options=options, service=service)
    try:
        with pytest.raises(urllib.error.HTTPError) as e:      # every session's SQL: token
            urllib.request.urlopen(f"http://127.0.0.1:{s.http_port}/api/state", timeout=10)
        assert e.value.code == 401
        browser.get(f"http://127.0.0.1:{s.http_port}/?token={s.http_token}")
        # the console redraws its tables every tick: a cell read as it is replaced is stale
        wait = WebDriverWait(browser, 20, ignored_exceptions=(StaleElementReferenceException,))
        row = f'tr[data-stream="{stream}"] td.tuples'
        _push(s, stream, range(0, 200))
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, row) and
                   b.find_element(By.CSS_SELECTOR, row).text not in ("", "0"))
        first = int(wait.until(lambda b: b.find_element(By.CSS_SELECTOR, row).text)
                    .replace(",", ""))
        _push(s, stream, range(200, 600))
        wait.until(lambda b: int(b.find_element(By.CSS_SELECTOR, row).text.replace(",", ""))
                   > first)
        query = 'tr[data-query="watching"] td.rows-out'
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, query) and
                   b.find_element(By.CSS_SELECTOR, query).text not in ("", "0"))
        assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-query="{stream}_w"]')
        # each query with its EXPLAIN ANALYZE tree, the counters moving with the data
        plan = 'tr[data-query="watching"] pre.plan'
        wait.until(lambda b: "σ" in b.find_element(By.CSS_SELECTOR, plan).text)
        tree = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, plan).text)
        assert re.search(rf"stream {stream} .*\(actual rows=600 rows_in=600", tree), tree
        assert "over ω range 1 minute" in wait.until(lambda b: b.find_element(
            By.CSS_SELECTOR, f'tr[data-query="{stream}_w"] pre.plan').text)
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#backend td.busy")
                   .text.endswith("%"))           # from the second refresh on
        assert "cannot read" not in wait.until(
            lambda b: b.find_element(By.ID, "status").text + " ")
        shot = os.environ.get("CQGATE_CONSOLE_SCREENSHOT") or str(tmp_path / "console.png")
        assert browser.save_screenshot(shot)
        assert os.path.getsize(shot) > 10_000
    finally:
        browser.quit()
        reader.close()
