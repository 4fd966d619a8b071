"""Translate one PostgreSQL statement (already split) into DuckDB SQL with sqlglot.

Catalog names (``pg_catalog.pg_class``, ``format_type(...)``, ``::regclass``, ``OPERATOR(
pg_catalog.~)``) are pointed at the emulated catalog in ``pgcat``; session values
(``current_setting``, ``current_user``) become ``getvariable('cq_…')`` placeholders that the
session replaces with literals in the parse tree when it runs the statement, so translations can
be cached.
The result also says what the statement is (command tag, whether it returns rows);
``infer_params`` types its parameters from where they appear.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

import dialect  # noqa: F401  (registers the "cql" dialect)

from dialect.expressions import is_stream_syntax
from dialect.names import pg_column_name, type_name

from gateway.tables import pg_catalog
from gateway.tables.python_functions import LANGUAGES as PYTHON_LANGUAGES
from gateway.pgwire import types as T
from gateway.pgwire.errors import PgError, SyntaxError_, FeatureNotSupported, UndefinedFunction

CAT = f"{pg_catalog.CATALOG}.main"
VERSION = (f"PostgreSQL {pg_catalog.SERVER_VERSION} (cqgate) on x86_64-pc-linux-gnu, "
           "a continuous-query gateway over DuckDB")


@dataclass
class Translated:
    duck_sql: str
    tag: str                    # command tag prefix: SELECT, INSERT, CREATE TABLE, ...
    returns_rows: bool
    params: dict = field(default_factory=dict)   # $n -> pg oid inferred (0 = unknown)
    tables: tuple = ()          # (schema|None, name, alias) of user relations read
    projections: tuple = ()     # (output name, source alias|None, source column|None) | "*"
    has_set_config: bool = False
    catalog: bool = False       # reads the emulated pg_catalog
    stream: bool = False        # stream syntax: the planner, not DuckDB, runs it
    ast: exp.Expression | None = None      # rewritten for DuckDB
    source: exp.Expression | None = None   # as the client wrote it
    catalog_relations: frozenset = frozenset()   # the pg_catalog relations it reads
    catalog_reads: frozenset = frozenset()       # the emulated catalog's relations it reads


_TAGS = {
    exp.Select: "SELECT", exp.Union: "SELECT", exp.Intersect: "SELECT", exp.Except: "SELECT",
    exp.Values: "SELECT", exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE",
    exp.Merge: "MERGE",
}


def _tag_for(node: exp.Expression) -> str:
    for cls, tag in _TAGS.items():
        if isinstance(node, cls):
            return tag
    if isinstance(node, exp.Create):
        kind = (node.args.get("kind") or "").upper()
        return "CREATE " + ("TABLE" if kind == "TABLE" and node.expression is not None
                            else kind)
    if isinstance(node, exp.Drop):
        return "DROP " + (node.args.get("kind") or "").upper()
    if isinstance(node, exp.Alter):
        return "ALTER " + (node.args.get("kind") or "TABLE").upper()
    if isinstance(node, exp.TruncateTable):
        return "TRUNCATE TABLE"
    if isinstance(node, exp.Command):
        return node.this.upper()
    return node.key.upper()


# --------------------------------------------------------------------------- rewrites
_SPECIAL_CASTS = {"regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole",
                  "regoper"}
_TYPE_REPLACEMENTS = {
    "name": "VARCHAR", "char": "VARCHAR", '"char"': "VARCHAR", "bpchar": "VARCHAR",
    "int2vector": "SMALLINT[]", "oidvector": "UINTEGER[]", "xid": "BIGINT", "cid": "BIGINT",
    "tid": "VARCHAR", "regoperator": "VARCHAR", "jsonb": "JSON", "aclitem": "VARCHAR",
    "pg_node_tree": "VARCHAR", "text": "VARCHAR", "anyarray": "VARCHAR[]", "money": "DECIMAL(18,2)",
}


def _macro(name: str, *args) -> exp.Expression:
    return exp.Anonymous(this=f"{CAT}.{name}", expressions=list(args))


_NAMES_OF = {"regclass": ("cq_regclass_oid", "cq_regclass_name"),
             "regtype": ("cq_regtype_oid", "cq_regtype_name")}


def _array_literal(text: str) -> exp.Expression:
    """PostgreSQL's array text ``'{r,p,""}'`` as a list of its strings."""
    return exp.Array(expressions=[exp.Null() if v is None else exp.Literal.string(v)
                                  for v in T.parse_array_text(text, str)])


def _is_array_text(node) -> bool:
    return isinstance(node, exp.Literal) and node.is_string and node.name.startswith("{")


def _rewrite_any(node: exp.Any, state: dict) -> exp.Expression:
    """``relkind = ANY('{r,p}')``: the literal is an array of the other side's type."""
    inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
    if _is_array_text(inner):
        inner.replace(_array_literal(inner.name))
    return node


def _rewrite_cast(node: exp.Cast) -> exp.Expression:
    name = type_name(node.to)
    arg = node.this
    if name in ("oid", "uint", "int4", "int8", "integer", "bigint") and isinstance(arg, exp.Cast) \
            and type_name(arg.to) == "regclass":
        # (expr)::regclass::oid is the OID of the relation expr names (or of its digits)
        arg = _macro("cq_regclass_oid", arg.this)
        node.set("this", arg)
    elif name in ("oid", "uint") and isinstance(arg, exp.Cast) and \
            type_name(arg.to) in ("regproc", "regprocedure") and isinstance(arg.this, exp.Literal):
        arg = _macro("cq_regproc_oid", arg.this)            # psql's \sf name
        node.set("this", arg)
    if node.to.this == exp.DataType.Type.ARRAY and _is_array_text(arg):
        arg = arg.replace(_array_literal(arg.name))       # '{a,b}'::text[]
    if name in ("text", "varchar", "name") and isinstance(arg, exp.Cast) \
            and type_name(arg.to) in _NAMES_OF and isinstance(arg.this, exp.Literal):
        # 'int8'::regtype::text is the type's name, not its OID printed as text
        to_oid, to_name = _NAMES_OF[type_name(arg.to)]
        node.set("this", _macro(to_name, _macro(to_oid, arg.this)))
        return node
    if name in _SPECIAL_CASTS:
        literal = isinstance(arg, (exp.Literal, exp.Parameter, exp.Placeholder)) and (
            not isinstance(arg, exp.Literal) or arg.is_string)
        if name == "regclass":
            return _macro("cq_regclass_oid" if literal else "cq_regclass_name", arg)
        if name == "regtype":
            return _macro("cq_regtype_oid" if literal else "cq_regtype_name", arg)
        if name == "regnamespace":
            return _macro("cq_regnamespace_name", arg) if not literal else arg
        return _macro("cq_regproc_name", arg)
    if name == "bytea" and isinstance(arg, exp.Literal) and arg.is_string \
            and arg.name.startswith("\\x"):
        return exp.Unhex(this=exp.Literal.string(arg.name[2:]))
    repl = _TYPE_REPLACEMENTS.get(name)
    if repl is not None and node.to.this in (exp.DataType.Type.USERDEFINED, exp.DataType.Type.NAME,
                                             exp.DataType.Type.JSONB, exp.DataType.Type.CHAR):
        node.set("to", exp.DataType.build(repl, dialect="duckdb"))
    elif node.to.find(exp.DataType) is not None and any(
            d.this == exp.DataType.Type.USERDEFINED for d in node.to.find_all(exp.DataType)):
        t = T.lookup_type_name(node.to.sql("postgres"))
        if t is not None:
            node.set("to", exp.DataType.build(t.duckdb, dialect="duckdb"))
    return node


_OPERATORS = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "!~": lambda a, b: exp.Not(this=exp.RegexpLike(this=a, expression=b)),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~*": lambda a, b: exp.Not(this=exp.RegexpILike(this=a, expression=b)),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
    "!=": lambda a, b: exp.NEQ(this=a, expression=b),
    "<": lambda a, b: exp.LT(this=a, expression=b),
    ">": lambda a, b: exp.GT(this=a, expression=b),
    "<=": lambda a, b: exp.LTE(this=a, expression=b),
    ">=": lambda a, b: exp.GTE(this=a, expression=b),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "!~~": lambda a, b: exp.Not(this=exp.Like(this=a, expression=b)),
    "||": lambda a, b: exp.DPipe(this=a, expression=b),
}


def _rewrite_operator(node: exp.Operator) -> exp.Expression:
    op = str(node.args.get("operator") or "").replace("pg_catalog.", "").strip()
    build = _OPERATORS.get(op)
    if build is None:
        raise FeatureNotSupported(f"operator does not exist: OPERATOR({op})")
    return build(*(a.this if isinstance(a, exp.Collate) else a
                   for a in (node.this, node.expression)))


def _var(name: str) -> exp.Expression:
    return exp.Anonymous(this="getvariable", expressions=[exp.Literal.string(name)])


SETTING_PREFIX = "cq_setting_"
SIGNAL_FUNCTION = "cq_signal_backend"      # gateway/sessions/backend_signals.py
SIGNALS = {"pg_cancel_backend": "cancel", "pg_terminate_backend": "terminate"}


def setting_variable(name: str) -> str:
    return SETTING_PREFIX + name.lower()


def _rewrite_anonymous(node: exp.Anonymous, state: dict) -> exp.Expression:
    name = node.name.lower()
    args = node.expressions
    if name in ("generate_subscripts", "array_lower", "array_upper") and args and \
            _vector(args[0], state):
        # a vector's subscripts run from 0 (the parentheses keep this from applying twice)
        call = exp.Anonymous(this=name, expressions=[exp.Paren(this=args[0]), *args[1:]])
        return exp.Paren(this=exp.Sub(this=call, expression=exp.Literal.number(1)))
    if name in pg_catalog.FUNCTIONS:
        return _macro(name, *args)
    if name == "pg_partition_ancestors":     # in a select list: no rows, no partitions
        return exp.Explode(this=exp.Cast(this=exp.Array(expressions=[]),
                                         to=exp.DataType.build("UINTEGER[]", dialect="duckdb")))
    if name == "_pg_expandarray":
        return exp.Unnest(expressions=[_macro("cq_expandarray", *args)])
    if name in ("json_build_object", "jsonb_build_object"):
        return exp.Anonymous(this="json_object", expressions=args)
    if name == "version":
        return exp.Literal.string(VERSION)
    if name == "current_setting" and args:
        if isinstance(args[0], exp.Literal):
            return _var(setting_variable(args[0].name))
        return _macro("cq_server_setting", args[0])
    if name == "to_regtype":
        return _macro("cq_regtype_oid", *args)
    if name == "to_regclass":
        return _macro("cq_regclass_oid", *args)
    if name == "pg_backend_pid":
        return _var("cq_pid")
    if name in SIGNALS and args:
        # the caller's pid is bound by the session, so the signal knows whose it is
        return exp.Anonymous(this=SIGNAL_FUNCTION, expressions=[
            args[0], exp.Literal.string(SIGNALS[name]),
            exp.Cast(this=_var("cq_pid"), to=exp.DataType.build("BIGINT"))])
    if name in ("inet_server_addr", "inet_client_addr"):
        return exp.Null()
    return node


def _rewrite(node: exp.Expression, state: dict) -> exp.Expression:
    new = _rewrite_one(node, state)
    if new is not node:
        # transform() does not descend into a replacement; its arguments still need rewriting.
        new = new.transform(_rewrite, state)
    return new


def _rewrite_table(node: exp.Table, state: dict) -> exp.Expression:
    db = node.args.get("db")
    name = node.name.lower()
    dbname = db.name.lower() if db is not None else None
    unqualified = node.args.get("catalog") is None
    if name in pg_catalog.RELATIONS and dbname in (None, "pg_catalog") and unqualified:
        _to_catalog(node, name, state)
    elif dbname == "information_schema" and name in pg_catalog.INFORMATION_SCHEMA \
            and unqualified:
        _to_catalog(node, f"cq_is_{name}", state)
        if not node.alias:          # columns qualified by the view's own name still resolve
            node.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    elif isinstance(node.this, exp.Func) and node.this.name.lower() in \
            pg_catalog.TABLE_FUNCTIONS and dbname in (None, "pg_catalog"):
        # its rows (WITH ORDINALITY's number included) come from a catalog relation
        node.set("ordinality", None)
        _to_catalog(node, pg_catalog.TABLE_FUNCTIONS[node.this.name.lower()], state)
    elif isinstance(node.this, _SCALARS_IN_FROM):
        # a scalar function in FROM is one row of one column named by the alias (Grafana's
        # string_to_array(current_setting('search_path'), ',') s)
        alias = node.alias or node.this.sql_name().lower()
        return exp.select(exp.alias_(node.this.copy(), alias, quoted=True)).subquery(alias)
    elif isinstance(node.this, exp.Func):
        if dbname in ("pg_catalog", "information_schema"):
            node.set("db", None)       # pg_catalog.generate_series(...) and friends
    else:
        state["tables"].append((dbname, node.name, node.alias_or_name))
    return node


_SCALARS_IN_FROM = (exp.StringToArray, exp.Split)


def _to_catalog(node: exp.Table, name: str, state: dict) -> None:
    """Point a table reference at the emulated catalog's relation ``name``."""
    state["catalog"] = True
    state["catalog_reads"].add(name)
    node.set("db", exp.to_identifier("main"))
    node.set("catalog", exp.to_identifier(pg_catalog.CATALOG))
    node.set("this", exp.to_identifier(name))


def _rewrite_dot(node: exp.Dot, state: dict) -> exp.Expression:
    if isinstance(node.this, exp.Identifier) and isinstance(node.expression, exp.Func) \
            and node.this.name.lower() in ("pg_catalog", "information_schema"):
        return node.expression
    return node


def _rewrite_call(node: exp.Anonymous, state: dict) -> exp.Expression:
    if node.name.lower() == "set_config":
        state["set_config"] = True
    return _rewrite_anonymous(node, state)


def _rewrite_column(node: exp.Column, state: dict) -> exp.Expression:
    db = node.args.get("db")
    if db is not None and db.name.lower() == "pg_catalog":
        node.set("db", None)       # pg_catalog.pg_class.relname: the table name alone resolves
    elif not node.table and not node.this.quoted and node.name.lower() in (
            "session_user", "current_user", "user"):
        return _var("cq_user")
    return node


# The catalog's int2vector (22) and oidvector (30) columns: lists in DuckDB, sent with their
# own type (psqlODBC reads "1 2" into a fixed array by that type, and crashes on "{1,2}"), and
# subscripted from 0, as PostgreSQL's vectors are
VECTOR_COLUMNS = {"indkey": 22, "indoption": 22, "indclass": 30, "indcollation": 30,
                  "proargtypes": 30}
# the catalog relation each such column, and each regproc column below, belongs to
_OWNERS = {"indkey": "pg_index", "indoption": "pg_index", "indclass": "pg_index",
           "indcollation": "pg_index", "proargtypes": "pg_proc",
           **{c: "pg_type" for c in ("typinput", "typoutput", "typreceive", "typsend",
                                     "typmodin", "typmodout", "typanalyze", "typsubscript")}}


_OWNER_RELATIONS = frozenset(_OWNERS.values())


def vector_columns(relations: frozenset) -> dict:
    """{column name: 22 or 30} of the vector columns of the catalog ``relations`` read."""
    return {name: oid for name, oid in VECTOR_COLUMNS.items() if _OWNERS[name] in relations}


def _catalog_aliases(ast: exp.Expression) -> dict:
    """{alias or name: relation} of the pg_catalog relations a statement reads."""
    out = {}
    for t in ast.find_all(exp.Table):
        db = t.args.get("db")
        if isinstance(t.this, exp.Identifier) and t.name.lower() in _OWNER_RELATIONS \
                and (db is None or db.name.lower() == "pg_catalog") \
                and t.args.get("catalog") is None:
            out[t.alias_or_name.lower()] = t.name.lower()
    return out


def _catalog_column(node, state: dict) -> bool:
    """Whether ``node`` is a column of the pg_catalog relation its name belongs to (a user
    table's column of the same name keeps its own meaning)."""
    if not isinstance(node, exp.Column) or node.name.lower() not in _OWNERS:
        return False
    owner, aliases = _OWNERS[node.name.lower()], state["catalog_aliases"]
    if node.table:
        return aliases.get(node.table.lower()) == owner
    return owner in aliases.values() and not state["user_relations"]


def _vector(node, state: dict) -> bool:
    return _catalog_column(node, state) and node.name.lower() in VECTOR_COLUMNS


def _rewrite_bracket(node: exp.Bracket, state: dict) -> exp.Expression:
    """``indkey[0]`` is a vector's first element: DuckDB's lists count from 1."""
    if _vector(node.this, state) and len(node.expressions) == 1 and \
            not isinstance(node.expressions[0], exp.Slice):
        node.set("expressions", [exp.Add(this=exp.Paren(this=node.expressions[0]),
                                         expression=exp.Literal.number(1))])
    return node


_FORMAT_SPEC = re.compile(r"%(?:(\d+)\$)?([sIL%])")
# what each of format()'s conversions makes of its argument
_FORMAT_CONVERSIONS = {
    "s": lambda a: exp.func("coalesce", exp.cast(a, "VARCHAR"), exp.Literal.string("")),
    "I": lambda a: _macro("quote_ident", a),
    "L": lambda a: _macro("quote_nullable", a),
}


def _rewrite_format(node: exp.Format, state: dict) -> exp.Expression:
    """PostgreSQL's ``format('%I.%I', a, b)`` (%s, %I, %L, %%, positions as ``%1$s``) as a
    concatenation; DuckDB's own format() reads ``{}``."""
    fmt, args = node.this, node.expressions
    if not (isinstance(fmt, exp.Literal) and fmt.is_string and "%" in fmt.name):
        return node                 # DuckDB's own format('{}', …)
    parts, pos, nxt = [], 0, 0
    for m in _FORMAT_SPEC.finditer(fmt.name):
        if "%" in fmt.name[pos:m.start()]:
            raise PgError("unrecognized format() type specifier", sqlstate="22023",
                          hint="For a single \"%\" use \"%%\".")
        parts.append(exp.Literal.string(fmt.name[pos:m.start()]))
        pos = m.end()
        if m.group(2) == "%":
            parts.append(exp.Literal.string("%"))
            continue
        k = int(m.group(1)) - 1 if m.group(1) else nxt
        nxt = k + 1
        if k >= len(args):
            raise PgError("too few arguments for format()", sqlstate="22023")
        parts.append(_FORMAT_CONVERSIONS[m.group(2)](args[k].copy()))
    if "%" in fmt.name[pos:]:
        raise PgError("unrecognized format() type specifier", sqlstate="22023",
                      hint="For a single \"%\" use \"%%\".")
    parts.append(exp.Literal.string(fmt.name[pos:]))
    return exp.Paren(this=exp.func("concat", *parts))


# pg_type's and pg_proc's regproc columns hold a function's name here; PostgreSQL compares
# them with 0 (no function), which prints as '-'
_REGPROC_COLUMNS = {c for c, owner in _OWNERS.items() if owner == "pg_type"}


def _rewrite_regproc_zero(node: exp.Expression, state: dict) -> exp.Expression:
    """``typreceive != 0`` (ADBC, pgjdbc) compares the name with '-', the text of 0."""
    for col, other in ((node.this, node.expression), (node.expression, node.this)):
        if _catalog_column(col, state) and col.name.lower() in _REGPROC_COLUMNS \
                and isinstance(other, exp.Literal) and not other.is_string \
                and other.name == "0":
            other.replace(exp.Literal.string("-"))
    return node


def _rewrite_float(node: exp.DataType) -> exp.Expression:
    """PostgreSQL's FLOAT(p) (as SQLAlchemy writes it): real for p up to 24 bits, double
    precision up to 53."""
    params = node.expressions
    if node.this not in (exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT) or \
            len(params) != 1 or not isinstance(params[0].this, exp.Literal):
        return node
    p = int(params[0].this.name)
    if not 1 <= p <= 53:
        bound = "at least 1 bit" if p < 1 else "less than 54 bits"
        raise PgError(f"precision for type float must be {bound}", sqlstate="22023")
    return exp.DataType.build("REAL" if p <= 24 else "DOUBLE")


_REWRITES = {
    exp.DataType: lambda node, state: _rewrite_float(node),
    exp.Table: _rewrite_table,
    exp.EQ: _rewrite_regproc_zero,
    exp.Bracket: _rewrite_bracket,
    exp.Any: _rewrite_any,
    exp.Format: _rewrite_format,
    exp.NEQ: _rewrite_regproc_zero,
    exp.Dot: _rewrite_dot,
    exp.Anonymous: _rewrite_call,
    exp.Cast: lambda node, state: _rewrite_cast(node),
    exp.Operator: lambda node, state: _rewrite_operator(node),
    exp.Collate: lambda node, state: node.this,
    exp.CurrentUser: lambda node, state: _var("cq_user"),
    exp.SessionUser: lambda node, state: _var("cq_user"),
    exp.Column: _rewrite_column,
    exp.CurrentSchema: lambda node, state: exp.Literal.string("public"),
    exp.CurrentSchemas: lambda node, state: _macro("current_schemas", node.this),
    exp.CurrentVersion: lambda node, state: exp.Literal.string(VERSION),
    exp.CurrentCatalog: lambda node, state: exp.Anonymous(this="current_database",
                                                         expressions=[]),
}


def _rewrite_one(node: exp.Expression, state: dict) -> exp.Expression:
    fn = _REWRITES.get(type(node))
    return node if fn is None else fn(node, state)


# --------------------------------------------------------------------------- output names
def _name_outputs(select: exp.Expression) -> None:
    """Alias every unaliased output column of a SELECT with PostgreSQL's name for it."""
    if isinstance(select, (exp.Union, exp.Intersect, exp.Except)):
        _name_outputs(select.this)
        return
    if not isinstance(select, exp.Select):
        return
    named = []
    for p in select.expressions:
        if isinstance(p, (exp.Alias, exp.Star)) or (isinstance(p, exp.Column) and
                                                     (isinstance(p.this, exp.Star) or
                                                      not isinstance(p.this, exp.Identifier))):
            named.append(p)
        elif isinstance(p, exp.Column):
            named.append(p)
        else:
            named.append(exp.alias_(p, pg_column_name(p), quoted=True))
    select.set("expressions", named)


# --------------------------------------------------------------------------- parameter types
def param_index(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Parameter):
        inner = node.this
        if isinstance(inner, exp.Literal) and inner.is_int:
            return int(inner.name)
        if isinstance(inner, exp.Var) and inner.name.isdigit():
            return int(inner.name)
    if isinstance(node, exp.Placeholder) and str(node.name).isdigit():
        return int(node.name)
    return None


def _pg_oid_of_type(dt_: exp.DataType) -> int:
    t = T.lookup_type_name(type_name(dt_)) or T.lookup_type_name(dt_.sql("postgres"))
    return t.oid if t else 0


_CMP = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Add, exp.Sub, exp.Mul, exp.Div,
        exp.Mod, exp.Like, exp.ILike, exp.NullSafeEQ, exp.NullSafeNEQ)


def _other_side_type(other: exp.Expression, column_type) -> int:
    if isinstance(other, exp.Column):
        return column_type(other.table or None, other.name)
    if isinstance(other, exp.Cast):
        return _pg_oid_of_type(other.to)
    if isinstance(other, exp.Literal):
        return 25 if other.is_string else (23 if other.is_int else 1700)
    return 0


def _from_comparison(node, parent, column_type) -> int:
    other = parent.expression if parent.this is node else parent.this
    return _other_side_type(other, column_type)


def _from_values(node, parent, column_type) -> int:
    ins = parent.find_ancestor(exp.Insert)
    if ins is None or not isinstance(parent.parent, exp.Values):
        return 0
    return _insert_column_type(ins, parent.expressions.index(node), column_type)


def _from_any(node, parent, column_type) -> int:
    cmp = parent.parent
    if not isinstance(cmp, _CMP):
        return 0
    other = cmp.this if cmp.expression is parent else cmp.expression
    elem = T.BY_OID.get(_other_side_type(other, column_type))
    # ANY takes an array: of text where the other side's type is not known (a catalog column)
    return elem.array_oid if elem and elem.array_oid else 1009


# The parent of a parameter says its type: a cast, the other side of a comparison (also
# UPDATE's SET col = $n), the column an INSERT value goes to, a LIMIT.
_PARAM_CONTEXTS = {
    exp.Cast: lambda node, parent, ct: _pg_oid_of_type(parent.to),
    **{cls: _from_comparison for cls in _CMP},
    exp.In: lambda node, parent, ct: _other_side_type(parent.this, ct),
    exp.Between: lambda node, parent, ct: _other_side_type(parent.this, ct),
    exp.Limit: lambda node, parent, ct: 20,
    exp.Offset: lambda node, parent, ct: 20,
    exp.Fetch: lambda node, parent, ct: 20,
    exp.Tuple: _from_values,
    exp.Any: _from_any,
}


def infer_params(ast: exp.Expression, column_type) -> dict:
    """$n -> pg type OID from the context each parameter appears in; 0 where nothing says.

    ``column_type(table_alias | None, column name | position) -> oid`` resolves columns.
    """
    out: dict[int, int] = {}
    for node in ast.walk():
        idx = param_index(node)
        if idx is None:
            continue
        parent = node.parent
        while isinstance(parent, exp.Paren):
            node, parent = parent, parent.parent
        fn = _PARAM_CONTEXTS.get(type(parent))
        oid = fn(node, parent, column_type) if fn is not None else 0
        if oid or idx not in out:
            out[idx] = oid
    return out


def _insert_column_type(ins: exp.Insert, pos: int, column_type) -> int:
    target = ins.this
    cols = None
    if isinstance(target, exp.Schema):
        cols = [c.name for c in target.expressions]
    if cols is not None:
        return column_type(None, cols[pos]) if pos < len(cols) else 0
    return column_type(None, pos)  # positional: the session resolves the nth column


# --------------------------------------------------------------------------- entry point
def parse(sql: str) -> exp.Expression:
    try:
        stmts = sqlglot.parse(sql, read="cql")
    except (ParseError, TokenError) as e:
        raise _syntax_error(sql, e) from None
    stmts = [s for s in stmts if s is not None]
    if len(stmts) != 1:
        raise SyntaxError_("expected exactly one statement")
    return stmts[0]


def _syntax_error(sql: str, e: Exception) -> SyntaxError_:
    errs = getattr(e, "errors", None) or []
    line = col = None
    token = ""
    if errs:
        line, col = errs[0].get("line"), errs[0].get("col")
        token = (errs[0].get("highlight") or "").strip()
    pos = None
    if line:
        lines = sql.split("\n")
        pos = sum(len(x) + 1 for x in lines[:line - 1]) + max(col - len(token), 0) + 1
    msg = f'syntax error at or near "{token}"' if token else "syntax error"
    if not token and "tokeniz" in str(e).lower():
        msg = "syntax error: " + str(e).splitlines()[0]
    detail = str(e).splitlines()[0] if errs else None
    return SyntaxError_(msg, position=pos, detail=detail)


def translate(sql: str) -> Translated:
    """Translate one statement; parameter types are left to the session (``infer_params``),
    which can resolve column names against the catalog."""
    return translate_tree(parse(sql))


def translate_tree(ast: exp.Expression) -> Translated:
    """Translate one statement already parsed (a part of a larger one, such as the query of
    INSERT … SELECT or EXPLAIN): its tree is kept as the translation's source."""
    if isinstance(ast, exp.Command):
        raise FeatureNotSupported(f"statement not supported: {ast.this.upper()}",
                                  position=1)
    if is_stream_syntax(ast):
        tables = tuple((t.db or None, t.name, t.alias_or_name) for t in ast.find_all(exp.Table))
        return Translated("", _tag_for(ast), False, {}, tables, (), False, False, True, ast, ast)
    for node in ast.find_all(exp.Anonymous):
        if node.name.lower() == SIGNAL_FUNCTION:    # only the translator may call it
            raise UndefinedFunction(f"function {node.name}() does not exist")
    if isinstance(ast, exp.Create) and (ast.args.get("kind") or "").upper() == "FUNCTION":
        return _create_function(ast)
    state = {"catalog": False, "set_config": False, "tables": [], "catalog_reads": set(),
             "catalog_aliases": _catalog_aliases(ast),
             "user_relations": any(isinstance(t.this, exp.Identifier) and not (
                 t.name.lower().startswith("pg_") or t.db.lower() in ("pg_catalog",
                                                                       "information_schema"))
                 for t in ast.find_all(exp.Table))}
    named = ast.copy()
    _name_outputs(named)
    new = named.transform(_rewrite, state)
    if isinstance(new, exp.Select) and new.args.get("locks"):
        new.set("locks", None)     # FOR UPDATE/SHARE: DuckDB serialises writers itself
    tag = _tag_for(ast)
    returns = isinstance(new, (exp.Select, exp.Union, exp.Values)) or (
        isinstance(new, (exp.Insert, exp.Update, exp.Delete)) and
        new.args.get("returning") is not None)
    duck = new.sql("duckdb")
    return Translated(duck, tag, returns, {},
                      tuple(state["tables"]), _projections(ast), state["set_config"],
                      state["catalog"], False, new, ast,
                      frozenset(state["catalog_aliases"].values()),
                      frozenset(state["catalog_reads"]))


# --------------------------------------------------------------------------- SQL functions
def _create_function(ast: exp.Create) -> Translated:
    """``CREATE FUNCTION f(x int) RETURNS int AS 'SELECT x * 2' LANGUAGE SQL`` (or ``$$ … $$``,
    or ``RETURN x * 2``) as the DuckDB macro that computes it: the body's one expression (a
    query: its scalar subquery), ``$n`` read as the n-th parameter, each parameter cast to
    its declared type and the result to the return type, as PostgreSQL coerces them."""
    props = {type(p): p for p in (ast.args.get("properties") or exp.Properties()).expressions}
    language = props.get(exp.LanguageProperty)
    language = language.this.name.lower() if language is not None else "sql"
    if language in PYTHON_LANGUAGES:   # the server defines it (gateway/streams/function_ddl)
        return Translated("", "CREATE FUNCTION", returns_rows=False, stream=True, ast=ast,
                          source=ast)
    if language != "sql":
        raise FeatureNotSupported(f"language {language} is not supported",
                                  hint="Write the function in LANGUAGE SQL or LANGUAGE python.")
    returns = props.get(exp.ReturnsProperty)
    if returns is not None and (returns.args.get("is_table") or
                                not isinstance(returns.this, exp.DataType)):
        raise FeatureNotSupported("a function returning a table or a set is not supported",
                                  hint="Return one value, or define a view.")
    udf = ast.this
    # a parameter without a name parses as a name without a type: f(int, int)
    params = [(p.name, p.args["kind"]) if p.args.get("kind") is not None else
              (f"_p{i}", exp.DataType.build(p.name, dialect="postgres"))
              for i, p in enumerate(udf.expressions, start=1)]
    body = _function_body(ast.args.get("expression"))

    def arg(node):
        if isinstance(node, exp.Parameter) and node.this.is_int:
            k = int(node.this.name)
            if not 1 <= k <= len(params):
                raise PgError(f"there is no parameter ${k}", sqlstate="42P02")
            node = exp.column(params[k - 1][0])
        if isinstance(node, exp.Column) and not node.table:
            kind = next((t for n, t in params if n.lower() == node.name.lower()), None)
            if kind is not None:
                return exp.Paren(this=exp.Cast(this=node.copy(), to=kind.copy()))
        return node

    body = body.transform(arg)
    if returns is not None:
        body = exp.Cast(this=body, to=returns.this.copy())
    name = udf.this.sql("duckdb")
    head = "CREATE OR REPLACE MACRO" if ast.args.get("replace") else "CREATE MACRO"
    duck = f"{head} {name}({', '.join(n for n, _ in params)}) AS ({body.sql('duckdb')})"
    return Translated(duck, "CREATE FUNCTION", returns_rows=False, ast=ast, source=ast)


def _function_body(body) -> exp.Expression:
    """The expression a SQL function's body computes."""
    if isinstance(body, exp.Return):
        return body.this
    if not isinstance(body, (exp.Literal, exp.Heredoc)):
        raise FeatureNotSupported("this form of function body is not supported",
                                  hint="Write AS 'SELECT expression' or RETURN expression.")
    text = body.name.strip().rstrip(";")
    try:
        stmts = [x for x in sqlglot.parse(text, read="cql") if x is not None]
    except (ParseError, TokenError) as e:
        raise _syntax_error(text, e) from None
    if len(stmts) != 1 or not isinstance(stmts[0], exp.Select):
        raise FeatureNotSupported("a SQL function's body must be one SELECT",
                                  hint="Write AS 'SELECT expression'.")
    sel = stmts[0]
    if sel.args.get("from_") is None and len(sel.expressions) == 1:
        return sel.expressions[0].unalias()
    return exp.Subquery(this=sel)


def _projections(ast: exp.Expression) -> tuple:
    """For a plain SELECT: each output column's source (alias, column) if it is a bare column."""
    if not isinstance(ast, exp.Select):
        return ()
    out = []
    for p in ast.expressions:
        if isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(p.this, exp.Star)):
            out.append(("*", (p.table or None) if isinstance(p, exp.Column) else None, None))
        elif isinstance(p, exp.Column):
            out.append((p.name, p.table or None, p.name))
        elif isinstance(p, exp.Alias) and isinstance(p.this, exp.Column):
            out.append((p.alias, p.this.table or None, p.this.name))
        else:
            out.append((p.alias_or_name, None, None))
    return tuple(out)


translate_cached = lru_cache(maxsize=2048)(translate)


def set_config_ast(ast: exp.Expression, params: list) -> tuple[exp.Expression, list]:
    """Evaluate ``set_config(name, value, is_local)`` calls; returns the new tree and the
    settings."""
    changes = []

    def value_of(e):
        idx = param_index(e)
        if idx is not None:
            v = params[idx - 1]
            return None if v is None else str(v)
        if isinstance(e, exp.Literal):
            return e.name
        return None

    def fix(node):
        if isinstance(node, exp.Anonymous) and node.name.lower() == "set_config":
            name, value = (value_of(a) for a in node.expressions[:2])
            if name is None:
                raise FeatureNotSupported("set_config needs a constant setting name")
            changes.append((name, value or ""))
            return exp.Literal.string(value or "")
        return node

    return ast.transform(fix), changes

