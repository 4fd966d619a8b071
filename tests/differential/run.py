"""A differential run: rounds of seeded cases through a server, some at the same time (as
sessions of several users are), their outcomes counted, each failure shrunk and reported.
The suite's test and ``scripts/differential.py`` both call ``differential_run``."""
from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .grammar import Generator
from .runner import Round, report, shrink, summary
from .world import RELATIONS, random_data

CASES_PER_ROUND = 50
# on Spark: fewer cases a round, one round at a time (each query there is a streaming job
# with its Python workers, on the machine's cores)
SPARK_CASES_PER_ROUND = 8


@dataclass
class RunResult:
    outcomes: list = field(default_factory=list)
    failures: list = field(default_factory=list)     # (shrunk outcome, its data, as found)
    seconds: float = 0.0

    def text(self) -> str:
        lines = [summary(self.outcomes), f"in {self.seconds:.1f} s"]
        for shrunk, data, found in self.failures:
            lines += ["", report(shrunk, data),
                      f"  (as found, before shrinking: "
                      f"{found.case.cql({r: r for r in RELATIONS})})"]
        return "\n".join(lines)


def differential_run(dsn: str, seed: int, queries: int, *, parallel: int = 2,
                     shrink_budget: int = 150, shrink_at_most: int = 5,
                     progress=None, engine: str = "backend") -> RunResult:
    """``queries`` cases from ``seed`` in rounds of ``CASES_PER_ROUND``, each round with data
    of its own, ``parallel`` rounds at a time on the one server; every outcome judged, at most
    ``shrink_at_most`` failures shrunk (one at a time, alone on the server). The cases and
    data are drawn before anything runs, so a seed always makes the same ones. ``engine``
    spark: every case a cursor on Spark and no other way, ``SPARK_CASES_PER_ROUND`` a round,
    one round at a time."""
    spark = engine == "spark"
    per_round = SPARK_CASES_PER_ROUND if spark else CASES_PER_ROUND
    variants = ("spark",) if spark else None
    gen, rng = Generator(seed), random.Random(seed)
    rounds = []
    for r in range((queries + per_round - 1) // per_round):
        data = random_data(rng)
        n = min(per_round, queries - r * per_round)
        rounds.append((data, [gen.case() for _ in range(n)]))
    result, started = RunResult(), time.monotonic()
    with ThreadPoolExecutor(max_workers=1 if spark else parallel) as pool:
        for r, ((data, _), outcomes) in enumerate(zip(rounds, pool.map(
                lambda rd: Round(dsn, rd[1], rd[0], variants).run(), rounds))):
            result.outcomes += [(o, data) for o in outcomes]
            if progress is not None:
                progress(r, result)
    found = [(o, data) for o, data in result.outcomes if o.failed]
    result.outcomes = [o for o, _ in result.outcomes]
    for k, (o, data) in enumerate(found):
        small, small_data = shrink(dsn, o, data, shrink_budget) if k < shrink_at_most \
            else (o, data)
        result.failures.append((small, small_data, o))
    result.seconds = time.monotonic() - started
    return result
