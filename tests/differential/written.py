"""Queries written by hand for the differential judge: a select list and the rest of the query
in cqgate's SQL and in the oracle's, with the stream references they read (the tests of a
construct run them over seeded data sets, as the generator's cases run)."""
from __future__ import annotations

import random
from dataclasses import dataclass

from .grammar import Case
from .runner import Round
from .world import Ref, Window, random_data


@dataclass
class Written:
    """A query written by hand: its select list and the rest, in cqgate's SQL (relations as
    ``{s1}``, ``{tb}`` … and windows after them) and in the oracle's (``snapN(@T@)``)."""
    items: str
    cql_rest: str
    oracle_rest: str
    pseudo: bool = True
    oracle_items: str | None = None       # the select list in the oracle's SQL, if not items

    def render(self, mode: str, names: dict) -> str:
        if mode == "cql":
            query = f"SELECT {self.items.format(**names)} {self.cql_rest.format(**names)}"
            if not self.pseudo:
                return query
            if self.items.startswith("DISTINCT"):     # the pseudo-columns come first
                return f"SELECT valid_from, valid_to, * FROM ({query}) AS top"
            return f"SELECT valid_from, valid_to, {query[len('SELECT '):]}"
        return "SELECT " + (self.oracle_items or self.items).format(**ORACLE_NAMES) \
            + f" {self.oracle_rest}"


# the round's own objects as the oracle names them
ORACLE_NAMES = {"fn": "fn", "pyfn": "pyfn"}


def range_window(seconds: float) -> Window:
    return Window("range", size=int(seconds * 1_000_000))


def refs(*specs) -> list:
    """(relation, window, alias) each, as the references snap0, snap1 … read."""
    return [Ref(rel, window, alias, index=i) for i, (rel, window, alias) in enumerate(specs)]


def judged(dsn: str, case, max_tuples: int = 12, seeds=range(4)) -> tuple[list, int]:
    """``case`` as a cursor, a derived stream and in snapshot mode, over a seeded data set per
    seed (tuples in several batches, NULLs, ties): (what was not right, as (how, status,
    SQLSTATE, message, detail); the rows the answers held)."""
    outcomes = []
    for seed in seeds:
        data = random_data(random.Random(seed), max_tuples=max_tuples)
        outcomes += Round(dsn, [case], data, variants=("derived", "snapshot")).run()
    # (a derived stream or named window that reads a table cannot be resumed: refused)
    bad = [(o.how, o.status, o.sqlstate, o.message, o.detail) for o in outcomes
           if o.status != "ok" and not (o.how in ("derived resumed", "window resumed") and
                                        o.status == "refused" and
                                        o.sqlstate in ("0A000", "55000"))]
    return bad, sum(o.rows for o in outcomes)


def assert_right(dsn: str, written: Written, read: list, max_tuples: int = 12) -> None:
    """``judged``'s verdict on a hand-written query over references ``read``, asserted: right
    in every reading, and not every answer empty."""
    bad, rows = judged(dsn, Case(written, read), max_tuples)
    assert not bad, bad
    assert rows > 0, "every answer was empty"
