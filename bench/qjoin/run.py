"""Seed 003's experiment on the soccer streams: QJoin at recall targets 0.90, 0.95 and 0.99
(and at 0.95 with its rows held to valid_from order, as a derived stream runs it) beside
MP-K-slack and beside K-slack with the K that reaches QJoin's recall at 0.95, on the same
arrivals; one table of recall, latency and tuples buffered.

    python -m bench.qjoin.run [--seconds 90] [--delays pareto] [--delay-ms 300] [--json F]
    python -m bench.qjoin.plots F docs/img/qjoin.png      # needs the bench extra

Recall is over periods of ``--period`` (by valid_from), the last 10 s left out (the slack's
last tuples leave at the data's end); latency is on the data's arrival clock (logical) and
with each tick's processing time added (wall). See engines.py for how each is measured.
"""
from __future__ import annotations

import argparse
import json

from bench.qjoin import engines as E
from bench.qjoin import soccer

TARGETS = (0.90, 0.95, 0.99)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--delays", default="pareto")
    ap.add_argument("--delay-ms", type=float, default=300)
    ap.add_argument("--period", type=float, default=10, help="seconds")
    ap.add_argument("--tick-ms", type=float, default=E.TICK_US / 1000)
    ap.add_argument("--json", help="also write the table here, for plots.py")
    args = ap.parse_args(argv)
    cfg = soccer.Soccer(seconds=args.seconds, delays=args.delays, delay_ms=args.delay_ms)
    ball, players = soccer.generate(cfg)
    pairs = E.ideal(ball, players)
    period_us, tick_us = int(args.period * 1e6), int(args.tick_ms * 1000)
    until = soccer.START_US + int((args.seconds - 10) * 1e6)
    print(f"{cfg}: {ball.num_rows} ball and {players.num_rows} player tuples, "
          f"{len(pairs)} results in the ideal answer")
    runs = [E.run_qjoin(ball, players, t, period=f"{args.period} seconds", tick_us=tick_us)
            for t in TARGETS]
    runs.append(E.run_qjoin(ball, players, 0.95, period=f"{args.period} seconds",
                            tick_us=tick_us, in_order=True))
    runs.append(E.run_slack(ball, players, "adaptive", tick_us=tick_us))
    reached = E.summary(runs[1], pairs, period_us, until)["recall"]
    k = E.k_for_recall(ball, players, pairs, reached)
    runs.append(E.run_slack(ball, players, f"{k} microseconds", tick_us=tick_us,
                            name=f"K-slack K={k / 1000:.0f} ms"))
    summaries = [E.summary(o, pairs, period_us, until) for o in runs]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": f"{args.delays} delays, {args.seconds:g} s", "runs": [
                {**s, "periods": s["periods"].tolist()} for s in summaries]}, f, indent=1)
    header = (f"{'engine':<22}{'recall':>8}{'min':>8}{'latency ms':>12}{'p99 ms':>10}"
              f"{'wall ms':>10}{'buffered':>10}{'run s':>8}")
    print(header)
    for s in summaries:
        print(f"{s['engine']:<22}{s['recall']:>8.4f}{s['recall_min']:>8.3f}"
              f"{s['latency_ms']:>12.1f}{s['latency_p99_ms']:>10.1f}{s['wall_ms']:>10.1f}"
              f"{s['buffered']:>10.0f}{s['seconds']:>8.1f}")


if __name__ == "__main__":
    main()
