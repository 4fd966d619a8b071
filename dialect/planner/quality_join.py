"""A join of two windowed streams with a recall target (seed 003's QJoin): ``WITH (recall =
0.95, period = '1 minute')`` after the SELECT, or the session's ``cq.join_recall``, makes the
stream–stream join the quality-driven join; refused (0A000) where its rows, which leave in
the order they are found, could not go (a named window or derived stream plans it with
``joins_in_order``: its rows held to valid_from order).

Options: ``recall`` (0 < recall <= 1), ``period`` (P, 1 minute), ``adapt`` (L, 1 second),
``granularity`` (g, 10 ms) and ``basic_window`` (b, 10 ms), the paper's defaults.
"""
from __future__ import annotations

import dataclasses

from sqlglot import exp

from executor import plan as P

from ..errors import InvalidWindow, PlanError, Unsupported, written_at
from ..intervals import interval_us
from .join_state import STATE_TTL

DEFAULTS = {"period": 60_000_000, "adapt": 1_000_000, "granularity": 10_000,
            "basic_window": 10_000}
_ABOVE = (P.Map, P.Filter, P.Limit)       # what may read its rows: each row on its own


def _recall(value) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError
    return number


def _duration(least_us: int):
    def parse(value) -> int:
        try:
            us = interval_us(str(value))
        except PlanError:
            raise ValueError from None
        if us < least_us:
            raise ValueError
        return us
    return parse


# the least each may be: finer bins or slices than a millisecond cost memory, not accuracy
_PARSE = {"recall": _recall, "period": _duration(1_000_000), "adapt": _duration(1_000),
          "granularity": _duration(1_000), "basic_window": _duration(1_000)}


def session_options(recall: str, period: str) -> dict | None:
    """The session's target (``cq.join_recall``, ``cq.join_recall_period``), or None (off)."""
    if recall.strip().lower() in ("", "off", "none"):
        return None
    out = {}
    for name, text in (("recall", recall), ("period", period)):
        try:
            out[name] = _PARSE[name](text)
        except ValueError:
            setting = "cq.join_recall" + ("" if name == "recall" else "_period")
            raise InvalidWindow(f"invalid value for {setting}: {text}",
                                hint="cq.join_recall is off or a number above 0 and at most "
                                     "1; cq.join_recall_period an interval.") from None
    return out


ENGINE_OPTION = "engine"     # WITH (engine = …) beside them says where the query runs
# how its rows are delivered: progress rows, and where a resumed query goes on from
DELIVERY_OPTIONS = ("progress", "resume_from")
# the query's own options beside a recall target's
_NOT_QUALITY = (ENGINE_OPTION, STATE_TTL, *DELIVERY_OPTIONS)


def written(sel: exp.Select) -> list:
    """The join options written after the SELECT (not ``engine``, which is the query's, nor
    ``state_ttl``)."""
    return [o for o in sel.args.get("join_options") or []
            if o.this.name.lower() not in _NOT_QUALITY]


def options(sel: exp.Select, session: dict | None) -> dict | None:
    """The join's quality options (the query's over the session's), or None: no target."""
    written_ = written(sel)
    out = dict(session or {})
    for opt in written_:
        name = opt.this.name.lower()
        parse = _PARSE.get(name)
        value = opt.args["value"]
        text = value.name if isinstance(value, (exp.Literal, exp.Identifier)) else value.sql()
        if parse is None:
            raise InvalidWindow(f'unrecognized join option "{name}"', position=written_at(opt),
                                hint="The options are recall, period, adapt, granularity, "
                                     "basic_window, state_ttl (how long a join keeps a "
                                     "tuple), and engine (where the query runs).")
        try:
            out[name] = parse(text)
        except ValueError:
            raise InvalidWindow(f'invalid value for join option "{name}": {text}',
                                position=written_at(opt),
                                hint="recall is a number above 0 and at most 1; the others "
                                     "are intervals such as '1 second' (at least 1 ms, the "
                                     "period at least 1 second).") from None
    if "recall" not in out:
        if written_:
            raise InvalidWindow("a join's options need recall", position=written_at(
                written_[0]), hint="WITH (recall = 0.95) asks for 95 % of the results.")
        return None
    return out


def where(sel: exp.Select):
    """Where errors about the target point: its WITH, else the SELECT."""
    options_ = written(sel)
    return written_at(options_[0]) if options_ else written_at(sel)


def _range_of(node, alias: str, at) -> int:
    """The size of the RANGE window a join side reads its stream through."""
    while not isinstance(node, (P.Window, P.StreamScan)):
        children = P.children(node)
        if len(children) != 1:
            break
        node = children[0]
    if isinstance(node, P.Window) and isinstance(node.window, P.RangeWindow) \
            and isinstance(node.input, (P.StreamScan, P.Filter)):
        return node.window.size_us
    raise Unsupported(f'a join with a recall target reads streams through RANGE windows; '
                      f'"{alias}" is not one', hint="Write the stream as s [RANGE '2 seconds'].",
                      position=at)


def quality_join(join: P.Join, aliases: tuple, opts: dict, at,
                 in_order: bool = False) -> P.QualityJoin:
    """The stream–stream join ``join`` of two windowed streams as the quality-driven join
    (``in_order``: its rows held until they can leave in valid_from order)."""
    if join.kind != "stream-stream" or isinstance(join.left, (P.Join, P.QualityJoin)):
        raise Unsupported("a recall target applies to a join of two streams",
                          hint="Join two streams, each with a RANGE window.", position=at)
    spans = (_range_of(join.left, aliases[0], at), _range_of(join.right, aliases[1], at))
    o = {**DEFAULTS, **opts}
    return P.QualityJoin(_arrivals(join.left), _arrivals(join.right), join.equi,
                         join.residual, join.schema, spans,
                         o["recall"], o["period"], o["adapt"], o["granularity"],
                         o["basic_window"], in_order)


def _arrivals(node):
    """A join side with its stream scan reading the stream's arrivals (before its slack)."""
    if isinstance(node, P.StreamScan):
        return dataclasses.replace(node, arrival=True)
    return dataclasses.replace(node, input=_arrivals(node.input))


def check_above(root, at, in_order: bool = False) -> None:
    """Only row-by-row steps may read a quality-driven join's rows: they leave in the order
    they are found, and anything that keeps state reads rows in valid_from order (which a
    named window's or derived stream's join, ``in_order``, gives)."""
    if in_order:
        return
    node = root
    while isinstance(node, _ABOVE):
        node = node.input
    if isinstance(node, P.QualityJoin):
        return
    if _contains(root):
        raise Unsupported("a join with a recall target gives its rows in the order it finds "
                          "them, so it cannot feed an aggregate, DISTINCT or another join in "
                          "the same query", hint="Make the join a derived stream (CREATE "
                          "STREAM … AS), whose rows come in valid_from order, and aggregate "
                          "that; or read the join's rows through a cursor.", position=at)


def _contains(node) -> bool:
    return isinstance(node, P.QualityJoin) or any(_contains(c) for c in P.children(node))
