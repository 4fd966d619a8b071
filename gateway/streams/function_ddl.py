"""CREATE FUNCTION … LANGUAGE python and DROP FUNCTION of a Python function: read into a
``PythonFunction`` (42P13 where the text cannot be one), a superuser's to create, its owner's to
drop; the server's Python functions (``gateway/tables/python_functions.py``) keep them."""
from __future__ import annotations

import keyword

import duckdb
from sqlglot import exp

from executor.plan import FunctionError, PythonFunction

from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.tables.python_functions import LANGUAGES, PythonFunctions


def definition(ast: exp.Create) -> PythonFunction:
    """The PythonFunction ``CREATE FUNCTION f(x TEXT) RETURNS INT LANGUAGE python AS $$ … $$``
    defines; 42P13 (PostgreSQL's invalid function definition) when it cannot be one."""
    udf = ast.this
    table = udf.this
    if table.db and table.db.lower() != "public":
        raise E.FeatureNotSupported("a Python function lives in schema public",
                                    hint="Create it without a schema.")
    name = table.name.lower()
    params, types = [], []
    for i, p in enumerate(udf.expressions, start=1):
        kind = p.args.get("kind") if isinstance(p, exp.ColumnDef) else None
        pname, ptype = (p.name, kind) if kind is not None else \
            (f"_p{i}", exp.DataType.build(p.name, dialect="postgres"))
        if not pname.isidentifier() or keyword.iskeyword(pname):
            raise _invalid(f'parameter name "{pname}" is not a Python name')
        params.append(pname)
        types.append(_duck_type(ptype))
    props = {type(p): p for p in (ast.args.get("properties") or exp.Properties()).expressions}
    returns = props.get(exp.ReturnsProperty)
    if returns is None or returns.args.get("is_table") or \
            not isinstance(returns.this, exp.DataType):
        raise _invalid("a Python function returns one value: name its type (RETURNS int)")
    stability = props.get(exp.StabilityProperty)
    body = ast.args.get("expression")
    if not isinstance(body, (exp.Literal, exp.Heredoc)):
        raise _invalid("a Python function's body is its text: AS $$ … $$")
    fn = PythonFunction(name, tuple(params), tuple(types), _duck_type(returns.this),
                        body=body.name, strict=exp.StrictProperty in props,
                        volatile=stability is not None and stability.name.upper() == "VOLATILE")
    try:
        fn.check()
    except FunctionError as e:
        raise _invalid(str(e)) from None
    return fn


def _duck_type(t: exp.DataType) -> str:
    """A type as DuckDB names it (INTEGER for int4), as EXPLAIN shows it."""
    try:
        return str(duckdb.sqltype(t.sql("duckdb")))
    except duckdb.Error:
        raise _invalid(f'type "{t.sql("postgres")}" does not exist') from None


def _invalid(message: str) -> E.PgError:
    return E.PgError(message, sqlstate="42P13")


def create(ctx, tree: exp.Create, params) -> Done:
    """CREATE [OR REPLACE] FUNCTION … LANGUAGE python: a superuser's, as an untrusted
    language's functions are in PostgreSQL (its body runs in the server)."""
    language = next(p.this.name for p in tree.args["properties"].expressions
                    if isinstance(p, exp.LanguageProperty))
    access.require_superuser(ctx, f"create functions in language {language}")
    ctx.services.store.functions.create(definition(tree), ctx.user,
                                        bool(tree.args.get("replace")))
    return Done("CREATE FUNCTION")


def drop(ctx, tree: exp.Drop, params) -> Done:
    """DROP FUNCTION f of a Python function: its owner's or a superuser's."""
    functions = ctx.services.store.functions
    for t in tree.args.get("tables") or ():
        fn = functions.get(t.name)
        if fn is None:
            if tree.args.get("exists"):
                continue
            raise E.UndefinedFunction(f"function {t.name} does not exist")
        owner = functions.owners.get(fn.name)
        if owner is not None and not ctx.services.roles.has_privs_of(ctx.user, owner):
            raise E.InsufficientPrivilege(f"must be owner of function {fn.name}")
        functions.drop(fn.name)
    return Done("DROP FUNCTION")


def is_python(tree: exp.Expression, functions: "PythonFunctions") -> bool:
    """Whether ``tree`` creates a Python function or drops one (these statements run here,
    not in DuckDB)."""
    kind = (tree.args.get("kind") or "").upper() if isinstance(tree, (exp.Create, exp.Drop)) \
        else ""
    if kind != "FUNCTION":
        return False
    if isinstance(tree, exp.Create):
        return any(isinstance(p, exp.LanguageProperty) and p.this.name.lower() in LANGUAGES
                   for p in (tree.args.get("properties") or exp.Properties()).expressions)
    return any(functions.get(t.name) is not None for t in tree.args.get("tables") or ())
