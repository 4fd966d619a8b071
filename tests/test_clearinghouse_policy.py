"""The clearinghouse's policies with a fake clock and no server: K-slack and MP-K-slack ordering,
late tuples, heartbeats for idle streams, ON OVERLOAD shedding, and a continuous query's result
queue waiting out FETCH timeouts and statement_timeout."""
from __future__ import annotations

import asyncio

import numpy as np
import pyarrow as pa
import pytest

from gateway.clearinghouse import heartbeats, shedding, slack
from gateway.clearinghouse.ingest import Ingest
from gateway.clearinghouse.slack import StreamProgress, micros
from gateway.link.live_rows import LiveRows
from gateway.pgwire.errors import QueryCanceled
from fake_clock import FakeClock

S = 1_000_000            # µs in a second


class FakeLink:
    """What the back end would be sent: data batches (event times, in order) and BOUNDARYs."""

    def __init__(self):
        self.sent: list = []          # (stream, [event time µs], waited)
        self.boundaries: list = []    # (stream, µs)
        self.busy = False

    def behind(self) -> bool:
        return self.busy

    def reads_arrivals(self, stream) -> bool:
        return False

    def reads_by_arrival_time(self, stream) -> bool:
        return False

    def read_by_arrival_time(self) -> set:
        return set()

    async def send_data(self, name, table, current, wait):
        self.sent.append((name, micros(table.column("ts").combine_chunks()).tolist(), wait))

    async def watermark(self, name, ts, wait=True):
        self.boundaries.append((name, ts))

    def delivered(self) -> list:
        return [t for _, ts, _ in self.sent for t in ts]


def _rows(*seconds) -> pa.Table:
    us = [int(s * S) for s in seconds]
    return pa.table({"ts": pa.array(us, pa.timestamp("us")), "v": pa.array(range(len(us)))})


async def _settle() -> None:
    """Let every task that can run, run."""
    for _ in range(20):
        await asyncio.sleep(0)


def _driver(clock=None) -> tuple[Ingest, FakeLink]:
    link = FakeLink()
    return Ingest(link, clock=clock or FakeClock()), link


# ------------------------------------------------------------------ slack
def test_k_slack_releases_a_tuple_only_once_one_k_newer_arrived():
    async def run():
        ingest, link = _driver()
        options = {"slack": "5 seconds"}
        released = []
        for t in (10, 12, 11, 14.999999, 15, 17):
            await ingest.push("s", "ts", _rows(t), options, one_by_one=True)
            released.append(link.delivered())
        return released
    released = asyncio.run(run())
    assert released[:4] == [[], [], [], []]           # nothing K newer than 10 yet
    assert released[4] == [10 * S]                    # 15 is exactly K newer than 10
    assert released[5] == [10 * S, 11 * S, 12 * S]    # 11 came after 12: released in order


def test_mp_k_slack_grows_k_to_the_largest_delay_seen():
    # seed 003: K starts at 0; t_curr is the newest time seen; K = max(K, t_curr − x.ts);
    # x is released once x.ts + K ≤ t_curr
    async def run():
        ingest, link = _driver()
        p = ingest.progress("s")
        steps = []
        for t in (10, 12, 9, 14, 13, 17, 15, 10, 25, 19):
            _, late = await ingest.push("s", "ts", _rows(t), {"slack": "adaptive"},
                                        one_by_one=True)
            steps.append((t, p.slack // S, late, list(link.delivered())))
        return steps
    steps = asyncio.run(run())
    k = [s[1] for s in steps]
    assert k == [0, 0, 3, 3, 3, 3, 3, 7, 7, 7]       # grows to each new largest delay, never back
    late = [s[0] for s in steps if s[2]]
    assert late == [9, 10]      # each was later than the K of its arrival, though it grew K
    assert steps[4][3] == [10 * S, 12 * S]           # 13 and 14 wait for 17 (K = 3)
    assert steps[5][3] == [10 * S, 12 * S, 13 * S, 14 * S]
    assert steps[8][3][-2:] == [15 * S, 17 * S]       # with K = 7, 25 releases up to 18
    assert steps[9][2] == 0                           # 19 is 6 late: within K = 7 now


def test_a_tuple_later_than_the_slack_is_counted_late_and_never_delivered():
    async def run():
        ingest, link = _driver()
        options = {"slack": "2 seconds"}
        await ingest.push("s", "ts", _rows(10), options, one_by_one=True)
        await ingest.push("s", "ts", _rows(13), options, one_by_one=True)   # releases 10
        answer = await ingest.push("s", "ts", _rows(9), options, one_by_one=True)
        await ingest.advance("s", 100 * S)
        return ingest, link, answer
    ingest, link, answer = asyncio.run(run())
    assert answer == (0, 1)
    assert ingest.progress("s").late == 1
    assert link.delivered() == [10 * S, 13 * S]
    (row,) = ingest.log.late["s"]
    assert (row[1].second, row[2].second) == (9, 11)  # its event time and the watermark (13 − 2)


def test_rows_arriving_one_by_one_are_each_judged_against_those_before():
    p = StreamProgress()
    ts = np.array([10, 20, 15]) * S
    assert slack.watermarks(p, ts, one_by_one=False) == slack.NO_TIME   # one INSERT: together
    assert (slack.watermarks(p, ts, one_by_one=True) == np.array([slack.NO_TIME, 10 * S,
                                                                  20 * S])).all()
    table, kept, late = slack.judge(p, _rows(10, 20, 15), ts, one_by_one=True)
    assert kept.tolist() == [10 * S, 20 * S] and late.ts.tolist() == [15 * S]
    assert p.late == 1


def test_release_sorts_held_tuples_and_moves_the_watermark():
    p = StreamProgress()
    slack.hold(p, _rows(30, 10, 20), np.array([30, 10, 20]) * S, now_s=5.0, wall_s=0.0)
    assert p.last_arrival == 5.0 and p.current == 30 * S
    out = slack.release(p, 20 * S)
    assert micros(out.column("ts").combine_chunks()).tolist() == [10 * S, 20 * S]
    assert p.held_ts.tolist() == [30 * S] and p.watermark == 20 * S and p.delivered == 2
    assert slack.release(p, 15 * S) is None and p.watermark == 20 * S   # never moves back


# ------------------------------------------------------------------ heartbeats
def test_a_quiet_stream_follows_the_wall_clock_only_when_its_event_time_does():
    wall = 1_700_000_000.0
    live, replay, off = StreamProgress(), StreamProgress(), StreamProgress()
    off.configure({"heartbeat": "none"})
    for p, seconds in ((live, wall - 0.2), (replay, wall - 86_400 * 365), (off, wall)):
        slack.hold(p, _rows(seconds), np.array([int(seconds * S)]), now_s=50.0, wall_s=wall)
    assert (live.follows_wall, replay.follows_wall, off.follows_wall) == (True, False, True)
    streams = {"live": live, "replay": replay, "off": off}
    assert list(heartbeats.quiet(streams, 50.999)) == []          # not quiet a period yet
    ((name, state, idle),) = heartbeats.quiet(streams, 51.25)
    assert (name, state, idle) == ("live", live, 1_250_000)
    # the source's lag (0.2 s behind the wall clock) is kept
    assert heartbeats.wall_bound(live, idle) == int((wall - 0.2) * S) + 1_250_000
    assert list(heartbeats.quiet({"e": StreamProgress()}, 1e9)) == []   # no tuple yet


def test_a_boundary_goes_at_the_watermark_at_most_once_a_period():
    p = StreamProgress(watermark=10 * S)
    assert slack.boundary_due(p, 100.0) == 10 * S                   # the first at once
    assert slack.boundary_due(p, 100.1) is None                     # nothing moved
    p.watermark = 12 * S
    assert slack.boundary_due(p, 100.9) is None                     # within the period
    assert slack.boundary_due(p, 101.0) == 12 * S and p.boundary == 12 * S
    p.configure({"heartbeat": "250ms"})
    p.watermark = 13 * S
    assert slack.boundary_due(p, 101.2) is None and slack.boundary_due(p, 101.25) == 13 * S


def test_data_splits_at_its_watermark_and_a_live_stream_moves_on_when_quiet():
    async def run():
        clock = FakeClock(40.0)                       # idle time counts from the push
        ingest, link = _driver(clock)
        now = clock.now()
        options = {"slack": "5 seconds"}
        await ingest.push("s", "ts", _rows(now - 6, now), options, one_by_one=True)
        seen = [(list(link.boundaries), link.delivered())]
        for step in (0.5, 0.25, 0.5):                 # at 0.5 s, 0.75 s, 1.25 s of quiet
            clock.advance(step)
            await ingest.tick()
            seen.append((list(link.boundaries), link.delivered()))
        return now, seen
    now, seen = asyncio.run(run())
    first = int((now - 6) * S)
    # the data's own watermark (newest − slack) splits at once
    assert seen[0] == ([("s", int((now - 5) * S))], [first])
    assert seen[1] == seen[0] and seen[2] == seen[0]
    # quiet for a period: the watermark moves on with the wall clock, releasing what the
    # slack held and splitting there
    assert seen[3] == ([("s", int((now - 5) * S)), ("s", int(now * S) + 1_250_000)],
                       [first, int(now * S)])


def test_a_replay_of_history_is_never_moved_by_the_wall_clock():
    async def run():
        clock = FakeClock(40.0)
        ingest, link = _driver(clock)
        await ingest.push("s", "ts", _rows(100, 101), {}, one_by_one=True)
        for _ in range(5):
            clock.advance(1.0)
            await ingest.tick()
        await ingest.push("s", "ts", _rows(102), {}, one_by_one=True)   # in order: not late
        clock.advance(1.0)
        await ingest.tick()
        return link.boundaries, ingest.progress("s").late
    boundaries, late = asyncio.run(run())
    assert boundaries == [("s", 101 * S), ("s", 102 * S)] and late == 0


# ------------------------------------------------------------------ ON OVERLOAD
def test_each_overload_policy_decides_what_a_batch_keeps():
    assert shedding.blocks("BLOCK") and shedding.kept("BLOCK", 3, 0, 0.1).all()
    for policy in ("DROP", "KEEP COUNTS", "KEEP SAMPLE"):
        assert not shedding.blocks(policy)
    assert not shedding.kept("DROP", 3, 0, 0.1).any() and not shedding.counted("DROP")
    assert not shedding.kept("KEEP COUNTS", 3, 0, 0.1).any() and shedding.counted("KEEP COUNTS")
    # every fourth tuple, counted across batches: the second batch goes on from the first
    assert shedding.kept("KEEP SAMPLE", 3, 0, 0.25).tolist() == [False] * 3
    assert shedding.kept("KEEP SAMPLE", 5, 3, 0.25).tolist() == [True, False, False, False, True]
    assert shedding.counted("KEEP SAMPLE")


@pytest.mark.parametrize("policy, delivered, dropped, listed", [
    ("BLOCK", 8, 0, False),
    ("DROP", 0, 8, False),
    ("KEEP COUNTS", 0, 8, True),
    ("KEEP SAMPLE", 2, 6, True),
])
def test_a_busy_back_end_makes_the_stream_shed(policy, delivered, dropped, listed):
    async def run():
        ingest, link = _driver()
        link.busy = True
        await ingest.push("s", "ts", _rows(*range(8)), {"overload": policy, "sample": 0.25})
        return ingest, link
    ingest, link = asyncio.run(run())
    assert len(link.delivered()) == delivered
    assert ingest.progress("s").dropped == dropped
    assert ("s" in ingest.log.shed) == listed
    assert all(wait == (policy == "BLOCK") for _, _, wait in link.sent)


def test_a_back_end_keeping_up_sheds_nothing():
    async def run():
        ingest, link = _driver()
        await ingest.push("s", "ts", _rows(1, 2, 3), {"overload": "DROP"})
        return ingest, link
    ingest, link = asyncio.run(run())
    assert len(link.delivered()) == 3 and ingest.progress("s").dropped == 0


# ------------------------------------------------------------------ the result queue
def _live(clock) -> LiveRows:
    return LiveRows([], pa.schema([("x", pa.int64())]), 1, "", 0, "c", None, clock=clock)


def test_fetch_with_a_timeout_returns_what_came_when_the_clock_passes_it():
    async def run():
        clock = FakeClock(10.0)
        live = _live(clock)
        waiting = asyncio.create_task(live.take(5, 2.0, asyncio.Event()))
        await _settle()                           # waiting from 10.0 s: until 12.0 s
        live.put(pa.table({"x": [1, 2]}))
        states = []
        for step in (1.0, 0.999, 0.002):
            clock.advance(step)
            await _settle()
            states.append(waiting.done())
        got = await asyncio.wait_for(waiting, 5)
        return states, got, live
    states, got, live = asyncio.run(run())
    assert states == [False, False, True]         # 5 rows wanted, 2 came: the timeout ends it
    assert got.column("x").to_pylist() == [1, 2] and live.n_pending == 0


def test_statement_timeout_ends_the_wait_with_57014():
    async def run():
        clock = FakeClock(10.0)
        live = _live(clock)
        waiting = asyncio.create_task(live.take(None, 5.0, asyncio.Event(),
                                                statement_deadline=clock.monotonic() + 1.0))
        await _settle()
        clock.advance(0.5)
        await _settle()
        early = waiting.done()
        clock.advance(0.75)
        await _settle()
        with pytest.raises(QueryCanceled) as e:
            await asyncio.wait_for(waiting, 5)
        return early, e.value
    early, error = asyncio.run(run())
    assert not early
    assert error.sqlstate == "57014" and "statement timeout" in str(error)


def test_the_started_time_is_the_clocks():
    assert _live(FakeClock(3.0)).started == 1_700_000_003.0
