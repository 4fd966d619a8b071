"""Two out-of-order streams like DEBS 2013's soccer data, for seed 003's experiment: a ball
sensor (stream R) and player sensors (stream S), positions in mm as random walks on a pitch,
each tuple delayed by a draw from a named distribution. Written once as Parquet, with each
tuple's arrival time, so every engine reads the same tuples in the same order.

    python -m bench.qjoin.soccer OUT_DIR [--seconds 120] [--delays pareto] [--delay-ms 50]

The real DEBS 2013 data (Nuremberg stadium) are not here; the generator keeps the paper's
shape. Its defaults beside the paper's:

    ball rate        200 Hz           paper: 2,000 Hz
    players          8 at 50 Hz       paper: 16 players (two sensors each) at 200 Hz
    pitch            105 m x 68 m     the same
    query            distance <= 5 m over [RANGE 2 s] on both sides, as the paper's

Players walk towards the ball as well as at random, so some are near it most of the time and
the join is selective as in the paper (about 1 % of the pairs in the windows). The rates
are lower so that a run takes seconds; ``--ball-hz`` and ``--player-hz`` set them.

Delays (µs) are drawn per tuple: ``exponential`` (mean = scale), ``pareto`` (Lomax, shape 1.5:
a heavy tail, capped at 20 × scale), ``uniform`` (0 to 2 × scale), and ``shift``
(exponential, its mean three times larger from half way). A tuple arrives at ts + delay.
"""
from __future__ import annotations

import argparse
import dataclasses
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

START_US = 1_793_491_200_000_000        # 2026-11-01 00:00:00 UTC
PITCH_MM = (105_000, 68_000)
PULL = 0.05                             # players drift towards the ball (share of the gap a second)


@dataclasses.dataclass(frozen=True)
class Soccer:
    seconds: float = 120.0
    ball_hz: int = 200
    players: int = 8
    player_hz: int = 50
    delays: str = "pareto"
    delay_ms: float = 300.0
    seed: int = 1


def _walk(rng, n: int, hz: int, speed: float, start, pull=None, strength: float = 0.0):
    """Positions (n, 2) of a random walk at ``hz`` with steps of ``speed`` mm/s, kept on the
    pitch; ``pull``: positions it drifts towards (``strength`` of the gap per second)."""
    dt = 1 / hz
    pos = np.empty((n, 2))
    here = np.array(start, dtype=np.float64)
    steps = rng.normal(0, speed * np.sqrt(dt), (n, 2))
    for i in range(n):
        here += steps[i]
        if pull is not None:
            here += strength * dt * (pull[i] - here)
        here = np.clip(here, 0, PITCH_MM)
        pos[i] = here
    return pos


def _delays(rng, ts: np.ndarray, cfg: Soccer) -> np.ndarray:
    """A delay for each tuple of event times ``ts`` (the shift goes by time: the players'
    tuples come player by player)."""
    n, scale = len(ts), cfg.delay_ms * 1000
    kind = cfg.delays
    if kind == "exponential":
        d = rng.exponential(scale, n)
    elif kind == "pareto":
        d = np.minimum(rng.pareto(1.5, n) * scale, 20 * scale)
    elif kind == "uniform":
        d = rng.uniform(0, 2 * scale, n)
    elif kind == "shift":
        d = rng.exponential(scale, n)
        d[ts >= START_US + int(cfg.seconds * 500_000)] *= 3
    else:
        raise ValueError(f"unknown delay distribution {kind!r}")
    return d.astype(np.int64)


def generate(cfg: Soccer) -> tuple[pa.Table, pa.Table]:
    """(ball, players): sid, ts, x, y, arrival, each in arrival order."""
    rng = np.random.default_rng(cfg.seed)
    n_ball = int(cfg.seconds * cfg.ball_hz)
    ball_ts = START_US + (np.arange(n_ball) * 1_000_000 // cfg.ball_hz)
    ball = _walk(rng, n_ball, cfg.ball_hz, 8_000, (PITCH_MM[0] / 2, PITCH_MM[1] / 2))
    n_each = int(cfg.seconds * cfg.player_hz)
    ts_each = START_US + (np.arange(n_each) * 1_000_000 // cfg.player_hz)
    # the ball where each player sample is
    ball_there = ball[np.minimum(np.searchsorted(ball_ts, ts_each), n_ball - 1)]
    sids, stamps, xy = [], [], []
    for p in range(cfg.players):
        start = np.clip(ball[0] + rng.uniform(-20_000, 20_000, 2), 0, PITCH_MM)
        sids.append(np.full(n_each, 100 + p))
        stamps.append(ts_each + rng.integers(0, 1_000_000 // cfg.player_hz))
        xy.append(_walk(rng, n_each, cfg.player_hz, 3_000, start, ball_there, PULL))
    streams = []
    for sid, ts, pos in ((np.full(n_ball, 1), ball_ts, ball),
                         (np.concatenate(sids), np.concatenate(stamps), np.concatenate(xy))):
        arrival = ts + _delays(rng, ts, cfg)
        order = np.lexsort((ts, arrival))
        streams.append(pa.table({
            "sid": pa.array(sid[order], pa.int32()),
            "ts": pa.array(ts[order], pa.int64()).cast(pa.timestamp("us")),
            "x": pa.array(pos[order, 0].round(), pa.int64()),
            "y": pa.array(pos[order, 1].round(), pa.int64()),
            "arrival": pa.array(arrival[order], pa.int64()).cast(pa.timestamp("us"))}))
    return streams[0], streams[1]


def write(cfg: Soccer, out: str) -> tuple[str, str]:
    os.makedirs(out, exist_ok=True)
    paths = (os.path.join(out, "ball.parquet"), os.path.join(out, "players.parquet"))
    for table, path in zip(generate(cfg), paths):
        pq.write_table(table, path)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    for f in dataclasses.fields(Soccer):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    args = ap.parse_args(argv)
    cfg = Soccer(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Soccer)})
    for path in write(cfg, args.out):
        print(path, pq.read_metadata(path).num_rows, "rows")


if __name__ == "__main__":
    main()
