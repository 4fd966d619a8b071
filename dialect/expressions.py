"""Syntax-tree nodes the CQL dialect adds to sqlglot's: stream references with a window, the
window specification itself, ``Stream(x)``, the TelegraphCQ ``WINDOW alias [...]`` clause, the
StreaQueL ``for (...) { WindowIs(...) }`` loop, and the stream DDL statements.

Each node is a plain sqlglot expression; ``dialect/cql.py`` holds the parser and generator
entries that read and print them.
"""
from __future__ import annotations

from sqlglot import exp


class StreamWindow(exp.Expression):
    """What stands between the brackets after a stream.

    ``kind`` is one of range, slide, rows, now, unbounded, between, session (its gap is
    ``size``), or Flink's tumble, hop, cumulate (``WindowTable``'s, whose ``offset`` moves the
    grid); ``style`` remembers how it
    was written (short ``['2 minutes']``, ``RANGE``, ``RANGE BY``, ``RANGE UNBOUNDED``) so that
    it prints back as written; ``arrival``: ``ON ARRIVAL``, over the tuples' arrival time.
    """
    arg_types = {"kind": True, "style": False, "size": False, "slide": False, "start": False,
                 "rows": False, "partition_by": False, "where": False, "low": False,
                 "high": False, "arrival": False, "offset": False}


class StreamRef(exp.Expression):
    """A relation in FROM with a window: ``S [RANGE 10 SECONDS] AS s``."""
    arg_types = {"this": True, "window": True, "alias": False, "alias_first": False}

    @property
    def name(self) -> str:
        return self.this.name


# Flink's window table functions (TABLE(TUMBLE(TABLE t, DESCRIPTOR(c), …))) and the columns
# each adds to its stream's
WINDOW_FUNCTIONS = ("TUMBLE", "HOP", "CUMULATE", "SESSION")
WINDOW_COLUMNS = ("window_start", "window_end", "window_time")


class WindowTable(exp.Expression):
    """Flink's ``TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), slide, size)) AS b``: the stream
    ``this`` (an ``exp.Table``) with a window, each tuple with its window's bounds.
    ``function`` is one of WINDOW_FUNCTIONS, ``expressions`` its sizes in Flink's order;
    ``arrival``: over the tuples' arrival time (a view's PROCTIME() column)."""
    arg_types = {"this": True, "function": True, "partition_by": False, "descriptor": True,
                 "expressions": True, "alias": False, "arrival": False}

    @property
    def name(self) -> str:
        return self.this.name


class StreamOf(exp.Expression):
    """``Stream(x)``: the stream of a relation's changes (seed 002)."""
    arg_types = {"this": True}

    @property
    def name(self) -> str:
        return self.this.name


class UnitInterval(exp.Expression):
    """An interval written as a number and a unit word, ``2 sec`` or ``1 Day``, kept as written."""
    arg_types = {"this": True, "unit": True}


class StreamWindowClause(exp.Expression):
    """TelegraphCQ's ``WINDOW alias ['2 minutes']`` after GROUP BY."""
    arg_types = {"this": True, "window": True}


class LoopStep(exp.Expression):
    """The step of a StreaQueL loop: ``t++``, ``t += k``, ``t -= k``, ``t = t + k``."""
    arg_types = {"this": True, "op": True, "amount": False}


class WindowIs(exp.Expression):
    """``WindowIs(S, left, right)`` inside a StreaQueL loop body."""
    arg_types = {"this": True, "left": True, "right": True}


class StreaQueLLoop(exp.Expression):
    """``for (t = init; condition; step) { WindowIs(...); ... }`` after a query."""
    arg_types = {"this": True, "init": True, "condition": True, "step": True,
                 "windows": True}


class TimestampColumnConstraint(exp.Expression, exp.ColumnConstraintKind):
    """``TIMESTAMPCOLUMN`` (event time) or ``ENDTIMESTAMPCOLUMN`` (end of validity)."""
    arg_types = {"end": False}


class CreateStream(exp.Expression):
    """``CREATE STREAM [IF NOT EXISTS] s (cols) [TYPE ARCHIVED|UNARCHIVED] [WITH (...)]
    [ON OVERLOAD ...] [PARTITIONED BY (col, ...)]``, ``CREATE STREAM d AS SELECT ...`` or
    ``CREATE STREAM s FROM SOURCE pg TABLE schema.table [WITH (...)]``."""
    arg_types = {"this": True, "exists": False, "archived": False, "options": False,
                 "overload": False, "expression": False, "partitioned_by": False,
                 "source": False, "source_table": False}


class CreateWindow(exp.Expression):
    """``CREATE WINDOW w AS SELECT ...``: a named, shared, time-varying relation."""
    arg_types = {"this": True, "exists": False, "expression": True}


class CreateWrapper(exp.Expression):
    """``CREATE WRAPPER w (init = ..., next = ..., done = ...)``."""
    arg_types = {"this": True, "options": True}


class DropStreamObject(exp.Expression):
    """``DROP STREAM|WINDOW|WRAPPER|SOURCE|SINK|SECRET [IF EXISTS] name [CASCADE]``."""
    arg_types = {"this": True, "kind": True, "exists": False, "cascade": False}


class AlterStream(exp.Expression):
    """``ALTER STREAM s ADD WRAPPER w`` | ``ADD COLUMN c type`` | ``SET (k = v, ...)`` |
    ``ADVANCE TO t`` (punctuation: no tuple earlier than t will follow)."""
    arg_types = {"this": True, "action": True, "wrapper": False, "column": False,
                 "options": False, "to": False}


class StreamOption(exp.Expression):
    """``name = value`` inside WITH (...) or a wrapper definition."""
    arg_types = {"this": True, "value": True}


class CreateSecret(exp.Expression):
    """``CREATE SECRET [IF NOT EXISTS] s AS 'value'`` (Materialize's): a credential that only
    its owner's statements may name, never shown."""
    arg_types = {"this": True, "exists": False, "expression": True}


class SecretRef(exp.Expression):
    """``SECRET s`` as a connector option's value."""
    arg_types = {"this": True}


class CreateSource(exp.Expression):
    """``CREATE SOURCE [IF NOT EXISTS] pg FROM POSTGRES (CONNECTION '…', PUBLICATION 'pub')``:
    a system whose data streams read (``CREATE STREAM s FROM SOURCE pg TABLE t``)."""
    arg_types = {"this": True, "exists": False, "kind": True, "options": True}


class CreateSink(exp.Expression):
    """``CREATE SINK [IF NOT EXISTS] s INTO POSTGRES|PARQUET (options) AS SELECT …`` (or ``AS
    TABLE derived_stream``): a continuous answer written to another system."""
    arg_types = {"this": True, "exists": False, "kind": True, "options": True,
                 "expression": True}




class EventPattern(exp.Expression):
    """``EVENT SEQ(A a, B b, !(C c), D d)`` in FROM (seed 004, SASE), with its window
    (``WITHIN``) and selection strategy (``USING SKIP TILL NEXT MATCH`` …), which may be
    written after SEQ(...) or after WHERE. ``bare``: the statement had no SELECT."""
    arg_types = {"expressions": True, "within": False, "strategy": False, "bare": False}


class PatternItem(exp.Expression):
    """One component of a pattern: ``this`` is the stream (an ``exp.Table`` with its
    alias, so privilege checks see it as any table); ``negated`` for ``!( … )``."""
    arg_types = {"this": True, "negated": False}


class Explain(exp.Expression):
    """``EXPLAIN [ANALYZE] [VERBOSE] statement``: the gateway prints the temporal-algebra plan."""
    arg_types = {"this": True, "options": False}


class RunningQueryName(exp.Expression):
    """``EXPLAIN ANALYZE name``: ``this`` (an identifier) names a running continuous query, a
    cursor of the session or a named window or derived stream (in schema ``db``, if given)."""
    arg_types = {"this": True, "db": False}


class Recompute(exp.Expression):
    """``RECOMPUTE query``: a continuous query's answers that late tuples changed, from the
    archive, as though every tuple had come in time."""
    arg_types = {"this": True}


# Statements only cqgate understands, and nodes that make a query a stream query.
STREAM_STATEMENTS = (CreateStream, CreateWindow, CreateWrapper, DropStreamObject, AlterStream,
                     Explain, Recompute, CreateSecret, CreateSource, CreateSink)
STREAM_NODES = (StreamRef, StreamOf, StreamWindowClause, StreaQueLLoop, EventPattern,
                WindowTable)


def is_stream_syntax(tree: exp.Expression) -> bool:
    """Whether the statement uses syntax only cqgate's planner can run (not DuckDB)."""
    return isinstance(tree, STREAM_STATEMENTS) or tree.find(*STREAM_NODES) is not None


# sqlglot finds a generator's ``<key>_sql`` methods through this registry of node classes.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and issubclass(_cls, exp.Expression) \
            and _cls.__module__ == __name__:
        exp.EXPR_CLASSES[_cls.key] = _cls
