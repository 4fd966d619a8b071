"""What frees a stream–stream join's state: interval joins and ``state_ttl``.

A conjunct ``X.t <= f(Y)`` (or ``<``, ``=``, ``BETWEEN``, either way round), where ``X.t`` is
the event-time column of X's tuples (so equal to their valid_from) and ``f`` reads only Y's
columns, says that a stored Y tuple can meet no X tuple that starts after ``f(Y)``: once the
join's frontier passes it, the tuple is dropped, whatever its window (``Join.keep``). This
bounds the join of two streams without windows (NEXMark q4's ``B.t BETWEEN A.t AND
A.expires``), which is otherwise refused. ``WITH (state_ttl = '1 hour')`` after the SELECT
bounds every stream–stream join of the query instead, by joining only tuples whose event times
are less than that apart (a condition added to each join, ``Join.ttl_us`` says why): an exact
event-time rule where Flink's idle-state retention depends on when rows were processed.

>>> t = P.Expr('"b.t"', ("b.t",), "TIMESTAMP")
>>> e = P.Expr('"a.expires"', ("a.expires",), "TIMESTAMP")
>>> keep_expr([Bound(t, e)], frozenset({"b.t"}), {"a.expires", "a.t"}).sql
'epoch_us("a.expires") + 1'
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from executor import plan as P
from executor.duck import quote

from ..errors import InvalidWindow, PlanError, Unsupported, written_at
from ..intervals import interval_us

STATE_TTL = "state_ttl"        # WITH (state_ttl = '…') after a SELECT


@dataclass(frozen=True)
class Bound:
    """``small <= big`` holds for every pair the join keeps (both algebra Exprs)."""
    small: P.Expr
    big: P.Expr


# each comparison as (small, big) pairs of its operands: a <= b, a < b, a = b (both ways)
_ORDERS = {
    exp.LT: lambda a, b: [(a, b)], exp.LTE: lambda a, b: [(a, b)],
    exp.GT: lambda a, b: [(b, a)], exp.GTE: lambda a, b: [(b, a)],
    exp.EQ: lambda a, b: [(a, b), (b, a)],
}


def bounds(part: exp.Expression, to_expr) -> tuple:
    """The order facts of one conjunct (``to_expr``: a sqlglot operand as an algebra Expr)."""
    if isinstance(part, exp.Between):
        pairs = [(part.args["low"], part.this), (part.this, part.args["high"])]
    elif type(part) in _ORDERS:
        pairs = _ORDERS[type(part)](part.this, part.expression)
    else:
        return ()
    return tuple(Bound(to_expr(a), to_expr(b)) for a, b in pairs)


def time_columns(node) -> frozenset:
    """The columns of ``node``'s rows that equal each row's valid_from: a stream's event-time
    column, through filters, renames and the windows that keep a tuple's start."""
    if isinstance(node, P.StreamScan):
        if node.timestamp_column is None or node.arrival:
            return frozenset()
        name = node.timestamp_column.lower()
        return frozenset(c.name for c in node.schema if c.name.split(".", 1)[-1].lower() == name)
    if isinstance(node, P.Window):
        # (a count window's tuples come in pieces split at watermarks, each starting later)
        keeps_start = isinstance(node.window, (P.UnboundedWindow, P.RangeWindow, P.NowWindow,
                                               P.IntervalWindow))
        return time_columns(node.input) if keeps_start else frozenset()
    if isinstance(node, P.Filter):
        return time_columns(node.input)
    if isinstance(node, P.Map):
        below = time_columns(node.input)
        return frozenset(o.name for o in node.outputs
                         if len(o.expr.columns) == 1 and o.expr.columns[0] in below
                         and o.expr.sql == quote(o.expr.columns[0]))
    return frozenset()


def _zone(typ: str) -> bool | None:
    """Whether a timestamp type has a time zone (None: not a timestamp)."""
    t = typ.upper()
    return None if not t.startswith("TIMESTAMP") else ("TIME ZONE" in t or t == "TIMESTAMPTZ")


def keep_expr(facts: list, times: frozenset, columns: set):
    """The Expr (BIGINT µs) after which a stored tuple of the side with ``columns`` meets no
    later tuple of the other side, whose valid_from is in its columns ``times``; None when
    no fact bounds it."""
    parts, read = [], []
    for f in facts:
        if len(f.small.columns) != 1 or f.small.sql != quote(f.small.columns[0]) or \
                f.small.columns[0] not in times or not f.big.columns or \
                not set(f.big.columns) <= columns:
            continue
        if _zone(f.big.type) is None or _zone(f.big.type) != _zone(f.small.type):
            continue
        parts.append(f"epoch_us({f.big.sql})")
        read += [c for c in f.big.columns if c not in read]
    if not parts:
        return None
    # +1: a later tuple starting at big's own µs may still meet it (and a TIMESTAMP_NS bound
    # is cut to its µs); NULL (a bound that meets nothing) is the executor's to read
    least = parts[0] if len(parts) == 1 else f"least({', '.join(parts)})"
    return P.Expr(f"{least} + 1", tuple(read), "BIGINT")


def stream_join(left, right, facts: list, residual: list, ttl_us: int | None, at) -> tuple:
    """What a join of streams ``left`` and ``right`` keeps: (its residual, with state_ttl's
    condition when ``ttl_us`` is set; (left's, right's) keep Exprs, the sooner of what its
    order ``facts`` and the ttl allow). ``at``: where an error about the ttl points."""
    keeps = (keep_expr(facts, time_columns(right), {c.name for c in left.schema}),
             keep_expr(facts, time_columns(left), {c.name for c in right.schema}))
    if ttl_us is None:
        return residual, keeps
    cond, ttl = _ttl_condition(left, right, ttl_us, at)
    return residual + [cond], tuple(
        b if a is None else P.Expr(f"least({a.sql}, {b.sql})", tuple(
            dict.fromkeys(a.columns + b.columns)), "BIGINT") for a, b in zip(keeps, ttl))


def _ttl_condition(left, right, ttl_us: int, at) -> tuple:
    """State_ttl on one join: (the condition it adds, both sides' keeps). It reads each
    side's event time, which a side that is not a stream read by it lacks."""
    times = [sorted(time_columns(side)) for side in (left, right)]
    if not all(times):
        raise Unsupported("state_ttl needs both sides of each join of streams to be a stream "
                          "whose tuples start at their event time (a TIMESTAMPCOLUMN, under "
                          "no window, RANGE, NOW or its own intervals)", position=at,
                          hint="Join the streams two at a time in queries in FROM, or give "
                               "the sides RANGE windows.")
    tl, tr = (quote(t[0]) for t in times)
    cond = P.Expr(f"abs(epoch_us({tl}) - epoch_us({tr})) < {ttl_us}",
                  (times[0][0], times[1][0]), "BOOLEAN")
    return cond, (P.Expr(f"epoch_us({tl}) + {ttl_us}", (times[0][0],), "BIGINT"),
                  P.Expr(f"epoch_us({tr}) + {ttl_us}", (times[1][0],), "BIGINT"))


def state_ttl(sel: exp.Select) -> int | None:
    """``WITH (state_ttl = '…')`` after the SELECT, in µs (None: not written)."""
    for opt in sel.args.get("join_options") or []:
        if opt.this.name.lower() != STATE_TTL:
            continue
        value = opt.args["value"]
        text = value.name if isinstance(value, (exp.Literal, exp.Identifier)) else value.sql()
        try:
            us = interval_us(text)
        except PlanError:
            us = 0
        if us <= 0:
            raise InvalidWindow(f'invalid value for state_ttl: {text}', position=written_at(opt),
                                hint="state_ttl is a positive interval, e.g. '1 hour'.")
        return us
    return None


def ttl_at(sel: exp.Select):
    """Where errors about the query's state_ttl point."""
    return next((written_at(o) for o in sel.args.get("join_options") or []
                 if o.this.name.lower() == STATE_TTL), None)


def check_ttl_used(sel: exp.Select, root) -> None:
    """A state_ttl must bound something: a query without a join of two streams says so."""
    if state_ttl(sel) is None or _has_stream_join(root):
        return
    raise Unsupported("state_ttl applies to a join of two streams, and this query has none",
                      position=ttl_at(sel), hint="Drop WITH (state_ttl = …).")


def _has_stream_join(node) -> bool:
    return (isinstance(node, P.Join) and node.kind == "stream-stream") or any(
        _has_stream_join(c) for c in P.children(node))
