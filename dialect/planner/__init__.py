"""The planner: a parsed CQL statement plus a catalog in, a ``executor.plan.Plan`` out.

``plan`` handles SELECT (with windows, joins, aggregates, DISTINCT, LIMIT), UNION [ALL],
EXCEPT and EXPLAIN; ``is_continuous`` tells the gateway which statements need it at all
(those that read a stream, a named window or a derived stream).
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from executor import plan as P

from .. import expressions as X
from ..errors import InvalidWindow, PlanError, written_at
from ..flink import group_windows, proctime
from . import quality_join
from .build import Builder, timestamp_us
from .catalog import Catalog, MemoryCatalog, Relation
from .check_bounded_state import check_bounded_state

__all__ = ["plan", "explain", "is_continuous", "query_engine", "delivery", "Delivery",
           "Catalog", "MemoryCatalog", "Relation", "timestamp_us"]

ENGINES = ("backend", "spark")


def query_engine(tree: exp.Expression) -> str | None:
    """The engine a query asks for with ``WITH (engine = …)`` after its SELECT (None: it does
    not say); a word other than backend or spark is 22023 at that option."""
    for sel in tree.find_all(exp.Select):
        for opt in sel.args.get("join_options") or []:
            if opt.this.name.lower() != quality_join.ENGINE_OPTION:
                continue
            value = opt.args["value"]
            word = (value.name if isinstance(value, (exp.Literal, exp.Identifier))
                    else value.sql()).lower()
            if word not in ENGINES:
                raise InvalidWindow(f'invalid value for option "engine": {word}',
                                    position=written_at(opt),
                                    hint="The engines are backend and spark.")
            return word
    return None


@dataclass(frozen=True)
class Delivery:
    """How a continuous query's rows are delivered: ``progress`` rows between them (a first
    column ``cq_progress``), and ``resume_from`` (µs), the progress watermark a query
    declared earlier reported, from which this one goes on; ``at``: where the options are
    written, for errors about them."""
    progress: bool = False
    resume_from: int | None = None
    at: int | None = None


_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def delivery(tree: exp.Expression) -> Delivery:
    """``WITH (progress = true, resume_from = '…')`` after the query's SELECT; 22023 for a
    value that is not one, 22023 for resume_from without progress (a resumed query's client
    needs the progress rows to resume it again)."""
    found: dict = {}
    at = None
    for sel in tree.find_all(exp.Select):
        for opt in sel.args.get("join_options") or []:
            name = opt.this.name.lower()
            if name not in quality_join.DELIVERY_OPTIONS:
                continue
            value = opt.args["value"]
            text = value.name if isinstance(value, (exp.Literal, exp.Identifier)) else \
                value.sql()
            at = written_at(opt) if at is None else at
            found[name] = (text, written_at(opt))
    progress = False
    if "progress" in found:
        text, where = found["progress"]
        if text.lower() not in _TRUE + _FALSE:
            raise InvalidWindow(f'invalid value for option "progress": {text}', position=where,
                                hint="progress is true or false.")
        progress = text.lower() in _TRUE
    resume = None
    if "resume_from" in found:
        text, where = found["resume_from"]
        try:
            resume = timestamp_us(text)
        except PlanError:
            raise InvalidWindow(f'invalid value for option "resume_from": {text}',
                                position=where, hint="resume_from is the cq_progress of the "
                                "last progress row processed, e.g. '2026-11-01 10:00:05'.") \
                from None
        if not progress:
            raise InvalidWindow("resume_from needs progress = true", position=where,
                                hint="WITH (progress = true, resume_from = '…'): the resumed "
                                     "cursor's progress rows say where to resume it next.")
    return Delivery(progress, resume, at)


def _relations(tree: exp.Expression):
    for node in tree.find_all(exp.Table, X.StreamOf):
        t = node.this if isinstance(node, X.StreamOf) else node
        if isinstance(t, exp.Table) and not isinstance(t.this, exp.Func):
            yield (t.db or None), t.name


def is_continuous(tree: exp.Expression, catalog: Catalog) -> bool:
    """Whether the statement reads a stream, a named window or a derived stream."""
    if tree.find(X.StreamRef, X.StreamOf, X.StreaQueLLoop) is not None:
        return True
    for schema, name in _relations(tree):
        rel = catalog.relation(schema, name)
        if rel is not None and rel.kind != "table":
            return True
    return False


def _mode(root, snapshot: bool, now_us: int | None) -> str:
    streams, fixed_past = [], True

    def walk(node):
        nonlocal fixed_past
        if isinstance(node, P.WindowRelationScan) and node.follow:
            streams.append(node)
            fixed_past = False
        if isinstance(node, P.Window):
            streams.append(node)
            if not (isinstance(node.window, P.FixedWindow) and now_us is not None
                    and node.window.high_us <= now_us):
                fixed_past = False
        for c in P.children(node):
            walk(c)

    walk(root)
    if streams and fixed_past:
        return "archive"
    if snapshot or not streams:
        return "snapshot"
    return "continuous"


def plan(tree: exp.Expression, catalog: Catalog, *, now_us: int | None = None,
         snapshot: bool = False, join_quality: dict | None = None,
         joins_in_order: bool = False, unbounded_state: bool = False) -> P.Plan:
    """Plan one statement (``EXPLAIN x`` plans x). ``snapshot``: the session's cq.mode is
    snapshot; ``now_us`` (Unix µs) tells a fixed window wholly in the past (archive);
    ``join_quality``: the session's recall target for joins of two streams;
    ``joins_in_order``: a join with a recall target gives its rows in valid_from order
    (what a named window or derived stream holds); ``unbounded_state``: the session's
    cq.unbounded_state, which lets state grow with the input (Flink's default) instead of
    refusing such a query."""
    if isinstance(tree, X.Explain):
        tree = tree.this
    builder = Builder(catalog, now_us, snapshot, join_quality, joins_in_order, unbounded_state)
    root, output, pseudo = builder.statement(proctime(group_windows(tree.copy())))
    if not unbounded_state:
        check_bounded_state(root)
    return P.Plan(root, _mode(root, snapshot, now_us), output, pseudo, tree.sql("cql"),
                  builder.read_now, tuple(builder.functions.values()))


def explain(p: P.Plan) -> list[str]:
    return P.explain(p)
