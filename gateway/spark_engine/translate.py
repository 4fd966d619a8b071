"""A continuous query's plan (the temporal algebra) as a Spark Structured Streaming DataFrame
over its streams' spools, or a 0A000 saying why Spark cannot give the same answers.

``check`` walks the plan without Spark (so a refusal comes before any JVM starts) and says
what shape it has; ``build`` makes the DataFrame. Every frame carries the rows' interval as
``__ts`` / ``__te`` (TIMESTAMP_NTZ; a NULL ``__te`` is ∞) and ``__punct`` (the rows that carry a
stream's watermark, see spool_source), with the plan's own column names. What runs:

- σ, μ and ω RANGE / unbounded over one stream: row by row, every row released at once
  (the spool is in valid_from order already);
- ∪ of those: every row held until each input's watermark passes its valid_from, so rows
  still leave in valid_from order;
- α over ω RANGE … SLIDE grouped by a key, with sum, count, min, max (and AVG, made of
  them): Spark's own ``window()`` and ``groupBy`` with an event-time watermark, in the JVM.
  A slide's window is (τ − i, τ]; Spark's are [start, end), so the event time is read 1 µs
  earlier, and a window ending at τ closes when the stream's watermark passes τ (a watermark
  row at W moves Spark's to W − 1 µs, and Spark closes windows whose end is at most that).

Expressions are the plan's DuckDB SQL, written for Spark by sqlglot.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from pyspark.sql import functions as F
from sqlglot import exp

from executor import plan as P

from gateway.pgwire import errors as E
from gateway.spark_engine.spool_source import PUNCT

TS, TE = "__ts", "__te"
ET = "__et"                     # the event time Spark's watermark and window() read
BACKEND_HINT = "Run it on the back end: SET cq.engine = backend (the default)."


class Refused(E.PgError):
    def __init__(self, why: str, hint: str = BACKEND_HINT):
        super().__init__(f"the Spark engine cannot run this query with cqgate's semantics: "
                         f"{why}", sqlstate="0A000", hint=hint)


@dataclass(frozen=True)
class Shape:
    """What ``check`` found: the streams read, and whether rows of one micro-batch must wait
    for the inputs' watermarks (a union) before they leave."""
    streams: tuple
    hold: bool


# ---------------------------------------------------------------------- check
# what a subtree gives: "scan" (a stream's tuples), "ranged" / "unbounded" (windowed rows),
# "slide" (a SLIDE window's, for an aggregate), "aggregate", "union" or "join" (whose rows
# must wait for the inputs' watermarks)
_WINDOWED = ("ranged", "unbounded")


def _check_scan(n: P.StreamScan, kids) -> str:
    if n.of_table:
        raise Refused("Stream(t) of a table's changes is read by the back end only")
    if n.arrival:
        raise Refused("a quality-driven join (WITH (recall = …)) reads arrival order")
    if n.end_column:
        raise Refused(f"stream {n.stream} carries its own intervals (ENDTIMESTAMPCOLUMN)")
    return "scan"


_WINDOW_KINDS = {P.RangeWindow: "ranged", P.UnboundedWindow: "unbounded",
                 P.SlideWindow: "slide"}


def _check_window(n: P.Window, kids) -> str:
    if kids[0] != "scan":
        raise Refused("a window over a derived result")
    kind = _WINDOW_KINDS.get(type(n.window))
    if kind is None:
        raise Refused(f"window {P.window_text(n.window)} (Spark runs RANGE, RANGE … "
                      "SLIDE and unbounded windows)")
    return kind


def _check_row_op(n, kids) -> str:
    if kids[0] == "slide":
        raise Refused("rows of a SLIDE window outside an aggregate")
    return kids[0]


def _check_aggregate(n: P.Aggregate, kids) -> str:
    if kids[0] != "slide":
        raise Refused("an aggregate over a RANGE window (its rows change at every tuple and "
                      "expiry); Spark runs aggregates over RANGE … SLIDE windows")
    if not n.keys:
        raise Refused("an aggregate with no GROUP BY key cannot be partitioned over Spark's "
                      "executors", hint="Group by a key, or " + BACKEND_HINT[0].lower()
                      + BACKEND_HINT[1:])
    other = sorted({p.func for p in n.partials} - set(_PARTIALS))
    if other:
        raise Refused(f"aggregate {', '.join(other)} (Spark runs SUM, COUNT, MIN, MAX, AVG)")
    return "aggregate"


def _check_union(n: P.Union_, kids) -> str:
    if not all(k in _WINDOWED for k in kids):
        raise Refused("a union of anything but windowed rows of streams")
    return "union"


def _check_join(n: P.Join, kids) -> str:
    if n.kind != "stream-stream":
        raise Refused("a join with a table (its rows change in event time as it is "
                      "updated)")
    if kids != ["ranged", "ranged"]:
        raise Refused("a join whose sides are not both a stream's rows under a RANGE window "
                      "(Spark keeps a join's tuples as long as their windows: both sides "
                      "need one)")
    if not n.equi:
        raise Refused("a join of two streams with no equality to partition by",
                      hint="Join on a key (a = b), or " + BACKEND_HINT[0].lower()
                      + BACKEND_HINT[1:])
    return "join"


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
    P.TableScan: _refuse("a join with a table (its rows change in event time as it is "
                         "updated)"),
    P.WindowRelationScan: _refuse("a named window or derived stream is read from the back "
                                  "end"),
    P.QualityJoin: _refuse("a quality-driven join"),
    P.Distinct: _refuse("DISTINCT"),
    P.Difference: _refuse("EXCEPT"),
    P.Limit: _refuse("LIMIT (fetch as many rows as you need instead)"),
    P.Pattern: _refuse("an event pattern (EVENT SEQ, MATCH_RECOGNIZE)"),
}


def check(p: P.Plan) -> Shape:
    """The plan's shape on Spark, or Refused (0A000) saying what Spark cannot run."""
    def walk(node) -> str:
        return _CHECKS[type(node)](node, [walk(c) for c in P.children(node)])

    kind = walk(p.root)
    if kind in ("scan", "slide"):          # the planner always puts a window there
        raise Refused("a stream read without a window")
    return Shape(tuple(sorted(P.streams_read(p.root))), hold=kind in ("union", "join"))


# ---------------------------------------------------------------------- build
def spark_sql(e: P.Expr) -> str:
    """An expression of the plan (DuckDB SQL) as Spark SQL."""
    return sqlglot.transpile(e.sql, read="duckdb", write="spark")[0]


def q(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("spark")


def _plus_us(column: str, us: int) -> str:
    return (f"CAST(timestamp_micros(unix_micros(CAST({q(column)} AS TIMESTAMP)) + {us}) "
            "AS TIMESTAMP_NTZ)")


class Builder:
    """Makes the DataFrame of a checked plan; ``read(scan)`` gives a scan's spool as a
    streaming DataFrame (the stream's columns, then PUNCT)."""

    def __init__(self, read):
        self.read = read

    def build(self, node):
        return self._BUILD[type(node)](self, node)

    def _scan(self, n: P.StreamScan):
        df = self.read(n)
        cols = [f"{q(c.name.split('.', 1)[1])} AS {q(c.name)}" for c in n.schema]
        return df.selectExpr(*cols, f"{q(n.timestamp_column)} AS {TS}",
                             f"{q(n.timestamp_column)} AS {TE}", PUNCT)

    def _window(self, n: P.Window):
        df = self.build(n.input)
        if isinstance(n.window, P.RangeWindow):
            return df.withColumn(TE, F.expr(_plus_us(TS, n.window.size_us)))
        return df.withColumn(TE, F.expr("CAST(NULL AS TIMESTAMP_NTZ)"))

    def _filter(self, n: P.Filter):
        # a watermark's row passes every filter; the OR keeps Spark from splitting it off
        return self.build(n.input).where(f"{PUNCT} OR ({spark_sql(n.predicate)})")

    def _map(self, n: P.Map):
        df = self.build(n.input)
        return df.selectExpr(*(f"{spark_sql(o.expr)} AS {q(o.name)}" for o in n.outputs),
                             TS, TE, PUNCT)

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
        from_window = n.input
        w = from_window.window
        # the event time 1 µs early: Spark's [start, end) is then the slide's (τ − i, τ]
        df = _event_time(self.build(from_window.input))
        keys = [f"{spark_sql(k.expr)} AS {q(k.name)}" for k in n.keys]
        args = [f"{spark_sql(p.arg)} AS {q(p.name)}" for p in n.partials if p.arg is not None]
        df = df.selectExpr(*keys, *args, ET)
        # Spark puts a window's start on its grid, cqgate its end: the same when the size is
        # a multiple of the slide, otherwise Spark's grid is shifted by the size
        offset = ((w.start_us or 0) - w.size_us) % w.slide_us
        window = F.window(ET, f"{w.size_us} microseconds", f"{w.slide_us} microseconds",
                          f"{offset} microseconds")
        grouped = df.groupBy(window.alias("__w"), *(F.col(k.name) for k in n.keys))
        agg = grouped.agg(*(_PARTIALS[p.func](p.name).alias(p.name) for p in n.partials))
        agg = agg.withColumn(TS, F.expr("CAST(`__w`.`end` AS TIMESTAMP_NTZ)"))
        agg = agg.withColumn(TE, F.expr(_plus_us(TS, w.slide_us)))
        return agg.selectExpr(*(f"{spark_sql(f.expr)} AS {q(f.name)}" for f in n.finals),
                              TS, TE, f"false AS {PUNCT}")

    def _join(self, n: P.Join):
        sides = []
        for side, child in (("l", n.left), ("r", n.right)):
            df = _event_time(self.build(child))
            names = [c.name for c in child.schema]
            sides.append(df.selectExpr(*(q(c) for c in names), f"{TS} AS __ts_{side}",
                                       f"{TE} AS __te_{side}", f"{ET} AS __et_{side}"))
        spans = [_range_of(n.left), _range_of(n.right)]
        # the intervals meet: each starts before the other ends (Spark bounds the join's
        # state by this, with both sides' watermarks)
        cond = [f"({spark_sql(a)}) = ({spark_sql(b)})" for a, b in n.equi] + [
            f"__et_l < __et_r + INTERVAL '{spans[1]}' MICROSECOND",
            f"__et_r < __et_l + INTERVAL '{spans[0]}' MICROSECOND"]
        out = sides[0].join(sides[1], F.expr(" AND ".join(cond)), "inner")
        if n.residual is not None:
            out = out.where(spark_sql(n.residual))
        return out.selectExpr(*(q(c.name) for c in n.schema),
                              f"greatest(__ts_l, __ts_r) AS {TS}",
                              f"least(__te_l, __te_r) AS {TE}", f"false AS {PUNCT}")

    _BUILD = {P.StreamScan: _scan, P.Window: _window, P.Filter: _filter, P.Map: _map,
              P.Union_: _union, P.Aggregate: _aggregate, P.Join: _join}


def _event_time(df):
    """``df`` with its event time 1 µs early as Spark's watermark column (ET), and the
    watermark rows gone after it moved Spark's watermark. The shift puts a SLIDE window's
    (τ − i, τ] on Spark's [start, end), and keeps a tuple at the watermark itself from
    counting as late; it is the same on both sides of a join, so its conditions hold."""
    df = df.withColumn(ET, F.expr(f"CAST({TS} AS TIMESTAMP) - INTERVAL 1 MICROSECOND"))
    df = df.withWatermark(ET, "0 seconds")
    # after the watermark, and naming its column, so Spark cannot push it below
    return df.where(f"NOT {PUNCT} OR {ET} IS NULL")


def _range_of(node) -> int:
    """The RANGE (µs) of the window a join's side reads (under its σ and μ)."""
    while not isinstance(node, P.Window):
        node = node.input
    return node.window.size_us


# a partial of the plan as Spark's aggregate of the column holding its argument
_PARTIALS = {
    "sum": F.sum,
    "count": F.count,
    "count_star": lambda name: F.count(F.lit(1)),
    "min": F.min,
    "max": F.max,
}
