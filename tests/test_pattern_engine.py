"""The pattern operator (⊳, seed 004) against a brute-force oracle: every combination of
events, one per positive component, filtered by the definitions in docs/patterns.md, compared
as a multiset of matched event ids (and the time each became known) with what the operator
emits, whatever the batch sizes and the interleaving of its inputs. Hypothesis makes the
streams; the oracle shares nothing with the operator but the predicates' meaning."""
from __future__ import annotations

import collections
import functools
import itertools
import random
from dataclasses import dataclass

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialect.kernel_trees import kernel_tree
from executor import plan as P
from executor.batches import TE, TS, Watermark
from executor.context import OperatorContext
from executor.duck import Database, quote
from executor.operators.patterns import pattern as pattern_module
from executor.operators.base import QueryError
from executor.operators.patterns.pattern import Pattern

STREAMS = "ABCD"
FIELDS = ("id", "k", "v")


@dataclass(frozen=True)
class Pred:
    """A predicate twice: DuckDB SQL over "alias.col" and the same in Python over events."""
    sql: str
    py: object
    names: tuple            # the aliases it reads

    def expr(self) -> P.Expr:
        return P.Expr(self.sql, (), "BOOLEAN",
                      kernel_tree(sqlglot.parse_one(self.sql, read="duckdb")))


@dataclass(frozen=True)
class Comp:
    stream: str
    alias: str
    negated: bool = False


def col(alias: str, field: str) -> str:
    return quote(f"{alias}.{field}")


def own(alias: str, op: str, const: int) -> Pred:
    ops = {"<": lambda x, y: x < y, ">": lambda x, y: x > y, "=": lambda x, y: x == y}
    return Pred(f"{col(alias, 'v')} {op} {const}",
                lambda e, a=alias: ops[op](e[a]["v"], const), (alias,))


def cross(left: str, op: str, right: str) -> Pred:
    ops = {"<": lambda x, y: x < y, ">": lambda x, y: x > y, "=": lambda x, y: x == y}
    return Pred(f"{col(left, 'v')} {op} {col(right, 'v')}",
                lambda e, l=left, r=right: ops[op](e[l]["v"], e[r]["v"]), (left, right))


# ---------------------------------------------------------------------- the oracle
def oracle(events: dict, comps: list, preds: list, equiv: bool, within: int | None,
           strategy: str = "any") -> collections.Counter:
    """(ids of the positive events, known) -> count, by enumerating every combination."""
    pos = [c for c in comps if not c.negated]
    out = collections.Counter()

    for combo in itertools.product(*(events[c.stream] for c in pos)):
        ts = [e["ts"] for e in combo]
        if any(a >= b for a, b in zip(ts, ts[1:])):
            continue
        if within is not None and ts[-1] - ts[0] >= within:
            continue
        if equiv and len({e["k"] for e in combo}) != 1:
            continue
        bound = {c.alias: e for c, e in zip(pos, combo)}
        names = set(bound)
        if not all(p.py(bound) for p in preds if set(p.names) <= names):
            continue
        if not _no_negated(events, comps, preds, bound, equiv, within):
            continue
        if strategy == "next" and not _next(events, pos, preds, bound, equiv):
            continue
        if strategy == "strict" and not _strict(events, comps, bound, equiv):
            continue
        closing = comps[-1].negated
        known = ts[0] + within if closing else ts[-1]
        out[(tuple(e["id"] for e in combo), known)] += 1
    return out


def _range(comps: list, k: int, bound: dict, within: int | None) -> tuple:
    pos = [c for c in comps if not c.negated]
    before = [c for c in comps[:k] if not c.negated]
    after = [c for c in comps[k + 1:] if not c.negated]
    first, last = bound[pos[0].alias]["ts"], bound[pos[-1].alias]["ts"]
    if before and after:
        return bound[before[-1].alias]["ts"], bound[after[0].alias]["ts"]
    if after:
        return last - within, first
    return last, first + within


def _no_negated(events, comps, preds, bound, equiv, within) -> bool:
    for k, c in enumerate(comps):
        if not c.negated:
            continue
        low, high = _range(comps, k, bound, within)
        key = next(iter(bound.values()))["k"]
        for e in events[c.stream]:
            if not low < e["ts"] < high or (equiv and e["k"] != key):
                continue
            env = {**bound, c.alias: e}
            if all(p.py(env) for p in preds if c.alias in p.names):
                return False
    return True


def _next(events, pos, preds, bound, equiv) -> bool:
    """Each positive event is the first after the previous one that meets its component's
    predicates given the events bound before it."""
    key = next(iter(bound.values()))["k"]
    for i in range(1, len(pos)):
        c, prev = pos[i], pos[i - 1]
        earlier = {p.alias for p in pos[:i + 1]}
        for e in events[c.stream]:
            if not bound[prev.alias]["ts"] < e["ts"] < bound[c.alias]["ts"]:
                continue
            if equiv and e["k"] != key:
                continue
            env = {**bound, c.alias: e}
            if all(p.py(env) for p in preds if c.alias in p.names and set(p.names) <= earlier):
                return False
    return True


def _strict(events, comps, bound, equiv) -> bool:
    key = next(iter(bound.values()))["k"]
    pos = [c for c in comps if not c.negated]
    streams = {c.stream for c in comps}
    everything = [e for s in streams for e in events[s] if not equiv or e["k"] == key]
    for prev, c in zip(pos, pos[1:]):
        lo, hi = bound[prev.alias]["ts"], bound[c.alias]["ts"]
        if any(lo < e["ts"] < hi for e in everything):
            return False
    return True


# ---------------------------------------------------------------------- the operator
def node(comps: list, preds: list, equiv: bool, within: int | None,
         strategy: str = "any", trees: bool = True, key_type: str = "BIGINT") -> P.Pattern:
    pos = [c.alias for c in comps if not c.negated]
    order = {a: i for i, a in enumerate(c.alias for c in comps)}
    inputs, components = [], []
    for c in comps:
        schema = tuple(P.Column(f"{c.alias}.{f}", "BIGINT") for f in FIELDS)
        inputs.append(P.StreamScan(c.stream, c.alias, schema, "ts"))
        mine = [p for p in preds if p.names == (c.alias,)]
        if c.negated:
            against = [p for p in preds if c.alias in p.names and len(p.names) > 1]
        else:   # the cross terms whose latest component is this one (skip till next match)
            against = [p for p in preds if len(p.names) > 1 and c.alias in p.names
                       and all(n in pos for n in p.names)
                       and max(order[n] for n in p.names) == order[c.alias]]
        components.append(P.PatternComponent(
            c.alias, c.negated, _and(mine, trees),
            (P.Expr(col(c.alias, "k"), (), key_type, ("col", f"{c.alias}.k")),) if equiv
            else (), _and(against, trees)))
    where = _and([p for p in preds if len(p.names) > 1 and all(n in pos for n in p.names)],
                 trees)
    schema = tuple(col_ for inp, c in zip(inputs, comps) if not c.negated
                   for col_ in inp.schema)
    return P.Pattern(tuple(inputs), tuple(components), where, within, strategy, schema)


def _and(preds: list, trees: bool = True):
    """The predicates' conjunction; with ``trees`` Arrow's kernels may evaluate it, without
    only DuckDB does (both paths of the operator are held to the oracle)."""
    if not preds:
        return None
    tree = functools.reduce(lambda a, b: ("and", a, b), (p.expr().tree for p in preds))
    return P.Expr(" AND ".join(f"({p.sql})" for p in preds), (), "BOOLEAN",
                  tree if trees else None)


def run(pattern: P.Pattern, comps: list, events: dict, rng: random.Random) -> tuple:
    """Feed each port its stream's events in batches of random sizes, the ports interleaved
    at random, each batch followed by a watermark; then the end. -> (Counter, emitted ts)."""
    op = Pattern(pattern)
    db = Database()
    op.open(OperatorContext(cursor=db))
    queues = []
    for c in comps:
        evs = sorted(events[c.stream], key=lambda e: e["ts"])
        batches, i = [], 0
        while i < len(evs):
            n = rng.randint(1, 4)
            batches.append(evs[i:i + n])
            i += n
        queues.append(batches)
    out = []
    live = [k for k in range(len(comps)) if queues[k]]
    while live:
        k = rng.choice(live)
        batch = queues[k].pop(0)
        cols = {f"{comps[k].alias}.{f}": pa.array([e[f] for e in batch], pa.int64())
                for f in FIELDS}
        cols[TS] = pa.array([e["ts"] for e in batch], pa.int64())
        cols[TE] = cols[TS]
        out += op.on_batch(pa.RecordBatch.from_pydict(cols), k)
        following = queues[k][0][0]["ts"] if queues[k] else 10**9
        out += op.on_watermark(following, k)
        if not queues[k]:
            live.remove(k)
    for k in range(len(comps)):
        if not events[comps[k].stream]:
            out += op.on_watermark(10**9, k)
    out += op.on_end()
    op.close()
    db.close()
    got, stamps = collections.Counter(), []
    pos = [c.alias for c in comps if not c.negated]
    for b in out:
        if isinstance(b, Watermark):
            stamps.append(("wm", b.ts))
            continue
        d = b.to_pydict()
        for i in range(b.num_rows):
            got[(tuple(d[f"{a}.id"][i] for a in pos), d[TS][i])] += 1
            stamps.append(("row", d[TS][i]))
    return got, stamps


def ordered(stamps: list) -> bool:
    """Rows leave in event-time order, never before a watermark that passed them."""
    last_row, last_wm = -1, -1
    for kind, ts in stamps:
        if kind == "row":
            if ts < last_row or ts < last_wm:
                return False
            last_row = ts
        else:
            last_wm = max(last_wm, ts)
    return True


def make_events(draw_ts, keys: int) -> dict:
    events, next_id = {}, 1
    for s, stamps in zip(STREAMS, draw_ts):
        evs = []
        for ts, k, v in stamps:
            evs.append({"id": next_id, "ts": ts, "k": k % keys, "v": v})
            next_id += 1
        events[s] = evs
    return events


event_lists = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2), st.integers(0, 9)),
                       max_size=9)
streams = st.tuples(event_lists, event_lists, event_lists, event_lists)

SEEN = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(comps, preds, equiv, within, data, seed, strategy="any", keys=3, trees=True):
    events = make_events(data, keys)
    pattern = node(comps, preds, equiv, within, strategy, trees)
    want = oracle(events, comps, preds, equiv, within, strategy)
    got, stamps = run(pattern, comps, events, random.Random(seed))
    assert got == want, (f"missing {want - got}, extra {got - want}")
    assert ordered(stamps), stamps


A, B, C, D = (Comp("A", "a"), Comp("B", "b"), Comp("C", "c"), Comp("D", "d"))
NOT_C = Comp("C", "c", negated=True)
NOT_D = Comp("D", "d", negated=True)


@SEEN
@given(streams, st.integers(0, 1000))
def test_seq_of_two(data, seed):
    check([A, B], [], False, 10, data, seed)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_seq_of_four_with_predicates_and_equivalence(data, seed, trees):
    check([A, B, C, D], [own("a", "<", 7), cross("a", "<", "d")], True, 15, data, seed,
          trees=trees)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_a_repeated_stream(data, seed, equiv):
    check([Comp("A", "a1"), Comp("A", "a2"), B], [cross("a1", "<", "a2")], equiv, 12, data,
          seed)


@SEEN
@given(streams, st.integers(0, 1000))
def test_partitioned_equals_unpartitioned_plus_the_equality(data, seed):
    """PAIS must give what the unpartitioned plan gives with the equality as a predicate."""
    events = make_events(data, 3)
    comps = [A, B, D]
    eq = [Pred(f"{col('a', 'k')} = {col('b', 'k')} AND {col('b', 'k')} = {col('d', 'k')}",
               lambda e: e["a"]["k"] == e["b"]["k"] == e["d"]["k"], ("a", "b", "d"))]
    rng = random.Random(seed)
    pais, _ = run(node(comps, [], True, 20), comps, events, rng)
    plain, _ = run(node(comps, eq, False, 20), comps, events, rng)
    assert pais == plain == oracle(events, comps, [], True, 20)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_middle_negation(data, seed, equiv):
    check([A, NOT_C, B], [own("c", ">", 3)], equiv, 15, data, seed)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_leading_negation(data, seed, equiv):
    check([NOT_C, A, B], [], equiv, 10, data, seed)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_trailing_negation_is_sent_when_the_window_has_passed(data, seed, equiv):
    check([A, B, NOT_C], [], equiv, 10, data, seed)


@SEEN
@given(streams, st.integers(0, 1000))
def test_two_negations_one_naming_a_positive_component(data, seed):
    check([A, NOT_C, B, NOT_D], [cross("c", ">", "a"), own("d", "<", 5)], True, 12, data, seed)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_the_seeds_q3(data, seed, trees):
    """SEQ(A a, B b, !(C c), D d) WHERE [k] AND a.v = 5-ish AND a.v < b.v WITHIN T."""
    check([A, B, NOT_C, D], [own("a", "<", 6), cross("a", "<", "b")], True, 12, data, seed,
          trees=trees)


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_skip_till_next_match(data, seed, equiv):
    check([A, B, D], [cross("a", "<", "b")], equiv, 20, data, seed, strategy="next")


@SEEN
@given(streams, st.integers(0, 1000), st.booleans())
def test_strict_contiguity(data, seed, equiv):
    check([A, B, NOT_C, D], [], equiv, 20, data, seed, strategy="strict")


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams, st.integers(0, 1000))
def test_partitions_searched_one_by_one_give_the_same(data, seed):
    """When (partition, ts) keys would not fit one int64, stacks are searched per partition."""
    limit = pattern_module.KEY_LIMIT
    pattern_module.KEY_LIMIT = 0
    try:
        check([A, NOT_C, B, D], [cross("a", "<", "d")], True, 15, data, seed)
    finally:
        pattern_module.KEY_LIMIT = limit


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams, st.integers(0, 1000))
def test_keys_that_are_not_one_integer_are_numbered_by_value(data, seed):
    """Equivalence values other than one integer get ids from a table of values seen."""
    events = make_events(data, 3)
    comps = [A, NOT_C, B]
    want = oracle(events, comps, [], True, 15)
    got, _ = run(node(comps, [], True, 15, key_type="VARCHAR"), comps, events,
                 random.Random(seed))
    assert got == want


@SEEN
@given(streams, st.integers(0, 1000), st.sampled_from(["next", "strict"]), st.booleans())
def test_one_stream_classified_as_match_recognize_does(data, seed, strategy, equiv):
    """SEQ(A x, A y, A z) with each component's own condition on v: rows of one stream,
    as MATCH_RECOGNIZE's PATTERN (X Y Z) classifies them."""
    comps = [Comp("A", "x"), Comp("A", "y"), Comp("A", "z")]
    check(comps, [own("x", "<", 4), own("y", ">", 2), own("z", "<", 7)], equiv, 30, data,
          seed, strategy=strategy)


def test_within_at_its_exact_boundary():
    """last - first < W: a pair exactly W apart does not match, one µs less does."""
    events = {"A": [{"id": 1, "ts": 0, "k": 0, "v": 0}],
              "B": [{"id": 2, "ts": 10, "k": 0, "v": 0}, {"id": 3, "ts": 9, "k": 0, "v": 0}],
              "C": [], "D": []}
    got, _ = run(node([A, B], [], False, 10), [A, B], events, random.Random(1))
    assert got == collections.Counter({((1, 3), 9): 1})
    # a closing negation's range is open at first + W: an event there does not kill
    events["C"] = [{"id": 4, "ts": 19, "k": 0, "v": 0}]
    got, _ = run(node([A, B, NOT_C], [], False, 10), [A, B, NOT_C], events, random.Random(2))
    assert got == collections.Counter({((1, 3), 10): 1})
    # inside (last, first + W) it does; and at last's own time it does not
    events["B"] = [{"id": 3, "ts": 8, "k": 0, "v": 0}]
    events["C"] = [{"id": 4, "ts": 9, "k": 0, "v": 0}]
    got, _ = run(node([A, B, NOT_C], [], False, 10), [A, B, NOT_C], events, random.Random(3))
    assert got == collections.Counter()
    events["C"] = [{"id": 4, "ts": 8, "k": 0, "v": 0}]
    got, _ = run(node([A, B, NOT_C], [], False, 10), [A, B, NOT_C], events, random.Random(4))
    assert got == collections.Counter({((1, 3), 10): 1})


def test_state_is_purged_as_the_frontier_passes_the_window():
    """Memory is bounded by the events inside W: after many events, what is held is what the
    last W can still use."""
    op = Pattern(node([A, NOT_C, B], [], True, 100))
    db = Database()
    op.open(OperatorContext(cursor=db))
    for step in range(50):
        for k, alias in enumerate("acb"):
            base = step * 1000 + k * 10
            cols = {f"{alias}.{f}": pa.array([base + i for i in range(20)], pa.int64())
                    for f in FIELDS}
            cols[TS] = cols[TE] = pa.array([base + i for i in range(20)], pa.int64())
            op.on_batch(pa.RecordBatch.from_pydict(cols), k)
            op.on_watermark(base + 1000, k)
    assert op.state_size() < 200, op.state_size()
    op.close()
    db.close()


def test_too_many_candidates_are_built_in_slices_or_end_the_query_with_54000():
    """Skip till any match over a dense stream with no partitions: the candidates are built
    in slices under the limit (the answer is the oracle's); one event that alone would build
    more ends the query with 54000 and a hint, not the back end."""
    events = {"A": [{"id": i, "ts": i, "k": 0, "v": 0} for i in range(1, 41)],
              "B": [{"id": 100 + i, "ts": 40 + i, "k": 0, "v": 0} for i in range(1, 31)],
              "C": [], "D": []}
    comps = [A, B]
    limit = pattern_module.CANDIDATE_LIMIT
    pattern_module.CANDIDATE_LIMIT = 100          # 30 B events × 40 A events = 1,200
    try:
        got, _ = run(node(comps, [], False, 1000), comps, events, random.Random(5))
        assert got == oracle(events, comps, [], False, 1000) and sum(got.values()) == 1200
        pattern_module.CANDIDATE_LIMIT = 30       # one B event alone: 40
        with pytest.raises(QueryError) as e:
            run(node(comps, [], False, 1000), comps, events, random.Random(5))
        assert e.value.sqlstate == "54000" and "equivalence test" in e.value.hint
    finally:
        pattern_module.CANDIDATE_LIMIT = limit
