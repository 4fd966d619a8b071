"""``ON OVERLOAD``, as pure code: what a stream does with a batch while the back end is behind.
BLOCK waits for it and sheds nothing; DROP sheds the batch; KEEP COUNTS sheds it and lists how
many tuples each event-time second lost (``cq_shed``); KEEP SAMPLE delivers an even share
(``sample``, default 10 %) and lists the counts, so a query can scale its answers up."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


def _everything(n: int, seen: int, share: float) -> np.ndarray:
    return np.ones(n, bool)


def _nothing(n: int, seen: int, share: float) -> np.ndarray:
    return np.zeros(n, bool)


def _even_sample(n: int, seen: int, share: float) -> np.ndarray:
    # tuple i (counting every tuple the policy has seen) is kept when i·share crosses an
    # integer, so the sample is spread evenly across batches, not taken from each one's head
    i = seen + np.arange(n)
    return np.floor((i + 1) * share) > np.floor(i * share)


@dataclass(frozen=True)
class Overload:
    blocks: bool          # the sender waits for the back end instead of shedding
    counted: bool         # what is shed is listed per event-time second (cq_shed)
    keep: Callable[[int, int, float], np.ndarray] = _nothing   # (n, seen, share) -> mask


POLICIES = {
    "BLOCK": Overload(blocks=True, counted=False, keep=_everything),
    "DROP": Overload(blocks=False, counted=False),
    "KEEP COUNTS": Overload(blocks=False, counted=True),
    "KEEP SAMPLE": Overload(blocks=False, counted=True, keep=_even_sample),
}


def blocks(policy: str) -> bool:
    """Whether a stream under ``policy`` waits for a busy back end rather than shedding."""
    return POLICIES[policy].blocks


def kept(policy: str, n: int, seen: int, share: float) -> np.ndarray:
    """Which of a batch of ``n`` tuples ``policy`` delivers while the back end is behind;
    ``seen``: the tuples it has delivered or shed before, ``share``: KEEP SAMPLE's share."""
    return POLICIES[policy].keep(n, seen, share)


def counted(policy: str) -> bool:
    """Whether ``cq_shed`` lists what ``policy`` sheds."""
    return POLICIES[policy].counted
