"""What the clearinghouse could not deliver, kept for the system views: malformed source lines
(``cq_ingest_errors``), tuples later than the slack allows (``cq_late_tuples``) and load shed
under ``ON OVERLOAD`` (``cq_shed``). Each list keeps its newest ``KEEP`` entries per stream;
the totals in ``cq_streams`` count everything."""
from __future__ import annotations

import datetime as dt
import json
import logging
from collections import deque

import numpy as np
import pyarrow as pa

from gateway.clock import SYSTEM, Clock

KEEP = 10_000          # entries kept per stream and list
LOG_EVERY = 10.0       # seconds between late-tuple log lines of one stream
log = logging.getLogger("cqgate")


def _timestamp(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(us))


class IngestLog:
    def __init__(self, clock: Clock = SYSTEM):
        self.clock = clock
        self.errors: dict = {}       # stream -> deque of error rows
        self.late: dict = {}         # stream -> deque of late-tuple rows
        self.shed: dict = {}         # stream -> {event-time second (µs): [policy, dropped, kept]}
        self._unlogged: dict = {}    # stream -> [late tuples not yet in the log, last line's time]

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock.now(), dt.timezone.utc)

    def _list(self, lists: dict, stream: str) -> deque:
        return lists.setdefault(stream.lower(), deque(maxlen=KEEP))

    def error(self, stream: str, origin: str, line: int, reason: str, text: str) -> None:
        self._list(self.errors, stream).append(
            (stream.lower(), origin, line, reason, text[:200], self._now()))

    def late_tuples(self, stream: str, origin: str, table: pa.Table, ts: np.ndarray,
                    watermarks: np.ndarray) -> None:
        """``table``: the late rows, ``ts`` their event times and ``watermarks`` the
        watermark each missed (µs)."""
        self._log_late(stream, origin, table.num_rows, int(watermarks[-1]))
        start = max(0, table.num_rows - KEEP)
        rows = table.slice(start).to_pylist()
        kept = self._list(self.late, stream)
        arrived = self._now()
        for row, t, w in zip(rows, ts[start:], watermarks[start:]):
            kept.append((stream.lower(), _timestamp(t), _timestamp(w), arrived, origin,
                         json.dumps(row, default=str)))

    def _log_late(self, stream: str, origin: str, n: int, watermark: int) -> None:
        """One log line per stream at most every LOG_EVERY seconds, counting every late tuple
        since the last line, so a source that is always late cannot flood the log."""
        pending = self._unlogged.setdefault(stream.lower(), [0, -LOG_EVERY])
        pending[0] += n
        now = self.clock.monotonic()
        if now - pending[1] >= LOG_EVERY:
            log.warning("stream %s: %d late tuple(s) not delivered (latest from %s, watermark %s); "
                        "see cq_late_tuples, or give the stream more slack", stream, pending[0],
                        origin, _timestamp(watermark))
            pending[:] = [0, now]

    def late_times(self, stream: str) -> np.ndarray:
        """The event times (µs) of the stream's late tuples still listed, sorted."""
        rows = self.late.get(stream.lower(), ())
        ts = np.array([r[1] for r in rows], dtype="datetime64[us]").astype(np.int64)
        return np.sort(ts)

    def shed_tuples(self, stream: str, policy: str, ts: np.ndarray, kept: np.ndarray) -> None:
        """Per event-time second: how many tuples ``policy`` dropped and how many it kept."""
        seconds = self.shed.setdefault(stream.lower(), {})
        sec = ts // 1_000_000 * 1_000_000
        for s, dropped, keep in zip(*_per_second(sec, kept)):
            entry = seconds.setdefault(int(s), [policy, 0, 0])
            entry[1] += int(dropped)
            entry[2] += int(keep)
        while len(seconds) > KEEP:
            seconds.pop(next(iter(seconds)))

    def forget(self, stream: str) -> None:
        for lists in (self.errors, self.late, self.shed):
            lists.pop(stream.lower(), None)

    # ------------------------------------------------------------------ the views
    def rows(self) -> dict:
        """The rows of ``cq_ingest_errors``, ``cq_late_tuples`` and ``cq_shed``, in the
        columns the catalog declares them with (``gateway/tables/pg_catalog.py``)."""
        return {
            "cq_ingest_errors": [r for d in self.errors.values() for r in d],
            "cq_late_tuples": [r for d in self.late.values() for r in d],
            "cq_shed": [(stream, _timestamp(s), p, d, k) for stream, seconds in self.shed.items()
                        for s, (p, d, k) in seconds.items()],
        }


def _per_second(sec: np.ndarray, kept: np.ndarray):
    keys, inverse = np.unique(sec, return_inverse=True)
    total = np.bincount(inverse, minlength=len(keys))
    keep = np.bincount(inverse, weights=kept.astype(np.int64), minlength=len(keys))
    return keys, total - keep, keep
