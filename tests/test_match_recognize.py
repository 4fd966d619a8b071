"""MATCH_RECOGNIZE on a stream (a concatenation PATTERN, one row per variable, rows
consecutive in each partition) against a second oracle written the way the SQL standard
reads it: each partition's rows in time order, a match wherever the next rows satisfy the
variables' DEFINE in turn, then AFTER MATCH SKIP chooses among them; through the whole plan
in process (Hypothesis makes the rows and the batches), and through a server."""
from __future__ import annotations

import collections
import datetime as dt
import random

import psycopg
import pyarrow as pa
import pytest
import regex
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dialect  # noqa: F401 - registers the cql dialect
from dialect.planner import MemoryCatalog, Relation, plan
from dialect.planner.patterns.row_pattern import parse as parse_pattern
from executor import plan as P
from executor.graph import RunningQuery
from executor.graph.running_graph import below
from executor.operators.base import QueryError

from continuous import unique

CATALOG = MemoryCatalog().add(Relation("ev", "stream", (
    ("k", "INT"), ("kind", "TEXT"), ("v", "INT"), ("ts", "TIMESTAMP")), "ts"))
KINDS = "abc"

SQL = ("SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
       "MEASURES A.v AS av, LAST(B.v) AS bv, v AS cv {after} PATTERN (A B C) "
       "WITHIN INTERVAL '{within}' SECOND "
       "DEFINE A AS kind = 'a', B AS B.v > A.v, C AS kind <> 'a') AS m")
DEFINE = {"A": lambda r, m: r["kind"] == "a",
          "B": lambda r, m: r["v"] > m["A"]["v"],
          "C": lambda r, m: r["kind"] != "a"}


def _partitions(rows: list):
    """(k, that partition's rows in time order) for each partition."""
    by_key = collections.defaultdict(list)
    for r in rows:
        by_key[r["k"]].append(r)
    for k, part in by_key.items():
        yield k, sorted(part, key=lambda r: r["ts"])


def oracle(rows: list, skip: str, within_s: int) -> collections.Counter:
    out = collections.Counter()
    for k, part in _partitions(rows):
        i = 0
        while i + 3 <= len(part):
            bound, ok = {}, True
            for var, r in zip("ABC", part[i:i + 3]):
                if not DEFINE[var](r, bound):
                    ok = False
                    break
                bound[var] = r
            if ok and part[i + 2]["ts"] - part[i]["ts"] < within_s * 1_000_000:
                out[(k, bound["A"]["v"], bound["B"]["v"], bound["C"]["v"])] += 1
                i += CONCAT_SKIPS[skip][1]
            else:
                i += 1
    return out


def run(sql: str, rows: list, rng: random.Random,
        key=lambda r: (r["k"], r["av"], r["bv"], r["cv"])) -> collections.Counter:
    """The query in process: rows pushed in batches of random sizes, a watermark after some,
    then the end; its rows as a multiset of ``key``."""
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    rows = sorted(rows, key=lambda r: r["ts"])
    out, i = [], 0
    while i < len(rows):
        n = rng.randint(1, 5)
        chunk = rows[i:i + n]
        i += n
        out += q.push("ev", pa.RecordBatch.from_pydict({
            "k": pa.array([r["k"] for r in chunk], pa.int32()),
            "kind": [r["kind"] for r in chunk],
            "v": pa.array([r["v"] for r in chunk], pa.int32()),
            "ts": pa.array([r["ts"] for r in chunk], pa.int64()).cast(pa.timestamp("us"))}))
        if rng.random() < 0.5:
            out += q.watermark("ev", chunk[-1]["ts"] + 1)
    out += q.end()
    return collections.Counter(key(r) for b in out for r in b.to_pylist())


# skip mode -> (AFTER MATCH clause, rows from a match's first to where the next may begin)
CONCAT_SKIPS = {"past": ("AFTER MATCH SKIP PAST LAST ROW", 3),
                "next": ("AFTER MATCH SKIP TO NEXT ROW", 1),
                "first B": ("AFTER MATCH SKIP TO FIRST B", 1),
                "last C": ("AFTER MATCH SKIP TO LAST C", 2)}
rows_strategy = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(KINDS),
                                   st.integers(0, 5)), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy, st.sampled_from(list(CONCAT_SKIPS)), st.sampled_from([3, 1000]),
       st.booleans(), st.integers(0, 1000))
def test_match_recognize_equals_the_row_by_row_oracle(data, skip, within, matcher, seed):
    """On the stacks, and (MATCH_NUMBER() asks for it) on the row matcher, where B's and
    C's DEFINE, naming A's row, are evaluated row by row as the match grows."""
    rows = [{"k": k, "kind": kind, "v": v, "ts": (i + 1) * 500_000}
            for i, (k, kind, v) in enumerate(data)]
    sql = SQL.format(after=CONCAT_SKIPS[skip][0], within=within)
    if matcher:
        sql = sql.replace("v AS cv", "v AS cv, MATCH_NUMBER() AS n")
    assert _runs_on_rows(sql) == matcher
    assert run(sql, rows, random.Random(seed)) == oracle(rows, skip, within)


def _runs_on_rows(sql: str) -> bool:
    """Whether the plan's pattern operator is the row matcher (not the stacks)."""
    node = plan(sqlglot.parse_one(sql, read="cql"), CATALOG).root
    while not isinstance(node, P.Pattern):
        node = P.children(node)[0]
    return node.regex is not None


def test_overlapping_matches_are_skipped_past_the_last_row():
    """a, a, a (v rising): A B C at rows 1-3 and 2-4 overlap; PAST LAST ROW keeps the first,
    TO NEXT ROW both."""
    rows = [{"k": 1, "kind": kind, "v": v, "ts": (i + 1) * 1_000_000}
            for i, (kind, v) in enumerate([("a", 1), ("a", 2), ("b", 3), ("b", 4), ("a", 0),
                                           ("a", 1), ("c", 2)])]
    past = run(SQL.format(after="AFTER MATCH SKIP PAST LAST ROW", within=100), rows,
               random.Random(1))
    every = run(SQL.format(after="AFTER MATCH SKIP TO NEXT ROW", within=100), rows,
                random.Random(1))
    assert past == collections.Counter({(1, 1, 2, 3): 1, (1, 0, 1, 2): 1})
    assert every == collections.Counter({(1, 1, 2, 3): 1, (1, 2, 3, 4): 1, (1, 0, 1, 2): 1})


BAD = [
    ("PATTERN (A {- B -} C) DEFINE A AS kind = 'a'", "0A000",
     "exclusion {- … -} is not supported"),
    ("PATTERN (A B*) DEFINE B AS B.v > AVG(A.v)", "0A000", "AVG(A.v) in DEFINE is not "
     "supported yet"),
    ("PATTERN (A B*) DEFINE B AS B.v > LAST(A.v, B.v)", "0A000", "the offset is a constant"),
    ("PATTERN (A? B*) DEFINE A AS kind = 'a'", "42601", "can match no rows at all"),
    ("PATTERN (A B) DEFINE A AS NEXT(v) > 1", "0A000", "is not supported yet"),
    ("PATTERN (A !C B) WITHIN INTERVAL '1' SECOND", "0A000",
     "an absent row (!) begins or ends the pattern"),
    ("PATTERN (A B !C)", "42601", "an absent row needs WITHIN"),
    ("AFTER MATCH SKIP TO FIRST A PATTERN (A+ B) DEFINE A AS kind = 'a'", "42601",
     "would begin where this one began"),
    ("AFTER MATCH SKIP TO LAST A PATTERN (A B)", "42601", "would begin where this one began"),
    ("AFTER MATCH SKIP TO LAST D PATTERN (A B)", "42601", "is not a variable PATTERN gives"),
    ("AFTER MATCH SKIP TO FIRST C PATTERN (A B !C) WITHIN INTERVAL '1' SECOND", "42601",
     "is not a variable PATTERN gives"),
]


@pytest.mark.parametrize("pattern,state,message", BAD)
def test_what_is_not_supported_yet_says_so(server, pattern, state, message):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("CREATE STREAM IF NOT EXISTS mr_ev (k INT, kind TEXT, v INT, "
                  "ts TIMESTAMP TIMESTAMPCOLUMN)")
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SELECT * FROM mr_ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
                      f"MEASURES A.v AS av {pattern}) AS m")
        assert e.value.sqlstate == state and message in e.value.diag.message_primary
        assert e.value.diag.statement_position is not None


def test_match_recognize_through_a_server(server):
    """The same query through a cursor, rows sent by INSERT and the watermark moved on."""
    rng = random.Random(11)
    rows = [{"k": rng.randrange(3), "kind": rng.choice(KINDS), "v": rng.randrange(6),
             "ts": 1_793_491_200_000_000 + (i + 1) * 100_000} for i in range(300)]
    want = oracle(rows, "past", 1000)
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as reader:
        feed.execute("CREATE STREAM IF NOT EXISTS mr_feed (k INT, kind TEXT, v INT, "
                     "ts TIMESTAMP TIMESTAMPCOLUMN)")
        cur = reader.cursor()
        cur.execute("DECLARE mr CURSOR FOR " + SQL.replace("FROM ev", "FROM mr_feed").format(
            after="AFTER MATCH SKIP PAST LAST ROW", within=1000))
        with feed.cursor().copy("COPY mr_feed (k, kind, v, ts) FROM STDIN") as cp:
            for r in rows:
                cp.write_row((r["k"], r["kind"], r["v"],
                              f"2026-11-01 00:00:{(r['ts'] - 1_793_491_200_000_000) / 1e6:09.6f}"))
        feed.execute("ALTER STREAM mr_feed ADVANCE TO '2026-11-01 00:10:00'")
        got = collections.Counter()
        while sum(got.values()) < sum(want.values()):
            left = sum(want.values()) - sum(got.values())
            cur.execute(f"FETCH {min(100, left)} FROM mr WITH (timeout = '20s')")
            batch = cur.fetchall()
            if not batch:
                break
            got.update(batch)
        assert got == want and sum(want.values()) > 5


def test_a_finished_match_is_not_held_back_by_another_partitions_attempt(server):
    """k=0 begins A B+ C and waits for its C (no WITHIN); k=1 finishes A B C meanwhile.
    No row k=0 has can end a match (only a C can), so k=1's match goes out once the
    watermark passes its C (the code before waited for k=0's C, for ever)."""
    s = unique("mr_parts")
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as reader:
        feed.execute(f"CREATE STREAM {s} (k INT, kind TEXT, ts TIMESTAMP TIMESTAMPCOLUMN)")
        try:
            cur = reader.cursor()
            cur.execute(f"DECLARE mp CURSOR FOR SELECT * FROM {s} MATCH_RECOGNIZE ("
                        "PARTITION BY k ORDER BY ts MEASURES FIRST(A.ts) AS a_at, C.ts AS c_at "
                        "PATTERN (A B+ C) DEFINE A AS kind = 'a', B AS kind = 'b', "
                        "C AS kind = 'c') AS m")
            feed.execute(f"INSERT INTO {s} VALUES (0, 'a', '2026-11-01 00:00:01'), "
                         "(0, 'b', '2026-11-01 00:00:02'), (1, 'a', '2026-11-01 00:00:03'), "
                         "(1, 'b', '2026-11-01 00:00:04'), (1, 'c', '2026-11-01 00:00:05')")
            feed.execute(f"ALTER STREAM {s} ADVANCE TO '2026-11-01 00:00:06'")
            cur.execute("FETCH ALL FROM mp WITH (timeout = '10s')")
            assert cur.fetchall() == [(1, dt.datetime(2026, 11, 1, 0, 0, 3),
                                       dt.datetime(2026, 11, 1, 0, 0, 5))]
            reader.rollback()
        finally:
            feed.execute(f"DROP STREAM {s} CASCADE")


# ---------------------------------------------------------------------- quantifiers
ROW_DEFINE = {"A": lambda r: r["kind"] == "a", "B": lambda r: r["v"] > 2,
              "C": lambda r: r["kind"] != "a"}
PATTERNS = ["A B+ C", "A B*? C", "(A | B)+ C", "A{2,3} B?", "A (B C)+", "A+? B", "(A B | C)*? A",
            "A (B?){2} C"]


def _python_regex(tree) -> str:
    """The pattern tree as a regular expression (the ``regex`` module: Python's re with
    repeated group names), each row a character of its variables' bits, each variable's
    rows a group of its name: backtracking order is the SQL standard's order of preference."""
    kind = tree[0]
    if kind == "var":
        bit = "ABC".index(tree[1])
        chars = "".join(chr(0x100 + m) for m in range(8) if m >> bit & 1)
        return f"(?P<{tree[1]}>[{chars}])"
    if kind == "seq":
        return "".join(_python_regex(t) for t in tree[1])
    if kind == "alt":
        return "(?:" + "|".join(_python_regex(t) for t in tree[1]) + ")"
    _, item, low, high, greedy = tree
    return (f"(?:{_python_regex(item)}){{{low},{'' if high is None else high}}}"
            + ("" if greedy else "?"))


SKIP_ERROR = "22000"             # the oracle's answer when AFTER MATCH SKIP TO cannot go on


def _resume(m, pos: int, skip: str):
    """Where the match after ``m`` (begun at ``pos``) may begin; None: the skip's error."""
    if skip in ("past", "next"):
        return m.end() if skip == "past" else pos + 1
    which, var = skip.split()
    rows = m.starts(var) if var in m.re.groupindex else []
    if not rows:
        return None
    at = rows[0] if which == "first" else rows[-1]
    return at if at > pos else None


def regex_oracle(rows: list, pattern: str, skip: str, within_s: int):
    """(k, first v, last v, rows, classifier, match number) of every match, by a regular
    expression over each partition's rows; SKIP_ERROR if a skip to a variable fails."""
    compiled = regex.compile(_python_regex(parse_pattern(pattern)))
    out = collections.Counter()
    for k, part in _partitions(rows):
        text = "".join(chr(0x100 + sum(1 << i for i, v in enumerate("ABC")
                                       if ROW_DEFINE[v](r))) for r in part)
        pos, number = 0, 0
        while pos < len(part):
            cut = next((i for i, r in enumerate(part)
                        if r["ts"] >= part[pos]["ts"] + within_s * 1_000_000), len(part))
            m = compiled.match(text, pos, cut)
            if m is None or m.end() == pos:
                pos += 1
                continue
            number += 1
            last = next(v for v in compiled.groupindex if m.end() - 1 in m.starts(v))
            out[(k, part[pos]["v"], part[m.end() - 1]["v"], m.end() - pos, last, number)] += 1
            pos = _resume(m, pos, skip)
            if pos is None:
                return SKIP_ERROR
    return out


ROW_SQL = ("SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
           "MEASURES FIRST(v) AS fv, LAST(v) AS lv, COUNT(*) AS n, CLASSIFIER() AS cl, "
           "MATCH_NUMBER() AS mn {after} PATTERN ({pattern}) WITHIN INTERVAL '{within}' "
           "SECOND DEFINE {define}) AS m")
ROW_DEFINE_SQL = {"A": "A AS kind = 'a'", "B": "B AS v > 2", "C": "C AS kind <> 'a'"}


def run_rows(sql: str, rows: list, rng: random.Random) -> collections.Counter:
    return run(sql, rows, rng, key=lambda r: (r["k"], r["fv"], r["lv"], r["n"], r["cl"],
                                              r["mn"]))


# AFTER MATCH SKIP TO a variable, for patterns whose first row it need not be: some matches
# have no row of it, or begin with it (the query's error, 22000)
SKIP_TO = [("A B+ C", "first B"), ("A B+ C", "last C"), ("A B*? C", "last B"),
           ("(A | B)+ C", "last A"), ("(A | B)+ C", "first C"), ("A{2,3} B?", "last A"),
           ("A (B C)+", "first C"), ("A+? B", "first B"), ("(A B | C)*? A", "last C"),
           ("A (B?){2} C", "last B")]


def after_clause(skip: str) -> str:
    words = {"past": "PAST LAST ROW", "next": "TO NEXT ROW"}.get(skip) or f"TO {skip.upper()}"
    return "AFTER MATCH SKIP " + words


def check_rows(rows: list, pattern: str, skip: str, within: int, seed: int) -> None:
    """The query in process equals the regex oracle, or fails with its error."""
    define = ", ".join(ROW_DEFINE_SQL[v] for v in "ABC" if v in pattern)
    sql = ROW_SQL.format(after=after_clause(skip), pattern=pattern, within=within,
                         define=define)
    want = regex_oracle(rows, pattern, skip, within)
    if want == SKIP_ERROR:
        with pytest.raises(QueryError) as e:
            run_rows(sql, rows, random.Random(seed))
        assert e.value.sqlstate == SKIP_ERROR, (pattern, skip)
    else:
        assert run_rows(sql, rows, random.Random(seed)) == want, (pattern, skip)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy, st.sampled_from(PATTERNS), st.sampled_from(["past", "next"]),
       st.sampled_from([2, 1000]), st.integers(0, 1000))
def test_quantifiers_and_alternation_equal_the_regex_oracle(data, pattern, skip, within, seed):
    rows = [{"k": k, "kind": kind, "v": v, "ts": (i + 1) * 500_000}
            for i, (k, kind, v) in enumerate(data)]
    check_rows(rows, pattern, skip, within, seed)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy, st.sampled_from(SKIP_TO), st.sampled_from([2, 1000]),
       st.integers(0, 1000))
def test_skip_to_first_or_last_variable_equals_the_regex_oracle(data, case, within, seed):
    rows = [{"k": k, "kind": kind, "v": v, "ts": (i + 1) * 500_000}
            for i, (k, kind, v) in enumerate(data)]
    check_rows(rows, *case, within, seed)


@pytest.mark.parametrize("seed", range(4))
def test_longer_runs_of_rows_with_partitions_that_empty_and_return(seed):
    """60 rows over 3 partitions, every pattern and skip: a partition whose rows are all
    behind a match keeps counting its matches (MATCH_NUMBER) when rows come again."""
    rng = random.Random(seed)
    rows = [{"k": rng.randrange(3), "kind": rng.choice(KINDS), "v": rng.randrange(6),
             "ts": (i + 1) * 500_000} for i in range(60)]
    for pattern, skip in [(p, s) for p in PATTERNS for s in ("past", "next")] + SKIP_TO:
        check_rows(rows, pattern, skip, 2, seed)


# ------------------------------------------------------- DEFINE reading other rows
NAVIGATING = {
    # a rise above A, each B at least the B before, then a C below the last B
    "rise": ("A B+ C", "A AS kind = 'a', B AS B.v > A.v AND (LAST(B.v, 1) IS NULL OR "
                       "B.v >= LAST(B.v, 1)), C AS C.v < LAST(B.v)"),
    # a fall: each row below the row before it in the partition, in the match or not
    "fall": ("B+", "B AS v < PREV(v)"),
}


def _rise(v: list, kinds: list, pos: int, cut: int):
    """A at pos, B+ rising above it (each B at least the one before), then C below the last
    B: the end of the preferred match (greedy B+: the longest run C can follow), or None."""
    if kinds[pos] != "a":
        return None
    run = pos + 1
    while run < cut and v[run] > v[pos] and (run == pos + 1 or v[run] >= v[run - 1]):
        run += 1
    for c in range(run, pos + 1, -1):            # C's row after B rows pos+1 .. c-1
        if c < cut and v[c] < v[c - 1]:
            return c + 1
    return None


def _fall(v: list, kinds: list, pos: int, cut: int):
    """B+, each row below the row before it in the partition: the longest run, or None."""
    run = pos
    while run < cut and run > 0 and v[run] < v[run - 1]:
        run += 1
    return run if run > pos else None


def navigating_oracle(rows: list, case: str, skip: str, within_s: int) -> collections.Counter:
    """(k, first v, last v, rows, classifier, match number) of the preferred match from
    each start, worked out for these two patterns alone."""
    out = collections.Counter()
    for k, part in _partitions(rows):
        v, kinds = [r["v"] for r in part], [r["kind"] for r in part]
        pos, number = 0, 0
        while pos < len(part):
            cut = next((i for i, r in enumerate(part)
                        if r["ts"] >= part[pos]["ts"] + within_s * 1_000_000), len(part))
            end = (_rise if case == "rise" else _fall)(v, kinds, pos, cut)
            if end is None:
                pos += 1
                continue
            number += 1
            out[(k, v[pos], v[end - 1], end - pos, "C" if case == "rise" else "B",
                 number)] += 1
            pos = end if skip == "past" else pos + 1
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy, st.sampled_from(list(NAVIGATING)), st.sampled_from(["past", "next"]),
       st.sampled_from([2, 1000]), st.integers(0, 1000))
def test_define_reading_other_rows_equals_its_oracle(data, case, skip, within, seed):
    rows = [{"k": k, "kind": kind, "v": v, "ts": (i + 1) * 500_000}
            for i, (k, kind, v) in enumerate(data)]
    pattern, define = NAVIGATING[case]
    sql = ROW_SQL.format(after=after_clause(skip), pattern=pattern, within=within,
                         define=define)
    assert run_rows(sql, rows, random.Random(seed)) == \
        navigating_oracle(rows, case, skip, within)


def test_a_quiet_partition_does_not_keep_the_rows_prev_needed_no_more():
    """PREV keeps the row before each partition's next attempt; the store of rows keeps
    only what a match may still measure, so a partition that goes quiet holds nothing."""
    sql = ROW_SQL.format(after=after_clause("past"), pattern="B+", within=1000,
                         define="B AS v < PREV(v)")
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), CATALOG))
    op = next(v.op for v in below(q.graph.queries[0].sink) if isinstance(
        getattr(v.op, "node", None), P.Pattern))
    batch = (lambda k, n, t0: pa.RecordBatch.from_pydict({
        "k": pa.array([k] * n, pa.int32()), "kind": ["a"] * n,
        "v": pa.array(list(range(n)), pa.int32()),          # rising: never a fall
        "ts": pa.array([t0 + i for i in range(n)], pa.int64()).cast(pa.timestamp("us"))}))
    q.push("ev", batch(1, 5, 1_000_000))
    for i in range(40):                              # partition 2 only from now on
        q.push("ev", batch(2, 10, 2_000_000 + i * 10))
    assert op.store.num_rows <= 2                    # not the 405 rows seen
    q.close()


def test_flinks_price_drop_example():
    """Flink's MATCH_RECOGNIZE documentation: a fall from START_ROW then a rise, its answer
    as the documentation gives it (ACME, 10:00:04, 10:00:07, 10:00:08)."""
    catalog = MemoryCatalog().add(Relation("ticker", "stream", (
        ("symbol", "TEXT"), ("price", "INT"), ("tax", "INT"), ("rowtime", "TIMESTAMP")),
        "rowtime"))
    sql = ("SELECT * FROM ticker MATCH_RECOGNIZE (PARTITION BY symbol ORDER BY rowtime "
           "MEASURES START_ROW.rowtime AS start_tstamp, LAST(PRICE_DOWN.rowtime) AS "
           "bottom_tstamp, LAST(PRICE_UP.rowtime) AS end_tstamp ONE ROW PER MATCH "
           "AFTER MATCH SKIP TO LAST PRICE_UP PATTERN (START_ROW PRICE_DOWN+ PRICE_UP) "
           "DEFINE PRICE_DOWN AS (LAST(PRICE_DOWN.price, 1) IS NULL AND PRICE_DOWN.price < "
           "START_ROW.price) OR PRICE_DOWN.price < LAST(PRICE_DOWN.price, 1), "
           "PRICE_UP AS PRICE_UP.price > LAST(PRICE_DOWN.price, 1)) AS T")
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), catalog))
    prices = [12, 17, 19, 21, 25, 18, 15, 14, 24, 25, 19]
    at = [dt.datetime(2011, 4, 1, 10, 0, i) for i in range(len(prices))]
    out = q.push("ticker", pa.RecordBatch.from_pydict({
        "symbol": ["ACME"] * len(prices), "price": pa.array(prices, pa.int32()),
        "tax": pa.array([1] * len(prices), pa.int32()),
        "rowtime": pa.array(at, pa.timestamp("us"))})) + q.end()
    assert [r for b in out for r in b.to_pylist()] == [
        {"symbol": "ACME", "start_tstamp": at[4], "bottom_tstamp": at[7],
         "end_tstamp": at[8]}]


# ---------------------------------------------------------------------- absent rows (!C)
ABSENT_SQL = ("SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts "
              "MEASURES A.v AS av, B.v AS bv, B.v AS cv {after} PATTERN ({pattern}) "
              "WITHIN INTERVAL '{within}' SECOND "
              "DEFINE A AS kind = 'a', B AS kind <> 'a', C AS kind = 'c' AND C.v > A.v) AS m")


def absent_oracle(rows: list, pattern: str, within_s: int) -> collections.Counter:
    """A then B, consecutive rows of a partition within the window, and no row of the
    partition classified C (kind c, its v above A's) in the absence's range: (B, A + W)
    after the pattern, (B - W, A) before it."""
    w = within_s * 1_000_000
    out = collections.Counter()
    for k, part in _partitions(rows):
        for a, b in zip(part, part[1:]):
            if not (a["kind"] == "a" and b["kind"] != "a" and b["ts"] - a["ts"] < w):
                continue
            low, high = (b["ts"], a["ts"] + w) if pattern.endswith("!C") \
                else (b["ts"] - w, a["ts"])
            if any(low < c["ts"] < high and c["kind"] == "c" and c["v"] > a["v"]
                   for c in part):
                continue
            out[(k, a["v"], b["v"], b["v"])] += 1
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows_strategy, st.sampled_from(["A B !C", "!C A B"]), st.sampled_from([1, 3]),
       st.integers(0, 1000))
def test_an_absent_row_before_or_after_the_pattern(data, pattern, within, seed):
    """cqgate's extension: !C at either end of a concatenation is EVENT SEQ's negation
    (TO NEXT ROW: every A B pair is considered, as the oracle does)."""
    rows = [{"k": k, "kind": kind, "v": v, "ts": (i + 1) * 500_000}
            for i, (k, kind, v) in enumerate(data)]
    sql = ABSENT_SQL.format(after="AFTER MATCH SKIP TO NEXT ROW", pattern=pattern,
                            within=within)
    assert run(sql, rows, random.Random(seed)) == absent_oracle(rows, pattern, within)
