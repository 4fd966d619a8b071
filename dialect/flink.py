"""Flink SQL's spellings, read as cqgate's: the group windows (``GROUP BY TUMBLE(t, size)`` with
``TUMBLE_START``…) become the window table functions they equal, ``PROCTIME()`` the arrival
time of a stream read by arrival, and Flink's functions that DuckDB spells otherwise become
DuckDB expressions with Flink's meaning.

Called by the parser (``FUNCTIONS``) and by the planner (``group_windows``, ``proctime``),
never the other way; what cannot be mapped is 0A000 naming the construct.

>>> import sqlglot, dialect
>>> tree = sqlglot.parse_one("SELECT k, TUMBLE_END(t, INTERVAL '10' SECOND) FROM s "
...                          "GROUP BY k, TUMBLE(t, INTERVAL '10' SECOND)", read="cql")
>>> group_windows(tree).sql("cql")
"SELECT k, s.window_end FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10 SECOND')) AS s \
GROUP BY k, s.window_start, s.window_end"
>>> java_time_format("yyyy-MM-dd HH:mm")
'%Y-%m-%d %H:%M'
"""
from __future__ import annotations

import re

from sqlglot import exp

from executor import plan as P

from . import expressions as X
from .errors import Unsupported, written_at

# a group window's bounds: Flink's TUMBLE_START(t, size) … -> the window table's column
_BOUNDS = {"START": "window_start", "END": "window_end", "ROWTIME": "window_time"}
_GROUP_WINDOWS = ("TUMBLE", "HOP", "SESSION")

# Java's SimpleDateFormat letters (Flink's DATE_FORMAT) as DuckDB's strftime
_JAVA_FORMAT = {"yyyy": "%Y", "yy": "%y", "MMMM": "%B", "MMM": "%b", "MM": "%m", "M": "%-m",
                "dd": "%d", "d": "%-d", "HH": "%H", "H": "%-H", "hh": "%I", "h": "%-I",
                "mm": "%M", "m": "%-M", "ss": "%S", "s": "%-S", "SSS": "%g", "a": "%p",
                "EEEE": "%A", "EEE": "%a", "E": "%a", "D": "%j", "Z": "%z"}
_JAVA_TOKEN = re.compile(r"'([^']*)'|([A-Za-z])\2*|([^A-Za-z']+)")


def java_time_format(pattern: str) -> str:
    """A SimpleDateFormat pattern as strftime's; a letter it has no match for is 0A000."""
    out = []
    for m in _JAVA_TOKEN.finditer(pattern):
        quoted, letters, other = m.group(1), m.group(0) if m.group(2) else None, m.group(3)
        if quoted is not None:
            out.append(quoted.replace("%", "%%") if quoted else "'")
        elif letters is not None:
            if letters not in _JAVA_FORMAT:
                raise Unsupported(f'DATE_FORMAT pattern letters "{letters}" are not supported',
                                  hint="Use y, M, d, H, h, m, s, S, a, E, D or Z.")
            out.append(_JAVA_FORMAT[letters])
        else:
            out.append(other.replace("%", "%%"))
    return "".join(out)


def date_format(args: list) -> exp.Expression:
    """Flink's DATE_FORMAT(ts, 'yyyy-MM-dd'): strftime with the pattern translated."""
    if len(args) == 2 and isinstance(args[1], exp.Literal) and args[1].is_string:
        return exp.TimeToStr(this=args[0],
                             format=exp.Literal.string(java_time_format(args[1].name)))
    return exp.Anonymous(this="DATE_FORMAT", expressions=args)


def split_index(args: list) -> exp.Expression:
    """Flink's SPLIT_INDEX(s, delimiter, i): the i-th piece counting from 0, NULL past the
    last (DuckDB's split_part gives ''). Spelled with sqlglot's nodes, so that DuckDB and
    Spark each get their own words."""
    if len(args) != 3:
        return exp.Anonymous(this="SPLIT_INDEX", expressions=args)
    s, delimiter, index = args

    def pieces():
        return exp.Split(this=s.copy(), expression=delimiter.copy())
    inside = exp.and_(exp.GTE(this=index.copy(), expression=exp.Literal.number(0)),
                      exp.LT(this=index.copy(), expression=exp.ArraySize(this=pieces())))
    # (the index written 1-based: sqlglot moves only a literal index between dialects)
    one_based = exp.Add(this=exp.paren(index.copy()), expression=exp.Literal.number(1))
    return exp.Case(ifs=[exp.If(this=inside, true=exp.Bracket(
        this=pieces(), expressions=[one_based], offset=1, safe=True))])


def regexp_extract(args: list) -> exp.Expression:
    """Flink's REGEXP_EXTRACT(s, pattern [, group]): the group of the first match, NULL when
    nothing matches (DuckDB's regexp_extract gives '')."""
    if len(args) not in (2, 3):
        return exp.Anonymous(this="REGEXP_EXTRACT", expressions=args)
    s, pattern = args[0], args[1]
    group = args[2] if len(args) == 3 else exp.Literal.number(0)
    extract = exp.RegexpExtract(this=s, expression=pattern, group=group)
    matches = exp.RegexpLike(this=s.copy(), expression=pattern.copy())
    return exp.Case(ifs=[exp.If(this=matches, true=extract)])


FUNCTIONS = {"DATE_FORMAT": date_format, "SPLIT_INDEX": split_index,
             "REGEXP_EXTRACT": regexp_extract}


# ---------------------------------------------------------------------- window tables
# each function's sizes in Flink's order -> the window's arguments (dialect/window_kinds.py)
_SIZES = {"TUMBLE": ("size", "offset"), "HOP": ("slide", "size", "offset"),
          "CUMULATE": ("slide", "size", "offset"), "SESSION": ("size",)}


def window_spec(node: X.WindowTable) -> X.StreamWindow:
    """The window a window table function puts on its stream, as the brackets' node with the
    kind of its name (SESSION's partitioned by its PARTITION BY)."""
    function = node.args["function"]
    names = _SIZES[function]
    sizes = node.expressions
    least = 2 if function in ("HOP", "CUMULATE") else 1
    if not least <= len(sizes) <= len(names):
        more = f" or {len(names)}" if len(names) > least else ""
        raise Unsupported(f"{function}(TABLE …, DESCRIPTOR(…), {', '.join(names)}) takes "
                          f"{least}{more} sizes", position=node.meta.get("start"))
    part = node.args.get("partition_by")
    if part and function != "SESSION":
        raise Unsupported(f"{function} has no PARTITION BY; only SESSION does",
                          position=node.meta.get("start"))
    spec = X.StreamWindow(kind=function.lower(), partition_by=[p.copy() for p in part or []],
                          arrival=node.args.get("arrival"),
                          **{n: s.copy() for n, s in zip(names, sizes)})
    spec.meta["start"] = node.meta.get("start")
    return spec


# ---------------------------------------------------------------------- group windows
def _call(node, names) -> str | None:
    return node.name.upper() if isinstance(node, exp.Anonymous) and \
        node.name.upper() in names else None


def _bound(node) -> str | None:
    """``window_start`` for TUMBLE_START(…), HOP_START(…), SESSION_START(…); and so on."""
    if not isinstance(node, exp.Anonymous) or "_" not in node.name:
        return None
    function, _, bound = node.name.upper().rpartition("_")
    return _BOUNDS.get(bound) if function in _GROUP_WINDOWS else None


def group_windows(tree: exp.Expression) -> exp.Expression:
    """Every SELECT grouped by TUMBLE(t, size), HOP(t, slide, size) or SESSION(t, gap) reads
    its one stream through the window table function of that name instead (SESSION
    partitioned by the other grouping keys, as Flink's session of a group is), grouped by
    window_start and window_end; TUMBLE_START(…) and its kin name those columns."""
    for sel in list(tree.find_all(exp.Select)):
        group = sel.args.get("group")
        calls = [g for g in (group.expressions if group else []) if _call(g, _GROUP_WINDOWS)]
        if calls:
            _rewrite(sel, group, calls)
        elif any(_bound(n) for e in sel.expressions for n in e.walk()):
            bad = next(n for e in sel.expressions for n in e.walk() if _bound(n))
            raise Unsupported(f"{bad.name.upper()} needs GROUP BY {bad.name.split('_')[0]}(…)",
                              position=written_at(bad))
    return tree


def _rewrite(sel: exp.Select, group: exp.Group, calls: list) -> None:
    call = calls[0]
    function = call.name.upper()
    if len(calls) > 1:
        raise Unsupported("a query groups by one window at a time", position=written_at(calls[1]))
    source = sel.args.get("from_") or sel.args.get("from")
    table = source.this if source is not None else None
    if sel.args.get("joins") or not isinstance(table, exp.Table) or \
            isinstance(table.this, exp.Func):
        raise Unsupported(f"GROUP BY {function}(…) reads one stream; join in a query over it",
                          position=written_at(call))
    time, *sizes = call.expressions
    if not isinstance(time, exp.Column) or not sizes:
        raise Unsupported(f"{function}(…) needs a stream's time column and a size",
                          position=written_at(call))
    alias = table.alias_or_name
    others = [g for g in group.expressions if g is not call]
    partition = [g.copy() for g in others] if function == "SESSION" else None
    bare = exp.Table(this=table.this.copy(), db=table.args.get("db"))
    window = X.WindowTable(this=bare, function=function, partition_by=partition,
                           descriptor=exp.column(time.name), expressions=[s.copy() for s in sizes],
                           alias=exp.TableAlias(this=exp.to_identifier(alias)))
    source.set("this", window)
    group.set("expressions", others + [exp.column(c, table=alias)
                                       for c in X.WINDOW_COLUMNS[:2]])

    def bound(node):
        column = _bound(node)
        return exp.column(column, table=alias) if column else node
    for key in ("expressions", "having", "qualify", "order"):
        value = sel.args.get(key)
        if isinstance(value, list):
            sel.set(key, [e.transform(bound) for e in value])
        elif value is not None:
            sel.set(key, value.transform(bound))


# ---------------------------------------------------------------------- PROCTIME()
def _is_proctime(node) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "PROCTIME"


def proctime(tree: exp.Expression) -> exp.Expression:
    """A SELECT whose select list calls PROCTIME() reads its one stream by arrival time (as
    ``[UNBOUNDED ON ARRIVAL]``), and PROCTIME() is each tuple's arrival, Flink's processing
    time attribute; elsewhere PROCTIME() is 0A000."""
    for sel in list(tree.find_all(exp.Select)):
        calls = [n for e in sel.expressions for n in e.walk() if _is_proctime(n)]
        if not calls:
            continue
        source = sel.args.get("from_") or sel.args.get("from")
        table = source.this if source is not None else None
        if sel.args.get("joins") or not isinstance(table, exp.Table) or \
                isinstance(table.this, exp.Func):
            raise Unsupported("PROCTIME() is the arrival time of one stream: select it in a "
                              "query over that stream alone", position=written_at(calls[0]))
        alias = table.alias_or_name
        read = X.StreamRef(this=exp.Table(this=table.this.copy(), db=table.args.get("db")),
                           window=X.StreamWindow(kind="unbounded", arrival=True),
                           alias=exp.TableAlias(this=exp.to_identifier(alias)))
        source.set("this", read)
        for call in calls:
            call.replace(exp.column(P.PROCTIME_COLUMN, table=alias))
    stray = next((n for n in tree.walk() if _is_proctime(n)), None)
    if stray is not None:
        raise Unsupported("PROCTIME() belongs in a select list, where it names the arrival "
                          "time of the stream read", position=written_at(stray))
    return tree


# ---------------------------------------------------------------------- windows over views
def window_over_view(node: X.WindowTable, view: exp.Expression, name: str) -> exp.Select:
    """``TABLE(TUMBLE(TABLE v, DESCRIPTOR(c), …))`` over a view ``v`` = ``SELECT items FROM s
    [WHERE p]``: the view's query over the same window of the stream ``s`` itself, windowed by
    what the view calls ``c`` (a column of ``s``, or PROCTIME(): ``s`` by arrival), with the
    window's columns added (Flink's q12 windows a view this way)."""
    function = node.args["function"]
    where = node.meta.get("start")
    source = view.args.get("from_") or view.args.get("from") \
        if isinstance(view, exp.Select) else None
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or isinstance(table.this, exp.Func) or any(
            view.args.get(k) for k in ("joins", "group", "distinct", "having", "limit")):
        raise Unsupported(f"{function} over the view {name} needs a view that selects from "
                          "one stream", position=where,
                          hint="Window the stream in the view's own query instead.")
    time = node.args["descriptor"].name.lower()
    item = next((e for e in view.expressions if e.alias_or_name.lower() == time), None)
    inner = item.this if isinstance(item, exp.Alias) else item
    if inner is None and any(isinstance(e, exp.Star) for e in view.expressions):
        inner = exp.column(time)
    arrival = _is_proctime(inner)
    if not arrival and not isinstance(inner, exp.Column):
        raise Unsupported(f"DESCRIPTOR({time}) names a computed column of the view {name}",
                          position=where, hint="Window by the stream's TIMESTAMPCOLUMN or by "
                          "PROCTIME().")
    alias = table.alias_or_name
    out = view.copy()
    for call in [n for n in out.walk() if _is_proctime(n)]:
        call.replace(exp.column(P.PROCTIME_COLUMN, table=alias))
    window = X.WindowTable(
        this=exp.Table(this=table.this.copy(), db=table.args.get("db")), function=function,
        partition_by=[p.copy() for p in node.args.get("partition_by") or []] or None,
        descriptor=exp.column(P.PROCTIME_COLUMN if arrival else inner.name),
        expressions=[s.copy() for s in node.expressions], arrival=arrival or None,
        alias=exp.TableAlias(this=exp.to_identifier(alias)))
    window.meta["start"] = where
    (out.args.get("from_") or out.args.get("from")).set("this", window)
    if not any(isinstance(e, exp.Star) for e in out.expressions):      # (* has them)
        added = X.WINDOW_COLUMNS[:2] if function == "SESSION" else X.WINDOW_COLUMNS
        out.set("expressions", out.expressions + [exp.column(c, table=alias) for c in added])
    return out
