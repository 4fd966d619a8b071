"""Each window kind the dialect reads between a stream's brackets, one class each: how it prints
back as written (``text``) and the algebra's window it plans to (``window``, an invalid one a
22023 pointing at what is wrong in it). Its syntax is read by the parser
(``CQLParser._parse_stream_window``, which knows sqlglot's token reader) into a ``StreamWindow``
whose ``kind`` names the class here; the executor's side of a kind (its interval, reach and
late reach) is its class in ``executor/windows``. Adding a kind: its words in the parser, a
class here and one there, and an operator if its ω keeps state.

>>> window_of(X.StreamWindow(kind="range", size=exp.Literal.string("2 seconds")), None, None)
RangeWindow(size_us=2000000)
"""
from __future__ import annotations

from sqlglot import exp

from executor import plan as P

from . import expressions as X
from .errors import InvalidWindow, Unsupported, written_at
from .intervals import interval_us


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


class Now:
    """``[NOW]``: each tuple for one instant."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        return "NOW"

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        return P.NowWindow()


class Unbounded:
    """``[UNBOUNDED]`` or ``[RANGE UNBOUNDED]``: every tuple from its time on."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        return "RANGE UNBOUNDED" if e.args.get("style") == "range" else "UNBOUNDED"

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        return P.UnboundedWindow()


class Between:
    """``[BETWEEN t1 AND t2]``: a fixed window."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        return f"BETWEEN {gen.sql(e, 'low')} AND {gen.sql(e, 'high')}"

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        low, high = (_timestamp_us(spec.args[k], to_us) for k in ("low", "high"))
        if high <= low:
            raise InvalidWindow("[BETWEEN t1 AND t2] needs t1 < t2")
        return P.FixedWindow(low, high)


class Rows:
    """``[ROWS n]``, ``[PARTITION BY keys ROWS n WHERE p]``: the last n tuples (of each
    partition)."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        part = e.args.get("partition_by")
        body = (f"PARTITION BY {gen.expressions(e, key='partition_by', flat=True)} "
                if part else "") + f"ROWS {gen.sql(e, 'rows')}"
        if e.args.get("where") is not None:
            body += f" WHERE {gen.sql(e, 'where')}"
        return body

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        n = spec.args["rows"]
        if not (isinstance(n, exp.Literal) and n.is_int and int(n.name) > 0):
            raise InvalidWindow(f"ROWS needs a positive integer, not {n.sql('cql')}",
                                position=written_at(n))
        where = spec.args.get("where")
        return P.RowsWindow(int(n.name), tuple(to_expr(p) for p in
                                               spec.args.get("partition_by") or ()),
                            to_expr(where) if where is not None else None)


class Range:
    """``['2 minutes']``, ``[RANGE 2 MINUTES]``, ``[RANGE BY …]``: a sliding window of a
    size."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        style = e.args.get("style")
        if style == "short":
            return gen.sql(e, "size")
        by = " BY" if style == "range_by" else ""
        body = f"RANGE{by} {gen.sql(e, 'size')}"
        if e.args.get("slide") is not None:
            body += f" SLIDE{by} {gen.sql(e, 'slide')}"
        if e.args.get("start") is not None:
            body += f" START AT {gen.sql(e, 'start')}"
        return body

    @staticmethod
    def size(spec: X.StreamWindow) -> int:
        size = size_us(spec.args["size"])
        if size <= 0:
            raise InvalidWindow("a window's size must be positive")
        return size

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        size = Range.size(spec)
        if spec.args.get("start") is not None:
            raise Unsupported("START AT needs SLIDE BY", hint="Write [RANGE BY '5 seconds' "
                              "SLIDE BY '1 second' START AT '…'].")
        return P.RangeWindow(size)


class Slide:
    """``[RANGE i SLIDE j [START AT t]]``: a hopping window."""
    text = Range.text

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        size = Range.size(spec)
        slide = size_us(spec.args["slide"])
        if slide <= 0:
            raise InvalidWindow("a window's SLIDE must be positive")
        start = spec.args.get("start")
        return P.SlideWindow(size, slide, _timestamp_us(start, to_us) if start is not None
                             else None)


class Session:
    """``[SESSION gap]``, ``[PARTITION BY keys SESSION gap]``: each partition's sessions (runs
    of tuples less than the gap apart), each the answer for one gap after it ends."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        part = e.args.get("partition_by")
        return (f"PARTITION BY {gen.expressions(e, key='partition_by', flat=True)} "
                if part else "") + f"SESSION {gen.sql(e, 'size')}"

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        gap = size_us(spec.args["size"])
        if gap <= 0:
            raise InvalidWindow("a session's gap must be positive")
        return P.SessionWindow(gap, tuple(to_expr(p) for p in
                                          spec.args.get("partition_by") or ()))


class Grid:
    """Flink's TUMBLE, HOP and CUMULATE (``X.WindowTable``): windows [start, end), each tuple
    once per window with the window's bounds as columns (``GridWindow``)."""

    @staticmethod
    def text(gen, e: X.StreamWindow) -> str:
        return " ".join(f"{k.upper()} {gen.sql(e, k)}" for k in ("size", "slide", "offset")
                        if e.args.get(k) is not None) + f" ({e.args['kind'].upper()})"

    @staticmethod
    def window(spec: X.StreamWindow, to_expr, to_us):
        size = Range.size(spec)
        step = size_us(spec.args["slide"]) if spec.args.get("slide") is not None else size
        offset = spec.args.get("offset")
        offset = size_us(offset) if offset is not None else 0
        kind = spec.args["kind"]
        if step <= 0 or size % step:
            raise InvalidWindow(f"{kind.upper()}'s size must be a positive multiple of its "
                                f"{'step' if kind == 'cumulate' else 'slide'}",
                                position=spec.meta.get("start"))
        return P.GridWindow(size, step, cumulative=kind == "cumulate", offset_us=offset)


def apply_default_windows(written, from_clause, *, has_end_column: bool):
    """The window a stream reference gets (DESIGN §5): ``written`` (after the reference), else
    the one TelegraphCQ's ``WINDOW alias [...]`` clause (``from_clause``) names for it, both
    as algebra windows, else ``[UNBOUNDED]`` (CQL's rule), except for a stream with an
    ENDTIMESTAMPCOLUMN, whose tuples keep their own intervals.

    >>> apply_default_windows(None, None, has_end_column=False)
    UnboundedWindow()
    >>> apply_default_windows(None, None, has_end_column=True)
    IntervalWindow()
    """
    if written is not None and from_clause is not None:
        raise Unsupported("a stream has a window both after it and in the WINDOW clause",
                          hint="Keep one of the two.")
    chosen = written if written is not None else from_clause
    if chosen is not None:
        return chosen
    return P.IntervalWindow() if has_end_column else P.UnboundedWindow()


# StreamWindow.kind -> its class
KINDS = {"now": Now, "unbounded": Unbounded, "between": Between, "rows": Rows, "range": Range,
         "slide": Slide, "session": Session, "tumble": Grid, "hop": Grid, "cumulate": Grid}


def window_of(spec: X.StreamWindow, to_expr, to_us):
    """The algebra's window for a parsed ``[...]``; an invalid one is a 22023 that points at
    what is wrong in it."""
    try:
        return KINDS[spec.args["kind"]].window(spec, to_expr, to_us)
    except InvalidWindow as e:
        if e.position is None:
            e.position = written_at(spec)
        raise
