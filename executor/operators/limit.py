"""LIMIT n: the first n rows the query produces; after them it is exhausted (its query ends)."""
from __future__ import annotations

from .. import plan as P
from .base import Operator


class Limit(Operator):
    def __init__(self, node: P.Limit):
        self.left = node.count

    def on_batch(self, batch, port=0):
        if self.left <= 0:
            return []
        out = batch.slice(0, self.left)
        self.left -= out.num_rows
        return [out]

    def exhausted(self) -> bool:
        return self.left <= 0
