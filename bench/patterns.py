"""Benchmark: event patterns (EVENT SEQ, docs/patterns.md).

    python bench/patterns.py operator [--events 1000000]   # the operator alone, in process
    python bench/patterns.py e2e [--events 1000000]        # through a server, beside q0
    python bench/patterns.py flink [--events 1000000]      # beside PyFlink's MATCH_RECOGNIZE

``operator``: the seed's Q3 shape, SEQ(A a, B b, !(C c), D d) WHERE [k] AND a.x < s AND
a.y < b.y WITHIN W, fed in batches of 50,000 with a watermark after each: events/s against W
and against the selectivity of the scan predicate, and the plan of seed 004 (PAIS, predicates
in scan) against the naive one (no partitions, every predicate after construction), with the
candidate sequences each constructed; and the operator's memory over a long run.

``e2e``: the same pattern through a running server (COPY into the four streams from four
connections, matches fetched through a cursor), beside q0 (every row of one stream through a
cursor) with as many events, in the same run: q0 is the ceiling of anything end to end.

``flink``: a pattern both engines express, strict contiguity within a partition: rows of one
stream classified A, B, C; cqgate's SEQ(ev a, ev b, ev c) WHERE [k] AND a.kind = 'A' … USING
STRICT CONTIGUITY, and the MATCH_RECOGNIZE text Flink runs (PARTITION BY k ORDER BY t …
PATTERN (A B C)), against Flink SQL's, on the same CSV file; PyFlink runs in its venv
(python -m bench.nexmark.peers setup pyflink, once). Prints one JSON record per
measurement; nothing here asserts a speed.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psycopg
import pyarrow as pa
import sqlglot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import dialect  # noqa: E402,F401 - registers the cql dialect
from conftest import ServerProcess  # noqa: E402
from dialect.planner import MemoryCatalog, Relation, plan  # noqa: E402
from executor import plan as P  # noqa: E402
from executor.batches import TE, TS  # noqa: E402
from executor.context import OperatorContext  # noqa: E402
from executor.duck import Database  # noqa: E402
from executor.operators.patterns.pattern import Pattern  # noqa: E402

T0_US = 1_793_491_200_000_000                 # 2026-11-01 00:00:00 UTC
COLUMNS = (("id", "BIGINT"), ("k", "INT"), ("x", "INT"), ("y", "INT"), ("t", "TIMESTAMP"))
Q3 = ("SELECT a.id, b.id, d.id FROM EVENT SEQ(A a, B b, !(C c), D d) "
      "WHERE [k] AND a.x < {sel} AND a.y < b.y WITHIN '{w}'")
BATCH = 50_000


def events(n: int, keys: int, gap_us: int, seed: int = 1) -> dict:
    """n events spread over streams A-D at random, one every ``gap_us`` of event time."""
    rng = np.random.default_rng(seed)
    which = rng.integers(0, 4, n)
    out = {}
    for i, s in enumerate("ABCD"):
        idx = np.flatnonzero(which == i)
        out[s] = {"id": idx.astype(np.int64), "k": rng.integers(0, keys, len(idx)),
                  "x": rng.integers(0, 100, len(idx)), "y": rng.integers(0, 1000, len(idx)),
                  "t": T0_US + idx.astype(np.int64) * gap_us}
    return out


def catalog(names="ABCD") -> MemoryCatalog:
    cat = MemoryCatalog()
    for n in names:
        cat.add(Relation(n, "stream", COLUMNS, "t"))
    return cat


def pattern_node(sql: str) -> P.Pattern:
    node = plan(sqlglot.parse_one(sql, read="cql"), catalog()).root
    while not isinstance(node, P.Pattern):
        node = P.children(node)[0]
    return node


def naive(node: P.Pattern) -> P.Pattern:
    """The seed's basic plan: no partitions, every predicate decided after construction."""
    pos = [c for c in node.components if not c.negated]
    terms = [c.predicate.sql for c in pos if c.predicate is not None]
    terms += [f"({pos[0].partition[j].sql}) = ({c.partition[j].sql})"
              for c in pos[1:] for j in range(len(c.partition))]
    if node.where is not None:
        terms.append(node.where.sql)
    comps = []
    for c in node.components:
        if c.negated:
            against = [f"({pos[0].partition[j].sql}) = ({c.partition[j].sql})"
                       for j in range(len(c.partition))]
            against += [x.sql for x in (c.predicate, c.against) if x is not None]
            comps.append(dataclasses.replace(c, predicate=None, partition=(), against=P.Expr(
                " AND ".join(f"({t})" for t in against), (), "BOOLEAN") if against else None))
        else:
            comps.append(dataclasses.replace(c, predicate=None, partition=()))
    where = P.Expr(" AND ".join(f"({t})" for t in terms), (), "BOOLEAN") if terms else None
    return dataclasses.replace(node, components=tuple(comps), where=where)


def run_operator(node: P.Pattern, evs: dict) -> dict:
    op, db = Pattern(node), Database()
    op.open(OperatorContext(cursor=db))
    ports = [c.alias for c in node.components]
    streams = [inp.stream for inp in node.inputs]
    batches = {s: [] for s in "ABCD"}
    for s, cols in evs.items():
        for i in range(0, len(cols["id"]), BATCH // 4):
            batches[s].append({k: v[i:i + BATCH // 4] for k, v in cols.items()})
    steps = max(len(b) for b in batches.values())
    matches, peak_state, started = 0, 0, time.perf_counter()
    for step in range(steps):
        for port, (alias, stream) in enumerate(zip(ports, streams)):
            if step >= len(batches[stream]):
                continue
            b = batches[stream][step]
            cols = {f"{alias}.{c}": pa.array(b[c]) for c, _ in COLUMNS if c != "t"}
            cols[f"{alias}.t"] = pa.array(b["t"]).cast(pa.timestamp("us"))
            cols[TS] = cols[TE] = pa.array(b["t"])
            matches += sum(m.num_rows for m in op.on_batch(pa.RecordBatch.from_pydict(cols),
                                                          port) if hasattr(m, "num_rows"))
        mark = min(int(batches[s][min(step + 1, len(batches[s]) - 1)]["t"][0]) for s in "ABCD")
        for port in range(len(ports)):
            matches += sum(m.num_rows for m in op.on_watermark(mark, port)
                           if hasattr(m, "num_rows"))
        peak_state = max(peak_state, op.state_size())
    matches += sum(m.num_rows for m in op.on_end() if hasattr(m, "num_rows"))
    secs = time.perf_counter() - started
    n = sum(len(c["id"]) for c in evs.values())
    op.close()
    db.close()
    return {"events": n, "seconds": round(secs, 3), "events_per_s": round(n / secs),
            "matches": matches, "candidates": op.candidates, "peak_state_rows": peak_state}


def operator_mode(args) -> None:
    evs = events(args.events, 1000, 10)
    for w in ("1 millisecond", "10 milliseconds", "100 milliseconds"):
        rec = run_operator(pattern_node(Q3.format(sel=50, w=w)), evs)
        print(json.dumps({"bench": "pattern-operator", "vary": "window", "within": w,
                          "selectivity": 0.5, **rec}), flush=True)
    for sel in (10, 50, 100):
        rec = run_operator(pattern_node(Q3.format(sel=sel, w="10 milliseconds")), evs)
        print(json.dumps({"bench": "pattern-operator", "vary": "selectivity",
                          "within": "10 milliseconds", "selectivity": sel / 100, **rec}),
              flush=True)
    # the naive plan enumerates every combination inside the window: a short one, or it
    # would not finish
    small = events(args.events // 10, 1000, 10)
    node = pattern_node(Q3.format(sel=50, w="1 millisecond"))
    for name, n in (("seed 004 plan (PAIS, predicates in scan)", node),
                    ("naive plan (no partitions, predicates after construction)", naive(node))):
        rec = run_operator(n, small)
        print(json.dumps({"bench": "pattern-plan", "plan": name, "within": "1 millisecond",
                          **rec}), flush=True)
    node = pattern_node(Q3.format(sel=50, w="10 milliseconds"))
    long = events(args.events * 4, 1000, 10, seed=2)
    rec = run_operator(node, long)
    print(json.dumps({"bench": "pattern-memory", "note": "state rows stay those of one window",
                      **rec}), flush=True)


# ---------------------------------------------------------------------- through a server
def _csv(cols: dict, names: list) -> bytes:
    out = io.StringIO()
    ts = cols["t"]
    stamps = np.char.replace(np.datetime_as_string(ts.astype("datetime64[us]"), unit="us"),
                             "T", " ")
    for i in range(len(ts)):
        out.write(",".join([*(str(cols[c][i]) for c in names), stamps[i]]) + "\n")
    return out.getvalue().encode()


def _drain(cur, name: str, until: int) -> int:
    got = 0
    while got < until:
        cur.execute(f"FETCH {min(100_000, until - got)} FROM {name} WITH (timeout = '30s')")
        rows = cur.fetchall()
        if not rows:
            break
        got += len(rows)
    return got


def _copy(dsn: str, stream: str, data: bytes, names: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        with c.cursor().copy(f"COPY {stream} ({names}) FROM STDIN (FORMAT csv)") as cp:
            for i in range(0, len(data), 1 << 20):
                cp.write(data[i:i + (1 << 20)])


def _through_server(dsn, query, loads: dict, names: str, expect: int, end_us: int) -> dict:
    with psycopg.connect(dsn) as reader, psycopg.connect(dsn, autocommit=True) as ctl:
        cur = reader.cursor()
        cur.execute(f"DECLARE q CURSOR FOR {query}")
        started = time.perf_counter()
        threads = [threading.Thread(target=_copy, args=(dsn, s, d, names))
                   for s, d in loads.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        copied = time.perf_counter() - started
        end = np.datetime_as_string(np.datetime64(end_us, "us"), unit="us").replace("T", " ")
        for s in loads:
            ctl.execute(f"ALTER STREAM {s} ADVANCE TO '{end}'")
        got = _drain(cur, "q", expect)
        secs = time.perf_counter() - started
    return {"rows": got, "expected_rows": expect, "seconds": round(secs, 3),
            "copy_seconds": round(copied, 3)}


def e2e_mode(args) -> None:
    evs = events(args.events, 1000, 10)
    node = pattern_node(Q3.format(sel=50, w="10 milliseconds"))
    expect = run_operator(node, evs)["matches"]
    end = int(max(c["t"].max() for c in evs.values())) + 1_000_000
    names = ["id", "k", "x", "y"]
    with tempfile.TemporaryDirectory() as data:
        srv = ServerProcess(data)
        try:
            with psycopg.connect(srv.dsn, autocommit=True) as c:
                for s in ("A", "B", "C", "D", "Q0"):
                    c.execute(f"CREATE STREAM {s} (id BIGINT, k INT, x INT, y INT, "
                              "t TIMESTAMP TIMESTAMPCOLUMN)")
            loads = {s: _csv(evs[s], names) for s in "ABCD"}
            rec = _through_server(srv.dsn, Q3.format(sel=50, w="10 milliseconds"), loads,
                                  "id, k, x, y, t", expect, end)
            print(json.dumps({"bench": "pattern-e2e", "query": "Q3 shape", "events":
                              args.events, "events_per_s": round(args.events / rec["seconds"]),
                              **rec}), flush=True)
            every = {k: np.concatenate([evs[s][k] for s in "ABCD"]) for k in evs["A"]}
            order = np.argsort(every["t"])
            every = {k: v[order] for k, v in every.items()}
            rec = _through_server(srv.dsn, "SELECT id FROM Q0",
                                  {"Q0": _csv(every, names)}, "id, k, x, y, t",
                                  args.events, end)
            print(json.dumps({"bench": "pattern-e2e", "query": "q0 (every row)", "events":
                              args.events, "events_per_s": round(args.events / rec["seconds"]),
                              **rec}), flush=True)
        finally:
            srv.stop()


# ---------------------------------------------------------------------- beside PyFlink
STRICT = ("SELECT a.v, b.v, c.v FROM EVENT SEQ(ev a, ev b, ev c) WHERE [k] AND a.kind = 'A' "
          "AND b.kind = 'B' AND c.kind = 'C' WITHIN '10 seconds' USING STRICT CONTIGUITY")
# the same text Flink runs (bench/patterns_flink.py), with its column names
RECOGNIZE = ("SELECT * FROM ev MATCH_RECOGNIZE (PARTITION BY k ORDER BY t "
             "MEASURES A.v AS av, B.v AS bv, C.v AS cv ONE ROW PER MATCH "
             "AFTER MATCH SKIP PAST LAST ROW PATTERN (A B C) WITHIN INTERVAL '10' SECOND "
             "DEFINE A AS kind = 'A', B AS kind = 'B', C AS kind = 'C')")


def _abc(cols: dict) -> int:
    """The right answer's size: rows A, B, C one after another within a partition."""
    order = np.lexsort((cols["t"], cols["k"]))
    k, kind = cols["k"][order], cols["kind"][order]
    same = (k[:-2] == k[1:-1]) & (k[1:-1] == k[2:])
    return int((same & (kind[:-2] == "A") & (kind[1:-1] == "B") & (kind[2:] == "C")).sum())


def flink_mode(args) -> None:
    rng = np.random.default_rng(3)
    n = args.events
    cols = {"k": rng.integers(0, 1000, n), "kind": rng.choice(np.array(["A", "B", "C"]), n),
            "v": np.arange(n, dtype=np.int64), "t": T0_US + np.arange(n, dtype=np.int64) * 10}
    data = _csv(cols, ["k", "kind", "v"])
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "ev.csv")
        with open(path, "wb") as f:
            f.write(data)
        peer = os.path.join(ROOT, "bench", ".venvs", "pyflink", "bin", "python")
        out = subprocess.run([peer, os.path.join(ROOT, "bench", "patterns_flink.py"), path],
                             capture_output=True, text=True, check=True)
        flink = json.loads(out.stdout.strip().splitlines()[-1])
        with tempfile.TemporaryDirectory() as d:
            srv = ServerProcess(d)
            try:
                end = int(cols["t"][-1]) + 1_000_000
                ours = []
                for name, query in (("EVENT SEQ … USING STRICT CONTIGUITY", STRICT),
                                    ("MATCH_RECOGNIZE, Flink's text", RECOGNIZE)):
                    with psycopg.connect(srv.dsn, autocommit=True) as c:   # a fresh stream
                        c.execute("DROP STREAM IF EXISTS ev")
                        c.execute("CREATE STREAM ev (k INT, kind TEXT, v BIGINT, "
                                  "t TIMESTAMP TIMESTAMPCOLUMN)")
                    rec = _through_server(srv.dsn, query, {"ev": data}, "k, kind, v, t",
                                          _abc(cols), end)
                    ours.append({"engine": f"cqgate ({name}, end to end)",
                                 "events_per_s": round(n / rec["seconds"]), **rec})
            finally:
                srv.stop()
    theirs = {"engine": "PyFlink MATCH_RECOGNIZE (job time, JVM start not counted)",
              "events_per_s": round(n / flink["seconds"]), **flink}
    for mine in ours:
        print(json.dumps({"bench": "pattern-vs-flink", "events": n, "right_rows": _abc(cols),
                          "cqgate": mine, "flink": theirs,
                          "ratio": round(mine["events_per_s"] / theirs["events_per_s"], 2)}),
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["operator", "e2e", "flink"])
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    {"operator": operator_mode, "e2e": e2e_mode, "flink": flink_mode}[args.mode](args)


if __name__ == "__main__":
    main()
