"""Where a NEXMark query's CPU goes, per process and per stage: each query runs once through
the real server (the files pushed through the ingest port, a COPY client draining every row)
while py-spy samples the gateway and the back end, and each process's CPU is read from /proc.

    python -m bench.nexmark.stage_profile [--events 2000000] [--queries q0,q1,q5,q7] [--rate 250]

py-spy counts only the samples where a thread holds the interpreter's lock (``--gil``): that
is the Python time (wall time, so capped at the process's CPU), split into stages by the
innermost frame of the project's own code. The rest of a process's CPU is Arrow's and
DuckDB's threads and the kernel's socket copies. Stages: ingest parse, slack ordering,
framing to the back end, operator work, result framing (rows between the processes) and wire
encoding (rows for the client: in the back end too, where it encodes a COPY's rows).
Prints one JSON record per query (appended to docs/benchmarks/results.jsonl), then a table.
Nothing here asserts a speed. py-spy comes with ``pip install .[bench]``.
"""
from __future__ import annotations

import argparse
import collections
import io
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pyarrow.csv as pacsv

from . import drive
from .queries import QUERIES, oracle
from .run import CLIENTS, CpuMeter, _files, _server, cpu_seconds, push_through, record

# (process, path fragment of the innermost project frame, function name prefixes or None for
# any, stage): the first rule that matches a sample's innermost project frame names its stage
RULES = [
    ("gateway", "gateway/sources/", None, "ingest parse"),
    ("gateway", "gateway/clearinghouse/", None, "slack ordering"),
    ("gateway", "executor/wire.py", ("data_parts", "_framed", "encode", "send_some", "frame"),
     "framing to the back end"),
    ("gateway", "gateway/link/outbox.py", None, "framing to the back end"),
    ("gateway", "gateway/link/backend_link.py", ("BackendLink.send_data",
                                                 "BackendLink.watermark"),
     "framing to the back end"),
    ("gateway", "executor/wire.py", None, "result framing"),
    ("gateway", "gateway/link/", None, "result framing"),
    ("gateway", "gateway/pgwire/", None, "wire encoding"),
    ("gateway", "executor/pg_text.py", None, "wire encoding"),
    ("gateway", "gateway/sessions/connection.py", None, "wire encoding"),
    ("back_end", "executor/pg_text.py", None, "wire encoding"),   # a COPY's rows, encoded
    ("back_end", "executor/wire.py", ("rows", "_framed", "encode", "send_", "frame"),
     "result framing"),
    ("back_end", "executor/graph/results.py", None, "result framing"),
    ("back_end", "executor/backend.py", ("Backend._emit", "serve.<locals>.send"),
     "result framing"),
    ("back_end", "executor/wire.py", None, "framing from the gateway"),
    ("back_end", "executor/backend.py", ("serve", "_coalesced", "Backend.handle",
                                         "Backend.on_data"),
     "framing from the gateway"),
    ("back_end", "executor/", None, "operator work"),
]
PROJECT = ("gateway/", "executor/", "dialect/")
OTHER = "event loop and interpreter"


def stage_of(process: str, frames: list) -> str:
    """The stage of one sample: ``frames`` outermost first, each "function (path:line)"."""
    for frame in reversed(frames):
        func, _, where = frame.rpartition(" (")
        if not any(p in where for p in PROJECT):
            continue
        for proc, path, funcs, stage in RULES:
            if proc == process and path in where and (
                    funcs is None or func.startswith(funcs)):
                return stage
        return OTHER
    return OTHER


def stages(process: str, raw_file: str) -> collections.Counter:
    """Samples per stage in py-spy's raw (collapsed) output."""
    out: collections.Counter = collections.Counter()
    with open(raw_file) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                out[stage_of(process, stack.split(";"))] += int(count)
    return out


def _spy(pid: int, rate: int, out: str) -> subprocess.Popen:
    return subprocess.Popen(["py-spy", "record", "--gil", "--rate", str(rate), "--format",
                             "raw", "--output", out, "--pid", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile(srv, name: str, files: tuple, rate: int, folder: str) -> dict:
    tables, parquet, _ = files
    q = QUERIES[name]
    want = len(oracle(q, parquet))
    events = sum(tables[s].num_rows for s in q.reads)
    drive.declare(srv.dsn, streams=q.reads)
    reader = CLIENTS["copy"](srv.dsn, q.cqgate).start(expect=want, keep=False)
    cpu = CpuMeter(srv.proc.pid)
    # the profiled server has one back end: each process is the first (only) of its kind
    pids = {k: ps[0] for k, ps in cpu.pids.items()}
    raws = {k: os.path.join(folder, f"{name}.{k}.txt") for k in pids}
    spies = [_spy(pid, rate, raws[k]) for k, pid in pids.items()]
    time.sleep(1.0)                         # py-spy attached before the first event
    # each process's main thread (its event loop): its thread id is the pid
    before = {k: cpu_seconds(pid, thread=pid) for k, pid in pids.items()}
    with cpu:
        _, got, secs = push_through(srv, reader, files, q.reads)
    main = {k: cpu_seconds(pid, thread=pid) - before[k] for k, pid in pids.items()}
    for s in spies:
        s.send_signal(signal.SIGINT)        # py-spy writes its file on an interrupt
    for s in spies:
        s.wait(60)
    reader.close()
    per_event = {}
    for proc, raw in raws.items():
        counts = stages(proc, raw) if os.path.exists(raw) else collections.Counter()
        total = sum(counts.values()) or 1
        # the lock held (samples / rate) is wall time: capped at the CPU the process had
        python_s = min(sum(counts.values()) / rate, cpu.spent[proc])
        per_event[proc] = {
            "cpu_us_per_event": round(cpu.spent[proc] / events * 1e6, 3),
            # the event loop's thread; the others are Arrow's, DuckDB's and worker threads
            "main_thread_us_per_event": round(main[proc] / events * 1e6, 3),
            "python_us_per_event": round(python_s / events * 1e6, 3),
            "stages_percent_of_python": {k: round(100 * n / total, 1)
                                         for k, n in counts.most_common()}}
    return record(measurement="profile", query=name, title=q.title, client="copy",
                  events=events, result_rows=got, expected_rows=want, seconds=round(secs, 3),
                  events_per_s=round(events / secs), sample_rate_hz=rate,
                  per_process=per_event)


def parse_floor(data: bytes, schema) -> float:
    """CPU µs per line of Arrow's CSV reader alone, on one thread, over ``data`` typed as
    ``schema``: what parsing the text costs before anything else is done."""
    names = [f"c{i}" for i in range(len(schema))]
    started = time.process_time()
    table = pacsv.read_csv(io.BytesIO(data), read_options=pacsv.ReadOptions(
        column_names=names, use_threads=False), convert_options=pacsv.ConvertOptions(
        column_types=dict(zip(names, schema.types)), strings_can_be_null=True,
        null_values=[""]))
    return round((time.process_time() - started) / table.num_rows * 1e6, 3)


def _print(recs: list) -> None:
    print("| query | process | CPU µs/event | main thread | in Python | stages, % of the "
          "Python time |")
    print("|---|---|---|---|---|---|")
    for r in recs:
        for proc, p in r["per_process"].items():
            parts = ", ".join(f"{k} {v:.0f}" for k, v in p["stages_percent_of_python"].items())
            print(f"| {r['query']} | {proc.replace('_', ' ')} | {p['cpu_us_per_event']:.2f} "
                  f"| {p['main_thread_us_per_event']:.2f} | {p['python_us_per_event']:.2f} "
                  f"| {parts} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--event-rate", type=float, default=100_000)
    ap.add_argument("--queries", default="q0,q1,q5,q7")
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples a second")
    args = ap.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: pip install .[bench]")
    recs = []
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(args.events, args.event_rate, os.path.join(tmp, "events"))
        print(f"Arrow's CSV reader alone, one thread, on the bids: "
              f"{parse_floor(files[2]['bids'], files[0]['bids'].schema)} CPU µs/line", flush=True)
        srv = _server(os.path.join(tmp, "data"))
        try:
            for name in args.queries.split(","):
                recs.append(profile(srv, name, files, args.rate, tmp))
        finally:
            srv.stop()
    _print(recs)


if __name__ == "__main__":
    main()
