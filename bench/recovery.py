"""Recovery time of a continuous cursor when the back end is killed, against its window and its
stream's rate: a keyed aggregate over an archived stream, [RANGE w] GROUP BY k, filled with
w + 10 seconds of event time at the given rate, is read by a cursor; the back end is killed
(SIGKILL) and two tuples of a new key are inserted at once. The recovery time is from the kill
until the cursor gives the new key's row: the new back end has started, the query has been
started again from its last watermark and has caught up with live data. Without checkpoints
it reads the archive as far back as its window reaches (its state is rebuilt from w seconds
of tuples); with ``--checkpoint-interval`` N (the server's setting) it starts from the
checkpoint the back end saved at the watermark the fill ended with and reads nothing before
it. The size of that checkpoint on disk is reported too.

    python bench/recovery.py [--windows 10,60,300] [--rates 1000,10000] [--keys 100]
                             [--checkpoints off,1]

What checkpoints cost: with ``--throughput SECONDS``, the same cursor reads each rate for that
many seconds of wall time (event time keeps pace, ten COPYs a second), with no crash: the back
end's and the gateway's CPU per tuple, the checkpoints written and the cursor's lag after the
last COPY, for each checkpoint interval in the same run. (At full speed the back end is
behind, and the clearinghouse holds BOUNDARYs back until it catches up, so no checkpoint
would be taken: a checkpoint stands at a BOUNDARY.)

    python bench/recovery.py --throughput 30 --windows 10,60 --rates 20000
                             [--checkpoints off,1,0.2]

Prints one JSON record per run and a table; asserts nothing (benchmarks are not tests).
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import re
import signal
import sys
import tempfile
import threading
import time

import numpy as np
import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
from conftest import ServerProcess  # noqa: E402
from executor import checkpoints  # noqa: E402

T0 = dt.datetime(2026, 1, 1)           # far from the wall clock: only data moves time
NEW_KEY = 1_000_000


def _csv(rate: int, keys: int, first_s: int, seconds: int, seed: int) -> bytes:
    """``seconds`` of event time at ``rate`` tuples a second, as COPY's text lines."""
    rnd = np.random.default_rng(seed)
    n = rate * seconds
    us = first_s * 1_000_000 + np.sort(rnd.integers(0, seconds * 1_000_000, n))
    ks = rnd.integers(0, keys, n)
    vs = rnd.integers(0, 1000, n)
    base = np.datetime64(T0, "us")
    out = io.StringIO()
    for k, v, t in zip(ks.tolist(), vs.tolist(), (base + us.astype("timedelta64[us]"))
                       .astype(str).tolist()):
        out.write(f"{k}\t{v}\t{t.replace('T', ' ')}\n")
    return out.getvalue().encode()


def _backend_pid(srv: ServerProcess) -> int:
    pids = [int(m.group(1)) for line in list(srv.lines)
            if (m := re.search(r"back end started \(pid (\d+)\)", line))]
    return pids[-1]


class Drain:
    """The cursor, read by a thread; ``seen`` is set when the new key's row comes."""

    def __init__(self, dsn: str, sql: str):
        self.conn = psycopg.connect(dsn)
        self.conn.execute(f"DECLARE c CURSOR FOR {sql}")
        self.seen = threading.Event()
        self.rows = 0
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.seen.is_set():
                got = self.conn.execute("FETCH ALL FROM c WITH (timeout = '0.2s')").fetchall()
                self.rows += len(got)
                if any(r[0] == NEW_KEY for r in got):
                    self.seen.set()
        except psycopg.Error as e:
            self.error = e
            self.seen.set()


def _caught_up(admin, end: dt.datetime) -> int:
    """Wait until the cursor's answer has passed ``end``; the rows its state holds then. (A
    back end still working through the fill answers cq_queries late: asked again.)"""
    while True:
        try:
            got = admin.execute("SELECT progress, state_size FROM cq_queries "
                                "WHERE name = 'c'").fetchone()
        except psycopg.errors.InsufficientResources:
            continue
        if got and got[0] is not None and got[0] >= end:
            return got[1]
        time.sleep(0.05)


def _checkpoint_at(folder: str, end_us: int, timeout: float = 600) -> int:
    """Wait for the cursor's checkpoint at ``end_us`` (the fill's last watermark); its bytes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for q in os.listdir(folder) if os.path.isdir(folder) else ():
            saved = checkpoints.latest(os.path.join(folder, q))
            if saved is not None and max(checkpoints.positions(saved).values()) >= end_us:
                return sum(os.path.getsize(os.path.join(saved, f)) for f in os.listdir(saved))
        time.sleep(0.05)
    raise RuntimeError("no checkpoint at the end of the fill")


def run(window_s: int, rate: int, keys: int, interval: float | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        srv = ServerProcess(data, *(("--checkpoint-interval", str(interval))
                                    if interval else ()))
        saved_bytes = None
        try:
            with psycopg.connect(srv.dsn, autocommit=True) as admin:
                admin.execute("CREATE STREAM m (k INT, v DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
                              "TYPE ARCHIVED")
                drain = Drain(srv.dsn, f"SELECT k, COUNT(*) AS n, SUM(v) AS s FROM m "
                                       f"[RANGE '{window_s} seconds'] GROUP BY k")
                span = window_s + 10
                filled = time.perf_counter()
                for first in range(0, span, 10):            # 10 s of event time a COPY
                    with admin.cursor().copy("COPY m FROM STDIN") as cp:
                        cp.write(_csv(rate, keys, first, min(10, span - first), first))
                end = T0 + dt.timedelta(seconds=span)
                if interval:            # the watermark at the end is due a checkpoint
                    _caught_up(admin, end - dt.timedelta(seconds=min(10, span)))
                    time.sleep(interval)
                admin.execute(f"ALTER STREAM m ADVANCE TO '{end}'")
                filled = time.perf_counter() - filled
                state = _caught_up(admin, end)
                if interval:
                    end_us = int((end - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
                    saved_bytes = _checkpoint_at(os.path.join(data, "checkpoints"), end_us)
                backend = _backend_pid(srv)
                killed = time.perf_counter()
                os.kill(backend, signal.SIGKILL)
                for s in (1, 2):                            # a key only live data has
                    admin.execute("INSERT INTO m VALUES (%s, 1, %s)",
                                  (NEW_KEY, end + dt.timedelta(seconds=s)))
                if not drain.seen.wait(600) or drain.error is not None:
                    raise RuntimeError(f"no row of the new key: {drain.error!r}")
                recovered = time.perf_counter() - killed
                recoveries = admin.execute("SELECT recoveries FROM cq_queries WHERE name = "
                                           "'c'").fetchone()[0]
            return {"measurement": "recovery", "window_s": window_s, "rate": rate,
                    "keys": keys, "archived_tuples_in_window": window_s * rate,
                    "state_rows": state, "recovery_s": round(recovered, 3),
                    "recoveries": recoveries, "fill_s": round(filled, 1),
                    "checkpoint_interval_s": interval, "checkpoint_bytes": saved_bytes,
                    "machine": platform.machine(),
                    "cores": os.cpu_count()}
        finally:
            srv.stop()


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(window_s: int, rate: int, keys: int, seconds: int,
               interval: float | None = None) -> dict:
    """The cursor reading ``rate`` tuples a second for ``seconds`` of wall time (event time
    keeps pace: 10 COPYs a second), with checkpoints every ``interval`` seconds (None: off):
    the back end's CPU per tuple, the checkpoints written and how long after the last COPY
    the cursor's answer passed the end (its lag)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        srv = ServerProcess(data, *(("--checkpoint-interval", str(interval))
                                    if interval else ()))
        try:
            lines = _csv(rate, keys, 0, seconds, 1).splitlines(keepends=True)
            steps = seconds * 10
            chunks = [b"".join(lines[i * len(lines) // steps:(i + 1) * len(lines) // steps])
                      for i in range(steps)]
            with psycopg.connect(srv.dsn, autocommit=True) as admin:
                admin.execute("CREATE STREAM m (k INT, v DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
                              "TYPE ARCHIVED")
                drain = Drain(srv.dsn, f"SELECT k, COUNT(*) AS n, SUM(v) AS s FROM m "
                                       f"[RANGE '{window_s} seconds'] GROUP BY k")
                backend = _backend_pid(srv)
                cpu, gateway = _cpu_s(backend), _cpu_s(srv.proc.pid)
                started = time.perf_counter()
                for i, chunk in enumerate(chunks):
                    time.sleep(max(0.0, started + i / 10 - time.perf_counter()))
                    with admin.cursor().copy("COPY m FROM STDIN") as cp:
                        cp.write(chunk)
                fed = time.perf_counter()
                end = T0 + dt.timedelta(seconds=seconds)
                admin.execute(f"ALTER STREAM m ADVANCE TO '{end}'")
                _caught_up(admin, end)
                lag = time.perf_counter() - fed
                cpu, gateway = _cpu_s(backend) - cpu, _cpu_s(srv.proc.pid) - gateway
                drain.seen.set()
                folder = os.path.join(data, "checkpoints")
                saved = [p for q in (os.listdir(folder) if os.path.isdir(folder) else ())
                         if (p := checkpoints.latest(os.path.join(folder, q)))]
                # (a checkpoint's name is its number, in the order written)
                written = sum(int(os.path.basename(p)) for p in saved)
                size = sum(os.path.getsize(os.path.join(p, f)) for p in saved
                           for f in os.listdir(p))
            n = len(lines)
            return {"measurement": "checkpoint_cost", "window_s": window_s, "rate": rate,
                    "keys": keys, "tuples": n, "seconds": seconds,
                    "backend_cpu_us_per_tuple": round(cpu / n * 1e6, 2),
                    "gateway_cpu_us_per_tuple": round(gateway / n * 1e6, 2),
                    "lag_s": round(lag, 2), "checkpoint_interval_s": interval,
                    "checkpoints_written": written, "checkpoint_bytes": size or None,
                    "machine": platform.machine(), "cores": os.cpu_count()}
        finally:
            srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", default="10,60,300", help="RANGE sizes, seconds")
    ap.add_argument("--rates", default="1000,10000", help="tuples a second of event time")
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--checkpoints", default="off,1",
                    help="checkpoint intervals to compare, seconds (off: none)")
    ap.add_argument("--throughput", type=int, default=0, metavar="SECONDS",
                    help="measure what checkpoints cost instead: each rate for that many "
                         "seconds, no crash")
    args = ap.parse_args()
    if args.throughput:
        _costs(args)
        return
    records = []
    for w in (int(x) for x in args.windows.split(",")):
        for r in (int(x) for x in args.rates.split(",")):
            for c in args.checkpoints.split(","):
                rec = run(w, r, args.keys, None if c == "off" else float(c))
                print(json.dumps(rec), flush=True)
                records.append(rec)
    print(f"\n{'window':>8} {'rate':>8} {'tuples in window':>17} {'state rows':>11} "
          f"{'checkpoints':>12} {'checkpoint MB':>14} {'recovery s':>11}")
    for rec in records:
        every = rec["checkpoint_interval_s"]
        size = rec["checkpoint_bytes"]
        print(f"{rec['window_s']:>7}s {rec['rate']:>8} {rec['archived_tuples_in_window']:>17,} "
              f"{rec['state_rows']:>11,} {f'every {every:g} s' if every else 'off':>12} "
              f"{f'{size / 1e6:.1f}' if size else '-':>14} {rec['recovery_s']:>11}")


def _costs(args) -> None:
    records = []
    for w in (int(x) for x in args.windows.split(",")):
        for r in (int(x) for x in args.rates.split(",")):
            for c in args.checkpoints.split(","):
                rec = throughput(w, r, args.keys, args.throughput,
                                 None if c == "off" else float(c))
                print(json.dumps(rec), flush=True)
                records.append(rec)
    print(f"\n{'window':>8} {'rate':>8} {'tuples':>11} {'checkpoints':>12} "
          f"{'back end µs/tuple':>18} {'gateway µs/tuple':>17} {'lag s':>6} {'written':>8} "
          f"{'checkpoint MB':>14}")
    for rec in records:
        every, size = rec["checkpoint_interval_s"], rec["checkpoint_bytes"]
        print(f"{rec['window_s']:>7}s {rec['rate']:>8} {rec['tuples']:>11,} "
              f"{f'every {every:g} s' if every else 'off':>12} "
              f"{rec['backend_cpu_us_per_tuple']:>18} {rec['gateway_cpu_us_per_tuple']:>17} "
              f"{rec['lag_s']:>6} {rec['checkpoints_written']:>8} "
              f"{f'{size / 1e6:.1f}' if size else '-':>14}")


if __name__ == "__main__":
    main()
