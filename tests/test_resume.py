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
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import ServerProcess
from continuous import unique, wait_for
from executor.wire import INF
from gateway.link.resumption import Replay

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
         between=None, chunk: int = 4) -> None:
    """Tuples ``steps`` of both streams into every server, the same on each, ``chunk`` steps
    an INSERT; ``between(i)`` after each INSERT, i its last step (where a test polls its
    cursors, drops a connection or kills a back end)."""
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    try:
        for first in range(steps.start, steps.stop, chunk):
            last = min(first + chunk, steps.stop)
            for s, seed_ in ((r, seed), (q, seed + 1)):
                values = ", ".join(f"({n}, {v}, {ts_of(i)})" for i in range(first, last)
                                   for n, v in rows_of(i, seed_))
                for c in conns:
                    c.execute(f"INSERT INTO {s} VALUES {values}")
            if between is not None:
                between(last - 1)
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
    """Reads plain cursors (no progress rows) on one connection; how far each has got is
    ``cq_queries.progress``, the watermark its rows passed."""

    def __init__(self, dsn: str, cursors: dict):
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("BEGIN")
        self.rows = {name: [] for name in cursors}
        self.declared = 0
        for name, sql in cursors.items():
            self.conn.execute(f"DECLARE {name} CURSOR FOR {sql}")
            self.declared += 1

    def poll(self) -> None:
        for name in self.rows:
            self.rows[name] += self.conn.execute(
                f"FETCH ALL FROM {name} WITH (timeout = '0')").fetchall()

    def progress(self) -> dict:
        with psycopg.connect(self.conn.info.dsn, autocommit=True) as c:
            return dict(c.execute("SELECT name, progress FROM cq_queries WHERE pid = %s",
                                  [self.conn.info.backend_pid]).fetchall())

    def until(self, when, timeout: float = 90) -> None:
        """Until every cursor's rows have passed ``when`` and the client has read them."""
        def there():
            passed = self.progress()
            self.poll()                 # (after: what came before the watermark is here)
            return len(passed) == len(self.rows) and \
                all(p is not None and p >= when for p in passed.values())
        wait_for(there, timeout, lambda: f"progress {self.progress()}")

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

    def between(i):
        fetch()
        if i in (19, 39):       # punctuation where the data stands (besides the heartbeats)
            advance([server.dsn], (r, q), i)
    feed([server.dsn], r, q, range(0, 60), 7, between=between)
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

    def __init__(self, dsn: str, cursors: dict, since: dict | None = None):
        self.dsn, self.cursors = dsn, cursors
        self.committed = {n: [] for n in cursors}
        self.pending = {n: [] for n in cursors}
        self.progress = {n: (since or {}).get(n) for n in cursors}
        self.marks = {n: [] for n in cursors}        # every progress row's instant
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
                    f"FETCH {n} FROM {name} WITH (timeout = '0')").fetchall():
                if row[0] is None:
                    self.pending[name].append(row[1:])
                else:
                    self.committed[name] += self.pending[name]
                    self.pending[name] = []
                    self.progress[name] = row[0]
                    self.marks[name].append(row[0])

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
        if i > 20 and len(drops) < 20 and rnd.random() < 0.3 and \
                all(client.progress.values()):
            client.drop()
            drops.append(i)
            client.connect()
    feed([server.dsn], r, q, range(0, 420), 11, pause=0.02, between=between)
    assert len(drops) == 20, drops
    advance([server.dsn], (r, q), 440)
    end = instant(440)
    reference.until(end)
    client.until(end)
    _compare(client.answers(end), reference.answers(end))
    assert client.declared == 3 * 21


# named windows and a derived stream the server keeps: started again on a new back end as at
# the server's start, primed from the archive ({w} a window, {d} the derived stream, {l} a table)
KEPT = {
    "CREATE WINDOW {w}_keyed AS SELECT node, SUM(temp) AS s, COUNT(*) AS n FROM {r} "
    "[RANGE '2 seconds'] GROUP BY node": "{w}_keyed",
    "CREATE WINDOW {w}_hot AS SELECT node, COUNT(*) AS n FROM {q} [RANGE '1 second'] "
    "WHERE temp > 25 GROUP BY node": "{w}_hot",
    "CREATE WINDOW {w}_labels AS SELECT l.label, MAX(x.temp) AS m FROM {r} "
    "[RANGE '1 second'] AS x JOIN {l} AS l ON x.node = l.node GROUP BY l.label": "{w}_labels",
    "CREATE STREAM {d} AS SELECT node, temp FROM {q} [RANGE '1 second'] WHERE temp < 22": None,
    "CREATE WINDOW {w}_of_d AS SELECT node, COUNT(*) AS n, MIN(temp) AS m FROM {d} "
    "GROUP BY node": "{w}_of_d",
    # rows from when their query began: started again from there, they hold what they held
    "CREATE WINDOW {w}_last AS SELECT node, temp FROM {r} [ROWS 4]": "{w}_last",
    "CREATE STREAM {d}_rows AS SELECT node, COUNT(*) AS n, MAX(temp) AS m FROM {q} [ROWS 5] "
    "GROUP BY node": None,
    "CREATE STREAM {d}_all AS SELECT node, temp FROM {r} WHERE temp > 23.5": None,
}


# cursors over the derived streams and named windows of KEPT: their rows are a function of the
# archive, so they read their query in their place and go on as cursors over the streams do
OVER_DERIVED = {
    "derived": "SELECT node, temp, valid_from, valid_to FROM {d}",
    "over_derived": "SELECT node, COUNT(*) AS n, MIN(temp) AS m, valid_from, valid_to "
                    "FROM {d} GROUP BY node",
    # rows from when the derived stream's query began: its query reads from there
    "derived_rows": "SELECT node, n, m, valid_from, valid_to FROM {d}_rows",
    "over_derived_all": "SELECT COUNT(*) AS n, valid_from, valid_to FROM {d}_all",
    # a named window's rows as they change: read through its query too
    "window_keyed": "SELECT node, s, n, valid_from, valid_to FROM Stream({w}_keyed)",
    "window_rows": "SELECT node, temp, valid_from, valid_to FROM Stream({w}_last)",
}


def _make_kept(dsn: str, names: dict) -> list:
    """The kept relations of ``KEPT`` on the server at ``dsn``: the windows to read."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {names['l']} (node INT, label TEXT)")
        c.execute(f"INSERT INTO {names['l']} VALUES (0, 'even'), (1, 'odd'), (2, 'even')")
        for sql in KEPT:
            c.execute(sql.format(**names))
    return [w.format(**names) for w in KEPT.values() if w is not None]


def _read_kept(dsn: str, windows: list) -> dict:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {w: c.execute(f"SELECT * FROM {w} ORDER BY 1").fetchall() for w in windows}


def _drop_kept(dsn: str, names: dict) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for d in ("", "_rows", "_all"):
            c.execute(f"DROP STREAM IF EXISTS {names['d']}{d} CASCADE")
        for w in KEPT.values():
            if w is not None:
                c.execute(f"DROP WINDOW IF EXISTS {w.format(**names)} CASCADE")
        c.execute(f"DROP TABLE IF EXISTS {names['l']}")


def _two_servers_kept(server, tmp_path, prefix: str) -> tuple:
    """(the second server, the names, the kept windows to read): both servers with the two
    streams and the named windows and derived stream of ``KEPT``."""
    names = {k: unique(prefix + k) for k in ("r", "q", "w", "d", "l")}
    reference_server = ServerProcess(str(tmp_path / "reference"))
    try:
        for s in (server, reference_server):
            make_streams(s.dsn, names["r"], names["q"])
            windows = _make_kept(s.dsn, names)
    except BaseException:
        reference_server.stop()
        raise
    return reference_server, names, windows


def _fed_alike(server, reference_server, crashing, reference, r, q, steps: range, seed: int,
               between, logged: int) -> None:
    """Both servers fed ``steps`` of the same tuples (``between(i)`` after each INSERT), then
    advanced past them: the crashing server's cursors must equal the reference's, and each
    restart gave back every piece of the rows sent before its crash."""
    dsns = [server.dsn, reference_server.dsn]
    feed(dsns, r, q, steps, seed, between=between)
    advance(dsns, (r, q), steps.stop + 20)
    end = instant(steps.stop + 20)
    reference.until(end)
    crashing.until(end)
    _compare(crashing.answers(end), reference.answers(end))
    assert not [ln for ln in server.lines[logged:] if "did not give" in ln]


def _kill_backend(s: ServerProcess) -> int:
    old = backend_pid(s)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: backend_pid(s) != old, 30, "a new back end")
    return old


def test_cursors_go_on_without_a_seam_when_the_back_end_is_killed_three_times(
        server, tmp_path):
    """Ten cursors of different shapes read two streams, and two a derived stream of them,
    while the back end is killed
    (SIGKILL) three times; each goes on, and its rows equal those of the same cursor on a
    second server fed the same tuples, which saw no crash. The named windows and derived
    stream the server keeps hold, once their restart has ended, what the second server's
    hold: their past read again from the archive, their tables sent again."""
    reference_server, names, windows = _two_servers_kept(server, tmp_path, "k")
    r, q = names["r"], names["q"]
    try:
        logged = len(server.lines)
        shapes = _shapes(SHAPES, r, q) | {n: sql.format(**names)
                                          for n, sql in OVER_DERIVED.items()}
        # plain cursors: rows go out as they come, so a crash finds some sent since the last
        # watermark, which the restarted query must not send again
        crashing, reference = Reader(server.dsn, shapes), Reader(reference_server.dsn, shapes)
        killed, kept = [], []

        def restarted() -> int:
            return sum(f"query restarted: window {names['w']}" in ln
                       for ln in server.lines[logged:])

        def between(i):
            crashing.poll()
            reference.poll()
            if len(killed) < 3 and i >= (70, 150, 230)[len(killed)]:
                killed.append(_kill_backend(server))
                wait_for(lambda: restarted() == len(windows) * len(killed), 60,
                         "the kept windows' restart")
                kept.append((_read_kept(server.dsn, windows),
                             _read_kept(reference_server.dsn, windows)))
        _fed_alike(server, reference_server, crashing, reference, r, q, range(0, 300), 5,
                   between, logged)
        assert len(killed) == 3 and crashing.declared == len(shapes)   # none declared again
        with psycopg.connect(server.dsn, autocommit=True) as c:
            recoveries = c.execute(
                "SELECT name, recoveries FROM cq_queries WHERE pid = %s",
                [crashing.conn.info.backend_pid]).fetchall()
        assert sorted(recoveries) == sorted((n, 3) for n in shapes), recoveries
        for got, want in kept:
            assert got == want
            assert all(want.values()), want            # each holds something to compare
        # (at the end every window has emptied: the streams went on past their reach)
        assert _read_kept(server.dsn, windows) == _read_kept(reference_server.dsn, windows)
        assert not [ln for ln in server.lines[logged:] if "from live data" in ln]
    finally:
        _drop_kept(server.dsn, names)
        reference_server.stop()


def test_a_crash_during_a_restart_and_a_close_during_one(server, tmp_path):
    """Races of a restart: the back end is killed again as soon as its successor has started
    (the cursors' and the named windows' restarts then run, or are about to), twice; and a
    cursor is closed right after a kill, while its restart may run. The cursors left go on
    and equal a second server's, each counts every crash it lived through, and the closed
    one's query is gone; the kept windows, once the newest restart has started them, hold
    what the second server's hold, each started once and none from live data."""
    reference_server, names, windows = _two_servers_kept(server, tmp_path, "r")
    r, q = names["r"], names["q"]
    try:
        logged = len(server.lines)
        shapes = _shapes(("keyed_range", "join", "pattern", "hopping"), r, q)
        crashing, reference = Reader(server.dsn, shapes), Reader(reference_server.dsn, shapes)
        kills, kept = [], []

        def restarted(since: int) -> set:
            return {w for w in windows for ln in server.lines[since:]
                    if f"query restarted: window {w}" in ln}

        def between(i):
            crashing.poll()
            reference.poll()
            if len(kills) < 4 and i >= (60, 140)[len(kills) // 2]:
                kills.append(_kill_backend(server))
                at = len(server.lines)
                kills.append(_kill_backend(server))     # at once: mid-restart
                wait_for(lambda: restarted(at) == set(windows), 60, "the windows' restart")
                kept.append((_read_kept(server.dsn, windows),
                             _read_kept(reference_server.dsn, windows)))
            elif len(kills) == 4 and i >= 200:
                kills.append(_kill_backend(server))
                crashing.conn.execute("CLOSE hopping")
                reference.conn.execute("CLOSE hopping")
                del crashing.rows["hopping"], reference.rows["hopping"]
        _fed_alike(server, reference_server, crashing, reference, r, q, range(0, 260), 7,
                   between, logged)
        lines = server.lines[logged:]
        assert not [ln for ln in lines if "Traceback" in ln or "from live data" in ln
                    or "cannot start" in ln]
        with psycopg.connect(server.dsn, autocommit=True) as c:
            recoveries = dict(c.execute(
                "SELECT name, recoveries FROM cq_queries WHERE pid = %s",
                [crashing.conn.info.backend_pid]).fetchall())
            running = c.execute("SELECT name FROM cq_queries WHERE kind = 'window' "
                                "ORDER BY 1").fetchall()
        # (each crash a cursor was past a watermark at counts, restarted or overtaken)
        assert set(recoveries) == {"keyed_range", "join", "pattern"}, recoveries
        assert all(n == len(kills) for n in recoveries.values()), (recoveries, len(kills))
        assert [n for n, in running] == sorted(windows)       # each once
        assert len(kept) == 2
        for got, want in kept:
            assert got == want
            assert all(want.values()), want
    finally:
        _drop_kept(server.dsn, names)
        reference_server.stop()


def test_cursors_whose_rows_passed_no_watermark_yet_go_on_after_a_crash(server, tmp_path):
    """Cursors declared once their streams stand still (the archives hold tuples, and no
    BOUNDARY comes after the cursors start): the back end is killed before any of their rows
    has passed a watermark. Each starts again as it first did (primed at the same seam, or
    from the first tuples it saw), the rows it had sent taken away from what it gives again,
    and, once tuples come again, equals the same cursor on a second server that saw no
    crash."""
    r, q = unique("wr"), unique("wq")
    reference_server = ServerProcess(str(tmp_path / "reference"))
    try:
        dsns = [server.dsn, reference_server.dsn]
        for s in (server, reference_server):
            make_streams(s.dsn, r, q)
        feed(dsns, r, q, range(0, 40), 13)
        advance(dsns, (r, q), 50)
        logged = len(server.lines)
        shapes = _shapes(("keyed_range", "hopping", "join", "global", "filter", "unbounded",
                          "pattern"), r, q)
        crashing, reference = Reader(server.dsn, shapes), Reader(reference_server.dsn, shapes)
        crashing.poll()
        assert set(crashing.progress().values()) == {None}     # no watermark passed yet
        _kill_backend(server)

        def between(i):
            crashing.poll()
            reference.poll()
        _fed_alike(server, reference_server, crashing, reference, r, q, range(60, 160), 13,
                   between, logged)
        with psycopg.connect(server.dsn, autocommit=True) as c:
            recoveries = dict(c.execute(
                "SELECT name, recoveries FROM cq_queries WHERE pid = %s",
                [crashing.conn.info.backend_pid]).fetchall())
        assert recoveries == {n: 1 for n in shapes}, recoveries
    finally:
        reference_server.stop()


def test_cursors_restarted_from_checkpoints_equal_those_that_saw_no_crash(server, tmp_path):
    """With ``--checkpoint-interval``, a cursor whose operators save their state (aggregates
    over RANGE and hopping windows, a join, a union, a filter) restarts from its latest
    checkpoint, reading the archive only from where it stands, rather than as far back as
    its windows reach; one whose operators do not (a pattern) replays as before. Killed twice,
    each cursor equals the same cursor on a server that saw no crash. The tuples come two at
    an instant and each BOUNDARY is at the latest of them, so a checkpoint often stands
    between tuples of one instant."""
    r, q = unique("cr"), unique("cq")
    crashing_server = ServerProcess(str(tmp_path / "crashing"), "--checkpoint-interval", "0.05")
    folder = os.path.join(crashing_server.data_dir, "checkpoints")
    try:
        for s in (crashing_server, server):
            make_streams(s.dsn, r, q)
        logged = len(crashing_server.lines)
        shapes = _shapes(("keyed_range", "hopping", "join", "global", "union", "having",
                          "filter", "pattern"), r, q)
        crashing = Reader(crashing_server.dsn, shapes)
        reference = Reader(server.dsn, shapes)
        kills = []

        def between(i):
            crashing.poll()
            reference.poll()
            if len(kills) < 2 and i >= (80, 160)[len(kills)]:
                wait_for(lambda: len(os.listdir(folder)) >= 7, 30, "checkpoints")
                kills.append(_kill_backend(crashing_server))
        _fed_alike(crashing_server, server, crashing, reference, r, q, range(0, 240), 9,
                   between, logged)
        restarts = [ln for ln in crashing_server.lines[logged:] if "(restarted" in ln]
        from_checkpoints = {n for n in shapes for ln in restarts
                            if f"cursor {n} " in ln and "from a checkpoint" in ln}
        assert from_checkpoints == set(shapes) - {"pattern"}, restarts
        assert sum("cursor pattern " in ln for ln in restarts) == 2
        with psycopg.connect(crashing_server.dsn, autocommit=True) as c:
            saved = dict(c.execute("SELECT name, checkpoint FROM cq_queries WHERE pid = %s",
                                   [crashing.conn.info.backend_pid]).fetchall())
        assert saved.pop("pattern") is None
        assert all(t is not None and t >= instant(160) for t in saved.values()), saved
        crashing.conn.execute("CLOSE ALL")
        wait_for(lambda: not os.listdir(folder), 10, "the closed cursors' checkpoints gone")
    finally:
        crashing_server.stop()


def test_a_cursor_resumes_across_restarts_of_the_server(tmp_path):
    """The whole server stops while a client reads, once with SIGTERM and once with SIGKILL;
    each time it starts again on the same data directory, the client declares its cursors
    again from their last progress, and what it processed equals the answer of a server that
    did not stop."""
    r, q = unique("sr"), unique("sq")
    data = str(tmp_path / "data")
    stopping, reference_server = ServerProcess(data), ServerProcess(str(tmp_path / "ref"))
    try:
        for s in (stopping, reference_server):
            make_streams(s.dsn, r, q)
        shapes = _shapes(("keyed_range", "hopping", "pattern", "unbounded"), r, q)
        client, reference = Resumer(stopping.dsn, shapes), Resumer(reference_server.dsn, shapes)
        poll = (lambda i: (client.poll(), reference.poll()))
        for k, how in enumerate((signal.SIGTERM, signal.SIGKILL)):
            feed([stopping.dsn, reference_server.dsn], r, q, range(k * 80, k * 80 + 80), 3,
                 between=poll)
            client.until(instant(k * 80 + 60))
            stopping.proc.send_signal(how)
            stopping.proc.wait(30)
            client.pending = {n: [] for n in shapes}     # read, not yet made durable: lost
            stopping = ServerProcess(data)
            client.dsn = stopping.dsn
            client.connect()
        both = [stopping.dsn, reference_server.dsn]
        feed(both, r, q, range(160, 240), 3, between=poll)
        advance(both, (r, q), 260)
        end = instant(260)
        reference.until(end)
        client.until(end)
        _compare(client.answers(end), reference.answers(end))
        assert client.declared == 3 * len(shapes)
    finally:
        stopping.stop()
        reference_server.stop()


@pytest.mark.parametrize("query, sqlstate, words", [
    ("SELECT node, COUNT(*) AS n FROM {r} GROUP BY node", "0A000", "every tuple since"),
    ("SELECT node, temp FROM {r} [ROWS 3]", "0A000", "RowsWindow"),
    ("SELECT node FROM {plain} [RANGE '1 second']", "55000", "not archived"),
    ("SELECT a.node FROM EVENT SEQ({r} a, {q} b)", "0A000", "WITHIN"),
    ("SELECT * FROM {r} MATCH_RECOGNIZE (PARTITION BY node ORDER BY t MEASURES A.temp AS a "
     "ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW PATTERN (A B) WITHIN INTERVAL '1' "
     "SECOND DEFINE B AS B.temp > A.temp) AS m", "0A000", "AFTER MATCH SKIP"),
    ("SELECT node FROM {r} [RANGE '1 second'] WHERE t < now()", "0A000", "now()"),
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


def test_a_derived_stream_whose_rows_are_the_archives_is_read_through_its_query(server):
    """A cursor over a derived stream whose rows are a function of the archive (a window that
    reaches back, a derived stream over that one, and reads that start with the derived
    stream's query, [UNBOUNDED] and ROWS, which read from where it began) runs its query in
    its place: EXPLAIN shows it, its rows are those of the same query over the stream, and
    it resumes from a progress row; so does a cursor that also reads one of its streams
    itself. One over a stream that is not archived, or a table, is refused resume_from with
    the reason (55000, 0A000 with a hint), the session going on. A derived stream read
    through its query has that cursor among its readers (DROP: 2BP01; CASCADE ends it,
    57014)."""
    r, q = unique("ir"), unique("iq")
    make_streams(server.dsn, r, q)
    d, dd, held, rows3, loose, tabled, t = (
        unique(p) for p in ("id", "idd", "iu", "iw", "il", "it", "itt"))
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {d} AS SELECT node, temp FROM {r} [RANGE '1 second'] "
                  "WHERE temp > 22")
        c.execute(f"CREATE STREAM {dd} AS SELECT node, COUNT(*) AS n FROM {d} GROUP BY node")
        c.execute(f"CREATE STREAM {held} AS SELECT node, temp FROM {r} WHERE temp > 22")
        c.execute(f"CREATE STREAM {rows3} AS SELECT node, temp FROM {r} [ROWS 3]")
        c.execute(f"CREATE STREAM {held}_n AS SELECT COUNT(*) AS n FROM {held}")
        c.execute(f"CREATE STREAM {loose}_s (node INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE STREAM {loose} AS SELECT node FROM {loose}_s [ROWS 3]")
        c.execute(f"CREATE TABLE {t} (node INT, label TEXT)")
        c.execute(f"CREATE STREAM {tabled} AS SELECT x.node, l.label FROM {r} "
                  f"[RANGE '1 second'] AS x JOIN {t} AS l ON x.node = l.node")
        for rel in (dd, held, rows3):
            lines = [x for (x,) in c.execute(f"EXPLAIN SELECT * FROM {rel}")]
            assert any(f"stream {r}" in x for x in lines), lines
            assert not any(f"derived {name}" in x for x in lines for name in (d, dd, rel)), \
                lines
        # the cursor's own read of the stream starts with it, beside d's primed one
        mixed = [x for (x,) in c.execute(f"EXPLAIN SELECT node, temp FROM {d} UNION ALL "
                                         f"SELECT node, temp FROM {r} WHERE temp > 25")]
        assert not any(f"derived {d}" in x for x in mixed), mixed
        for rel, state, words in ((loose, "55000", f'"{loose}_s" is not archived'),
                                  (tabled, "0A000", f"it reads table {t}"),
                                  (f"{held}_n", "0A000", f'derived stream "{held}" from its '
                                   "own start")):
            with pytest.raises(psycopg.Error) as e:
                c.execute(f"SELECT * FROM {rel} WITH (progress = true, resume_from = '{T0}')")
            assert e.value.sqlstate == state and f'derived stream "{rel}"' in str(e.value) \
                and words in str(e.value), str(e.value)
            assert e.value.diag.message_hint
            assert c.execute("SELECT 1").fetchone() == (1,)
        for rel in (loose, tabled, f"{held}_n"):
            c.execute(f"DROP STREAM {rel}")
    over = f"SELECT node, n, valid_from, valid_to FROM {dd}"
    direct = (f"SELECT node, COUNT(*) AS n, valid_from, valid_to FROM {r} [RANGE '1 second'] "
              "WHERE temp > 22 GROUP BY node")
    first = Resumer(server.dsn, {
        "over": over, "over_direct": direct,
        "held": f"SELECT node, temp, valid_from, valid_to FROM {held}",
        "held_direct": f"SELECT node, temp, valid_from, valid_to FROM {r} WHERE temp > 22",
        "rows": f"SELECT node, temp, valid_from, valid_to FROM {rows3}",
        "rows_direct": f"SELECT node, temp, valid_from, valid_to FROM {r} [ROWS 3]",
        "mixed": f"SELECT node, temp, valid_from, valid_to FROM {d} UNION ALL "
                 f"SELECT node, temp, valid_from, valid_to FROM {r} WHERE temp > 25",
        "mixed_direct": f"SELECT node, temp, valid_from, valid_to FROM {r} [RANGE '1 second'] "
                        f"WHERE temp > 22 UNION ALL SELECT node, temp, valid_from, valid_to "
                        f"FROM {r} WHERE temp > 25"})
    _fed_quietly(server, first, r, q, 13)
    for name in ("over", "held", "rows", "mixed"):
        assert first.committed[name]
        assert coalesced(first.committed[name]) == coalesced(first.committed[name + "_direct"])
        _resumed_midway(server, first, name)
    with psycopg.connect(server.dsn, autocommit=True) as c:    # still a reader of dd
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"DROP STREAM {dd}")
        assert e.value.sqlstate == "2BP01" and "running queries read it" in str(e.value)
        c.execute(f"DROP STREAM {dd} CASCADE")          # and ends it
    with pytest.raises(psycopg.Error) as e:
        first.poll()
    assert e.value.sqlstate == "57014" and "dropped" in str(e.value), str(e.value)
    with psycopg.connect(server.dsn, autocommit=True) as c:    # SELECT * over a wider stream
        star = unique("is")
        c.execute(f"CREATE STREAM {star} AS SELECT * FROM {q} [RANGE '1 second']")
        c.execute(f"ALTER STREAM {q} ADD COLUMN x INT")
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SELECT * FROM {star} WITH (progress = true, resume_from = '{T0}')")
        assert e.value.sqlstate == "0A000" and "other columns" in str(e.value), str(e.value)


def test_an_aggregate_over_some_of_the_streams_is_not_resumed(server):
    """An aggregate over one stream beside a read of another parts its rows where its own
    stream's BOUNDARYs fall, while progress rows come at the slower stream's watermark: a
    query resumed there would part a row sent whole before it and send its rest again
    (found by the differential tester's resumed named windows). Refused with the reason
    (0A000, a hint); over every stream the query reads, the aggregate goes on."""
    r, q = unique("pr"), unique("pq")
    make_streams(server.dsn, r, q)
    parted = (f"SELECT COUNT(*) AS n, valid_from, valid_to FROM {r} [RANGE '1 hour'] "
              f"UNION ALL SELECT node, valid_from, valid_to FROM {q} [RANGE '1 second']")
    whole = (f"SELECT COUNT(*) AS n, valid_from, valid_to FROM (SELECT node FROM {r} "
             f"[RANGE '1 hour'] UNION ALL SELECT node FROM {q} [RANGE '1 second']) AS u")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"{parted} WITH (progress = true, resume_from = '{T0}')")
        assert e.value.sqlstate == "0A000" and f"reads {r} alone" in str(e.value), \
            str(e.value)
        assert e.value.diag.message_hint
        c.execute("BEGIN")
        c.execute(f"DECLARE w CURSOR FOR {whole} WITH (progress = true, resume_from = '{T0}')")
        c.execute("COMMIT")


def test_progress_rows_need_room_for_the_intervals(server):
    """A column of the answer named valid_from that is not the interval leaves no room for
    the rows' intervals, which progress rows need: 0A000 with a hint, the session goes on."""
    r, q = unique("vr"), unique("vq")
    make_streams(server.dsn, r, q)
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SELECT node AS valid_from FROM {r} [RANGE '1 second'] "
                      "WITH (progress = true)")
        assert e.value.sqlstate == "0A000" and e.value.diag.message_hint
        assert c.execute("SELECT 1").fetchone() == (1,)


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


def test_a_resumed_cursor_over_a_quiet_stream_answers_up_to_its_watermark_at_once(server):
    """Resumed after the stream fell quiet, the cursor's rows up to the stream's watermark come
    at once, with a progress row there: they need not wait for the stream's next BOUNDARY.
    They are the first cursor's rows after its progress row resumed from."""
    r, q = unique("qr"), unique("qq")
    make_streams(server.dsn, r, q)
    first = Resumer(server.dsn, _shapes(("keyed_range", "pattern"), r, q))
    _fed_quietly(server, first, r, q, 9)
    for name in first.cursors:
        _resumed_midway(server, first, name)


def _fed_quietly(server, first: "Resumer", r: str, q: str, seed: int) -> None:
    """80 steps of tuples, punctuation where the data stands at step 43 (a progress row
    there), then quiet past them; ``first`` has read every row."""
    def between(i):
        first.poll()
        if i == 43:
            advance([server.dsn], (r, q), i)
    feed([server.dsn], r, q, range(0, 80), seed, between=between)
    advance([server.dsn], (r, q), 90)
    first.until(instant(90))


def _resumed_midway(server, first: "Resumer", name: str) -> None:
    """``first``'s cursor ``name`` resumed from a progress row in the middle of the data
    gives exactly ``first``'s rows after it."""
    marks = [m for m in first.marks[name] if instant(30) < m < instant(60)]
    assert marks, first.marks[name]
    middle = marks[len(marks) // 2]
    again = Resumer(server.dsn, {name: first.cursors[name]}, since={name: middle})
    again.until(instant(90), timeout=30)
    want = coalesced([x for x in first.committed[name] if middle <= x[-2] < instant(90)])
    assert want, name
    assert coalesced([x for x in again.committed[name] if x[-2] < instant(90)]) == want


# ------------------------------------------------------------------ cutting what was sent
def _table(rows: list, visible: bool):
    """(value, start µs, end µs or None) → the columns a restarted query's rows come in: the
    answer's (its value, and with ``visible`` its valid_from and valid_to), then the hidden
    interval."""
    start = pa.array([r[1] for r in rows], pa.int64()).cast(pa.timestamp("us"))
    end = pa.array([r[2] for r in rows], pa.int64()).cast(pa.timestamp("us"))
    cols = [pa.array([r[0] for r in rows], pa.int64())] + ([start, end] if visible else [])
    names = ["v"] + ["valid_from", "valid_to"] * (2 if visible else 1)
    return pa.Table.from_arrays(cols + [start, end], names=names)


def _coverage(rows) -> dict:
    """{(value, instant): how many rows hold} over the whole µs grid the rows touch."""
    out: dict = {}
    for v, s, e in rows:
        for t in range(s, 40 if e is None else e):
            out[(v, t)] = out.get((v, t), 0) + 1
    return out


@pytest.mark.parametrize("seed", range(200))
def test_cutting_what_the_tail_covered_leaves_exactly_the_rest(seed):
    """A restarted query's rows, cut by the tail (what was sent since the watermark, in other
    pieces), hold at each instant exactly as many times as the answer less the tail: checked
    instant by instant against every row, rows of equal values included; half the cases
    select valid_from and valid_to, which a piece cut at another instant has other values
    of, and which follow the cut."""
    rnd = random.Random(seed)
    visible = seed % 2 == 1
    width, pseudo = (3, {"valid_from": 1, "valid_to": 2}) if visible else (1, {})
    answer = []
    for _ in range(rnd.randrange(1, 8)):
        s = rnd.randrange(0, 30)
        answer.append((rnd.randrange(3), s, None if rnd.random() < 0.1 else
                       rnd.randrange(s + 1, 40)))
    tail, restarted = [], []
    for v, s, e in answer:
        end = 40 if e is None else e
        if rnd.random() < 0.6:                  # the client got a piece of it
            a = rnd.randrange(s, end)
            b = rnd.randrange(a + 1, end + 1)
            tail.append((v, a, None if (b == end and e is None) else b))
        cuts = sorted(rnd.sample(range(s + 1, end), min(2, end - s - 1)))
        bounds = [s, *cuts, end]                # the restart gives it in other pieces
        restarted += [(v, lo, None if (hi == end and e is None) else hi)
                      for lo, hi in zip(bounds, bounds[1:])]
    replay = Replay.of([_table(tail, visible)] if tail else [], width, pseudo)
    replay.upto = INF                           # every row is checked, whatever its start
    got = replay.cut(_table(sorted(restarted, key=lambda r: r[1]), visible), width, pseudo)
    rows = list(zip(got.column(0).to_pylist(),
                    pc.cast(got.column(width), pa.int64()).to_pylist(),
                    pc.cast(got.column(width + 1), pa.int64()).to_pylist()))
    if visible:
        assert got.column(1).equals(got.column(width))
        assert got.column(2).equals(got.column(width + 1))
    want = _coverage(answer)
    for key, n in _coverage(tail).items():
        want[key] -= n
    assert _coverage(rows) == {k: n for k, n in want.items() if n}
    assert not any(replay.covered.values())     # all the tail was found again
