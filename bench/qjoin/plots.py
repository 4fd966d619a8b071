"""The QJoin experiment's picture from ``run.py --json``: recall per period for each engine,
and mean latency and tuples buffered against the recall target beside the two slack
baselines. The run with its rows held to valid_from order has the same rows as QJoin 0.95
and holds results, not tuples: it is shown on the latency panel only.

    python -m bench.qjoin.plots RESULTS.json OUT.png
"""
from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def draw(results: dict, path: str) -> None:
    runs = results["runs"]
    ordered = [s for s in runs if s["engine"].endswith("in order")]
    runs = [s for s in runs if s not in ordered]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.8))
    for s in runs:
        a.plot(range(1, len(s["periods"]) + 1), s["periods"], marker=".", label=s["engine"])
    a.set(xlabel="period", ylabel="recall", title=f"recall per period ({results['title']})")
    a.legend(fontsize=7)
    qjoin = [s for s in runs if s["engine"].startswith("QJoin")]
    slack = [s for s in runs if not s["engine"].startswith("QJoin")]
    for ax, key, label, extra in ((b, "latency_ms", "mean latency, ms (log)", ordered),
                                  (c, "buffered", "tuples buffered (mean)", [])):
        ax.plot([_target(s) for s in qjoin], [s[key] for s in qjoin], marker="o",
                label="QJoin")
        for s in extra:
            ax.plot([_target(s)], [s[key]], marker="s", linestyle="", label=s["engine"])
        for s, style in zip(slack, ("--", ":")):
            ax.axhline(s[key], linestyle=style, color="grey", label=s["engine"])
        ax.set(xlabel="recall target", ylabel=label)
        ax.legend(fontsize=7)
    b.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _target(run: dict) -> float:
    return float(run["engine"].split()[1])          # "QJoin 0.95 …"


def main(argv=None) -> None:
    src, out = (argv or sys.argv[1:])[:2]
    with open(src) as f:
        draw(json.load(f), out)
    print(out)


if __name__ == "__main__":
    main()
