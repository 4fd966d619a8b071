"""The planner: fixtures of SQL and the expected plan (the seeds' queries verbatim where they
are SQL), every error case with its SQLSTATE and message, serialisation, routing."""
import os

import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect import errors as DE
from dialect.planner import Relation, explain, is_continuous, plan, timestamp_us
from executor import plan as P
from executor.operators.scan import Scan
from gateway.spark_engine import translate as spark_plans
from planner_catalog import seed_catalog

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = timestamp_us("2026-11-21 12:00:00")


def _fixtures():
    text = open(os.path.join(HERE, "fixtures", "planner.sql"), encoding="utf-8").read()
    for block in text.strip().split("\n\n"):
        lines = [ln for ln in block.splitlines() if not ln.startswith("--")]
        sql_end = next(i for i, ln in enumerate(lines) if ln.endswith(";"))
        yield " ".join(lines[:sql_end + 1])[:-1], lines[sql_end + 1:]


FIXTURES = list(_fixtures())


def _plan(sql: str, **kw) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), seed_catalog(), now_us=NOW, **kw)


@pytest.mark.parametrize("sql,expected", FIXTURES, ids=[s[:60] for s, _ in FIXTURES])
def test_fixture(sql, expected):
    assert explain(_plan(sql)) == expected


ERRORS = [
    ("SELECT * FROM nowhere [RANGE 1 MINUTE]", "42P01", 'relation "nowhere" does not exist'),
    ("SELECT nocol FROM sensors [RANGE 1 MINUTE]", "42703", 'column "nocol" does not exist'),
    ("SELECT x.node FROM sensors [NOW] AS s", "42P01", 'missing FROM-clause entry for table "x"'),
    ("SELECT node FROM sensors [NOW] AS a, sensors [NOW] AS b", "42702",
     'column reference "node" is ambiguous'),
    ("SELECT SUM(type) FROM S [ROWS 5]", "42804", "function sum(TEXT) does not exist"),
    ("SELECT node FROM sensors [NOW] WHERE node", "42804",
     "argument of WHERE must be type boolean, not type INT"),
    ("SELECT node + 'a' FROM sensors [NOW]", "42804",
     "operator does not exist: INT + VARCHAR"),
    # seed 002's Query2 verbatim: MAX with a column outside GROUP BY
    ("SELECT MAX(price), company FROM Stream(CurPrice) [Range 2 hours], Stream(Stock) "
     "WHERE Stream(CurPrice).stock = Stream(Stock).stock", "42803",
     'column "company" must appear in the GROUP BY clause or be used in an aggregate function'),
    ("SELECT * FROM R, P WHERE R.sid = P.sid", "0A000",
     "a join of two unbounded streams (R, P) would keep every tuple forever"),
    ("SELECT node FROM sensors [RANGE 1 MINUTE] EXCEPT SELECT node FROM sensors", "0A000",
     "a difference with the unbounded stream sensors"),
    ("SELECT * FROM R [2 sec], P WHERE R.sid = P.sid", "0A000",
     "a join with the unbounded stream P would keep all of its tuples forever"),
    ("SELECT ISTREAM(node) FROM sensors [RANGE 1 MINUTE]", "0A000",
     "ISTREAM is not needed in cqgate"),
    ("SELECT * FROM nodes [RANGE 1 MINUTE], sensors", "0A000",
     '"nodes" is a table; windows apply to streams'),
    ("SELECT node FROM sensors [RANGE 1 MINUTE] ORDER BY node", "0A000",
     "ORDER BY is not supported in a continuous query"),
    ("SELECT node FROM sensors [NOW] INTERSECT SELECT node FROM sensors", "0A000",
     "an intersection with the unbounded stream sensors"),
    # seed 003 verbatim: DuckDB has no distance() (list_distance is its)
    ("SELECT * FROM R [2 sec], S [2 sec] WHERE distance(R.location, S.location) <= 5",
     "42883", "function distance() does not exist"),
    ("SELECT node, random() FROM sensors [NOW]", "0A000", "random() is volatile"),
    # Σ keeps every valid tuple of its inputs, as a join does
    ("SELECT * FROM sensors s LEFT JOIN R [2 sec] ON s.node = R.sid", "0A000",
     "LEFT JOIN over the unbounded stream s and other inputs would keep all of its tuples"),
    ("SELECT node FROM sensors [NOW] s WHERE valid_from > (SELECT MAX(valid_from) FROM R "
     "[2 sec])", "0A000", "valid_from can only be selected"),
    ("SELECT node, ROW_NUMBER() OVER (ORDER BY nosuch) FROM sensors [NOW]", "42703",
     'column "nosuch" does not exist'),
    ("SELECT node FROM sensors [NOW] WHERE COUNT(*) > 1", "42803",
     "aggregate functions are not allowed in WHERE"),
    ("SELECT node FROM sensors [NOW] GROUP BY COUNT(*)", "42803",
     "aggregate functions are not allowed in GROUP BY"),
    ("SELECT MAX(COUNT(*)) FROM sensors [NOW]", "42803",
     "aggregate function calls cannot be nested"),
    ("SELECT * FROM sensors [ROWS 0]", "22023", "ROWS needs a positive integer"),
    ("SELECT * FROM sensors [RANGE '2 fortnights']", "22023", 'unknown unit "fortnights"'),
    ("SELECT * FROM sensors [BETWEEN '2026-11-02' AND '2026-11-01']", "22023", "t1 < t2"),
    ("SELECT wtime(*) FROM sensors [RANGE 1 MINUTE]", "42703",
     "wtime(*) needs a window with SLIDE"),
    ("SELECT AVG(tr.airtemp) FROM temp.streams tr WINDOW x ['2 minutes']", "42P01",
     'WINDOW names "x"'),
    ("SELECT node FROM sensors ['1 minute'] AS s WINDOW s ['2 minutes']", "0A000",
     "both after it and in the WINDOW clause"),
    ("SELECT room FROM hot_rooms [RANGE 1 MINUTE]", "0A000",
     "hot_rooms is a named window; windows apply to streams"),
    ("SELECT 1 FROM nodes", "0A000", "reads at least one stream or window"),
]


@pytest.mark.parametrize("sql,sqlstate,message", ERRORS, ids=[e[0][:50] for e in ERRORS])
def test_errors(sql, sqlstate, message):
    with pytest.raises(DE.PlanError) as e:
        _plan(sql)
    assert e.value.sqlstate == sqlstate
    assert message in e.value.message
    if sqlstate in ("0A000", "42703", "42803", "42883") and "needed" not in message:
        assert e.value.hint, "an unsupported shape says what to write instead"


def test_unbounded_join_error_suggests_a_window():
    with pytest.raises(DE.Unsupported) as e:
        _plan("SELECT * FROM R, P WHERE R.sid = P.sid")
    assert "[RANGE '1 minute']" in e.value.hint


def test_modes():
    assert _plan("SELECT node FROM sensors [RANGE 1 MINUTE]").mode == "continuous"
    assert _plan("SELECT node FROM sensors [RANGE 1 MINUTE]", snapshot=True).mode == "snapshot"
    assert _plan("SELECT room FROM hot_rooms").mode == "snapshot"
    assert _plan("SELECT * FROM sensors [BETWEEN '2026-11-01' AND '2026-11-02']").mode == \
        "archive"
    assert _plan("SELECT * FROM sensors [BETWEEN '2026-11-20' AND '2026-11-22']").mode == \
        "continuous"


def test_a_plan_that_reads_now_says_so():
    """now() is a constant of the plan (the instant it was made), so the gateway makes such
    a plan anew each time; so it is when a SQL function's body reads it."""
    cat = seed_catalog()
    cat.functions["stamped"] = (("x",), "x || CAST(now() AS VARCHAR)")
    read = {sql: plan(sqlglot.parse_one(sql, read="cql"), cat).reads_now for sql in (
        "SELECT node FROM sensors [RANGE 1 MINUTE]",
        "SELECT node, now() FROM sensors [RANGE 1 MINUTE]",
        "SELECT node FROM sensors [RANGE 1 MINUTE] WHERE tcqtime > current_date",
        "SELECT stamped(CAST(node AS TEXT)) FROM sensors [RANGE 1 MINUTE]")}
    assert list(read.values()) == [False, True, True, True]


def test_plans_serialise_and_come_back_equal():
    for sql, _ in FIXTURES:
        p = _plan(sql)
        assert P.from_json(P.to_json(p)) == p


def test_output_columns_and_pseudo_columns():
    p = _plan("SELECT wtime(*), node, COUNT(*) AS n, valid_from FROM sensors "
              "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY node")
    assert [(c.name, c.type) for c in p.output] == [
        ("wtime", "TIMESTAMP"), ("node", "INT"), ("n", "BIGINT"), ("valid_from", "TIMESTAMP")]
    assert p.pseudo == ("wtime", "valid_from")
    window = p.root.input.input
    assert window.window == P.SlideWindow(10_000_000, 2_000_000, None)


def test_is_continuous():
    cat = seed_catalog()
    parse = lambda s: sqlglot.parse_one(s, read="cql")  # noqa: E731
    assert is_continuous(parse("SELECT * FROM sensors"), cat)
    assert is_continuous(parse("SELECT * FROM hot_rooms"), cat)
    assert is_continuous(parse("SELECT * FROM Stream(CurPrice) [RANGE 1 DAY]"), cat)
    assert not is_continuous(parse("SELECT * FROM nodes JOIN CurPrice ON true"), cat)
    assert not is_continuous(parse("SELECT 1"), cat)


# What the Spark engine would answer otherwise is refused there (0A000), the same plans the
# back end runs; an integer division is spelled as one, so Spark's DIV truncates as the back
# end does (Spark's / of two integers is a DOUBLE).
SPARK_REFUSED = [
    ("SELECT node FROM sensors [RANGE 1 MINUTE] INTERSECT SELECT node FROM sensors "
     "[RANGE 1 MINUTE]", "INTERSECT"),
    ("SELECT node FROM sensors [RANGE 1 MINUTE] EXCEPT ALL SELECT node FROM sensors "
     "[RANGE 1 MINUTE]", "EXCEPT"),
    ("SELECT node, SUM(DISTINCT airtemp) FROM sensors [RANGE 1 MINUTE] GROUP BY node",
     "sum_distinct"),
    ("SELECT node, COUNT(DISTINCT airtemp) FROM sensors [RANGE 1 MINUTE] GROUP BY node",
     "count_distinct"),
]


@pytest.mark.parametrize("sql,why", SPARK_REFUSED, ids=[w for _, w in SPARK_REFUSED])
def test_what_spark_would_answer_otherwise_is_refused_there(sql, why):
    with pytest.raises(spark_plans.Refused) as e:
        spark_plans.check(_plan(sql))
    assert e.value.sqlstate == "0A000" and why in e.value.message


def test_an_integer_division_is_one_on_every_engine():
    p = _plan("SELECT node / 2 AS half, airtemp / 2 AS halved FROM sensors [RANGE 1 MINUTE] "
              "WHERE node % 2 = 0")
    half, halved = p.root.outputs
    assert half.expr.sql == '"sensors.node" // 2' and half.expr.type == "INTEGER"
    assert halved.expr.sql == '"sensors.airtemp" / 2'
    assert spark_plans.spark_sql(half.expr) == "`sensors.node` DIV 2"
    spark_plans.check(p)             # and Spark runs it


def test_a_view_with_births_reads_the_streams_that_start_with_it_from_there():
    """A derived stream read through its query (a view with births): its reads that start
    with its query ([ROWS]) read from its birth, its window that reaches back and the outer
    query's own read do not; the plan keeps that through the plan queue's JSON, EXPLAIN
    shows it, and the scan gives none of the tuples before it."""
    cat = seed_catalog()
    cat.add(Relation("last3", "view", (("node", "INT"), ("airtemp", "REAL")),
                     query="SELECT node, airtemp FROM sensors [ROWS 3] UNION ALL "
                           "SELECT node, airtemp FROM sensors [RANGE '1 minute']",
                     born=(("sensors", 5_000_000),)))
    p = plan(sqlglot.parse_one("SELECT node FROM last3 UNION ALL SELECT node FROM sensors",
                               read="cql"), cat, now_us=NOW)
    scans = []

    def visit(node, under):
        if isinstance(node, P.StreamScan):
            scans.append((under, node.born_us))
        for c in P.children(node):
            visit(c, type(node.window).__name__ if isinstance(node, P.Window) else under)
    visit(p.root, None)
    assert sorted(scans, key=str) == sorted([("RowsWindow", 5_000_000), ("RangeWindow", None),
                                             ("UnboundedWindow", None)], key=str), scans
    assert P.from_json(P.to_json(p)) == p
    assert any("stream sensors [ts tcqtime] from 1970-01-01 00:00:05" in ln
               for ln in explain(p)), explain(p)
    rows3 = next(n for n in _walk(p.root) if isinstance(n, P.StreamScan) and n.born_us)
    batch = pa.record_batch({"node": [1, 2, 3], "airtemp": [1.0, 2.0, 3.0],
                             "tcqtime": pa.array([4_000_000, 5_000_000, 6_000_000],
                                                 pa.timestamp("us"))})
    out = Scan(rows3).transform(batch)
    assert out.column(f"{rows3.alias}.node").to_pylist() == [2, 3]
    # a read by arrival has no event time to begin at
    arrival = _plan("SELECT node FROM sensors [ROWS 5 ON ARRIVAL]")
    assert P.born_from(arrival.root, {"sensors": 5_000_000}) == arrival.root


def _walk(node):
    yield node
    for c in P.children(node):
        yield from _walk(c)
