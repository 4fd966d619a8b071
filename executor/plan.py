"""The logical temporal algebra: the contract between the planner (dialect) and the back end.

Frozen, serialisable data classes with no sqlglot inside. Every tuple carries a validity
interval [valid_from, valid_to) in event-time microseconds; operators are σ filter, μ map,
ω window, ⋈ join, ∪ union, α aggregation, δ duplicate elimination, − difference, ∩
intersection, and limit.

Expressions are ``Expr``: DuckDB SQL text over the operator's input columns (quoted names),
the columns it reads and its DuckDB result type, so the back end evaluates them on whole Arrow
batches without a SQL parser of its own. ``to_dict``/``from_dict`` turn a plan into plain data
(JSON-able) for the plan queue; ``explain`` prints the tree with the algebra's symbols. The
window kinds (``windows/``, each knowing how far back it reaches) are re-exported here.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import typing
from dataclasses import dataclass
from typing import Union

from executor.duck import quote
# the DuckDB settings a plan's expressions run under, wherever they run (the back end, or the
# gateway finishing a Spark query's join with a table): no files, no extensions, and int / int
# dividing as PostgreSQL divides
from executor.duck import LOCKED as EXPRESSION_CONFIG  # noqa: F401 - re-exported
from executor.duck import configured as expression_settings  # noqa: F401 - re-exported
# Python functions a plan may call: defined by the gateway, carried in the plan
from executor.python_functions import FunctionError, PythonFunction  # noqa: F401 - re-exported
from executor.python_functions import error_message as python_error  # noqa: F401 - re-exported
from executor.python_functions import load as load_python_functions  # noqa: F401 - re-exported
from executor.python_functions import shown_names
# User-defined aggregates a plan may name (loaded from the server's configuration in both
# processes); the planner asks for their names and result types.
from executor.udf import load as load_user_aggregates  # noqa: F401 - re-exported
from executor.udf import names as user_aggregate_names  # noqa: F401 - re-exported
from executor.udf import return_type as user_aggregate_type  # noqa: F401 - re-exported
# ω's configurations, and how far back each reaches when a query starts (the gateway primes
# a query from the archive by it)
from executor.windows import (  # noqa: F401 - re-exported
    FixedWindow, GridWindow, IntervalWindow, LoopWindow, NowWindow, RangeWindow, RowsWindow,
    SessionWindow, SlideWindow, UnboundedWindow, VersionWindow, WindowKind)

# the column of a PostgreSQL table's stream that says what each change is (I, U, D, T)
CHANGE_KIND = "__cq_op"

# --------------------------------------------------------------------------- building blocks


@dataclass(frozen=True)
class Column:
    name: str
    type: str            # DuckDB type spelling, e.g. INTEGER, DOUBLE, TIMESTAMP, VARCHAR


@dataclass(frozen=True)
class Expr:
    """DuckDB SQL over the input columns, e.g. ``"S.price" * 0.908``."""
    sql: str
    columns: tuple = ()  # names of the input columns it reads
    type: str = ""
    # the same, for Arrow's kernels, when simple (executor/expressions/kernels)
    tree: tuple | None = None


@dataclass(frozen=True)
class NamedExpr:
    name: str
    expr: Expr


# --------------------------------------------------------------------------- operators


@dataclass(frozen=True)
class StreamScan:
    """The tuples of a stream as they reach the back end, with ts from its TIMESTAMPCOLUMN
    (and te from its ENDTIMESTAMPCOLUMN when it has one; zero-length otherwise).
    ``of_table``: ``Stream(t)`` of a table, the stream of its changes stamped when made."""
    stream: str
    alias: str
    schema: tuple                 # tuple[Column], names qualified "alias.col"
    timestamp_column: str | None
    end_column: str | None = None
    of_table: bool = False
    arrival: bool = False         # in arrival order, before the stream's slack (QJoin reads)
    proctime: bool = False        # stamped with its arrival time (ts: PROCTIME_COLUMN)
    # a named window's or derived stream's read that starts with its query ([UNBOUNDED],
    # ROWS, a session, a pattern): the first event time it reads, where that query began
    # (started again, or read through its query, it holds the rows it held); earlier tuples
    # given to it are not its own
    born_us: int | None = None

    @property
    def by_event_time(self) -> bool:
        """Whether its tuples come in event-time order (not by arrival, nor a table's
        changes stamped when made)."""
        return not (self.arrival or self.proctime or self.of_table)


# born_us of a stream that had no tuple yet when the query began: every tuple is its own
EVER = -(2 ** 62)


@dataclass(frozen=True)
class TableScan:
    """A static table as a time-tabular collection (seed 000 §2.5): a row is valid from when
    it was inserted until it is updated or deleted, in the joined stream's event time."""
    table: str
    alias: str
    schema: tuple


@dataclass(frozen=True)
class WindowRelationScan:
    """A named window (CREATE WINDOW) or derived stream (CREATE STREAM AS) read by name.
    ``follow``: read as a stream of its rows (a derived stream, or ``Stream(w)``); otherwise
    a query reading only named windows is one-time (their contents at now)."""
    name: str
    alias: str
    schema: tuple
    kind: str                     # "window" | "derived"
    follow: bool = False


@dataclass(frozen=True)
class Window:                                              # ω
    input: "Node"
    window: WindowKind
    schema: tuple


@dataclass(frozen=True)
class Filter:                                              # σ
    input: "Node"
    predicate: Expr
    schema: tuple


@dataclass(frozen=True)
class Map:                                                 # μ
    input: "Node"
    outputs: tuple                # tuple[NamedExpr]
    schema: tuple


@dataclass(frozen=True)
class Join:                                                # ⋈
    """Result interval = intersection (and, for an ``outer`` join, each preserved side's
    tuple padded with NULLs while no partner is valid). ``equi`` pairs (left Expr, right
    Expr) go through a hash index; ``residual`` is the rest of the predicate. ``kind`` is
    stream-stream or stream-table (the right side is then a time-tabular table). ``keep``:
    per side, an Expr (BIGINT µs over that side's columns; NULL: at once) after which a
    stored tuple can meet no later tuple of the other side, so it is dropped then although
    still valid (an interval join); ``ttl_us``: the query's state_ttl, whose condition
    (event times less than that apart) is in ``residual`` and whose bound is in ``keep``."""
    left: "Node"
    right: "Node"
    equi: tuple = ()              # tuple[tuple[Expr, Expr]]
    residual: Expr | None = None
    kind: str = "stream-stream"
    schema: tuple = ()
    keep: tuple = (None, None)    # tuple[Expr | None, Expr | None]
    ttl_us: int | None = None
    outer: str = ""               # left, right, full: the preserved sides' tuples padded too


@dataclass(frozen=True)
class QualityJoin:                                         # ⋈q (seed 003, QJoin)
    """A join of two windowed streams that reads them in arrival order and joins each tuple
    at once against buffers sized for a recall target: ``recall`` over ``period_us``; every
    ``adapt_us`` (L) the two delay bounds are chosen from the delay distributions at
    ``granularity_us`` (g) over the windows cut into basic windows of ``basic_us`` (b).
    ``spans_us``: the two windows' sizes. Results leave as found (not in valid_from
    order), or with ``in_order`` (a named window's or derived stream's, whose readers need
    valid_from order) once no earlier result can come."""
    left: "Node"
    right: "Node"
    equi: tuple = ()
    residual: Expr | None = None
    schema: tuple = ()
    spans_us: tuple = (0, 0)
    recall: float = 0.95
    period_us: int = 60_000_000
    adapt_us: int = 1_000_000
    granularity_us: int = 10_000
    basic_us: int = 10_000
    in_order: bool = False


@dataclass(frozen=True)
class Union_:                                              # ∪ (UNION ALL)
    inputs: tuple
    schema: tuple


@dataclass(frozen=True)
class Partial:
    """Phase one of an aggregate: ``func`` is sum, count, count_star, min, max,
    count_distinct, sum_distinct or a user aggregate's registered name."""
    name: str
    func: str
    arg: Expr | None = None


@dataclass(frozen=True)
class Aggregate:                                           # α
    """The aggregate index of seed 000 §3.4. ``partials`` are computed per group and
    interval; ``finals`` are expressions over the keys and partials (AVG = sum/count)."""
    input: "Node"
    keys: tuple                   # tuple[NamedExpr]
    partials: tuple               # tuple[Partial]
    finals: tuple                 # tuple[NamedExpr] over keys and partial names
    schema: tuple


@dataclass(frozen=True)
class Distinct:                                            # δ
    input: "Node"
    schema: tuple


def column_expr(name: str, typ: str) -> "Expr":
    """An expression that reads column ``name`` of type ``typ``."""
    return Expr(quote(name), (name,), typ, ("col", name))


def distinct_groups(node: Distinct) -> Aggregate:
    """δ at each instant is a GROUP BY of every column: a row is there while any copy is
    (how the back end and the Spark engine run it)."""
    cols = tuple(NamedExpr(c.name, column_expr(c.name, c.type)) for c in node.schema)
    return Aggregate(node.input, cols, (Partial("__n", "count_star"),), cols, node.schema)


@dataclass(frozen=True)
class Difference:                                          # − (EXCEPT [ALL])
    """The left input's rows the right one lacks at each instant; ``all``: as multisets
    (a row the left holds three times and the right once is there twice)."""
    left: "Node"
    right: "Node"
    schema: tuple
    all: bool = False


@dataclass(frozen=True)
class Intersection:                                        # ∩ (INTERSECT [ALL])
    """The rows both inputs hold at each instant; ``all``: as many copies as the input
    with fewer has."""
    left: "Node"
    right: "Node"
    schema: tuple
    all: bool = False


@dataclass(frozen=True)
class Repeat:
    """Each row as many times as its integer column ``count`` says (what the rewrites of
    EXCEPT ALL and INTERSECT ALL end with)."""
    input: "Node"
    count: str
    schema: tuple


@dataclass(frozen=True)
class Limit:
    input: "Node"
    count: int
    schema: tuple


@dataclass(frozen=True)
class TopN:                                                # τ
    """The first ``count`` rows of each partition at every instant, by ``order``
    (``ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) <= count``), over an input whose rows
    hold for ever once they start (an append-only stream, a join of such): a row enters when it
    ranks among the first and leaves when ``count`` better ones have come. ``partition``
    names columns; ``order`` is (column, descending, nulls first) triples; ``rank``: the
    column that numbers the rows (empty: none), the last of the schema."""
    input: "Node"
    partition: tuple
    order: tuple
    count: int
    rank: str
    schema: tuple


@dataclass(frozen=True)
class PatternComponent:
    """One component of an event pattern: the input it reads (by port), its alias, whether
    it is negated (``!(C c)``), its own predicate (over its columns only), its equivalence
    attributes' values (one Expr per attribute of the ``[a, b]`` test, over its columns) and,
    for a negated component, the predicate naming it and positive components."""
    alias: str
    negated: bool = False
    predicate: Expr | None = None
    partition: tuple = ()         # tuple[Expr]
    against: Expr | None = None
    # a row pattern's DEFINE terms that read other rows of the match (a tree the matcher
    # evaluates row by row: dialect/planner/row_define.py)
    checks: tuple | None = None


@dataclass(frozen=True)
class RowMeasure:
    """One value a row pattern's match gives (MATCH_RECOGNIZE's MEASURES, taken apart):
    ``func`` first, last, sum, min, max, avg or count of ``column`` over the rows mapped to
    ``var`` (None: every row of the match), or classifier / match_number; ``offset``: FIRST's
    n-th after the first row, LAST's n-th before the last."""
    func: str
    var: str | None = None
    column: str | None = None
    offset: int = 0


@dataclass(frozen=True)
class Pattern:                                             # SEQ (seed 004, SASE)
    """Sequences of events, one per positive component, in strictly increasing event time,
    by sequence scan and construction over (partitioned) Active Instance Stacks. ``where``:
    the cross-event predicates over positive components' columns; ``within_us``: the last
    positive event is less than this after the first; ``strategy``: ``any`` (skip till any
    match), ``next`` (skip till next match) or ``strict`` (strict contiguity). A match is a
    stream tuple stamped when it became known (the last positive event's time, or the
    first's plus the window when a negation closes the pattern); its columns are the
    positive components', ``alias.col``."""
    inputs: tuple                 # one Node per component, in SEQ order
    components: tuple             # tuple[PatternComponent]
    where: Expr | None = None
    within_us: int | None = None
    strategy: str = "any"
    schema: tuple = ()
    # AFTER MATCH SKIP: "all" (every match: TO NEXT ROW), "past_last" (PAST LAST ROW: no
    # overlap), "to_first"/"to_last" (TO FIRST/LAST ``skip_to``: the next match may begin at
    # that variable's first/last row of this one)
    skip: str = "all"
    # a row pattern (MATCH_RECOGNIZE with quantifiers or alternation): its tree over the
    # components' names (dialect/planner/row_pattern.py), one input whose rows each
    # component classifies, and the measures; the schema is the partition's columns, then
    # one per measure
    regex: tuple | None = None
    measures: tuple = ()          # tuple[RowMeasure]
    skip_to: str | None = None


@dataclass(frozen=True)
class SnapshotQuery:                                       # Σ
    """A query its own SQL computes on each instant's snapshot of its inputs, at every
    instant where one of them changes: outer joins, window functions and Top-N, subqueries,
    DISTINCT ON and aggregates the aggregate index has no partials for. ``sql`` is DuckDB
    SQL over the instants ``"__c"("__t")`` giving ``"__t"`` and the schema's columns; it reads
    input k as ``"__in<k>"`` (its columns, ``__ts``, ``__te``) and lookup table j (``tables``,
    reading the Columns ``table_columns[j]``, named as in a TableScan's schema) as
    ``"__tb<j>"``.
    ``reason``: what the algebra's other operators do not compute, for EXPLAIN."""
    inputs: tuple
    sql: str
    schema: tuple
    tables: tuple = ()
    table_columns: tuple = ()
    reason: str = ""


Node = Union[StreamScan, TableScan, WindowRelationScan, Window, Filter, Map, Join, Union_,
             Aggregate, Distinct, Difference, Intersection, Repeat, Limit, TopN, Pattern,
             QualityJoin, SnapshotQuery]

PSEUDO_COLUMNS = ("valid_from", "valid_to", "wtime")


@dataclass(frozen=True)
class Plan:
    """A planned statement. ``mode``: continuous (the back end runs it until it ends),
    snapshot (evaluated at now, finite), archive (a fixed window wholly in the past: Spark)."""
    root: Node
    mode: str
    output: tuple                 # tuple[Column]: what the client sees (pseudo-columns included)
    pseudo: tuple = ()            # which of valid_from / valid_to / wtime were selected
    sql: str = ""
    reads_now: bool = False       # now() in it is the instant it was planned, a constant
    functions: tuple = ()         # tuple[PythonFunction]: the Python functions it calls


# --------------------------------------------------------------------------- serialisation
# every window kind of executor/windows (its WindowKind union), and the plan's own nodes
_TYPES = {cls.__name__: cls for cls in (
    *typing.get_args(WindowKind), Column, Expr, NamedExpr, StreamScan, TableScan,
    WindowRelationScan, Window, Filter, Map, Join, Union_, Partial, Aggregate, Distinct,
    Difference, Intersection, Repeat, Limit, TopN, Plan, PatternComponent, Pattern, RowMeasure,
    QualityJoin, SnapshotQuery, PythonFunction)}


def to_dict(obj):
    """A plan (or any part) as plain dicts, lists and scalars, each object tagged ``"@"``."""
    if dataclasses.is_dataclass(obj):
        out = {"@": type(obj).__name__}
        for f in dataclasses.fields(obj):
            out[f.name] = to_dict(getattr(obj, f.name))
        return out
    if isinstance(obj, (tuple, list)):
        return [to_dict(x) for x in obj]
    return obj


def from_dict(data):
    if isinstance(data, dict) and "@" in data:
        cls = _TYPES[data["@"]]
        return cls(**{k: from_dict(v) for k, v in data.items() if k != "@"})
    if isinstance(data, list):
        return tuple(from_dict(x) for x in data)
    return data


def to_json(plan) -> str:
    return json.dumps(to_dict(plan), separators=(",", ":"))


def from_json(text: str):
    return from_dict(json.loads(text))


# --------------------------------------------------------------------------- EXPLAIN
def _us_text(us: int) -> str:
    for unit, size in (("day", 86_400_000_000), ("hour", 3_600_000_000),
                       ("minute", 60_000_000), ("second", 1_000_000), ("ms", 1000)):
        if us % size == 0 and us >= size:
            n = us // size
            return f"{n} {unit}" + ("s" if n != 1 and unit != "ms" else "")
    return f"{us} µs"


def window_text(w) -> str:
    labels = {
        RangeWindow: lambda w: f"range {_us_text(w.size_us)}",
        SlideWindow: lambda w: f"range {_us_text(w.size_us)} slide {_us_text(w.slide_us)}"
        + (f" start {w.start_us} µs" if w.start_us is not None else ""),
        GridWindow: lambda w: (f"cumulate {_us_text(w.size_us)} step {_us_text(w.step_us)}"
                               if w.cumulative else f"windows [start, end) of "
                               f"{_us_text(w.size_us)} every {_us_text(w.step_us)}")
        + (f" offset {_us_text(w.offset_us)}" if w.offset_us else "")
        + ", each tuple once per window",
        RowsWindow: lambda w: (f"partition by {', '.join(e.sql for e in w.partition_by)} "
                               if w.partition_by else "") + f"rows {w.rows}"
        + (f" where {w.where.sql}" if w.where is not None else ""),
        VersionWindow: lambda w: "row versions by "
                                 + ", ".join(e.sql for e in w.partition_by),
        NowWindow: lambda w: "now",
        UnboundedWindow: lambda w: "unbounded",
        FixedWindow: lambda w: f"between {_timestamp_text(w.low_us)} and "
                               f"{_timestamp_text(w.high_us)}",
        IntervalWindow: lambda w: "own intervals",
        SessionWindow: lambda w: (f"partition by {', '.join(e.sql for e in w.partition_by)} "
                                  if w.partition_by else "") + f"session {_us_text(w.gap_us)}",
        LoopWindow: lambda w: f"loop {w.var} = {w.init.sql}; {w.condition.sql}; "
                              f"{w.var} = {w.next.sql} → [{w.left.sql}, {w.right.sql}]",
    }
    return labels[type(w)](w)


def _names(exprs) -> str:
    return ", ".join(f"{n.name} = {n.expr.sql}" if n.expr.sql != quote(n.name) else n.name
                     for n in exprs)


_LABELS = {
    StreamScan: lambda n: (f"changes of table {n.stream}" if n.of_table else f"stream {n.stream}")
    + (f" as {n.alias}" if n.alias != n.stream else "")
    + (f" [ts {n.timestamp_column}, te {n.end_column}]" if n.end_column
       else f" [ts {n.timestamp_column}]" if n.timestamp_column and not n.proctime else "")
    + (" in arrival order" if n.arrival else "")
    + (" by arrival time" if n.proctime else "")
    + (f" from {_timestamp_text(n.born_us)}" if n.born_us not in (None, EVER) else ""),
    TableScan: lambda n: f"table {n.table}" + (f" as {n.alias}" if n.alias != n.table else "")
    + " (time-tabular)",
    WindowRelationScan: lambda n: f"{n.kind} {n.name}"
    + (f" as {n.alias}" if n.alias != n.name else ""),
    Window: lambda n: f"ω {window_text(n.window)}",
    Filter: lambda n: f"σ {n.predicate.sql}",
    Map: lambda n: f"μ {_names(n.outputs)}",
    Join: lambda n: (f"⋈ {n.outer} outer" if n.outer else f"⋈ {n.kind}")
    + _condition_text(n, "hash") + _state_text(n),
    Union_: lambda n: "∪ all",
    Aggregate: lambda n: "α" + (f" keys {_names(n.keys)}" if n.keys else "")
    + " partial " + ", ".join(f"{p.name} = {p.func}({p.arg.sql if p.arg else '*'})"
                              for p in n.partials)
    + " final " + _names(n.finals),
    Distinct: lambda n: "δ",
    Difference: lambda n: "− all" if n.all else "−",
    Intersection: lambda n: "∩ all" if n.all else "∩",
    Repeat: lambda n: f"repeat each row {n.count} times",
    Limit: lambda n: f"limit {n.count}",
    TopN: lambda n: f"τ first {n.count} by " + ", ".join(
        f"{c}{' desc' if d else ''}" for c, d, _ in n.order)
    + (f" of each {', '.join(n.partition)}" if n.partition else "")
    + (f", numbered as {n.rank}" if n.rank else "") + "; keeps those rows",
    Pattern: lambda n: _pattern_text(n),
    QualityJoin: lambda n: f"⋈q arrival order, recall {n.recall:g} over "
    f"{_us_text(n.period_us)}; windows {_us_text(n.spans_us[0])}, {_us_text(n.spans_us[1])}; "
    f"delays chosen every {_us_text(n.adapt_us)} (granularity {_us_text(n.granularity_us)}, "
    f"basic windows {_us_text(n.basic_us)})" + _condition_text(n, "equal")
    + ("; results held to valid_from order" if n.in_order else ""),
    SnapshotQuery: lambda n: f"Σ {n.reason}, on each instant's snapshot"
    + (f" with table {', '.join(n.tables)}" if n.tables else ""),
}

def explain_label(node) -> str:
    """How EXPLAIN names one operator."""
    return _LABELS[type(node)](node)


def _condition_text(n, equalities: str) -> str:
    """A join's equalities (named as it runs them) and the rest of its predicate."""
    return ((f" {equalities} " + " AND ".join(f"{a.sql} = {b.sql}" for a, b in n.equi)
             if n.equi else "")
            + (f" residual {n.residual.sql}" if n.residual is not None else ""))


def _state_text(n) -> str:
    """What frees a join's stored tuples beyond their windows (interval join, state_ttl)."""
    kept = [f"{side} tuples until {k.sql}" for side, k in zip(("left", "right"), n.keep)
            if k is not None]
    return (f"; keeps {', '.join(kept)}" if kept else "") + (
        f"; state_ttl {_us_text(n.ttl_us)}" if n.ttl_us is not None else "")


_STRATEGIES = {"any": "skip till any match", "next": "skip till next match",
               "strict": "strict contiguity"}


_SKIP_TEXT = {"all": "to next row", "past_last": "past last row", "to_first": "to first {}",
              "to_last": "to last {}"}


def _regex_text(tree) -> str:
    kind = tree[0]
    if kind == "var":
        return tree[1]
    if kind == "seq":
        return " ".join(_regex_text(t) if t[0] != "alt" else f"({_regex_text(t)})"
                        for t in tree[1])
    if kind == "alt":
        return " | ".join(_regex_text(t) for t in tree[1])
    _, item, low, high, greedy = tree
    inner = _regex_text(item) if item[0] == "var" else f"({_regex_text(item)})"
    q = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((low, high))
    if q is None:
        q = f"{{{low}}}" if low == high else f"{{{low},{'' if high is None else high}}}"
    return inner + q + ("" if greedy else "?")


_CHECK_TEXT = {
    "lit": lambda t: "NULL" if t[1] is None else
    "'" + t[1].replace("'", "''") + "'" if isinstance(t[1], str) else
    str(t[1]).upper() if isinstance(t[1], bool) else str(t[1]),
    "ref": lambda t: f"{t[2]}.{t[3].split('.', 1)[-1]}" if t[1] == "last" and not t[4]
    else f"{t[1].upper()}({t[2]}.{t[3].split('.', 1)[-1]}, {t[4]})",
    "op": lambda t: f"({_check_text(t[2])} {t[1]} {_check_text(t[3])})",
    "not": lambda t: f"NOT {_check_text(t[1])}",
    "isnull": lambda t: f"{_check_text(t[1])} IS NULL",
    "neg": lambda t: f"-{_check_text(t[1])}",
}


def _check_text(t) -> str:
    """A DEFINE term the row matcher evaluates row by row, as SQL."""
    return _CHECK_TEXT[t[0]](t)


def _pattern_text(n: "Pattern") -> str:
    """SEQ's NFA as EXPLAIN shows it: states (the positive components), stacks (partitioned
    by the equivalence test: PAIS), the predicates pushed into scan and construction, the
    negations and the window."""
    if n.regex is not None:
        return "⊳ " + "; ".join(
            [f"PATTERN ({_regex_text(n.regex)})", "backtracking over each partition's rows",
             ("partition by " + ", ".join(e.sql for e in n.components[0].partition))
             if n.components[0].partition else "one partition"]
            + [f"define {c.alias}: {c.predicate.sql}" for c in n.components
               if c.predicate is not None]
            + [f"define {c.alias} row by row: {_check_text(c.checks)}" for c in n.components
               if c.checks is not None]
            + [f"within {_us_text(n.within_us)}" if n.within_us else "no window",
               "after match skip " + _SKIP_TEXT[n.skip].format(n.skip_to)])
    pos = [c for c in n.components if not c.negated]
    parts = [f"SEQ({', '.join(('!' if c.negated else '') + c.alias for c in n.components)})",
             f"NFA states 0→{len(pos)} on " + " → ".join(c.alias for c in pos),
             ("PAIS by " + ", ".join(e.sql for e in pos[0].partition)) if pos[0].partition
             else "AIS (unpartitioned)",
             _STRATEGIES[n.strategy]]
    parts += [f"scan {c.alias}: {c.predicate.sql}" for c in n.components
              if c.predicate is not None]
    if n.where is not None:
        parts.append(f"construction: {n.where.sql}")
    parts += [f"negation !{c.alias}" + (f": {c.against.sql}" if c.against is not None else "")
              for c in n.components if c.negated]
    parts.append(f"within {_us_text(n.within_us)}" if n.within_us else "no window")
    if n.skip != "all":
        parts.append("after match skip " + _SKIP_TEXT[n.skip].format(n.skip_to))
    return "⊳ " + "; ".join(parts)


def tables_read(node) -> set:
    """The names of the static tables a plan reads (through stream–table joins, and as a
    Σ's lookup tables)."""
    out = {node.table.lower()} if isinstance(node, TableScan) else \
        {t.lower() for t in node.tables} if isinstance(node, SnapshotQuery) else set()
    for c in children(node):
        out |= tables_read(c)
    return out


ARRIVAL = "@arrival"   # the feed of a stream's tuples in arrival order, before its slack
# the feed of a stream's tuples stamped with their arrival time, in column PROCTIME_COLUMN,
# its time the wall clock's (arrival-time windows: ``[… ON ARRIVAL]``)
PROCTIME = "@proctime"
PROCTIME_COLUMN = "__proctime"


def feed_of(scan: StreamScan) -> str:
    """The feed a scan reads: its stream's ordered tuples, its arrivals, or its tuples
    stamped by arrival."""
    return scan.stream.lower() + (ARRIVAL if scan.arrival else PROCTIME if scan.proctime
                                  else "")


def stream_of(feed: str) -> str:
    return feed.removesuffix(ARRIVAL).removesuffix(PROCTIME)


def arrival_streams(node) -> set:
    """The streams a plan reads in arrival order."""
    return _names_read(node, lambda n: n.stream if isinstance(n, StreamScan) and n.arrival
                       else None)


def proctime_streams(node) -> set:
    """The streams a plan reads by arrival time (``[… ON ARRIVAL]``)."""
    return _names_read(node, lambda n: n.stream if isinstance(n, StreamScan) and n.proctime
                       else None)


def contains(node, test) -> bool:
    """Whether ``node`` or a node below it passes ``test``."""
    return test(node) or any(contains(c, test) for c in children(node))


def scan_under(node) -> StreamScan | None:
    """The stream scan under a chain of σ and μ (a window's input: its tuples are the
    stream's, some left out or computed on), if ``node`` is one."""
    while isinstance(node, (Filter, Map)):
        node = node.input
    return node if isinstance(node, StreamScan) else None


def streams_read(node) -> set:
    """The names of the streams and named relations a plan reads."""
    return _names_read(node, lambda n: n.stream if isinstance(n, StreamScan) else
                       n.name if isinstance(n, WindowRelationScan) else None)


def _names_read(node, name_of) -> set:
    name = name_of(node)
    out = {name.lower()} if name else set()
    for c in children(node):
        out |= _names_read(c, name_of)
    return out


def with_children(node, kids: tuple):
    """``node`` over ``kids`` (as ``children`` gives them) in place of its own."""
    if isinstance(node, (Join, Difference, Intersection, QualityJoin)):
        return dataclasses.replace(node, left=kids[0], right=kids[1])
    if isinstance(node, (Union_, Pattern, SnapshotQuery)):
        return dataclasses.replace(node, inputs=tuple(kids))
    return dataclasses.replace(node, input=kids[0]) if kids else node


def born_from(node, births: dict):
    """``node`` with each stream read that starts with its query (not under a window that
    reaches back, nor born already; by event time) reading from ``births[stream]``
    (lower-case names) on."""
    if isinstance(node, StreamScan):
        born = births.get(node.stream.lower())
        # (a read by arrival, or of a table's changes, has no event time to begin at)
        if born is None or node.born_us is not None or not node.by_event_time:
            return node
        return dataclasses.replace(node, born_us=born)
    if isinstance(node, Window) and node.window.reaches_back and \
            scan_under(node.input) is not None:
        return node             # (filled from the archive by its reach at each start)
    kids = children(node)
    return with_children(node, tuple(born_from(c, births) for c in kids)) if kids else node


def children(node) -> tuple:
    if isinstance(node, (Join, Difference, Intersection, QualityJoin)):
        return (node.left, node.right)
    if isinstance(node, (Union_, Pattern, SnapshotQuery)):
        return node.inputs
    inp = getattr(node, "input", None)
    return (inp,) if inp is not None else ()


# which engine runs a plan of each mode
_ENGINE = {"continuous": "(back end)", "snapshot": "(back end, at now)",
           "archive": "(Spark, over the archive)"}


def _timestamp_text(us: int) -> str:
    return (datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=us)).isoformat(sep=" ")


def tree_lines(root, kids, label) -> list[str]:
    """A tree as indented lines, root first, its branches drawn: ``kids(node)`` its inputs,
    ``label(node)`` its text (EXPLAIN's and EXPLAIN ANALYZE's layout)."""
    lines: list = []

    def walk(node, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(prefix + branch + label(node))
        inputs = kids(node)
        ext = "" if top else ("   " if last else "│  ")
        for i, k in enumerate(inputs):
            walk(k, prefix + ext, i == len(inputs) - 1, False)

    walk(root, "", True, True)
    return lines


def explain_head(plan: Plan) -> str:
    """EXPLAIN's first line: the query's mode, where it runs and its output columns."""
    return (f"{plan.mode} query {_ENGINE[plan.mode]} → "
            + ", ".join(c.name for c in plan.output))


def explain(plan: Plan) -> list[str]:
    """The plan as indented lines, root first (a Python function by the name it was called),
    then the Python functions it calls."""
    lines = [shown_names(line) for line in
             [explain_head(plan)] + tree_lines(plan.root, children, explain_label)]
    if plan.functions:
        lines.append("Python functions: " + ", ".join(
            f"{f.name}({', '.join(f.types)}) → {f.returns}"
            + (" vectorised" if f.vectorized else " per row") for f in plan.functions))
    return lines
