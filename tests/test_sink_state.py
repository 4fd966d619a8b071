"""What a sink writes (gateway/connectors/sink_state.py) against brute force: random answers
(rows with intervals) cut into pieces at random instants, as BOUNDARY heartbeats cut open rows,
and delivered in valid_from order: an append sink writes each row once with its whole interval;
an upsert sink's table equals the rows valid at its watermark; and a sink stopped at a random
batch and resumed from what it committed (the query primed to go on from its watermark, its
pieces cut elsewhere) writes the same, nothing twice."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.connectors.sink_state import NEVER, Appended, Current, KeyNotUnique


def _answer(rng: random.Random, keyed: bool) -> list:
    """Rows (values, start, end), each key's rows (keyed) not overlapping; values repeat."""
    rows, t = [], {}
    for _ in range(rng.randrange(1, 40)):
        k = rng.randrange(6)
        start = t.get(k, 0) + rng.randrange(0 if keyed else 0, 5)
        end = start + rng.randrange(1, 12) if rng.random() < 0.9 else NEVER
        rows.append(((str(k), str(rng.randrange(3))), start, end))
        if keyed:
            if end is NEVER:
                t[k] = 10 ** 9
            else:
                t[k] = end
    if keyed:
        rows = [r for r in rows if r[1] < 10 ** 9]
    return rows


def _order(r):
    return (r[1], -1 if r[2] is NEVER else r[2], r[0])


def _pieces(rows: list, cuts: list, since: int | None = None) -> list:
    """The rows as the back end sends them: cut at every instant in ``cuts`` they span, in
    valid_from order; ``since``: a query primed to go on from there (rows that end by it do
    not go out, the others whole)."""
    out = []
    for values, start, end in rows:
        if since is not None and end is not NEVER and end <= since:
            continue
        points = [c for c in cuts if start < c and (end is NEVER or c < end)]
        bounds = [start] + points + [end]
        out += [(values, a, b) for a, b in zip(bounds, bounds[1:])]
    return sorted(out, key=_order)


def _batches(rng: random.Random, pieces: list) -> list:
    out, i = [], 0
    while i < len(pieces):
        n = rng.randrange(1, 6)
        out.append(pieces[i:i + n])
        i += n
    return out


def _last_start(rows: list) -> int:
    return max(s for _, s, _ in rows)


@pytest.mark.parametrize("seed", range(300))
def test_append_writes_each_row_once_whole_across_a_restart(seed):
    rng = random.Random(seed)
    rows = _answer(rng, keyed=False)
    cuts = sorted(rng.sample(range(60), 8))
    batches = _batches(rng, _pieces(rows, cuts))
    stop = rng.randrange(len(batches) + 1)
    state, written, open_rows, watermark = Appended(), [], {}, None
    for batch in batches[:stop]:              # committed batch by batch, then a crash
        changes = state.feed(batch)
        written += changes.inserts
        for run_id in changes.closed:
            del open_rows[run_id]
        open_rows.update(changes.opened)
        watermark = state.watermark
    resumed = Appended()
    resumed.resume(watermark, [(v, s, run_id) for run_id, (v, s) in open_rows.items()])
    again = sorted(rng.sample(range(60), 5))   # the replay's heartbeats fall elsewhere
    for batch in _batches(rng, _pieces(rows, again, since=watermark)):
        written += resumed.feed(batch).inserts
    # what was written, and what is still open, hold at every instant the rows the answer
    # holds then: nothing missing, nothing twice (rows of equal values may be joined up
    # differently: at each instant they are the same rows)
    still_open = [(v, run[0], run[1]) for v, runs in resumed.open.items() for run in runs]
    assert all(e is not NEVER for _, _, e in written)
    for t in range(_last_start(rows)):
        assert _at(written + still_open, t) == _at(rows, t), f"at {t}"
    # and a row written is whole: no written row meets another of the same values
    ends = {(v, e) for v, _, e in written}
    assert not [r for r in written if (r[0], r[1]) in ends]


def _at(rows: list, t: int) -> Counter:
    return Counter(v for v, s, e in rows if s <= t and (e is NEVER or t < e))


@pytest.mark.parametrize("seed", range(300))
def test_upsert_holds_the_rows_valid_at_its_watermark_across_a_restart(seed):
    rng = random.Random(seed)
    rows = _answer(rng, keyed=True)
    cuts = sorted(rng.sample(range(80), 8))
    batches = _batches(rng, _pieces(rows, cuts))
    stop = rng.randrange(len(batches) + 1)
    state, table = Current([0]), {}

    def apply(changes):
        for k in changes.deletes:
            table.pop(k, None)
        table.update(changes.upserts)
    for batch in batches[:stop]:
        apply(state.feed(batch))
    watermark = state.watermark
    resumed = Current([0])
    resumed.resume(watermark, list(table.values()))
    for batch in _batches(rng, _pieces(rows, sorted(rng.sample(range(80), 5)),
                                       since=watermark)):
        apply(resumed.feed(batch))
    w = resumed.watermark
    # rows that end at the watermark may still go on: only those that do not are known
    expect = {(v[0],): v for v, s, e in rows if s <= w and (e is NEVER or e > w)}
    ended_at_w = {(v[0],) for v, s, e in rows if e == w}
    assert {k: v for k, v in table.items() if k not in ended_at_w} == \
        {k: v for k, v in expect.items() if k not in ended_at_w}


def test_an_upsert_key_that_names_two_rows_at_once_is_an_error():
    state = Current([0])
    state.feed([(("a", "1"), 0, 10)])
    with pytest.raises(KeyNotUnique):
        state.feed([(("a", "2"), 5, 12)])
