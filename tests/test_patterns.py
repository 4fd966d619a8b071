"""Event patterns through a real server: EVENT SEQ read through cursors (middle and closing
negation, the equivalence test, a cross-event predicate) equals the brute-force oracle of
test_pattern_engine on the same events; a derived stream of matches composes; EXPLAIN shows the
NFA; bad patterns get their SQLSTATE, position and hint; SASE's bare statement names its
columns alias_column."""
from __future__ import annotations

import collections
import datetime as dt
import random

import psycopg
import pytest

from test_pattern_engine import Comp, cross, oracle

STREAMS = ("pa", "pb", "pc")


def _events(seed: int, base_us: int) -> dict:
    """About 25 events a stream over two seconds, keys 0..2, values 0..9."""
    rng, events, next_id = random.Random(seed), {}, 1
    for s in STREAMS:
        stamps = sorted(rng.sample(range(0, 2_000_000, 1000), 25))
        evs = []
        for t in stamps:
            evs.append({"id": next_id, "ts": base_us + t, "k": rng.randrange(3),
                        "v": rng.randrange(10)})
            next_id += 1
        events[s.upper()[-1].upper()] = evs          # pa -> A, pb -> B, pc -> C
    return events


def _timestamp(us: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat(sep=" ")


def _us(value: dt.datetime) -> int:
    d = value - dt.datetime(1970, 1, 1)
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


@pytest.fixture(scope="module")
def streams(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for s in STREAMS:
            c.execute(f"CREATE STREAM {s} (id BIGINT, k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
    return server


def _fetch(cur, name: str, n: int) -> list:
    rows = []
    while len(rows) < n:
        cur.execute(f"FETCH {n - len(rows)} FROM {name} WITH (timeout = '20s')")
        got = cur.fetchall()
        if not got:
            break
        rows += got
    return rows


def test_patterns_through_cursors_equal_the_oracle(streams):
    server = streams
    queries = {   # cursor -> (SQL, components, predicates, window µs)
        "mid": ("SELECT a.id, b.id, valid_from FROM EVENT SEQ(pa a, !(pc c), pb b) "
                "WHERE [k] AND a.v < b.v WITHIN '300 milliseconds'",
                [Comp("A", "a"), Comp("C", "c", True), Comp("B", "b")],
                [cross("a", "<", "b")], 300_000),
        "closing": ("SELECT a.id, b.id, valid_from FROM EVENT SEQ(pa a, pb b, !(pc c)) "
                    "WHERE [k] WITHIN '200 milliseconds'",
                    [Comp("A", "a"), Comp("B", "b"), Comp("C", "c", True)], [], 200_000),
        "derived": ("SELECT aid, bid, valid_from FROM pattern_alerts", None, None, None),
    }
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn) as reader:
        feed.execute("CREATE STREAM pattern_alerts AS SELECT a.id AS aid, b.id AS bid "
                     "FROM EVENT SEQ(pa a, !(pc c), pb b) WHERE [k] AND a.v < b.v "
                     "WITHIN '300 milliseconds'")
        cur = reader.cursor()
        for name, (sql, *_rest) in queries.items():
            cur.execute(f"DECLARE {name} CURSOR FOR {sql}")
        now = feed.execute("SELECT CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP)").fetchone()[0]
        events = _events(7, _us(now) + 500_000)
        for s in STREAMS:
            rows = events[s[-1].upper()]
            values = ", ".join(f"({e['id']}, {e['k']}, {e['v']}, '{_timestamp(e['ts'])}')"
                               for e in rows)
            feed.execute(f"INSERT INTO {s} VALUES {values}")
        for name, (sql, comps, preds, within) in queries.items():
            if comps is None:
                comps, preds, within = queries["mid"][1:]
            want = oracle(events, comps, preds, True, within)
            rows = _fetch(cur, name, sum(want.values()))
            got = collections.Counter(((a, b), _us(vf)) for a, b, vf in rows)
            assert got == want, (name, want - got, got - want)
            assert sum(want.values()) > 3, name            # the case is not empty
            cur.execute(f"FETCH 1 FROM {name} WITH (timeout = '1s')")
            assert cur.fetchall() == [], name              # and nothing more


def test_explain_shows_the_nfa(streams):
    with psycopg.connect(streams.dsn, autocommit=True) as c:
        lines = [r[0] for r in c.execute(
            "EXPLAIN SELECT a.id FROM EVENT SEQ(pa a, pb b, !(pc c)) WHERE [k] AND a.v = 5 "
            "AND a.v < b.v AND c.v > a.v WITHIN '10 seconds' USING SKIP TILL NEXT MATCH")]
    assert lines[3].strip() == (
        '└─ ⊳ SEQ(a, b, !c); NFA states 0→2 on a → b; PAIS by "a.k"; '
        'skip till next match; '
        'scan a: "a.v" = 5; construction: "a.v" < "b.v"; negation !c: "c.v" > "a.v"; '
        'within 10 seconds')
    assert [ln.strip() for ln in lines[4:]] == ["├─ stream pa as a [ts t]",
                                               "├─ stream pb as b [ts t]",
                                               "└─ stream pc as c [ts t]"]


BAD = [
    ("SELECT * FROM EVENT SEQ(pa a, pb b, !(pc c))", "42601",
     "a pattern that ends with a negation needs WITHIN", "!(pc c)"),
    ("SELECT * FROM EVENT SEQ(!(pc c), pa a)", "42601",
     "a pattern that begins with a negation needs WITHIN", "!(pc c)"),
    ("SELECT * FROM EVENT SEQ(!(pc c)) WITHIN '1 second'", "42601",
     "a pattern of negations only would match the empty sequence", "EVENT"),
    ("SELECT * FROM EVENT SEQ(pa a, nosuch b) WITHIN '1 second'", "42P01",
     'relation "nosuch" does not exist', "nosuch"),
    ("SELECT * FROM EVENT SEQ(pa a, pb a) WITHIN '1 second'", "42712",
     'table name "a" specified more than once', "pb a"),
    ("SELECT * FROM EVENT SEQ(pa a, pb b) WHERE x.v = 1 WITHIN '1 second'", "42P01",
     'missing FROM-clause entry for table "x"', None),
    ("SELECT * FROM EVENT SEQ(pa a, pb b) WHERE [nope] WITHIN '1 second'", "42703",
     "column a.nope does not exist", "nope"),
    ("SELECT * FROM EVENT SEQ(pa a, !(pc c), !(pb b), pa d) WHERE c.v < b.v "
     "WITHIN '1 second'", "0A000", "a condition may name one negated component only", "c.v"),
    ("SELECT * FROM EVENT SEQ(pa a, pb b) USING SKIP TILL SOMETIME", "42601", None, None),
]


@pytest.mark.parametrize("sql,state,message,at", BAD)
def test_bad_patterns_say_what_and_where(streams, sql, state, message, at):
    with psycopg.connect(streams.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        assert e.value.sqlstate == state
        if message is not None:
            assert e.value.diag.message_primary == message
        if at is not None:
            assert int(e.value.diag.statement_position) == sql.index(at) + 1
        assert c.execute("SELECT 1").fetchone() == (1,)       # the session goes on


def test_the_bare_statement_names_columns_alias_column(streams):
    with psycopg.connect(streams.dsn) as c:
        cur = c.cursor()
        cur.execute("DECLARE bare CURSOR FOR EVENT SEQ(pa a, pb b) WHERE [k] "
                    "WITHIN '1 second'")
        cur.execute("FETCH 0 FROM bare")
        assert [d.name for d in cur.description] == [
            "a_id", "a_k", "a_v", "a_t", "b_id", "b_k", "b_v", "b_t"]


def test_a_pattern_that_would_build_too_many_candidates_ends_with_54000(streams):
    """2,100 pa events, then one pb: SEQ(pa x, pa y, pb b) would build 2.2 million candidate
    sequences for that one event. The query ends with 54000; the server and session go on."""
    with psycopg.connect(streams.dsn, autocommit=True) as feed, \
            psycopg.connect(streams.dsn) as reader:
        cur = reader.cursor()
        cur.execute("DECLARE dense CURSOR FOR SELECT x.id, y.id, b.id FROM "
                    "EVENT SEQ(pa x, pa y, pb b) WITHIN '1 hour'")
        now = feed.execute("SELECT CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP)").fetchone()[0]
        base = _us(now) + 60_000_000
        feed.execute("INSERT INTO pa VALUES " + ", ".join(
            f"({i}, 0, 0, '{_timestamp(base + i * 1000)}')" for i in range(2100)))
        feed.execute(f"INSERT INTO pb VALUES (9999, 0, 0, '{_timestamp(base + 3_000_000)}')")
        for s in ("pa", "pb", "pc"):
            feed.execute(f"ALTER STREAM {s} ADVANCE TO '{_timestamp(base + 4_000_000)}'")
        with pytest.raises(psycopg.Error) as e:
            cur.execute("FETCH 1 FROM dense WITH (timeout = '30s')")
        assert e.value.sqlstate == "54000", e.value
        assert "candidate sequences" in str(e.value)
    with psycopg.connect(streams.dsn, autocommit=True) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
