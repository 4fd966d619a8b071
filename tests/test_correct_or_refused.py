"""One test per class of defect the differential tester found (``test_differential.py``), each
small and fixed, through the shared server: the answer valid at chosen instants, written here
by hand from the snapshot's meaning, or the refusal's SQLSTATE. Every test here failed on the
code before (a wrong answer, no row, an internal error, or a query accepted that had to be
refused)."""
from __future__ import annotations

import datetime as dt
from collections import Counter

import psycopg
import pytest

from continuous import unique

T0 = dt.datetime(2031, 1, 1)           # event times far from the wall clock: a replay


def ts(seconds: float) -> str:
    return f"TIMESTAMP '{(T0 + dt.timedelta(seconds=seconds)).isoformat(sep=' ')}'"


def _at(rows: list, t: float) -> Counter:
    """The rows (valid_from, valid_to, values…) valid at ``t`` seconds, as a multiset."""
    at = T0 + dt.timedelta(seconds=t)
    return Counter(tuple(r[2:]) for r in rows if r[0] <= at and (r[1] is None or at < r[1]))


def answer(server, query: str, inserts: dict, end: float = 20, streams=("s",),
           table: str | None = None) -> list:
    """``query`` (``{s}``… for the streams' names, ``{tb}`` for the table's) as a cursor over
    fresh streams ``s (k INT, v INT, t)``: each stream started at T0, the rows of
    ``inserts`` ({stream: [(k, v, seconds)]}) inserted, every stream advanced to ``end``;
    every row the cursor gives, valid_from and valid_to first."""
    names = {n: unique(n) for n in streams}
    with psycopg.connect(server.dsn, autocommit=True) as feed, \
            psycopg.connect(server.dsn, autocommit=True) as reader:
        for n in names.values():
            feed.execute(f"CREATE STREAM {n} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        if table is not None:
            names["tb"] = unique("tb")
            feed.execute(table.format(**names))
        try:
            reader.execute(f"DECLARE c CURSOR WITH HOLD FOR {query.format(**names)}")
            for n in streams:
                feed.execute(f"ALTER STREAM {names[n]} ADVANCE TO {ts(0)}")
            for n, rows in inserts.items():
                for k, v, t in rows:
                    feed.execute(f"INSERT INTO {names[n]} VALUES (%s, %s, {ts(t)})", [k, v])
            for n in streams:
                feed.execute(f"ALTER STREAM {names[n]} ADVANCE TO {ts(end)}")
            reader.execute("SELECT count(*) FROM cq_queries").fetchall()     # a barrier
            return reader.execute("FETCH ALL FROM c WITH (timeout = '0')").fetchall()
        finally:
            reader.execute("CLOSE ALL")
            for n in streams:
                feed.execute(f"DROP STREAM IF EXISTS {names[n]} CASCADE")
            if table is not None:
                feed.execute(f"DROP TABLE IF EXISTS {names['tb']}")


def refusal(server, query: str) -> tuple:
    """The SQLSTATE and message DECLARE gives ``query`` over a fresh stream ``{s}``."""
    s = unique("s")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        try:
            with pytest.raises(psycopg.Error) as e:
                c.execute(f"DECLARE c CURSOR WITH HOLD FOR {query.format(s=s)}")
            return e.value.sqlstate, e.value.diag.message_primary, e.value.diag.message_hint
        finally:
            c.execute(f"DROP STREAM {s} CASCADE")


# ---------------------------------------------------------------------- aggregates
def test_a_global_aggregate_answers_over_an_empty_window_on_every_window_kind(server):
    """COUNT(*) is 0 and MAX NULL where the WHERE passes no tuple: the code before sent no row
    at all under a RANGE or a SLIDE window (their fused operators never started)."""
    for window in ("[RANGE '2 seconds']", "[RANGE '2 seconds' SLIDE '1 second']", "[ROWS 2]",
                   ""):
        rows = answer(server, f"SELECT valid_from, valid_to, COUNT(*), MAX(v) FROM {{s}} "
                              f"{window} WHERE v > 100", {"s": [(1, 1, 1), (1, 2, 3)]})
        for t in (0, 1.5, 3, 10):
            assert _at(rows, t) == Counter({(0, None): 1}), (window, t, rows)


def test_an_aggregate_over_an_aggregate_sends_its_last_change(server):
    """The outer aggregate of an inner one with no group left: the inner one held back the
    watermark, so the outer one's last rows never came (nor a union's, over it)."""
    rows = answer(server, "SELECT valid_from, valid_to, COUNT(*) AS groups FROM (SELECT k, "
                          "COUNT(*) AS n FROM {s} [RANGE '2 seconds'] GROUP BY k) AS g",
                  {"s": [(1, 1, 1), (2, 1, 2)]})
    assert [_at(rows, t) for t in (0.5, 1, 2.5, 3.5, 10)] == [
        Counter({(0,): 1}), Counter({(1,): 1}), Counter({(2,): 1}), Counter({(1,): 1}),
        Counter({(0,): 1})]


def test_distinct_and_filter_inside_aggregates(server):
    """SUM/AVG/COUNT(DISTINCT x) count each value once, FILTER keeps the rows it names: the
    code before failed to parse SUM(DISTINCT …) or computed it per batch, and MIN(v) FILTER
    ended the cursor with an internal error at the first row."""
    rows = answer(server, "SELECT valid_from, valid_to, SUM(DISTINCT v), AVG(DISTINCT v), "
                          "COUNT(DISTINCT v), MIN(v) FILTER (WHERE v > 1), "
                          "COUNT(*) FILTER (WHERE k = 2) FROM {s} [RANGE '10 seconds']",
                  {"s": [(1, 2, 1), (2, 2, 2), (2, 3, 3), (1, 1, 4)]})
    assert _at(rows, 3.5) == Counter({(5, 2.5, 2, 2, 2): 1})
    assert _at(rows, 4) == Counter({(6, 2.0, 3, 2, 2): 1})


def test_a_select_item_is_computed_only_for_the_groups_having_keeps(server):
    """A cast that fails for a group HAVING drops is no error, as in SQL (the code before
    computed the select list for every group, then filtered)."""
    rows = answer(server, "SELECT valid_from, valid_to, k, CAST('x' || MIN(v) AS INT) FROM {s} "
                          "[RANGE '5 seconds'] GROUP BY k HAVING COUNT(*) > 5",
                  {"s": [(1, 1, 1), (2, 2, 2)]})
    assert rows == []


def test_a_constant_group_key_under_a_range_window(server):
    """GROUP BY a constant: the fused RANGE aggregate wrote SQL with an empty select item."""
    rows = answer(server, "SELECT valid_from, valid_to, 'x' AS g FROM {s} [RANGE '2 seconds'] "
                          "GROUP BY 'x'", {"s": [(1, 1, 1)]})
    assert _at(rows, 2) == Counter({("x",): 1}) and _at(rows, 4) == Counter()


# ---------------------------------------------------------------------- set operations
def test_except_all_and_intersect_all_are_multisets(server):
    """EXCEPT ALL ran as EXCEPT, and INTERSECT was refused."""
    left = {"s": [(1, 0, 1), (1, 0, 1), (1, 0, 1), (2, 0, 1)], "r": [(1, 0, 1), (3, 0, 1)]}
    for op, want in (("EXCEPT ALL", {(1,): 2, (2,): 1}), ("EXCEPT", {(2,): 1}),
                     ("INTERSECT ALL", {(1,): 1}), ("INTERSECT", {(1,): 1})):
        rows = answer(server, f"SELECT valid_from, valid_to, * FROM (SELECT k FROM "
                              f"{{s}} [RANGE '5 seconds'] {op} SELECT k FROM {{r}} "
                              f"[RANGE '5 seconds']) AS d", left, streams=("s", "r"))
        assert _at(rows, 2) == Counter(want), (op, rows)


def test_a_union_branch_that_produces_nothing_holds_nothing_back(server):
    """The rows of one branch never came while the other (an aggregate with no group) sent
    none: it never told the union how far it had got."""
    rows = answer(server, "SELECT valid_from, valid_to, * FROM (SELECT k, 1 AS n FROM {s} "
                          "[RANGE '5 seconds'] UNION SELECT k, COUNT(*) FROM {s} "
                          "[RANGE '5 seconds'] WHERE v > 100 GROUP BY k) AS u",
                  {"s": [(1, 0, 1), (2, 0, 2)]})
    assert _at(rows, 3) == Counter({(1, 1): 1, (2, 1): 1})


def test_union_columns_take_a_type_that_holds_either_input(server):
    """A branch's DECIMAL constant and the other's DOUBLE column: the union cast every batch
    to the first one it saw (here the DECIMAL one's), so 0.25 came out as 0.2, or failed
    (NULL against an int). A column that is NULL in every branch has no type to take."""
    rows = answer(server, "SELECT valid_from, valid_to, * FROM (SELECT CAST(v AS DOUBLE) / 4 "
                          "AS x FROM {s} [RANGE '5 seconds'] UNION ALL SELECT abs(0.5 + k) "
                          "FROM {r} [RANGE '5 seconds']) AS u",
                  {"r": [(1, 0, 1)], "s": [(0, 1, 2)]}, streams=("s", "r"))
    assert _at(rows, 3) == Counter({(0.25,): 1, (1.5,): 1})
    rows = answer(server, "SELECT valid_from, valid_to, * FROM (SELECT NULL AS x FROM {s} "
                          "[RANGE '5 seconds'] UNION ALL SELECT NULL FROM {s} "
                          "[RANGE '5 seconds']) AS u", {"s": [(1, 0, 1)]})
    assert _at(rows, 3) == Counter({(None,): 2})


# ---------------------------------------------------------------------- joins and FROM
def test_join_using_is_an_equi_join(server):
    """JOIN … USING (k) was a cross join; k unqualified names the merged column, and * shows
    it once, first, as in PostgreSQL."""
    rows = answer(server, "SELECT valid_from, valid_to, * FROM {s} [RANGE '5 seconds'] AS a "
                          "JOIN {r} [RANGE '5 seconds'] AS b USING (k)",
                  {"s": [(1, 10, 1), (2, 20, 1)], "r": [(1, 30, 2)]}, streams=("s", "r"))
    got = _at(rows, 3)
    assert len(got) == 1 and list(got)[0][:2] == (1, 10) and list(got)[0][3] == 30


def test_join_using_the_same_column_again(server):
    """a JOIN b USING (k) JOIN c USING (k): the second USING's k is the merged k of a and b
    (42702 before, as if a.k and b.k were two columns to choose from)."""
    rows = answer(server, "SELECT valid_from, valid_to, k, a.v, b.v, c.v FROM {s} "
                          "[RANGE '5 seconds'] AS a JOIN {r} [RANGE '5 seconds'] AS b USING (k) "
                          "JOIN {q} [RANGE '5 seconds'] AS c USING (k)",
                  {"s": [(1, 10, 1), (2, 20, 1)], "r": [(1, 30, 1), (2, 40, 1)],
                   "q": [(2, 50, 2)]}, streams=("s", "r", "q"))
    assert _at(rows, 3) == Counter({(2, 20, 40, 50): 1})


def test_a_query_in_from_with_two_columns_of_one_name(server):
    """SELECT * FROM (SELECT a.k, b.k …): the second column read the first one's values (or
    the cursor ended with an internal error); a.k named alone is ambiguous, as in SQL."""
    rows = answer(server, "SELECT valid_from, valid_to, * FROM (SELECT a.v, b.v FROM {s} "
                          "[RANGE '5 seconds'] AS a, {r} [RANGE '5 seconds'] AS b WHERE a.k = "
                          "b.k) AS q", {"s": [(1, 10, 1)], "r": [(1, 30, 2)]},
                  streams=("s", "r"))
    assert _at(rows, 3) == Counter({(10, 30): 1})
    state, message, _ = refusal(server, "SELECT q.v FROM (SELECT a.v, b.v FROM {s} "
                                        "[RANGE '5 seconds'] AS a, {s} [NOW] AS b) AS q")
    assert (state, message) == ("42702", 'column reference "q.v" is ambiguous')
    # a derived stream's columns are read by name: as a view, it cannot have two of one name
    s, d = unique("s"), unique("d")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        try:
            with pytest.raises(psycopg.errors.DuplicateColumn):
                c.execute(f"CREATE STREAM {d} AS SELECT a.v, b.v FROM {s} [RANGE '5 seconds'] "
                          f"AS a, {s} [NOW] AS b")
        finally:
            c.execute(f"DROP STREAM {s} CASCADE")


# ---------------------------------------------------------------------- functions and types
def test_result_columns_carry_the_types_a_table_query_gives(server):
    """greatest, NULLIF and CASE of integers came back typed text; each column now has the
    type the same expressions have over a table of the same columns."""
    s, tb = unique("s"), unique("tb")
    items = "greatest(k, v), NULLIF(k, v), CASE WHEN k > 0 THEN v END, length('ab'), k / 2"
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE TABLE {tb} (k INT, v INT, t TIMESTAMP)")
        try:
            c.execute(f"DECLARE c CURSOR WITH HOLD FOR SELECT {items}, COUNT(*) FROM {s} "
                      f"[NOW] GROUP BY 1, 2, 3, 4, 5")
            cur = c.execute("FETCH ALL FROM c WITH (timeout = '0')")
            continuous = [d.type_code for d in cur.description]
            table = c.execute(f"SELECT {items}, COUNT(*) FROM {tb} GROUP BY 1, 2, 3, 4, 5")
            assert continuous == [d.type_code for d in table.description]
            assert continuous[:3] == [23, 23, 23]           # integer, as in PostgreSQL
            c.execute("CLOSE c")
        finally:
            c.execute(f"DROP STREAM {s}")
            c.execute(f"DROP TABLE {tb}")


def test_a_sql_function_runs_in_table_and_continuous_queries(server):
    """CREATE FUNCTION … LANGUAGE SQL made a macro returning its body's text ('SELECT x * 2'
    for twice(3)), and a continuous query calling it ended with an internal error at its
    first row: now 6, and the continuous query computes it (inlined)."""
    f = unique("twice")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE FUNCTION {f}(x BIGINT) RETURNS BIGINT AS 'SELECT x * 2' LANGUAGE SQL")
        try:
            assert c.execute(f"SELECT {f}(3)").fetchone() == (6,)
            rows = answer(server, f"SELECT valid_from, valid_to, {f}(v) FROM {{s}} "
                                  f"[RANGE '5 seconds']", {"s": [(1, 21, 1)]})
            assert _at(rows, 2) == Counter({(42,): 1})
            # one of another schema, named with it (the call's schema was lost before)
            schema = unique("shop")
            c.execute(f"CREATE SCHEMA {schema}")
            c.execute(f"CREATE FUNCTION {schema}.{f}(x BIGINT) RETURNS BIGINT AS "
                      "'SELECT x * 3' LANGUAGE SQL")
            rows = answer(server, f"SELECT valid_from, valid_to, {schema}.{f}(v), {f}(v) "
                                  f"FROM {{s}} [RANGE '5 seconds']", {"s": [(1, 21, 1)]})
            assert _at(rows, 2) == Counter({(63, 42): 1})
            c.execute(f"DROP FUNCTION {schema}.{f}")
            c.execute(f"DROP SCHEMA {schema}")
        finally:
            c.execute(f"DROP FUNCTION {f}")


def test_a_value_the_query_cannot_compute_is_the_users_error(server):
    """A cast that cannot convert a value, a division by zero: PostgreSQL's SQLSTATE when the
    cursor reaches it (the code before ended it with XX000)."""
    for expression, state in (("CAST('x' || v AS INT)", "22P02"), ("v / k", "22012")):
        s = unique("s")
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
            try:
                c.execute(f"DECLARE c CURSOR WITH HOLD FOR SELECT {expression} FROM {s}")
                c.execute(f"INSERT INTO {s} VALUES (0, 1, {ts(1)})")
                with pytest.raises(psycopg.Error) as e:
                    c.execute("FETCH ALL FROM c WITH (timeout = '10s')")
                assert e.value.sqlstate == state, expression
                c.execute("CLOSE c")
            finally:
                c.execute(f"DROP STREAM {s}")


def test_a_named_window_whose_query_fails_fails_its_readers(server):
    """A named window's query ended with a data error in the back end, and a cursor reading
    the window's rows went on with none, for ever: an empty answer that was wrong. Its
    readers end with the error, and a reader declared later gets it at DECLARE."""
    s, w = unique("s"), unique("w")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        try:
            c.execute(f"CREATE WINDOW {w} AS SELECT CAST('x' || v AS INT) AS n FROM {s} "
                      "[RANGE '5 seconds']")
            c.execute(f"DECLARE r CURSOR WITH HOLD FOR SELECT * FROM Stream({w})")
            c.execute(f"INSERT INTO {s} VALUES (1, 1, {ts(1)})")
            with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=w):
                c.execute("FETCH ALL FROM r WITH (timeout = '10s')")
            c.execute("CLOSE r")
            with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=w):
                c.execute(f"DECLARE r2 CURSOR WITH HOLD FOR SELECT * FROM Stream({w})")
        finally:
            c.execute(f"DROP STREAM {s} CASCADE")


# ---------------------------------------------------------------------- refused at DECLARE
REFUSED = [
    # accepted before, then XX000 at the first row
    ("SELECT str_to_map(CAST(v AS TEXT), ',', ':') FROM {s}", "42883",
     "function str_to_map() does not exist"),
    # accepted before: a value per batch of the back end
    ("SELECT k, random() FROM {s}", "0A000", "random() is volatile"),
    ("SELECT k FROM {s} [NOW] WHERE COUNT(*) > 1", "42803", "aggregate functions are not "
                                                            "allowed in WHERE"),
    ("SELECT COUNT(*) FROM {s} [NOW] GROUP BY -1", "42P10", "GROUP BY position -1"),
    # accepted before, then 22P02 at the first row (DuckDB cast the TIME to a DATE)
    ("SELECT CAST(t AS TIME) FROM {s} [NOW] UNION ALL SELECT CAST(t AS DATE) FROM {s} [NOW]",
     "42804", "cannot be matched"),
]


@pytest.mark.parametrize("query,state,message", REFUSED, ids=[m for _, _, m in REFUSED])
def test_what_cannot_be_right_is_refused_at_declare(server, query, state, message):
    got_state, got_message, hint = refusal(server, query)
    assert got_state == state and message in got_message, (got_state, got_message)
    assert hint or state != "0A000", "a refusal says what to write instead"


# ---------------------------------------------------------------------- snapshot mode
def test_snapshot_mode_answers_a_global_aggregate_over_nothing(server):
    """In snapshot mode a keyless aggregate over a window with no tuple answered no row, and
    one over a SLIDE window that a non-fused aggregate runs looped for ever at the end of its
    input (the back end was killed)."""
    s = unique("s")
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn, autocommit=True, options="-c cq.mode=snapshot") as snap:
        c.execute(f"CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        try:
            c.execute(f"INSERT INTO {s} VALUES (1, 5, {ts(1)})")
            c.execute(f"ALTER STREAM {s} ADVANCE TO {ts(10)}")
            assert snap.execute(f"SELECT COUNT(*), MAX(v) FROM {s} [RANGE '2 seconds']"
                                ).fetchall() == [(0, None)]
            assert snap.execute(f"SELECT COUNT(DISTINCT v) FROM {s} [RANGE '4 seconds' "
                                f"SLIDE '2 seconds']").fetchall() == [(0,)]
            assert snap.execute(f"SELECT COUNT(*) FROM {s} [UNBOUNDED]").fetchall() == [(1,)]
        finally:
            c.execute(f"DROP STREAM {s}")
