"""Slow and vanished clients cost the server a bounded amount: a continuous query's unread rows
stay under cq.result_memory in memory and cq.result_spill on disk, past which that one query
ends with 54000, while other cursors and the stream's ingest go on at their pace."""
import asyncio
import os
import socket
import struct
import threading
import time

import psycopg
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuous import unique
from gateway.link.live_rows import Bounds, LiveRows

MEMORY, SPILL = "1MB", "4MB"
BOUNDS = ("--result-memory", MEMORY, "--result-spill", SPILL)
ROWS = 1_000_000
FIRST = 10_000
# what the lagging cursor selects: ~260 bytes a row that compress poorly (hex digests), so the
# million rows it never reads would take ~270MB if the gateway held them, well above the RSS
# the ingest and the fast reader cost (~100MB), and the spill files are near their true size
WIDE = " || ".join(f"md5((a * 8 + {k})::VARCHAR)" for k in range(8))


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def spill_files(server) -> list:
    return os.listdir(os.path.join(server.data_dir, "result_spill"))


def spilled_bytes(server) -> int:
    """The spill files' size on disk now (a file removed between listing and sizing, its
    query having ended, counts nothing)."""
    total = 0
    for f in spill_files(server):
        try:
            total += os.path.getsize(os.path.join(server.data_dir, "result_spill", f))
        except FileNotFoundError:
            pass
    return total


def push(server, stream: str, first: int, n: int, pad: str = "") -> None:
    """``n`` short rows (ids from ``first``, one event-time second per thousand; ``pad``
    after the id, for a stream with a text column) through the ingest port; returns once the
    server has taken them all."""
    body = "".join(f"{i}{pad},2026-11-01 {i // 3_600_000 % 24:02d}:{i // 60_000 % 60:02d}:"
                   f"{i // 1000 % 60:02d}\n" for i in range(first, first + n))
    with socket.create_connection(("127.0.0.1", server.ingest_port), timeout=60) as sock:
        sock.sendall(f"csvwrapper,{stream}\n".encode() + body.encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4096) == b""            # no ERROR line: every row taken


def queue_of(admin, name: str):
    return admin.execute("SELECT state, unread_rows, memory_bytes, spill_bytes, error "
                         "FROM cq_queries WHERE name = %s", [name]).fetchone()


class Reader(threading.Thread):
    """A cursor read as fast as rows come: counts them until ``want`` arrived."""

    def __init__(self, dsn: str, stream: str, want: int):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn)
        self.conn.execute(f"DECLARE fast CURSOR FOR SELECT a FROM {stream}")
        self.want, self.got, self.error = want, 0, None
        self.start()

    def run(self):
        try:
            cur = self.conn.cursor()
            deadline = time.monotonic() + 90
            while self.got < self.want and time.monotonic() < deadline:
                cur.execute("FETCH ALL FROM fast WITH (timeout = '1s')")
                self.got += len(cur.fetchall())
        except psycopg.Error as e:      # reported by the test
            self.error = e
        finally:
            self.conn.close()


def test_a_cursor_that_stops_reading_spills_then_ends_alone(start_server):
    s = start_server(*BOUNDS)
    stream = unique("slow")
    admin = psycopg.connect(s.dsn, autocommit=True)
    admin.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
    slow = psycopg.connect(s.dsn)
    slow.execute(f"DECLARE lagging CURSOR FOR SELECT a, a * 2 AS b, {WIDE} AS c FROM {stream}")
    fast = Reader(s.dsn, stream, ROWS)
    before = rss_bytes(s.proc.pid)

    # a first part that fits the spill bound: the queue holds up to 1MB in memory, the rest
    # on disk (a batch larger than the memory bound goes to disk whole, so a small batch
    # comes first: it is what memory holds)
    small = 500                                   # ~130kB of rows
    push(s, stream, 0, small)
    deadline = time.monotonic() + 30
    while queue_of(admin, "lagging")[1] < small and time.monotonic() < deadline:
        time.sleep(0.1)
    push(s, stream, small, FIRST - small)
    while (q := queue_of(admin, "lagging"))[1] < FIRST and time.monotonic() < deadline:
        time.sleep(0.1)
    state, unread, memory, spilled, error = q
    assert (state, unread, error) == ("ready", FIRST, None)
    assert 0 < memory <= 1 << 20 and 0 < spilled <= 4 << 20, (memory, spilled)
    assert spill_files(s)

    # the rest overflows it: that query ends (54000); the stream and the fast cursor go on
    peak = 0
    pusher = threading.Thread(target=push, args=(s, stream, FIRST, ROWS - FIRST))
    pusher.start()
    while pusher.is_alive() or fast.is_alive():      # until the last row reached the gateway
        peak = max(peak, rss_bytes(s.proc.pid))
        assert spilled_bytes(s) <= 5 << 20
        time.sleep(0.05)
    pusher.join()
    fast.join(60)
    assert fast.error is None and fast.got == ROWS          # every row, to the fast reader
    state, unread, memory, spilled, error = queue_of(admin, "lagging")
    assert (state, unread, memory, spilled) == ("failed", 0, 0, 0)
    assert "fell too far behind" in error
    assert spill_files(s) == []
    with pytest.raises(psycopg.errors.ProgramLimitExceeded) as e:
        slow.execute("FETCH 10 FROM lagging")
    assert "cq.result_spill" in e.value.diag.message_hint
    slow.rollback()
    assert queue_of(admin, "lagging") is None                # gone with its cursor
    # the gateway held at most the bounds, not the million unread rows (~270MB as Arrow); the
    # ingest's own buffers and the fast reader's batches take ~100MB of the allowance
    assert peak - before < 160 << 20, (before, peak)
    assert any("fell too far behind" in line for line in s.lines)
    slow.close()
    admin.close()


def test_the_bounds_are_settings_a_session_may_only_lower(start_server):
    s = start_server(*BOUNDS)
    with psycopg.connect(s.dsn, autocommit=True) as su:
        su.execute("CREATE ROLE plain LOGIN")
        assert su.execute("SHOW cq.result_memory").fetchone() == (MEMORY,)
        su.execute("SET cq.result_spill = '64MB'")             # a superuser may raise it
        su.execute("RESET cq.result_spill")
        assert su.execute("SHOW cq.result_spill").fetchone() == (SPILL,)
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            su.execute("SET cq.result_memory = 'lots'")
    with psycopg.connect(s.dsn.replace("user=cq", "user=plain"), autocommit=True) as c:
        c.execute("SET cq.result_memory = '512kB'")
        assert c.execute("SHOW cq.result_memory").fetchone() == ("512kB",)
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            c.execute("SET cq.result_spill = '2GB'")
        assert "--result-spill" in e.value.diag.message_hint


def test_a_bad_bound_is_refused_at_start(tmp_path):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--port", "0",
                           "--data-dir", str(tmp_path), "--result-spill", "much"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--result-spill" in done.stderr


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _startup(sock) -> None:
    body = struct.pack("!I", 196608) + b"user\0cq\0database\0cq\0\0"
    sock.sendall(struct.pack("!I", len(body) + 4) + body)
    got = b""
    while not got.endswith(b"Z\0\0\0\x05I"):
        got += sock.recv(65536)


def test_vanished_clients_free_their_queries_mid_fetch_and_mid_copy(start_server):
    s = start_server(*BOUNDS)
    stream = unique("gone")
    admin = psycopg.connect(s.dsn, autocommit=True)
    admin.execute(f"CREATE STREAM {stream} (a INT, p VARCHAR, t TIMESTAMP TIMESTAMPCOLUMN)")
    # one client in COPY (query) TO STDOUT that never reads its socket, one mid-FETCH
    stuck = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    _startup(stuck)
    stuck.sendall(_message(b"Q", f"COPY (SELECT a, p FROM {stream}) TO STDOUT\0".encode()))
    fetching = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    _startup(fetching)
    fetching.sendall(_message(b"Q", f"BEGIN; DECLARE f CURSOR FOR SELECT a, p FROM {stream}; "
                                    "FETCH ALL FROM f\0".encode()))
    deadline = time.monotonic() + 20
    while admin.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                        [f"%{stream}%"]).fetchone()[0] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # ~20MB of text: more than the sockets' buffers take, so the rows wait in the queues
    push(s, stream, 0, 200_000, pad="," + "x" * 100)
    deadline = time.monotonic() + 30
    while admin.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s AND "
                        "(spill_bytes > 0 OR state = 'failed')",
                        [f"%{stream}%"]).fetchone()[0] < 2:
        assert time.monotonic() < deadline, "the unread rows never spilled"
        time.sleep(0.1)
    stuck.close()
    fetching.close()
    deadline = time.monotonic() + 20
    while admin.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                        [f"%{stream}%"]).fetchone()[0]:
        assert time.monotonic() < deadline, "a vanished client's query kept running"
        time.sleep(0.1)
    assert spill_files(s) == []
    # the stream and the server go on
    with psycopg.connect(s.dsn) as c:
        c.execute(f"DECLARE again CURSOR FOR SELECT a FROM {stream}")
        push(s, stream, 200_000, 10, pad=",x")
        assert len(c.execute("FETCH 10 FROM again WITH (timeout = '10s')").fetchall()) == 10
    admin.close()


class _Link:
    """What a queue tells the back end, recorded."""

    def __init__(self):
        self.ended = []

    def end_query(self, qid, how):
        self.ended.append((qid, how))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
       takes=st.lists(st.one_of(st.none(), st.integers(1, 5000)), min_size=1, max_size=40))
def test_a_queue_gives_back_every_row_in_order_through_memory_and_disk(tmp_path_factory, sizes,
                                                                       takes):
    """Whatever the batches and the reads, the rows leave in the order they came, memory never
    holds more than the bound (one read-back segment at most), and nothing stays on disk."""
    folder = str(tmp_path_factory.mktemp("spill"))
    q = LiveRows([], None, 1, "", 0, "c", _Link(), bounds=Bounds(64 << 10, 1 << 30, folder))
    sent, got, n = [], [], 0
    cancel = asyncio.Event()
    for i, size in enumerate(sizes):
        q.put(pa.table({"a": pa.array(range(n, n + size), pa.int64())}))
        sent.extend(range(n, n + size))
        n += size
        assert q.memory_bytes <= (64 << 10) + 3000 * 8        # the bound, or one batch over
        want = takes[i % len(takes)]
        if q.n_pending and (want is None or want <= q.n_pending):
            got.extend(asyncio.run(q.take(want, 0, cancel)).column("a").to_pylist())
    while q.n_pending:
        got.extend(asyncio.run(q.take(None, 0, cancel)).column("a").to_pylist())
    assert got == sent
    assert os.listdir(folder) == []
