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
from executor import duck, kernels
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
predicates = st.recursive(
    st.one_of(comparisons.map(lambda t: f"({t[0]} {t[1]} {t[2]})"), st.just("f"),
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


@pytest.mark.parametrize("sql, duck_calls", [
    # NEXMark q1 and q2's shapes: DuckDB is called only to type the steps and the output,
    # over no rows, on the first batch
    ("SELECT b, CAST(b * 0.908 AS DOUBLE) AS price, d FROM t", 2),
    ("SELECT b, i FROM t WHERE b % 123 = 0 AND s IS NOT NULL", 1),
    # beyond the kernels (a function): DuckDB for every batch
    ("SELECT abs(i) AS a FROM t", 3),
])
def test_simple_expressions_skip_duckdb(monkeypatch, sql, duck_calls):
    calls = []
    real = duck.run

    def counting(*args):
        calls.append(args[-1])
        return real(*args)
    monkeypatch.setattr(duck, "run", counting)
    g = Graph()
    g.add(1, plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    batch = _batch([(k, 123 * k, 1.0, decimal.Decimal("1.5"), "a", True) for k in range(10)])
    for _ in range(3):
        assert g.push("t", batch)[1]
    assert not g.take_failures()
    assert len(calls) == duck_calls, calls


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
