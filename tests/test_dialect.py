"""The CQL dialect: every statement and window form round-trips (``validate_identity``), the
SQL handed to DuckDB and Spark for expressions is what those engines read (``validate_all``),
and syntax errors carry line, column and the token."""
import pytest
import sqlglot
from sqlglot.errors import ParseError

import dialect  # noqa: F401  (registers "cql")
from dialect import expressions as X


def validate_identity(sql: str, write_sql: str | None = None) -> sqlglot.exp.Expression:
    tree = sqlglot.parse_one(sql, read="cql")
    assert tree.sql("cql") == (write_sql or sql)
    return tree


def validate_all(sql: str, write: dict) -> None:
    tree = sqlglot.parse_one(sql, read="cql")
    for dialect_name, expected in write.items():
        assert tree.sql(dialect_name) == expected, dialect_name


IDENTITIES = [
    # windows after a stream reference
    "SELECT * FROM S [RANGE 10 SECONDS]",
    "SELECT * FROM S [RANGE 1 HOUR SLIDE 10 MINUTES]",
    "SELECT * FROM S ['2 minutes']",
    "SELECT * FROM S [2 sec]",
    "SELECT * FROM S [RANGE BY '5 seconds' SLIDE BY '1 second' START AT '2026-11-01 00:00:00']",
    "SELECT * FROM S [RANGE BY '5 seconds']",
    "SELECT * FROM S [ROWS 10]",
    "SELECT * FROM S [PARTITION BY a, b ROWS 5]",
    "SELECT AVG(S.call_length) FROM S [PARTITION BY S.customer_id ROWS 10 WHERE "
    "S.type = 'Long Distance']",
    "SELECT * FROM S [NOW]",
    "SELECT * FROM S [UNBOUNDED]",
    "SELECT * FROM S [RANGE UNBOUNDED]",
    "SELECT * FROM S [BETWEEN '2026-11-01' AND '2026-11-02']",
    "SELECT * FROM S [RANGE INTERVAL '1 DAY']",
    "SELECT * FROM S [RANGE 10] AS s",
    "SELECT * FROM temp.streams tr ['2 minutes']",
    "SELECT * FROM R [2 sec], S [2 sec] WHERE distance(R.location, S.location) <= 5",
    "SELECT * FROM S [RANGE 10 SECONDS] JOIN t ON S.a = t.a",
    "SELECT wtime(*), AVG(x) FROM S [RANGE '5 seconds' SLIDE '1 second']",
    # Stream(x) (seed 002)
    "SELECT stock, AVG(price) FROM Stream(CurPrice) [RANGE 1 DAY] GROUP BY stock",
    "SELECT MAX(price), company FROM Stream(CurPrice) [RANGE 2 HOURS], Stream(Stock) "
    "WHERE Stream(CurPrice).stock = Stream(Stock).stock",
    # TelegraphCQ's WINDOW clause, and SQL's keeps its meaning
    "SELECT AVG(tr.airtemp) FROM temp.streams AS tr GROUP BY tr.node WINDOW tr ['2 minutes']",
    "SELECT AVG(a.x) FROM a, b WHERE a.k = b.k WINDOW a ['1 minute'], b [ROWS 10]",
    "SELECT a, SUM(b) OVER w FROM t WINDOW w AS (PARTITION BY a)",
    # StreaQueL loops: sliding, hopping, landmark, backward
    "SELECT AVG(x) FROM S for (t = ST; t < ST + 50; t++) { WindowIs(S, t - 4, t) }",
    "SELECT AVG(x) FROM S for (t = ST; t < ST + 50; t += 5) { WindowIs(S, t - 4, t) }",
    "SELECT AVG(x) FROM S for (t = ST; t < ST + 50; t = t + 5) { WindowIs(S, t - 4, t) }",
    "SELECT AVG(x) FROM S for (t = ST; t < ST + 50; t++) { WindowIs(S, ST, t) }",
    "SELECT AVG(x) FROM S for (t = NOW; t > NOW - 50; t -= 1) { WindowIs(S, t - 4, t) }",
    "SELECT AVG(x) FROM S for (t = ST; t > ST - 50; t -= 5) { WindowIs(S, t - 4, t) }",
    # stream DDL
    "CREATE STREAM temp.streams (Node INT, airtemp REAL, tcqtime TIMESTAMP TIMESTAMPCOLUMN) "
    "TYPE ARCHIVED",
    "CREATE STREAM IF NOT EXISTS I (val DOUBLE PRECISION, ts TIMESTAMP TIMESTAMPCOLUMN, "
    "te TIMESTAMP ENDTIMESTAMPCOLUMN) TYPE UNARCHIVED WITH (slack = '2 seconds', "
    "heartbeat = '1 second') ON OVERLOAD KEEP COUNTS",
    "CREATE STREAM s (a INT, t TIMESTAMP TIMESTAMPCOLUMN) ON OVERLOAD DROP",
    "CREATE STREAM d AS SELECT * FROM S [RANGE 1 HOUR]",
    "CREATE WINDOW w AS SELECT a, COUNT(*) FROM S ['2 minutes'] GROUP BY a",
    "CREATE WRAPPER w (init = 'mod.init', next = 'mod.next', done = 'mod.done')",
    "DROP STREAM IF EXISTS temp.streams",
    "DROP STREAM s CASCADE",
    "DROP WINDOW w",
    "DROP WRAPPER w",
    "ALTER STREAM temp.streams ADD WRAPPER csvwrapper",
    "ALTER STREAM s ADD COLUMN extra INT",
    "ALTER STREAM s SET (slack = '5 seconds')",
    # EXPLAIN of a continuous query
    "EXPLAIN SELECT * FROM S [RANGE 10 SECONDS]",
    "EXPLAIN VERBOSE SELECT node, AVG(x) FROM S [ROWS 5] GROUP BY node",
    # ordinary PostgreSQL is untouched
    "SELECT * FROM t FOR UPDATE",
    "SELECT a[1] FROM t",
]


@pytest.mark.parametrize("sql", IDENTITIES)
def test_identity(sql):
    validate_identity(sql)


def test_oid_type():
    validate_identity("SELECT x::oid, $1::oid[]", "SELECT CAST(x AS OID), CAST($1 AS OID[])")


def test_interval_spellings():
    for text in ("'2 minutes'", "INTERVAL '1 DAY'", "2 sec", "1 hour", "10 seconds",
                 "INTERVAL '2 MINUTES'"):
        validate_identity(f"SELECT * FROM S [RANGE {text}]")
    validate_identity("SELECT * FROM S [RANGE INTERVAL '1 day']",
                      "SELECT * FROM S [RANGE INTERVAL '1 DAY']")


def test_nodes():
    tree = sqlglot.parse_one("SELECT * FROM S [RANGE 1 HOUR SLIDE 5 MINUTES] AS s", read="cql")
    ref = tree.find(X.StreamRef)
    assert ref.alias == "s" and ref.name == "S"
    spec = ref.args["window"]
    assert spec.args["kind"] == "slide"
    assert spec.args["size"].sql("cql") == "1 HOUR"
    loop = sqlglot.parse_one("SELECT AVG(x) FROM S for (t = 0; t < 50; t += 5) "
                             "{ WindowIs(S, t - 4, t) }", read="cql").args["streaquel"]
    assert loop.args["step"].args["op"] == "+=" and len(loop.args["windows"]) == 1
    create = sqlglot.parse_one("CREATE STREAM s (v INT, a TIMESTAMP TIMESTAMPCOLUMN, "
                               "b TIMESTAMP ENDTIMESTAMPCOLUMN) TYPE ARCHIVED", read="cql")
    assert isinstance(create, X.CreateStream) and create.args["archived"] is True
    kinds = [c.find(X.TimestampColumnConstraint) for c in create.this.expressions]
    assert kinds[0] is None and not kinds[1].args.get("end") and kinds[2].args["end"]


def test_expressions_for_duckdb_and_spark():
    validate_all("SELECT price * 0.908 AS euros FROM bids",
                 {"duckdb": "SELECT price * 0.908 AS euros FROM bids",
                  "spark": "SELECT price * 0.908 AS euros FROM bids"})
    validate_all("SELECT auction % 123 = 0 FROM bids",
                 {"duckdb": "SELECT auction % 123 = 0 FROM bids",
                  "spark": "SELECT auction % 123 = 0 FROM bids"})
    validate_all("SELECT x::int4, name ILIKE 'a%' FROM s",
                 {"duckdb": "SELECT CAST(x AS INT), name ILIKE 'a%' FROM s",
                  "spark": "SELECT CAST(x AS INT), name ILIKE 'a%' FROM s"})
    validate_all("SELECT COALESCE(a, 0), date_trunc('hour', t) FROM s",
                 {"duckdb": "SELECT COALESCE(a, 0), DATE_TRUNC('HOUR', t) FROM s",
                  "spark": "SELECT COALESCE(a, 0), DATE_TRUNC('HOUR', t) FROM s"})


@pytest.mark.parametrize("sql,token,line,col", [
    ("SELECT * FROM S [RANGE 10 SECONDS", "", 1, None),
    ("SELECT * FROM S\n  [ROWS 10 WHERE]", "]", 2, None),
    ("SELECT AVG(x) FROM S for (t = 0; t < 5; t ** 2) { WindowIs(S, t, t) }", None, 1, None),
    ("CREATE STREAM s (a INT) TYPE SOMETIMES", "SOMETIMES", 1, None),
])
def test_syntax_errors_carry_line_column_token(sql, token, line, col):
    with pytest.raises(ParseError) as e:
        sqlglot.parse_one(sql, read="cql")
    err = e.value.errors[0]
    assert err["line"] == line
    assert err["col"] >= 1
    if token:
        assert token in err["highlight"]
