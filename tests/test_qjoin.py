"""The quality-driven join (seed 003's QJoin) against the ideal answer, the join of the
in-order input computed by DuckDB: every result is correct and given once, the recall per
period keeps to the target, it follows a shift of the delays, and at 0.95 it answers with
far less latency and fewer buffered tuples than MP-K-slack on Pareto-tailed delays. Also
the SQL: WITH (recall = …), EXPLAIN, derived streams and what is refused."""
from __future__ import annotations

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot

import dialect  # noqa: F401 - registers the cql dialect
from bench.qjoin import engines as E
from bench.qjoin import soccer
from dialect.errors import PlanError
from dialect.planner import plan
from executor import plan as P
from executor.graph import RunningQuery

JOIN_AT = E.JOIN.replace("'{w} seconds'", "'{w}'")
SECONDS = 130
TICK_US = 100_000
PERIOD_US = 10_000_000


@pytest.fixture(scope="module")
def data():
    ball, players = soccer.generate(soccer.Soccer(seconds=SECONDS, delays="pareto",
                                                  ball_hz=100, player_hz=25))
    # the last seconds are left out: the slack's last tuples leave at the data's end
    until = soccer.START_US + (SECONDS - 10) * 1_000_000
    return ball, players, E.ideal(ball, players), until


@pytest.fixture(scope="module")
def runs(data):
    ball, players, _, _ = data
    return {target: _qjoin(ball, players, target) for target in (0.9, 0.95, 0.99)}


def _qjoin(ball, players, target: float, period: str = "10 seconds", **options) -> E.Outcome:
    return E.run_qjoin(ball, players, target, period=period, adapt="500 milliseconds",
                       tick_us=TICK_US, **options)


@pytest.mark.parametrize("target", [0.9, 0.95, 0.99])
def test_every_result_is_right_and_given_once(data, runs, target):
    _, _, pairs, _ = data
    o = runs[target]
    assert len(pairs) > 10_000 and len(o.keys)
    assert len(np.unique(o.keys, axis=0)) == len(o.keys)
    assert E.isin(o.keys, pairs).all()                            # precision 1


@pytest.mark.parametrize("target", [0.9, 0.95, 0.99])
def test_the_recall_keeps_to_the_target(data, runs, target):
    """Over the periods after the first (the warm-up), by valid_from: the mean recall is at
    least the target, and at least 90 % of the periods are within 0.02 of it."""
    _, _, pairs, until = data
    o = runs[target]
    _, recall, _ = E.recall_by_period(o.keys, pairs, PERIOD_US, until)
    after = recall[1:]
    assert len(after) >= 10
    assert after.mean() >= target, recall
    assert (np.abs(after - target) <= 0.02).mean() >= 0.9, recall
    assert o.stats["recall_estimate"] is not None and o.stats["adaptations"] > 200


def test_lower_targets_buffer_less(runs):
    assert runs[0.9].buffered.mean() < runs[0.95].buffered.mean() < runs[0.99].buffered.mean()


def test_at_095_latency_and_memory_are_at_most_half_of_mp_k_slack(data):
    """Pareto-tailed delays: MP-K-slack waits for the worst delay seen before joining; QJoin
    joins each tuple as it comes against buffers sized for 95 %. (The first 40 s of arrivals:
    the ordinary join behind the slack takes a DuckDB query per chunk.)"""
    first = soccer.START_US + 40_000_000
    ball, players = (t.filter(pc.less(t.column("arrival").cast(pa.int64()), first))
                     for t in data[:2])
    pairs, until = E.ideal(ball, players), first - 10_000_000
    slack = E.run_slack(ball, players, "adaptive", tick_us=TICK_US)
    qjoin = _qjoin(ball, players, 0.95)
    q = E.summary(qjoin, pairs, PERIOD_US, until)
    k = E.summary(slack, pairs, PERIOD_US, until)
    # MP-K-slack drops a tuple later than K before K grows to its delay, so it misses too
    assert k["precision"] == 1.0 and slack.stats["late"] > 0
    assert q["latency_ms"] <= k["latency_ms"] / 2
    assert q["buffered"] <= k["buffered"] / 2


def test_when_the_delays_shift_it_follows():
    """Exponential delays three times longer from half way (30 s): the second of the shift
    falls short; two adaptations (L = 0.5 s) later the rest of its period is back above the
    target, and so is every period after it, with delay bounds grown to match. The same data
    without the shift keep their short bounds, and the same recall before it."""
    bounds, before, hit = {}, {}, {}
    for kind in ("shift", "exponential"):
        ball, players = soccer.generate(soccer.Soccer(seconds=60, delays=kind, ball_hz=100,
                                                      player_hz=25))
        pairs, until = E.ideal(ball, players), soccer.START_US + 50_000_000
        o = _qjoin(ball, players, 0.95, period="5 seconds")
        _, recall, precision = E.recall_by_period(o.keys, pairs, 5_000_000, until)
        assert precision == 1.0 and len(recall) == 10
        after = recall[7:]                          # 35–50 s: after the shift's period
        assert after.mean() >= 0.95 and (after >= 0.93).all(), (kind, recall)
        hit[kind] = _recall_between(o.keys, pairs, 30, 31)
        assert _recall_between(o.keys, pairs, 31, 35) >= 0.95, kind
        bounds[kind] = o.stats["delay_left_us"] + o.stats["delay_right_us"]
        before[kind] = recall[:5]
    assert hit["shift"] < hit["exponential"] - 0.1
    assert bounds["shift"] >= 3 * bounds["exponential"]
    assert (before["shift"] == before["exponential"]).all()     # the shift comes in time


def _recall_between(keys, pairs, first_s: int, last_s: int) -> float:
    """The share of the ideal pairs beginning in [first_s, last_s) (seconds of data) found."""
    starts = np.maximum(pairs[:, 0], pairs[:, 2]) - soccer.START_US
    inside = pairs[(starts >= first_s * 1_000_000) & (starts < last_s * 1_000_000)]
    return float(E.isin(inside, keys).mean())


def test_in_order_it_gives_the_same_results_by_valid_from(data, runs):
    """As a derived stream runs it: each result held until no earlier one can come, then
    sent; the same results as the cursor's, in valid_from order."""
    ball, players, _, _ = data
    o = _qjoin(ball, players, 0.95, in_order=True)
    starts = np.maximum(o.keys[:, 0], o.keys[:, 2])
    assert len(starts) > 10_000 and (np.diff(starts) >= 0).all()
    assert len(o.keys) == len(runs[0.95].keys) and E.isin(o.keys, runs[0.95].keys).all()
    assert o.latency.mean() > runs[0.95].latency.mean()         # what the order costs


@pytest.mark.parametrize("window,basic", [("1 millisecond", None),
                                          ("300 milliseconds", "'250 milliseconds'"),
                                          ("1 second", "'10 seconds'")])
def test_any_window_and_basic_window_run(data, window, basic):
    """Windows smaller than a basic window, or not a whole number of them: the operator
    runs, and every result is right."""
    ball, players, _, _ = data
    sql = JOIN_AT.format(w=window) + " WITH (recall = 0.9, adapt = '200 milliseconds'" + (
        f", basic_window = {basic})" if basic else ")")
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), E.CATALOG))
    first = soccer.START_US + 5_000_000
    ball, players = (t.filter(pc.less(t.column("arrival").cast(pa.int64()), first))
                     for t in (ball, players))
    out = []
    for b, p in zip(ball.to_batches(max_chunksize=50), players.to_batches(max_chunksize=100)):
        out += q.push("ball" + P.ARRIVAL, b) + q.push("players" + P.ARRIVAL, p)
    q.close()
    rows = [b for b in out if isinstance(b, pa.RecordBatch) and b.num_rows]
    window_s = {"1 millisecond": 0.001, "300 milliseconds": 0.3, "1 second": 1}[window]
    assert rows or window_s < 0.01
    for b in rows:
        keys = np.stack([b.column(c).cast(pa.int64()).to_numpy() for c in
                         ("r_ts", "s_sid", "s_ts")], axis=1)
        assert E.isin(keys, E.ideal(ball, players, window_s)).all()


def test_a_quiet_input_does_not_hold_the_other_buffer(data):
    """The players stop; their stream's BOUNDARYs go on (heartbeats): T follows them, so
    the ball's buffer is still evicted, and its size stays that of its window."""
    ball, _, _, _ = data
    sql = E.JOIN.format(w=2) + " WITH (recall = 0.9)"
    q = RunningQuery(plan(sqlglot.parse_one(sql, read="cql"), E.CATALOG))
    start = soccer.START_US
    for k, batch in enumerate(ball.sort_by("ts").to_batches(max_chunksize=100)):
        q.push("ball" + P.ARRIVAL, batch)                 # 1 s of ball tuples each
        q.watermark("players", start + k * 1_000_000)
    assert q.state_size() <= 4 * 100 + 100       # its window (2 s) and slack, not 4,000 rows
    q.close()


def test_the_sql_asks_for_it_and_explain_shows_it():
    sql = E.JOIN.format(w=2) + " WITH (recall = 0.95, period = '1 minute', granularity = " \
                               "'20 milliseconds')"
    p = plan(sqlglot.parse_one(sql, read="cql"), E.CATALOG)
    joins = [n for n in _walk(p.root) if isinstance(n, P.QualityJoin)]
    assert len(joins) == 1
    j = joins[0]
    assert (j.recall, j.period_us, j.granularity_us, j.adapt_us, j.spans_us) == \
        (0.95, 60_000_000, 20_000, 1_000_000, (2_000_000, 2_000_000))
    text = "\n".join(P.explain(p))
    assert "⋈q arrival order, recall 0.95 over 1 minute" in text
    # the round trip keeps the options, and the session's target works alike
    assert "WITH (recall = 0.95" in sqlglot.parse_one(sql, read="cql").sql("cql")
    plain = plan(sqlglot.parse_one(E.JOIN.format(w=2), read="cql"), E.CATALOG,
                 join_quality={"recall": 0.9})
    assert [n.recall for n in _walk(plain.root) if isinstance(n, P.QualityJoin)] == [0.9]
    held = plan(sqlglot.parse_one(sql, read="cql"), E.CATALOG, joins_in_order=True)
    assert "results held to valid_from order" in "\n".join(P.explain(held))
    assert "held" not in text


BAD = [
    (" WITH (recall = 1.5)", "22023", "invalid value for join option"),
    (" WITH (recal = 0.5)", "22023", 'unrecognized join option "recal"'),
    (" WITH (period = '1 minute')", "22023", "need recall"),
]


@pytest.mark.parametrize("tail,state,message", BAD)
def test_bad_options_say_what(tail, state, message):
    with pytest.raises(PlanError) as e:
        plan(sqlglot.parse_one(E.JOIN.format(w=2) + tail, read="cql"), E.CATALOG)
    assert e.value.sqlstate == state and message in str(e.value)
    assert e.value.position is not None


def test_what_cannot_read_its_rows_is_refused():
    agg = ("SELECT count(*) FROM ball [RANGE '2 seconds'] r, players [RANGE '2 seconds'] s "
           "WHERE r.sid = s.sid WITH (recall = 0.9)")
    one = "SELECT r.sid FROM ball [RANGE '2 seconds'] r WITH (recall = 0.9)"
    rows = ("SELECT r.sid FROM ball [ROWS 10] r, players [RANGE '2 seconds'] s "
            "WITH (recall = 0.9)")
    for sql, message in ((agg, "cannot feed an aggregate"), (one, "a join of two streams"),
                         (rows, "RANGE windows")):
        with pytest.raises(PlanError) as e:
            plan(sqlglot.parse_one(sql, read="cql"), E.CATALOG)
        assert e.value.sqlstate == "0A000" and message in str(e.value)
        assert e.value.position is not None


def _walk(node):
    yield node
    for c in P.children(node):
        yield from _walk(c)


def test_through_a_server_with_the_session_target(server):
    """SET cq.join_recall plans joins as QJoin (EXPLAIN shows it); a bad value is 22023; a
    cursor over the join gives every result of in-order rows, and a late tuple's at once; a
    derived stream over the join holds them all, in valid_from order."""
    named = ("SELECT r.k AS k, r.v AS rv, s.v AS sv FROM qj_r [RANGE '2 seconds'] r, "
             "qj_s [RANGE '2 seconds'] s WHERE r.k = s.k")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        notices = []
        c.add_notice_handler(lambda d: notices.append(d.message_primary))
        for s in ("qj_r", "qj_s"):
            c.execute(f"CREATE STREAM IF NOT EXISTS {s} (k INT, v INT, "
                      "t TIMESTAMP TIMESTAMPCOLUMN)")
        join = ("SELECT r.k, r.v, s.v FROM qj_r [RANGE '2 seconds'] r, "
                "qj_s [RANGE '2 seconds'] s WHERE r.k = s.k")
        c.execute("SET cq.join_recall = 0.9")
        plan_text = "\n".join(r[0] for r in c.execute("EXPLAIN " + join).fetchall())
        assert "⋈q arrival order, recall 0.9 over 1 minute" in plan_text
        with pytest.raises(psycopg.Error) as e:
            c.execute("SET cq.join_recall = 2")
        assert e.value.sqlstate == "22023"
        assert c.execute("SHOW cq.join_recall").fetchone() == ("0.9",)
        # an aggregate over the join is planned without the session's target
        assert "⋈ stream-stream" in "\n".join(r[0] for r in c.execute(
            "EXPLAIN SELECT count(*) FROM qj_r [RANGE '2 seconds'] r, qj_s [RANGE '2 seconds'] "
            "s WHERE r.k = s.k").fetchall())
        # a stored definition says all it runs: the session's target does not reach it
        c.execute(f"CREATE STREAM qj_plain AS {named}")
        assert any("cq.join_recall does not apply" in n for n in notices)
        assert c.execute("SELECT count(*) FROM cq_joins WHERE name = 'qj_plain'").fetchone() \
            == (0,)
        c.execute("DROP STREAM qj_plain")
        c.execute(f"CREATE STREAM qj_near AS {named} WITH (recall = 0.95)")
        # a named window may aggregate over its join: its rows come in valid_from order
        c.execute("CREATE WINDOW qj_pairs AS SELECT count(*) AS n FROM qj_r [RANGE '2 seconds'] "
                  "r, qj_s [RANGE '2 seconds'] s WHERE r.k = s.k WITH (recall = 0.95)")
        c.execute("SET cq.join_recall = off")
        assert "⋈q" not in "\n".join(r[0] for r in c.execute("EXPLAIN " + join).fetchall())
    with psycopg.connect(server.dsn) as reader, \
            psycopg.connect(server.dsn, autocommit=True) as feed:
        cur = reader.cursor()
        cur.execute(f"DECLARE qj CURSOR FOR {join} WITH (recall = 0.95)")
        cur.execute("DECLARE near CURSOR FOR SELECT k, rv, sv, valid_from FROM qj_near")
        for i in range(20):
            stream = ("qj_r", "qj_s")[i % 2]
            feed.execute(f"INSERT INTO {stream} VALUES ({i % 3}, {i}, "
                         f"'2026-11-01 00:00:{i // 2:02d}')")
        timed = sorted((r[0], r[1], s[1], max(r[2], s[2]))
                       for r in [(i % 3, i, i // 2) for i in range(0, 20, 2)]
                       for s in [(i % 3, i, i // 2) for i in range(1, 20, 2)]
                       if r[0] == s[0] and abs(r[2] - s[2]) < 2)
        want = [row[:3] for row in timed]
        got = []
        while len(got) < len(want):
            cur.execute(f"FETCH {len(want) - len(got)} FROM qj WITH (timeout = '20s')")
            rows = cur.fetchall()
            if not rows:
                break
            got += rows
        assert sorted(got) == want and want
        # cq_joins shows the join's target and what it found
        seen = feed.execute("SELECT name, recall_target, recall_estimate, results, "
                            "late_left + late_right, adaptations > 0 FROM cq_joins "
                            "WHERE name = 'qj'").fetchall()
        assert seen == [("qj", 0.95, 1.0, len(want), 0, True)]     # in order: nothing lost
        # a tuple later than its stream's slack (none here) is late for every other query,
        # but the join reads arrivals: r at 13 s, then r at 11 s (late), then s at 12 s
        for stream, v, at in (("qj_r", 100, 13), ("qj_r", 101, 11), ("qj_s", 102, 12)):
            feed.execute(f"INSERT INTO {stream} VALUES (7, {v}, '2026-11-01 00:00:{at}')")
        cur.execute("FETCH 2 FROM qj WITH (timeout = '20s')")
        assert sorted(cur.fetchall()) == [(7, 100, 102), (7, 101, 102)]
        assert feed.execute("SELECT late FROM cq_streams WHERE stream = 'qj_r'").fetchone() \
            == (1,)
        # the derived stream's rows wait until no earlier one can come: time moves on
        for stream in ("qj_r", "qj_s"):
            feed.execute(f"INSERT INTO {stream} VALUES (8, 0, '2026-11-01 00:00:59')")
        held = timed + [(7, 101, 102, 12), (7, 100, 102, 13)]
        cur.execute(f"FETCH {len(held)} FROM near WITH (timeout = '20s')")
        rows = cur.fetchall()
        starts = [int(vf.timestamp()) % 60 for *_, vf in rows]
        assert starts == sorted(starts)                      # valid_from order
        assert sorted(row[:3] + (at,) for row, at in zip(rows, starts)) == sorted(held)
        # read at now, the window holds the one pair of 00:00:59's tuples
        assert feed.execute("SELECT n FROM qj_pairs").fetchall() == [(1,)]
