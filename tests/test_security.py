"""Roles and privileges through real clients (psycopg, psql, asyncpg), with SCRAM logins: an
ordinary role is refused (42501) the server's files in every spelling tried and the catalog,
another's stream and a stream it may not read; GRANT lets it, REVOKE stops it again; roles,
passwords and privileges survive a restart; sessions can be listed, cancelled and ended;
max_connections holds. docs/security.md's examples run here as the page says."""
import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import asyncpg
import duckdb
import psycopg
import pytest

from conftest import ServerProcess
from continuous import send_source
from gateway.tables.store import Store

SUPER = ("cq", "cq-secret")
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _scram_server(data_dir: str, *extra: str) -> ServerProcess:
    return ServerProcess(data_dir, "--auth", "scram-sha-256", "--users", ":".join(SUPER),
                         *extra)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = _scram_server(str(tmp_path_factory.mktemp("security")), "--http-port", "0")
    yield s
    s.stop()


def connect(server, user: str, password: str, autocommit: bool = True,
            **kw) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=server.port, user=user, password=password,
                           dbname="cq", autocommit=autocommit, connect_timeout=10, **kw)


def sqlstate(conn, sql: str, params=None) -> str | None:
    """None when ``sql`` runs, else its SQLSTATE."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def _psql(server, *commands: str, role=SUPER) -> subprocess.CompletedProcess:
    args = [a for c in commands for a in ("-c", c)]
    return subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U",
                           role[0], "-d", "cq", "-v", "VERBOSITY=verbose", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGPASSWORD": role[1]})


def make_role(su, name: str) -> tuple[str, str]:
    su.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{name}-pw'")
    return name, f"{name}-pw"


# --------------------------------------------------------------------------- privileges
def test_an_ordinary_role_needs_privileges_that_grant_gives_and_revoke_takes(shared):
    with connect(shared, *SUPER) as su:
        bob = make_role(su, "bob_p")
        su.execute("CREATE STREAM priv_s (k INT, v DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN)")
        su.execute("CREATE TABLE priv_t (a INT)")
        su.execute("INSERT INTO priv_t VALUES (1), (2)")
        # through psql: each statement refused with 42501 and PostgreSQL's words
        r = _psql(shared, "SELECT * FROM priv_t", "SELECT * FROM read_text('/etc/hostname')",
                  "DROP STREAM priv_s", "SELECT k FROM priv_s [RANGE '1 minute']", role=bob)
        assert re.findall(r"ERROR:  (\w+): (.*)", r.stderr) == [
            ("42501", "permission denied for table priv_t"),
            ("42501", "permission denied for function read_text"),
            ("42501", "must be owner of stream priv_s"),
            ("42501", "permission denied for stream priv_s")], r.stderr
        with connect(shared, *bob) as b:
            assert sqlstate(b, "SELECT * FROM priv_t") == "42501"
            assert sqlstate(b, "DROP STREAM priv_s") == "42501"
            assert sqlstate(b, "DROP TABLE priv_t") == "42501"
            assert sqlstate(b, "INSERT INTO priv_s VALUES (1, 1.0, '2024-01-01')") == "42501"
            # a continuous query on a stream it may not read, on a cursor and as a plain query
            with b.transaction():
                assert sqlstate(b, "DECLARE c CURSOR FOR SELECT * FROM priv_s") == "42501"
            assert sqlstate(b, "SELECT k FROM priv_s [RANGE '1 minute']") == "42501"
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as denied:
                b.execute("SELECT * FROM priv_t")
            assert str(denied.value).startswith("permission denied for table priv_t")

            su.execute("GRANT SELECT ON priv_t, priv_s TO bob_p")
            assert b.execute("SELECT a FROM priv_t ORDER BY a").fetchall() == [(1,), (2,)]
            with b.transaction():
                b.execute("DECLARE c CURSOR FOR SELECT k, v FROM priv_s")
                su.execute("INSERT INTO priv_s VALUES (7, 1.5, '2024-01-01 00:00:01')")
                su.execute("ALTER STREAM priv_s ADVANCE TO '2024-01-01 00:00:05'")
                rows = b.execute("FETCH 1 FROM c WITH (timeout = '10s')").fetchall()
                assert [r[:2] for r in rows] == [(7, 1.5)]
            assert sqlstate(b, "DROP STREAM priv_s") == "42501"     # SELECT is not ownership

            su.execute("REVOKE SELECT ON priv_s, priv_t FROM bob_p")
            assert sqlstate(b, "SELECT * FROM priv_t") == "42501"
            with b.transaction():
                assert sqlstate(b, "DECLARE c2 CURSOR FOR SELECT * FROM priv_s") == "42501"
            assert sqlstate(b, "COPY priv_t TO STDOUT") == "42501"


def test_owners_grant_and_public_schema_create(shared):
    with connect(shared, *SUPER) as su:
        ann = make_role(su, "ann_o")
        ben = make_role(su, "ben_o")
        with connect(shared, *ann) as a, connect(shared, *ben) as b:
            assert sqlstate(a, "CREATE TABLE ann_t (x INT)") == "42501"   # PostgreSQL 15
            su.execute("GRANT CREATE ON SCHEMA public TO ann_o")
            a.execute("CREATE TABLE ann_t (x INT)")
            a.execute("CREATE STREAM ann_s (x INT, t TIMESTAMP TIMESTAMPCOLUMN)")
            a.execute("INSERT INTO ann_t VALUES (5)")
            owners = dict(su.execute(
                "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
                "WHERE c.relname IN ('ann_t', 'ann_s')").fetchall())
            assert owners == {"ann_t": "ann_o", "ann_s": "ann_o"}
            assert sqlstate(b, "SELECT * FROM ann_t") == "42501"
            assert sqlstate(b, "GRANT SELECT ON ann_t TO ben_o") == "42501"   # not the owner
            a.execute("GRANT SELECT, INSERT ON ann_t TO ben_o")
            assert b.execute("SELECT x FROM ann_t").fetchall() == [(5,)]
            b.execute("INSERT INTO ann_t VALUES (6)")
            assert sqlstate(b, "DELETE FROM ann_t") == "42501"
            acl = su.execute("SELECT relacl FROM pg_class WHERE relname = 'ann_t'").fetchone()[0]
            assert sorted(acl) == ["ann_o=arwdDxt/ann_o", "ben_o=ar/ann_o"]
            # a view reads with its owner's privileges
            a.execute("CREATE VIEW ann_v AS SELECT x FROM ann_t")
            a.execute("GRANT SELECT ON ann_v TO ben_o")
            a.execute("REVOKE ALL ON ann_t FROM ben_o")
            assert sorted(b.execute("SELECT x FROM ann_v").fetchall()) == [(5,), (6,)]
            assert sqlstate(b, "SELECT x FROM ann_t") == "42501"
            assert sqlstate(su, "DROP ROLE ann_o") == "55006"       # it is connected
            assert sqlstate(b, "DROP TABLE ann_t") == "42501"
            a.execute("DROP VIEW ann_v")
        assert sqlstate(su, "DROP ROLE ann_o") == "2BP01"           # it owns things
        su.execute("DROP TABLE ann_t")                              # a superuser may
        su.execute("DROP STREAM ann_s")
        su.execute("DROP ROLE ann_o")
        assert su.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'ann_o'").fetchone() \
            == (0,)


def test_roles_in_pg_roles_du_and_dp(shared):
    with connect(shared, *SUPER) as su:
        su.execute("CREATE ROLE grp_r")
        make_role(su, "mem_r")
        su.execute("GRANT grp_r TO mem_r")
        su.execute("CREATE TABLE dp_t (a INT)")
        su.execute("GRANT SELECT ON dp_t TO mem_r")
        su.execute("GRANT INSERT ON dp_t TO PUBLIC")
        rows = su.execute("SELECT rolname, rolsuper, rolcanlogin FROM pg_roles "
                          "WHERE rolname IN ('cq', 'grp_r', 'mem_r') ORDER BY 1").fetchall()
        assert rows == [("cq", True, True), ("grp_r", False, False), ("mem_r", False, True)]
    r = _psql(shared, "\\du", "\\dp dp_t")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert re.search(r" mem_r +\|.*\| \{grp_r\}", r.stdout), r.stdout
    assert re.search(r" cq +\| Superuser", r.stdout), r.stdout
    assert "mem_r=r/cq" in r.stdout and "=a/cq" in r.stdout, r.stdout


def test_the_catalog_and_role_commands_refuse_what_a_role_may_not(shared):
    with connect(shared, *SUPER) as su:
        eve = make_role(su, "eve_c")
        with connect(shared, *eve) as e:
            assert sqlstate(e, "CREATE ROLE mallory SUPERUSER") == "42501"
            assert sqlstate(e, "ALTER ROLE eve_c SUPERUSER") == "42501"
            assert sqlstate(e, "GRANT pg_read_server_files TO eve_c") == "42501"
            e.execute("ALTER ROLE eve_c PASSWORD 'new-pw'")     # one's own password
        assert sqlstate(su, "CREATE ROLE pg_mine") == "42939"
        assert sqlstate(su, "CREATE ROLE eve_c") == "42710"
        assert sqlstate(su, "DROP ROLE cq") == "55006"           # the current user
        assert sqlstate(su, "DROP ROLE nobody_here") == "42704"
        with connect(shared, "eve_c", "new-pw") as e:
            assert e.execute("SELECT current_user").fetchone() == ("eve_c",)
            assert e.execute("SHOW is_superuser").fetchone() == ("off",)


# --------------------------------------------------------------------------- files
FILE_SPELLINGS = [
    "SELECT * FROM read_csv('{secret}')",
    "SELECT * FROM read_csv_auto('{secret}', header = false)",
    "SELECT * FROM READ_CSV('{secret}', delim = '|')",
    "SELECT * FROM read_parquet('{secret}')",
    "SELECT * FROM parquet_scan(['{secret}'])",
    "SELECT * FROM parquet_metadata('{secret}')",
    "SELECT * FROM read_json('{secret}')",
    "SELECT * FROM read_json_auto('{secret}')",
    "SELECT * FROM read_ndjson_objects('{secret}')",
    "SELECT content FROM read_text('{secret}')",
    "SELECT content FROM read_blob('{secret}')",
    "SELECT * FROM glob('{folder}/*')",
    "SELECT * FROM sniff_csv('{secret}')",
    "SELECT * FROM '{secret}'",
    'SELECT * FROM "{secret}"',
    "SELECT (SELECT content FROM read_text('{secret}')) AS c",
    "SELECT 1 WHERE EXISTS (SELECT 1 FROM read_text('{secret}'))",
    "WITH f AS (SELECT content FROM read_text('{secret}')) SELECT * FROM f",
    "SELECT * FROM (SELECT * FROM read_text('{secret}')) AS sub",
    "CREATE TABLE stolen AS SELECT content FROM read_text('{secret}')",
    "INSERT INTO mine SELECT length(content) FROM read_text('{secret}')",
    "COPY mine FROM '{secret}'",
    "COPY mine TO '{folder}/out.txt'",
    "COPY (SELECT 1) TO '{folder}/out2.txt' (FORMAT csv)",
    "ATTACH '{folder}/other.duckdb' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM query('SELECT * FROM read_text(''{secret}'')')",
    "SELECT * FROM query_table('{secret}')",
    "PRAGMA enable_profiling",
    "USE pgcat.main",
    "SET enable_external_access = true",
]

CATALOG_SPELLINGS = [
    "DELETE FROM pg_catalog.pg_class",
    "DELETE FROM pg_type",
    "UPDATE pg_catalog.pg_type SET typname = 'x'",
    "INSERT INTO pg_catalog.pg_am VALUES (1, 'x', 'y', 'z')",
    "DROP TABLE pgcat.main.pg_type",
    "DROP VIEW pgcat.main.pg_class",
    "DROP TABLE pgcat.cq_columns",
    'DROP VIEW "pgcat"."main"."cq_columns"',
    "TRUNCATE pg_catalog.pg_am",
    "ALTER TABLE pg_catalog.pg_type RENAME TO pg_t",
    "CREATE OR REPLACE VIEW pg_catalog.pg_roles AS SELECT 1 AS oid",
    "CREATE TABLE pgcat.main.evil (a INT)",
    "SELECT * FROM cq_acl",
    "SELECT * FROM temp.main.cq_roles",
    "SELECT * FROM pgcat.main.cq_relations",
    "DROP VIEW cq_relations",
    "DELETE FROM information_schema.tables",
    "DROP SCHEMA pgcat.main CASCADE",
    "DETACH pgcat",
    "SELECT * FROM main.cq_objects",
]


def test_files_and_catalog_refused_in_every_spelling(shared, tmp_path):
    secret_text = "top-secret-" + os.urandom(6).hex()
    secret = tmp_path / "secret.csv"
    secret.write_text(f"a\n{secret_text}\n")
    folder = str(tmp_path)
    before = sorted(os.listdir(folder))
    with connect(shared, *SUPER) as su:
        mal = make_role(su, "mal_f")
        su.execute("GRANT CREATE ON SCHEMA public TO mal_f")
        with connect(shared, *mal) as m:
            m.execute("CREATE TABLE mine (n INT)")
            results = {}
            for spelling in FILE_SPELLINGS + CATALOG_SPELLINGS:
                sql = spelling.format(secret=secret, folder=folder)
                try:
                    cur = m.execute(sql)
                    results[sql] = ("ran", cur.fetchall() if cur.description else None)
                except psycopg.Error as e:
                    results[sql] = (e.sqlstate, str(e))
            # the extended protocol, a prepared statement, parameters
            for sql, params in [("SELECT content FROM read_text(%s)", [str(secret)]),
                                ("SELECT * FROM read_csv(%s::VARCHAR)", [str(secret)])]:
                try:
                    m.execute(sql, params, prepare=True).fetchall()
                    results[sql] = ("ran", None)
                except psycopg.Error as e:
                    results[sql] = (e.sqlstate, str(e))
            assert m.execute("SELECT count(*) FROM mine").fetchone() == (0,)
        assert len(results) >= 50
        ran = {sql: r for sql, r in results.items() if r[0] == "ran"}
        assert not ran, ran
        not_denied = {sql: r for sql, r in results.items() if r[0] != "42501"}
        # a few spellings are not SQL DuckDB or cqgate reads at all: refused, just not as 42501
        assert set(not_denied) <= {
            "SET enable_external_access = true",          # no such cqgate setting: 42704
            "SELECT * FROM main.cq_objects",              # gone from DuckDB: 42P01
        }, not_denied
        assert all(secret_text not in str(r) for r in results.values())
        assert sorted(os.listdir(folder)) == before              # nothing written
        # information_schema lists the client's database: none of the catalog's own tables
        listed = su.execute("SELECT table_catalog, table_schema, table_name "
                            "FROM information_schema.tables").fetchall()
        assert ("cqgate", "public", "mine") in listed
        assert {r[0] for r in listed} == {"cqgate"} and not any(
            r[2].startswith(("cq_", "pg_")) for r in listed), listed
        # the catalog is whole: everyone still reads it, psql still describes
        assert su.execute("SELECT count(*) FROM pg_class WHERE relname = 'mine'").fetchone() \
            == (1,)
        assert su.execute("SELECT count(*) FROM pg_type").fetchone()[0] > 10
        r = _psql(shared, "\\d mine")
        assert r.returncode == 0 and r.stderr == "" and 'Table "public.mine"' in r.stdout, r
        # a superuser cannot change the catalog either; it may read files, as in PostgreSQL
        assert sqlstate(su, "DELETE FROM pg_catalog.pg_class") == "42501"
        assert sqlstate(su, "DROP TABLE pgcat.main.pg_type") == "42501"
        got = su.execute(f"SELECT a FROM read_csv('{secret}')").fetchall()
        assert got == [(secret_text,)]
        # pg_read_server_files reads, pg_write_server_files writes
        su.execute("GRANT pg_read_server_files, pg_write_server_files TO mal_f")
        with connect(shared, *mal) as m:
            assert m.execute(f"SELECT a FROM read_csv('{secret}')").fetchall() == \
                [(secret_text,)]
            m.execute("INSERT INTO mine VALUES (3), (4)")
            m.execute(f"COPY mine TO '{folder}/mine.csv' (FORMAT csv, HEADER)")
            assert (tmp_path / "mine.csv").read_text() == "n\n3\n4\n"
            m.execute(f"COPY mine FROM '{folder}/mine.csv' (FORMAT csv, HEADER)")
            assert m.execute("SELECT count(*) FROM mine").fetchone() == (4,)


def test_duckdb_itself_refuses_files_and_settings_and_the_catalog(tmp_path):
    """Beneath the checks on the SQL: the shared DuckDB of a Store, used directly."""
    secret = tmp_path / "s.csv"
    secret.write_text("x")
    store = Store(str(tmp_path / "data"))
    try:
        con = store.connect()
        for sql in [f"SELECT * FROM read_text('{secret}')", f"SELECT * FROM '{secret}'",
                    f"COPY (SELECT 1) TO '{tmp_path}/o.csv'", "INSTALL httpfs",
                    f"ATTACH '{tmp_path}/x.duckdb' AS x"]:
            with pytest.raises(duckdb.PermissionException):
                con.execute(sql)
        for sql in ["SET enable_external_access = true", "SET lock_configuration = false",
                    "DELETE FROM pgcat.main.pg_type", "DROP VIEW pgcat.main.pg_class"]:
            with pytest.raises(duckdb.InvalidInputException):
                con.execute(sql)
        assert not (tmp_path / "o.csv").exists()
        con.execute("SET integer_division = true")     # what a session sets still works
    finally:
        store.close()


# --------------------------------------------------------------------------- restart
def test_roles_passwords_and_privileges_survive_a_restart(tmp_path):
    data = str(tmp_path / "data")
    s = _scram_server(data)
    try:
        with connect(s, *SUPER) as su:
            su.execute("CREATE ROLE kim LOGIN PASSWORD 'kim-pw'")
            su.execute("CREATE ROLE team")
            su.execute("GRANT team TO kim")
            su.execute("CREATE TABLE kept (a INT)")
            su.execute("CREATE TABLE closed (a INT)")
            su.execute("CREATE STREAM kept_s (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
            su.execute("GRANT SELECT ON kept TO team")
            su.execute("GRANT INSERT ON kept_s TO kim")
    finally:
        assert s.stop() == 0
    roles_file = os.path.join(data, "catalog", "roles.json")
    assert b"kim-pw" not in open(roles_file, "rb").read()
    s = _scram_server(data)
    try:
        with connect(s, "kim", "kim-pw") as k:
            assert k.execute("SELECT count(*) FROM kept").fetchone() == (0,)
            assert sqlstate(k, "SELECT * FROM closed") == "42501"
            k.execute("INSERT INTO kept_s VALUES (1, '2024-01-01')")
            assert sqlstate(k, "DROP STREAM kept_s") == "42501"
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(s, "kim", "wrong")
    finally:
        s.stop()


def test_a_catalog_kept_inside_duckdb_by_an_earlier_version_moves_out(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    con = duckdb.connect(str(data / "cqgate.duckdb"))
    con.execute("""CREATE TABLE main.cq_objects (
        oid BIGINT PRIMARY KEY, kind VARCHAR NOT NULL, schema_name VARCHAR NOT NULL,
        name VARCHAR NOT NULL, definition VARCHAR, columns VARCHAR, timestamp_column VARCHAR,
        end_column VARCHAR, archived BOOLEAN, options VARCHAR, depends_on VARCHAR)""")
    con.execute("""INSERT INTO main.cq_objects VALUES (3000000, 'stream', 'public', 'old_s',
        'CREATE STREAM old_s (v INT, t TIMESTAMP TIMESTAMPCOLUMN)',
        '[["v", "INTEGER", false], ["t", "TIMESTAMP", false]]', 't', NULL, false, '{}', '[]')""")
    con.close()
    s = ServerProcess(str(data))
    try:
        with psycopg.connect(s.dsn, autocommit=True) as c:
            assert c.execute("SELECT relname FROM pg_class WHERE relname = 'old_s'").fetchall() \
                == [("old_s",)]
            assert sqlstate(c, "SELECT * FROM main.cq_objects") == "42P01"
    finally:
        s.stop()
    assert os.path.exists(data / "catalog" / "objects.json")


# --------------------------------------------------------------------------- sessions
def _blocked(conn, sql: str, out: dict) -> threading.Thread:
    def run():
        try:
            conn.execute(sql).fetchall()
            out["state"] = None
        except psycopg.Error as e:
            out["state"] = e.sqlstate
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _wait_for(conn, sql: str, params, timeout: float = 15) -> list:
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = conn.execute(sql, params).fetchall()
        if rows:
            return rows
        time.sleep(0.1)
    raise AssertionError(f"nothing from {sql} within {timeout}s")


def test_pg_stat_activity_and_cancel_and_terminate(shared):
    with connect(shared, *SUPER) as su:
        joe = make_role(su, "joe_s")
        su.execute("CREATE STREAM act_s (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        su.execute("GRANT SELECT ON act_s TO joe_s")
        with connect(shared, *joe, application_name="joes-tool") as j1, \
                connect(shared, *joe) as j2:
            pid1 = j1.info.backend_pid
            rows = su.execute("SELECT usename, application_name, client_addr, state, "
                              "backend_start IS NOT NULL FROM pg_stat_activity "
                              "WHERE pid = %s", [pid1]).fetchall()
            assert rows == [("joe_s", "joes-tool", "127.0.0.1", "idle", True)]
            # a long DuckDB statement, cancelled by the same role's other session
            out = {}
            t = _blocked(j1, "SELECT count(*) FROM range(100000000) a, range(100000) b", out)
            _wait_for(j2, "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'active'",
                      [pid1])
            assert sqlstate(j2, f"SELECT pg_cancel_backend({pid1})") is None
            t.join(30)
            assert out == {"state": "57014"}
            # a FETCH waiting on a continuous query: pg_stat_activity says so; cancelled
            j1.execute("BEGIN")
            j1.execute("DECLARE w CURSOR FOR SELECT k FROM act_s")
            out = {}
            t = _blocked(j1, "FETCH 1 FROM w WITH (timeout = '60s')", out)
            rows = _wait_for(su, "SELECT wait_event_type, wait_event, query FROM "
                             "pg_stat_activity WHERE pid = %s AND wait_event IS NOT NULL",
                             [pid1])
            assert rows == [("Extension", "ContinuousQuery",
                             "FETCH 1 FROM w WITH (timeout = '60s')")]
            # another role may not signal joe's session, nor anyone a superuser's
            with connect(shared, *make_role(su, "zed_s")) as z:
                assert sqlstate(z, f"SELECT pg_cancel_backend({pid1})") == "42501"
                assert sqlstate(j2, f"SELECT pg_cancel_backend({su.info.backend_pid})") \
                    == "42501"
            started = time.time()
            assert su.execute(f"SELECT pg_cancel_backend({pid1})").fetchone() == (True,)
            t.join(30)
            assert out == {"state": "57014"} and time.time() - started < 10
            j1.execute("ROLLBACK")
            # terminate: the client gets 57P01 and the session is gone
            out = {}
            t = _blocked(j1, "SELECT count(*) FROM range(100000000) a, range(100000) b", out)
            _wait_for(su, "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'active'",
                      [pid1])
            assert su.execute(f"SELECT pg_terminate_backend({pid1})").fetchone() == (True,)
            t.join(30)
            assert out["state"] == "57P01"
            _wait_for(su, "SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity "
                      "WHERE pid = %s)", [pid1])
            assert su.execute("SELECT pg_cancel_backend(1)").fetchone() == (False,)
            assert j2.execute("SELECT 1").fetchone() == (1,)       # the others go on


def test_max_connections_refuses_the_next_with_53300(tmp_path):
    s = ServerProcess(str(tmp_path / "data"), "--max-connections", "3")

    async def main():
        conns = [await asyncpg.connect(host="127.0.0.1", port=s.port, user="cq",
                                       database="cq", timeout=10) for _ in range(3)]
        with pytest.raises(asyncpg.TooManyConnectionsError,
                           match="sorry, too many clients already"):
            await asyncpg.connect(host="127.0.0.1", port=s.port, user="cq", database="cq",
                                  timeout=10)
        await conns.pop().close()
        again = await asyncpg.connect(host="127.0.0.1", port=s.port, user="cq",
                                      database="cq", timeout=10)
        assert await again.fetchval("SELECT count(*) FROM pg_stat_activity") == 3
        for c in conns + [again]:
            await c.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        s.stop()


def test_an_unknown_role_under_trust_is_refused_with_28000(server):
    async def main():
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError,
                           match='role "nobody" does not exist'):
            await asyncpg.connect(host="127.0.0.1", port=server.port, user="nobody",
                                  database="cq", timeout=10)
    asyncio.run(asyncio.wait_for(main(), 30))


# --------------------------------------------------------------------------- ingest port
def test_a_source_writes_as_the_role_it_names(shared, tmp_path):
    with connect(shared, *SUPER) as su:
        make_role(su, "feeder_i")
        su.execute("CREATE STREAM fed (v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        data = "1,2024-01-01 00:00:01\n2,2024-01-01 00:00:02\n"

        def feed(head: str) -> str:
            return send_source(shared.ingest_port, f"{head}\n{data}").decode()

        assert "permission denied for stream fed" in feed("csvwrapper,fed,feeder_i,feeder_i-pw")
        assert 'password authentication failed for user "feeder_i"' in \
            feed("csvwrapper,fed,feeder_i,wrong")
        assert "name a role" in feed("csvwrapper,fed")     # scram: a source names its role
        su.execute("GRANT INSERT ON fed TO feeder_i")
        su.execute("BEGIN")
        su.execute("DECLARE f CURSOR FOR SELECT v FROM fed")
        assert feed("csvwrapper,fed,feeder_i,feeder_i-pw") == ""
        su.execute("ALTER STREAM fed ADVANCE TO '2024-01-01 00:01:00'")
        rows = su.execute("FETCH ALL FROM f WITH (timeout = '5s')").fetchall()
        su.execute("COMMIT")
        assert sorted(r[0] for r in rows) == [1, 2]
    # cqgate push names the role with --role, its password from PGPASSWORD
    f = tmp_path / "more.csv"
    f.write_text("3,2024-01-01 00:02:00\n")

    def push(password: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gateway", "push", "fed", str(f),
                               "--port", str(shared.ingest_port), "--role", "feeder_i",
                               "--quiet"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PGPASSWORD": password})
    r = push("wrong")
    assert r.returncode == 1 and "password authentication failed" in r.stderr, r.stderr
    r = push("feeder_i-pw")
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- the page
def _page_blocks() -> list[str]:
    text = open(os.path.join(DOCS, "security.md"), encoding="utf-8").read()
    return re.findall(r"```sql\n(.*?)```", text, re.S)


def _steps(block: str) -> tuple[str | None, list]:
    """(role or None, [(statement, expected SQLSTATE or None)]) of one block."""
    lines = block.splitlines()
    role = None
    if lines and lines[0].startswith("-- as "):
        role = lines.pop(0)[len("-- as "):].strip()
    steps, current = [], []
    for line in lines:
        m = re.match(r"-- ERROR: (\w{5})$", line.strip())
        if m:
            steps[-1] = (steps[-1][0], m.group(1))
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            steps.append(("\n".join(current).strip().rstrip(";"), None))
            current = []
    return role, steps


def test_the_security_page_runs_as_it_says(tmp_path):
    blocks = _page_blocks()
    assert len(blocks) >= 8
    s = _scram_server(str(tmp_path / "data"))
    conns = {}
    try:
        conns["cq"] = connect(s, *SUPER)
        ran = 0
        for block in blocks:
            role, steps = _steps(block)
            role = role or "cq"
            if role not in conns:
                conns[role] = connect(s, role, f"{role}-secret")
            for sql, expected in steps:
                assert sqlstate(conns[role], sql) == expected, (role, sql)
                ran += 1
        assert ran >= 15
    finally:
        for c in conns.values():
            c.close()
        s.stop()


# --------------------------------------------------------------------------- hidden reads
def test_what_a_statement_reads_cannot_hide(shared, tmp_path):
    """Each spelling here once read or changed what the role may not: a session value that
    closed a quoted name, a CTE named like the table, INSERT … SELECT into a stream, dynamic
    SQL in a table function (also behind LATERAL), UPDATE … RETURNING, an upsert, COMMENT ON
    COLUMN, EXPLAIN."""
    with connect(shared, *SUPER) as su:
        su.execute("CREATE TABLE hid_secret (a INT, b TEXT)")
        su.execute("INSERT INTO hid_secret VALUES (42, 'topsecret')")
        su.execute("CREATE STREAM hid_s (b TEXT, t TIMESTAMP TIMESTAMPCOLUMN)")
        su.execute("CREATE SEQUENCE hid_seq")
        pat = make_role(su, "pat_h")
        su.execute("GRANT SELECT, INSERT ON hid_s TO pat_h")
        su.execute("GRANT UPDATE, INSERT ON hid_secret TO pat_h")
        su.execute("GRANT CREATE ON SCHEMA public TO pat_h")
        with connect(shared, *pat) as p:
            p.execute("""SET application_name = 'x"; DROP TABLE hid_secret; SELECT "y'""")
            p.execute("""SELECT 1 AS "getvariable('cq_setting_application_name')" """)
            refused = [
                "WITH hid_secret AS (SELECT * FROM hid_secret) SELECT * FROM hid_secret",
                "SELECT * FROM (WITH hid_secret AS (SELECT 1) SELECT 1) q, hid_secret",
                "WITH RECURSIVE hid_secret AS (SELECT * FROM hid_secret) "
                "SELECT * FROM hid_secret",
                "WITH x AS (SELECT 1), hid_secret AS (SELECT * FROM hid_secret) "
                "SELECT * FROM hid_secret",
                "INSERT INTO hid_s SELECT b, TIMESTAMP '2024-01-01' FROM hid_secret",
                "SELECT * FROM json_execute_serialized_sql(json_serialize_sql("
                "'SELECT * FROM cqgate.public.hid_secret'))",
                "SELECT * FROM pragma_storage_info('hid_secret')",
                "SELECT * FROM checkpoint()",
                "UPDATE hid_secret SET a = a RETURNING *",
                "UPDATE hid_secret SET a = 1 WHERE b = 'topsecret'",
                "INSERT INTO hid_secret VALUES (42, 'x') ON CONFLICT DO NOTHING RETURNING *",
                "COMMENT ON COLUMN hid_secret.a IS 'pwned'",
                "EXPLAIN SELECT * FROM hid_secret",
                # a table function behind LATERAL, and EXPLAIN ANALYZE running one
                "SELECT * FROM (SELECT 1) s, LATERAL query('SELECT * FROM hid_secret')",
                "SELECT * FROM (SELECT 1) s JOIN LATERAL query('SELECT * FROM hid_secret') q "
                "ON true",
                "SELECT * FROM LATERAL query('SELECT * FROM hid_secret')",
                "EXPLAIN ANALYZE SELECT * FROM (SELECT 1) s, "
                "LATERAL query('SELECT * FROM hid_secret WHERE b LIKE ''top%''')",
                "CREATE SEQUENCE IF NOT EXISTS hid_seq",
                "DROP SEQUENCE hid_seq",
            ]
            got = {sql: sqlstate(p, sql) for sql in refused}
            assert {sql: st for sql, st in got.items() if st != "42501"} == {
                # IF NOT EXISTS on an existing sequence is a notice; it stays cq's
                "CREATE SEQUENCE IF NOT EXISTS hid_seq": None}
            # what a CTE, a row-making function and a plain UPDATE may still do
            assert p.execute("WITH x AS (SELECT 1 AS v) SELECT v FROM x").fetchall() == [(1,)]
            assert p.execute("SELECT count(*) FROM range(3)").fetchone() == (3,)
            assert p.execute("SELECT count(*) FROM generate_series(1, 4)").fetchone() == (4,)
            p.execute("UPDATE hid_secret SET a = 7")
            p.execute("CREATE TEMP TABLE mine_tmp (a INT)")
            p.execute("INSERT INTO mine_tmp VALUES (1)")
            assert p.execute("SELECT a FROM mine_tmp").fetchall() == [(1,)]
            assert sqlstate(p, "DROP TABLE IF EXISTS no_such_table") is None
            p.execute("CREATE TABLE pat_t (a INT)")
            p.execute("CREATE INDEX pat_i ON pat_t (a)")
            p.execute("DROP INDEX pat_i")
            # an ownership made or dropped in a transaction that rolls back is not kept
            p.execute("BEGIN")
            p.execute("CREATE TABLE pat_ghost (a INT)")
            p.execute("ROLLBACK")
            p.execute("BEGIN")
            p.execute("DROP TABLE pat_t")
            p.execute("ROLLBACK")
            p.execute("INSERT INTO pat_t VALUES (1)")           # still hers
            p.execute("DROP TABLE pat_t")
            # a view made of a CTE reads like any other (its owner's privileges)
            p.execute("CREATE VIEW pat_v AS WITH w AS (SELECT 1 AS v) SELECT v FROM w")
            assert p.execute("SELECT v FROM pat_v").fetchall() == [(1,)]
            assert p.execute("SELECT 2").fetchall() == [(2,)]
            p.execute("DROP VIEW pat_v")
            # other roles' statements are not shown
            seen = dict(p.execute("SELECT pid, query FROM pg_stat_activity").fetchall())
            assert seen[su.info.backend_pid] == "<insufficient privilege>"
        assert su.execute("SELECT a, b FROM hid_secret").fetchall() == [(7, "topsecret")]
        assert "pat_h" not in str(su.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'hid_seq'")
            .fetchall())
        assert sqlstate(su, "DROP ROLE pat_h") is None     # owns nothing: the ghost is gone
        assert "pat_ghost" not in open(os.path.join(shared.data_dir, "catalog",
                                                    "privileges.json")).read()
        # a CREATEROLE role cannot hand out a superuser's or the predefined roles' powers
        su.execute("CREATE ROLE mgr_h LOGIN CREATEROLE PASSWORD 'mgr_h-pw'")
        with connect(shared, "mgr_h", "mgr_h-pw") as m:
            assert sqlstate(m, "CREATE ROLE sneaky LOGIN IN ROLE cq") == "42501"
            assert sqlstate(m, "GRANT pg_read_server_files TO mgr_h") == "42501"
            assert sqlstate(m, "CREATE ROLE plain_h LOGIN") is None
        # the superuser reads files named as tables, and into a stream
        f = tmp_path / "rows.csv"
        f.write_text("b,t\nfrom-file,2024-01-01 00:00:03\n")
        assert su.execute(f"SELECT b FROM '{f}'").fetchall() == [("from-file",)]
        su.execute(f"INSERT INTO hid_s SELECT b, t FROM read_csv('{f}')")


def test_privilege_functions_answer_for_the_session_role(shared):
    """has_table_privilege and its kin, which BI tools use to list what a user may read."""
    with connect(shared, *SUPER) as su:
        rex = make_role(su, "rex_f")
        su.execute("CREATE ROLE rex_grp")
        su.execute("GRANT rex_grp TO rex_f")
        su.execute("CREATE TABLE fn_t (a INT)")
        su.execute("CREATE TABLE fn_u (a INT)")
        su.execute("CREATE STREAM fn_s (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        su.execute("GRANT SELECT ON fn_t TO rex_grp")
        su.execute("GRANT INSERT ON fn_s TO rex_f")
        with connect(shared, *rex) as r:
            assert r.execute(
                "SELECT has_table_privilege('fn_t', 'SELECT'), "
                "has_table_privilege('public.fn_u', 'select'), "
                "has_table_privilege('fn_t', 'INSERT, SELECT'), "
                "has_table_privilege('fn_s', 'INSERT'), has_table_privilege('fn_s', 'SELECT'), "
                "has_table_privilege('rex_f', 'fn_t', 'SELECT WITH GRANT OPTION'), "
                "has_column_privilege('fn_t', 'a', 'SELECT')").fetchone() == \
                (True, False, True, True, False, True, True)
            listed = r.execute("SELECT c.relname FROM pg_class c WHERE c.relname LIKE 'fn_%' "
                               "AND has_table_privilege(c.oid, 'SELECT') ORDER BY 1").fetchall()
            assert listed == [("fn_t",)]
            assert r.execute("SELECT has_schema_privilege('public', 'USAGE'), "
                             "has_schema_privilege('public', 'CREATE'), "
                             "pg_has_role('rex_grp', 'MEMBER'), pg_has_role('cq', 'USAGE')"
                             ).fetchone() == (True, False, True, False)
        assert su.execute("SELECT has_table_privilege('fn_u', 'DELETE'), "
                          "pg_has_role('rex_grp', 'USAGE')").fetchone() == (True, True)


def test_the_catalog_reads_the_same_after_a_rollback(shared):
    """The catalog's live rows are registered on the session's connection; a transaction that
    rolls back takes its registrations with it, and the next statement registers again."""
    with connect(shared, *SUPER, autocommit=False) as c:
        c.execute("CREATE TABLE rb_t (a INT)")
        c.commit()
        for end in (c.rollback, c.commit, c.rollback):
            assert c.execute("SELECT relname FROM pg_class WHERE relname = 'rb_t'").fetchall() \
                == [("rb_t",)]
            end()
        c.execute("SAVEPOINT s")
        c.execute("SELECT count(*) FROM pg_roles").fetchall()
        c.execute("ROLLBACK TO SAVEPOINT s")
        assert c.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'cq'").fetchone() == (1,)
        c.rollback()


def _console_state(server, user: str, password: str) -> dict | int:
    """/api/state with an HTTP Basic login: the state, or the HTTP status it was refused with."""
    login = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/api/state",
                                     headers={"Authorization": f"Basic {login}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        assert e.headers["WWW-Authenticate"].startswith('Basic realm="cqgate"')
        return e.code


def test_explain_analyze_and_the_console_follow_the_roles(shared):
    """EXPLAIN ANALYZE of a window needs SELECT on it and names only the session's own
    cursors; the console takes the login of a role with pg_read_all_stats (or a superuser),
    which also sees every session's SQL in cq_queries and pg_stat_activity, as PostgreSQL."""
    with connect(shared, *SUPER) as su:
        bob, mon = make_role(su, "bob_ea"), make_role(su, "mon_ea")
        su.execute("GRANT pg_read_all_stats TO mon_ea")
        su.execute("CREATE STREAM ea_s (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        su.execute("CREATE WINDOW ea_w AS SELECT k, count(*) AS n FROM ea_s [RANGE '1 hour'] "
                   "GROUP BY k")
        su.execute("GRANT SELECT ON ea_s TO bob_ea")
        with connect(shared, *bob, autocommit=False) as b:
            assert sqlstate(b, "EXPLAIN ANALYZE ea_w") == "42501"
            b.rollback()
            su.execute("GRANT SELECT ON ea_w TO bob_ea")
            assert b.execute("EXPLAIN ANALYZE ea_w").fetchone()[0].startswith(
                "continuous query (back end) → k, n")
            b.execute("DECLARE bobs CURSOR FOR SELECT k FROM ea_s WHERE k > 1")
            assert sqlstate(su, "EXPLAIN ANALYZE bobs") == "34000"   # not su's cursor
            with connect(shared, *mon) as m:
                sql = m.execute("SELECT query FROM cq_queries WHERE name = 'bobs'").fetchone()
                assert sql == ("SELECT k FROM ea_s WHERE k > 1",)
                seen = m.execute("SELECT query FROM pg_stat_activity WHERE usename = 'bob_ea'"
                                 ).fetchall()
                assert seen == [("SELECT k FROM ea_s WHERE k > 1",)]
            state = _console_state(shared, *mon)
            assert isinstance(state, dict), state
            bobs = next(q for q in state["queries"] if q["name"] == "bobs")
            assert bobs["query"] == "SELECT k FROM ea_s WHERE k > 1"
            assert any("σ " in line for line in bobs["plan"]), bobs["plan"]
            assert isinstance(_console_state(shared, *SUPER), dict)
            assert _console_state(shared, *bob) == 401               # no pg_read_all_stats
            assert _console_state(shared, "mon_ea", "wrong") == 401
            assert _console_state(shared, "nobody_ea", "x") == 401
            b.rollback()
