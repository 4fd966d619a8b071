"""ω for the windows that decide each tuple's interval from the tuple alone (seed 000 §2,
DESIGN §5), on whole batches: each kind's ``assign`` (``executor/windows``) says how."""
from __future__ import annotations

from ..operators.base import Stateless


class TimeWindow(Stateless):
    def __init__(self, window):
        self.window = window
        self.transform = window.assign


def supports(window) -> bool:
    return window.assign is not None
