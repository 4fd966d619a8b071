"""Continuous queries through the real server with psycopg: seed 000's worked examples (fig. 17,
Table 6, Table 7) fed with INSERT and read through DECLARE / FETCH, then the life of a query:
blocking FETCH, timeouts, LIMIT, cancel, disconnect, DROP, named windows, derived streams,
snapshot mode, count windows, late tuples, COPY into a stream and the system views."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import psycopg
import pytest

import pgwire
from continuous import Feeder, lit, running, unique, units, wait_running
from continuous import fetch as _fetch, follow as _follow, make_stream as _stream


def _interval_stream(c, name: str) -> None:
    c.execute(f"CREATE STREAM {name} (val DOUBLE, ts TIMESTAMP TIMESTAMPCOLUMN, "
              "te TIMESTAMP ENDTIMESTAMPCOLUMN)")


def _insert(c, name: str, rows) -> None:
    for row in rows:                 # one tuple per statement, as the seed processes them
        c.execute(f"INSERT INTO {name} VALUES (%s, {lit(row[1])}"
                  + (f", {lit(row[2])})" if len(row) > 2 else ")"), [row[0]])


# ---------------------------------------------------------------------- seed 000, golden
def test_fig17_sum(server):
    f = unique("f")
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as conn:
        _interval_stream(feed, f)
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT valid_from, valid_to, SUM(val) FROM {f}")
        _insert(feed, f, [(-1, 1, 4), (-4, 1, 6), (7, 1, 8), (2, 3, 7)])
        feed.execute(f"ALTER STREAM {f} ADVANCE TO {lit(8)}")
        assert _fetch(cur, "FETCH 5 FROM c") == [
            (1, 3, 2.0), (3, 4, 4.0), (4, 6, 5.0), (6, 7, 9.0), (7, 8, 7.0)]
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []


I = [(40, 2, 10), (70, 4, 10), (70, 8, 14), (80, 9, 17)]
II = [(90, 3, 7), (70, 5, 9), (50, 7, 14), (100, 9, 18)]
O = ("SELECT valid_from, valid_to, {n} AS sector, AVG(val) AS avg, "
     "(MIN(val) + MAX(val)) / 2 AS minmax FROM {s}")


def test_table6(server):
    s1, s2 = unique("i"), unique("ii")
    facts = (f"SELECT valid_from, valid_to, sector, avg, minmax FROM (SELECT 1 AS sector, "
             f"AVG(val) AS avg, (MIN(val) + MAX(val)) / 2 AS minmax FROM {s1} UNION ALL "
             f"SELECT 2, AVG(val), (MIN(val) + MAX(val)) / 2 FROM {s2}) AS facts")
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as conn:
        _interval_stream(feed, s1)
        _interval_stream(feed, s2)
        cur = conn.cursor()
        cur.execute(f"DECLARE o1 CURSOR FOR {O.format(n=1, s=s1)}")
        cur.execute(f"DECLARE o2 CURSOR FOR {O.format(n=2, s=s2)}")
        cur.execute(f"DECLARE facts CURSOR FOR {facts}")
        cur.execute(f"DECLARE result CURSOR FOR {facts} WHERE avg > 70")
        merged = sorted([(s1, r) for r in I] + [(s2, r) for r in II], key=lambda x: x[1][1])
        for name, row in merged:
            _insert(feed, name, [row])
        assert _fetch(cur, "FETCH 3 FROM o1") == [
            (2, 4, 1, 40.0, 40.0), (4, 8, 1, 55.0, 55.0), (8, 9, 1, 60.0, 55.0)]
        assert _fetch(cur, "FETCH 3 FROM o2") == [
            (3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0), (7, 9, 2, 60.0, 60.0)]
        assert _fetch(cur, "FETCH 5 FROM facts") == [
            (2, 4, 1, 40.0, 40.0), (3, 5, 2, 90.0, 90.0), (4, 8, 1, 55.0, 55.0),
            (5, 7, 2, 80.0, 80.0), (7, 9, 2, 60.0, 60.0)]
        # as in the seed, the union waits for a tuple on every input before it releases
        # o1's [8, 9); a BOUNDARY on both streams lets it go
        assert _fetch(cur, "FETCH ALL FROM facts WITH (timeout = '200ms')") == []
        feed.execute(f"ALTER STREAM {s2} ADVANCE TO {lit(9)}")
        assert _fetch(cur, "FETCH 1 FROM facts") == [(8, 9, 1, 60.0, 55.0)]
        assert _fetch(cur, "FETCH 2 FROM result") == [
            (3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0)]
        assert _fetch(cur, "FETCH ALL FROM result WITH (timeout = '200ms')") == []


def test_table7_range_window_over_zero_length_tuples(server):
    s = unique("ii0")
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as conn:
        feed.execute(f"CREATE STREAM {s} (val DOUBLE, ts TIMESTAMP TIMESTAMPCOLUMN)")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR {O.format(n=2, s=s + ' [RANGE 10]')}")
        _insert(feed, s, [(90, 3), (70, 5), (50, 7), (100, 9)])
        assert _fetch(cur, "FETCH 3 FROM c") == [
            (3, 5, 2, 90.0, 90.0), (5, 7, 2, 80.0, 80.0), (7, 9, 2, 70.0, 70.0)]


# ---------------------------------------------------------------------- cursors
def _values(rows) -> str:
    return ", ".join(f"({k}, {v}, {lit(t)})" for k, v, t in rows)


def test_fetch_blocks_until_rows_come(server):
    with _follow(server, "blk") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s} WHERE v > 0")
        feeder = Feeder(server.dsn, f"FROM {s}", [
            f"INSERT INTO {s} VALUES {_values([(1, 5, 1), (2, -1, 2)])}",
            f"INSERT INTO {s} VALUES {_values([(3, 7, 3)])}"], delay=0.2)
        assert _fetch(cur, "FETCH 2 FROM c") == [(1, 5), (3, 7)]     # waited for both
        feeder.join_checked()
        assert _fetch(cur, "FETCH 1 FROM c WITH (timeout = '100ms')") == []
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            cur.execute("FETCH PRIOR FROM c")


def test_plain_select_streams_until_limit(server):
    s = unique("lim")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        _stream(conn, s)
        feeder = Feeder(server.dsn, f"FROM {s}", [
            f"INSERT INTO {s} VALUES {_values([(1, 1, 1), (2, 2, 2)])}",
            f"INSERT INTO {s} VALUES {_values([(3, 3, 3), (4, 4, 4)])}"])
        rows = conn.execute(f"SELECT k, valid_from, valid_to FROM {s} [RANGE 2] LIMIT 3")
        assert [(k, units(a), units(b)) for k, a, b in rows] == [(1, 1, 3), (2, 2, 4),
                                                                (3, 3, 5)]
        feeder.join_checked()
        assert running(server.dsn, f"FROM {s}") == 0          # LIMIT ended the query
        assert conn.execute(f"SELECT k FROM {s} LIMIT 0").fetchall() == []


def test_cancel_ends_a_running_select_and_keeps_the_session(server):
    s = unique("cnl")
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        _stream(conn, s)

        def cancel():
            wait_running(server.dsn, f"FROM {s}")
            conn.cancel()

        t = threading.Thread(target=cancel, daemon=True)
        t.start()
        with pytest.raises(psycopg.errors.QueryCanceled) as e:
            conn.execute(f"SELECT * FROM {s}")
        assert e.value.sqlstate == "57014"
        t.join(10)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        wait_running(server.dsn, f"FROM {s}", count=0)


def test_cancel_ends_a_blocking_fetch(server):
    s = unique("cnf")
    with psycopg.connect(server.dsn) as conn:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            _stream(admin, s)
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT * FROM {s}")
        threading.Timer(0.3, conn.cancel).start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            cur.execute("FETCH 5 FROM c")
        conn.rollback()                      # the transaction failed; its cursor is gone
        assert conn.execute("SELECT 2").fetchone() == (2,)
        wait_running(server.dsn, f"FROM {s}", count=0)


def test_query_ends_when_its_client_disconnects(server):
    s = unique("gone")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
    conn = psycopg.connect(server.dsn)
    conn.execute(f"DECLARE c CURSOR FOR SELECT * FROM {s}")
    wait_running(server.dsn, f"FROM {s}")
    conn.close()                                            # a polite goodbye (Terminate)
    wait_running(server.dsn, f"FROM {s}", count=0)
    # a client that vanishes in the middle of a blocking FETCH, without a word
    raw = pgwire.Client(server.port)
    raw.send(pgwire.query(f"BEGIN; DECLARE c CURSOR FOR SELECT * FROM {s}"))
    raw.until(b"Z")
    raw.send(pgwire.query("FETCH 10 FROM c"))
    wait_running(server.dsn, f"FROM {s}")
    raw.sock.shutdown(socket.SHUT_RDWR)
    raw.close()
    wait_running(server.dsn, f"FROM {s}", count=0)


def test_query_ends_on_close_and_commit(server):
    s = unique("cls")
    with psycopg.connect(server.dsn) as conn:
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            _stream(admin, s)
        conn.execute(f"DECLARE a CURSOR FOR SELECT k FROM {s}")
        conn.execute(f"DECLARE b CURSOR FOR SELECT v FROM {s}")
        conn.execute(f"DECLARE h CURSOR WITH HOLD FOR SELECT t FROM {s}")
        wait_running(server.dsn, f"FROM {s}", count=3)
        conn.execute("CLOSE a")
        wait_running(server.dsn, f"FROM {s}", count=2)
        conn.commit()                                  # b ends with the transaction, h stays
        wait_running(server.dsn, f"FROM {s}", count=1)
        conn.execute("CLOSE h")
        wait_running(server.dsn, f"FROM {s}", count=0)


def test_drop_stream_ends_its_queries_with_an_error(server):
    s = unique("drp")
    with psycopg.connect(server.dsn) as conn, \
            psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT * FROM {s}")
        with pytest.raises(psycopg.errors.DependentObjectsStillExist,
                           match="running queries read it") as e:
            admin.execute(f"DROP STREAM {s}")          # PostgreSQL's habit: say CASCADE
        assert "CASCADE" in e.value.diag.message_hint
        admin.execute(f"DROP STREAM {s} CASCADE")
        with pytest.raises(psycopg.errors.QueryCanceled, match="dropped"):
            cur.execute("FETCH 1 FROM c")


# ---------------------------------------------------------------------- relations
def test_named_window_derived_stream_and_snapshot_reads(server):
    s, w, d = unique("src"), unique("win"), unique("der")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        _stream(admin, s)
        admin.execute(f"CREATE WINDOW {w} AS SELECT k, SUM(v) AS total FROM {s} [RANGE 10] "
                      "GROUP BY k")
        admin.execute(f"CREATE STREAM {d} AS SELECT k, v * 10 AS v10 FROM {s} WHERE v > 1")
        cur = conn.cursor()
        # Stream(w) follows the window's rows; w alone is read once, at now
        cur.execute(f"DECLARE cw CURSOR FOR SELECT k, total, valid_from FROM Stream({w}) "
                    "WHERE total > 3")
        cur.execute(f"DECLARE cd CURSOR FOR SELECT k, v10 FROM {d}")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 2, 1), (1, 3, 2), (2, 1, 3)])}")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(4)}")
        assert _fetch(cur, "FETCH 1 FROM cw") == [(1, 5, 2)]
        assert _fetch(cur, "FETCH 2 FROM cd") == [(1, 20), (1, 30)]
        # a one-time SELECT from the window: its contents at now (the latest tuple's time)
        assert sorted(admin.execute(f"SELECT k, total FROM {w}").fetchall()) == [(1, 5),
                                                                                  (2, 1)]
        # snapshot mode: stream references are evaluated at now (4: ADVANCE moved it), and
        # ORDER BY applies
        admin.execute("SET cq.mode = snapshot")
        assert admin.execute(f"SELECT k, v FROM {s} [RANGE 3] ORDER BY v DESC").fetchall() \
            == [(1, 3), (2, 1)]
        assert admin.execute(f"SELECT count(*) FROM {s} [UNBOUNDED]").fetchone() == (3,)
        admin.execute("RESET cq.mode")
        kinds = dict(admin.execute("SELECT name, kind FROM cq_queries WHERE pid IS NULL")
                     .fetchall())
        assert kinds[w] == "window" and kinds[d] == "derived"


def test_snapshot_mode_from_startup_options(server):
    s = unique("opt")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 4, 1), (2, 6, 2)])}")
    with psycopg.connect(server.dsn + " options='-c cq.mode=snapshot'",
                         autocommit=True) as bi:
        assert bi.execute(f"SELECT max(v) FROM {s} [NOW]").fetchone() == (6,)


def test_windows_survive_restart(start_server, tmp_path):
    srv = start_server(data_dir=str(tmp_path / "data"))
    with psycopg.connect(srv.dsn, autocommit=True) as c:
        _stream(c, "rs")
        c.execute("CREATE WINDOW rw AS SELECT k, COUNT(*) AS n FROM rs [RANGE 5] GROUP BY k")
    srv.stop()
    srv = start_server(data_dir=str(tmp_path / "data"))
    with psycopg.connect(srv.dsn, autocommit=True) as c, psycopg.connect(srv.dsn) as r:
        cur = r.cursor()
        cur.execute("DECLARE c CURSOR FOR SELECT k, n FROM Stream(rw)")
        c.execute(f"INSERT INTO rs VALUES {_values([(7, 0, 1), (7, 0, 2)])}")
        assert _fetch(cur, "FETCH 1 FROM c") == [(7, 1)]
        assert c.execute("SELECT kind FROM cq_queries WHERE name = 'rw'").fetchone() == \
            ("window",)


# ---------------------------------------------------------------------- windows and input
def test_rows_window(server):
    with _follow(server, "rows") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT valid_from, valid_to, SUM(v) FROM {s} "
                    "[PARTITION BY k ROWS 2 WHERE v > 0]")
        admin.execute(f"INSERT INTO {s} VALUES "
                      + _values([(1, 1, 1), (2, 5, 2), (1, -9, 3), (1, 2, 4), (1, 3, 5)]))
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(5)}")    # tuples still open: split
        # k=1 keeps its last two positive values: {1} {1,2} {2,3}; k=2 adds 5 from 2 on
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 2, 1), (2, 4, 6), (4, 5, 8)]


def test_late_tuples_are_counted_and_reported(server):
    s = unique("late")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        c.execute(f"INSERT INTO {s} VALUES {_values([(1, 1, 10)])}")
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute(f"INSERT INTO {s} VALUES {_values([(2, 2, 5), (3, 3, 11)])}")
        assert any("1 tuple(s) earlier than the watermark" in n for n in notices)
        assert c.execute("SELECT tuples, late FROM cq_streams WHERE stream = %s",
                         [s]).fetchone() == (2, 1)


def test_copy_into_a_stream(server):
    with _follow(server, "cpy") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        with admin.cursor().copy(f"COPY {s} (t, k, v) FROM STDIN") as cp:
            cp.write_row(("2026-11-01 00:00:01", 1, 10))
            cp.write_row(("2026-11-01 00:00:02", 2, 20))
        assert _fetch(cur, "FETCH 2 FROM c") == [(1, 10), (2, 20)]


def test_inserting_into_a_window_or_deleting_from_a_stream_fails(server):
    s, w = unique("ro"), unique("row")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _stream(c, s)
        c.execute(f"CREATE WINDOW {w} AS SELECT k FROM {s} [NOW]")
        with pytest.raises(psycopg.errors.WrongObjectType):
            c.execute(f"INSERT INTO {w} VALUES (1)")
        with pytest.raises(psycopg.errors.WrongObjectType):
            c.execute(f"DELETE FROM {s}")
        with pytest.raises(psycopg.errors.UndefinedColumn):
            c.execute(f"INSERT INTO {s} (nope) VALUES (1)")
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_system_views(server):
    with _follow(server, "sys") as (s, admin, cur):
        cur.execute(f"DECLARE mine CURSOR FOR SELECT k, COUNT(*) FROM {s} [RANGE 5] GROUP BY k")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 1, 1), (2, 2, 2), (1, 3, 3)])}")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(4)}")
        assert _fetch(cur, "FETCH 2 FROM mine") == [(1, 1), (2, 1)]
        row = admin.execute("SELECT name, kind, state, rows_in, rows_out, started IS NOT NULL,"
                            " last_emit IS NOT NULL FROM cq_queries WHERE query LIKE %s",
                            [f"%FROM {s}%"]).fetchone()
        assert row[:2] == ("mine", "cursor") and row[3] == 3 and row[4] >= 2 and all(row[5:])
        st = admin.execute("SELECT tuples, watermark FROM cq_streams WHERE stream = %s",
                           [s]).fetchone()
        assert st[0] == 3 and units(st[1]) == 4              # ADVANCE TO moved it past 3


def test_time_moves_with_advance(server):
    with _follow(server, "adv") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT valid_from, valid_to, COUNT(*) FROM {s} "
                    "[RANGE 2]")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 1, 1)])}")
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(5)}")
        assert _fetch(cur, "FETCH 2 FROM c") == [(1, 3, 1), (3, 5, 0)]
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            admin.execute(f"ALTER STREAM {s} ADVANCE TO NULL")


def test_backend_restart_fails_cursors_not_the_server(server):
    s = unique("crash")
    with psycopg.connect(server.dsn) as conn, \
            psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT * FROM {s}")
        pid = _backend_pid(server.proc.pid)
        import os
        import signal
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(psycopg.errors.CrashShutdown):
            cur.execute("FETCH 1 FROM c WITH (timeout = '10s')")
        conn.rollback()
        deadline = time.monotonic() + 20
        while _backend_pid(server.proc.pid) in (None, pid):
            assert time.monotonic() < deadline, "the back end did not restart"
            time.sleep(0.1)
        cur.execute(f"DECLARE d CURSOR FOR SELECT k FROM {s}")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(5, 0, 1)])}")
        assert _fetch(cur, "FETCH 1 FROM d") == [(5,)]


def _backend_pid(parent: int) -> int | None:
    import os
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == parent and b"executor.backend" in cmd:
            return int(p)
    return None


# ---------------------------------------------------------------------- joins
def test_stream_table_join_uses_the_table_as_it_stands(server):
    s, nodes = unique("sens"), unique("nodes")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        _stream(admin, s)
        admin.execute(f"CREATE TABLE {nodes} (k INT PRIMARY KEY, room TEXT)")
        admin.execute(f"INSERT INTO {nodes} VALUES (1, 'lab'), (2, 'hall')")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT n.room, s.v FROM {s} [NOW] AS s, {nodes} n "
                    "WHERE s.k = n.k")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 10, 1), (3, 30, 2)])}")
        assert _fetch(cur, "FETCH 1 FROM c") == [("lab", 10)]
        admin.execute(f"UPDATE {nodes} SET room = 'attic' WHERE k = 1")
        admin.execute(f"INSERT INTO {nodes} VALUES (3, 'cellar')")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 11, 3), (3, 31, 4)])}")
        assert _fetch(cur, "FETCH 2 FROM c") == [("attic", 11), ("cellar", 31)]


def test_windowed_stream_stream_join(server):
    a, b = unique("ja"), unique("jb")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        _stream(admin, a)
        _stream(admin, b)
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT x.k, x.v, y.v, valid_from, valid_to "
                    f"FROM {a} [RANGE 3] AS x, {b} [RANGE 2] AS y WHERE x.k = y.k AND x.v < y.v")
        admin.execute(f"INSERT INTO {a} VALUES {_values([(1, 1, 1), (2, 5, 2)])}")
        admin.execute(f"INSERT INTO {b} VALUES {_values([(1, 3, 2), (2, 4, 3)])}")
        admin.execute(f"ALTER STREAM {a} ADVANCE TO {lit(5)}")
        admin.execute(f"ALTER STREAM {b} ADVANCE TO {lit(5)}")
        assert _fetch(cur, "FETCH 1 FROM c") == [(1, 1, 3, 2, 4)]
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []


# ---------------------------------------------------------------------- user aggregates
def test_user_defined_aggregates(start_server):
    here = os.path.dirname(os.path.abspath(__file__))
    clients = os.path.join(os.path.dirname(here), "clients", "python")
    srv = start_server("--aggregate", "summary=aggregates:Summary", "--aggregate",
                       "median=aggregates:Median",
                       env={"PYTHONPATH": clients + os.pathsep + os.environ.get("PYTHONPATH",
                                                                                  "")})
    with psycopg.connect(srv.dsn, autocommit=True) as admin, psycopg.connect(srv.dsn) as conn:
        admin.execute("CREATE STREAM ua (val DOUBLE, ts TIMESTAMP TIMESTAMPCOLUMN, "
                      "te TIMESTAMP ENDTIMESTAMPCOLUMN)")
        cur = conn.cursor()
        cur.execute("DECLARE c CURSOR FOR SELECT valid_from, valid_to, median(val), "
                    "summary(val) FROM ua")
        _insert(admin, "ua", I)                       # Table 6's stream I
        admin.execute(f"ALTER STREAM ua ADVANCE TO {lit(9)}")
        rows = _fetch(cur, "FETCH 3 FROM c")
        assert [r[:3] for r in rows] == [(2, 4, 40.0), (4, 8, 55.0), (8, 9, 70.0)]
        assert json.loads(rows[2][3]) == {"min": 40.0, "max": 70.0, "avg": 60.0, "med": 70.0}


def test_streaquel_loop_over_live_data(server):
    with _follow(server, "loop") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT wtime(*), valid_to, COUNT(*), SUM(v) FROM {s} "
                    f"for (t = ST; t < ST + 12; t += 3) {{ WindowIs({s}, t - 2, t) }}")
        admin.execute(f"INSERT INTO {s} VALUES "
                      + _values([(0, 1, 0), (0, 2, 1), (0, 3, 2), (0, 4, 4), (0, 5, 8)]))
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(12)}")
        # ST is the first tuple's time (0); iteration t answers over [t - 2, t] until t + 3
        assert _fetch(cur, "FETCH 4 FROM c") == [(0, 3, 1, 1), (3, 6, 2, 5), (6, 9, 1, 4),
                                                 (9, 12, 1, 5)]


def test_system_views_inside_transactions(server):
    """Inside a transaction the system views are read as they stand (not as at its start):
    the query another transaction declares, and the tuples a stream got, show at once."""
    s = unique("sv")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as a, psycopg.connect(server.dsn) as b:
        _stream(admin, s)
        assert b.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                         [f"%FROM {s}%"]).fetchone() == (0,)
        a.execute(f"DECLARE c CURSOR FOR SELECT k FROM {s} WHERE v > 0")
        admin.execute(f"INSERT INTO {s} VALUES {_values([(1, 1, 1), (2, 2, 2)])}")
        for conn in (a, b):
            assert conn.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                                [f"%FROM {s}%"]).fetchone() == (1,)
            assert conn.execute("SELECT tuples FROM cq_streams WHERE stream = %s",
                                [s]).fetchone() == (2,)
        a.execute("CLOSE c")
        assert b.execute("SELECT count(*) FROM cq_queries WHERE query LIKE %s",
                         [f"%FROM {s}%"]).fetchone() == (0,)


