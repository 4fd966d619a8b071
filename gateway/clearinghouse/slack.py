"""A stream's ordering state and its slack policy, as pure code over Arrow tables and numpy arrays
of event times (µs): which tuples of a batch are late, which are held for the slack, which a
bound releases in event-time order. The time of arrival is an argument; nothing here waits."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dialect.intervals import interval_us
from executor import wire

NO_TIME = np.iinfo(np.int64).min
DEFAULT_HEARTBEAT = 1_000_000     # µs: a stream splits open intervals at most once a second
# a stream whose newest tuple is this close to the wall clock (plus its slack) follows it
FOLLOWS_WALL_US = 60_000_000


@dataclass
class StreamProgress:
    """A stream's state in the clearinghouse: its ordering (watermark, slack, held tuples), the
    options heartbeats and shedding read, and the counters ``cq_streams`` shows."""
    watermark: int | None = None      # µs: no tuple earlier than this will be delivered
    boundary: int | None = None       # µs: the last BOUNDARY sent to the back end
    current: int | None = None        # µs: the newest event time seen (t_curr)
    slack: int = 0                    # µs: K
    adaptive: bool = False
    heartbeat: int = DEFAULT_HEARTBEAT    # µs: the splitting period and the quiet time
    wall_clock: bool = True           # heartbeat 'none' turns the wall-clock advance off
    follows_wall: bool = False        # its newest tuple was close to the wall clock
    last_arrival: float = 0.0         # monotonic clock (s) of the last tuple
    quiet_moves: int = 0              # wall-clock moves since then, one a heartbeat period
    boundary_s: float | None = None   # monotonic clock (s) of the last BOUNDARY
    held: pa.Table | None = None      # tuples waiting for the slack, in arrival order
    held_ts: np.ndarray | None = None  # their event times, µs
    ts_column: str = ""
    late: int = 0
    bad: int = 0                      # source lines that could not be read
    dropped: int = 0                  # tuples shed under ON OVERLOAD
    delivered: int = 0
    overload: str = "BLOCK"
    sample: float = 0.1               # the share KEEP SAMPLE keeps
    proctime: int = 0                 # µs: the last arrival-time stamp or BOUNDARY sent
    proctime_beat: float = 0.0        # monotonic clock (s) of the last arrival-time BOUNDARY

    def configure(self, options: dict) -> None:
        """The stream's options. Slack: ``none`` (the default) delivers at once and treats
        anything earlier than the newest tuple as late; ``'5 seconds'`` is K-slack (a tuple
        waits until a tuple K newer has arrived); ``adaptive`` is MP-K-slack (seed 003: K
        starts at 0 and grows to the largest delay seen, D(x) = t_curr − x.ts)."""
        slack = str(options.get("slack", "none")).lower()
        self.adaptive = slack == "adaptive"
        if not self.adaptive:
            self.slack = 0 if slack == "none" else interval_us(slack)
        hb = str(options.get("heartbeat") or "").lower()
        self.wall_clock = hb != "none"
        self.heartbeat = interval_us(hb) if hb not in ("", "none") else DEFAULT_HEARTBEAT
        self.overload = options.get("overload", "BLOCK")
        self.sample = float(options.get("sample", 0.1))


@dataclass(frozen=True)
class Late:
    """The tuples of a batch that missed their watermark, for ``cq_late_tuples``."""
    table: pa.Table
    ts: np.ndarray               # their event times, µs
    watermarks: np.ndarray       # the watermark each one missed, µs


def micros(col) -> np.ndarray:
    """An event-time column as µs, in numpy."""
    return wire.micros(col).to_numpy(zero_copy_only=False)


def watermarks(p: StreamProgress, ts: np.ndarray, one_by_one: bool):
    """The watermark each tuple meets on arrival (a tuple earlier than its watermark is
    late); sets ``p.slack`` to K after them (MP-K-slack: K grows to the largest delay seen,
    late tuples' too, D(x) = t_curr − x.ts)."""
    seen = np.maximum.accumulate(ts)               # t_curr after each tuple
    if p.current is not None:
        seen = np.maximum(seen, p.current)
    k = np.maximum.accumulate(np.maximum(seen - ts, p.slack)) if p.adaptive else \
        np.full(len(ts), p.slack)
    p.slack = int(k[-1])
    start = NO_TIME if p.watermark is None else p.watermark
    if not one_by_one:
        return start
    bound = seen - k                               # the release bound after each tuple
    before = np.concatenate([[start], bound[:-1]])
    return np.maximum.accumulate(np.maximum(before, start))


def judge(p: StreamProgress, table: pa.Table, ts: np.ndarray,
          one_by_one: bool) -> tuple[pa.Table, np.ndarray, Late | None]:
    """A batch in arrival order → (the tuples on time, their event times, the late ones or
    None); counts the late ones in ``p.late`` and grows an adaptive K. Each tuple is judged
    against the watermark as it stood when it arrived: ``one_by_one`` (a source's lines, COPY
    rows) each after those before it, else together (an INSERT's rows)."""
    floor = max((x for x in (p.current, p.watermark) if x is not None), default=None)
    if len(ts) and (floor is None or ts[0] >= floor) and \
            (len(ts) < 2 or (ts[1:] >= ts[:-1]).all()):
        # in order and none earlier than what came before: nothing is late and no delay
        # grows the slack, whatever the policy (the common case, made cheap)
        return table, ts, None
    watermark = watermarks(p, ts, one_by_one)
    keep = ts >= watermark
    missed = ~keep
    n = int(missed.sum())
    if not n:
        return table, ts, None
    p.late += n
    late = Late(table.filter(pa.array(missed)), ts[missed],
                np.broadcast_to(watermark, ts.shape)[missed])
    return table.filter(pa.array(keep)), ts[keep], late


def hold(p: StreamProgress, table: pa.Table, ts: np.ndarray, now_s: float,
         wall_s: float) -> None:
    """Tuples on time join the ones waiting for the slack; ``now_s`` (monotonic) is when they
    arrived, from which a stream's idle time is measured, and ``wall_s`` (seconds since the
    epoch) tells whether the stream's event time follows the wall clock."""
    if not len(ts):
        return
    p.current = int(max(ts.max(), p.current if p.current is not None else ts.max()))
    p.last_arrival, p.quiet_moves = now_s, 0
    p.follows_wall = abs(int(wall_s * 1_000_000) - p.current) <= FOLLOWS_WALL_US + p.slack
    p.held = table if p.held is None else pa.concat_tables(
        [p.held, table], promote_options="default")
    p.held_ts = ts if p.held_ts is None else np.concatenate([p.held_ts, ts])


def slack_bound(p: StreamProgress) -> int | None:
    """What the slack releases now: every tuple K or more older than the newest."""
    return p.current - p.slack if p.current is not None else None


def release(p: StreamProgress, bound: int) -> pa.Table | None:
    """The held tuples earlier than or at ``bound``, in event-time order (None: none); later
    tuples than ``bound`` stay, earlier ones will be late from now on."""
    out = None
    if p.held is not None and p.held.num_rows:
        held, ts = p.held, p.held_ts
        if len(ts) > 1 and not (ts[1:] >= ts[:-1]).all():      # sort only when out of order
            order = np.argsort(ts, kind="stable")
            held, ts = held.take(pa.array(order)), ts[order]
        k = int(np.searchsorted(ts, bound, side="right"))
        out, rest = held.slice(0, k), held.slice(k)
        p.held, p.held_ts = (rest, ts[k:]) if rest.num_rows else (None, None)
    p.watermark = bound if p.watermark is None else max(p.watermark, bound)
    if out is None or not out.num_rows:
        return None
    p.delivered += out.num_rows
    return out


def moved(p: StreamProgress) -> bool:
    """Whether the watermark has moved past the last BOUNDARY sent."""
    return p.watermark is not None and (p.boundary is None or p.watermark > p.boundary)


def boundary_due(p: StreamProgress, now_s: float, *, at_once: bool = False) -> int | None:
    """The BOUNDARY to send at ``now_s`` (monotonic): at the watermark, when it has moved past
    the last one and a heartbeat period has passed since that was sent (``at_once``: for
    punctuation and a quiet stream's wall-clock move, whenever it was); None otherwise.
    Sending it is recorded, so the watermarks data give split open intervals at most once
    a period."""
    if not moved(p):
        return None
    if not at_once and p.boundary_s is not None and \
            (now_s - p.boundary_s) * 1_000_000 < p.heartbeat:
        return None
    p.boundary, p.boundary_s = p.watermark, now_s
    return p.watermark
