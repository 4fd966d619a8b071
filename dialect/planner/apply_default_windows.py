"""The window each stream reference gets (DESIGN §5): the one written after it, else the one
TelegraphCQ's ``WINDOW alias [...]`` clause names for it, else ``[UNBOUNDED]`` (CQL's rule) —
except a stream with an ENDTIMESTAMPCOLUMN, whose tuples keep their own intervals.

>>> apply_default_windows(None, None, has_end_column=False)
UnboundedWindow()
>>> apply_default_windows(None, None, has_end_column=True)
IntervalWindow()
"""
from __future__ import annotations

from sqlglot import exp

from executor import plan as P

from .. import expressions as X
from ..errors import InvalidWindow, Unsupported
from ..intervals import interval_us


def size_us(e: exp.Expression) -> int:
    """A window size: '2 minutes', INTERVAL '1 DAY', 2 sec, or a bare number of seconds."""
    try:
        return _interval_of(e)
    except InvalidWindow as err:
        err.position = err.position or written_at(e)
        raise


def _interval_of(e: exp.Expression) -> int:
    if isinstance(e, X.UnitInterval):
        return interval_us(f"{e.this.name} {e.args['unit'].name}")
    if isinstance(e, exp.Interval):
        unit = e.args.get("unit")
        return interval_us(f"{e.this.name} {unit.name if unit is not None else ''}".strip())
    if isinstance(e, exp.Literal):
        return interval_us(e.name)
    raise InvalidWindow(f"window size must be a constant interval, not {e.sql('cql')}",
                        hint="Write e.g. [RANGE '10 seconds'] or [RANGE 10 SECONDS].")


def _timestamp_us(e: exp.Expression, to_us) -> int:
    if not isinstance(e, (exp.Literal, exp.Cast)):
        raise InvalidWindow(f"window edge must be a constant timestamp, not {e.sql('cql')}",
                            position=written_at(e))
    try:
        return to_us(e.name if isinstance(e, exp.Literal) else e.this.name)
    except InvalidWindow as err:
        err.position = err.position or written_at(e)
        raise


def _rows(spec: X.WindowSpec, to_expr) -> P.RowsWindow:
    n = spec.args["rows"]
    if not (isinstance(n, exp.Literal) and n.is_int and int(n.name) > 0):
        raise InvalidWindow(f"ROWS needs a positive integer, not {n.sql('cql')}",
                            position=written_at(n))
    where = spec.args.get("where")
    return P.RowsWindow(int(n.name), tuple(to_expr(p) for p in spec.args.get("partition_by")
                                           or ()),
                        to_expr(where) if where is not None else None)


def written_at(node: exp.Expression) -> int | None:
    """Where ``node`` was written (1-based, in the statement): the earliest of its parts the
    parser placed."""
    starts = [n.meta["start"] for n in node.walk() if "start" in n.meta]
    return min(starts) + 1 if starts else None


def window_of(spec: X.WindowSpec, to_expr, to_us):
    """The algebra's window for a parsed ``[...]``; an invalid one is a 22023 that points at
    what is wrong in it."""
    try:
        return _window_of(spec, to_expr, to_us)
    except InvalidWindow as e:
        if e.position is None:
            e.position = written_at(spec)
        raise


def _window_of(spec: X.WindowSpec, to_expr, to_us):
    kind = spec.args["kind"]
    if kind == "now":
        return P.NowWindow()
    if kind == "unbounded":
        return P.UnboundedWindow()
    if kind == "rows":
        return _rows(spec, to_expr)
    if kind == "between":
        low, high = (_timestamp_us(spec.args[k], to_us) for k in ("low", "high"))
        if high <= low:
            raise InvalidWindow("[BETWEEN t1 AND t2] needs t1 < t2")
        return P.FixedWindow(low, high)
    size = size_us(spec.args["size"])
    if size <= 0:
        raise InvalidWindow("a window's size must be positive")
    if kind == "slide":
        slide = size_us(spec.args["slide"])
        if slide <= 0:
            raise InvalidWindow("a window's SLIDE must be positive")
        start = spec.args.get("start")
        return P.SlideWindow(size, slide, _timestamp_us(start, to_us) if start is not None
                             else None)
    if spec.args.get("start") is not None:
        raise Unsupported("START AT needs SLIDE BY",
                          hint="Write [RANGE BY '5 seconds' SLIDE BY '1 second' START AT '…'].")
    return P.RangeWindow(size)


def apply_default_windows(written, from_clause, *, has_end_column: bool):
    """The window to use: ``written`` (after the reference) or ``from_clause`` (the WINDOW
    clause) as algebra windows, else the default."""
    if written is not None and from_clause is not None:
        raise Unsupported("a stream has a window both after it and in the WINDOW clause",
                          hint="Keep one of the two.")
    chosen = written if written is not None else from_clause
    if chosen is not None:
        return chosen
    return P.IntervalWindow() if has_end_column else P.UnboundedWindow()
