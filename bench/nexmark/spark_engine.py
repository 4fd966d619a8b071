"""NEXMark on the Spark engine (``cq.engine = spark``) beside the back end and beside plain Spark
Structured Streaming on the same files, in one run: throughput (the events pushed through the
ingest port as fast as the server takes them, a cursor draining every row; events/s = events
/ (last row − first byte); plain Spark reads the generator's CSV files with its file source,
events / (stream start → end), as ``peer_spark.py`` measures), CPU per event of each process
(the gateway, the back end, Spark's JVM, its Python workers; plain Spark's program, JVM and
workers together; on a cluster its master, worker and executors), peak memory, where the Spark
engine's time went (Spark's phases, summed over its micro-batches, from the server's log), and
latency at fixed rates (from the bid that closes a window leaving the source to the window's row
reaching the client; for q0 and q1, from the bid leaving the source to its row reaching the
client). Spark runs with n executor cores, in the server (``local[n]``: in real-time mode
where the query allows, and with ``--micro-batches`` once more in micro-batches only) and,
with ``--standalone``, on a master and a worker with n cores started here with
``spark-class``.
Every Spark engine (in the server or plain) first runs q2 untimed: the first job pays for the
JIT and loading.

    python -m bench.nexmark.spark_engine [--events 2000000] [--queries q0,q1,q2,q5,q7,q8]
                                         [--cores 2] [--standalone] [--no-peer]
                                         [--executor-memory 4g]
                                         [--rates 2000,20000] [--seconds 30]
                                         [--micro-batches]

Prints one JSON record per measurement (appended to docs/benchmarks/results.jsonl) and a
table with the ratio Spark engine ÷ plain Spark. Nothing here asserts a speed."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from . import drive, generate
from .queries import QUERIES, oracle
from .run import ServerProcess, Sampler, _children, _files, _latencies, _pct, cpu_seconds, \
    push_through, record

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER_MEMORY = "4g"           # both Spark drivers: q7's join state does not fit Spark's 1g

# the latency runs' queries: each row's last column is its window's end, or (q0, q1, run in
# Spark's real-time mode where a slot is free) the bid's own time
LATENCY_SQL = {
    "q0": QUERIES["q0"].cqgate,
    "q1": QUERIES["q1"].cqgate,
    "q5": QUERIES["q5"].cqgate,
    "q7": QUERIES["q7"].cqgate.replace("b.date_time FROM", "b.date_time, valid_from FROM"),
}
PASS_THROUGH = ("q0", "q1")


def _kind(pid: int) -> str:
    """Which part of the server a process of its tree is, by its command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "pyspark" in cmd:
        return "python_workers"
    return "back_end" if "python" in cmd else "other"


class ProcessCpu:
    """CPU seconds spent while entered, by kind of process: the gateway (``root``), and each
    of its children and theirs (the back end, Spark's JVM, Spark's Python workers), plus
    ``cluster`` (a standalone master and worker, their executors). A process that ends while
    entered takes its CPU with it (Spark keeps its Python workers for the next task)."""

    def __init__(self, root: int, cluster: list = ()):
        self.root, self.cluster = root, list(cluster)

    def _now(self) -> dict:
        out = {(self.root, "gateway"): cpu_seconds(self.root)}
        for p in _children(self.root):
            out[(p, _kind(p))] = cpu_seconds(p)
        for c in self.cluster:
            for p in [c] + _children(c):
                out[(p, "cluster")] = cpu_seconds(p)
        return out

    def __enter__(self):
        self._start = self._now()
        return self

    def __exit__(self, *exc):
        self.spent: dict = {}
        for key, secs in self._now().items():
            self.spent[key[1]] = self.spent.get(key[1], 0) + secs - self._start.get(key, 0)

    def per_event_us(self, events: int) -> dict:
        return {k: round(v / events * 1e6, 2) for k, v in sorted(self.spent.items())
                if k != "gone" and v > 0}


class Cluster:
    """A Spark standalone master on 127.0.0.1 and ``workers`` workers of ``cores`` cores and
    ``memory`` each, started with ``spark-class``; logs and work folders under ``folder``
    (worker i's under ``work`` for the first, ``work<i>`` after). ``kill_worker`` ends a
    worker and its executors with SIGKILL, as a machine that dies; ``add_worker`` starts
    another."""

    def __init__(self, folder: str, cores: int = 1, memory: str = "2g", workers: int = 1):
        import pyspark
        home = os.path.dirname(pyspark.__file__)
        self.folder, self.cores, self.memory = folder, cores, memory
        self.env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYSPARK_PYTHON": sys.executable,
                    "SPARK_LOG_DIR": os.path.join(folder, "logs")}
        self.cls = os.path.join(home, "bin", "spark-class")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"spark://127.0.0.1:{port}"
        self.master = self._launch(["org.apache.spark.deploy.master.Master", "--host",
                                    "127.0.0.1", "--port", str(port), "--webui-port", "0"])
        self.workers: list = []
        try:
            deadline = time.monotonic() + 90
            while True:
                with contextlib.suppress(OSError), \
                        socket.create_connection(("127.0.0.1", port), 1):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the Spark master did not start")
                time.sleep(0.3)
            for _ in range(workers):
                self.add_worker()
        except BaseException:
            self.stop()
            raise

    def _launch(self, args: list, **env) -> subprocess.Popen:
        # spark-class execs the JVM: the process is the master's or worker's JVM itself
        return subprocess.Popen([self.cls, *args], env={**self.env, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def work_dir(self, i: int) -> str:
        return os.path.join(self.folder, "work" if i == 0 else f"work{i}")

    def add_worker(self) -> int:
        """Start one more worker; its index."""
        i = len(self.workers)
        self.workers.append(self._launch(
            ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
             "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0"],
            SPARK_WORKER_DIR=self.work_dir(i)))
        return i

    def kill_worker(self, i: int) -> None:
        """Worker i and the executors it launched, SIGKILLed at once (their children too)."""
        worker = self.workers[i]
        doomed = [worker.pid] + _children(worker.pid)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        worker.wait(10)

    @property
    def pids(self) -> list:
        return [p.pid for p in [self.master, *self.workers] if p.poll() is None]

    def stop(self) -> None:
        for p in reversed([self.master, *self.workers]):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


@contextlib.contextmanager
def standalone(cores: int, folder: str, memory: str = "2g", workers: int = 1):
    """A ``Cluster`` for as long as the block runs: (master URL, pids)."""
    cluster = Cluster(folder, cores, memory, workers)
    try:
        yield cluster.url, cluster.pids
    finally:
        cluster.stop()


def _engines(cores: list, with_standalone: bool, micro_batches: bool) -> list:
    """(label, cq.engine, master or None, cores of a standalone worker or None, the server's
    own arguments): the Spark engine in the server runs real-time mode where it can (a
    query of one stream's rows, a free slot), and with ``micro_batches`` also a second time
    in micro-batches only."""
    out = [("back end", "backend", None, None, [])]
    out += [(f"Spark engine local[{n}]", "spark", f"local[{n}]", None, []) for n in cores]
    if micro_batches:
        out += [(f"Spark engine local[{n}] micro-batches", "spark", f"local[{n}]", None,
                 ["--spark-real-time", "0"]) for n in cores]
    if with_standalone:
        out += [(f"Spark engine standalone, {n} core(s)", "spark", None, n, [])
                for n in cores]
    return out


_PROFILE = re.compile(r"query on Spark (q\d+): (.*)$")


def _profile(srv, before: int, wait: float = 20) -> str | None:
    """The Spark engine's time profile of the cursor just closed, from the server's log
    (after its line ``before``)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for line in srv.lines[before:]:
            m = _PROFILE.search(line.strip())
            if m:
                return m.group(2)
        time.sleep(0.2)
    return None


def _throughput(srv, engine: str, cluster: list, name: str, files: tuple) -> dict:
    tables, parquet, _ = files
    q = QUERIES[name]
    want = len(oracle(q, parquet))
    events = sum(tables[s].num_rows for s in q.reads)
    drive.declare(srv.dsn, streams=q.reads)
    dsn = srv.dsn + f" options='-c cq.engine={engine}'"
    reader = drive.Reader(dsn, q.cqgate, quiet="600s").start(expect=want, keep=False)
    time.sleep(1)            # the query is running before the first byte: not timed
    with Sampler(srv.proc.pid) as mem, ProcessCpu(srv.proc.pid, cluster) as cpu:
        _, got, secs = push_through(srv, reader, files, q.reads, wait=1800)
    logged = len(srv.lines)
    reader.close()
    out = {"events": events, "result_rows": got, "expected_rows": want,
           "seconds": round(secs, 3), "events_per_s": round(events / secs),
           "cpu_us_per_event": round(sum(cpu.spent.values()) / events * 1e6, 2),
           "cpu_us_per_event_by_process": cpu.per_event_us(events),
           "peak_rss_mib": round(mem.peak / 1024)}
    if engine == "spark":
        out["spark_time"] = _profile(srv, logged)
    return out


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
    ms, cause = _latencies(reader, sent, times,
                           "pass-through" if name in PASS_THROUGH else "window")
    ms = ms[cause >= rate]                # the first second's rows pay one-time costs
    if not len(ms):
        return {"rate": rate, "latency_rows": 0}
    return {"rate": rate, "latency_rows": len(ms), "p50_ms": _pct(ms, 50),
            "p99_ms": _pct(ms, 99), "max_ms": round(float(ms.max()), 2)}


def _plain_spark(events_dir: str, names: list, cores: int, tables: dict, log: str) -> dict:
    """Plain Spark Structured Streaming (``peer_spark.py``, in this Python: the same PySpark
    as the server's) over the generator's CSV files: {query: record}."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    with open(log, "ab") as err:
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "peer_spark.py"), events_dir, "--queries",
             ",".join(names), "--cores", str(cores), "--memory", DRIVER_MEMORY],
            stdout=subprocess.PIPE, stderr=err, env=env, timeout=7200)
    out = {}
    for line in done.stdout.decode().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            name = rec.pop("query")
            if "error" not in rec:
                events = sum(tables[s].num_rows for s in QUERIES[name].reads)
                rec.update(events=events, events_per_s=round(events / rec["seconds"]),
                           cpu_us_per_event=round(rec["cpu_seconds"] / events * 1e6, 2))
            out[name] = rec
    return out


def _warm(srv, files: tuple) -> None:
    """q2 once, untimed: a SparkSession's first streaming query pays for the JIT, Python
    workers and loading (plain Spark's program does the same)."""
    _throughput(srv, "spark", [], "q2", files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--queries", default="q0,q1,q2,q5,q7,q8")
    ap.add_argument("--cores", default="2", help="Spark's, each a run; 0: the back end alone")
    ap.add_argument("--standalone", action="store_true",
                    help="also on a standalone master and worker started here")
    ap.add_argument("--no-peer", action="store_true", help="without plain Spark")
    ap.add_argument("--executor-memory", default=DRIVER_MEMORY,
                    help="a standalone worker's memory and its executor's (default 4g)")
    ap.add_argument("--micro-batches", action="store_true",
                    help="the Spark engine in the server once more, in micro-batches only "
                         "(--spark-real-time 0)")
    ap.add_argument("--rates", default="2000,20000",
                    help="bids a second, for latency (q0, q1, q5 and q7); empty: none")
    ap.add_argument("--seconds", type=float, default=30,
                    help="of bids, for latency (q7's windows are 10 s)")
    args = ap.parse_args()
    names = args.queries.split(",")
    cores = [int(c) for c in args.cores.split(",") if int(c) > 0]
    rates = [float(r) for r in args.rates.split(",") if r]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        events_dir = os.path.join(tmp, "events")
        files = _files(args.events, 100_000, events_dir)
        for i, (label, engine, master, workers, own) in enumerate(
                _engines(cores, args.standalone, args.micro_batches)):
            with contextlib.ExitStack() as stack:
                cluster = []
                if workers is not None:
                    master, cluster = stack.enter_context(
                        standalone(workers, os.path.join(tmp, f"cluster{i}"),
                                   memory=args.executor_memory))
                extra = ["--spark-master", master, "--spark-conf",
                         f"spark.executor.memory={args.executor_memory}"] if workers else \
                    ["--spark-master", master] if master else []
                srv = ServerProcess(os.path.join(tmp, f"data{i}"), "--log-level", "INFO",
                                    "--spark-conf", f"spark.driver.memory={DRIVER_MEMORY}",
                                    *extra, *own)
                stack.callback(srv.stop)
                if engine == "spark":
                    _warm(srv, files)
                for name in names:
                    out = _throughput(srv, engine, cluster, name, files)
                    if name in LATENCY_SQL:
                        out["latency"] = [_latency(srv, engine, name, r, args.seconds)
                                          for r in rates]
                    rows.append((label, name, out))
                    record(measurement="spark engine", engine_config=label, query=name,
                           **out)
        if not args.no_peer:
            for n in cores:
                label = f"plain Spark local[{n}]"
                for name, out in _plain_spark(events_dir, names, n, files[0],
                                              os.path.join(tmp, "spark.log")).items():
                    rows.append((label, name, out))
                    record(measurement="spark engine", engine_config=label, query=name,
                           **out)
    _table(rows)


def _cores(label: str) -> str | None:
    """The cores of a run in Spark's local mode, from its label (None: not local)."""
    m = re.search(r"local\[(\d+)\]", label)
    return m.group(1) if m else None


def _table(rows: list) -> None:
    plain = {(_cores(label), name): out["events_per_s"] for label, name, out in rows
             if label.startswith("plain") and "events_per_s" in out}
    print(f"\n{'engine':44} {'query':5} {'events/s':>10} {'÷ plain':>8} {'CPU µs/ev':>10} "
          f"{'peak MiB':>9}  latency p50 / p99 ms by rate")
    for label, name, out in rows:
        if "events_per_s" not in out:
            print(f"{label:44} {name:5} {out.get('error', '?')}")
            continue
        peer = None if label.startswith("plain") else plain.get((_cores(label), name))
        ratio = f"{out['events_per_s'] / peer:.2f}" if peer else "-"
        lat = "; ".join(f"{int(x['rate'])}/s: {x.get('p50_ms', '-')} / {x.get('p99_ms', '-')}"
                        for x in out.get("latency", []))
        print(f"{label:44} {name:5} {out['events_per_s']:>10,} {ratio:>8} "
              f"{out['cpu_us_per_event']:>10} {out.get('peak_rss_mib', '-'):>9}  {lat}")
        if out.get("cpu_us_per_event_by_process"):
            print(f"{'':50} CPU µs/event: " + ", ".join(
                f"{k} {v}" for k, v in out["cpu_us_per_event_by_process"].items()))
        if out.get("spark_time"):
            print(f"{'':50} Spark time: {out['spark_time']}")


if __name__ == "__main__":
    main()
