"""What BI tools send, replayed for real: DatabaseMetaData as DBeaver, DataGrip and Metabase
call it (pgjdbc, in a Java program), the catalog queries of a Metabase sync, and Grafana's
PostgreSQL data source (its table and column lists, and time series with $__timeFilter and
$__timeGroupAlias expanded as Grafana expands them) over a table, a stream and a window.
The queries are in tests/fixtures/bi/, each with where it comes from."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import psycopg
import pytest

from conftest import ServerProcess
from continuous import Feeder, lit, unique
from test_jdbc import _driver_jar

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP = [
    "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR, price DECIMAL(10,2), at TIMESTAMP)",
    "CREATE TABLE u (id INT PRIMARY KEY, t_id INT REFERENCES t(id))",
    "CREATE STREAM s (a INT, ts TIMESTAMP TIMESTAMPCOLUMN)",
    "CREATE WINDOW w AS SELECT a, count(*) AS n FROM s [RANGE '1 minute'] GROUP BY a",
    "INSERT INTO t VALUES (1, 'x', 1.5, '2026-11-01 10:00:00'), "
    "(2, 'y', 2.5, '2026-11-01 11:00:00')",
    "INSERT INTO u VALUES (1, 1)",
    "INSERT INTO s VALUES (1, '2026-11-26 08:00:00'), (2, '2026-11-26 08:00:10'), "
    "(1, '2026-11-26 08:00:20')",
    "COMMENT ON TABLE t IS 'table t'",
]


@pytest.fixture(scope="module")
def bi_server(tmp_path_factory):
    """A server of its own: the fixtures name their tables t, u, s and w."""
    s = ServerProcess(str(tmp_path_factory.mktemp("bi-data")))
    with psycopg.connect(s.dsn, autocommit=True) as c:
        for sql in SETUP:
            c.execute(sql)
    yield s
    s.stop()


def _queries(name: str) -> list:
    """(name, sql, params) of a fixture file: "-- @name" starts a query, "-- params: a|b"
    gives its bound values (int: for a number)."""
    out, name_, lines = [], None, []
    for line in open(os.path.join(HERE, "fixtures", "bi", name)):
        if line.startswith("-- @"):
            if name_:
                out.append((name_, lines))
            name_, lines = line[4:].split(" ", 1)[0], []
        elif name_:
            lines.append(line)
    out.append((name_, lines))
    queries = []
    for name_, lines in out:
        params = None
        if lines and lines[0].startswith("-- params:"):
            params = [int(p[4:]) if p.startswith("int:") else p
                      for p in lines[0][len("-- params:"):].strip().split("|")]
            lines = lines[1:]
        queries.append((name_, "".join(lines).strip().rstrip(";"), params))
    return queries


def _placeholders(sql: str) -> str:
    """JDBC's ? and pgx's $1, $2 … (in order, outside quotes) as psycopg's %s, its %
    escaped."""
    sql = re.sub(r"\$\d+", "?", sql)
    out, quote = [], None
    for ch in sql:
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        out.append("%%" if ch == "%" else "%s" if ch == "?" and quote is None else ch)
    return "".join(out)


def _replay(server, queries: list, options: str, binary: bool, **values) -> dict:
    """Each query on a connection of its own, as a prepared statement: its rows, or the
    error as (SQLSTATE, message)."""
    got = {}
    for name, sql, params in queries:
        with psycopg.connect(server.dsn + f" options='{options}'", autocommit=True) as c:
            try:
                cur = c.cursor(binary=binary)
                sql = sql.format(**values) if values else sql
                cur.execute(_placeholders(sql) if params else sql, params,
                            prepare=params is not None or binary)
                got[name] = cur.fetchall() if cur.description else []
            except psycopg.Error as e:
                got[name] = ("error", e.sqlstate, str(e).splitlines()[0])
    return got


def test_metabase_sync_queries(bi_server):
    with psycopg.connect(bi_server.dsn) as c:
        t_oid = c.execute("SELECT 't'::regclass::oid").fetchone()[0]
    got = _replay(bi_server, _queries("metabase_sync.sql"), "-c cq.mode=snapshot", False,
                  t_oid=t_oid)
    errors = {k: v for k, v in got.items() if isinstance(v, tuple) and v[0] == "error"}
    assert not errors, errors
    assert {r[1] for r in got["M09"]} == {"t", "u", "s", "w"}               # get-tables
    assert ("table t" in {r[3] for r in got["M09"]})                        # its description
    fields = {(r[4], r[0]): r[1] for r in got["M12"]}                       # describe-fields
    assert fields[("t", "id")] == "int4" and fields[("s", "ts")] == "timestamp"
    assert fields[("w", "n")] == "int8"
    assert got["M15"] == [("public", "u", "t_id", "public", "t", "id")]     # describe-fks
    assert {r[2] for r in got["M15b"]} == {"id"}                            # index columns
    assert {r[2] for r in got["M08"]} == {"t", "u", "s", "w"}               # privileges


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_grafana_data_source_queries(bi_server, binary):
    got = _replay(bi_server, _queries("grafana.sql"), "-c cq.mode=snapshot", binary)
    errors = {k: v for k, v in got.items() if isinstance(v, tuple) and v[0] == "error"}
    assert not errors, errors
    assert sorted(r[0] for r in got["G05"]) == ["s", "t", "u", "w"]         # showTables
    assert ("id", "integer") in got["G07"] and ("ts", "timestamp without time zone") in got["G08"]
    assert {r[0] for r in got["G09"]} == {"a", "n"}                         # public.w
    # $__timeGroupAlias over the stream: a number of seconds per minute, and its count
    assert got["G16"] == [(1795680000.0, 3)]
    assert [r[1] for r in got["G17"]] == [1, 2, 1]


def test_jdbc_database_metadata(bi_server, tmp_path):
    if shutil.which("javac") is None:
        pytest.fail("javac (JDK 17) is required for the JDBC test")
    src = os.path.join(HERE, "drivers", "jdbc", "JdbcMetadata.java")
    subprocess.run(["javac", "-d", str(tmp_path), src], check=True, timeout=120)
    feeder = Feeder(bi_server.dsn, "FROM s LIMIT 1", [
        f"INSERT INTO s VALUES (9, {lit(10 ** 8)})"], delay=0.3)
    run = subprocess.run(["java", "-cp", f"{tmp_path}{os.pathsep}{_driver_jar()}",
                          "JdbcMetadata", f"jdbc:postgresql://127.0.0.1:{bi_server.port}/cq",
                          "t", "u", "s", "w"], capture_output=True, text=True, timeout=120)
    feeder.join_checked()
    assert run.returncode == 0, run.stdout + run.stderr
    got = dict(line.split("|", 1) for line in run.stdout.splitlines())
    assert not [k for k, v in got.items() if v.startswith("ERROR")], run.stdout
    assert got["keywords"] == "true" and got["max_index_columns"] == "32"
    assert got["schemas"] == "1|public"
    assert got["tables"] == "3|s,TABLE;t,TABLE;u,TABLE"
    assert got["views"] == "1|w,VIEW"
    assert got["columns"] == "2|a,int4,4;ts,timestamp,93"
    assert got["window_columns"] == "2|a,int4;n,int8"
    assert got["primary_keys"] == "1|id,t_pkey"
    assert got["imported_keys"] == "1|t,id,t_id,u_t_id_fkey,t_pkey"
    assert got["exported_keys"] == "1|u,t_id,u_t_id_fkey"
    assert got["index_info"] == "1|t_pkey,id,f"
    assert int(got["type_info"].split("|")[0]) > 20
    assert got["functions"].startswith("0|") and got["procedures"].startswith("0|")
    assert "SELECT" in got["table_privileges"]
    assert "ApplicationName" in got["client_info"]
    assert got["continuous_metadata"] == "a,int4,4;ts,timestamp,93"


def test_catalog_rules_keep_to_the_catalog(server):
    """What the catalog emulation rewrites touches only the catalog: a user's column named
    indkey is indexed from 1, one named typinput compares with 0, DuckDB's own format('{}')
    still works; ORDER BY an output name sorts by it; an index on an expression with a comma
    and a key column whose name has one are described whole; a foreign key finds the table
    in its own schema."""
    t, e, s2 = unique("own"), unique("expr"), unique("sch")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {t} (id INT, indkey INT[], typinput INT)")
        c.execute(f"INSERT INTO {t} VALUES (1, [10, 20, 30], 0), (2, [40], 5)")
        assert c.execute(f"SELECT indkey[1], array_upper(indkey, 1) FROM {t} WHERE typinput = 0"
                         ).fetchall() == [(10, 3)]
        assert c.execute("SELECT format('{}-{}', 1, 2), format('%s-%I', 'a', 'B')").fetchone() \
            == ("1-2", 'a-"B"')
        c.execute(f'CREATE TABLE {e} (a TEXT, b TEXT, "Odd, Name" INT)')
        c.execute(f"CREATE INDEX {e}_ab ON {e} (coalesce(a, b))")
        c.execute(f'CREATE INDEX {e}_odd ON {e} ("Odd, Name", a)')
        assert c.execute("SELECT indexrelid::regclass::text, indnatts, indkey FROM pg_index "
                         "WHERE indrelid = %s::regclass ORDER BY 1", [e]).fetchall() == \
            [(f"{e}_ab", 1, "0"), (f"{e}_odd", 2, "3 1")]
        c.execute(f"CREATE SCHEMA {s2}")
        c.execute(f"CREATE TABLE {s2}.parent (z INT, id INT PRIMARY KEY)")
        c.execute(f"CREATE TABLE {t}_parent (id INT PRIMARY KEY)")
        c.execute(f"CREATE TABLE {t}_child (p INT REFERENCES {t}_parent(id))")
        assert c.execute("SELECT confkey, conindid::regclass::text FROM pg_constraint "
                         "WHERE contype = 'f' AND conrelid = %s::regclass",
                         [f"{t}_child"]).fetchall() == [([1], f"{t}_parent_pkey")]
        c.execute(f"DROP SCHEMA {s2} CASCADE")      # the shared server's listings stay narrow
        stream = unique("ord")
        c.execute(f"CREATE STREAM {stream} (a INT, b INT, ts TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"INSERT INTO {stream} VALUES (1, 30, {lit(1)}), (2, 20, {lit(2)}), "
                  f"(3, 10, {lit(3)})")
        c.execute("SET cq.mode = snapshot")
        assert c.execute(f"SELECT b AS a, a AS b FROM {stream} [RANGE UNBOUNDED] ORDER BY a"
                         ).fetchall() == [(10, 3), (20, 2), (30, 1)]
