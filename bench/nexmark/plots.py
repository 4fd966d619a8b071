"""Draw docs/benchmarks/*.png from docs/benchmarks/results.jsonl (the newest record of each
measurement wins; for cqgate's throughput, the newest run's repeats: their median, and their
range as a line): throughput per query, latency CDFs, memory over time, throughput against
the number of concurrent queries, and the whole suite beside PyFlink and Spark.

    python -m bench.nexmark.plots"""
from __future__ import annotations

import json
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from .run import RESULTS  # noqa: E402

OUT = os.path.dirname(RESULTS)


def newest(records: list, measurement: str, key) -> list:
    latest = {}
    for r in records:
        if r.get("measurement") == measurement:
            latest[key(r)] = r
    return list(latest.values())


def _save(fig, name: str) -> None:
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, name), dpi=110, metadata={"Software": None})
    plt.close(fig)
    print(os.path.join("docs", "benchmarks", name))


def _cqgate_runs(records: list) -> dict:
    """{client: {query: [events/s of each repeat]}} from the newest throughput run that
    measured each client."""
    ours = [r for r in records if r.get("measurement") == "throughput" and
            r.get("engine") == "cqgate" and r.get("run") and "events_per_s" in r
            and "spelling" not in r]          # (the Flink suite's runs: suite.png)
    out: dict = {}
    for client in sorted({r["client"] for r in ours}):
        mine = [r for r in ours if r["client"] == client]
        run = max(r["run"] for r in mine)
        for r in mine:
            if r["run"] == run:
                out.setdefault(client, {}).setdefault(r["query"], []).append(r["events_per_s"])
    return out


CLIENT_LABELS = {"copy": "cqgate, COPY (asyncpg)", "cursor": "cqgate, FETCH (psycopg)"}


def throughput(records: list) -> None:
    """Bars: cqgate's median per client (the range of its repeats as a line), the peers'."""
    series = {CLIENT_LABELS.get(c, c): {q: (float(np.median(v)), min(v), max(v))
                                        for q, v in runs.items()}
              for c, runs in _cqgate_runs(records).items()}
    for r in newest(records, "throughput", lambda r: (r["engine"], r["query"])):
        if r["engine"] != "cqgate" and "events_per_s" in r and "spelling" not in r:
            v = r["events_per_s"]
            series.setdefault(r["engine"], {})[r["query"]] = (v, v, v)
    if not series:
        return
    queries = sorted({q for s in series.values() for q in s})
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(series)
    for k, (label, vals) in enumerate(series.items()):
        xs = [i + k * width for i in range(len(queries))]
        mid = [vals.get(q, (0, 0, 0))[0] / 1e6 for q in queries]
        low = [m - vals.get(q, (0, 0, 0))[1] / 1e6 for q, m in zip(queries, mid)]
        high = [vals.get(q, (0, 0, 0))[2] / 1e6 - m for q, m in zip(queries, mid)]
        ax.bar(xs, mid, width, label=label, yerr=[low, high], capsize=2)
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(queries))], queries)
    ax.set_ylabel("million events/s")
    ax.set_title("NEXMark on 2 cores, every result row drained")
    ax.legend(fontsize=8)
    _save(fig, "throughput.png")


def latency(records: list) -> None:
    rows = newest(records, "latency", lambda r: (r["query"], r["rate"]))
    if not rows:
        return
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, query in zip(axes, ["pass-through", "hopping aggregate"]):
        for r in sorted((r for r in rows if r["query"] == query), key=lambda r: r["rate"]):
            ax.plot(r["cdf_ms"], range(len(r["cdf_ms"])), label=f"{r['rate']:,} events/s")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("ms from source to client")
        ax.set_title(query)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("percent of rows")
    axes[0].legend()
    _save(fig, "latency_cdf.png")


def memory(records: list) -> None:
    rows = newest(records, "memory", lambda r: r["query"])
    if not rows:
        return
    r = rows[-1]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot([s[0] / 60 for s in r["samples"]], [s[1] for s in r["samples"]])
    ax.set_xlabel("minutes")
    ax.set_ylabel("resident memory, MiB")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{r['query']} at {r['rate']:,.0f} events/s: gateway + back end")
    ax.grid(alpha=0.3)
    _save(fig, "memory.png")


def many(records: list) -> None:
    rows = sorted(newest(records, "many queries", lambda r: r["queries"]),
                  key=lambda r: r["queries"])
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(7, 3.4))
    n = [r["queries"] for r in rows]
    ax.plot(n, [r["events_per_s"] / 1e6 for r in rows], marker="o", label="stream events/s")
    one = rows[0]["events_per_s"] / 1e6
    ax.plot(n, [one * n[0] / k for k in n],
            linestyle=":", color="grey", label="if each query cost as much as one alone")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("concurrent continuous queries")
    ax.set_ylabel("million events/s")
    ax.set_title("Many queries over one stream (shared scan)")
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, "many_queries.png")


def suite(records: list) -> None:
    """Bars on a log scale: each engine's events/s on each query of the whole NEXMark suite,
    from the newest side-by-side run of it (a query an engine does not run has no bar)."""
    runs = [r for r in records if r.get("measurement") == "side by side" and r.get("suite")]
    if not runs:
        return
    # the newest of the runs that measured the most queries (a run of a few, smaller, is in
    # the table beside it)
    run = max(reversed(runs), key=lambda r: len(r["events_per_s"]))
    table, engines = run["events_per_s"], run["engines"]
    queries = list(table)
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / len(engines)
    for k, engine in enumerate(engines):
        xs = [i + k * width for i, q in enumerate(queries) if table[q].get(engine)]
        ys = [table[q][engine] for q in queries if table[q].get(engine)]
        ax.bar(xs, ys, width, label=engine)
    ax.set_xticks([i + width * (len(engines) - 1) / 2 for i in range(len(queries))], queries)
    ax.set_yscale("log")
    ax.set_ylabel("events/s")
    ax.set_title(f"NEXMark q0–q23 as Flink writes them, {run['events']:,} events, 2 cores")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, "suite.png")


def main() -> None:
    with open(RESULTS) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for draw in (throughput, latency, memory, many, suite):
        draw(records)


if __name__ == "__main__":
    main()
