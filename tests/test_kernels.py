"""Simple σ and μ expressions run by Arrow's kernels (executor/kernels.py) must answer exactly as
DuckDB does: random expressions over random batches (NULLs, zeros, negatives, the integer
limits, NaN) through the query graph, with the kernels and without them, give the same rows, the
same types and the same errors."""
import decimal

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dialect  # noqa: F401
from dialect.planner import MemoryCatalog, Relation, plan
from executor import duck
from executor.expressions import kernels, predicate_index
from executor import plan as P
from executor.graph import Graph

S = 1_000_000
CATALOG = MemoryCatalog().add(Relation("t", "stream", (
    ("i", "INT"), ("b", "BIGINT"), ("d", "DOUBLE PRECISION"), ("n", "NUMERIC(12,3)"),
    ("s", "TEXT"), ("f", "BOOLEAN"), ("ts", "TIMESTAMP")), "ts"))

INT_MAX = 2**31 - 1
numbers = st.recursive(
    st.sampled_from(["i", "b", "d", "n", "0", "1", "3", "(-7)", "123", str(INT_MAX), "0.908",
                     "2.50", "1.5e3", "3000000000"]),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"(- {e})"),
        inner.map(lambda e: f"CAST({e} AS DOUBLE)")),
    max_leaves=4)
texts = st.sampled_from(["s", "'a'", "'x'", "''"])
comparisons = st.one_of(
    st.tuples(numbers, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), numbers),
    st.tuples(texts, st.sampled_from(["=", "<>", "<", ">="]), texts))
betweens = st.one_of(
    st.tuples(numbers, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), numbers, numbers),
    st.tuples(texts, st.sampled_from(["BETWEEN", "NOT BETWEEN"]), texts, texts))
predicates = st.recursive(
    st.one_of(comparisons.map(lambda t: f"({t[0]} {t[1]} {t[2]})"), st.just("f"),
              betweens.map(lambda t: f"({t[0]} {t[1]} {t[2]} AND {t[3]})"),
              st.sampled_from(["i", "d", "s", "n"]).map(lambda c: f"({c} IS NULL)"),
              st.sampled_from(["i", "s"]).map(lambda c: f"({c} IS NOT NULL)")),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda e: f"(NOT {e})")),
    max_leaves=3)

ints = st.one_of(st.none(), st.sampled_from([0, 1, -1, 3, -7, 123, INT_MAX, -INT_MAX - 1]),
                 st.integers(-1000, 1000))
rows = st.tuples(
    ints, st.one_of(ints, st.integers(-2**62, 2**62)),
    st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, float("nan"), 1e308]),
              st.floats(-1e6, 1e6, allow_nan=False)),
    st.one_of(st.none(), st.decimals("-999999999.999", "999999999.999", places=3,
                                     allow_nan=False, allow_infinity=False)),
    st.one_of(st.none(), st.sampled_from(["a", "x", "", "ä"])),
    st.one_of(st.none(), st.booleans()))


def _batch(data: list) -> pa.RecordBatch:
    cols = list(zip(*data))
    return pa.RecordBatch.from_pydict({
        "i": pa.array(cols[0], pa.int32()), "b": pa.array(cols[1], pa.int64()),
        "d": pa.array(cols[2], pa.float64()), "n": pa.array(cols[3], pa.decimal128(12, 3)),
        "s": pa.array(cols[4], pa.string()), "f": pa.array(cols[5], pa.bool_()),
        "ts": pa.array([k * S for k in range(len(data))], pa.int64()).cast(pa.timestamp("us"))})


def _run(sql: str, batch: pa.RecordBatch) -> tuple:
    g = Graph()
    g.add(1, plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    out = g.push("t", batch).get(1, [])
    table = pa.Table.from_batches(out) if out else None
    return (table.schema if table is not None else None,
            table.to_pylist() if table is not None else [],
            g.take_failures())


def _without_kernels(monkeypatch):
    def refuse(tree):
        raise kernels.Unsupported("off")
    monkeypatch.setattr(kernels, "Kernel", refuse)


def _same(a, b) -> bool:
    """Rows equal, NaN equal to NaN (both engines give the same NaN)."""
    def norm(v):
        return "NaN" if isinstance(v, float) and v != v else v
    return [{k: norm(v) for k, v in r.items()} for r in a] == \
        [{k: norm(v) for k, v in r.items()} for r in b]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=numbers, other=numbers, where=predicates, data=st.lists(rows, min_size=1,
                                                                    max_size=30))
def test_kernels_answer_as_duckdb(monkeypatch, value, other, where, data):
    sql = f"SELECT {value} AS v, {other} AS w, s FROM t WHERE {where}"
    batch = _batch(data)
    fast = _run(sql, batch)
    with monkeypatch.context() as m:
        _without_kernels(m)
        slow = _run(sql, batch)
    assert fast[0] == slow[0], sql                # same output types
    assert _same(fast[1], slow[1]), sql
    assert fast[2] == slow[2], sql                # same errors, each query's own


@pytest.fixture
def duck_sql(monkeypatch) -> list:
    """The SQL of every DuckDB call the executor makes from here on, none remembered from an
    earlier test."""
    monkeypatch.setattr(duck, "_SCHEMAS", {})
    calls = []
    real = duck.run

    def counting(*args):
        calls.append(args[-1])
        return real(*args)
    monkeypatch.setattr(duck, "run", counting)
    return calls


@pytest.mark.parametrize("sql, duck_calls", [
    # NEXMark q1 and q2's shapes: DuckDB is called only to type the steps and the output,
    # over no rows, on the first batch
    ("SELECT b, CAST(b * 0.908 AS DOUBLE) AS price, d FROM t", 2),
    ("SELECT b, i FROM t WHERE b % 123 = 0 AND s IS NOT NULL", 1),
    # beyond the kernels (a function): DuckDB for every batch
    ("SELECT abs(i) AS a FROM t", 3),
])
def test_simple_expressions_skip_duckdb(duck_sql, sql, duck_calls):
    calls = duck_sql
    g = Graph()
    g.add(1, plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    batch = _batch([(k, 123 * k, 1.0, decimal.Decimal("1.5"), "a", True) for k in range(10)])
    for _ in range(3):
        assert g.push("t", batch)[1]
    assert not g.take_failures()
    assert len(calls) == duck_calls, calls


def test_queries_that_differ_in_constants_are_typed_once(duck_sql):
    """Many queries that differ only in their constants (``run many``'s shape, TelegraphCQ's
    grouped filter) ask DuckDB to type their expressions once between them, and BETWEEN is
    the kernels' too: no DuckDB call for any batch."""
    calls = duck_sql
    g = Graph()
    sqls = {k: f"SELECT b FROM t WHERE b % 20 = {k}" if k % 2 else
            f"SELECT b FROM t WHERE i BETWEEN {k} AND {k + 5}" for k in range(20)}
    for k, sql in sqls.items():
        g.add(k, plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    data = [(k, 7 * k, 1.0, None, "a", True) for k in range(40)]
    got = {k: [] for k in sqls}
    for _ in range(3):
        for k, batches in g.push("t", _batch(data)).items():
            got[k] += [r["b"] for b in batches for r in b.to_pylist()]
    assert not g.take_failures()
    want = {k: 3 * [r[1] for r in data if (r[1] % 20 == k if k % 2 else k <= r[0] <= k + 5)]
            for k in sqls}
    assert got == want
    assert calls == ['SELECT ("t.b" % 20) AS s0 FROM b'], calls


CONSTANTS = st.one_of(st.sampled_from([0, 1, -1, 3, -7, 123, INT_MAX, -INT_MAX - 1,
                                       2**63 - 1, -2**63]), st.integers(-10, 10))
INDEX_EXPRS = ["i", "b", "(b % 7)", "(i - 3)", "(- i)", "d", "n"]
# (the example's expression or another, operator, constants, constant first)
index_terms = st.tuples(st.sampled_from([True, True, True, False]),
                        st.sampled_from(["=", "<", "<=", ">", ">=", "BETWEEN", "<>"]),
                        CONSTANTS, CONSTANTS, st.booleans())


def _index_term(term, expr: str, other: str) -> str:
    mine, op, c1, c2, flip = term
    expr = expr if mine else other
    c1, c2 = (f"({c})" if c < 0 else str(c) for c in (c1, c2))
    if op == "BETWEEN":
        return f"({expr} BETWEEN {c1} AND {c2})"
    return f"({c1} {op} {expr})" if flip else f"({expr} {op} {c1})"


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(expr=st.sampled_from(INDEX_EXPRS), other=st.sampled_from(INDEX_EXPRS),
       wheres=st.lists(st.lists(index_terms, min_size=1, max_size=2), min_size=2, max_size=10),
       data=st.lists(rows, min_size=1, max_size=40))
def test_the_predicate_index_answers_as_duckdb(monkeypatch, expr, other, wheres, data):
    """Many queries' σ's comparing one expression with constants share the grouped filter's
    index (a sort and binary searches); each query's rows equal DuckDB's for it alone."""
    sqls = ["SELECT b, i FROM t WHERE " + " AND ".join(_index_term(t, expr, other) for t in w)
            for w in wheres]
    batch = _batch([(r[0] if r[0] is None else r[0] % 25 - 12, *r[1:]) for r in data])

    def together():
        g = Graph()
        for k, sql in enumerate(sqls):
            g.add(k, plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
        out = {k: [r for b in bs for r in b.to_pylist()]
               for k, bs in g.push("t", batch).items()}
        return out, g.take_failures()
    fast = together()
    with monkeypatch.context() as m:
        _without_kernels(m)
        slow = together()
    assert fast == slow, sqls


def test_the_predicate_index_serves_the_comparisons_with_constants():
    """The σ's the index can answer are answered there (no per-σ scan), the others not."""
    trees = [("eq", ("mod", ("col", "b"), ("int", "7")), ("int", str(k))) for k in range(5)]
    trees += [("and", ("ge", ("col", "i"), ("int", "3")), ("le", ("col", "i"), ("int", "9"))),
              ("lt", ("neg", ("int", "4")), ("col", "i")),       # -4 < i
              ("or", ("eq", ("col", "i"), ("int", "1")), ("eq", ("col", "i"), ("int", "2")))]
    index = predicate_index.RangeIndex(trees, duck.Database()())
    batch = _batch([(k - 5 if k % 4 else None, 10 * k + 3, 1.0, None, "a", True)
                    for k in range(30)])
    got = index.select(batch, {})
    assert sorted(got) == [0, 1, 2, 3, 4, 5, 6]
    i = batch.column("i").to_pylist()
    b = batch.column("b").to_pylist()
    assert [got[k].tolist() for k in range(5)] == \
        [[r for r in range(30) if b[r] % 7 == k] for k in range(5)]
    assert got[5].tolist() == [r for r in range(30) if i[r] is not None and 3 <= i[r] <= 9]
    assert got[6].tolist() == [r for r in range(30) if i[r] is not None and -4 < i[r]]


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1),
                                 st.integers(-20, 20)), min_size=1, max_size=40),
       divisor=st.integers(-9, 9).filter(bool))
def test_pmod_is_the_floor_residue_duckdb_computes(values, divisor):
    """``pmod``, which splits a key across back ends, is ((a % b) + b) % b in DuckDB's terms."""
    tree = ("pmod", ("col", "a"), ("int", str(divisor)))
    batch = pa.record_batch({"a": pa.array(values, pa.int64())})
    con = duck.Database()()
    kernel = kernels.Kernel(tree)
    kernel.learn(batch, con)
    want = duck.run(con, "b", batch, f"SELECT {kernels._sql(tree)} AS r FROM b").column(0)
    assert kernel(batch).to_pylist() == want.to_pylist()


def test_a_zero_divisor_gets_duckdbs_error():
    """DuckDB's error, with PostgreSQL's SQLSTATE (the query's, not the system's)."""
    sql = "SELECT b / i AS q FROM t"
    batch = _batch([(0, 5, 1.0, None, "a", True)])
    schema, got, failures = _run(sql, batch)
    assert got == [] and failures[1] == ("division by zero", "22012")


def test_kernel_trees_reach_the_plan():
    p = plan(sqlglot.parse_one("SELECT i * 0.908 AS v FROM t WHERE b % 123 = 0 AND f",
                               read="cql"), CATALOG)
    trees, node = [], p.root
    while node is not None:
        trees += [e.tree for e in ([node.predicate] if isinstance(node, P.Filter) else
                                   [o.expr for o in node.outputs] if isinstance(node, P.Map)
                                   else [])]
        node = getattr(node, "input", None)
    assert ("mul", ("col", "t.i"), ("dec", "0.908")) in trees
    assert ("eq", ("mod", ("col", "t.b"), ("int", "123")), ("int", "0")) in trees
