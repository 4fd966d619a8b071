"""Scalar Python functions (``CREATE FUNCTION … LANGUAGE python``, ``--function``) through the real
server: right at every instant (DuckDB on the snapshots runs the same Python body), in
cursors, derived streams, named windows and snapshot mode; vectorised module functions; the
errors a user meets (42P13, 38000, 42501, 0A000, 42723); kept across a restart."""
from __future__ import annotations

import os
import pathlib

import psycopg
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect import errors as DE
from dialect.planner import plan
from differential.world import PYTHON_BODY, Window, python_function
from differential.written import Written, assert_right, refs
from executor import plan as P
from executor.python_functions import PythonFunction
from planner_catalog import seed_catalog
from continuous import unique

ROOT = pathlib.Path(__file__).resolve().parent.parent
S = 1_000_000
RANGE2 = Window("range", size=2 * S)

# each is judged against DuckDB running the same body (the differential tester's pyfn)
CASES = {
    "in the select list and WHERE, over an unbounded stream": (
        "k, {pyfn}(s, v) AS p", "FROM {s1} WHERE {pyfn}(s, k) IS NOT NULL",
        "FROM snap0(@T@) WHERE pyfn(s, k) IS NOT NULL",
        refs(("s1", Window("unbounded"), "s1"))),
    "as a GROUP BY key, counted over a range window": (
        "{pyfn}(s, k) AS p, COUNT(*) AS n, SUM(v) AS total",
        "FROM {s1} [RANGE '2 seconds'] GROUP BY {pyfn}(s, k)",
        "FROM snap0(@T@) GROUP BY pyfn(s, k)", refs(("s1", RANGE2, "s1"))),
    "inside an aggregate and in a join's condition": (
        "a.k, MAX({pyfn}(a.s, b.v)) AS top",
        "FROM {s1} [RANGE '2 seconds'] AS a JOIN {s2} [RANGE '2 seconds'] AS b "
        "ON a.k = b.k AND {pyfn}(a.s, b.k) <> 'b' GROUP BY a.k",
        "FROM snap0(@T@) AS a JOIN snap1(@T@) AS b ON a.k = b.k AND pyfn(a.s, b.k) <> 'b' "
        "GROUP BY a.k", refs(("s1", RANGE2, "a"), ("s2", RANGE2, "b"))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_python_functions_are_right_at_every_instant(server, name):
    items, cql, oracle, read = CASES[name]
    assert_right(server.dsn, Written(items, cql, oracle), read)


def _run(c, sql: str):
    cur = c.execute(sql)
    return cur.fetchall() if cur.description else cur.statusmessage


def test_a_table_query_and_a_named_window_call_it_as_written(server):
    f, s, w = unique("pyf"), unique("pys"), unique("pyw")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _run(c, f"CREATE FUNCTION {f}(s TEXT, n INT) RETURNS TEXT LANGUAGE python AS "
                f"$${PYTHON_BODY}$$")
        assert _run(c, f"SELECT {f}('ab', 2), {f}(NULL, 1), {f}('x', NULL)") == \
            [(python_function("ab", 2), None, python_function("x", None))]
        _run(c, f"CREATE STREAM {s} (s TEXT, n INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        _run(c, f"CREATE WINDOW {w} AS SELECT s, {f}(s, n) AS p FROM {s} [RANGE '1 hour']")
        _run(c, f"INSERT INTO {s} VALUES ('ab', 1, '2026-01-01 00:00:00'), "
                "('cd', 2, '2026-01-01 00:00:01'), (NULL, 3, '2026-01-01 00:00:02')")
        _run(c, f"ALTER STREAM {s} ADVANCE TO '2026-01-01 00:00:05'")
        _run(c, "SELECT count(*) FROM cq_queries")           # the back end has answered
        assert sorted(_run(c, f"SELECT s, p FROM {w}"), key=str) == sorted(
            [(a, python_function(a, n)) for a, n in (("ab", 1), ("cd", 2), (None, 3))], key=str)
        plan_text = "\n".join(r[0] for r in _run(c, f"EXPLAIN SELECT {f}(s, n) FROM {s}"))
        assert f"{f}(" in plan_text and f"Python functions: {f}(VARCHAR, INTEGER)" in plan_text
        _run(c, f"DROP WINDOW {w}")
        _run(c, f"DROP STREAM {s}")
        _run(c, f"DROP FUNCTION {f}")
        with pytest.raises(psycopg.errors.UndefinedFunction):
            c.execute(f"SELECT {f}('ab', 2)")


@pytest.mark.parametrize("sql, sqlstate, words", [
    ("CREATE FUNCTION {f}(x INT) RETURNS INT LANGUAGE python AS $$ return x +* 1 $$",
     "42P13", "is not Python"),
    ("CREATE FUNCTION {f}(x INT) LANGUAGE python AS $$ return x $$", "42P13", "RETURNS"),
    ("CREATE FUNCTION {f}(x NOSUCHTYPE) RETURNS INT LANGUAGE python AS $$ return 1 $$",
     "42P13", "NOSUCHTYPE"),
    ("CREATE FUNCTION lower(x TEXT) RETURNS TEXT LANGUAGE python AS $$ return x $$",
     "42723", "already exists"),
])
def test_a_definition_that_cannot_be_one_is_refused(server, sql, sqlstate, words):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql.format(f=unique("pyf")))
        assert e.value.sqlstate == sqlstate and words.lower() in str(e.value).lower()
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_what_the_function_raises_ends_the_statement_not_the_session(server):
    f, g, s = unique("pyf"), unique("pyg"), unique("pys")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _run(c, f"CREATE FUNCTION {f}(x INT) RETURNS INT LANGUAGE python AS $$ return 10 // x $$")
        _run(c, f"CREATE FUNCTION {g}(x INT) RETURNS INT LANGUAGE python AS $$ return 'ten' $$")
        for call, words in ((f"{f}(0)", "ZeroDivisionError"), (f"{g}(1)", "not INT")):
            with pytest.raises(psycopg.Error) as e:
                c.execute(f"SELECT {call}")
            assert e.value.sqlstate == "38000" and words in str(e.value)
        _run(c, f"CREATE STREAM {s} (x INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute("BEGIN")
        c.execute(f"DECLARE q CURSOR FOR SELECT x, {f}(x) FROM {s}")
        c.execute(f"INSERT INTO {s} VALUES (5, '2026-01-01 00:00:00')")
        assert _run(c, "FETCH 1 FROM q WITH (timeout = '10s')") == [(5, 2)]
        c.execute(f"INSERT INTO {s} VALUES (0, '2026-01-01 00:00:01')")
        with pytest.raises(psycopg.Error) as e:
            c.execute("FETCH 1 FROM q WITH (timeout = '10s')")
        assert e.value.sqlstate == "38000" and "ZeroDivisionError" in str(e.value)
        c.execute("ROLLBACK")
        assert _run(c, f"SELECT {f}(5)") == [(2,)]


def test_only_a_superuser_creates_and_a_volatile_one_stays_out_of_continuous_queries(server):
    f, v, s, role = unique("pyf"), unique("pyv"), unique("pys"), unique("bob")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        _run(c, f"CREATE ROLE {role} LOGIN")
        _run(c, f"CREATE STREAM {s} (x INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        _run(c, f"GRANT SELECT ON {s} TO {role}")
        _run(c, f"CREATE FUNCTION {f}(x INT) RETURNS INT LANGUAGE python AS $$ return x + 1 $$")
        _run(c, f"CREATE FUNCTION {v}(x INT) RETURNS INT LANGUAGE python VOLATILE AS $$\n"
                "import random\nreturn x + random.randint(0, 1)\n$$")
        assert _run(c, f"SELECT {v}(1) BETWEEN 1 AND 2") == [(True,)]
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            c.execute(f"EXPLAIN SELECT {v}(x) FROM {s}")
        assert "volatile" in str(e.value) and "IMMUTABLE" in e.value.diag.message_hint
    dsn = server.dsn.replace("user=cq", f"user={role}")
    with psycopg.connect(dsn, autocommit=True) as bob:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute(f"CREATE FUNCTION {unique('b')}(x INT) RETURNS INT LANGUAGE python "
                        "AS $$ return x $$")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute(f"DROP FUNCTION {f}")
        assert _run(bob, f"SELECT {f}(1)") == [(2,)]      # PUBLIC may call it, as in PostgreSQL


def test_functions_are_kept_across_a_restart_and_module_functions_are_vectorised(
        start_server, tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "clients" / "python"),
                                          os.environ.get("PYTHONPATH", "")])}
    args = ("--function", "count_char=functions:count_char")
    data = str(tmp_path / "data")
    first = start_server(*args, data_dir=data, env=env)
    with psycopg.connect(first.dsn, autocommit=True) as c:
        _run(c, "CREATE FUNCTION twice(x INT) RETURNS INT LANGUAGE python STRICT AS "
                "$$ return 2 * x $$")
        _run(c, "CREATE STREAM bids (extra TEXT, price INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        plan_text = "\n".join(r[0] for r in _run(
            c, "EXPLAIN SELECT count_char(extra, 'c'), twice(price) FROM bids"))
        assert "count_char(VARCHAR, VARCHAR) → INTEGER vectorised" in plan_text
        assert "twice(INTEGER) → INTEGER per row" in plan_text
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DROP FUNCTION count_char")             # the operator's
    first.stop()
    again = start_server(*args, data_dir=data, env=env)
    texts = ["cccx", "abc", None, "", "ccc"]
    with psycopg.connect(again.dsn, autocommit=True) as c:
        c.execute("BEGIN")
        c.execute("DECLARE q CURSOR FOR SELECT extra, count_char(extra, 'c') AS n, "
                  "twice(price) AS p FROM bids")
        c.execute("INSERT INTO bids VALUES " + ", ".join(
            f"({'NULL' if x is None else repr(x)}, {i}, '2026-01-01 00:00:0{i}')"
            for i, x in enumerate(texts)))
        got = _run(c, f"FETCH {len(texts)} FROM q WITH (timeout = '10s')")
        c.execute("COMMIT")
    assert got == [(x, None if x is None else x.count("c"), 2 * i) for i, x in enumerate(texts)]


def test_a_plan_carries_its_functions_and_explain_names_them():
    fn = PythonFunction("pyfn", ("s", "n"), ("VARCHAR", "BIGINT"), "VARCHAR", body=PYTHON_BODY)
    catalog = seed_catalog()
    catalog.python["pyfn"] = fn
    p = plan(sqlglot.parse_one("SELECT pyfn(type, customer_id) AS p FROM S", read="cql"),
             catalog, now_us=0)
    assert p.functions == (fn,)
    assert P.from_json(P.to_json(p)).functions == (fn,)
    assert fn.duck_name in p.root.outputs[0].expr.sql.lower()
    assert any("pyfn(" in line for line in P.explain(p))
    volatile = PythonFunction("pyv", ("x",), ("INTEGER",), "INTEGER", body="return x",
                              volatile=True)
    catalog.python["pyv"] = volatile
    with pytest.raises(DE.Unsupported):
        plan(sqlglot.parse_one("SELECT pyv(customer_id) FROM S", read="cql"), catalog,
             now_us=0)
