"""A continuous query's plan (the temporal algebra) as a Spark Structured Streaming DataFrame
over its streams' spools, or a 0A000 saying why Spark cannot give the same answers.

``check`` walks the plan without Spark (so a refusal comes before any JVM starts) and says
what shape it has; ``Builder`` makes the DataFrame. Every frame carries the rows' interval as
``__ts`` / ``__te`` (TIMESTAMP_NTZ; a NULL ``__te`` is ∞) and ``__punct`` (the rows that carry a
stream's watermark, see spool_source), with the plan's own column names; a frame on a SLIDE
grid also carries ``__wt``, Spark's event time of its window (``window_time``), which keeps
Spark's watermark for what reads it. What runs:

- σ, μ and ω RANGE / unbounded over one stream: row by row, every row released at once
  (the spool is in valid_from order already);
- ∪ of those: rows held until every input's watermark passes their valid_from;
- ω RANGE … SLIDE: a tuple's row from the first window that holds it until the one after
  the last, row by row; α over such a window's tuples grouped by window (and by keys), with
  sum, count, min, max (AVG is made of them), and again over the rows of such an α (q5's MAX
  of counts): Spark's ``window()`` and ``groupBy`` with an event-time watermark, in the JVM.
  A slide's window is (τ − i, τ]; Spark's are [start, end), so the event time is read 1 µs
  earlier, and a window ending at τ closes once the stream's watermark has passed it (a
  watermark row at W moves Spark's to W − 1.001 ms, in whole milliseconds, and Spark closes
  windows whose end is at most that). An α with no key is refused on its own (the back end
  answers an empty slide; Spark has no row for it) but runs as a join's side, where an empty
  slide's NULL joins nothing either way (a keyless COUNT's 0 could: refused);
- ⋈ on an equality of two streams over RANGE windows (intervals meeting: each starts before
  the other ends), or of two frames on the same SLIDE grid (the same window; a SLIDE
  window's tuples then come once per window they are in): Spark's stream–stream join, its
  state bounded by both watermarks; rows held as a union's;
- α over ω RANGE grouped by a key: the aggregate index per key in Python, inside Spark's
  ``transformWithStateInPandas`` (range_aggregate.py);
- δ right over a window or its projection: as α grouped by every column, with a count;
- ⋈ of windowed rows with a table, then σ and μ: Spark runs the stream's side, the server
  the rest with DuckDB for each micro-batch (``TableFinish``).

Expressions are the plan's DuckDB SQL, written for Spark by sqlglot; a function sqlglot does
not know must be one of DuckDB's (never Spark's calls into its JVM).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import sqlglot
from pyspark.sql import functions as F
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from executor import plan as P

from gateway.archive.spark import spark_type
from gateway.pgwire import errors as E
from gateway.spark_engine import held_tuples as HT
from gateway.spark_engine import range_aggregate as RA
from gateway.spark_engine.spool_source import ORDER, PUNCT

TS, TE = "__ts", "__te"
ET = "__et"                     # the event time Spark's watermark and window() read
WT = "__wt"                     # a SLIDE window's event time (its end − 1 µs), watermarked
BACKEND_HINT = ("Run it on the back end: write WITH (engine = 'backend') after the query, "
                "or SET cq.engine = backend (the default).")


class Refused(E.PgError):
    def __init__(self, why: str, hint: str = BACKEND_HINT):
        super().__init__(f"the Spark engine cannot run this query with cqgate's semantics: "
                         f"{why}", sqlstate="0A000", hint=hint)


@dataclass(frozen=True)
class Shape:
    """What ``check`` found: the streams read, whether rows of one micro-batch must wait for
    the inputs' watermarks before they leave, whether an α's windows close by Spark's
    watermark on the way, and whether it ends in a join with a table (made in the server)."""
    streams: tuple
    hold: bool
    closes: bool = False
    with_table: bool = False
    session_groups: bool = False    # ends in α over closed sessions (made in the server)
    ranged: bool = False        # a RANGE aggregate or ROWS: its next rows start at Spark's
    #                             watermark
    held: bool = False          # state kept by Python (transformWithStateInPandas), which
    #                             needs the RocksDB state store
    real_time: bool = False     # one stream's windowed rows, filtered and projected, no
    #                             Python: what Spark's real-time mode runs (real_time.py)


# ---------------------------------------------------------------------- check
@dataclass(frozen=True)
class Kind:
    """What a subtree gives: ``scan`` (a stream's tuples), ``ranged`` / ``unbounded``
    (windowed rows), ``slid`` (a SLIDE window's rows), ``aligned`` / ``keyless`` (an α's rows,
    with keys or without), ``union``, ``join``; ``grid`` (slide, end offset) µs for the
    kinds on a SLIDE grid."""
    name: str
    grid: tuple | None = None
    counts: bool = False        # an α without keys that counts (0 for an empty slide)


_GRIDDED = ("slid", "aligned", "keyless", "joined")


def _with_key(hint_start: str) -> str:
    return hint_start + ", or " + BACKEND_HINT[0].lower() + BACKEND_HINT[1:]


def _check_scan(n: P.StreamScan, kids) -> Kind:
    if n.of_table:
        raise Refused("Stream(t) of a table's changes is read by the back end only")
    if n.arrival:
        raise Refused("a quality-driven join (WITH (recall = …)) reads arrival order")
    if n.proctime:
        raise Refused(f"a window over stream {n.stream}'s arrival time (ON ARRIVAL)")
    if n.end_column:
        raise Refused(f"stream {n.stream} carries its own intervals (ENDTIMESTAMPCOLUMN)")
    return Kind("scan")


def _check_window(n: P.Window, kids) -> Kind:
    if kids[0].name != "scan":
        raise Refused("a window over a derived result")
    w = n.window
    if isinstance(w, P.RangeWindow):
        return Kind("ranged")
    if isinstance(w, P.UnboundedWindow):
        return Kind("unbounded")
    if isinstance(w, P.SlideWindow):
        return Kind("slid", (w.slide_us, (w.start_us or 0) % w.slide_us))
    if isinstance(w, P.RowsWindow):
        return Kind("rows")
    if isinstance(w, P.SessionWindow):
        return Kind("session")
    raise Refused(f"window {P.window_text(w)} (Spark runs RANGE, RANGE … SLIDE, ROWS, SESSION "
                  "and unbounded windows)")


def _check_row_op(n, kids) -> Kind:
    return kids[0]


def _check_aggregate(n: P.Aggregate, kids) -> Kind:
    other = sorted({p.func for p in n.partials} - set(_PARTIALS))
    if other:
        raise Refused(f"aggregate {', '.join(other)} (Spark runs SUM, COUNT, MIN, MAX, AVG)")
    if kids[0].name == "session" and isinstance(n.input, P.Window):
        end = _duck_name(n.input.window.columns[1])
        if not any(k.expr.sql == end for k in n.keys):
            raise Refused("an aggregate over a session window not grouped by its end "
                          "(wend(*))", hint=_with_key("Group by wend(*)"))
        return Kind("session_groups")
    if kids[0].name == "rows" and isinstance(n.input, P.Window):
        keys = {e.sql for e in n.input.window.partition_by}
        if not keys or {k.expr.sql for k in n.keys} != keys:
            raise Refused("an aggregate over a ROWS window not grouped by exactly its "
                          "PARTITION BY keys", hint=_with_key(
                              "Partition the window by the GROUP BY keys"))
    if kids[0].name in ("ranged", "rows") and isinstance(n.input, P.Window):
        if any(p.arg is not None and p.arg.type.upper().startswith(("DECIMAL", "NUMERIC"))
               and p.func == "sum" for p in n.partials):
            raise Refused("SUM or AVG of a DECIMAL over a RANGE or ROWS window (Spark's "
                          "aggregate index there works in floating point)")
        if not n.keys:
            raise Refused("an aggregate over a RANGE window with no GROUP BY key cannot be "
                          "partitioned over Spark's executors", hint=_with_key("Group by a key"))
        return Kind("ranged_agg")
    if kids[0].name not in ("slid", "aligned", "keyless"):
        raise Refused("an aggregate but over one stream's RANGE or RANGE … SLIDE window or "
                      "over such an aggregate's rows")
    counts = any(p.func in ("count", "count_star") for p in n.partials)
    return Kind("aligned" if n.keys else "keyless", kids[0].grid, counts=not n.keys and counts)


def distinct_groups(n: P.Distinct) -> P.Aggregate:
    """δ as the α Spark runs: the back end's GROUP BY of every column with a count
    (``P.distinct_groups``), over the window right under it; through the projection between
    them (``SELECT DISTINCT a, b + 1 …``), by the projection's expressions. Refused where a
    window is not right under it or its projection."""
    below = n.input
    if isinstance(below, P.Window):
        return P.distinct_groups(n)
    if isinstance(below, P.Map) and isinstance(below.input, P.Window):
        keys = tuple(P.NamedExpr(c.name, o.expr) for c, o in zip(n.schema, below.outputs))
        return dataclasses.replace(P.distinct_groups(n), input=below.input, keys=keys)
    raise Refused("DISTINCT but over one stream's window (directly or through its "
                  "projection)")


def _check_distinct(n: P.Distinct, kids) -> Kind:
    kind = _check_aggregate(distinct_groups(n), kids)
    if kind.name == "session_groups":
        raise Refused("DISTINCT over a session window")
    return kind


def _check_union(n: P.Union_, kids) -> Kind:
    if not all(k.name in ("ranged", "unbounded", "slid", "rows", "session") for k in kids):
        raise Refused("a union of anything but windowed rows of streams")
    return Kind("union")


def _check_join(n: P.Join, kids) -> Kind:
    if n.outer:
        raise Refused(f"a {n.outer.upper()} JOIN (its padded rows)")
    if n.kind != "stream-stream":
        if kids[0].name not in ("ranged", "unbounded", "slid") or kids[1].name != "table":
            raise Refused("a join with a table over anything but a stream's windowed rows")
        return Kind("tabled")
    if n.ttl_us is not None:
        raise Refused("a join with state_ttl (only tuples less than that apart meet, by their "
                      "valid_from)")
    names = [k.name for k in kids]
    gridded = all(k in _GRIDDED for k in names) and kids[0].grid == kids[1].grid
    if names == ["slid", "slid"]:
        raise Refused("a join of two SLIDE windows' rows (the back end joins each tuple's "
                      "whole span of windows at once)")
    if names != ["ranged", "ranged"] and not gridded:
        raise Refused("a join whose sides are neither both a stream's rows under a RANGE "
                      "window nor both on the same SLIDE grid (Spark keeps a join's tuples "
                      "as long as their windows)")
    if not n.equi:
        raise Refused("a join of two streams with no equality to partition by",
                      hint=_with_key("Join on a key (a = b)"))
    if any(k.name == "keyless" and k.counts for k in kids):
        raise Refused("a join with a COUNT that has no GROUP BY key (the back end counts 0 "
                      "for an empty slide, which Spark has no row for)",
                      hint=_with_key("Group the count by a key"))
    return Kind("joined", kids[0].grid) if gridded else Kind("join")


def _refuse(why: str):
    def check(n, kids):
        raise Refused(why)
    return check


_CHECKS = {
    P.StreamScan: _check_scan,
    P.Window: _check_window,
    P.Filter: _check_row_op,
    P.Map: _check_row_op,
    P.Aggregate: _check_aggregate,
    P.Union_: _check_union,
    P.Join: _check_join,
    P.TableScan: lambda n, kids: Kind("table"),
    P.WindowRelationScan: _refuse("a named window or derived stream is read from the back "
                                  "end"),
    P.QualityJoin: _refuse("a quality-driven join"),
    P.Distinct: _check_distinct,
    P.Difference: _refuse("EXCEPT"),
    P.Intersection: _refuse("INTERSECT"),
    P.Limit: _refuse("LIMIT (fetch as many rows as you need instead)"),
    P.TopN: _refuse("Top-N (ROW_NUMBER() … <= N)"),
    P.Pattern: _refuse("an event pattern (EVENT SEQ, MATCH_RECOGNIZE)"),
    P.SnapshotQuery: _refuse("a query evaluated on each instant's snapshot (an outer join, a "
                             "window function or Top-N, a subquery in an expression, DISTINCT "
                             "ON or an aggregate without partials)"),
}


def check(p: P.Plan) -> Shape:
    """The plan's shape on Spark, or Refused (0A000) saying what Spark cannot run."""
    def walk(node) -> Kind:
        return _CHECKS[type(node)](node, [walk(c) for c in P.children(node)])

    kind = walk(p.root).name
    if kind == "scan":                    # the planner always puts a window there
        raise Refused("a stream read without a window")
    if kind == "keyless":
        raise Refused("an aggregate with no GROUP BY key cannot be partitioned over Spark's "
                      "executors (and the back end answers every slide, an empty one too)",
                      hint=_with_key("Group by a key"))
    # rows of one stream leave in valid_from order, an α's once Spark closes their window;
    # a union's and a join's wait for the watermarks
    return Shape(tuple(sorted(P.streams_read(p.root))),
                 hold=kind in ("union", "join", "joined"),
                 closes=P.contains(p.root, _grouping) or P.contains(p.root, _holding),
                 with_table=kind == "tabled", session_groups=kind == "session_groups",
                 ranged=P.contains(p.root, _indexed) or P.contains(p.root, _rows),
                 held=P.contains(p.root, _indexed) or P.contains(p.root, _holding),
                 real_time=kind in ("ranged", "unbounded", "slid") and not p.functions)


def _grouping(node) -> bool:
    return isinstance(node, (P.Aggregate, P.Distinct))


def _indexed(node) -> bool:
    """An α (δ too) the aggregate index runs, in Python (range_aggregate.py): over RANGE,
    or over ROWS by its partition."""
    if isinstance(node, P.Distinct):
        node = distinct_groups(node)
    return isinstance(node, P.Aggregate) and isinstance(node.input, P.Window) and \
        isinstance(node.input.window, (P.RangeWindow, P.RowsWindow))


def _rows(node) -> bool:
    return isinstance(node, P.Window) and isinstance(node.window, P.RowsWindow)


def _holding(node) -> bool:
    """An ω whose tuples Python holds per key (held_tuples.py)."""
    return isinstance(node, P.Window) and isinstance(node.window, (P.RowsWindow,
                                                                   P.SessionWindow))


def _split(root, kind) -> tuple:
    """(the ops above the first ``kind`` down the plan's first inputs, root first; it)."""
    above, node = [], root
    while not isinstance(node, kind):
        above.append(node)
        node = node.input
    return above, node


def table_join(root) -> tuple:
    """A plan that ends in a join with a table: (the ops above the join, root first; the
    join). Spark runs the join's stream side; the server the rest (``TableFinish``)."""
    return _split(root, P.Join)


def spark_root(p: P.Plan, shape: Shape):
    """What Spark runs of ``p``: its root, but where the server finishes the plan for each
    micro-batch (a join with a table, an α over sessions), the input of that."""
    if shape.with_table:
        return table_join(p.root)[1].left
    if shape.session_groups:
        return _split(p.root, P.Aggregate)[1].input
    return p.root


def finish(p: P.Plan, shape: Shape, contents):
    """What the server makes of each micro-batch's rows from Spark (None: they are the
    plan's); ``contents(name)`` gives a table's committed rows."""
    if shape.with_table:
        return TableFinish(p.root, contents, p.functions)
    if shape.session_groups:
        return SessionFinish(p.root, p.functions)
    return None


def _connect(functions: tuple):
    """A DuckDB connection for the plan's SQL, locked down as the back end's is, with the
    plan's Python functions (the part of it made here may call them too)."""
    con = duckdb.connect(config=dict(P.EXPRESSION_CONFIG))
    for f in functions:
        f.install(con)
    return P.expression_settings(con)


class SessionFinish:
    """An α over closed sessions (grouped by their end), then the σ and μ above it, made in
    the server by DuckDB for each micro-batch of the session window's rows from Spark, as
    the back end makes it for each batch: a session leaves whole, in one batch, and a
    group's tuples all hold for the same interval, so each group's row is its partials over
    them (a SUM of integers a BIGINT, as the back end's), then the finals."""

    def __init__(self, root, functions: tuple = ()):
        self.functions = functions
        self.above, self.aggregate = _split(root, P.Aggregate)
        n = self.aggregate
        keys = [f"{k.expr.sql} AS {_duck_name(k.name)}" for k in n.keys]
        partials = [f"{_DUCK_PARTIALS[p.func](p)} AS {_duck_name(p.name)}" for p in n.partials]
        grouped = (f"SELECT {', '.join(keys + partials)}, {TS}, {TE} FROM r GROUP BY "
                   f"{', '.join([k.expr.sql for k in n.keys] + [TS, TE])}")
        finals = ", ".join(f"{f.expr.sql} AS {_duck_name(f.name)}" for f in n.finals)
        self.sql = _finish_sql(self.above, f"SELECT {finals}, {TS}, {TE} FROM ({grouped})")
        self.con = None           # made at the first batch (EXPLAIN needs none)

    def __call__(self, rows: pa.Table) -> pa.Table:
        if self.con is None:
            self.con = _connect(self.functions)
        self.con.register("r", rows)
        try:
            return self.con.sql(self.sql).to_arrow_table()
        finally:
            self.con.unregister("r")

    def explain(self) -> str:
        return ("then in the server, for each micro-batch: " + P.explain_label(self.aggregate)
                + " over its closed sessions" + "".join(f", {P.explain_label(op)}"
                                                        for op in reversed(self.above)))


def _finish_sql(above: list, below: str) -> str:
    """The σ and μ ``above`` (root first) over the SQL ``below``."""
    for op in reversed(above):
        below = _FINISH[type(op)](op, below)
    return below


class TableFinish:
    """The end of a plan that joins a table, made in the server by DuckDB for each
    micro-batch's stream rows, against the table as it stands then (the back end too joins
    each batch with the table as it stands when the batch comes): the join, then the σ and
    μ above it. ``contents(name)`` gives a table's committed rows."""

    def __init__(self, root, contents, functions: tuple = ()):
        self.above, self.join = table_join(root)
        self.contents = contents
        self.functions = functions
        self.con = None           # made at the first batch (EXPLAIN needs none)
        self.filters, scan = [], self.join.right
        while not isinstance(scan, P.TableScan):       # σ on the table's side
            self.filters.append(scan.predicate.sql)
            scan = scan.input
        self.scan = scan
        left = [c.name for c in self.join.left.schema]
        right = [c.name for c in self.join.right.schema]
        cond = [f"({a.sql}) = ({b.sql})" for a, b in self.join.equi] + \
            ([f"({self.join.residual.sql})"] if self.join.residual is not None else [])
        self.sql = _finish_sql(self.above, (
            f"SELECT {_duck_list(left)}, {_duck_list(right)}, {TS}, {TE} FROM l JOIN r "
            f"ON {' AND '.join(cond) or 'TRUE'}"))

    def __call__(self, rows: pa.Table) -> pa.Table:
        if self.con is None:
            self.con = _connect(self.functions)
        table = self.contents(self.scan.table)
        by_name = {n.lower(): n for n in table.schema.names}
        names = [c.name for c in self.scan.schema]
        r = table.select([by_name[n.split(".", 1)[1].lower()] for n in names]) \
            .rename_columns(names)
        if self.filters:
            self.con.register("t", r)
            r = self.con.sql("SELECT * FROM t WHERE " + " AND ".join(
                f"({f})" for f in self.filters)).to_arrow_table()
        self.con.register("l", rows)
        self.con.register("r", r)
        try:
            return self.con.sql(self.sql).to_arrow_table()
        finally:
            for name in ("l", "r", "t"):
                self.con.unregister(name)

    def explain(self) -> str:
        return (f"then in the server, for each micro-batch: ⋈ table {self.scan.table} as it "
                "stands (DuckDB)" + "".join(f", {P.explain_label(op)}"
                                              for op in reversed(self.above)))


def _duck_name(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")


def _duck_list(names: list) -> str:
    return ", ".join(_duck_name(n) for n in names)


def _duck_sum(p: P.Partial) -> str:
    return f"CAST(sum({p.arg.sql}) AS BIGINT)" if _integral(p.arg.type) else f"sum({p.arg.sql})"


# a partial of the plan as DuckDB's aggregate (the server's α over sessions)
_DUCK_PARTIALS = {
    "sum": _duck_sum,
    "count": lambda p: f"count({p.arg.sql})",
    "count_star": lambda p: "count(*)",
    "min": lambda p: f"min({p.arg.sql})",
    "max": lambda p: f"max({p.arg.sql})",
}


# the σ and μ above a join with a table, over the SQL of what is below them
_FINISH = {
    P.Filter: lambda op, below: f"SELECT * FROM ({below}) WHERE {op.predicate.sql}",
    P.Map: lambda op, below: "SELECT " + ", ".join(
        f"{o.expr.sql} AS " + exp.to_identifier(o.name, quoted=True).sql("duckdb")
        for o in op.outputs) + f", {TS}, {TE} FROM ({below})",
}


# ---------------------------------------------------------------------- build
# Spark's functions that call into the JVM: never reachable from a query
_JVM_CALLS = {"reflect", "java_method", "try_reflect"}


def spark_sql(e: P.Expr, python: frozenset = frozenset(), types: dict | None = None) -> str:
    """An expression of the plan (DuckDB SQL) as Spark SQL. A function sqlglot does not know
    must be one of DuckDB's (the plan's SQL is DuckDB's) or a Python function of the plan
    (``python``: their DuckDB names, which ``register_functions`` gives Spark), and none may
    call into Spark's JVM: 42883, as PostgreSQL answers a function it does not have.
    ``types``: {column: DuckDB type} of the columns it may read, which tell what a cast to
    an integer casts (a fraction is rounded as DuckDB rounds it, not cut off)."""
    tree = sqlglot.parse_one(e.sql, read="duckdb")
    for f in tree.find_all(exp.Anonymous):
        name = f.name.lower()
        if name in python:
            continue
        if name in _JVM_CALLS or name not in _duckdb_functions():
            raise E.PgError(f"function {name} does not exist", sqlstate="42883")
    casts = [c for c in tree.find_all(exp.Cast) if c.to.this in _WHOLE_TYPES]
    # the innermost first: a cast rounded copies its operand, inner casts and all
    for cast, operand in reversed(list(zip(casts, _operand_types(tree, casts, types or {})))):
        if operand in _FRACTIONAL:
            cast.set("this", _rounded(cast.this))
    for null in list(tree.find_all(exp.Null)):
        # a bare NULL where a truth value goes (CASE WHEN NULL, NULL OR …) is one in DuckDB,
        # but of no type in Spark, which then refuses the query
        if isinstance(null.parent, _TRUTH) and null.arg_key in ("this", "expression") or \
                isinstance(null.parent, exp.If) and null.arg_key == "this":
            null.replace(exp.cast(exp.Null(), exp.DataType.Type.BOOLEAN))
    for b in list(tree.find_all(exp.Bracket)):
        if len(b.expressions) == 1:
            # DuckDB's list[i] counts from 1, as Spark's element_at does (its [] from 0);
            # sqlglot's reading made a literal i count from 0 and left any other as written
            i = b.expressions[0].copy()
            if isinstance(i, exp.Literal) and i.is_int:
                i = exp.Literal.number(int(i.name) + 1)
            # NULL past the end, as in DuckDB
            b.replace(exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[b.this.copy(), i]))
    return tree.sql("spark")


_TRUTH = (exp.And, exp.Or, exp.Not, exp.Xor)
_WHOLE_TYPES = (exp.DataType.Type.TINYINT, exp.DataType.Type.SMALLINT, exp.DataType.Type.INT,
                exp.DataType.Type.BIGINT)


_FRACTIONAL = (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL)


def _operand_types(tree, casts: list, types: dict) -> list:
    """What each of ``casts`` (casts in ``tree``) casts, by sqlglot's reading of a copy of
    the tree, its columns typed by ``types`` (a column it does not know: UNKNOWN)."""
    if not casts:
        return []
    copy, names = tree.copy(), {}
    for c in list(copy.find_all(exp.Column)):
        c.replace(exp.column(names.setdefault(c.name, f"c{len(names)}"), "t"))
    select = exp.select(copy).from_("t")
    known = {n: types[c] for c, n in names.items() if c in types} or {"none": "INT"}
    annotate_types(select, schema={"t": known}, dialect="duckdb")
    return [c.this.type.this if c.this.type else None for c in select.find_all(exp.Cast)
            if c.to.this in _WHOLE_TYPES]


def _column_types(root) -> dict:
    """{column: DuckDB type} of every node's columns in a plan, an α's keys and partials
    too (which its finals read)."""
    types = {c.name: c.type for c in root.schema}
    if isinstance(root, P.Aggregate):
        types.update({k.name: k.expr.type for k in root.keys})
        types.update({p.name: _partial_duck_type(p) for p in root.partials})
    for child in P.children(root):
        types.update(_column_types(child))
    return types


def _partial_duck_type(p: P.Partial) -> str:
    """A partial's DuckDB type, as far as a cast of it to an integer needs: a count or a
    SUM of integers is whole, a MIN or MAX is its argument's type, a SUM else a DOUBLE."""
    if p.func in ("count", "count_star") or (p.func == "sum" and _integral(p.arg.type)):
        return "BIGINT"
    return p.arg.type if p.func in ("min", "max") else "DOUBLE"


def _rounded(x: exp.Expression) -> exp.Expression:
    """``x`` rounded as DuckDB rounds it when cast to an integer, where Spark's cast cuts off
    the fraction: a DECIMAL half away from zero (CAST(2.5 AS INT) is 3), a DOUBLE or REAL
    half to even (CAST(2.5::DOUBLE AS INT) is 2); an integer stays as it is. Which one is
    Spark's type of ``x`` (a literal 0.5 is a DECIMAL in both)."""
    decimal = exp.Like(this=exp.Anonymous(this="typeof", expressions=[x.copy()]),
                       expression=exp.Literal.string("decimal%"))
    return exp.Case(ifs=[exp.If(this=decimal, true=exp.Round(this=x.copy()))],
                    default=exp.Anonymous(this="bround", expressions=[x.copy()]))


@functools.cache
def _duckdb_functions() -> frozenset:
    with duckdb.connect() as con:
        return frozenset(r[0].lower() for r in con.sql(
            "SELECT DISTINCT function_name FROM duckdb_functions()").fetchall())


def q(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("spark")


def _plus_us(column: str, us: int) -> str:
    return (f"CAST(timestamp_micros(unix_micros(CAST({q(column)} AS TIMESTAMP)) + {us}) "
            "AS TIMESTAMP_NTZ)")


class Builder:
    """Makes the DataFrame of a checked plan; ``read(scan)`` gives a scan's spool as a
    streaming DataFrame (the stream's columns, then PUNCT)."""

    def __init__(self, read, functions: tuple = ()):
        self.read = read
        self.exploded: set = set()      # SLIDE windows whose rows a join on the grid reads
        self.python = frozenset(f.duck_name for f in functions)
        self.types: dict = {}

    def spark_sql(self, e: P.Expr) -> str:
        return spark_sql(e, self.python, self.types)

    def build(self, node):
        if not self.types:      # the plan's columns' types, for its expressions' casts
            self.types = _column_types(node)
        return self._BUILD[type(node)](self, node)

    def _scan(self, n: P.StreamScan, ordered: bool = False):
        df = self.read(n, ordered) if ordered else self.read(n)
        cols = [f"{q(c.name.split('.', 1)[1])} AS {q(c.name)}" for c in n.schema]
        return df.selectExpr(*cols, f"{q(n.timestamp_column)} AS {TS}",
                             f"{q(n.timestamp_column)} AS {TE}", PUNCT,
                             *([ORDER] if ordered else []))

    def _window(self, n: P.Window):
        w = n.window
        if isinstance(w, (P.RowsWindow, P.SessionWindow)):
            return self._held_tuples(n)
        df = self.build(n.input)
        if isinstance(w, P.RangeWindow):
            return df.withColumn(TE, F.expr(_plus_us(TS, w.size_us)))
        if isinstance(w, P.UnboundedWindow):
            return df.withColumn(TE, F.expr("CAST(NULL AS TIMESTAMP_NTZ)"))
        if n in self.exploded:      # a join on the grid: a row per window, to meet its own
            df = _event_time(df)
            names = [q(c.name) for c in n.schema]
            df = df.select(*names, _spark_window(w).alias("__w"))
            return _on_grid(df.select(*names, F.window_time("__w").alias(WT)), w.slide_us)
        # a tuple's row, as the back end's: from the first window that holds it until the
        # one after the last ((τ − size, τ] holds ts when ts <= τ < ts + size)
        j, o = w.slide_us, (w.start_us or 0) % w.slide_us
        t = f"unix_micros(CAST({TS} AS TIMESTAMP))"
        first = f"({o} + (({t} - {o} + {j} - 1) DIV {j}) * {j})"
        last = f"({o} + (({t} + {w.size_us} - 1 - {o}) DIV {j}) * {j})"
        df = df.where(f"{PUNCT} OR {first} <= {last}")
        return df.withColumn(TE, F.expr(f"CAST(timestamp_micros({last} + {j}) AS TIMESTAMP_NTZ)")) \
            .withColumn(TS, F.expr(f"CAST(timestamp_micros({first}) AS TIMESTAMP_NTZ)"))

    def _held_input(self, n: P.Window):
        """The stream a ROWS or SESSION window reads, each tuple with its place in the
        stream, after the WHERE inside the window's brackets."""
        df = self._scan(n.input, ordered=True)
        where = getattr(n.window, "where", None)
        return df if where is None else df.where(f"{PUNCT} OR ({self.spark_sql(where)})")

    def _held_tuples(self, n: P.Window):
        """ω ROWS or SESSION: per partition key (none: one key for all), the back end's
        window in Python (held_tuples.py), its state in Spark's state store; the stream's
        columns go in and out named by their place (``cq_c0``, …), as a RANGE aggregate's
        do, and each tuple with its place in the stream, which orders tuples at one
        instant."""
        w = n.window
        df = self._held_input(n)
        inner = [c for c in n.schema if c.name not in getattr(w, "columns", ())]
        ccols = [f"cq_c{i}" for i in range(len(inner))]
        keys, kcols = _group_keys([self.spark_sql(e) for e in w.partition_by] or ["0"])
        df = _event_time(df).selectExpr(
            *keys, *(f"{q(c.name)} AS {k}" for c, k in zip(inner, ccols)),
            f"unix_micros(CAST({TS} AS TIMESTAMP)) AS {HT.TS_US}", f"{ORDER} AS {HT.SEQ}", ET)
        types = [f"{k} {spark_type(c.type)}" for c, k in zip(inner, ccols)]
        if isinstance(w, P.RowsWindow):
            processor, extra = HT.RowsWindow(ccols, w.rows), []
        else:
            processor, extra = HT.SessionWindow(ccols, w.gap_us), [HT.START, HT.END]
        out = df.groupBy(*kcols).transformWithStateInPandas(
            processor, outputStructType=", ".join(
                types + [f"{c} BIGINT" for c in extra + [HT.FROM, HT.TO]]),
            outputMode="Append", timeMode="EventTime")
        micros = "CAST(timestamp_micros({}) AS TIMESTAMP_NTZ)"
        bounds = [F.expr(micros.format(c)).alias(name)
                  for c, name in zip(extra, getattr(w, "columns", ()))]
        return out.select(*(F.col(k).alias(c.name) for c, k in zip(inner, ccols)), *bounds,
                          F.expr(micros.format(HT.FROM)).alias(TS),
                          F.expr(micros.format(HT.TO)).alias(TE), F.lit(False).alias(PUNCT))

    def _filter(self, n: P.Filter):
        # a watermark's row passes every filter; the OR keeps Spark from splitting it off
        return self.build(n.input).where(f"{PUNCT} OR ({self.spark_sql(n.predicate)})")

    def _map(self, n: P.Map):
        df = self.build(n.input)
        return df.selectExpr(*(f"{self.spark_sql(o.expr)} AS {q(o.name)}" for o in n.outputs),
                             *_carried(df))

    def _union(self, n: P.Union_):
        frames = []
        for child in n.inputs:
            df = self.build(child)
            names = [c.name for c in n.schema]
            frames.append(df.toDF(*names, *df.columns[len(names):]))
        out = frames[0]
        for f in frames[1:]:
            out = out.unionByName(f)
        return out

    def _aggregate(self, n: P.Aggregate):
        keys = [f"{self.spark_sql(k.expr)} AS {q(k.name)}" for k in n.keys]
        args = [f"{self.spark_sql(p.arg)} AS {q(p.name)}" for p in n.partials if p.arg is not None]
        if _indexed(n):
            return self._range_aggregate(n)
        if isinstance(n.input, P.Window):       # over a SLIDE window's tuples: by window
            w = n.input.window
            df = _event_time(self.build(n.input.input)).selectExpr(*keys, *args, ET)
            by = _spark_window(w).alias("__w")
        else:                                    # over an α's rows: by their window
            w = _slide_below(n.input)
            df = self.build(n.input).selectExpr(*keys, *args, WT)
            by = F.col(WT)
        aggs = [_PARTIALS[p.func](p.name).alias(p.name) for p in n.partials] or \
            [F.count(F.lit(1)).alias("__n")]       # Spark's agg() needs one
        agg = df.groupBy(by, *(F.col(k.name) for k in n.keys)).agg(*aggs)
        if isinstance(n.input, P.Window):
            agg = agg.withColumn(WT, F.window_time("__w"))
        agg = _on_grid(agg, w.slide_us)
        return agg.selectExpr(*(f"{self.spark_sql(f.expr)} AS {q(f.name)}" for f in n.finals),
                              *_carried(agg))

    def _range_aggregate(self, n: P.Aggregate):
        """By key, the back end's aggregate index in Python (range_aggregate.py), its state
        in Spark's state store; rows out up to Spark's watermark at each micro-batch. The
        keys and partials go into Spark's pandas function named by their place (``cq_k0``,
        ``cq_p0``, …) and get their names back after it: Spark renames a column with
        leading underscores on its way in (DISTINCT's count, ``__n``, then gave no rows)."""
        keys, kcols = _group_keys([self.spark_sql(k.expr) for k in n.keys])
        nulls = kcols[len(n.keys):]
        pcols = [f"cq_p{i}" for i in range(len(n.partials))]
        w = n.input.window
        rows = isinstance(w, P.RowsWindow)
        df = self._held_input(n.input) if rows else self.build(n.input.input)
        df = _event_time(df).selectExpr(
            *keys,
            *(f"{self.spark_sql(p.arg)} AS {c}" for p, c in zip(n.partials, pcols)
              if p.arg is not None),
            f"unix_micros(CAST({TS} AS TIMESTAMP)) AS {RA.TS_US}",
            *([f"{ORDER} AS {RA.SEQ}"] if rows else []), ET)
        integral = [p.func in ("count", "count_star") or
                    (p.func in ("sum", "min", "max") and _integral(p.arg.type))
                    for p in n.partials]
        out = ", ".join([f"{c} {spark_type(k.expr.type)}" for k, c in zip(n.keys, kcols)]
                        + [f"{c} BOOLEAN" for c in nulls]
                        + [f"{c} {_partial_type(p, whole)}"
                           for p, c, whole in zip(n.partials, pcols, integral)]
                        + [f"{RA.FROM} BIGINT", f"{RA.TO} BIGINT"])
        agg = df.groupBy(*kcols).transformWithStateInPandas(
            (RA.RowsAggregate if rows else RA.RangeAggregate)(
                kcols, [(c, p.func) for p, c in zip(n.partials, pcols)],
                w.rows if rows else w.size_us, integral),
            outputStructType=out, outputMode="Append", timeMode="EventTime")
        agg = agg.select(
            *(F.col(c).alias(k.name) for k, c in zip(n.keys, kcols)),
            *(F.col(c).alias(p.name) for p, c in zip(n.partials, pcols)),
            F.expr(f"CAST(timestamp_micros({RA.FROM}) AS TIMESTAMP_NTZ)").alias(TS),
            F.expr(f"CAST(timestamp_micros({RA.TO}) AS TIMESTAMP_NTZ)").alias(TE))
        return agg.selectExpr(*(f"{self.spark_sql(f.expr)} AS {q(f.name)}" for f in n.finals),
                              TS, TE, f"false AS {PUNCT}")

    def _join(self, n: P.Join):
        gridded = _slide_below(n.left) is not None
        if gridded:
            self.exploded.update(_slide_rows(n.left) + _slide_rows(n.right))
        sides = []
        for side, child in (("l", n.left), ("r", n.right)):
            df = self.build(child)
            if not gridded:
                df = _event_time(df).withColumn(WT, F.col(ET))
            names = [c.name for c in child.schema]
            sides.append(df.selectExpr(*(q(c) for c in names), f"{TS} AS __ts_{side}",
                                       f"{TE} AS __te_{side}", f"{WT} AS __wt_{side}"))
        cond = [f"({self.spark_sql(a)}) = ({self.spark_sql(b)})" for a, b in n.equi]
        if gridded:             # the same window on both sides
            cond.append("__wt_l = __wt_r")
        else:                   # the intervals meet: each starts before the other ends
            spans = [_range_of(n.left), _range_of(n.right)]
            cond += [f"__wt_l < __wt_r + INTERVAL '{spans[1]}' MICROSECOND",
                     f"__wt_r < __wt_l + INTERVAL '{spans[0]}' MICROSECOND"]
        out = sides[0].join(sides[1], F.expr(" AND ".join(cond)), "inner")
        if n.residual is not None:
            out = out.where(self.spark_sql(n.residual))
        return out.selectExpr(*(q(c.name) for c in n.schema),
                              f"greatest(__ts_l, __ts_r) AS {TS}",
                              f"least(__te_l, __te_r) AS {TE}", f"false AS {PUNCT}",
                              *([f"__wt_l AS {WT}"] if gridded else []))

    def _distinct(self, n: P.Distinct):
        return self._aggregate(distinct_groups(n))

    _BUILD = {P.StreamScan: _scan, P.Window: _window, P.Filter: _filter, P.Map: _map,
              P.Union_: _union, P.Aggregate: _aggregate, P.Distinct: _distinct,
              P.Join: _join}


def _group_keys(exprs: list) -> tuple:
    """(select items, columns) grouping by Spark SQL ``exprs`` in Spark's arbitrary stateful
    processing: each as ``cq_k<i>``, then whether it is NULL as ``cq_n<i>``. Spark's state
    store took a NULL key for another key's value there (a ROWS window's NULL partition
    ended the tuples of partition 2), so a NULL is told apart by its flag too."""
    items = [f"{x} AS cq_k{i}" for i, x in enumerate(exprs)] + \
        [f"({x}) IS NULL AS cq_n{i}" for i, x in enumerate(exprs)]
    return items, [i.rsplit(" AS ", 1)[1] for i in items]


def _event_time(df):
    """``df`` with its event time 1 µs early as Spark's watermark column (ET), and the
    watermark rows gone after they moved Spark's watermark. The shift puts a SLIDE window's
    (τ − i, τ] on Spark's [start, end); it is the same on both sides of a join, so its
    conditions hold. A watermark row's time goes 1 ms further back: Spark keeps its watermark
    in whole milliseconds, and a tuple at the watermark itself must stay later than it."""
    df = df.withColumn(ET, F.expr(
        f"CAST({TS} AS TIMESTAMP) - CASE WHEN {PUNCT} THEN INTERVAL 1001 MICROSECONDS "
        "ELSE INTERVAL 1 MICROSECOND END"))
    df = df.withWatermark(ET, "0 seconds")
    # after the watermark, and naming its column, so Spark cannot push it below
    return df.where(f"NOT {PUNCT} OR {ET} IS NULL")


def _spark_window(w: P.SlideWindow):
    """Spark's window() for a SLIDE window: Spark puts a window's start on its grid, cqgate
    its end; the same when the size is a multiple of the slide, otherwise Spark's grid is
    shifted by the size."""
    offset = ((w.start_us or 0) - w.size_us) % w.slide_us
    return F.window(ET, f"{w.size_us} microseconds", f"{w.slide_us} microseconds",
                    f"{offset} microseconds")


def _on_grid(df, slide_us: int):
    """A frame with WT (its window's end − 1 µs) given its interval: [end, end + slide)."""
    df = df.withColumn(TS, F.expr(f"CAST({WT} + INTERVAL 1 MICROSECOND AS TIMESTAMP_NTZ)"))
    return df.withColumn(TE, F.expr(_plus_us(TS, slide_us))) \
        .withColumn(PUNCT, F.lit(False))


def _carried(df) -> list:
    """The interval and bookkeeping columns a frame carries on."""
    return [TS, TE, PUNCT] + ([WT] if WT in df.columns else [])


def _window_under(node, past_aggregates: bool = True) -> P.Window | None:
    """The ω a frame reads, down its first inputs (through its σ, μ and, with
    ``past_aggregates``, α); None: there is none."""
    while not isinstance(node, P.Window):
        kids = P.children(node)
        if not kids or (isinstance(node, P.Aggregate) and not past_aggregates):
            return None
        node = kids[0]
    return node


def _slide_below(node) -> P.SlideWindow | None:
    """The SLIDE window under a frame on a SLIDE grid (None: it is not on one)."""
    w = _window_under(node)
    return w.window if w is not None and isinstance(w.window, P.SlideWindow) else None


def _slide_rows(node) -> list:
    """The ω SLIDE under a join's side whose rows it reads (not an α's window)."""
    w = _window_under(node, past_aggregates=False)
    return [w] if w is not None else []


_INTEGRAL = ("TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
             "USMALLINT", "UINTEGER", "UBIGINT")


def _integral(duck_type: str) -> bool:
    return duck_type.upper() in _INTEGRAL


def _partial_type(p: P.Partial, whole: bool) -> str:
    """The Spark type a RANGE aggregate's partial leaves Python with."""
    if p.func in ("count", "count_star") or (p.func == "sum" and whole):
        return "BIGINT"
    if p.func == "sum":
        return "DOUBLE"
    return spark_type(p.arg.type)


def _range_of(node) -> int:
    """The RANGE (µs) of the window a join's side reads (under its σ and μ)."""
    return _window_under(node).window.size_us


# a partial of the plan as Spark's aggregate of the column holding its argument
_PARTIALS = {
    "sum": F.sum,
    "count": F.count,
    "count_star": lambda name: F.count(F.lit(1)),
    "min": F.min,
    "max": F.max,
}
