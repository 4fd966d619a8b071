"""Correct or refused, for expressions: what a continuous query cannot compute with its snapshot
meaning is refused at plan time (0A000, 42803), now() is the plan's instant, DuckDB binds the rest.

Window functions and subqueries in expressions are refused where the algebra's operators would
compute them (a SELECT that has them is planned as Σ first, ``snapshot_query``, which allows
them), and volatile functions everywhere (random(): a continuous answer must be a function of
its inputs); now() and its kin
are the instant the query is planned, as PostgreSQL holds now() still for a statement; an
aggregate where SQL allows none (WHERE, ON, GROUP BY) is 42803. DuckDB, configured as the back
end's, binds each expression before it runs, so a function that does not exist is 42883 at
DECLARE, not an error at the first row.

>>> import sqlglot, dialect
>>> e = sqlglot.parse_one("price > (SELECT AVG(price) FROM b)", read="cql")
>>> try:
...     checked(e, None)
... except Exception as err:
...     print(err.sqlstate, err)
0A000 subqueries in expressions are not supported in continuous queries yet
"""
from __future__ import annotations

import datetime as dt

import duckdb
import sqlglot
from sqlglot import exp

from executor import duck, python_functions

from ..errors import (DatatypeMismatch, GroupingError, InvalidTextRepresentation, PlanError,
                      UndefinedFunction, Unsupported, written_at)

# PostgreSQL's volatile functions DuckDB does not have (DuckDB's own come from its catalog)
_PG_VOLATILE = frozenset({"clock_timestamp", "timeofday"})
# functions PostgreSQL evaluates once per statement: the instant the query is planned
_NOW = {exp.CurrentTimestamp: "TIMESTAMPTZ", exp.CurrentDate: "DATE",
        exp.CurrentTime: "TIMETZ", exp.Localtimestamp: "TIMESTAMP"}
_NOW_NAMES = {"now": "TIMESTAMPTZ", "transaction_timestamp": "TIMESTAMPTZ",
              "statement_timestamp": "TIMESTAMPTZ", "get_current_timestamp": "TIMESTAMPTZ",
              "current_localtimestamp": "TIMESTAMP", "today": "DATE",
              "get_current_time": "TIMETZ"}
# where sqlglot's PostgreSQL spelling of a call is not the name it was called by
_SHOWN = {exp.CountIf: "count_if", exp.Median: "median"}
_WINDOW_HINT = ("A window function's rows depend on the other rows of each instant's "
                "snapshot; for the latest value per key, GROUP BY the key with MAX(...), or "
                "SET cq.mode = snapshot for a finite answer.")


def _head(node: exp.Expression) -> exp.Expression:
    """The call ``node`` with NULLs for its arguments: enough to spell its name, whatever
    its arguments hold (a subquery over a stream has no DuckDB spelling)."""
    def blank(v):
        if isinstance(v, exp.Expression):
            return exp.null()
        return [blank(x) for x in v] if isinstance(v, list) else v
    return type(node)(**{k: blank(v) for k, v in node.args.items()})


def call_name(node: exp.Expression) -> str:
    """A function call's name as DuckDB spells it (LISTAGG for string_agg)."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return _head(node).sql("duckdb").split("(", 1)[0].strip().lower()


def shown_name(node: exp.Expression) -> str:
    """A function call's name as PostgreSQL spells it, for messages (string_agg)."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return _SHOWN.get(type(node)) or _head(node).sql("cql").split("(", 1)[0].strip().lower()


def is_aggregate_call(node: exp.Expression, user_aggregate) -> bool:
    """Whether ``node`` calls an aggregate: one of sqlglot's, DuckDB's or a user's."""
    if isinstance(node, (exp.AggFunc, exp.WithinGroup)):
        return True
    if not isinstance(node, exp.Func) or isinstance(node, (exp.Window, exp.Filter)):
        return False
    name = call_name(node)
    return name in duck.aggregate_names() or bool(user_aggregate(name))


def inlined(e: exp.Expression, sql_function, depth: int = 0,
            python_function=lambda name: None) -> exp.Expression:
    """``e`` with each call of a user's SQL function replaced by its body, the arguments in
    place of the parameters (PostgreSQL inlines SQL functions too): what a table query can
    call, a continuous query computes. ``sql_function(name, schema)``: (parameter names,
    body as DuckDB SQL) or None; ``schema.f(…)`` is a Dot over the call. A call of a Python
    function (``python_function(name)``: its PythonFunction, or None) becomes a call of its
    DuckDB name; a volatile one is refused, as volatile built-ins are."""
    def expand(whole):
        node, schema = whole, None
        if isinstance(whole, exp.Dot) and isinstance(whole.expression, exp.Anonymous) \
                and isinstance(whole.this, (exp.Identifier, exp.Column)):
            schema, node = whole.this.name, whole.expression
        elif not isinstance(node, exp.Anonymous) or (isinstance(node.parent, exp.Dot)
                                                     and node.parent.expression is node):
            return whole            # not a call; or one of another schema's, not a SQL function
        found = sql_function(node.name, schema)
        if found is None:
            fn = python_function(node.name) if schema in (None, "public") else None
            if fn is not None and fn.volatile:
                raise Unsupported(f"{node.name}() is volatile: a continuous query's answer "
                                  "must be a function of its inputs", position=written_at(node),
                                  hint="Declare the function IMMUTABLE if its value depends on "
                                       "its arguments only, or read it from a table query.")
            call = python_call(node, fn, lambda a: inlined(a, sql_function, depth,
                                                           python_function))
            return whole if call is node else call
        params, body = found
        if len(params) != len(node.expressions):
            return whole                    # no such overload: DuckDB's binding says so
        if depth > 16:
            raise Unsupported(f"function {node.name}() calls itself too deeply to inline",
                              position=written_at(node))
        args = {p.lower(): a for p, a in zip(params, node.expressions)}
        tree = sqlglot.parse_one(body, read="duckdb").transform(
            lambda n: exp.Paren(this=args[n.name.lower()].copy())
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in args else n)
        return exp.Paren(this=inlined(tree, sql_function, depth + 1, python_function))
    return e.transform(expand)


def python_call(node: exp.Anonymous, fn, arguments) -> exp.Expression:
    """A call of Python function ``fn`` (a PythonFunction; None: not one) as a call of its
    DuckDB name, each argument through ``arguments`` (calls inside it are renamed there:
    a replaced node's children are not walked again); ``node`` itself when it is no call of
    ``fn`` (no such overload: DuckDB's binding says so)."""
    if fn is None or len(fn.params) != len(node.expressions):
        return node
    return exp.Anonymous(this=fn.duck_name,
                         expressions=[arguments(a.copy()) for a in node.expressions])


def checked(e: exp.Expression, now_us: int | None, *, clause: str | None = None,
            user_aggregate=lambda name: False, queries: bool = False) -> exp.Expression:
    """``e`` with now() and its kin bound to ``now_us`` (Unix µs; None: the wall clock
    now), after refusing what a continuous query cannot compute; ``clause``: where ``e``
    stands when SQL allows no aggregate there (WHERE, ON, GROUP BY); ``queries``: window
    functions and subqueries are allowed (Σ computes them)."""
    for node in e.walk():
        if not queries:
            _refuse_query(node)
        _refuse_volatile(node)
        if clause is not None and is_aggregate_call(node, user_aggregate):
            raise GroupingError(f"aggregate functions are not allowed in {clause}",
                                position=written_at(node),
                                hint="Filter groups with HAVING, or aggregate in a query in "
                                     "FROM and use its result here.")
    return e.transform(lambda n: _bound_now(n, now_us))


def refuse_unsupported(e: exp.Expression) -> None:
    """Refuse window functions, subqueries and volatile functions anywhere in ``e`` (before
    its names are resolved: a subquery's own aliases are not in the outer scope)."""
    for node in e.walk():
        _refuse_query(node)
        _refuse_volatile(node)


def _refuse_query(node: exp.Expression) -> None:
    if isinstance(node, exp.Window):
        raise Unsupported("window functions are not supported in continuous queries yet: "
                          + node.sql("cql")[:80], position=written_at(node), hint=_WINDOW_HINT)
    if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
        raise Unsupported("subqueries in expressions are not supported in continuous queries "
                          "yet", position=written_at(node),
                          hint="Join the stream or table the subquery reads instead, or SET "
                               "cq.mode = snapshot for a finite answer.")


def _refuse_volatile(node: exp.Expression) -> None:
    if isinstance(node, (exp.Rand, exp.Uuid)) or (
            isinstance(node, exp.Func) and call_name(node) in _volatile()):
        raise Unsupported(f"{shown_name(node)}() is volatile: a continuous query's answer must "
                          "be a function of its inputs at each instant",
                          position=written_at(node),
                          hint="Compute the value in the source, or join a table that holds "
                               "it.")


def _volatile() -> frozenset:
    return duck.volatile_names() | _PG_VOLATILE


def _now_type(node: exp.Expression) -> str | None:
    """The type of the instant ``node`` reads (now(), current_date …), or None."""
    if isinstance(node, exp.Anonymous):
        return None if node.expressions else _NOW_NAMES.get(node.name.lower())
    return _NOW.get(type(node))


def _bound_now(node: exp.Expression, now_us: int | None) -> exp.Expression:
    to = _now_type(node)
    if to is None:
        return node
    us = now_us if now_us is not None else dt.datetime.now(dt.timezone.utc).timestamp() * 1e6
    at = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(us))
    instant = exp.cast(exp.Literal.string(at.isoformat(sep=" ")), "TIMESTAMPTZ")
    return instant if to == "TIMESTAMPTZ" else exp.cast(instant, to)


def has_now(e: exp.Expression) -> bool:
    """Whether ``e`` reads the instant it is planned at (a plan to make anew each time)."""
    return any(_now_type(n) is not None for n in e.walk())


# ---------------------------------------------------------------------- DuckDB's binding
_NO_FUNCTION = ("No function matches the given name and argument types. You might need to add "
                "explicit type casts.")


def bound_type(sql: str, columns: dict, written: exp.Expression, function_exists) -> str:
    """DuckDB's type for the algebra expression ``sql`` over ``columns`` ({name: DuckDB
    type}, UNKNOWN for a NULL whose type nothing says); a function DuckDB lacks is 42883
    (0A000 when ``function_exists(name)`` says a table query could call it), arguments no
    overload takes are 42883, other binding errors 42804. ``written`` is the expression as
    the user wrote it, for positions."""
    try:
        return duck.expression_type(sql, tuple(sorted(columns.items())))
    except duckdb.Error as e:
        raise binding_error(e, written, function_exists) from None


def binding_error(e: duckdb.Error, written: exp.Expression, function_exists) -> PlanError:
    text = python_functions.shown_names(str(e).split("\n")[0])
    message = text.split(": ", 1)[-1] if ": " in text else text
    calls = [n for n in written.walk() if isinstance(n, exp.Func)]
    if isinstance(e, duckdb.CatalogException) and "does not exist" in message:
        name = next((call_name(n) for n in calls if f"name {call_name(n)} " in message.lower()),
                    None) or message.split("name ", 1)[-1].split(" ")[0].lower()
        node = next((n for n in calls if call_name(n) == name), written)
        if function_exists(name):
            return Unsupported(f"function {name}() cannot be called in a continuous query",
                               position=written_at(node),
                               hint="Continuous queries run in the back end, which has "
                                    "DuckDB's built-in functions; compute the value in a "
                                    "table and join it.")
        return UndefinedFunction(f"function {name}() does not exist", position=written_at(node),
                                 hint=_NO_FUNCTION)
    if "No function matches" in message:
        name = message.split("'", 2)[1].split("(", 1)[0].lower() if "'" in message else ""
        node = next((n for n in calls if call_name(n) == name), written)
        return UndefinedFunction(f"function {message.split(chr(39), 2)[1]} does not exist"
                                 if "'" in message else message, position=written_at(node),
                                 hint=_NO_FUNCTION)
    if isinstance(e, duckdb.ConversionException):
        return InvalidTextRepresentation(message, position=written_at(written))
    return DatatypeMismatch(message, position=written_at(written))
