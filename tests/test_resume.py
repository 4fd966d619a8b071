"""Continuous answers that survive: progress rows, cursors resumed from a progress watermark
after a dropped connection or a server restart, and queries the gateway starts again when the
back end is killed. Every answer is compared, coalesced (each row's values with how many times
it holds at each instant), with the answer of a cursor that saw no interruption: on the same
server, or, when the back end itself is killed, on a second server fed the same tuples."""
from __future__ import annotations

import datetime as dt
import os
import random
import re
import signal
import time

import psycopg
import pytest

from conftest import ServerProcess
from continuous import unique, wait_for

T0 = "2026-11-01 10:00:00"
STEP_US = 100_000         # event time between two tuples of a stream


def ts_of(i: int) -> str:
    return f"TIMESTAMP '{T0}' + INTERVAL '{i * STEP_US} microseconds'"


def coalesced(rows) -> dict:
    """{values: [(start, end, how many rows hold)]}: rows of equal values summed instant by
    instant, runs of the same count joined (so pieces cut at different instants compare
    equal). A row is (values…, valid_from, valid_to)."""
    events: dict = {}
    for *values, start, end in rows:
        end = end or "∞"
        e = events.setdefault(tuple(values), {})
        e[start] = e.get(start, 0) + 1
        e[end] = e.get(end, 0) - 1
    out = {}
    for values, e in events.items():
        runs, count, last = [], 0, None
        for t in sorted(e, key=lambda x: (x == "∞", x)):
            if count and last != t:
                if runs and runs[-1][1] == last and runs[-1][2] == count:
                    runs[-1] = (runs[-1][0], t, count)
                else:
                    runs.append((last, t, count))
            count += e[t]
            last = t
        out[values] = runs
    return out


# ------------------------------------------------------------------ the query shapes
SHAPES = {
    "filter": "SELECT node, temp, valid_from, valid_to FROM {r} [RANGE '1 second'] "
              "WHERE temp > 25",
    "keyed_range": "SELECT node, SUM(temp) AS s, COUNT(*) AS n, valid_from, valid_to "
                   "FROM {r} [RANGE '2 seconds'] GROUP BY node",
    "hopping": "SELECT node, MAX(temp) AS m, valid_from, valid_to "
               "FROM {r} [RANGE '2 seconds' SLIDE '1 second'] GROUP BY node",
    "join": "SELECT a.node, a.temp, b.temp AS other, valid_from, valid_to "
            "FROM {r} [RANGE '500 milliseconds'] AS a, {q} [RANGE '500 milliseconds'] AS b "
            "WHERE a.node = b.node",
    "pattern": "SELECT a.node, a.temp AS t1, b.temp AS t2, valid_from, valid_to "
               "FROM EVENT SEQ({r} a, {q} b) WHERE [node] AND b.temp > a.temp + 5 "
               "WITHIN '1 second'",
    "global": "SELECT COUNT(*) AS n, AVG(temp) AS mean, valid_from, valid_to "
              "FROM {r} [RANGE '1 second']",
    "unbounded": "SELECT node, temp, valid_from, valid_to FROM {q} WHERE node = 1",
    "distinct": "SELECT DISTINCT node, valid_from, valid_to FROM {r} [RANGE '1 second'] "
                "WHERE temp > 27",
    "union": "SELECT node, temp, valid_from, valid_to FROM {r} [RANGE '1 second'] "
             "WHERE temp < 21 UNION ALL SELECT node, temp, valid_from, valid_to "
             "FROM {q} [RANGE '1 second'] WHERE temp > 28",
    "having": "SELECT node, COUNT(*) AS n, valid_from, valid_to FROM {q} [RANGE '1 second'] "
              "GROUP BY node HAVING COUNT(*) > 2",
}


def make_streams(dsn: str, r: str, q: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for s in (r, q):
            c.execute(f"CREATE STREAM {s} (node INT, temp DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED")


def rows_of(i: int, seed: int) -> list:
    rnd = random.Random(seed * 1_000_003 + i)
    # whole numbers: sums are exact whatever order a query added and took them away in
    return [(rnd.randrange(3), float(rnd.randrange(18, 33))) for _ in range(2)]


def feed(dsns: list, r: str, q: str, steps: range, seed: int, pause: float = 0.0,
         between=None) -> None:
    """Tuples ``steps`` of both streams into every server, the same on each; ``between(i)``
    after step i (where the test kills a back end)."""
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    try:
        for i in steps:
            for s, seed_ in ((r, seed), (q, seed + 1)):
                values = ", ".join(f"({n}, {v}, {ts_of(i)})" for n, v in rows_of(i, seed_))
                for c in conns:
                    c.execute(f"INSERT INTO {s} VALUES {values}")
            if between is not None:
                between(i)
            if pause:
                time.sleep(pause)
    finally:
        for c in conns:
            c.close()


def advance(dsns: list, streams, i: int) -> None:
    with_all = [psycopg.connect(d, autocommit=True) for d in dsns]
    for c in with_all:
        for s in streams:
            c.execute(f"ALTER STREAM {s} ADVANCE TO {ts_of(i)}")
        c.close()


class Reader:
    """Reads cursors declared WITH (progress = true) on one connection: each cursor's data
    rows (without cq_progress) and its latest progress."""

    def __init__(self, dsn: str, cursors: dict):
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("BEGIN")
        self.rows = {name: [] for name in cursors}
        self.progress: dict = {name: None for name in cursors}
        for name, sql in cursors.items():
            self.conn.execute(f"DECLARE {name} CURSOR FOR {sql} WITH (progress = true)")

    def poll(self) -> None:
        for name in self.rows:
            for row in self.conn.execute(
                    f"FETCH ALL FROM {name} WITH (timeout = '0.05s')").fetchall():
                if row[0] is not None:
                    self.progress[name] = row[0]
                else:
                    self.rows[name].append(row[1:])

    def until(self, instant, timeout: float = 90) -> None:
        def there():
            self.poll()
            return all(p is not None and p >= instant for p in self.progress.values())
        wait_for(there, timeout, lambda: f"progress {self.progress}")

    def answers(self, upto) -> dict:
        """Each cursor's rows that begin before ``upto``, coalesced."""
        return {name: coalesced([r for r in rows if r[-2] < upto])
                for name, rows in self.rows.items()}


def backend_pid(s: ServerProcess) -> int:
    pids = [int(m.group(1)) for line in list(s.lines)
            if (m := re.search(r"back end started \(pid (\d+)\)", line))]
    return pids[-1]


def instant(i: int) -> dt.datetime:
    return dt.datetime.fromisoformat(T0) + dt.timedelta(microseconds=i * STEP_US)


# ------------------------------------------------------------------ progress rows
def test_progress_rows_come_between_the_rows_they_cover(server):
    """Between data rows come progress rows (cq_progress set, every other column NULL, the
    data rows' cq_progress NULL); no row after one begins before it."""
    r, q = unique("pr"), unique("pq")
    make_streams(server.dsn, r, q)
    conn = psycopg.connect(server.dsn, autocommit=True)
    conn.execute("BEGIN")
    conn.execute(f"DECLARE g CURSOR FOR {SHAPES['keyed_range'].format(r=r, q=q)} "
                 "WITH (progress = true)")
    got: list = []

    names = []

    def fetch():
        cur = conn.execute("FETCH ALL FROM g WITH (timeout = '0.05s')")
        names[:] = [d.name for d in cur.description]
        got.extend(cur.fetchall())
    feed([server.dsn], r, q, range(0, 60), 7, pause=0.03, between=lambda i: fetch())
    advance([server.dsn], (r, q), 80)
    wait_for(lambda: fetch() or any(x[0] is not None and x[0] >= instant(80) for x in got),
             60, "the last progress row")
    assert names == ["cq_progress", "node", "s", "n", "valid_from", "valid_to"]
    marks = [x[0] for x in got if x[0] is not None]
    assert len(marks) >= 3 and marks == sorted(marks), marks
    assert all(v is None for x in got if x[0] is not None for v in x[1:])
    last = None
    for x in got:
        if x[0] is not None:
            last = x[0]
        elif last is not None:
            assert x[-2] >= last, (x, last)          # nothing after a progress row is earlier
    data = [x[1:] for x in got if x[0] is None]
    assert len(data) > 20
    conn.close()


# ------------------------------------------------------------------ a client that resumes
class Resumer:
    """A client that processes its cursors' rows exactly once: it commits what it read at
    each progress row, and after a drop declares each cursor again WITH (resume_from = its
    last progress), dropping what it read since (its work after the last commit)."""

    def __init__(self, dsn: str, cursors: dict):
        self.dsn, self.cursors = dsn, cursors
        self.committed = {n: [] for n in cursors}
        self.pending = {n: [] for n in cursors}
        self.progress = {n: None for n in cursors}
        self.declared = 0
        self.connect()

    def connect(self) -> None:
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        self.conn.execute("BEGIN")
        for name, sql in self.cursors.items():
            since = self.progress[name]
            resume = "" if since is None else f", resume_from = '{since.isoformat(sep=' ')}'"
            self.conn.execute(f"DECLARE {name} CURSOR FOR {sql} WITH (progress = true{resume})")
            self.declared += 1

    def drop(self) -> None:
        """The connection breaks (its socket closed under the client); what was read since
        the last progress row is lost with it."""
        os.close(self.conn.pgconn.socket)
        try:
            self.conn.close()
        except (psycopg.Error, OSError):
            pass
        self.pending = {n: [] for n in self.cursors}

    def poll(self, n: int = 50) -> None:
        for name in self.cursors:
            for row in self.conn.execute(
                    f"FETCH {n} FROM {name} WITH (timeout = '0.02s')").fetchall():
                if row[0] is None:
                    self.pending[name].append(row[1:])
                else:
                    self.committed[name] += self.pending[name]
                    self.pending[name] = []
                    self.progress[name] = row[0]

    def until(self, when, timeout: float = 90) -> None:
        def there():
            self.poll(10_000)
            return all(p is not None and p >= when for p in self.progress.values())
        wait_for(there, timeout, lambda: f"progress {self.progress}")

    def answers(self, upto) -> dict:
        return {name: coalesced([r for r in rows if r[-2] < upto])
                for name, rows in self.committed.items()}


def _shapes(names, r, q) -> dict:
    return {n: SHAPES[n].format(r=r, q=q) for n in names}


def _compare(got: dict, want: dict) -> None:
    for name in want:
        diff = {k: (got[name].get(k), want[name].get(k)) for k in set(got[name]) | set(want[name])
                if got[name].get(k) != want[name].get(k)}
        assert not diff, f"{name}: {len(diff)} values differ, e.g. {list(diff.items())[:3]}"
    assert sum(len(v) for w in want.values() for v in w.values()) > 100   # they say much


def test_a_client_that_drops_twenty_times_and_resumes_gets_each_row_once(server):
    r, q = unique("dr"), unique("dq")
    make_streams(server.dsn, r, q)
    names = ("keyed_range", "join", "pattern")
    reference = Resumer(server.dsn, _shapes(names, r, q))
    client = Resumer(server.dsn, _shapes(names, r, q))
    rnd = random.Random(44)
    drops = []

    def between(i):
        reference.poll()
        client.poll(rnd.randrange(1, 40))
        if i > 20 and len(drops) < 20 and rnd.random() < 0.08 and \
                all(client.progress.values()):
            client.drop()
            drops.append(i)
            client.connect()
    feed([server.dsn], r, q, range(0, 420), 11, pause=0.01, between=between)
    assert len(drops) == 20, drops
    advance([server.dsn], (r, q), 440)
    end = instant(440)
    reference.until(end)
    client.until(end)
    _compare(client.answers(end), reference.answers(end))
    assert client.declared == 3 * 21


def _kill_backend(s: ServerProcess) -> int:
    old = backend_pid(s)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: backend_pid(s) != old, 30, "a new back end")
    return old


def test_cursors_go_on_without_a_seam_when_the_back_end_is_killed_three_times(
        server, tmp_path):
    """Ten cursors of different shapes read two streams while the back end is killed
    (SIGKILL) three times; each goes on, and its rows equal those of the same cursor on a
    second server fed the same tuples, which saw no crash."""
    r, q = unique("kr"), unique("kq")
    reference_server = ServerProcess(str(tmp_path / "reference"))
    try:
        for s in (server, reference_server):
            make_streams(s.dsn, r, q)
        shapes = _shapes(SHAPES, r, q)
        crashing, reference = Resumer(server.dsn, shapes), Resumer(reference_server.dsn, shapes)
        killed = []

        def between(i):
            if i % 5 == 0:
                crashing.poll()
                reference.poll()
            if i in (70, 150, 230):
                killed.append(_kill_backend(server))
        feed([server.dsn, reference_server.dsn], r, q, range(0, 300), 5, between=between)
        advance([server.dsn, reference_server.dsn], (r, q), 320)
        end = instant(320)
        reference.until(end)
        crashing.until(end)
        _compare(crashing.answers(end), reference.answers(end))
        assert len(killed) == 3 and crashing.declared == len(shapes)   # none declared again
        with psycopg.connect(server.dsn, autocommit=True) as c:
            recoveries = c.execute(
                "SELECT name, recoveries FROM cq_queries WHERE pid = %s",
                [crashing.conn.info.backend_pid]).fetchall()
        assert sorted(recoveries) == sorted((n, 3) for n in shapes), recoveries
    finally:
        reference_server.stop()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_a_cursor_resumes_across_a_restart_of_the_server(tmp_path, how):
    """The whole server stops (SIGTERM, or SIGKILL) while a client reads; after it starts
    again on the same data directory, the client declares its cursors again from their last
    progress, and what it processed equals the answer of a server that did not stop."""
    r, q = unique("sr"), unique("sq")
    data = str(tmp_path / "data")
    stopping, reference_server = ServerProcess(data), ServerProcess(str(tmp_path / "ref"))
    try:
        for s in (stopping, reference_server):
            make_streams(s.dsn, r, q)
        shapes = _shapes(("keyed_range", "hopping", "pattern", "unbounded"), r, q)
        client, reference = Resumer(stopping.dsn, shapes), Resumer(reference_server.dsn, shapes)
        both = [stopping.dsn, reference_server.dsn]
        poll = (lambda i: (client.poll(), reference.poll()) if i % 5 == 0 else None)
        feed(both, r, q, range(0, 120), 3, between=poll)
        client.until(instant(100))
        stopping.proc.send_signal(how)
        stopping.proc.wait(30)
        client.pending = {n: [] for n in shapes}
        stopping = ServerProcess(data)
        client.dsn = stopping.dsn
        client.connect()
        both = [stopping.dsn, reference_server.dsn]
        feed(both, r, q, range(120, 240), 3, between=poll)
        advance(both, (r, q), 260)
        end = instant(260)
        reference.until(end)
        client.until(end)
        _compare(client.answers(end), reference.answers(end))
    finally:
        stopping.stop()
        reference_server.stop()


@pytest.mark.parametrize("query, sqlstate, words", [
    ("SELECT node, COUNT(*) AS n FROM {r} GROUP BY node", "0A000", "every tuple since"),
    ("SELECT node, temp FROM {r} [ROWS 3]", "0A000", "RowsWindow"),
    ("SELECT node FROM {plain} [RANGE '1 second']", "55000", "not archived"),
    ("SELECT a.node FROM EVENT SEQ({r} a, {q} b)", "0A000", "WITHIN"),
])
def test_what_cannot_be_resumed_is_refused_at_plan_time(server, query, sqlstate, words):
    r, q, plain = unique("fr"), unique("fq"), unique("fp")
    make_streams(server.dsn, r, q)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {plain} (node INT, temp DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute("BEGIN")
        sql = query.format(r=r, q=q, plain=plain)
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"DECLARE x CURSOR FOR {sql} WITH (progress = true, "
                      f"resume_from = '{T0}')")
        assert e.value.sqlstate == sqlstate and words in str(e.value), str(e.value)
        assert e.value.diag.message_hint
        c.execute("ROLLBACK")
        # without resume_from the same query runs, with progress rows
        c.execute("BEGIN")
        c.execute(f"DECLARE x CURSOR FOR {sql} WITH (progress = true)")
        c.execute("ROLLBACK")


@pytest.mark.parametrize("options, words", [
    ("progress = maybe", 'invalid value for option "progress"'),
    ("resume_from = '2026-11-01 10:00:00'", "resume_from needs progress = true"),
    ("progress = true, resume_from = 'yesterday'", 'invalid value for option "resume_from"'),
])
def test_bad_delivery_options_are_22023_with_a_position(server, options, words):
    r, q = unique("br"), unique("bq")
    make_streams(server.dsn, r, q)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SELECT node FROM {r} [RANGE '1 second'] WITH ({options})")
        assert e.value.sqlstate == "22023" and words in str(e.value)
        assert e.value.diag.statement_position
        assert c.execute("SELECT 1").fetchone() == (1,)
