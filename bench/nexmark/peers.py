"""Peer engines for the side-by-side NEXMark run, each in its own virtual environment (PyFlink
pins older pyarrow and numpy than cqgate's, so it cannot share the project's).

    python -m bench.nexmark.peers setup pyflink spark     # create and fill the venvs, once
    python -m bench.nexmark.run side-by-side              # uses them

The venvs live in ``bench/.venvs/<engine>`` (``CQGATE_BENCH_VENVS`` moves them). Each engine's
program (``peer_flink.py``, ``peer_spark.py``) needs nothing from the project: it reads the
generator's CSV files and prints one JSON line per query."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@dataclass(frozen=True)
class Engine:
    name: str
    packages: tuple        # what pip installs into the engine's venv
    program: str           # its NEXMark program, beside this file


ENGINES = {e.name: e for e in [
    Engine("pyflink", ("apache-flink==2.3.0",), "peer_flink.py"),
    Engine("spark", ("pyspark==4.3.0",), "peer_spark.py"),
]}


def venv(engine: str) -> str:
    base = os.environ.get("CQGATE_BENCH_VENVS", os.path.join(ROOT, "bench", ".venvs"))
    return os.path.join(base, engine)


def python(engine: str) -> str:
    return os.path.join(venv(engine), "bin", "python")


def ready(engine: str) -> bool:
    return os.path.exists(python(engine))


def setup(engine: str) -> None:
    """Create the engine's venv and install its packages (idempotent)."""
    e = ENGINES[engine]
    if not ready(engine):
        subprocess.run([sys.executable, "-m", "venv", venv(engine)], check=True)
    subprocess.run([python(engine), "-m", "pip", "install", "--quiet", *e.packages],
                   check=True)
    print(f"{engine}: {venv(engine)} has {', '.join(e.packages)}", flush=True)


def run(engine: str, events_dir: str, queries: list[str], log_path: str, watch,
        timeout: float = 3600, options: tuple = ()) -> tuple[dict, object]:
    """Run ``queries`` over the files in ``events_dir`` through ``engine``; returns
    ({query: {"rows", "seconds"} or {"error"}}, what ``watch(pid)`` made of the engine's
    process while it ran: a context manager, the memory sampler). The engine's own output
    goes to ``log_path``; ``options``: more of the program's arguments (``--suite``)."""
    if not ready(engine):
        raise SystemExit(f"{engine} is not set up: run `python -m bench.nexmark.peers setup "
                         f"{engine}` first (it installs into {venv(engine)})")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": python(engine), "PYTHONPATH": ""}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [python(engine), os.path.join(HERE, ENGINES[engine].program), events_dir,
             "--queries", ",".join(queries), *options], stdout=subprocess.PIPE, stderr=log,
            env=env)
        with watch(proc.pid) as watched:
            stdout, _ = proc.communicate(timeout=timeout)
    out = {}
    for line in stdout.decode().splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            out[rec.pop("query")] = rec
    for q in queries:
        out.setdefault(q, {"error": f"{engine} exited with {proc.returncode} before it; "
                                    f"see {log_path}"})
    return out, watched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("setup", help="create the engines' venvs and install them")
    s.add_argument("engines", nargs="*", help=f"of {', '.join(ENGINES)} (default: all)")
    args = ap.parse_args()
    unknown = set(args.engines) - set(ENGINES)
    if unknown:
        ap.error(f"unknown engine(s) {', '.join(sorted(unknown))}; choose from "
                 f"{', '.join(ENGINES)}")
    for engine in args.engines or list(ENGINES):
        setup(engine)


if __name__ == "__main__":
    main()
