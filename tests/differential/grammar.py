"""A seeded, grammar-based generator of continuous queries (in the spirit of SQLancer and
sqlsmith) over the world's streams and table: projections, CASE, COALESCE, NULL tests, every
window kind and its spellings (Flink's window table functions TUMBLE, HOP, CUMULATE and
SESSION among them, grouped by window_start and window_end), Flink's DATE_FORMAT, SPLIT_INDEX
and REGEXP_EXTRACT, inner and outer joins, stream–table joins, GROUP BY with every
aggregate (DISTINCT, FILTER), HAVING, DISTINCT, DISTINCT ON, UNION / EXCEPT / INTERSECT [ALL],
derived tables, scalar / IN / EXISTS subqueries, window functions (ranks, LAG / LEAD,
FIRST_VALUE, frames) with and without a Top-N filter (in a query over them, or QUALIFY),
ORDER BY … LIMIT and LIMIT, and the functions whose value is not the snapshot's.

A query is a small tree that renders twice: as cqgate's SQL (windows after the streams, the
pseudo-columns valid_from and valid_to first) and as the oracle's plain SQL, where each stream
reference reads its snapshot at an instant (``snapN(@T@)``, see ``oracle``). Expressions are
tuples of text and nodes (a subquery renders in both forms)."""
from __future__ import annotations

import random
import string
from dataclasses import dataclass, field, replace

from .world import (RELATIONS, STREAMS, T0, TABLES, Ref, Window, random_window, timestamp,
                    window_columns, window_table)

INSTANT = "@T@"              # the oracle's placeholder for the instant, in µs


def J(*parts) -> tuple:
    """An expression: text and nodes, nested tuples flattened."""
    out: list = []
    for p in parts:
        if isinstance(p, tuple):
            out.extend(p)
        else:
            out.append(p)
    return tuple(out)


def render(e, mode: str, names: dict) -> str:
    if isinstance(e, str):
        return e
    if isinstance(e, tuple):
        return "".join(render(p, mode, names) for p in e)
    return e.render(mode, names)


@dataclass
class Col:
    qual: str
    name: str
    kind: str                # int, text, double, time

    @property
    def sql(self) -> tuple:
        return (f"{self.qual}.{self.name}",)


@dataclass
class SessionCol(Col):
    """A session window's start or end: ``wstart(*)`` / ``wend(*)`` in cqgate's SQL, the
    snapshot's column of that name in the oracle's (which then groups by both, as cqgate
    does when a grouped query reads either)."""

    @property
    def sql(self) -> tuple:
        return (self,)

    def render(self, mode, names):
        return f"{self.name}(*)" if mode == "cql" else f"{self.qual}.{self.name}"


def reads_session(e) -> SessionCol | None:
    """The session bound an expression reads (not inside a subquery), if any."""
    if isinstance(e, SessionCol):
        return e
    if isinstance(e, tuple):
        return next((c for c in map(reads_session, e) if c is not None), None)
    return None


# ---------------------------------------------------------------------- the tree
@dataclass
class RefItem:
    ref: Ref

    def render(self, mode, names):
        r = self.ref
        rel = RELATIONS[r.relation]
        if rel.kind == "table":
            return f"{names['tb'] if mode == 'cql' else 'tb'} AS {r.alias}"
        if mode == "cql":
            if r.window is not None and r.window.kind in TABLES:
                return window_table(r.window, names[r.relation], r.alias)
            win = "" if r.clause or r.window is None or r.window.kind == "none" \
                else " " + r.window.cql()
            return f"{names[r.relation]}{win} AS {r.alias}"
        return f"snap{r.index}({INSTANT}) AS {r.alias}"

    def columns(self) -> list:
        rel = RELATIONS[self.ref.relation]
        cols = [Col(self.ref.alias, n, k) for n, _, k in rel.columns]
        if rel.kind == "stream":
            cols.append(Col(self.ref.alias, "t", "time"))
        if self.ref.window is not None and self.ref.window.kind == "session":
            cols += [SessionCol(self.ref.alias, n, "time") for n in ("wstart", "wend")]
        cols += [Col(self.ref.alias, n, "time") for n in window_columns(self.ref.window)]
        return cols


@dataclass
class Derived:
    query: object
    alias: str

    def render(self, mode, names):
        return f"({self.query.render(mode, names)}) AS {self.alias}"

    def columns(self) -> list:
        return [Col(self.alias, n, k) for n, k in self.query.outputs()]


@dataclass
class JoinItem:
    kind: str                # JOIN, LEFT JOIN, RIGHT JOIN, FULL JOIN, CROSS JOIN
    item: object
    on: tuple | None = None
    using: str | None = None

    def render(self, mode, names):
        text = f" {self.kind} {self.item.render(mode, names)}"
        if self.using:
            return text + f" USING ({self.using})"
        return text + (f" ON {render(self.on, mode, names)}" if self.on is not None else "")


@dataclass
class Select:
    items: list                       # [(expr, alias, kind)]
    from_: list                       # [RefItem | Derived], comma-joined
    joins: list = field(default_factory=list)
    where: tuple | None = None
    group: list | None = None         # [expr]
    having: tuple | None = None
    distinct: bool = False
    distinct_on: list | None = None   # [expr]
    order: list | None = None         # [expr text]
    limit: int | None = None
    clause: list = field(default_factory=list)   # refs whose window is in the WINDOW clause
    pseudo: bool = False              # cqgate's form selects valid_from, valid_to first
    qualify: str | None = None        # a filter over window functions (text, both dialects)
    # WITH (state_ttl = seconds) in cqgate's form; the oracle's form joins only the tuples
    # whose event times (their valid_from) are that close: the condition's text
    ttl: tuple | None = None
    aggregated: bool = False          # grouped, or one global aggregate

    def outputs(self) -> list:
        return [(a, k) for _, a, k in self.items]

    def render(self, mode, names):
        head = "SELECT "
        if self.distinct_on is not None:
            head += "DISTINCT ON (" + ", ".join(render(e, mode, names)
                                                for e in self.distinct_on) + ") "
        elif self.distinct:
            head += "DISTINCT "
        items = [f"{render(e, mode, names)} AS {a}" for e, a, _ in self.items]
        if self.pseudo and mode == "cql":
            items = ["valid_from", "valid_to"] + items
        text = head + ", ".join(items) + " FROM " + ", ".join(
            f.render(mode, names) for f in self.from_)
        text += "".join(j.render(mode, names) for j in self.joins)
        where = self.where
        if self.ttl is not None and mode == "oracle":
            where = self.ttl[1] if where is None else J("(", where, ") AND ", self.ttl[1])
        if where is not None:
            text += " WHERE " + render(where, mode, names)
        group = [render(g, mode, names) for g in self.group or []]
        session = next((c for e in [e for e, _, _ in self.items] + [self.having]
                        if (c := reads_session(e)) is not None), None)
        if mode == "oracle" and session is not None and self.aggregated:
            group += [f"{session.qual}.wstart", f"{session.qual}.wend"]
        if group:
            text += " GROUP BY " + ", ".join(group)
        if self.having is not None:
            text += " HAVING " + render(self.having, mode, names)
        if self.clause and mode == "cql":
            text += " WINDOW " + ", ".join(f"{r.alias} {r.window.cql()}" for r in self.clause)
        if self.qualify is not None:
            text += " QUALIFY " + self.qualify
        if self.order:
            text += " ORDER BY " + ", ".join(self.order)
        if self.limit is not None:
            text += f" LIMIT {self.limit}"
        if self.ttl is not None and mode == "cql":
            text += f" WITH (state_ttl = '{self.ttl[0]} seconds')"
        return text


@dataclass
class SetOp:
    op: str                           # UNION, EXCEPT, INTERSECT
    all: bool
    left: object
    right: object

    def outputs(self) -> list:
        return self.left.outputs()

    def render(self, mode, names):
        def side(q):
            text = q.render(mode, names)
            return f"({text})" if isinstance(q, SetOp) else text
        return f"{side(self.left)} {self.op}{' ALL' if self.all else ''} {side(self.right)}"


@dataclass
class Wrapped:
    """cqgate's form of a query whose top is not a plain SELECT: ``SELECT valid_from,
    valid_to, * FROM (q) AS top``; the oracle's is q."""
    query: object

    def outputs(self) -> list:
        return self.query.outputs()

    def render(self, mode, names):
        if mode == "cql":
            return f"SELECT valid_from, valid_to, * FROM ({self.query.render(mode, names)}) AS top"
        return self.query.render(mode, names)


@dataclass
class Case:
    """One generated query: its tree, the stream references it reads (index = snapshot
    number), and how its answer is checked: ``exact`` (equal at every instant), ``rows`` (each
    row right while valid: LIMIT without ORDER BY, whose rows are any of the snapshot's)."""
    query: object
    refs: list
    check: str = "exact"
    features: tuple = ()

    def cql(self, names: dict) -> str:
        return self.query.render("cql", names)

    @property
    def limit(self) -> int | None:
        """The top query's LIMIT, if it has one."""
        q = self.query.query if isinstance(self.query, Wrapped) else self.query
        return getattr(q, "limit", None)

    def plain(self, names: dict) -> str:
        """cqgate's form without the pseudo-columns: a named window's or derived stream's
        definition, or a query in snapshot mode."""
        q = self.query
        q = q.query if isinstance(q, Wrapped) else replace(q, pseudo=False)
        return q.render("cql", names)

    def oracle(self) -> str:
        """The plain SQL; for a LIMIT without ORDER BY, the whole snapshot (its rows are any
        of those)."""
        q = self.query
        if self.check == "rows":
            inner = q.query if isinstance(q, Wrapped) else q
            q = replace(inner, limit=None)
        return q.render("oracle", {})


# ---------------------------------------------------------------------- generation
CMP = ["=", "<>", "<", "<=", ">", ">="]
# aggregates the dialect claims and DuckDB's others, over ints unless said
AGGREGATES = ["count_star", "count", "count_distinct", "sum", "sum_distinct", "avg",
              "avg_distinct", "min", "max", "min_text", "max_text", "other"]
OTHER_AGGREGATES = [
    ("string_agg({t}, ',' ORDER BY {t})", "text"), ("array_agg({i} ORDER BY {i})", "other"),
    ("list({i} ORDER BY {i})", "other"), ("bool_and({p})", "bool"), ("bool_or({p})", "bool"),
    ("stddev_samp({i})", "double"), ("var_pop({i})", "double"), ("median({i})", "double"),
    ("quantile_cont({i}, 0.5)", "double"), ("count_if({p})", "int"), ("product({i})", "double"),
    ("sum({d})", "double"), ("avg({d})", "double"), ("bit_or({i})", "int"),
]
VOLATILE = ["random()", "gen_random_uuid()::TEXT"]
# the windows under which a tuple's valid_from is its event time t, so that a join may be
# bounded by t (an interval join) or by state_ttl
STARTS_AT_T = ("none", "range", "now", "unbounded", "rows")


class Generator:
    """Random cases from ``seed``: ``case()`` makes the next one."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    # -------------------------------------------------------------- expressions
    def expr(self, kind: str, cols: list, depth: int = 2, sub=None) -> tuple:
        """An expression of ``kind`` over ``cols``; ``sub``: the case's state when it may
        hold a subquery over a stream (rarely), else None."""
        rng = self.rng
        mine = [c for c in cols if c.kind == kind]
        if sub is not None and kind in _SUBQUERIES and rng.random() < 0.03:
            return _SUBQUERIES[kind](self, cols, sub)
        if depth <= 0 or rng.random() < 0.3:
            if mine and rng.random() < 0.85:
                return rng.choice(mine).sql
            ints = [c for c in cols if c.kind == "int"]
            if kind == "bool" and ints and rng.random() < 0.8:
                return J(rng.choice(ints).sql, f" {rng.choice(CMP)} ", self.literal("int"))
            return (self.literal(kind),)
        return rng.choice(_BUILDERS[kind])(self, cols, depth - 1, sub)

    def literal(self, kind: str) -> str:
        rng = self.rng
        if kind == "int":
            return rng.choice(["0", "1", "2", "-1", "3", "0", "1", "NULL"])
        if kind == "text":
            return rng.choice(["'a'", "'b'", "'ab'", "NULL"])
        if kind == "double":
            return rng.choice(["0.5", "-1.5", "2.0"])
        if kind == "time":
            return timestamp(T0 + rng.choice([0, 1, 2, 3, 5]) * 1_000_000)
        return rng.choice(["TRUE", "TRUE", "FALSE", "NULL"])

    def predicate(self, cols, depth=2, sub=None) -> tuple:
        return self.expr("bool", cols, depth, sub)

    # -------------------------------------------------------------- aggregates
    def aggregate(self, cols) -> tuple[tuple, str]:
        """An aggregate call over ``cols`` and its kind."""
        rng = self.rng
        pick = rng.choice(AGGREGATES)
        if pick == "other":
            form, kind = rng.choice(OTHER_AGGREGATES)
            parts = {"i": self.expr("int", cols, 1), "t": self.expr("text", cols, 0),
                     "p": self.predicate(cols, 1), "d": self.expr("double", cols, 1)}
            # the arguments stay nodes, rendered with the round's names (its fn) and in
            # each dialect
            call = J(*[J(text, parts[field]) if field else text
                       for text, field, _, _ in string.Formatter().parse(form)])
        else:
            call, kind = _AGG_FORMS[pick](self.expr("int", cols, 1), self.expr("text", cols, 0))
        if rng.random() < 0.2:
            call = J(call, " FILTER (WHERE ", self.predicate(cols, 1), ")")
        return call, kind

    def grouped_item(self, keys: list, cols: list, want: str | None) -> tuple[tuple, str]:
        """A select item of a grouped query: a key, an aggregate or an expression over
        them, of kind ``want`` (None: any)."""
        rng = self.rng
        match = [(e, k) for e, k in keys if want is None or k == want]
        if match and rng.random() < 0.4:
            return rng.choice(match)
        agg, kind = self.aggregate(cols)
        if want is None or want == kind:
            ints = [e for e, k in keys if k == "int"]
            if kind == "int" and ints and rng.random() < 0.3:
                return J("(", agg, " + ", rng.choice(ints), ")"), "int"
            if kind == "int" and rng.random() < 0.2:
                return J("COALESCE(", agg, ", 0)"), "int"
            return agg, kind
        if want == "bool":
            return J(agg, " IS NOT NULL"), "bool"
        if kind in ("int", "double", "text", "bool") and want in ("int", "double", "text"):
            return J("CAST(", agg, f" AS {_SQL_TYPE[want]})"), want
        return (f"CAST(NULL AS {_SQL_TYPE[want]})",), want

    def having(self, cols) -> tuple:
        agg, kind = self.aggregate(cols)
        if kind in ("int", "double"):
            return J(agg, f" {self.rng.choice(CMP)} ", self.literal("int"))
        return J(agg, " IS NOT NULL")

    # -------------------------------------------------------------- FROM
    def from_clause(self, state, max_items=3):
        """(comma-joined items, JOIN items, their columns, equalities for WHERE)."""
        rng = self.rng
        n = rng.choices([1, 2, 3], [6, 4, 1])[0] if max_items > 1 else 1
        first = self.source(state)
        items, cols, joins, conjuncts = [first], first.columns(), [], []
        merged = 0          # JOIN … USING (k) so far: k is one column of them all (a chain)
        for _ in range(n - 1):
            item = self.source(state, table=rng.random() < 0.3)
            icols = item.columns()
            left_k = [c for c in cols if c.name == "k"]
            right_k = [c for c in icols if c.name == "k"]
            cond = J(rng.choice(left_k).sql, " = ", right_k[0].sql) if left_k and right_k \
                and rng.random() < 0.85 else self.predicate(cols + icols, 1)
            if rng.random() < 0.2:
                cond = J(cond, " AND ", self.predicate(cols + icols, 1))
            times = [c for c in cols if c.kind == "time" and c.name == "t"]
            if times and isinstance(item, RefItem) and item.ref.relation in STREAMS \
                    and rng.random() < 0.3:       # an interval join
                pair = [rng.choice(times), next(c for c in icols if c.name == "t")]
                rng.shuffle(pair)
                cond = J(cond, " AND ", self.time_bound(*pair))
            if rng.random() < 0.4:
                items.append(item)
                conjuncts.append(cond)
            else:
                kind = rng.choices(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN",
                                    "CROSS JOIN", "USING"], [6, 2, 1, 1, 1, 1])[0]
                if merged and rng.random() < 0.5:
                    kind = "USING"          # a chain: a JOIN b USING (k) JOIN c USING (k)
                if kind == "CROSS JOIN":
                    joins.append(JoinItem(kind, item))
                elif kind == "USING" and left_k and right_k and len(right_k) == 1 and (
                        len(left_k) == 1 or (len(items) == 1 and len(left_k) == merged + 1)):
                    # an outer join USING (k) is Σ's (its k is SQL's COALESCE of both sides)
                    outer = not merged and rng.random() < 0.3
                    joins.append(JoinItem(rng.choice(["LEFT JOIN", "FULL JOIN"]) if outer
                                          else "JOIN", item, using="k"))
                    merged += 1
                else:
                    joins.append(JoinItem("JOIN" if kind == "USING" else kind, item, on=cond))
            cols = cols + icols
        if len({c.qual for c in cols if isinstance(c, SessionCol)}) > 1:
            # wstart(*) names the one session window in FROM: with two it is 42702
            cols = [c for c in cols if not isinstance(c, SessionCol)]
        return items, joins, cols, conjuncts

    def time_bound(self, a: Col, b: Col) -> tuple:
        """A condition between two streams' event times that bounds a join's state (or only
        one side's: the other is then refused unless windowed)."""
        n = self.rng.choice([0, 1, 2])
        return self.rng.choice([
            J(a.sql, " BETWEEN ", b.sql, " AND ", b.sql, f" + INTERVAL '{n} seconds'"),
            J(a.sql, " = ", b.sql),
            J(a.sql, " >= ", b.sql, " - INTERVAL '1 seconds' AND ", a.sql, " <= ", b.sql,
              " + INTERVAL '500 milliseconds'"),
            J(a.sql, " < ", b.sql, f" + INTERVAL '{n} seconds'"),
        ])

    def state_ttl(self, sel: Select) -> None:
        """Perhaps WITH (state_ttl = …) on a top SELECT that joins two streams whose tuples
        start at their event times, inner joins only (an outer join refuses it)."""
        refs = [f for f in sel.from_ + [j.item for j in sel.joins]]
        streams = [f.ref for f in refs if isinstance(f, RefItem) and f.ref.relation in STREAMS]
        if len(streams) != 2 or any(isinstance(f, Derived) for f in refs) or any(
                j.kind not in ("JOIN", "CROSS JOIN") for j in sel.joins) or any(
                r.window is None or r.window.kind not in STARTS_AT_T for r in streams) \
                or self.rng.random() >= 0.25:
            return
        n = self.rng.choice([1, 2, 3])
        a, b = (r.alias for r in streams)
        sel.ttl = (n, f"abs(epoch_us({a}.t) - epoch_us({b}.t)) < {n * 1_000_000}")

    def source(self, state, table=False):
        """A FROM item: a stream under a random window, the table, or a derived query."""
        rng = self.rng
        if table:
            return RefItem(state.ref("tb", None))
        if state.depth < 1 and rng.random() < 0.1:
            state.depth += 1
            q = self.query(state, top=False)
            state.depth -= 1
            return Derived(q, state.alias())
        name = rng.choice(STREAMS)
        window = random_window(rng, RELATIONS[name],
                               lambda r: f"v {r.choice(CMP)} {r.choice(['0', '1'])}")
        return RefItem(state.ref(name, window))

    # -------------------------------------------------------------- queries
    def select(self, state, top: bool, shape: tuple | None = None) -> Select:
        """A SELECT; ``shape``: the kinds of its outputs (a set operation's right side)."""
        rng = self.rng
        items, joins, cols, conjuncts = self.from_clause(state)
        where = conjuncts[:]
        if rng.random() < 0.5:
            where.append(self.predicate(cols, 2, sub=state))
        sel = Select([], items, joins)
        n = len(shape) if shape is not None else rng.randint(1, 3)
        wants = list(shape) if shape is not None else [None] * n
        if rng.random() < 0.35:                       # grouped, or one global aggregate
            keys: list = []
            for _ in range(rng.choice([0, 1, 1, 2])):
                kind = rng.choice(["int", "int", "text"])
                e = self.expr(kind, cols, 1)
                if all(render(e, "cql", {}) != render(k, "cql", {}) for k, _ in keys):
                    keys.append((e, kind))
            windows = [c for c in cols if c.name in ("window_start", "window_end")]
            if len(windows) == 2 and rng.random() < 0.7:  # Flink's GROUP BY window_start, …
                keys += [(w.sql, "time") for w in windows]
            sel.group = [k for k, _ in keys] or None
            sel.aggregated = True
            for i, want in enumerate(wants):
                e, kind = self.grouped_item(keys, cols, want)
                sel.items.append((e, f"c{i}", kind))
            if rng.random() < 0.3:
                sel.having = self.having(cols)
        else:
            for i, want in enumerate(wants):
                kind = want or rng.choice(["int", "int", "text", "double", "bool", "time"])
                sel.items.append((self.expr(kind, cols, 2, sub=state), f"c{i}", kind))
            sel.distinct = rng.random() < 0.15
            if top and rng.random() < 0.04:
                sel.items[0] = ((rng.choice(VOLATILE),), "c0", "other")
        if where:
            w = where[0]
            for x in where[1:]:
                w = J(w, " AND ", x)
            sel.where = w
        # TelegraphCQ's form: the one stream's window in the WINDOW clause
        only = items[0] if len(items) == 1 and not joins else None
        if sel.group is not None and isinstance(only, RefItem) and only.ref.window is not None \
                and only.ref.window.kind not in ("none",) + TABLES and rng.random() < 0.3:
            only.ref.clause = True
            sel.clause = [only.ref]
        return sel

    def query(self, state, top: bool):
        rng = self.rng
        r = rng.random()
        if r < 0.12 and state.depth < 1:
            for _ in range(5):
                left = self.select(state, False)
                kinds = tuple(k for _, k in left.outputs())
                if "other" not in kinds:
                    right = self.select(state, False, shape=kinds)
                    op = rng.choice(["UNION", "EXCEPT", "INTERSECT"])
                    return SetOp(op, rng.random() < 0.5, left, right)
        if r < 0.2 and top:
            return self.window_function(state)
        sel = self.select(state, top)
        if top and rng.random() < 0.05 and sel.group is None:
            sel.distinct_on = [sel.items[0][0]]
            sel.order = [str(i + 1) for i in range(len(sel.items))]
            sel.distinct = False
        elif top and rng.random() < 0.06:
            sel.order = [str(i + 1) for i in range(len(sel.items))]
            sel.limit = rng.randint(1, 3)
        elif top and rng.random() < 0.04:
            sel.limit = rng.randint(1, 4)
        if top:
            self.state_ttl(sel)
        return sel

    def window_function(self, state):
        """ROW_NUMBER / RANK / LAG / SUM OVER a stream, alone or under a Top-N filter."""
        rng = self.rng
        src = _subquery_source(self, state)
        items, joins, cols = [src], [], src.columns()
        ints = [c for c in cols if c.kind == "int"]
        k, v = ints[0].sql[0], ints[-1].sql[0]
        order = ", ".join(c.sql[0] for c in cols if not isinstance(c, SessionCol))  # total
        func = rng.choice([f"ROW_NUMBER() OVER (PARTITION BY {k} ORDER BY {order})",
                           f"RANK() OVER (PARTITION BY {k} ORDER BY {v})",
                           f"DENSE_RANK() OVER (ORDER BY {v})",
                           f"LAG({v}) OVER (PARTITION BY {k} ORDER BY {order})",
                           f"LEAD({v}, 2) OVER (ORDER BY {order})",
                           f"FIRST_VALUE({v}) OVER (PARTITION BY {k} ORDER BY {order})",
                           f"SUM({v}) OVER (PARTITION BY {k} ORDER BY {order} ROWS BETWEEN 1 "
                           "PRECEDING AND CURRENT ROW)",
                           f"SUM({v}) OVER (PARTITION BY {k})"])
        inner = Select([((k,), "c0", "int"), ((v,), "c1", "int"), ((func,), "c2", "int")],
                       items, joins)
        if rng.random() < 0.5 or not func.startswith(("ROW", "RANK", "DENSE")):
            return inner
        if rng.random() < 0.3:                 # the same Top-N filter, as QUALIFY
            inner.qualify = f"{func} <= {rng.randint(1, 2)}"
            inner.items = inner.items[:2]
            return inner
        alias = state.alias()
        return Select([((f"{alias}.c0",), "c0", "int"), ((f"{alias}.c1",), "c1", "int")],
                      [Derived(inner, alias)], where=(f"{alias}.c2 <= {rng.randint(1, 2)}",))

    def case(self) -> Case:
        state = _State()
        q = self.query(state, top=True)
        check = "rows" if isinstance(q, Select) and q.limit is not None and not q.order \
            else "exact"
        if isinstance(q, Select) and q.distinct_on is None and not q.order and \
                self.rng.random() < 0.6:
            q.pseudo = True
        else:
            first = q.left if isinstance(q, SetOp) else q
            if isinstance(first, Select) and len(first.items) > 1 and self.rng.random() < 0.2:
                # two output columns of one name, read through * (SELECT a.k, b.k)
                e, _, kind = first.items[1]
                first.items[1] = (e, first.items[0][1], kind)
            q = Wrapped(q)
        return Case(q, state.refs, check)


_SQL_TYPE = {"int": "INT", "text": "TEXT", "double": "DOUBLE", "bool": "BOOLEAN",
             "time": "TIMESTAMP", "other": "TEXT"}


_AGG_FORMS = {
    "count_star": lambda a, t: (("COUNT(*)",), "int"),
    "count": lambda a, t: (J("COUNT(", a, ")"), "int"),
    "count_distinct": lambda a, t: (J("COUNT(DISTINCT ", a, ")"), "int"),
    "sum": lambda a, t: (J("SUM(", a, ")"), "int"),
    "sum_distinct": lambda a, t: (J("SUM(DISTINCT ", a, ")"), "int"),
    "avg": lambda a, t: (J("AVG(", a, ")"), "double"),
    "avg_distinct": lambda a, t: (J("AVG(DISTINCT ", a, ")"), "double"),
    "min": lambda a, t: (J("MIN(", a, ")"), "int"),
    "max": lambda a, t: (J("MAX(", a, ")"), "int"),
    "min_text": lambda a, t: (J("MIN(", t, ")"), "text"),
    "max_text": lambda a, t: (J("MAX(", t, ")"), "text"),
}


class _State:
    """The references and aliases of one case as it is generated."""

    def __init__(self):
        self.refs: list = []
        self.depth = 0
        self._aliases = 0

    def alias(self) -> str:
        self._aliases += 1
        return f"q{self._aliases}"

    def ref(self, relation, window) -> Ref:
        r = Ref(relation, window, f"r{len(self.refs)}", index=len(self.refs))
        self.refs.append(r)
        return r


# ---------------------------------------------------------------------- expression rules
def _int_rules():
    def binop(op):
        return lambda g, c, d, s: J("(", g.expr("int", c, d, s), f" {op} ",
                                    g.expr("int", c, d, s), ")")
    return [
        binop("+"), binop("-"), binop("*"),
        lambda g, c, d, s: J("abs(", g.expr("int", c, d, s), ")"),
        lambda g, c, d, s: J("(", g.expr("int", c, d, s), " % 3)"),
        lambda g, c, d, s: J("(", g.expr("int", c, d, s), " / 2)"),
        lambda g, c, d, s: J("CASE WHEN ", g.predicate(c, d, s), " THEN ", g.expr("int", c, d, s),
                             " ELSE ", g.expr("int", c, d, s), " END"),
        lambda g, c, d, s: J("CASE WHEN ", g.predicate(c, d, s), " THEN ",
                             g.expr("int", c, d, s), " END"),
        lambda g, c, d, s: J("COALESCE(", g.expr("int", c, d, s), ", ", g.expr("int", c, d, s),
                             ")"),
        lambda g, c, d, s: J("NULLIF(", g.expr("int", c, d, s), ", ", g.expr("int", c, d, s),
                             ")"),
        lambda g, c, d, s: J("greatest(", g.expr("int", c, d, s), ", ",
                             g.expr("int", c, d, s), ")"),
        lambda g, c, d, s: J("least(", g.expr("int", c, d, s), ", ", g.expr("int", c, d, s),
                             ")"),
        lambda g, c, d, s: J("length(", g.expr("text", c, d, s), ")"),
        lambda g, c, d, s: J("CAST(", g.expr("double", c, d, s), " AS INT)"),
        lambda g, c, d, s: J(_Name("fn"), "(", g.expr("int", c, d, s), ")"),
    ]


def _bool_rules():
    return [
        lambda g, c, d, s: J(g.expr("int", c, d, s), f" {g.rng.choice(CMP)} ",
                             g.expr("int", c, d, s)),
        lambda g, c, d, s: J(g.expr("int", c, d, s), f" {g.rng.choice(CMP)} ",
                             g.expr("int", c, d, s)),
        lambda g, c, d, s: J(g.expr(g.rng.choice(["int", "text", "double"]), c, d, s),
                             g.rng.choice([" IS NULL", " IS NOT NULL"])),
        lambda g, c, d, s: J("NOT (", g.predicate(c, d, s), ")"),
        lambda g, c, d, s: J("(", g.predicate(c, d, s), " AND ", g.predicate(c, d, s), ")"),
        lambda g, c, d, s: J("(", g.predicate(c, d, s), " OR ", g.predicate(c, d, s), ")"),
        lambda g, c, d, s: J(g.expr("int", c, d, s), " BETWEEN ", g.literal("int"), " AND ",
                             g.literal("int")),
        lambda g, c, d, s: J(g.expr("int", c, d, s), g.rng.choice([" IN ", " NOT IN "]),
                             f"({g.literal('int')}, {g.literal('int')})"),
        lambda g, c, d, s: J(g.expr("text", c, d, s), g.rng.choice([" LIKE 'a%'",
                                                                    " = 'a'", " <> 'b'"])),
        lambda g, c, d, s: J(g.expr("int", c, d, s), " IS DISTINCT FROM ",
                             g.expr("int", c, d, s)),
        lambda g, c, d, s: J(g.expr("double", c, d, s), f" {g.rng.choice(CMP)} 0.25"),
        lambda g, c, d, s: J(g.expr("time", c, d, s), f" {g.rng.choice(CMP)} ",
                             g.literal("time")),
        lambda g, c, d, s: ("now() > TIMESTAMP '2000-01-01 00:00:00'",),
    ]


def _text_rules():
    return [
        lambda g, c, d, s: J("upper(", g.expr("text", c, d, s), ")"),
        lambda g, c, d, s: J("lower(", g.expr("text", c, d, s), ")"),
        lambda g, c, d, s: J("(", g.expr("text", c, d, s), " || 'z')"),
        lambda g, c, d, s: J("COALESCE(", g.expr("text", c, d, s), ", 'n')"),
        lambda g, c, d, s: J("CAST(", g.expr("int", c, d, s), " AS TEXT)"),
        lambda g, c, d, s: J("CASE WHEN ", g.predicate(c, d, s), " THEN ",
                             g.expr("text", c, d, s), " ELSE ", g.expr("text", c, d, s), " END"),
        lambda g, c, d, s: J("concat(", g.expr("text", c, d, s), ", ", g.expr("text", c, d, s),
                             ")"),
        lambda g, c, d, s: J(_Name("pyfn"), "(", g.expr("text", c, d, s), ", ",
                             g.expr("int", c, d, s), ")"),
        _date_format, _split_index, _regexp_extract,
    ]


def _double_rules():
    return [
        lambda g, c, d, s: J("(", g.expr("double", c, d, s), " * 2)"),
        lambda g, c, d, s: J("CAST(", g.expr("int", c, d, s), " AS DOUBLE)"),
        lambda g, c, d, s: J("(", g.expr("double", c, d, s), " + ", g.expr("int", c, d, s), ")"),
        lambda g, c, d, s: J("abs(", g.expr("double", c, d, s), ")"),
    ]


def _time_rules():
    return [
        lambda g, c, d, s: J("(", g.expr("time", c, d, s), " + INTERVAL '1 second')"),
        lambda g, c, d, s: J("date_trunc('second', ", g.expr("time", c, d, s), ")"),
    ]


def _subquery_source(g: Generator, state) -> RefItem:
    name = g.rng.choice(STREAMS)
    window = random_window(g.rng, RELATIONS[name], lambda r: "v > 0")
    return RefItem(state.ref(name, window))


def _scalar_subquery(g: Generator, cols, state) -> tuple:
    src = _subquery_source(g, state)
    v = src.columns()[1].sql[0]
    agg = g.rng.choice(["MAX", "MIN", "SUM", "COUNT"])
    return J("(", _Sub(Select([((f"{agg}({v})",), "x", "int")], [src])), ")")


def _in_subquery(g: Generator, cols, state) -> tuple:
    src = _subquery_source(g, state)
    inner = src.columns()
    where = g.predicate(inner, 1) if g.rng.random() < 0.5 else None
    return J(g.expr("int", cols, 0), g.rng.choice([" IN (", " NOT IN ("]),
             _Sub(Select([(inner[0].sql, "x", "int")], [src], where=where)), ")")


def _exists(g: Generator, cols, state) -> tuple:
    src = _subquery_source(g, state)
    inner = src.columns()
    outer = [c for c in cols if c.kind == "int"]
    cond = J(inner[0].sql, " = ", outer[0].sql) if outer else g.predicate(inner, 1)
    return J(g.rng.choice(["EXISTS (", "NOT EXISTS ("]),
             _Sub(Select([(("1",), "x", "int")], [src], where=cond)), ")")


_SUBQUERIES = {"int": _scalar_subquery,
               "bool": lambda g, c, s: (_in_subquery if g.rng.random() < 0.5 else _exists)(
                   g, c, s)}


@dataclass
class _Name:
    """A name the round gives an object of its own (the SQL function ``fn``, the Python
    function ``pyfn``)."""
    name: str

    def render(self, mode, names):
        return names.get(self.name, self.name) if mode == "cql" else self.name


@dataclass
class _Flink:
    """One of Flink's functions: written as Flink spells it in cqgate's SQL, and as its
    documented meaning spelled in DuckDB in the oracle's."""
    cql: tuple
    oracle: tuple

    def render(self, mode, names):
        return render(self.cql if mode == "cql" else self.oracle, mode, names)


def _date_format(g, c, d, s):
    pattern, fmt = g.rng.choice([("yyyy-MM-dd HH:mm:ss", "%Y-%m-%d %H:%M:%S"),
                                 ("HH:mm:ss.SSS", "%H:%M:%S.%g"), ("yyyy-MM-dd", "%Y-%m-%d")])
    t = g.expr("time", c, d, s)
    return (_Flink(J("DATE_FORMAT(", t, f", '{pattern}')"), J("strftime(", t, f", '{fmt}')")),)


def _split_index(g, c, d, s):
    text, i = g.expr("text", c, d, s), g.expr("int", c, d, s)
    return (_Flink(J("SPLIT_INDEX(", text, ", 'b', ", i, ")"),
                   J("CASE WHEN ", i, " >= 0 THEN string_split(", text, ", 'b')[(", i,
                     ") + 1] END")),)


def _regexp_extract(g, c, d, s):
    text, group = g.expr("text", c, d, s), g.rng.choice(["0", "1", "2"])
    pattern = "'(a+)(b*)'"
    return (_Flink(J("REGEXP_EXTRACT(", text, f", {pattern}, {group})"),
                   J("CASE WHEN regexp_matches(", text, f", {pattern}) THEN regexp_extract(",
                     text, f", {pattern}, {group}) END")),)


@dataclass
class _Sub:
    """A subquery inside an expression."""
    query: Select

    def render(self, mode, names):
        return self.query.render(mode, names)


_BUILDERS = {"int": _int_rules(), "bool": _bool_rules(), "text": _text_rules(),
             "double": _double_rules(), "time": _time_rules()}


# ---------------------------------------------------------------------- shrinking
def simpler(case: Case):
    """Smaller cases to try in turn when ``case`` fails: fewer clauses, items and windows."""
    q = case.query
    inner = q.query if isinstance(q, Wrapped) else q
    rewrap = (lambda x: Wrapped(x)) if isinstance(q, Wrapped) else (lambda x: x)
    if isinstance(inner, SetOp):
        for side in (inner.left, inner.right):
            yield replace(case, query=Wrapped(side))
    if isinstance(inner, Select):
        for attr in ("where", "having"):
            if getattr(inner, attr) is not None:
                yield replace(case, query=rewrap(replace(inner, **{attr: None})))
        if inner.distinct:
            yield replace(case, query=rewrap(replace(inner, distinct=False)))
        if inner.ttl is not None:
            yield replace(case, query=rewrap(replace(inner, ttl=None)))
        if len(inner.items) > 1 and inner.distinct_on is None:
            for i in range(len(inner.items)):
                items = inner.items[:i] + inner.items[i + 1:]
                yield replace(case, query=rewrap(replace(inner, items=items)))
    for r in case.refs:
        if r.window is not None and r.window.kind not in ("none", "unbounded", "range") + TABLES:
            for w in (Window("unbounded"), Window("range", size=2_000_000)):
                refs = [replace(x, window=w) if x is r else x for x in case.refs]
                yield _with_refs(case, refs)


def _with_refs(case: Case, refs: list) -> Case:
    """``case`` reading ``refs`` (same indices and aliases) in place of its own."""
    by_index = {r.index: r for r in refs}

    def fix(node):
        if isinstance(node, RefItem):
            return RefItem(by_index[node.ref.index])
        if isinstance(node, tuple):
            return tuple(fix(p) for p in node)
        if isinstance(node, list):
            return [fix(x) for x in node]
        if hasattr(node, "__dataclass_fields__") and not isinstance(node, (Ref, Window)):
            return replace(node, **{k: fix(getattr(node, k))
                                    for k in node.__dataclass_fields__})
        return node

    return Case(fix(case.query), refs, case.check, case.features)
