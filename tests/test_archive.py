"""Archived streams through the real server: every tuple (late ones too) kept as Parquet in
time fragments that DuckDB reads on its own, small files compacted, acknowledged COPY rows
surviving ``kill -9``, and PostgreSQL's habits when dropping."""
from __future__ import annotations

import datetime as dt
import glob
import os
import signal
import threading
import time

import duckdb
import psycopg
import pytest

from conftest import ServerProcess
from continuous import at, lit, unique, wait_for


def _archive(srv, stream: str) -> str:
    return os.path.join(srv.data_dir, "archive", f"public.{stream}")


def _read(srv, stream: str) -> list:
    """The archive as DuckDB reads it, independently of the server."""
    files = glob.glob(os.path.join(_archive(srv, stream), "fragment=*", "*.parquet"))
    if not files:
        return []
    return duckdb.sql(f"SELECT k, v, t, fragment FROM read_parquet({files!r}, "
                      "hive_partitioning = true) ORDER BY v").fetchall()


def _archived(srv, stream: str):
    """The archive's tuples (an Arrow table DuckDB queries by its name), read while the server
    may be compacting it: a part merged away between listing and reading is listed again,
    and a tuple seen in both a part and its merged file counts once (the tests' tuples are
    distinct)."""
    deadline = time.monotonic() + 20
    while True:
        files = glob.glob(os.path.join(_archive(srv, stream), "fragment=*", "*.parquet"))
        try:
            return duckdb.sql(f"SELECT DISTINCT * FROM read_parquet({files!r})").to_arrow_table()
        except duckdb.IOException:
            assert time.monotonic() < deadline, "the archive's files kept changing"
            time.sleep(0.05)


def test_an_archived_stream_keeps_every_tuple_in_time_fragments(server):
    s = unique("arch")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED "
                  "WITH (fragment = '10 seconds')")
        for v, t in [(1, 1), (2, 12), (3, 25), (4, 3)]:        # 4 comes late
            c.execute(f"INSERT INTO {s} VALUES (0, {v}, {lit(t)})")
        assert c.execute("SELECT late FROM cq_streams WHERE stream = %s", [s]).fetchone() == (1,)
    rows = _read(server, s)
    assert [(v, t) for _, v, t, _ in rows] == [(1, at(1)), (2, at(12)), (3, at(25)), (4, at(3))]
    # each fragment is named by its start, Unix µs (event times are UTC)
    base = int(at(0).replace(tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
    assert [f for *_, f in rows] == [base, base + 10_000_000, base + 20_000_000, base]


def test_small_files_are_compacted(server):
    s = unique("cmp")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED")
        for v in range(12):                                    # twelve files, one fragment
            c.execute(f"INSERT INTO {s} VALUES (0, {v}, {lit(v)})")
    folder = glob.glob(os.path.join(_archive(server, s), "fragment=*"))
    assert len(folder) == 1
    # the server merges them within its next round (every 5 s): the wait is generous, as
    # every wait here, for a busy machine (once 30 s did not do, beside a Spark test)
    wait_for(lambda: len(glob.glob(os.path.join(folder[0], "*.parquet"))) == 1, 60,
             "the fragment's twelve files merged into one")
    assert [v for _, v, _, _ in _read(server, s)] == list(range(12))


def test_drop_stream_takes_its_archive_and_says_cascade_while_read(server):
    s = unique("dra")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED")
        admin.execute(f"INSERT INTO {s} VALUES (0, 1, {lit(1)})")
        assert os.path.isdir(_archive(server, s))
        conn.execute(f"DECLARE c CURSOR FOR SELECT v FROM {s}")
        with pytest.raises(psycopg.errors.DependentObjectsStillExist):
            admin.execute(f"DROP STREAM {s}")
        assert os.path.isdir(_archive(server, s))              # nothing happened
        admin.execute(f"DROP STREAM {s} CASCADE")
        assert not os.path.exists(_archive(server, s))


def test_acknowledged_copy_rows_survive_kill_9(tmp_path):
    data = str(tmp_path / "data")
    srv = ServerProcess(data)
    acked = []
    stop = threading.Event()
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM durable (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED WITH (fragment = '1 minute')")

        def copy_until_killed():
            n = 0
            try:
                with psycopg.connect(srv.dsn, autocommit=True) as c:
                    while not stop.is_set():
                        with c.cursor().copy("COPY durable FROM STDIN") as cp:
                            for _ in range(500):
                                cp.write_row((0, n, at(n / 1000)))
                                n += 1
                        acked.append(n)               # COPY returned: these rows are durable
            except psycopg.Error:
                pass                                  # the server died mid-COPY
        writer = threading.Thread(target=copy_until_killed, daemon=True)
        writer.start()
        deadline = time.monotonic() + 30
        while len(acked) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        stop.set()
        writer.join(30)
    finally:
        srv.stop()
    assert len(acked) >= 5
    srv = ServerProcess(data)                             # the archive is recovered at start
    try:
        files = glob.glob(os.path.join(data, "archive", "public.durable", "*", "*.parquet"))
        kept = duckdb.sql(f"SELECT count(*), count(DISTINCT v), min(v) FROM read_parquet("
                          f"{files!r})").fetchall()[0]
        assert kept[0] == kept[1] >= acked[-1] and kept[2] == 0   # nothing lost, no duplicate
        assert not glob.glob(os.path.join(data, "archive", "**", ".*.tmp"), recursive=True)
    finally:
        srv.stop()


def test_a_snapshot_reading_a_stream_through_a_range_and_a_rows_window_reads_its_archive(
        server):
    """A snapshot reads an archived stream's history as far back as its RANGE window
    reaches; a ROWS window over the same stream needs more (the last tuple of each key, the
    oldest 4 seconds before the RANGE's reach): it gets the whole archive, as SQL over every
    tuple says. Before, it got only the RANGE's reach."""
    s = unique("both")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED")
        c.execute(f"INSERT INTO {s} VALUES (2, 3, {lit(10)}), (0, 2, {lit(14)})")
        c.execute(f"ALTER STREAM {s} ADVANCE TO {lit(14.5)}")
        c.execute("SET cq.mode = snapshot")
        both = c.execute(f"SELECT k, 'range' FROM {s} [RANGE '2 seconds'] UNION ALL "
                         f"SELECT k, 'rows' FROM {s} [PARTITION BY k ROWS 1]").fetchall()
        assert sorted(both) == [(0, "range"), (0, "rows"), (2, "rows")]


@pytest.mark.parametrize("query, first", [
    ("SELECT count(*), valid_from, valid_to FROM {s} [RANGE '2 seconds']", (0,)),
    ("SELECT count(*), valid_from, valid_to FROM {s} [NOW]", (0,)),
    ("SELECT median(v), valid_from, valid_to FROM {s} [RANGE '5 seconds']", (None,)),
    ("SELECT {t}.z, valid_from, valid_to FROM {s} [RANGE '3 seconds'] FULL JOIN {t} USING (k)",
     (-1,)),
    ("SELECT *, valid_from, valid_to FROM (SELECT MIN(v) AS lo, AVG(v) AS mean FROM {s} "
     "[RANGE '2 seconds'] ORDER BY 1, 2 LIMIT 1) AS top", (None, None)),
])
def test_a_query_primed_where_its_archive_holds_nothing_answers_from_its_start(
        server, query, first):
    """Its windows reach into an archive that holds no tuple before the query starts: its
    answer over the empty windows (an aggregate without GROUP BY, a table's rows padded, a
    query on each instant's snapshot) holds from the instant it started, as SQL on the
    snapshot then says, not from the stream's next BOUNDARY."""
    s, t = unique("empty"), unique("pads")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED")
        admin.execute(f"CREATE TABLE {t} (k INT, z INT)")
        admin.execute(f"INSERT INTO {t} VALUES (1, -1)")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(5)}")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR {query.format(s=s, t=t)}")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(8)}")
        cur.execute("FETCH ALL FROM c WITH (timeout = '5s')")
        assert cur.fetchall() == [(*first, at(5), at(8))]


def _fetched_past(cur, end: dt.datetime, column: int) -> list:
    """Cursor c's rows, fetched until the last one's valid_to (its ``column``) is ``end`` or
    later."""
    rows: list = []
    while not rows or rows[-1][column] is None or rows[-1][column] < end:
        cur.execute("FETCH ALL FROM c WITH (timeout = '5s')")
        more = cur.fetchall()
        assert more, rows
        rows += more
    return rows


def _joined(rows: list) -> list:
    """(value, valid_from, valid_to) rows in order, a row split at a BOUNDARY made one."""
    out: list = []
    for v, start, end in rows:
        if out and out[-1][0] == v and out[-1][2] == start:
            out[-1] = (v, out[-1][1], end)
        else:
            out.append((v, start, end))
    return out


def test_a_now_window_declared_while_its_stream_stands_still_answers_from_its_start(server):
    """[NOW] reaches back to its start's own instant: declared while the stream stands still
    at a tuple's instant, the cursor counts that tuple there and then answers COUNT(*) = 0
    until the next tuple, as SQL on each snapshot does, rather than from the stream's next
    BOUNDARY (found by the differential tester's primed readings)."""
    s = unique("still")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED")
        admin.execute(f"INSERT INTO {s} VALUES (0, 1, {lit(3)}), (0, 2, {lit(5)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(5)}")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT count(*), valid_from, valid_to FROM {s} "
                    "[NOW]")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(8)}")
        admin.execute(f"INSERT INTO {s} VALUES (0, 3, {lit(9)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")
        rows = _fetched_past(cur, at(10), 2)
        µs = dt.timedelta(microseconds=1)
        assert _joined(rows) == [(1, at(5), at(5) + µs), (0, at(5) + µs, at(9)),
                                 (1, at(9), at(9) + µs), (0, at(9) + µs, at(10))]


def test_an_aggregate_without_group_by_primed_after_its_last_tuple_counts_it(server):
    """Declared while the stream's watermark stands past its last tuple (punctuation), a
    RANGE aggregate without GROUP BY answers from the start with the window's value then,
    the tuples before it counted and the row with its whole interval (it answered COUNT(*)
    = 0 over a full window until the next tuple)."""
    s = unique("past")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED")
        admin.execute(f"INSERT INTO {s} VALUES " + ", ".join(
            f"({v}, {lit(v)})" for v in range(1, 6)))
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(7)}")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT count(*), valid_from, valid_to FROM {s} "
                    "[RANGE '1 hour']")
        admin.execute(f"INSERT INTO {s} VALUES (8, {lit(8)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(9)}")
        assert _fetched_past(cur, at(8), 2)[:1] == [(5, at(5), at(8))]


@pytest.mark.parametrize("other", ["[UNBOUNDED]", "[ROWS 2]", "[NOW]"])
def test_a_stream_read_also_without_reaching_back_takes_none_of_the_history(server, other):
    """A cursor reads one archived stream through a window that reaches back (primed from
    the archive) and through one that starts with the query ([UNBOUNDED], ROWS) or reaches
    back only to its start's instant ([NOW]): the second read gets no tuple from before the
    cursor's start (priming reads the stream's history for the first), as SQL over the
    tuples since the start says; the first counts them all."""
    s = unique("both")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED")
        admin.execute(f"INSERT INTO {s} VALUES " + ", ".join(
            f"(0, {v}, {lit(v)})" for v in range(1, 6)))
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT 'reach' AS w, count(*) AS n, valid_from "
                    f"FROM {s} [RANGE '1 hour'] UNION ALL SELECT 'other', count(*), "
                    f"valid_from FROM {s} {other}")
        admin.execute(f"INSERT INTO {s} VALUES (0, 6, {lit(6)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(7)}")
        rows: dict = {"reach": [], "other": []}
        while min((r[-1][1] for r in rows.values() if r), default=at(0)) < at(6) or \
                not all(rows.values()):
            got = cur.execute("FETCH ALL FROM c WITH (timeout = '5s')").fetchall()
            assert got, rows
            for w, n, start in got:
                rows[w].append((n, start))
    µs = dt.timedelta(microseconds=1)
    assert rows["reach"][:2] == [(5, at(5)), (6, at(6))], rows
    want = [(1, at(5)), (0, at(5) + µs), (1, at(6))] if other == "[NOW]" else \
        [(0, at(5)), (1, at(6))]
    assert [r for r in rows["other"] if r[1] <= at(6)] == want, rows


@pytest.mark.parametrize("where", ["", "WHERE v % 2 = 0"])
def test_a_window_reaching_into_the_past_starts_from_the_archive(server, where):
    """The seam: tuples before and after the query starts, each counted exactly once in the
    window's aggregate, at every instant (checked against DuckDB over all the tuples); also
    when the window's tuples are filtered (the filter then runs below the window)."""
    s = unique("seam")
    before = [(v, v) for v in range(1, 11)]                 # (v, t): one a second
    after = [(v, v) for v in range(11, 21)]
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED WITH (fragment = '5 seconds')")
        for v, t in before:
            admin.execute(f"INSERT INTO {s} VALUES (0, {v}, {lit(t)})")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT count(*), sum(v), valid_from, valid_to "
                    f"FROM {s} [RANGE '8 seconds'] {where}")
        for v, t in after:
            admin.execute(f"INSERT INTO {s} VALUES (0, {v}, {lit(t)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(30)}")
        rows = _fetched_past(cur, at(30), 3)
        everything = duckdb.sql("SELECT * FROM (VALUES " + ", ".join(
            f"({v}, TIMESTAMP '{at(t).isoformat(sep=' ')}')" for v, t in before + after)
            + ") AS x(v, t)")
        for count, total, frm, to in rows:
            assert to > at(10)                   # the answer starts where live data took over
            inst = max(frm, at(10))              # an instant in the row's interval, ≥ the seam
            want = duckdb.sql(f"SELECT count(*), sum(v) FROM everything WHERE t > TIMESTAMP "
                              f"'{inst - dt.timedelta(seconds=8)}' AND t <= TIMESTAMP "
                              f"'{inst}' {where.replace('WHERE', 'AND')}").fetchall()[0]
            assert (count, total) == want, (frm, to)
        assert rows[0][2] <= at(10) < rows[0][3]
        kept = [v for v in range(3, 11) if not where or v % 2 == 0]
        assert rows[0][:2] == (len(kept), sum(kept))     # primed: the 8 seconds up to 10


def _restarted(tmp_path, statements: list) -> ServerProcess:
    """A server started again over the data directory of one that made the archived stream
    trips and ran ``statements``, then stopped."""
    data = str(tmp_path / "data")
    srv = ServerProcess(data)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            c.execute("CREATE STREAM trips (v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED "
                      "WITH (fragment = '5 seconds')")
            for sql in statements:
                c.execute(sql)
    finally:
        srv.stop()
    return ServerProcess(data)


def test_after_a_restart_named_queries_resume_from_the_archive(tmp_path):
    """A derived stream and a named window over an archived stream's last 8 seconds: after a
    restart they start again primed from the archive, so the first live tuple's answer counts
    the tuples from before the restart; a tuple older than the archive's newest is late."""
    srv = _restarted(tmp_path, [
        "CREATE STREAM recent AS SELECT count(*) AS n, sum(v) AS total "
        "FROM trips [RANGE '8 seconds']",
        "CREATE WINDOW last8 AS SELECT v, t FROM trips [RANGE '8 seconds']",
        *(f"INSERT INTO trips VALUES ({v}, {lit(v)})" for v in range(1, 11))])  # 1 a second
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as admin, \
                psycopg.connect(srv.dsn) as conn:
            cur = conn.cursor()
            cur.execute("DECLARE r CURSOR FOR SELECT n, total FROM recent")
            admin.execute(f"INSERT INTO trips VALUES (11, {lit(11)})")
            admin.execute(f"INSERT INTO trips VALUES (99, {lit(5)})")       # late now
            # the named window, read at now (11 s), holds 4..11 and the late tuple: read at
            # now, an archived stream's window comes from the archive, late tuples and all
            assert admin.execute("SELECT count(*), sum(v) FROM last8").fetchone() == \
                (9, sum(range(4, 12)) + 99)
            admin.execute(f"ALTER STREAM trips ADVANCE TO {lit(30)}")
            cur.execute("FETCH 2 FROM r WITH (timeout = '10s')")
            # at the seam (10 s, the archive's newest) the 8 seconds 3..10, then at 11 s
            # 4..11: the tuples from before the restart are counted
            assert cur.fetchall() == [(8, sum(range(3, 11))), (8, sum(range(4, 12)))]
            late = admin.execute("SELECT late FROM cq_streams WHERE stream = 'trips'").fetchone()
            assert late == (1,)
    finally:
        srv.stop()


def test_after_a_restart_derived_streams_hold_what_they_read_since_their_birth(tmp_path):
    """A derived stream over [UNBOUNDED] and a named window over [ROWS 3] keep where their
    queries began (the stream's watermark then): after a restart they read the archive from
    there, so the tally counts the tuples since it was created and no earlier one, and the
    window holds its last three; a cursor over the tally, declared after the restart, starts
    with the rows valid then and EXPLAIN shows the instant it reads from. A window that reads
    the stream by arrival starts empty again (it has no event time to begin at)."""
    srv = _restarted(tmp_path, [
        *(f"INSERT INTO trips VALUES ({v}, {lit(v)})" for v in range(1, 4)),   # before them
        "CREATE STREAM tally AS SELECT count(*) AS n, sum(v) AS total FROM trips",
        "CREATE WINDOW last3 AS SELECT v FROM trips [ROWS 3]",
        # (by arrival: no event time to begin at, so it starts with its query again)
        "CREATE WINDOW arrived AS SELECT v FROM trips [ROWS 2 ON ARRIVAL]",
        *(f"INSERT INTO trips VALUES ({v}, {lit(v)})" for v in range(4, 11))])
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as admin, \
                psycopg.connect(srv.dsn) as conn:
            plan = [x for (x,) in admin.execute("EXPLAIN SELECT n, total FROM tally")]
            born = (at(3) + dt.timedelta(microseconds=1)).isoformat(sep=" ")
            assert any(f"stream trips [ts t] from {born}" in x for x in plan), plan
            assert sorted(admin.execute("SELECT v FROM last3").fetchall()) == [(8,), (9,), (10,)]
            assert admin.execute("SELECT v FROM arrived").fetchall() == []
            cur = conn.cursor()
            cur.execute("DECLARE r CURSOR FOR SELECT n, total FROM tally")
            admin.execute(f"INSERT INTO trips VALUES (11, {lit(11)})")
            admin.execute(f"ALTER STREAM trips ADVANCE TO {lit(30)}")
            cur.execute("FETCH 2 FROM r WITH (timeout = '10s')")
            assert cur.fetchall() == [(7, sum(range(4, 11))), (8, sum(range(4, 12)))]
    finally:
        srv.stop()


def test_recompute_answers_what_late_tuples_changed(server):
    """Live processing skips tuples later than the slack; RECOMPUTE runs the query over the
    archive as though they had come in time. Each recomputed row is checked against DuckDB
    over the archived tuples, late ones included, and the late tuples' rows are among them."""
    s = unique("late")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED "
                  "WITH (fragment = '10 seconds')")
        heard = []
        c.add_notice_handler(lambda d: heard.append(d.message_primary))
        nothing = c.execute(f"RECOMPUTE SELECT count(*) FROM {s} [RANGE '5 seconds']")
        assert nothing.fetchall() == [] and "nothing to recompute" in heard[-1]
        assert [d.name for d in nothing.description] == ["count", "valid_from", "valid_to"]
        for v in range(1, 26):
            c.execute(f"INSERT INTO {s} VALUES ({v}, {lit(v)})")
        c.execute(f"INSERT INTO {s} VALUES (100, {lit(7.5)}), (200, {lit(13.5)})")    # late
        assert c.execute(f"SELECT late FROM cq_streams WHERE stream = '{s}'").fetchone() == (2,)
        archived = _archived(server, s)

        rows = c.execute(f"RECOMPUTE SELECT count(*) AS n, sum(v) AS total "
                         f"FROM {s} [RANGE '5 seconds']").fetchall()
        assert [r[2] for r in rows] == sorted(r[2] for r in rows)     # valid_from order
        for n, total, frm, to in rows:
            # each row meets a late tuple's reach: [7.5, 12.5) or [13.5, 18.5)
            assert any(frm < at(a + 5) and (to is None or to > at(a)) for a in (7.5, 13.5))
            want = duckdb.sql(f"SELECT count(*), sum(v) FROM archived WHERE t > TIMESTAMP "
                              f"'{frm - dt.timedelta(seconds=5)}' AND t <= TIMESTAMP "
                              f"'{frm}'").fetchall()[0]
            assert (n, total) == want, frm
        late_rows = [r for r in rows if r[2] <= at(7.5) < (r[3] or at(99))]
        assert late_rows and late_rows[0][0] == 6          # 3..7 and the late 7.5
        # a hopping window: whole slides, each checked the same way
        rows = c.execute(f"RECOMPUTE SELECT count(*), wtime(*) FROM {s} "
                         f"[RANGE '10 seconds' SLIDE '10 seconds'] ORDER BY 2").fetchall()
        assert rows and all(r[2] == r[1] for r in rows)     # valid_from is the slide's τ
        for n, tau, frm, to in rows:
            want = duckdb.sql(f"SELECT count(*) FROM archived WHERE t > TIMESTAMP "
                              f"'{tau - dt.timedelta(seconds=10)}' AND t <= TIMESTAMP "
                              f"'{tau}'").fetchall()[0][0]
            assert n == want, tau
        assert (11, at(10)) in [(n, tau) for n, tau, _, _ in rows]   # 1..10 and 7.5
        plan = [r[0] for r in c.execute(f"EXPLAIN RECOMPUTE SELECT v FROM {s}").fetchall()]
        assert plan[0] == "recompute (back end, over the archive) → v"
        # what cannot be recomputed says why
        plain = unique("plain")
        c.execute(f"CREATE STREAM {plain} (v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="not archived"):
            c.execute(f"RECOMPUTE SELECT count(*) FROM {plain} [RANGE '5 seconds']")
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_streaquel_loops_reaching_back_start_from_the_archive(server):
    """A loop whose variable moves backwards from NOW, and one that starts before ST, over an
    archived stream: ST and NOW are when the query started (the seam), each iteration's
    window is read from the archive (checked against DuckDB) or live, and the answers come
    in valid_from order, each valid for one step from its t."""
    s = unique("loop")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        admin.execute(f"CREATE STREAM {s} (v INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED "
                      "WITH (fragment = '10 seconds')")
        admin.execute(f"INSERT INTO {s} VALUES " + ", ".join(f"({v}, {lit(v)})"
                                                             for v in range(1, 31)))
        cur = conn.cursor()
        loops = {"back": "for (t = NOW; t > NOW - 20; t -= 5)",         # t = 30, 25, 20, 15
                 "fwd": "for (t = ST - 10; t < ST + 10; t += 5)"}       # t = 20, 25, 30, 35
        for name, loop in loops.items():
            cur.execute(f"DECLARE {name} CURSOR FOR SELECT count(*), sum(v), wtime(*), "
                        f"valid_from, valid_to FROM {s} {loop} {{ WindowIs({s}, t - 5, t) }}")
        admin.execute(f"INSERT INTO {s} VALUES (31, {lit(31)}), (36, {lit(36)})")
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(60)}")
        archived = _archived(server, s)
        want_ts = {"back": [15, 20, 25, 30], "fwd": [20, 25, 30, 35]}
        for name in loops:
            rows = []
            deadline = time.monotonic() + 20
            while not rows or rows[-1][4] is None or rows[-1][4] < at(60):
                assert time.monotonic() < deadline, rows
                cur.execute(f"FETCH ALL FROM {name} WITH (timeout = '5s')")
                rows += cur.fetchall()
            assert [r[3] for r in rows] == sorted(r[3] for r in rows)
            answered = [r for r in rows if r[0]]
            assert [r[2] for r in answered] == [at(t) for t in want_ts[name]], name
            for n, total, t, frm, to in answered:
                assert (frm, to) == (t, t + dt.timedelta(seconds=5))
                want = duckdb.sql("SELECT count(*), sum(v) FROM archived "
                                  f"WHERE t BETWEEN TIMESTAMP '{t - dt.timedelta(seconds=5)}' "
                                  f"AND TIMESTAMP '{t}'").fetchall()[0]
                assert (n, total) == want, (name, t)
        # over a stream that is not archived, a backward loop says what it needs
        plain = unique("plain")
        admin.execute(f"CREATE STREAM {plain} (v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        conn.rollback()
        cur.execute(f"DECLARE p CURSOR FOR SELECT count(*) FROM {plain} "
                    f"for (t = NOW; t > NOW - 20; t -= 5) {{ WindowIs({plain}, t - 5, t) }}")
        admin.execute(f"INSERT INTO {plain} VALUES (1, {lit(1)})")
        with pytest.raises(psycopg.Error, match="TYPE ARCHIVED"):
            cur.execute("FETCH 1 FROM p WITH (timeout = '10s')")


def test_recompute_gives_the_pattern_matches_late_events_changed(server):
    """A late a makes a match and a late c breaks one: RECOMPUTE of EVENT SEQ gives the
    matches known within a late event's reach [t, t + W) (a match spans less than W, so no
    other can change), each equal to the brute-force oracle over every archived event."""
    s, w = unique("seqlate"), 3.0
    kinds = "abcbabacbbabcab"                      # one event a second, from 1 s
    events = [(i + 1, kind, float(i + 1)) for i, kind in enumerate(kinds)]
    late = [(100, "a", 8.5), (101, "c", 11.5)]     # after the stream reached 15 s
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (id INT, kind TEXT, t TIMESTAMP TIMESTAMPCOLUMN) "
                  "TYPE ARCHIVED WITH (fragment = '10 seconds')")
        for i, kind, t in events + late:
            c.execute(f"INSERT INTO {s} VALUES ({i}, '{kind}', {lit(t)})")
        assert c.execute(f"SELECT late FROM cq_streams WHERE stream = '{s}'").fetchone() == (2,)
        rows = c.execute(f"RECOMPUTE SELECT a.id, b.id FROM EVENT SEQ({s} a, !({s} c), {s} b) "
                         "WHERE a.kind = 'a' AND b.kind = 'b' AND c.kind = 'c' "
                         f"WITHIN '{w:g} seconds'").fetchall()
    every = events + late
    matches = {(a[0], b[0]): b[2] for a in every for b in every
               if a[1] == "a" and b[1] == "b" and 0 < b[2] - a[2] < w
               and not any(x[1] == "c" and a[2] < x[2] < b[2] for x in every)}
    reached = {m: known for m, known in matches.items()
               if any(t <= known < t + w for _, _, t in late)}
    assert {(r[0], r[1]): r[2] for r in rows} == {m: at(k) for m, k in reached.items()}
    assert (100, 9) in reached and (11, 12) not in matches      # made by a, broken by c
    # MATCH_RECOGNIZE skips past each match's last row, so one match moves the next: every
    # match from the earliest late event on is given
    ordered = sorted(every, key=lambda e: e[2])
    pairs = {(x[0], y[0]): y[2] for x, y in zip(ordered, ordered[1:])
             if x[1] == "a" and y[1] == "b" and y[2] >= min(t for _, _, t in late)}
    with psycopg.connect(server.dsn, autocommit=True) as c:
        rows = c.execute(f"RECOMPUTE SELECT * FROM {s} MATCH_RECOGNIZE (ORDER BY t MEASURES "
                         "A.id AS a, B.id AS b PATTERN (A B) DEFINE A AS kind = 'a', "
                         "B AS kind = 'b') AS m").fetchall()
    assert {(r[0], r[1]): r[2] for r in rows} == {m: at(k) for m, k in pairs.items()}


def test_recompute_of_a_join_with_a_recall_target_is_the_exact_join(server):
    """The hybrid approach (seed 003): RECOMPUTE runs a QJoin's query over the archive with
    every tuple in time, so it gives the exact join's rows in the reach of late tuples,
    those a live QJoin may have missed included."""
    r, s = unique("qjr"), unique("qjs")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for name in (r, s):
            c.execute(f"CREATE STREAM {name} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                      "TYPE ARCHIVED WITH (fragment = '10 seconds')")
        rows = {r: [(k % 3, k, 1 + k) for k in range(12)],
                s: [(k % 3, 100 + k, 1.5 + k) for k in range(12)]}
        for name, data in rows.items():
            for k, v, t in data:
                c.execute(f"INSERT INTO {name} VALUES ({k}, {v}, {lit(t)})")
        late = (1, 999, 6.2)                           # after r reached 12 s
        c.execute(f"INSERT INTO {r} VALUES ({late[0]}, {late[1]}, {lit(late[2])})")
        rows[r].append(late)
        got = c.execute(f"RECOMPUTE SELECT r.v, s.v FROM {r} [RANGE '2 seconds'] r, "
                        f"{s} [RANGE '2 seconds'] s WHERE r.k = s.k "
                        "WITH (recall = 0.9)").fetchall()
    # the exact join's rows, valid [later ts, earlier ts + 2), that meet the late tuple's
    # reach [6.2, 8.2)
    exact = {(a[1], b[1]): (max(a[2], b[2]), min(a[2], b[2]) + 2)
             for a in rows[r] for b in rows[s] if a[0] == b[0] and abs(a[2] - b[2]) < 2}
    reached = {pair for pair, (start, end) in exact.items()
               if start < late[2] + 2 and end > late[2]}
    assert {(a, b) for a, b, *_ in got} == reached
    assert (999, 104) in reached                       # the late tuple's own pair


def test_inserts_into_archived_streams_never_starve_the_worker_threads(start_server):
    """More concurrent INSERTs into an archived stream than the server has worker threads: a
    statement's round trip to the clearinghouse is awaited on the event loop, so the archive's
    writes (which need a worker thread) always find one. A statement that blocked its thread
    on the round trip held every thread while the writes waited for one."""
    srv = start_server(env={**os.environ, "CQGATE_WORKERS": "2"})
    s = unique("starve")
    with psycopg.connect(srv.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED")
    clients, done, errors = 6, [], []
    go = threading.Barrier(clients, timeout=30)

    def insert(i: int) -> None:
        try:
            with psycopg.connect(srv.dsn, autocommit=True, connect_timeout=30) as c:
                c.execute("SET statement_timeout = '20s'")
                go.wait()
                c.execute(f"INSERT INTO {s} VALUES ({i}, {lit(1)})")   # none of them late
                done.append(i)
        except (psycopg.Error, threading.BrokenBarrierError) as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=insert, args=(i,), daemon=True) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and sorted(done) == list(range(clients)), errors
    assert time.monotonic() - started < 20
    with psycopg.connect(srv.dsn, autocommit=True) as c:
        c.execute("SET cq.mode = snapshot")
        assert c.execute(f"SELECT count(*), sum(k) FROM {s} [RANGE UNBOUNDED]").fetchone() \
            == (clients, sum(range(clients)))
