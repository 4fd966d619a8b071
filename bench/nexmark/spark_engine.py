"""NEXMark q5 and q7 on the Spark engine (``cq.engine = spark``) beside the back end, in one
run: throughput (the bids pushed through the ingest port as fast as the server takes them, a
cursor draining every row; events/s = bids / (last row − first byte)), CPU per event of the
whole server (gateway, back end, Spark's JVM and, on a cluster, its master, worker and
executor), peak memory, and latency at a fixed rate (from the bid that closes a window
leaving the source to the window's row reaching the client). Spark runs with 1 and 2
executor cores, in the server (``local[n]``) and, with ``--standalone``, on a master and a
worker with n cores started here with ``spark-class``.

    python -m bench.nexmark.spark_engine [--events 200000] [--queries q5,q7] [--cores 1,2 | 0]
                                         [--standalone] [--rate 2000] [--seconds 30]

Prints one JSON record per measurement (appended to docs/benchmarks/results.jsonl) and a
table. Nothing here asserts a speed."""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

from . import drive, generate
from .queries import QUERIES, oracle
from .run import ServerProcess, Sampler, _children, _files, _latencies, _pct, cpu_seconds, \
    push_through, record

# the latency runs' queries: each row's last column is its window's end
LATENCY_SQL = {
    "q5": QUERIES["q5"].cqgate,
    "q7": QUERIES["q7"].cqgate.replace("b.date_time FROM", "b.date_time, valid_from FROM"),
}


class TreeCpu:
    """CPU seconds spent while entered by a set of processes and all their children."""

    def __init__(self, pids: list):
        self.pids = pids

    def _now(self) -> float:
        every = set(self.pids)
        for p in self.pids:
            every.update(_children(p))
        return sum(cpu_seconds(p) for p in every)

    def __enter__(self):
        self._start = self._now()
        return self

    def __exit__(self, *exc):
        self.spent = self._now() - self._start


@contextlib.contextmanager
def standalone(cores: int, folder: str, memory: str = "2g"):
    """A Spark master and a worker with ``cores`` cores and ``memory`` on 127.0.0.1, their
    logs and work folders under ``folder``: (master URL, pids)."""
    import pyspark
    home = os.path.dirname(pyspark.__file__)
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": os.path.join(folder, "logs"),
           "SPARK_WORKER_DIR": os.path.join(folder, "work")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cls = os.path.join(home, "bin", "spark-class")
    url = f"spark://127.0.0.1:{port}"
    quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", "0"], **quiet)]
    try:
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the Spark master did not start")
            time.sleep(0.3)
        procs.append(subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker", url,
                                       "--host", "127.0.0.1", "--cores", str(cores),
                                       "--memory", memory, "--webui-port", "0"], **quiet))
        yield url, [p.pid for p in procs]
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _engines(cores: list, with_standalone: bool) -> list:
    """(label, cq.engine, master or None, cores of a standalone worker or None)."""
    out = [("back end", "backend", None, None)]
    out += [(f"Spark local[{n}]", "spark", f"local[{n}]", None) for n in cores]
    if with_standalone:
        out += [(f"Spark standalone, {n} core(s)", "spark", None, n) for n in cores]
    return out


def _throughput(srv, engine: str, cpu_pids: list, name: str, files: tuple) -> dict:
    tables, parquet, _ = files
    q = QUERIES[name]
    want = len(oracle(q, parquet))
    bids = sum(tables[s].num_rows for s in q.reads)
    drive.declare(srv.dsn, streams=q.reads)
    dsn = srv.dsn + f" options='-c cq.engine={engine}'"
    reader = drive.Reader(dsn, q.cqgate, quiet="600s").start(expect=want, keep=False)
    with Sampler(srv.proc.pid) as mem, TreeCpu(cpu_pids) as cpu:
        _, got, secs = push_through(srv, reader, files, q.reads, wait=900)
    reader.close()
    return {"events": bids, "result_rows": got, "expected_rows": want,
            "seconds": round(secs, 3), "events_per_s": round(bids / secs),
            "cpu_us_per_event": round(cpu.spent / bids * 1e6, 2),
            "peak_rss_mib": round(mem.peak / 1024)}


def _latency(srv, engine: str, name: str, rate: float, seconds: float) -> dict:
    events = int(rate * seconds * generate.EPOCH / generate.BID)
    bids = generate.generate(events, rate * generate.EPOCH / generate.BID,
                             delayed=False)["bids"]
    lines = generate.csv_bytes(bids).splitlines(keepends=True)
    times = bids.column("date_time").to_numpy().astype("datetime64[us]")
    drive.declare(srv.dsn, streams=("bids",))
    dsn = srv.dsn + f" options='-c cq.engine={engine}'"
    reader = drive.Reader(dsn, LATENCY_SQL[name], quiet="20s").start()
    sent = drive.paced(srv.ingest_port, "bids", lines, rate, tick=0.01)
    reader.wait(60 + seconds)
    reader.close()
    ms, cause = _latencies(reader, sent, times, "window")
    ms = ms[cause >= rate]                # the first second's rows pay one-time costs
    if not len(ms):
        return {"latency_rows": 0}
    return {"rate": rate, "latency_rows": len(ms), "p50_ms": _pct(ms, 50),
            "p99_ms": _pct(ms, 99), "max_ms": round(float(ms.max()), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--queries", default="q5,q7")
    ap.add_argument("--cores", default="1,2", help="Spark's, each a run; 0: the back end alone")
    ap.add_argument("--standalone", action="store_true",
                    help="also on a standalone master and worker started here")
    ap.add_argument("--rate", type=float, default=2_000, help="bids a second, for latency")
    ap.add_argument("--seconds", type=float, default=30,
                    help="of bids, for latency (q7's windows are 10 s)")
    args = ap.parse_args()
    names = args.queries.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(args.events, 100_000, os.path.join(tmp, "events"))
        for i, (label, engine, master, workers) in enumerate(
                _engines([int(c) for c in args.cores.split(",") if int(c) > 0],
                         args.standalone)):
            with contextlib.ExitStack() as stack:
                cluster_pids = []
                if workers is not None:
                    master, cluster_pids = stack.enter_context(
                        standalone(workers, os.path.join(tmp, f"cluster{i}")))
                extra = ["--spark-master", master] if master else []
                srv = ServerProcess(os.path.join(tmp, f"data{i}"), "--log-level", "WARNING",
                                    *extra)
                stack.callback(srv.stop)
                for name in names:
                    out = _throughput(srv, engine, [srv.proc.pid] + cluster_pids, name, files)
                    out.update(_latency(srv, engine, name, args.rate, args.seconds))
                    rows.append((label, name, out))
                    record(measurement="spark engine", engine_config=label, query=name,
                           **out)
    print(f"\n{'engine':32} {'query':5} {'events/s':>10} {'CPU µs/event':>13} "
          f"{'peak MiB':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for label, name, out in rows:
        print(f"{label:32} {name:5} {out['events_per_s']:>10,} {out['cpu_us_per_event']:>13} "
              f"{out['peak_rss_mib']:>9} {out.get('p50_ms', '-'):>8} {out.get('p99_ms', '-'):>8}")


if __name__ == "__main__":
    main()
