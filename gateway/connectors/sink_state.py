"""What a sink does with a continuous answer's rows, as pure code: the rows come in valid_from
order, an open row in pieces (cut at each BOUNDARY), and this says what to write. Rows are
tuples of their values' text (what the target is written with); times are µs.

``Appended`` (MODE 'append') writes each row once its interval is over, with that interval: a
piece continues a row of the same values that ends where it starts. ``Current`` (MODE
'upsert') keeps the rows valid now, one per key: a piece that starts a key's row, or changes
its values, is an upsert; a key whose row ended is deleted. Either knows a row has ended when
a later row of the answer arrives (rows leave in valid_from order), so the end of the last
rows of an answer that falls silent is written when the answer next moves.

Each carries its ``watermark``: every row (piece) that starts before it has been taken, so a
sink that resumes from it (the query primed to go on from there) skips what ends by it.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

NEVER = None        # a piece's end when the row holds until further notice


class KeyNotUnique(Exception):
    """An upsert sink's key names two rows valid at the same instant."""


@dataclass
class Changes:
    """What one batch of pieces asks the target for."""
    inserts: list = field(default_factory=list)    # append: (values, start, end)
    opened: dict = field(default_factory=dict)     # append: run id -> (values, start): open
    closed: list = field(default_factory=list)     # append: run ids no longer open
    upserts: dict = field(default_factory=dict)    # upsert: key -> values
    deletes: set = field(default_factory=set)      # upsert: keys

    def __bool__(self) -> bool:
        return bool(self.inserts or self.opened or self.closed or self.upserts or self.deletes)


class _Ends:
    """The open rows' ends, earliest first (a heap; entries made stale by a later end are
    skipped), so closing what ends before an instant costs what closes."""

    def __init__(self):
        self.heap: list = []
        self.seq = itertools.count()

    def push(self, end, item) -> None:
        if end is not NEVER:
            heapq.heappush(self.heap, (end, next(self.seq), item))

    def before(self, t: int):
        while self.heap and self.heap[0][0] < t:
            end, _, item = heapq.heappop(self.heap)
            yield end, item


@dataclass
class Appended:
    # values -> [run]; run: [start, end, resumed, id] (ids tell rows of equal values apart)
    open: dict = field(default_factory=dict)
    watermark: int | None = None
    ends: _Ends = field(default_factory=_Ends)
    next_id: int = 1

    def resume(self, watermark: int | None, open_rows: list) -> None:
        """After a restart: the rows open at ``watermark`` (values, start, id), held to there
        unless the answer, primed to go on from there, goes on with them."""
        self.watermark = watermark
        for values, start, run_id in open_rows:
            run = [start, watermark, True, run_id]
            self.open.setdefault(values, []).append(run)
            self.ends.push(watermark, (values, run))
            self.next_id = max(self.next_id, run_id + 1)

    def feed(self, pieces: list) -> Changes:
        out = Changes()
        for values, start, end in pieces:
            if self.watermark is not None and end is not NEVER and end <= self.watermark:
                continue                           # written before the restart
            self._close_before(start, out)
            runs = self.open.setdefault(values, [])
            # a piece goes on with a row of its values that ends where it starts, or, once
            # resumed, with any row open at the watermark it reaches across (rows of equal
            # values are the same rows at each instant, however they were joined up)
            run = next((r for r in runs if r[1] == start or (r[2] and start <= r[1])), None)
            if run is None:
                run = [start, end, False, self.next_id]
                self.next_id += 1
                runs.append(run)
                out.opened[run[3]] = (values, start)
            else:
                run[1], run[2] = end, False
            self.ends.push(end, (values, run))
            self.watermark = start if self.watermark is None else max(self.watermark, start)
        return out

    def _close_before(self, t: int, out: Changes) -> None:
        """Rows that end before ``t`` are over: no piece can continue them now."""
        for end, (values, run) in self.ends.before(t):
            runs = self.open.get(values)
            if runs is None or run[1] != end or not any(r is run for r in runs):
                continue                           # extended since, or closed already
            runs.remove(run)
            if not runs:
                del self.open[values]
            out.inserts.append((values, run[0], run[1]))
            if out.opened.pop(run[3], None) is None:      # (opened and closed at once)
                out.closed.append(run[3])


@dataclass
class Current:
    key_at: list                                   # the key's column positions
    rows: dict = field(default_factory=dict)       # key -> [values, end, resumed]
    watermark: int | None = None
    ends: _Ends = field(default_factory=_Ends)

    def resume(self, watermark: int | None, rows: list) -> None:
        """After a restart: the target's rows, held to ``watermark`` unless the answer goes on
        with them."""
        self.watermark = watermark
        for values in rows:
            k = self.key(values)
            self.rows[k] = [values, watermark, True]
            self.ends.push(watermark, k)

    def key(self, values: tuple) -> tuple:
        return tuple(values[i] for i in self.key_at)

    def feed(self, pieces: list) -> Changes:
        out = Changes()
        for values, start, end in pieces:
            if self.watermark is not None and end is not NEVER and end <= self.watermark:
                continue
            self._end_before(start, out)
            k = self.key(values)
            now = self.rows.get(k)
            if now is not None and not now[2] and (now[1] is NEVER or now[1] > start) \
                    and now[0] != values:
                raise KeyNotUnique(f"two rows with the key ({', '.join(map(str, k))}) "
                                   "hold at the same instant")
            if now is None or now[0] != values:
                out.upserts[k] = values
                out.deletes.discard(k)
            self.rows[k] = [values, end, False]
            self.ends.push(end, k)
            self.watermark = start if self.watermark is None else max(self.watermark, start)
        return out

    def _end_before(self, t: int, out: Changes) -> None:
        for end, k in self.ends.before(t):
            now = self.rows.get(k)
            if now is None or now[1] != end:
                continue
            del self.rows[k]
            out.upserts.pop(k, None)
            out.deletes.add(k)
