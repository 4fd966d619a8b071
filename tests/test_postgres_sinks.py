"""Sinks against a real PostgreSQL 18: a table followed by cqgate, written back out by three
sinks (upsert into PostgreSQL, append into PostgreSQL, append into Parquet) while cqgate is
killed with SIGKILL part-way through a burst of transactions and started again: the upsert
table equals the source table, and the append table and the Parquet files hold every row
version that has ended, each once, with its commit-time interval (from PostgreSQL's own commit
timestamps); refusals and errors say what is wrong."""
from __future__ import annotations

import datetime as dt
import glob
import os
import random
import re
import signal
import threading
import time
from collections import Counter

import duckdb
import psycopg

from conftest import ServerProcess
from continuous import unique, wait_for
from scripts.embedded_postgres import EmbeddedPostgres
from test_docs import statements
from test_postgres_source import error_of, make_source, make_table, pg_connect, utc

TXNS = 150


def sinks(c) -> dict:
    return {r[0]: r for r in c.execute(
        "SELECT sink, kind, target, mode, state, rows, watermark, errors, last_error "
        "FROM cq_sinks").fetchall()}


def _versions(history: list, commits: dict, before: dt.datetime) -> Counter:
    """(id, amount, valid_from, valid_to) of every row version that ended before ``before``:
    from the trigger's history (xid, seq, op, id, amount) and each transaction's commit time."""
    out, current = Counter(), {}
    for xid, _, op, i, amount in sorted(history, key=lambda h: (commits[h[0]], int(h[1]))):
        at = commits[xid]
        if i in current:
            a, since = current.pop(i)
            if since < at:
                out[(i, a, since, at)] += 1
        if op != "D":
            current[i] = (amount, at)
    return Counter({k: n for k, n in out.items() if k[3] < before})


def test_kill_9_while_sinks_write_leaves_each_row_once(pg, tmp_path):
    table, src = unique("sold"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, amount bigint")
    pg.psql(f"""
        CREATE TABLE {table}_history (xid text, seq bigserial, op text, id int, amount bigint);
        CREATE FUNCTION {table}_log() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'DELETE' THEN
            INSERT INTO {table}_history (xid, op, id) VALUES (pg_current_xact_id()::text, 'D',
                                                               OLD.id);
          ELSE INSERT INTO {table}_history (xid, op, id, amount)
                 VALUES (pg_current_xact_id()::text, left(TG_OP, 1), NEW.id, NEW.amount);
          END IF;
          RETURN NULL;
        END $$;
        CREATE TRIGGER {table}_log AFTER INSERT OR UPDATE OR DELETE ON {table}
          FOR EACH ROW EXECUTE FUNCTION {table}_log();""")
    data_dir = str(tmp_path / "cq")
    conn = f"host=127.0.0.1 port={pg.port} dbname=postgres user=postgres"
    srv = ServerProcess(data_dir)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            make_source(c, pg, src, publication)
            secret = unique("pw")
            c.execute(f"CREATE SECRET {secret} AS '{pg.password}'")
            c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
            c.execute(f"CREATE SINK now_{table} INTO POSTGRES (CONNECTION '{conn}', PASSWORD "
                      f"SECRET {secret}, TABLE '{table}_now', MODE 'upsert', KEY 'id') AS "
                      f"SELECT id, amount FROM {table}")
            c.execute(f"CREATE SINK all_{table} INTO POSTGRES (CONNECTION '{conn}', PASSWORD "
                      f"SECRET {secret}, TABLE '{table}_all') AS SELECT id, amount FROM {table}")
            c.execute(f"CREATE SINK pq_{table} INTO PARQUET (PATH 'pq_{table}') AS "
                      f"SELECT id, amount FROM {table}")

        def burst():
            rng = random.Random(7)
            live, next_id = [], 1
            with pg_connect(pg) as pgc:
                for k in range(TXNS):
                    with pgc.transaction():
                        fresh = list(range(next_id, next_id + 20))
                        next_id += 20
                        pgc.execute(f"INSERT INTO {table} SELECT i, i FROM unnest(%s::int[]) i",
                                    (fresh,))
                        touched = rng.sample(live, min(len(live), 25))
                        gone, changed = touched[:5], touched[5:]
                        pgc.execute(f"UPDATE {table} SET amount = %s * 1000000 + id "
                                    "WHERE id = ANY(%s)", (k + 1, changed))
                        pgc.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", (gone,))
                        live = [i for i in live if i not in gone] + fresh
                    time.sleep(0.005)
        writer = threading.Thread(target=burst, daemon=True)
        writer.start()
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            wait_for(lambda: (sinks(c).get(f"all_{table}") or [0] * 6)[5] >= 400, timeout=120,
                     what="the sinks to be writing")
        srv.proc.send_signal(signal.SIGKILL)
        assert srv.proc.wait(10) == -signal.SIGKILL
        writer.join(180)
        assert not writer.is_alive()
        srv = ServerProcess(data_dir)
        pg.psql(f"INSERT INTO {table} VALUES (0, -1)")      # the sentinel: the last commit
        history = pg.psql(f"SELECT xid, seq, op, id, amount FROM {table}_history")
        commits = {x: utc(dt.datetime.fromisoformat(t)) for x, t in pg.psql(
            f"SELECT DISTINCT xid, pg_xact_commit_timestamp(xid(xid::xid8))::text "
            f"FROM {table}_history")}
        last = max(commits.values())
        expected_now = sorted(pg.psql(f"SELECT id, amount FROM {table}"))
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            def caught_up():
                s = sinks(c)
                return all(s.get(f"{k}_{table}") and s[f"{k}_{table}"][6] is not None
                           and s[f"{k}_{table}"][6] >= last for k in ("now", "all", "pq"))
            wait_for(caught_up, timeout=180, what=lambda: f"the sinks to reach the last "
                     f"commit {last}: {sinks(c)}")
            wait_for(lambda: sorted(pg.psql(f"SELECT id, amount FROM {table}_now")) ==
                     expected_now, timeout=30, what="the upsert table to equal the table")
            c.execute(f"DROP SOURCE {src} CASCADE")
        versions = _versions([(x, s, o, int(i), None if a is None else int(a))
                              for x, s, o, i, a in history], commits, last)
        appended = Counter((int(i), int(a), utc(dt.datetime.fromisoformat(f)),
                            utc(dt.datetime.fromisoformat(t))) for i, a, f, t in pg.psql(
            f"SELECT id, amount, valid_from::text, valid_to::text FROM {table}_all"))
        assert max(appended.values()) == 1, "a row written twice"
        assert appended == versions, (f"missing {sum((versions - appended).values())}, "
                                      f"extra {sum((appended - versions).values())}")
        files = glob.glob(os.path.join(data_dir, "sinks", f"pq_{table}", "fragment=*",
                                       "*.parquet"))
        parquet = Counter(duckdb.connect().execute(
            "SELECT id, amount, valid_from, valid_to FROM read_parquet(?)", [files]).fetchall())
        assert parquet == versions
        print(f"\n{TXNS} transactions, cqgate killed mid-burst; after the restart the upsert "
              f"table equals the table ({len(expected_now)} rows) and {len(versions)} row "
              "versions are appended once each, in PostgreSQL and in Parquet")
    finally:
        srv.stop()


def test_sink_refusals_and_a_key_that_is_not_unique(server, pg, tmp_path):
    table, src = unique("refused"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, grp int")
    conn = f"host=127.0.0.1 port={pg.port} dbname=postgres user=postgres password={pg.password}"
    with psycopg.connect(server.dsn, autocommit=True) as c:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        plain = unique("plain")
        c.execute(f"CREATE STREAM {plain} (v int, t timestamp TIMESTAMPCOLUMN)")
        e = error_of(c, f"CREATE SINK {unique('s')} INTO PARQUET (PATH 'x') AS SELECT v FROM "
                        f"{plain}")
        assert e.sqlstate == "0A000" and "archived" in str(e)
        e = error_of(c, f"CREATE SINK {unique('s')} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                        f"'t', MODE 'merge') AS SELECT id FROM {table}")
        assert e.sqlstate == "22023"
        e = error_of(c, f"CREATE SINK {unique('s')} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                        f"'t', MODE 'upsert') AS SELECT id FROM {table}")
        assert e.sqlstate == "42601" and "KEY" in str(e)
        e = error_of(c, f"CREATE SINK {unique('s')} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                        f"'t', MODE 'upsert', KEY 'nope') AS SELECT id FROM {table}")
        assert e.sqlstate == "42703"
        pg.psql(f"CREATE TABLE {table}_full (grp int PRIMARY KEY); "
                f"INSERT INTO {table}_full VALUES (1)")
        e = error_of(c, f"CREATE SINK {unique('s')} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                        f"'{table}_full', MODE 'upsert', KEY 'grp') AS SELECT grp FROM {table}")
        assert e.sqlstate == "55000" and "not empty" in str(e)
        e = error_of(c, f"CREATE SINK {unique('s')} INTO POSTGRES (CONNECTION 'host=127.0.0.1 "
                        f"port=1', TABLE 't') AS SELECT id FROM {table}")
        assert e.sqlstate.startswith("08")
        # a key that names two rows at once stops the sink, and says so
        sink = unique("s")
        c.execute(f"CREATE SINK {sink} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                  f"'{table}_by_grp', MODE 'upsert', KEY 'grp') AS SELECT id, grp FROM {table}")
        pg.psql(f"INSERT INTO {table} VALUES (1, 7), (2, 7)")
        row = wait_for(lambda: (lambda r: r if r[4] == "stopped" else None)(sinks(c)[sink]),
                       timeout=30, what="the sink to stop")
        assert "KEY must name one row" in row[8], row
        e = error_of(c, f"DROP STREAM {table}")
        assert e.sqlstate == "2BP01"
        c.execute(f"DROP SINK {sink}")
        assert sink not in sinks(c)
        wait_for(lambda: pg.psql(f"SELECT count(*) FROM cqgate_sinks WHERE sink = '{sink}'")
                 == [("0",)], timeout=10, what="the sink's progress to go")
        c.execute(f"DROP SOURCE {src} CASCADE")
        c.execute(f"DROP STREAM {plain}")


# ---------------------------------------------------------------------- the pages
def test_the_sources_and_sinks_pages_show_what_runs(start_server, tmp_path_factory):
    """docs/sources.md then docs/sinks.md, in order: ``psql`` blocks run in a PostgreSQL of
    their own, ``sql`` blocks in cqgate (the pages' port is that PostgreSQL's), and each
    ``text`` block is what the last statement before it returns once the change has come
    through (replication is asynchronous: the statement is asked again for up to 20 s)."""
    pg = EmbeddedPostgres()
    pg.start(tmp_path_factory.mktemp("pg-docs") / "data", fast=True)
    srv = start_server()
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    checked = 0
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c, pg_connect(pg) as p:
            for page in ("sources.md", "sinks.md"):
                text = open(os.path.join(docs, page), encoding="utf-8").read()
                last = None
                for lang, body in re.findall(r"```(sql|psql|text)\n(.*?)```", text, re.S):
                    if lang == "text":
                        want = body.strip().splitlines()
                        began = time.monotonic()
                        wait_for(lambda: _rows(*last) == want, timeout=20,
                                 what=lambda: f"{page}: {_rows(*last)} to be {want}")
                        print(f"{page}: {time.monotonic() - began:.2f} s")
                        checked += 1
                        continue
                    conn = c if lang == "sql" else p
                    for stmt in statements(body.replace("port=5432", f"port={pg.port}")):
                        cur = conn.execute(stmt)
                        if cur.description:
                            last = (conn, stmt)
    finally:
        pg.stop()
    assert checked == 3


def _rows(conn, stmt: str) -> list:
    return [" | ".join(str(v) for v in r) for r in conn.execute(stmt).fetchall()]


def test_a_slow_target_slows_only_its_sink(start_server, pg):
    """A sink whose table is locked in PostgreSQL: its rows wait in memory within the
    server's result bound (on disk past it), a cursor over another stream is not held up,
    and once the lock goes the table catches up with the answer."""
    srv = start_server("--result-memory", "64kB", "--result-spill", "256kB")
    table, other, src = unique("slow"), unique("other"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, v text")
    conn = f"host=127.0.0.1 port={pg.port} dbname=postgres user=postgres password={pg.password}"
    with psycopg.connect(srv.dsn, autocommit=True) as c, \
            psycopg.connect(srv.dsn, autocommit=True) as reader, pg_connect(pg) as hold:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        c.execute(f"CREATE SINK {table} INTO POSTGRES (CONNECTION '{conn}', TABLE "
                  f"'{table}_now', MODE 'upsert', KEY 'id') AS SELECT id, v FROM {table}")
        c.execute(f"CREATE STREAM {other} (n int, t timestamp TIMESTAMPCOLUMN)")
        reader.execute("BEGIN")
        reader.execute(f"DECLARE o CURSOR FOR SELECT n FROM {other}")
        hold.execute("BEGIN")
        hold.execute(f"LOCK TABLE {table}_now IN ACCESS EXCLUSIVE MODE")
        with pg_connect(pg) as w:
            for k in range(20):
                w.execute(f"INSERT INTO {table} SELECT i, repeat('x', 100) || i FROM "
                          f"generate_series({k * 1000 + 1}, {k * 1000 + 1000}) i")
        for n in range(3):
            c.execute(f"INSERT INTO {other} VALUES (%s, now())", (n,))
        assert reader.execute("FETCH 3 FROM o WITH (timeout = '10s')").fetchall() == \
            [(0,), (1,), (2,)]

        def queued():
            return c.execute("SELECT memory_bytes, spill_bytes FROM cq_queries WHERE "
                             f"name = '{table}'").fetchone()
        held = wait_for(lambda: (lambda q: q if q and q[1] > 256 * 1024 else None)(queued()),
                        timeout=60, what=lambda: f"the sink's rows to wait: {queued()}")
        assert held[0] <= 2 * 64 * 1024, held      # in memory: the bound, a batch over at most
        hold.execute("ROLLBACK")
        expected = sorted(pg.psql(f"SELECT id, v FROM {table}"))
        wait_for(lambda: sorted(pg.psql(f"SELECT id, v FROM {table}_now")) == expected,
                 timeout=120, what=lambda: f"the sink's table to catch up: {sinks(c)[table]}, "
                 f"{pg.psql(f'SELECT count(*) FROM {table}_now')} rows")
        reader.execute("COMMIT")
        c.execute(f"DROP SOURCE {src} CASCADE")
