"""One-time queries over the past: a query whose every window is a fixed window wholly in the
past, ``FROM s [BETWEEN t1 AND t2]``, over archived streams, runs on Spark.

Over [t1, t2) a fixed window holds exactly the tuples with t1 ≤ ts < t2, each valid over the
whole window, so the answer is the query as plain SQL over those tuples, valid over the
intersection of its windows (no rows when it is empty). Each windowed stream becomes a
temporary view of its archive files for the range (fragments outside it are never read), the
pseudo-columns ``valid_from``/``valid_to`` become the intersection's edges, and sqlglot writes
the rest as Spark SQL, ORDER BY and LIMIT included. Rows go to the client as Spark's
partitions finish, and long jobs report their progress (stages done / total) as NOTICEs.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import uuid

import pyarrow as pa
from sqlglot import exp

from dialect import expressions as X
from dialect.intervals import interval_us
from dialect.window_kinds import window_of
from dialect.planner.build import timestamp_us
from dialect.planner.check_expressions import python_call

from gateway.pgwire import errors as E
from gateway.link.live_rows import UNBOUNDED, Bounds, LiveRows
from gateway.archive.spark import ArchiveView
from gateway.tables.statement_context import StatementContext


def _text(us: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat(sep=" ")


def _stream(ctx: StatementContext, ref: X.StreamRef):
    t = ref.this
    schema = (t.db or "public") if isinstance(t, exp.Table) else "public"
    obj = ctx.services.streams.get(schema, t.name, kinds=("stream",))
    if obj is None:
        raise E.FeatureNotSupported(f'"{t.name}" is not a stream: only a stream has an archive')
    if not obj.archived:
        raise E.PgError(f'stream "{obj.name}" is not archived, so it keeps no past',
                        sqlstate="55000", hint="CREATE STREAM … TYPE ARCHIVED keeps every "
                        "tuple; a window that reaches the present reads live data.")
    return obj


def spark_sql(ctx: StatementContext, tree: exp.Expression,
              holds: contextlib.ExitStack) -> tuple[str, dict, tuple]:
    """The Spark SQL of ``tree``, the views it reads and the Python functions it calls (by
    their DuckDB names); ``holds`` keeps each stream's files still (no compaction) from when
    they are listed until the query is done."""
    tree, functions = _python_calls(tree.copy(), ctx.services.store.functions)
    views, lows, highs = {}, [], []
    archive = ctx.services.archive
    for ref in list(tree.find_all(X.StreamRef)):
        w = window_of(ref.args["window"], None, timestamp_us)
        obj = _stream(ctx, ref)
        holds.enter_context(archive.reading(obj.key))
        name = f"cq_past_{uuid.uuid4().hex}"
        views[name] = ArchiveView(
            tuple(archive.files(obj.key, w.low_us, w.high_us, obj.options.get("fragment"))),
            tuple((c[0], c[1]) for c in obj.columns), obj.timestamp_column,
            _text(w.low_us), _text(w.high_us))
        lows.append(w.low_us)
        highs.append(w.high_us)
        alias = ref.args.get("alias") or exp.TableAlias(this=exp.to_identifier(obj.name))
        ref.replace(exp.Table(this=exp.to_identifier(name), alias=alias))
    low, high = max(lows), min(highs)
    edges = {"valid_from": low, "valid_to": high}
    for col in list(tree.find_all(exp.Column)):
        if not col.table and col.name.lower() in edges:
            col.replace(exp.cast(exp.Literal.string(_text(edges[col.name.lower()])),
                                 exp.DataType.build("TIMESTAMP_NTZ", dialect="spark")))
    if low >= high and isinstance(tree, exp.Select):
        tree = tree.where("1 = 0")                 # the windows do not meet: no rows
    return tree.sql(dialect="spark"), views, functions


def _python_calls(tree: exp.Expression, known) -> tuple:
    """``tree`` with each call of a Python function spelled by its DuckDB name, and those
    functions."""
    used: dict = {}

    def swap(node):
        if not isinstance(node, exp.Anonymous):
            return node
        fn = known.get(node.name)
        call = python_call(node, fn, lambda a: a.transform(swap))
        if call is not node:
            used[fn.duck_name] = fn
        return call
    return tree.transform(swap), tuple(used.values())


class PastRows(LiveRows):
    """The answer of a query over the past, arriving from Spark as its partitions finish;
    progress lines become NOTICEs. Read like a continuous query's rows (forward only);
    closing it early cancels the Spark jobs."""

    def __init__(self, fields: list, schema: pa.Schema, clock, bounds: Bounds = UNBOUNDED):
        super().__init__(fields, schema, 0, "", 0, "", None, clock, bounds)
        self.job = None

    def note(self, message: str) -> None:
        self.notices.append(("NOTICE", "00000", message))
        self._changed.set()

    def close(self) -> None:
        self._discard()
        if not self.ended:
            self.finish()
            self._stop_source("closed")

    def _stop_source(self, how: str) -> None:
        if self.job is not None:
            self.job.cancel()


def _spark_error(e: Exception) -> E.PgError:
    from pyspark.errors import AnalysisException
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, AnalysisException):
        return E.FeatureNotSupported(f"Spark cannot run this query over the archive: {first}")
    return E.PgError(f"the archive query failed on Spark: {first}", sqlstate="XX000")


def run(ctx: StatementContext, tree: exp.Expression, fields: list, schema: pa.Schema) -> PastRows:
    """Start the query on Spark; its rows arrive in the returned queue (in ORDER BY order
    when it has one, otherwise as Spark's partitions finish)."""
    from pyspark.errors import PySparkException
    loop = ctx.services.backend.loop
    rows = PastRows(fields, schema, ctx.services.clock, ctx.result_bounds())
    holds = contextlib.ExitStack()
    sql, views, functions = spark_sql(ctx, tree, holds)

    def batch(b: pa.RecordBatch) -> None:
        table = pa.Table.from_batches([b]).rename_columns(schema.names).cast(schema)
        loop.call_soon_threadsafe(rows.put, table)

    def end(error) -> None:
        holds.close()
        loop.call_soon_threadsafe(rows.finish, None if error is None else _spark_error(error))

    try:
        rows.job = ctx.services.spark.start(
            sql, views, ordered=tree.args.get("order") is not None,
            every=interval_us(ctx.settings.get("cq.progress_interval", "1s")) / 1e6,
            on_batch=batch, on_progress=lambda m: loop.call_soon_threadsafe(rows.note, m),
            on_end=end, label=f"pid {ctx.pid}", functions=functions)
    except PySparkException as e:
        holds.close()
        raise _spark_error(e) from None
    except BaseException:
        holds.close()
        raise
    return rows
