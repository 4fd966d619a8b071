"""Stream DDL, EXPLAIN and planning errors through the real server: streams, windows and
derived streams are kept across a restart, listed in the catalog with their columns, and
every planning error reaches the client with its SQLSTATE."""
import threading

import psycopg
import pytest

from gateway import catalog_files
from gateway.streams import registry

from conftest import psql


def _run(conn, *statements):
    for s in statements:
        conn.execute(s)


def test_streams_in_the_catalog_and_across_restart(start_server, tmp_path):
    data = str(tmp_path / "data")
    s = start_server(data_dir=data)
    with psycopg.connect(s.dsn, autocommit=True) as c:
        _run(c, "CREATE SCHEMA temp",
             "CREATE STREAM temp.streams (Node INT, airtemp REAL, "
             "tcqtime TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED",
             "CREATE STREAM I (val DOUBLE PRECISION, ts TIMESTAMP TIMESTAMPCOLUMN, "
             "te TIMESTAMP ENDTIMESTAMPCOLUMN) WITH (slack = 'adaptive', heartbeat = '1 second')",
             "CREATE TABLE nodes (node INT PRIMARY KEY, room TEXT)",
             "CREATE WINDOW per_node AS SELECT node, AVG(airtemp) AS avg "
             "FROM temp.streams ['2 minutes'] GROUP BY node",
             "CREATE STREAM warm AS SELECT node FROM temp.streams [NOW] WHERE airtemp > 25",
             "CREATE WRAPPER mywrap (init = 'pkg.init', next = 'pkg.next', done = 'pkg.done')",
             "ALTER STREAM temp.streams ADD WRAPPER mywrap",
             "ALTER STREAM I ADD COLUMN sector INT")
    assert s.stop() == 0
    s2 = start_server(data_dir=data)
    with psycopg.connect(s2.dsn, autocommit=True) as c:
        rels = dict(c.execute("SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
                              "ON n.oid = c.relnamespace WHERE c.relname IN "
                              "('streams', 'i', 'per_node', 'warm', 'nodes')").fetchall())
        assert rels == {"streams": "r", "i": "r", "per_node": "v", "warm": "v", "nodes": "r"}
        cols = c.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) "
                         "FROM pg_attribute a WHERE a.attrelid = 'i'::regclass ORDER BY "
                         "a.attnum").fetchall()
        assert cols == [("val", "double precision"), ("ts", "timestamp without time zone"),
                        ("te", "timestamp without time zone"), ("sector", "integer")]
        desc = c.execute("SELECT obj_description('temp.streams'::regclass)").fetchone()
        assert desc == ("stream (archived)",)
        plan = [r[0] for r in c.execute("EXPLAIN SELECT * FROM per_node WHERE avg > 20")]
        assert plan[0] == "snapshot query (back end, at now) → node, avg"
    r = psql(s2, "-c", "\\d per_node", "-c", "\\dt temp.*")
    assert 'View "public.per_node"' in r.stdout and " avg    | double precision" in r.stdout
    assert " temp   | streams | table | cq" in r.stdout


def test_explain_prints_the_algebra(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _run(c, "CREATE STREAM calls (customer_id INT, type TEXT, call_length DOUBLE PRECISION,"
                " ts TIMESTAMP TIMESTAMPCOLUMN)")
        lines = [r[0] for r in c.execute(
            "EXPLAIN SELECT AVG(S.call_length) FROM calls AS S [PARTITION BY S.customer_id "
            "ROWS 10 WHERE S.type = 'Long Distance']")]
        assert lines == [
            "continuous query (back end) → avg",
            "μ avg",
            '└─ α partial p0 = sum("S.call_length"), p1 = count("S.call_length") final '
            'avg = CAST("p0" AS DOUBLE) / "p1"',
            '   └─ ω partition by "S.customer_id" rows 10 where "S.type" = \'Long Distance\'',
            "      └─ stream calls as S [ts ts]"]
        table_plan = [r[0] for r in c.execute("EXPLAIN SELECT 1")]
        assert table_plan[0] == "table query (DuckDB)"


@pytest.mark.parametrize("sql,sqlstate,text", [
    ("CREATE STREAM bad (a INT)", "42P16", "exactly one TIMESTAMPCOLUMN"),
    ("CREATE STREAM bad (a INT, t TIMESTAMP TIMESTAMPCOLUMN, u TIMESTAMP TIMESTAMPCOLUMN)",
     "42P16", "exactly one TIMESTAMPCOLUMN"),
    ("CREATE STREAM bad (a INT TIMESTAMPCOLUMN)", "42804", "must be a TIMESTAMP"),
    ("CREATE STREAM bad (a nosuchtype, t TIMESTAMP TIMESTAMPCOLUMN)", "42704",
     'type "nosuchtype" does not exist'),
    ("CREATE STREAM bad (t TIMESTAMP TIMESTAMPCOLUMN) WITH (speed = 3)", "22023",
     'unrecognized stream option "speed"'),
    ("CREATE STREAM bad (t TIMESTAMP TIMESTAMPCOLUMN) WITH (slack = 'soon')", "22023",
     'invalid value for stream option "slack"'),
    ("CREATE STREAM nope.bad (t TIMESTAMP TIMESTAMPCOLUMN)", "3F000",
     'schema "nope" does not exist'),
    ("CREATE STREAM ddl_s (t TIMESTAMP TIMESTAMPCOLUMN) TYPE ARCHIVED ON OVERLOAD DROP",
     "0A000", "ON OVERLOAD applies to unarchived streams"),
    ("DROP STREAM never_made", "42P01", 'stream "never_made" does not exist'),
    ("ALTER STREAM ddl_base ADD WRAPPER nowrap", "42704", 'wrapper "nowrap" does not exist'),
    ("CREATE WRAPPER w2 (init = 'a.b', next = 'a.c')", "22023",
     "a wrapper needs init, next and done"),
    ("SELECT nocol FROM ddl_base [NOW]", "42703", 'column "nocol" does not exist'),
    ("SELECT * FROM ddl_base, ddl_base AS b WHERE ddl_base.a = b.a", "0A000",
     "two unbounded streams"),
    ("SELECT ISTREAM(a) FROM ddl_base [NOW]", "0A000", "ISTREAM is not needed"),
    ("SELECT * FROM ddl_base [RANGE '3 eons']", "22023", 'unknown unit "eons"'),
    ("SELECT * FROM ddl_base [RANGE 10 SECONDS", "42601", "syntax error"),
])
def test_errors(server, sql, sqlstate, text):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("CREATE STREAM IF NOT EXISTS ddl_base (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        assert e.value.sqlstate == sqlstate, (e.value.sqlstate, str(e.value))
        assert text in str(e.value)
        assert c.execute("SELECT 'session still usable'").fetchone()[0]


def test_drop_restrict_and_cascade(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _run(c, "CREATE STREAM base2 (a INT, t TIMESTAMP TIMESTAMPCOLUMN)",
             "CREATE WINDOW w_on_base2 AS SELECT a FROM base2 [ROWS 5]",
             "CREATE STREAM d_on_w AS SELECT a FROM w_on_base2")
        with pytest.raises(psycopg.errors.DependentObjectsStillExist) as e:
            c.execute("DROP STREAM base2")
        assert "window w_on_base2" in e.value.diag.message_detail
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        c.execute("DROP STREAM base2 CASCADE")
        assert notices == ["drop cascades to window w_on_base2",
                           "drop cascades to derived d_on_w"]
        left = c.execute("SELECT count(*) FROM pg_class WHERE relname IN "
                         "('base2', 'w_on_base2', 'd_on_w')").fetchone()
        assert left == (0,)
        c.execute("DROP STREAM IF EXISTS base2")


def test_syntax_error_position(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.SyntaxError) as e:
            c.execute("SELECT * FROM s\n  [ROWS 10 WHERE]")
        assert e.value.diag.statement_position is not None
        assert int(e.value.diag.statement_position) > 16     # on the second line


def test_two_objects_made_at_once_never_share_an_oid(tmp_path):
    """A session takes an OID, starts its object's query under it (-oid), then saves it:
    another session between the two took the same OID before, and the back end ran two
    relations as one query (a derived stream read the other's rows; found by two
    differential runs on one server)."""
    catalog_files.save(str(tmp_path), registry.DOCUMENT, [])
    reg = registry.StreamRegistry(None, str(tmp_path))
    taken: list = []
    threads = [threading.Thread(target=lambda: taken.extend(reg.next_oid() for _ in range(50)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(taken) == len(set(taken)) == 200
