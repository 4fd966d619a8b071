"""Flink SQL's spellings in cqgate (docs/flink.md): each maps to the temporal algebra with Flink's
meaning or is refused naming the construct. The windows' rows are checked against windows
computed here by hand, in the executor and through the real server; the whole NEXMark suite
in Flink's text is tests/test_nexmark_suite.py."""
import datetime as dt
import os
import sys

import psycopg
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from dialect import errors as DE
from dialect.planner import MemoryCatalog, Relation, explain, plan
from executor import plan as P
from executor.graph import RunningQuery

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.nexmark.suite import SUITE  # noqa: E402

S = 1_000_000
T0 = 1_793_491_200 * S                       # 2026-11-01 00:00:00


def _catalog() -> MemoryCatalog:
    cat = MemoryCatalog()
    cat.add(Relation("bid", "stream", (("auction", "BIGINT"), ("price", "BIGINT"),
                                       ("datetime", "TIMESTAMP")), "datetime"))
    cat.add(Relation("side_input", "table", (("key", "BIGINT"), ("value", "TEXT"))))
    return cat


def _plan(sql: str, **kw) -> P.Plan:
    return plan(sqlglot.parse_one(sql, read="cql"), _catalog(), **kw)


def _run(sql: str, rows: list) -> list:
    """The query's rows (with their intervals, µs from T0) over bids at ``rows`` = [(auction,
    price, second)], then the input's end."""
    q = RunningQuery(_plan(sql))
    batch = pa.RecordBatch.from_pydict({
        "auction": pa.array([a for a, _, _ in rows], pa.int64()),
        "price": pa.array([p for _, p, _ in rows], pa.int64()),
        "datetime": pa.array([T0 + int(s * S) for _, _, s in rows], pa.timestamp("us"))})
    out = q.push("bid", batch) + q.watermark("bid", T0 + 60 * S)
    got = []
    for b in out:
        for r in b.to_pylist():
            got.append(tuple(round((v - dt.datetime(2026, 11, 1)).total_seconds(), 6)
                             if isinstance(v, dt.datetime) else v for v in r.values()))
    return sorted(got, key=repr)


BIDS = [(1, 10, 0.5), (1, 30, 1.0), (2, 20, 1.9), (1, 5, 2.0), (2, 7, 3.25)]


def test_tumble_holds_start_inclusive_end_exclusive():
    """A bid at exactly 2.0 s is in [2, 4), not [0, 2): Flink's windows, not cqgate's (end −
    range, end]."""
    got = _run("SELECT window_start, window_end, COUNT(*) AS n, MAX(price) AS top, valid_from, "
               "valid_to FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' "
               "SECOND)) GROUP BY window_start, window_end", BIDS)
    # each window's row holds from its end less 1 µs, for one size
    assert got == [(0.0, 2.0, 3, 30, 1.999999, 3.999999),
                   (2.0, 4.0, 2, 7, 3.999999, 5.999999)]


def test_hop_and_cumulate_hold_each_tuple_once_per_window():
    hop = _run("SELECT window_end, COUNT(*) AS n FROM TABLE(HOP(TABLE bid, DESCRIPTOR("
               "datetime), INTERVAL '1' SECOND, INTERVAL '2' SECOND)) GROUP BY window_start, "
               "window_end", BIDS)
    # by hand: [-1, 1) holds 0.5; [0, 2) 0.5, 1.0, 1.9; [1, 3) 1.0, 1.9, 2.0; [2, 4) 2.0,
    # 3.25; [3, 5) 3.25
    want = {1.0: 1, 2.0: 3, 3.0: 3, 4.0: 2, 5.0: 1}
    assert {r[0]: r[1] for r in hop} == want
    cumulate = _run("SELECT window_start, window_end, SUM(price) AS s FROM TABLE(CUMULATE("
                    "TABLE bid, DESCRIPTOR(datetime), INTERVAL '1' SECOND, INTERVAL '2' SECOND)) "
                    "GROUP BY window_start, window_end", BIDS)
    assert [r[:3] for r in cumulate] == [(0.0, 1.0, 10), (0.0, 2.0, 60), (2.0, 3.0, 5),
                                         (2.0, 4.0, 12)]


def test_session_table_and_group_window_agree():
    tvf = _run("SELECT auction, window_start, window_end, COUNT(*) AS n FROM TABLE(SESSION("
               "TABLE bid PARTITION BY auction, DESCRIPTOR(datetime), INTERVAL '1' SECOND)) "
               "GROUP BY auction, window_start, window_end", BIDS)
    group = _run("SELECT auction, SESSION_START(datetime, INTERVAL '1' SECOND) AS s, "
                 "SESSION_END(datetime, INTERVAL '1' SECOND) AS e, COUNT(*) AS n FROM bid "
                 "GROUP BY auction, SESSION(datetime, INTERVAL '1' SECOND)", BIDS)
    # auction 1: 0.5, 1.0 (gap 0.5 < 1) then 2.0 (gap 1.0: a new session); auction 2 apart
    assert [r[:4] for r in tvf] == [(1, 0.5, 2.0, 2), (1, 2.0, 3.0, 1), (2, 1.9, 2.9, 1),
                                    (2, 3.25, 4.25, 1)]
    assert [r[:4] for r in group] == [r[:4] for r in tvf]


def test_top_n_over_a_stream_runs_as_tau_and_keeps_n_rows():
    sql = ("SELECT auction, price FROM (SELECT auction, price, ROW_NUMBER() OVER (PARTITION BY "
           "auction ORDER BY price DESC) AS rn FROM bid) WHERE rn <= 1")
    assert any("τ first 1 by" in line for line in explain(_plan(sql)))
    got = _run("SELECT auction, price, valid_from, valid_to FROM (" + sql + ") t", BIDS)
    # 10 leads auction 1 until 30 comes at 1 s, and 30 from then on (5 never enters); pieces
    # that meet are one row
    spans: dict = {}
    for auction, price, start, end in got:
        held = spans.setdefault((auction, price), [])
        if held and held[-1][1] == start:
            held[-1] = (held[-1][0], end)
        else:
            held.append((start, end))
    assert spans == {(1, 10): [(0.5, 1.0)], (1, 30): [(1.0, 60.0)], (2, 20): [(1.9, 60.0)]}
    # over a window it is Σ, as before
    windowed = sql.replace("FROM bid)", "FROM bid [RANGE '1 second'])")
    assert any("Σ a window function" in line for line in explain(_plan(windowed)))


REFUSED = [
    ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(auction), INTERVAL '1' SECOND)) "
     "GROUP BY window_start, window_end", "0A000", "DESCRIPTOR(auction)"),
    ("SELECT COUNT(*) FROM TABLE(HOP(TABLE bid, DESCRIPTOR(datetime), INTERVAL '3' SECOND, "
     "INTERVAL '10' SECOND)) GROUP BY window_start, window_end", "22023",
     "HOP's size must be a positive multiple of its slide"),
    ("SELECT COUNT(*) FROM TABLE(TUMBLE(TABLE side_input, DESCRIPTOR(key), INTERVAL '1' SECOND))"
     " GROUP BY window_start", "0A000", '"side_input" is a table; windows apply to streams'),
    ("SELECT auction FROM bid WHERE PROCTIME() IS NOT NULL", "0A000",
     "PROCTIME() belongs in a select list"),
    ("SELECT TUMBLE_START(datetime, INTERVAL '1' SECOND) FROM bid", "0A000",
     "TUMBLE_START needs GROUP BY TUMBLE(…)"),
    ("SELECT b.auction FROM bid AS b JOIN bid FOR SYSTEM_TIME AS OF b.datetime AS c "
     "ON b.auction = c.auction", "0A000", "FOR SYSTEM_TIME AS OF reads a table"),
    ("SELECT DATE_FORMAT(datetime, 'yyyy-MM-dd qq') FROM bid", "0A000",
     'DATE_FORMAT pattern letters "qq"'),
    ("SELECT a.auction FROM bid AS a JOIN bid AS b ON a.auction = b.auction", "0A000",
     "SET cq.unbounded_state = on"),
]


@pytest.mark.parametrize("sql, state, text", REFUSED)
def test_what_cannot_be_mapped_is_refused_naming_it(sql, state, text):
    with pytest.raises(DE.PlanError) as e:
        _plan(sql)
    assert e.value.sqlstate == state
    assert text in str(e.value) + (e.value.hint or "")


def test_unbounded_state_lets_a_regular_join_run():
    p = _plan("SELECT a.auction FROM bid AS a JOIN bid AS b ON a.auction = b.auction",
              unbounded_state=True)
    assert any("⋈ stream-stream" in line for line in explain(p))


def test_backticks_fold_case_and_a_subquery_needs_no_alias():
    """`dateTime` is read as the unquoted name is (a keyword too: `value`); a query in FROM
    without an alias is read as unnamed_subquery (PostgreSQL 16)."""
    ticked = _plan("SELECT `dateTime`, `AUCTION` FROM (SELECT * FROM bid)")
    bare = _plan("SELECT dateTime, AUCTION FROM (SELECT * FROM bid) AS unnamed_subquery")
    assert explain(ticked) == explain(bare)
    assert [c.name for c in _plan("SELECT `value` FROM side_input JOIN bid ON "
                                  "bid.auction = side_input.key").output] == ["value"]


def test_flink_functions_over_a_table(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        row = c.execute("SELECT DATE_FORMAT(TIMESTAMP '2026-11-01 10:00:04.5', "
                        "'yyyy-MM-dd HH:mm:ss.SSS'), SPLIT_INDEX('a/b', '/', 1), "
                        "SPLIT_INDEX('a/b', '/', 2), SPLIT_INDEX('a/b', '/', -1), "
                        "REGEXP_EXTRACT('k=7', 'k=(\\d)', 1), REGEXP_EXTRACT('k=7', 'j=(\\d)'),"
                        " REGEXP_EXTRACT('k=7', 'k=\\d')").fetchone()
    assert row == ("2026-11-01 10:00:04.500", "b", None, None, "7", None, "k=7")


def test_views_over_streams_are_read_in_their_place_and_dropped(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("DROP STREAM IF EXISTS taps CASCADE")
        c.execute("CREATE STREAM taps (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute("CREATE VIEW big_taps AS SELECT k, t FROM taps WHERE k > 1")
        with pytest.raises(psycopg.errors.DuplicateTable):
            c.execute("CREATE VIEW big_taps AS SELECT k FROM taps")
        with pytest.raises(psycopg.errors.FeatureNotSupported):   # never XX000
            c.execute("CREATE TABLE frozen AS SELECT k FROM taps")
        c.execute("DECLARE v CURSOR WITH HOLD FOR SELECT window_end, COUNT(*) FROM TABLE("
                  "TUMBLE(TABLE big_taps, DESCRIPTOR(t), INTERVAL '10' SECOND)) "
                  "GROUP BY window_start, window_end")
        c.execute("INSERT INTO taps VALUES (1, '2026-11-01 10:00:01'), "
                  "(2, '2026-11-01 10:00:02'), (3, '2026-11-01 10:00:12')")
        c.execute("ALTER STREAM taps ADVANCE TO '2026-11-01 10:01:00'")
        rows = c.execute("FETCH 2 FROM v").fetchall()
        assert rows == [(dt.datetime(2026, 11, 1, 10, 0, 10), 1),
                        (dt.datetime(2026, 11, 1, 10, 0, 20), 1)]
        c.execute("CLOSE v")
        assert c.execute("SELECT relkind FROM pg_class WHERE relname = 'big_taps'"
                         ).fetchone() == ("v",)
        with pytest.raises(psycopg.errors.DependentObjectsStillExist):
            c.execute("DROP STREAM taps")
        c.execute("DROP VIEW big_taps")
        assert c.execute("SELECT count(*) FROM pg_class WHERE relname = 'big_taps'"
                         ).fetchone() == (0,)
        c.execute("DROP STREAM taps")


def test_flinks_q6_text_is_refused_with_a_clear_error(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("DROP STREAM IF EXISTS auction CASCADE")
        c.execute("DROP STREAM IF EXISTS bid CASCADE")
        c.execute("CREATE STREAM auction (id BIGINT, seller BIGINT, dateTime TIMESTAMP "
                  "TIMESTAMPCOLUMN, expires TIMESTAMP)")
        c.execute("CREATE STREAM bid (auction BIGINT, price BIGINT, dateTime TIMESTAMP "
                  "TIMESTAMPCOLUMN)")
        with pytest.raises(psycopg.errors.UndefinedTable) as e:
            c.execute(f"DECLARE q6 CURSOR WITH HOLD FOR {SUITE['q6'].flink}")
        assert 'missing FROM-clause entry for table "A"' in str(e.value)
        c.execute("SET cq.unbounded_state = on")
        c.execute(f"DECLARE q6 CURSOR WITH HOLD FOR {SUITE['q6'].fixed}")
        c.execute("CLOSE q6")
        c.execute("DROP STREAM auction")
        c.execute("DROP STREAM bid")
