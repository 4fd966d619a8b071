"""From a parsed CQL statement to the temporal algebra (``executor/plan.py``).

Resolves names against the catalog, types expressions, gives every stream its window
(``dialect/window_kinds.py``), places WHERE/ON conjuncts (``push_down_filters``), splits
aggregates into two phases (``split_aggregates``), refuses unbounded state
(``check_bounded_state``) and tells continuous queries from one-time ones.
"""
from __future__ import annotations

import dataclasses
import datetime as dt

import sqlglot
from sqlglot import exp

from executor import plan as P
from executor import duck
from executor.duck import quote, union_type

from .. import expressions as X
from ..errors import (AmbiguousColumn, DatatypeMismatch, GroupingError, InvalidColumnReference,
                      InvalidWindow, UndefinedColumn, UndefinedRelation, Unsupported, written_at)
from ..flink import group_windows, proctime, window_over_view, window_spec
from ..names import pg_column_name
from . import join_state, quality_join, top_n
from . import snapshot_query as SQ
from ..window_kinds import apply_default_windows, window_of
from .catalog import Catalog, Relation
from .check_bounded_state import check_bounded_state
from .check_expressions import (bound_type, checked, has_now, inlined, is_aggregate_call,
                                refuse_unsupported)
from ..kernel_trees import kernel_tree
from .patterns import match_recognize_source, pattern_source
from .push_down_filters import Conjunct, conjunction, outer_placement, push_down_filters
from .scope import PLAN_NAME, SESSION_BOUND, SESSION_BOUNDS, Scope, Source
from .split_aggregates import split_aggregates
from .types import INTEGERS, UNKNOWN, check_boolean, family, infer, normalize

_RELATION_TO_STREAM = ("istream", "rstream", "dstream")
# the windows whose answers hold from an instant wtime(*) names: a slide's, a session's end
_TIMED = (P.SlideWindow, P.LoopWindow, P.SessionWindow)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def timestamp_us(text: str) -> int:
    """A timestamp literal as microseconds since the Unix epoch (UTC when no zone is given)."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidWindow(f'invalid timestamp "{text}" in a window',
                            hint="Write it as '2026-11-01 12:00:00'.") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    d = value - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _unstream_dots(e: exp.Expression) -> exp.Expression:
    """``Stream(R).col`` in an expression means column col of relation R."""
    def fix(node):
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Anonymous) \
                and node.this.name.upper() == "STREAM" and node.this.expressions:
            return exp.column(node.expression.name, table=node.this.expressions[0].name)
        return node
    return e.transform(fix)


def session_bound(e: exp.Expression) -> int | None:
    """0 for ``wstart(*)``, 1 for ``wend(*)``, None for anything else."""
    if isinstance(e, exp.Anonymous) and e.name.lower() in SESSION_BOUNDS:
        return SESSION_BOUNDS.index(e.name.lower())
    return None


def _session_bounds(e: exp.Expression) -> exp.Expression:
    """``wstart(*)`` and ``wend(*)`` as the columns the query's session window adds."""
    def column(node):
        which = session_bound(node)
        if which is None:
            return node
        col = exp.column(SESSION_BOUNDS[which])
        col.meta[SESSION_BOUND] = which
        col.meta["start"] = node.meta.get("start")
        return col
    return e.transform(column)


def _outer_join(sel: exp.Select) -> str | None:
    """left, right or full when ``sel`` joins two relations with one outer join."""
    joins = sel.args.get("joins") or []
    side = (joins[0].side or "").lower() if len(joins) == 1 else ""
    return side if side in ("left", "right", "full") else None


def _check_outer(outer: str, sources: list, combined: bool) -> None:
    """An outer join runs as a hash join of two streams with windows, on its own, joined ON
    a condition; any other shape is Σ's (Unsupported here sends it there). (USING's column
    is the two sides' COALESCE in a FULL or RIGHT join, as SQL defines it: Σ's DuckDB knows.)"""
    if combined or not all(s.relation.kind == "stream" for s in sources):
        raise Unsupported(f"a {outer.upper()} JOIN of these inputs is evaluated on each "
                          "instant's snapshot")


def _group_item(g, real: list, scope: Scope):
    """A GROUP BY item as PostgreSQL reads it: ``GROUP BY 1`` is the first output column's
    expression; a bare name that no input column has is an output column's alias."""
    negative = isinstance(g, exp.Neg) and isinstance(g.this, exp.Literal) and g.this.is_int
    if negative or (isinstance(g, exp.Literal) and g.is_int):
        k = -int(g.this.name) if negative else int(g.name)   # -1 is a constant, as in PG
        if not 1 <= k <= len(real):
            raise InvalidColumnReference(f"GROUP BY position {k} is not in select list",
                                         position=written_at(g))
        return real[k - 1][1].copy()
    if isinstance(g, exp.Column) and not g.table:
        try:
            scope.resolve(g)
        except (UndefinedColumn, AmbiguousColumn):
            by_alias = [e for name, e in real if name == g.name]
            if len(by_alias) == 1:
                return by_alias[0].copy()
            raise
    return g


class Builder:
    def __init__(self, catalog: Catalog, now_us: int | None, snapshot: bool,
                 join_quality: dict | None = None, joins_in_order: bool = False,
                 unbounded_state: bool = False):
        self.catalog = catalog
        self.unbounded_state = unbounded_state  # state may grow forever (cq.unbounded_state)
        self.now_us = now_us
        self.snapshot = snapshot
        self.join_quality = join_quality      # the session's recall target for joins
        self.joins_in_order = joins_in_order  # … whose rows a stored relation holds
        self.read_now = False                 # an expression read now(): the plan's instant
        self.functions: dict = {}             # DuckDB name -> the Python functions it calls

    def python_function(self, name: str):
        """The Python function ``name`` (None: there is none), kept as one the plan calls and
        made known to the typing database."""
        fn = self.catalog.python_function(name)
        if fn is not None and fn.duck_name not in self.functions:
            duck.define_for_typing([fn])
            self.functions[fn.duck_name] = fn
        return fn

    # ------------------------------------------------------------------ expressions
    def expr(self, e: exp.Expression, resolve, clause: str | None = None) -> P.Expr:
        """An algebra expression: columns renamed to internal names, as DuckDB SQL, checked
        (``check_expressions``; ``clause``: where SQL allows no aggregate) and bound by
        DuckDB, which types what ``infer``'s rules do not know."""
        e = self.normalized(e, resolve)
        self.read_now = self.read_now or has_now(e)
        e = checked(e, self.now_us, clause=clause, user_aggregate=self.catalog.is_aggregate)
        renamed, columns, types = _renamed(e, resolve)
        typ = infer(e, _column_type(resolve))
        sql = renamed.sql("duckdb")
        if renamed.find(exp.Parameter, exp.Placeholder) is not None:
            # a statement described before its parameters are bound ($1): a NULL of no
            # type, as DuckDB binds the value's type later
            sql_bound = renamed.transform(lambda n: exp.null() if isinstance(
                n, (exp.Parameter, exp.Placeholder)) else n).sql("duckdb")
        else:
            sql_bound = sql
        bound = bound_type(sql_bound, types, e, self.catalog.function_exists)
        if typ == UNKNOWN and bound != '"NULL"':
            typ = bound
        return P.Expr(sql, columns, typ, kernel_tree(renamed))

    def normalized(self, e: exp.Expression, resolve) -> exp.Expression:
        """``e`` as the algebra computes it (before its columns are renamed): ``Stream(R).c``
        read as R.c, SQL functions inlined, int / int an integer division. A GROUP BY key
        and the select item that names it compare equal this way."""
        return _integer_division(inlined(_session_bounds(_unstream_dots(e.copy())),
                                         self.catalog.sql_function,
                                         python_function=self.python_function),
                                 _column_type(resolve))

    # ------------------------------------------------------------------ sources
    def source(self, node: exp.Expression, clause_windows: dict) -> tuple[Source, object]:
        """(Source, the written window spec or None) for a FROM item."""
        spec = None
        alias = None
        changes = False
        table_function = node if isinstance(node, X.WindowTable) else None
        if table_function is not None:
            spec, alias, node = window_spec(node), node.alias or None, node.this
        if isinstance(node, X.StreamRef):
            spec = node.args["window"]
            alias = node.alias or None
            node = node.this
        if isinstance(node, X.StreamOf):
            node, changes = node.this, True
        if isinstance(node, exp.Subquery):
            return self.subquery(node, spec), (None, None)
        if not isinstance(node, exp.Table) or isinstance(node.this, exp.Func):
            raise Unsupported(f"{node.sql('cql')} cannot be read by a continuous query")
        alias = alias or node.alias or node.name
        schema = node.db or None
        rel = self.catalog.relation(schema, node.name)
        if rel is None:
            full = f"{schema}.{node.name}" if schema else node.name
            raise UndefinedRelation(f'relation "{full}" does not exist',
                                    hint="CREATE STREAM or CREATE TABLE it first.")
        if rel.kind == "view":
            return self.view(rel, alias, table_function, spec), (None, None)
        if node.args.get("version") is not None and rel.kind != "table":
            raise Unsupported(f"FOR SYSTEM_TIME AS OF reads a table as it stands when each "
                              f"row is answered; {node.name} is a {rel.kind}",
                              position=written_at(node), hint="Join the stream itself: its "
                              "tuples' intervals already say what held at each instant.")
        cols = tuple(P.Column(f"{alias}.{c}", normalize(t)) for c, t in rel.columns)
        clause = clause_windows.pop(alias.lower(), None)
        written = spec if spec is not None else clause
        if written is not None and written.args.get("arrival"):
            scan = self.arrival_scan(rel, alias, cols, written, changes)
        elif rel.kind == "stream" and rel.versions:      # its changes' kinds ride along
            scan = P.StreamScan(rel.name, alias, cols + (P.Column(f"{alias}.{P.CHANGE_KIND}",
                                                                  "VARCHAR"),),
                                rel.timestamp_column, None)
        elif rel.kind == "stream":
            scan = P.StreamScan(rel.name, alias, cols, rel.timestamp_column, rel.end_column)
        elif rel.kind == "table" and changes and (spec is not None or clause is not None):
            scan = P.StreamScan(rel.name, alias, cols, None, None, of_table=True)
            rel = Relation(rel.name, "stream", rel.columns)
        elif rel.kind == "table":
            # (Stream(t) without a window is every change of t valid until undone: t itself)
            if spec is not None or clause is not None:
                raise Unsupported(f'"{rel.name}" is a table; windows apply to streams',
                                  hint=f"Drop the window of {rel.name}, or read its changes "
                                       f"with Stream({rel.name}) [...].")
            scan = P.TableScan(rel.name, alias, cols)
        else:
            if clause is not None or spec is not None:
                raise Unsupported(f"{alias} is a named {rel.kind}; windows apply to streams",
                                  hint=f"Put the window inside the definition of {rel.name}.")
            scan = P.WindowRelationScan(rel.name, alias, cols, rel.kind,
                                        follow=changes or rel.kind == "derived")
        if table_function is not None:
            return self.window_table(table_function, alias, rel, scan), (spec, None)
        session = (f"{alias}.__wstart", f"{alias}.__wend") if rel.kind == "stream" and \
            written is not None and written.args.get("kind") == "session" else ()
        return Source(alias, rel, scan, rel.kind == "stream", session), (spec, clause)

    def view(self, rel: Relation, alias: str, table_function, spec) -> Source:
        """A view over streams: its query in FROM in the view's place (a window table over
        it windows the stream the view reads)."""
        query = sqlglot.parse_one(rel.query, read="cql")
        if table_function is not None:
            query, spec = window_over_view(table_function, query, rel.name), None
        query = proctime(group_windows(query))
        source = self.subquery(exp.Subquery(this=query, alias=exp.TableAlias(
            this=exp.to_identifier(alias))), spec)
        if not rel.born:
            return source
        return dataclasses.replace(source, node=P.born_from(source.node, dict(rel.born)))

    def window_table(self, node: X.WindowTable, alias: str, rel: Relation, scan) -> Source:
        """A stream read through Flink's TUMBLE, HOP, CUMULATE or SESSION: windowed by its
        TIMESTAMPCOLUMN, its columns and window_start, window_end (window_time but for
        SESSION, whose end is not on a grid)."""
        # (a table or named window was refused already: windows apply to streams)
        function = node.args["function"]
        where = node.meta.get("start")
        time = node.args["descriptor"].name
        if not node.args.get("arrival") and (rel.timestamp_column is None
                                             or time.lower() != rel.timestamp_column.lower()):
            raise Unsupported(f"DESCRIPTOR({time}): a stream is windowed by its "
                              f"TIMESTAMPCOLUMN ({rel.timestamp_column or 'none'})",
                              position=where, hint="Name the stream's TIMESTAMPCOLUMN in "
                              "DESCRIPTOR(…).")
        added = X.WINDOW_COLUMNS[:2] if function == "SESSION" else X.WINDOW_COLUMNS
        rel = dataclasses.replace(rel, columns=rel.columns + tuple(
            (c, "TIMESTAMP") for c in added))
        columns = tuple(f"{alias}.{c}" for c in added)
        return Source(alias, rel, scan, True, columns)

    def arrival_scan(self, rel: Relation, alias: str, cols: tuple, written,
                     changes: bool) -> P.StreamScan:
        """A stream read by arrival time (``[… ON ARRIVAL]``): its tuples stamped with the
        instant each reached the server, in arrival order, its time the wall clock's. What
        keeps no arrival time (a snapshot of the past, a fixed window) is refused."""
        where = written.meta.get("start")
        if rel.kind != "stream" or changes:
            raise Unsupported(f"{alias} is not a stream: ON ARRIVAL reads a stream's tuples "
                              "by the time they arrive", position=where)
        if written.args["kind"] == "between":
            raise Unsupported("a fixed window cannot be read by arrival time",
                              position=where, hint="Write [RANGE … ON ARRIVAL], or read the "
                              "fixed window by event time.")
        if self.snapshot:
            raise Unsupported("snapshot mode cannot read a window by arrival time: the server "
                              "keeps no tuple's arrival time", position=where,
                              hint="Read it with a cursor (SET cq.mode = continuous).")
        # (the arrival time is a column too: what PROCTIME() reads)
        arrival = P.Column(f"{alias}.{P.PROCTIME_COLUMN}", "TIMESTAMP")
        return P.StreamScan(rel.name, alias, cols + (arrival,), P.PROCTIME_COLUMN, None,
                            proctime=True)

    def subquery(self, node: exp.Subquery, spec) -> Source:
        """A query in FROM: planned on its own, its columns renamed to ``alias.column``."""
        if spec is not None:
            raise Unsupported("a window cannot follow a subquery; put it on the streams "
                              "inside")
        top = node.meta.get(top_n.TOP_N)
        planned = top_n.plan(self, node, *top) if top else None
        root, output, pseudo = planned + ((),) if planned else self.statement(node.this)
        if pseudo:
            raise Unsupported("valid_from, valid_to and wtime(*) belong to the outer query")
        # PostgreSQL 16 and Flink read a query in FROM without an alias too
        alias = node.alias or "unnamed_subquery"
        # the query's columns by position: their names in the plan are unique (k, k_2) where
        # its select list repeats one (SELECT a.k, b.k)
        outputs = tuple(P.NamedExpr(f"{alias}.{rc.name}", P.Expr(quote(rc.name), (rc.name,),
                                                                  c.type))
                        for rc, c in zip(root.schema, output))
        mapped = P.Map(root, outputs, tuple(P.Column(n.name, n.expr.type) for n in outputs))
        rel = Relation(alias, "subquery", tuple((c.name, c.type) for c in output),
                       names=tuple(rc.name for rc in root.schema))
        return Source(alias, rel, mapped, True)

    def statement(self, tree):
        """SELECT, UNION [ALL], EXCEPT (or a parenthesised one): (root, output, pseudo)."""
        if isinstance(tree, exp.Subquery):
            return self.statement(tree.this)
        if isinstance(tree, exp.Select):
            return self.select(tree)
        if isinstance(tree, (exp.Union, exp.Except, exp.Intersect)):
            return self.set_operation(tree)
        raise Unsupported(f"{tree.key.upper()} cannot be a continuous query")

    def set_operation(self, tree):
        left, left_out, left_pseudo = self.statement(tree.this)
        right, right_out, _ = self.statement(tree.expression)
        if len(left_out) != len(right_out):
            raise Unsupported(f"each {tree.key.upper()} query must have the same number of "
                              "columns")
        # both inputs' columns take a type that holds either's (PostgreSQL's UNION typing)
        # and the right input's columns take the left's names, by position
        types = [common_type(lc.type, rc.type, tree.key.upper())
                 for lc, rc in zip(left.schema, right.schema)]
        schema = tuple(P.Column(lc.name, t) for lc, t in zip(left.schema, types))
        if schema != left.schema:
            left = P.Map(left, _cast_to(left.schema, schema), schema)
        if right.schema != schema:
            right = P.Map(right, _cast_to(right.schema, schema), schema)
        left_out = _retyped(left_out, left_pseudo, types)
        every = not tree.args.get("distinct")
        if isinstance(tree, exp.Except):
            return P.Difference(left, right, schema, every), left_out, left_pseudo
        if isinstance(tree, exp.Intersect):
            return P.Intersection(left, right, schema, every), left_out, left_pseudo
        node = P.Union_((left, right), schema)
        if tree.args.get("distinct"):
            node = P.Distinct(node, schema)
        return node, left_out, left_pseudo

    def window(self, src: Source, specs, scope: Scope, loop_windows: dict):
        written, clause = specs
        own = Scope([src])      # PARTITION BY and WHERE in brackets name the windowed stream
        to_expr = lambda e: self.expr(e, own.resolve)  # noqa: E731
        loop = loop_windows.pop(src.alias.lower(), None)
        if loop is not None:
            if written is not None or clause is not None:
                raise Unsupported(f"{src.alias} has both a window and a WindowIs in the loop")
            return loop
        if src.relation.versions:
            return self.versions(src, written if written is not None else clause, to_expr)
        window = apply_default_windows(
            window_of(written, to_expr, timestamp_us) if written is not None else None,
            window_of(clause, to_expr, timestamp_us) if clause is not None else None,
            has_end_column=src.relation.end_column is not None)
        if isinstance(window, (P.SessionWindow, P.GridWindow)):
            # the columns wstart(*), wend(*) read; a window table's window_start, …
            window = dataclasses.replace(window, columns=src.session)
        return window

    def versions(self, src: Source, written, to_expr) -> P.VersionWindow:
        """A stream that follows a PostgreSQL table is read as the table's row versions, each
        valid from its commit until the next change of its key: no other window applies."""
        if written is not None:
            raise Unsupported(f"{src.alias} follows a PostgreSQL table: its rows hold from the "
                              "commit that wrote them until the one that changed them",
                              position=written.meta.get("start"),
                              hint=f"Drop the window after {src.alias}; read the table as it "
                              "stands at each instant.")
        keys = tuple(to_expr(exp.column(k, table=src.alias)) for k in src.relation.versions)
        return P.VersionWindow(keys, f"{src.alias}.{P.CHANGE_KIND}")

    # ------------------------------------------------------------------ SELECT
    def _select(self, sel: exp.Select):
        for f in sel.find_all(exp.Anonymous):
            if f.name.lower() in _RELATION_TO_STREAM:
                raise Unsupported(
                    f"{f.name.upper()} is not needed in cqgate: every result row carries its "
                    "validity interval [valid_from, valid_to)",
                    hint="Select valid_from and valid_to to see when each row holds; a row "
                         "that appears is an insertion, a row whose valid_to passes is a "
                         "deletion.")
        if sel.args.get("order") and not self.snapshot:
            raise Unsupported("ORDER BY is not supported in a continuous query: rows leave "
                              "in valid_from order",
                              hint="Drop ORDER BY, or SET cq.mode = snapshot for a finite "
                                   "answer.")
        for part in _clauses(sel):
            refuse_unsupported(part)
        distinct = sel.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise Unsupported("DISTINCT ON is not supported in continuous queries yet",
                              position=written_at(distinct),
                              hint="For one row per key, GROUP BY the key and aggregate the "
                                   "other columns, e.g. MAX(price).")
        from_ = sel.args.get("from_")
        if from_ is None:
            raise Unsupported("a continuous query needs a FROM clause")
        if isinstance(from_.this, X.EventPattern):
            return self.project(sel, *pattern_source(self, sel, from_.this))
        items = [from_.this] + [j.this for j in sel.args.get("joins") or []]
        outer = _outer_join(sel)
        for j in sel.args.get("joins") or []:
            if outer is None and (j.side or (j.kind and j.kind.upper() not in ("INNER",
                                                                                "CROSS"))):
                raise Unsupported(f"{(j.side or j.kind).upper()} JOIN is not supported in "
                                  "continuous queries yet", hint="Use an inner join.")
            if j.args.get("method"):
                raise Unsupported(f"{j.args['method'].upper()} JOIN is not supported in "
                                  "continuous queries yet",
                                  hint="Name the columns: JOIN … USING (k), or ON a.k = b.k.")
        clause_windows = {w.this.name.lower(): w.args["window"]
                          for w in sel.args.get("windows") or []
                          if isinstance(w, X.StreamWindowClause)}
        pairs = [self.source(item, clause_windows) for item in items]
        if sel.args.get("match") is not None:      # the first FROM item, row patterns on it
            pairs[0] = (match_recognize_source(self, items[0], sel.args["match"]),
                        (None, None))
        if clause_windows:
            raise UndefinedRelation(f'WINDOW names "{next(iter(clause_windows))}", which is '
                                    "not in FROM")
        sources = [s for s, _ in pairs]
        scope = Scope(sources)
        loop_windows = self.loop(sel.args.get("streaquel"), scope)

        # conjuncts of WHERE and every ON (and USING), placed by push_down_filters
        on = [self.conjunct(eq, scope, "JOIN conditions")
              for eq in _using(sel.args.get("joins") or [], sources, scope)]
        where = []
        for cond in [sel.args.get("where")] + [j.args.get("on") for j in
                                                 sel.args.get("joins") or []]:
            if cond is None:
                continue
            clause = "WHERE" if isinstance(cond, exp.Where) else "JOIN conditions"
            cond = cond.this if isinstance(cond, exp.Where) else cond
            check_boolean(cond, lambda c: scope.resolve(c)[1], "WHERE")
            for part in _conjuncts(cond):
                (where if clause == "WHERE" else on).append(self.conjunct(part, scope, clause))
        conjuncts = on + where

        # streams first, then named windows, then tables (each table joins a stream)
        order = sorted(range(len(sources)), key=lambda i: (
            0 if sources[i].is_stream else 1 if sources[i].relation.kind != "table" else 2, i))
        if not any(s.is_stream or s.relation.kind != "table" for s in sources):
            raise Unsupported("a continuous query reads at least one stream or window",
                              hint="Over tables alone, run the query as it is (not as a "
                                   "continuous query).")
        if outer is not None:
            _check_outer(outer, sources, loop_windows or sel.args.get("match") is not None
                         or quality_join.written(sel) or join_state.state_ttl(sel) is not None
                         or bool(sel.args["joins"][0].args.get("using")))
            placement = outer_placement(on, where, [s.alias for s in sources])
        else:
            placement = push_down_filters(conjuncts, [sources[i].alias for i in order])
        windows = {}
        for i in order:
            src, specs = pairs[i]
            if src.relation.kind == "stream":
                windows[src.alias] = self.window(src, specs, scope, loop_windows)
        if loop_windows:
            raise UndefinedRelation(f'WindowIs names "{next(iter(loop_windows))}", which is not '
                                    "in FROM")
        quality = quality_join.options(sel, self.join_quality)
        ttl = join_state.state_ttl(sel)
        node = None
        for k, i in enumerate(order):
            src = sources[i]
            part = self.windowed(src, windows.get(src.alias), placement.scan.get(src.alias, []))
            if node is None:
                node = part
                continue
            equi, residual = placement.joins.get(k, ([], []))
            kind = "stream-table" if src.relation.kind == "table" else "stream-stream"
            keep = (None, None)
            if kind == "stream-stream":
                residual, keep = join_state.stream_join(node, part, placement.bounds.get(k, []),
                                                        residual, ttl, join_state.ttl_at(sel))
            node = P.Join(node, part, tuple(equi), conjunction(residual), kind,
                          node.schema + part.schema, keep,
                          ttl if kind == "stream-stream" else None, outer or "")
            if quality is not None and (quality_join.written(sel) or (
                    kind == "stream-stream" and len(order) == 2)):
                node = quality_join.quality_join(node, (sources[order[0]].alias, src.alias),
                                                 quality, quality_join.where(sel),
                                                 self.joins_in_order)
        if quality_join.written(sel) and not isinstance(node, P.QualityJoin):
            raise Unsupported("a recall target applies to a join of two streams",
                              hint="Drop WITH (recall = …), or join two streams.",
                              position=quality_join.where(sel))
        for pred in placement.top:
            node = P.Filter(node, pred, node.schema)
        if not self.unbounded_state:
            check_bounded_state(node)
        join_state.check_ttl_used(sel, node)
        root = self.project(sel, node, scope, windows)
        quality_join.check_above(root[0], quality_join.where(sel), self.joins_in_order)
        return root

    def select(self, sel: exp.Select):
        """The session's recall target applies where it can: a query it cannot apply to is
        planned without it; one written in the query must apply. What only Σ computes goes
        there (``snapshot_query``)."""
        top_n.mark(sel)         # a query in FROM whose first N rows it keeps: τ, not Σ
        why = SQ.reason(sel, self.catalog.is_aggregate)
        if why is not None and _outer_join(sel) is not None and \
                SQ.reason(sel, self.catalog.is_aggregate, joins=False) is None:
            try:            # a hash join that pads rows; Σ where its shape is not one
                return self._select(sel)
            except Unsupported:
                pass
        if why is not None:
            return self.snapshot_select(sel, why)
        try:
            return self._select(sel)
        except Unsupported:
            if quality_join.written(sel) or self.join_quality is None:
                raise
        saved, self.join_quality = self.join_quality, None
        try:
            return self._select(sel)
        finally:
            self.join_quality = saved

    # ------------------------------------------------------------------ Σ
    def snapshot_select(self, sel: exp.Select, why: str):
        """``sel`` as one Σ: the FROM items of it and of the subqueries in its expressions
        planned as its inputs (streams with their windows), its SQL run by DuckDB on each
        instant's snapshot."""
        for key, what in (("match", "MATCH_RECOGNIZE"), ("streaquel", "a StreaQueL loop")):
            if sel.args.get(key) is not None:
                raise Unsupported(f"{what} cannot be combined with {why} yet")
        if quality_join.written(sel):
            raise Unsupported(f"a recall target cannot be combined with {why}",
                              position=quality_join.where(sel))
        if join_state.state_ttl(sel) is not None:
            raise Unsupported(f"state_ttl cannot be combined with {why}: its joins are "
                              "evaluated on each instant's snapshot, which keeps every valid "
                              "tuple", hint="Give the streams windows instead.")
        sel = sel.copy()
        limit = None
        if sel.args.get("order") is None and sel.args.get("limit") is not None:
            limit = sel.args["limit"]           # the first rows the query gives, as elsewhere
            sel.set("limit", None)
        lifted = _Lifted()
        for part in [sel] + SQ.expression_selects(sel):
            self._lift(part, lifted, top=part is sel)
        if not lifted.inputs:
            raise Unsupported("a continuous query reads at least one stream or window",
                              hint="Over tables alone, run the query as it is (not as a "
                                   "continuous query).")
        items, pseudo, kept = [], [], []
        for e in sel.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            kind = _pseudo(inner, lifted.has)
            if kind in SQ.PSEUDO:          # (wtime(*) stays, for refuse_pseudo to refuse)
                pseudo.append(kind)
                items.append((kind, None))
                continue
            star = isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                                   and isinstance(inner.this, exp.Star))
            items.append((None if star else (e.alias if isinstance(e, exp.Alias)
                                             else pg_column_name(e)), e))
            kept.append(e)
        if not kept:
            raise Unsupported("a query needs a column besides valid_from and valid_to")
        sel.set("expressions", kept)
        SQ.refuse_pseudo(sel, lifted.has)
        sel = checked(inlined(_unstream_dots(sel), self.catalog.sql_function,
                              python_function=self.python_function), self.now_us,
                      user_aggregate=self.catalog.is_aggregate, queries=True)
        self.read_now = self.read_now or has_now(sel)
        columns = self._snapshot_columns(sel, lifted)
        # ties in ORDER BY … LIMIT are broken by the row itself, so that the rows kept do not
        # change from instant to instant while the snapshot does not
        if sel.args.get("order") is not None:
            sel.set("order", exp.Order(expressions=sel.args["order"].expressions + [
                exp.Ordered(this=exp.Literal.number(i + 1)) for i in range(len(columns))]))
        # how many columns each select item gives: a star as many as its relations have
        widths = iter(_star_widths(items, len(columns), lifted.widths))
        counts = [0 if e is None else 1 if name is not None else next(widths)
                  for name, e in items]
        display, shown = [], iter(columns)
        for (name, e), n in zip(items, counts):
            display += [(name, next(shown)[1])] if name is not None and e is not None else \
                [next(shown) for _ in range(n)]
        internal = _unique([n for n, _ in display])
        schema = tuple(P.Column(n, t) for n, (_, t) in zip(internal, display))
        node = P.SnapshotQuery(tuple(lifted.inputs), SQ.lateral(sel.sql("duckdb"), internal),
                               schema, tuple(lifted.tables), tuple(lifted.table_columns), why)
        if limit is not None:
            count = limit.expression
            if not (isinstance(count, exp.Literal) and count.is_int):
                raise Unsupported("LIMIT needs a constant row count")
            node = P.Limit(node, int(count.name), schema)
        output, real = [], iter(display)
        for (name, e), n in zip(items, counts):
            output += [P.Column(name, "TIMESTAMP")] if e is None else \
                [P.Column(*next(real)) for _ in range(n)]
        return node, tuple(output), tuple(pseudo)

    def _lift(self, sel: exp.Select, lifted: "_Lifted", top: bool) -> None:
        """Each FROM item of ``sel`` planned as an input of Σ, and read in ``sel`` as its
        tuples valid at the instant."""
        clause_windows = {w.this.name.lower(): w.args["window"]
                          for w in sel.args.get("windows") or []
                          if isinstance(w, X.StreamWindowClause)}
        for item in SQ.from_items(sel):
            src, specs = self.source(item, clause_windows)
            node = src.node
            if src.relation.kind == "stream":
                node = self.windowed(src, self.window(src, specs, Scope([src]), {}), [])
            cols = SQ.exposed([(c, col.name) for (c, _), col in
                               zip(src.relation.columns, node.schema)])
            lifted.names.update(n.lower() for n, _ in cols)
            if top:
                lifted.widths[src.alias.lower()] = len(cols)
            if isinstance(node, P.TableScan):
                new = SQ.input_read(len(lifted.tables), src.alias, cols, table=True)
                lifted.tables.append(node.table)
                lifted.table_columns.append(node.schema)
            else:
                new = SQ.input_read(len(lifted.inputs), src.alias, cols)
                lifted.inputs.append(node)
                lifted.schemas.append(node.schema)
            item.replace(new)
        if clause_windows:
            raise UndefinedRelation(f'WINDOW names "{next(iter(clause_windows))}", which is '
                                    "not in FROM")
        SQ.strip_stream_windows(sel)

    def _snapshot_columns(self, sel: exp.Select, lifted: "_Lifted") -> list:
        """(name, type) of each column of Σ's query, as DuckDB binds it."""
        sql = SQ.lateral(sel.sql("duckdb"), []).replace(' AS "__q"()', ' AS "__q"')
        cols = SQ.typed(sql, list(lifted.schemas), list(lifted.table_columns), sel,
                        self.catalog.function_exists)
        return [(n, UNKNOWN if t == '"NULL"' else t) for n, t in cols[1:]]    # after __t

    def conjunct(self, part: exp.Expression, scope: Scope, clause: str = "WHERE") -> Conjunct:
        e = self.expr(part, scope.resolve, clause)
        aliases = frozenset(c.split(".", 1)[0] for c in e.columns)
        facts = join_state.bounds(part, lambda x: self.expr(x, scope.resolve)) \
            if len(aliases) > 1 else ()
        if isinstance(part, exp.EQ):
            left, right = (self.expr(x, scope.resolve) for x in (part.this, part.expression))
            la = frozenset(c.split(".", 1)[0] for c in left.columns)
            ra = frozenset(c.split(".", 1)[0] for c in right.columns)
            if la and ra and not (la & ra):
                return Conjunct(e, aliases, (left, right), (set(la), set(ra)), facts)
        return Conjunct(e, aliases, bounds=facts)

    def windowed(self, src: Source, window, filters: list):
        node = src.node
        if window is None:     # tables and named windows are read as they are
            for f in filters:
                node = P.Filter(node, f, node.schema)
            return node
        # a filter commutes with time windows (it keeps or drops single tuples) but would
        # change which tuples a count window counts, where a session's gaps are, and when a
        # loop's ST (its first tuple) is, so it stays above ROWS and session windows and loops
        below = not isinstance(window, (P.RowsWindow, P.VersionWindow, P.LoopWindow,
                                        P.SessionWindow))
        added = tuple(P.Column(c, "TIMESTAMP") for c in getattr(window, "columns", ()))
        # (what reads the columns a window adds, window_start …, stays above it)
        under = [f for f in filters if below and not set(f.columns) & {c.name for c in added}]
        for f in under:
            node = P.Filter(node, f, node.schema)
        node = P.Window(node, window, node.schema + added)
        for f in filters:
            if not any(f is u for u in under):
                node = P.Filter(node, f, node.schema)
        return node

    def loop(self, loop: X.StreaQueLLoop | None, scope: Scope) -> dict:
        if loop is None:
            return {}
        var = loop.this.name

        def resolve(col):
            if not col.table and col.name.lower() == var.lower():
                return var, "TIMESTAMP"
            if not col.table and col.name.upper() in ("ST", "NOW"):
                return col.name, "TIMESTAMP"
            return scope.resolve(col)

        def seconds(node):
            # numbers in a loop are seconds when added to or taken from a time
            if isinstance(node, (exp.Add, exp.Sub)):
                for side in ("this", "expression"):
                    v = node.args[side]
                    if isinstance(v, exp.Literal) and not v.is_string:
                        node.set(side, exp.Interval(this=exp.Literal.string(v.name),
                                                    unit=exp.var("SECOND")))
            return node

        def expr(e):
            return self.expr(e.copy().transform(seconds), resolve)

        step = loop.args["step"]
        op = step.args["op"]
        t = exp.column(var)
        amount = step.args.get("amount")
        if amount is not None and isinstance(amount, exp.Literal) and not amount.is_string:
            amount = exp.Interval(this=exp.Literal.string(amount.name), unit=exp.var("SECOND"))
        nxt = {"++": lambda: exp.Add(this=t, expression=exp.Interval(
                   this=exp.Literal.string("1"), unit=exp.var("SECOND"))),
               "+=": lambda: exp.Add(this=t, expression=amount),
               "-=": lambda: exp.Sub(this=t, expression=amount),
               "=": lambda: amount}[op]()
        out = {}
        for w in loop.args["windows"]:
            alias = w.this.name.lower()
            out[alias] = P.LoopWindow(var, expr(loop.args["init"]),
                                      expr(loop.args["condition"]), expr(nxt),
                                      expr(w.args["left"]), expr(w.args["right"]))
        return out

    # ------------------------------------------------------------------ output
    def project(self, sel: exp.Select, node, scope: Scope, windows: dict):
        items, pseudo, output = [], [], []
        for e in sel.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                               and isinstance(inner.this, exp.Star)):
                items += _star(inner, scope)
                continue
            name = e.alias if isinstance(e, exp.Alias) else pg_column_name(e)
            kind = _pseudo(inner, lambda n: any(s.relation.column_type(n)
                                                for s in scope.sources))
            if kind is not None:
                if kind == "wtime" and not any(isinstance(w, _TIMED) for w in windows.values()):
                    raise UndefinedColumn("wtime(*) needs a window with SLIDE, a session "
                                          "window or a StreaQueL loop",
                                          hint="Write [RANGE '10 seconds' SLIDE '2 seconds'].")
                pseudo.append(kind)
                items.append((name, None, kind))
                continue
            items.append((name, inner))
        real = [it for it in items if len(it) == 2]
        aggregate = bool(sel.args.get("group")) or any(
            is_aggregate_call(x, self.catalog.is_aggregate) for _, e in real
            for x in e.find_all(exp.Func)) or (
            sel.args.get("having") is not None)
        having = sel.args.get("having")
        having = having.this if having is not None else None
        # PostgreSQL allows repeated output names (two ?column?); inside the plan they are
        # made unique, and the client still sees PostgreSQL's names (Plan.output).
        display = [n for n, _ in real]
        real = [(u, e) for u, (_, e) in zip(_unique(display), real)]
        if aggregate:
            node, named = self.aggregate(sel, node, scope, real, having)
        else:
            named = [P.NamedExpr(n, self.expr(e, scope.resolve)) for n, e in real]
        out_cols = tuple(P.Column(n.name, n.expr.type) for n in named)
        node = P.Map(node, tuple(named), out_cols)
        if sel.args.get("distinct"):
            node = P.Distinct(node, out_cols)
        limit = sel.args.get("limit")
        if limit is not None:
            count = limit.expression
            if not (isinstance(count, exp.Literal) and count.is_int):
                raise Unsupported("LIMIT needs a constant row count")
            node = P.Limit(node, int(count.name), out_cols)
        shown = iter(zip(display, out_cols))
        for it in items:      # the client's columns: the select list with pseudo-columns
            if len(it) == 3:
                output.append(P.Column(it[2], "TIMESTAMP"))
            else:
                name, col = next(shown)
                output.append(P.Column(name, col.type))
        return node, tuple(output), tuple(pseudo)

    def aggregate(self, sel, node, scope: Scope, real: list, having):
        written = list(sel.args.get("group").expressions if sel.args.get("group") else [])
        group = [_group_item(g, real, scope) for g in written + _session_keys(real, having,
                                                                              written)]
        keys = [P.NamedExpr(f"k{i}", self.expr(g, scope.resolve, "GROUP BY"))
                for i, g in enumerate(group)]
        exprs = [e for _, e in real] + ([having] if having is not None else [])
        for e in exprs:     # type-check the aggregates before they are cut into phases
            infer(_unstream_dots(e.copy()), lambda c: scope.resolve(c)[1])
        finals, partials = split_aggregates(exprs, self.catalog.is_aggregate)
        key_sql = {k.expr.sql: k.name for k in keys}

        def to_key(e):
            if isinstance(e, exp.Column) and e.name.startswith(("k", "p")) and \
                    e.name[1:].isdigit() and not e.table:
                return e
            try:
                renamed, columns, _ = _renamed(self.normalized(e, scope.resolve),
                                               scope.resolve)
            except (UndefinedColumn, UndefinedRelation, AmbiguousColumn):
                return e
            # a constant is the same with or without its key (and NULL in x IS NULL is no
            # key); an expression over columns becomes the key it groups by
            sql = renamed.sql("duckdb")
            return exp.column(key_sql[sql]) if columns and sql in key_sql else e

        partial_nodes = tuple(P.Partial(p.name, p.func, self.expr(p.arg, scope.resolve)
                                        if p.arg is not None else None) for p in partials)
        types = {k.name: k.expr.type for k in keys}
        types.update({p.name: _partial_type(p, self.catalog) for p in partial_nodes})

        def resolve_final(col):
            if col.name in types and not col.table:
                return col.name, types[col.name]
            raise GroupingError(
                f'column "{col.sql("cql")}" must appear in the GROUP BY clause or be used in '
                "an aggregate function",
                hint="Add it to GROUP BY, or aggregate it, e.g. MAX(...).")

        named = []
        for (name, _), final in zip(real, finals):
            final = final.transform(to_key)
            named.append(P.NamedExpr(name, self.expr(final, resolve_final)))
        schema = tuple(P.Column(n.name, n.expr.type) for n in named)
        if having is not None:
            hv = finals[-1].transform(to_key)
            hexpr = self.expr(hv, resolve_final)
            # a select item is computed only for the groups HAVING keeps, as in SQL (a cast
            # that fails for a group HAVING drops is no error)
            kept = tuple(n if n.expr.tree is not None and n.expr.tree[0] == "col" else
                         P.NamedExpr(n.name, P.Expr(
                             f"CASE WHEN {hexpr.sql} THEN {n.expr.sql} END",
                             tuple(dict.fromkeys(hexpr.columns + n.expr.columns)), n.expr.type))
                         for n in named)
            node = P.Aggregate(node, tuple(keys), partial_nodes,
                               kept + (P.NamedExpr("__having", hexpr),),
                               schema + (P.Column("__having", "BOOLEAN"),))
            node = P.Filter(node, P.Expr('"__having"', ("__having",), "BOOLEAN",
                                         ("col", "__having")), node.schema)
        else:
            node = P.Aggregate(node, tuple(keys), partial_nodes, tuple(named), schema)
        # the final phase already computed the select list; the Map just names it
        return node, [P.NamedExpr(n.name, P.Expr(f'"{n.name}"', (n.name,), n.expr.type))
                      for n in named]


def _session_keys(real: list, having, group: list) -> list:
    """wstart(*) and wend(*) in a grouped query group by the session too (as Flink's GROUP BY
    SESSION(…)): both, when either is read and the GROUP BY does not name them."""
    exprs = [e for _, e in real] + ([having] if having is not None else [])
    if not any(session_bound(n) is not None for e in exprs for n in e.walk()):
        return []
    named = {session_bound(g) for g in group}
    return [exp.Anonymous(this=name, expressions=[exp.Star()])
            for i, name in enumerate(SESSION_BOUNDS) if i not in named]


def _star(star: exp.Expression, scope: Scope) -> list:
    """(name, column) of each column ``*`` or ``alias.*`` stands for; a bare ``*`` shows the
    columns JOIN … USING merged once, first."""
    def each(src):          # (name, reference) of its columns; a query's by their plan names
        names = src.relation.names or [c for c, _ in src.relation.columns]
        out = []
        for (c, _), n in zip(src.relation.columns, names):
            ref = exp.column(n, table=src.alias)
            ref.meta[PLAN_NAME] = True
            out.append((c, ref))
        return out

    if isinstance(star, exp.Column) and star.table:
        src = scope.find(star.table)
        if src is None:
            raise UndefinedRelation(f'missing FROM-clause entry for table "{star.table}"')
        return each(src)
    merged = [(srcs[0].relation.columns, srcs[0], name) for name, srcs in scope.merged.items()]
    out = [(next(c for c, _ in cols if c.lower() == name), exp.column(name, table=src.alias))
           for cols, src, name in merged]
    for src in scope.sources:
        out += [(c, ref) for c, ref in each(src)
                if not any(src is x for x in scope.merged.get(c.lower(), ()))]
    return out


def common_type(a: str, b: str, what: str) -> str:
    """The type a set operation's column takes from its two inputs' (42804 when one is a
    number and the other text, say)."""
    if UNKNOWN in (a, b):
        return b if a == UNKNOWN else a
    fa, fb = _shape(a), _shape(b)
    if fa != fb and UNKNOWN not in (fa, fb):
        raise DatatypeMismatch(f"{what} types {a} and {b} cannot be matched",
                               hint="Cast one side, e.g. CAST(x AS TEXT).")
    return a if a == b else union_type(a, b)


def _shape(t: str) -> str:
    """What must be alike for two types to meet in a set operation, as PostgreSQL matches
    them: the family, but a time of day is not a date, a list not a struct, a uuid not a
    blob (DuckDB would cast one to the other and fail at the first row)."""
    base = t.split("(")[0].strip().upper()
    if t.rstrip().endswith("]"):
        return "list"
    if base in ("TIME", "TIMETZ", "TIME WITH TIME ZONE"):
        return "time of day"
    f = family(t)
    return base if f == "other" else f


def _retyped(output: tuple, pseudo: tuple, types: list) -> tuple:
    """The client's columns (pseudo-columns among them) with the real ones typed ``types``."""
    out, real, seen = [], iter(types), set()
    for c in output:
        if c.name in pseudo and c.name not in seen:
            seen.add(c.name)
            out.append(c)
        else:
            out.append(P.Column(c.name, next(real)))
    return tuple(out)


def _cast_to(have: tuple, want: tuple) -> tuple:
    """Named expressions giving the columns ``have`` the names and types of ``want``."""
    return tuple(P.NamedExpr(w.name, P.Expr(quote(h.name) if h.type == w.type or
                                            w.type == UNKNOWN
                                            else f"CAST({quote(h.name)} AS {w.type})",
                                            (h.name,), w.type))
                 for h, w in zip(have, want))


def _clauses(sel: exp.Select) -> list:
    """The expressions of a SELECT's own clauses (not of the queries in its FROM)."""
    out = list(sel.expressions)
    for key in ("where", "having"):
        if sel.args.get(key) is not None:
            out.append(sel.args[key].this)
    if sel.args.get("group") is not None:
        out += sel.args["group"].expressions
    out += [j.args["on"] for j in sel.args.get("joins") or [] if j.args.get("on") is not None]
    return out


def _using(joins: list, sources: list, scope: Scope) -> list:
    """``JOIN b USING (k)``: the equality of b.k with the k of the one relation before b
    that has it; an unqualified k then names that one (``Scope.merged``) and ``*`` shows it
    once, first, as PostgreSQL does."""
    out, group = [], 0
    for n, j in enumerate(joins, start=1):
        if not any(j.args.get(k) for k in ("kind", "side", "on", "using", "method")):
            group = n                    # a comma: JOIN binds tighter (a, b JOIN c USING …)
        right = sources[n]
        for ident in j.args.get("using") or []:
            name = ident.name
            # relations an earlier USING merged into one column are that one (a JOIN b
            # USING (k) JOIN c USING (k)): the first stands for them
            merged = scope.merged.get(name.lower(), ())
            left = [s for s in sources[group:n] if s.relation.column_type(name) is not None
                    and not any(s is m for m in merged[1:])]
            where = written_at(ident)
            if right.relation.column_type(name) is None or not left:
                side = "left" if right.relation.column_type(name) is not None else "right"
                raise UndefinedColumn(f'column "{name}" specified in USING clause does not '
                                      f"exist in {side} table", position=where,
                                      hint="Join ON the columns by name instead.")
            if len(left) > 1:
                raise AmbiguousColumn(f'common column name "{name}" appears more than once in '
                                      "left table", position=where,
                                      hint="Join ON the columns by name instead.")
            out.append(exp.EQ(this=exp.column(name, table=left[0].alias),
                              expression=exp.column(name, table=right.alias)))
            if not merged or merged[0] is left[0]:
                scope.merged[name.lower()] = (merged or (left[0],)) + (right,)
    return out


def _column_type(resolve):
    """``infer``'s column typer over a scope's ``resolve``."""
    return lambda c: resolve(c)[1] if isinstance(c, exp.Column) else UNKNOWN


def _integer_division(e: exp.Expression, column_type) -> exp.Expression:
    """int / int spelled as the integer division it is in PostgreSQL (``//`` in DuckDB, DIV
    in Spark), so the engine that runs it does not depend on a setting to truncate."""
    def whole(node):
        return infer(node, column_type).split("(")[0] in INTEGERS

    return e.transform(lambda n: exp.IntDiv(this=n.this, expression=n.expression)
                       if isinstance(n, exp.Div) and whole(n.this) and whole(n.expression)
                       else n)


def _renamed(e: exp.Expression, resolve) -> tuple:
    """(``e`` with its columns renamed to internal names, those names in order, their
    types)."""
    columns: list = []
    types: dict = {}

    def rename(node):
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            internal, typ = resolve(node)
            if internal not in columns:
                columns.append(internal)
            types[internal] = typ
            return exp.column(internal, quoted=True)
        return node

    return e.copy().transform(rename), tuple(columns), types


def _unique(names: list) -> list:
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}_{seen[n]}")
    return out


def _partial_type(p: P.Partial, catalog) -> str:
    if p.func in ("count", "count_star", "count_distinct"):
        return "BIGINT"
    if catalog.is_aggregate(p.func):
        return catalog.aggregate_type(p.func)
    if p.arg is None:
        return "BIGINT"
    if p.func in ("sum", "sum_distinct"):
        base = p.arg.type.split("(")[0]      # PostgreSQL: sum(int4) is int8, sum(int8) numeric
        if base == UNKNOWN:
            return "HUGEINT"                 # a sum of NULLs, as DuckDB types it
        if base in ("TINYINT", "SMALLINT", "INT", "INTEGER"):
            return "BIGINT"
        return "HUGEINT" if base in ("BIGINT", "HUGEINT") else p.arg.type
    return p.arg.type if p.func in ("min", "max") else UNKNOWN


def _pseudo(e: exp.Expression, has_column) -> str | None:
    """Which pseudo-column a select item is (None: none); ``has_column(name)``: a relation
    read has a column of that name, which the name then means."""
    if isinstance(e, exp.Anonymous) and e.name.lower() == "wtime":
        return "wtime"
    if isinstance(e, exp.Column) and not e.table and e.name.lower() in ("valid_from", "valid_to"):
        if not has_column(e.name):
            return e.name.lower()
    return None


def _conjuncts(e: exp.Expression) -> list:
    if isinstance(e, exp.And):
        return _conjuncts(e.this) + _conjuncts(e.expression)
    if isinstance(e, exp.Paren):
        return _conjuncts(e.this)
    return [e]


class _Lifted:
    """What lifting a SELECT into Σ found: its inputs (and their schemas), lookup tables (and
    the columns read), each top FROM item's width (for ``alias.*``) and every column name."""

    def __init__(self):
        self.inputs: list = []
        self.schemas: list = []
        self.tables: list = []
        self.table_columns: list = []
        self.widths: dict = {}
        self.names: set = set()

    def has(self, name: str) -> bool:
        return name.lower() in self.names


def _star_widths(items: list, total: int, widths: dict) -> list:
    """How many columns each star of a select list stands for: ``alias.*`` its relation's
    columns, a bare ``*`` what the others leave of the ``total`` DuckDB bound."""
    stars = [(e.this if isinstance(e, exp.Alias) else e) for name, e in items
             if name is None and e is not None]
    named = sum(1 for name, e in items if name is not None and e is not None)
    qualified = [widths.get(s.table.lower(), 0) if isinstance(s, exp.Column) and s.table
                 else None for s in stars]
    bare = [q for q in qualified if q is None]
    left = total - named - sum(q for q in qualified if q is not None)
    return [q if q is not None else left // max(len(bare), 1) for q in qualified]
