"""ω SESSION fused with α, on whole batches, when the GROUP BY holds the session's end
(``wend(*)``, which a grouped query reading a session's bounds groups by): every tuple of such
a group leaves the window at once, when its session ends, valid [end, end + gap), so each
group's row is final as it comes: aggregated by Arrow per batch and sent whole, valid for the
same interval, where α would cut it at each BOUNDARY inside that interval. The window's state
is the open sessions (``windows/session_window.py``); this keeps nothing more.
"""
from __future__ import annotations

from ... import plan as P
from ...batches import TE, TS, Watermark
from ...duck import quote
from ...windows.session_window import SessionWindow
from ..base import Operator
from ..filter_map import Projection
from .slide_aggregate import groupable, grouped


def supports(node: P.Aggregate) -> bool:
    end = quote(node.input.window.columns[1])
    return groupable(node) and any(k.expr.sql == end for k in node.keys)


class SessionAggregate(Operator):
    def __init__(self, node: P.Aggregate, window: P.SessionWindow):
        self.node = node
        self.window = SessionWindow(window)
        self.keys = [k.name for k in node.keys]
        self.partials = [p.name for p in node.partials]
        self.funcs = [p.func for p in node.partials]
        self.input = self.final = None          # Projections over the cursor ``open`` takes

    def open(self, context):
        self.con = self.window.con = context.cursor()
        node = self.node
        one = P.Expr("1", (), "INTEGER", ("int", "1"))
        self.input = Projection([(k.name, k.expr) for k in node.keys] +
                                [(p.name, p.arg if p.arg is not None else one)
                                 for p in node.partials], [TS, TE], self.con)
        self.final = Projection([(f.name, f.expr) for f in node.finals], [TS, TE], self.con,
                                name="r")

    def close(self):
        self.window.con = None              # the same cursor, closed once
        super().close()

    def _rows(self, messages: list) -> list:
        """The window's closed sessions as the aggregate's rows (watermarks as they are)."""
        out = []
        for m in messages:
            if isinstance(m, Watermark):
                out.append(m)
                continue
            rows = grouped(self.input.run(m), self.keys + [TS, TE], self.partials,
                           self.funcs).sort_by([(TS, "ascending"), (TE, "ascending")])
            out += self.final.run(rows).to_batches()
        return out

    def on_batch(self, batch, port=0):
        return self._rows(self.window.on_batch(batch))

    def on_watermark(self, ts, port=0):
        return self._rows(self.window.on_watermark(ts))

    def on_end(self):
        return self._rows(self.window.on_end())

    def state_size(self) -> int:
        return self.window.state_size()
