"""What a statement needs before it runs, read from its parse tree (the SQL DuckDB runs is
generated from the same tree): the relations it reads and writes, what it creates, drops or
alters, the server files it reaches; ``check`` refuses with 42501 what the session's role may
not do, ``record`` gives owners to what a statement made once it has succeeded (at COMMIT in a
transaction block).

DuckDB itself refuses files and settings whatever this module misses (``Store._lock_down``);
this is where a role learns which privilege it lacks."""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from gateway.pgwire import errors as E
from gateway.security.privileges import deny, must_own
from gateway.security.roles import READ_SERVER_FILES
from gateway.tables.pg_catalog import CATALOG, INTERNAL_LIVE
from gateway.tables.statement_context import StatementContext

# DuckDB table functions that read the server's files or list its folders (for roles that may
# read files, gateway/security/server_files.py runs them)
FILE_READERS = {
    "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "read_json", "read_json_auto",
    "read_json_objects", "read_json_objects_auto", "read_ndjson", "read_ndjson_auto",
    "read_ndjson_objects", "read_text", "read_blob", "glob", "sniff_csv", "parquet_metadata",
    "parquet_schema", "parquet_file_metadata", "parquet_kv_metadata", "read_xlsx"}
# the table functions an ordinary role may call: they make rows and read nothing (any other,
# such as query(), json_execute_serialized_sql() or pragma_storage_info(), is a superuser's)
ROW_MAKERS = {"range", "generate_series", "exploding_generate_series", "generate_subscripts",
              "unnest", "json_each", "json_tree"}
# statements an ordinary role may send (session commands, COPY and SET never get here)
ORDINARY = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Insert,
            exp.Update, exp.Delete, exp.Merge, exp.Create, exp.Drop, exp.Alter,
            exp.TruncateTable, exp.Comment, exp.Describe, exp.Pivot, exp.Analyze)
# schemas whose relations are the server's: never written, read without privileges
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
_NOUNS = {"TABLE": "table", "VIEW": "view", "SCHEMA": "schema", "INDEX": "index",
          "SEQUENCE": "sequence", "TYPE": "type", "COLUMN": "column"}


@dataclass
class Needs:
    """What one statement (as translated for DuckDB) needs; made once when it is prepared,
    checked each time it runs."""
    reads: list = field(default_factory=list)        # (catalog, schema, name)
    writes: list = field(default_factory=list)       # (privilege, catalog, schema, name)
    owns: list = field(default_factory=list)         # (kind, catalog, schema, name)
    creates: list = field(default_factory=list)      # (kind, catalog, schema, name)
    drops: list = field(default_factory=list)        # (kind, catalog, schema, name)
    renames: list = field(default_factory=list)      # (schema, old, new)
    files: list = field(default_factory=list)        # file-reading functions it names
    superuser_only: str | None = None                # what only a superuser may run
    replace: bool = False                            # CREATE OR REPLACE

    @property
    def nothing(self) -> bool:
        """Nothing to check (SELECT 1, SHOW-like reads of the catalog only)."""
        return not (self.reads or self.writes or self.owns or self.creates or self.drops
                    or self.files or self.superuser_only)


# --------------------------------------------------------------------------- the tree
def func_name(node: exp.Expression) -> str | None:
    """The name of a function call (``read_csv``), or None for anything else."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


def _where(table: exp.Table) -> tuple:
    catalog = table.args.get("catalog")
    return (catalog.name.lower() if catalog else None, table.db.lower() or None, table.name)


def _names_a_cte(table: exp.Table) -> bool:
    """Whether an unqualified name means a CTE of a WITH around it: one defined before the
    CTE it is in (or that CTE itself, when RECURSIVE), or any, in the WITH's main query."""
    if table.args.get("db") or table.args.get("catalog"):
        return False
    name = table.name.lower()
    below, child, node = None, table, table.parent
    while node is not None:
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With):
            ctes = with_.expressions
            if child is with_:              # inside one of this WITH's CTEs
                upto = ctes.index(below) + (1 if _recursive_step(with_, below, table) else 0)
                ctes = ctes[:upto]
            if any(c.alias_or_name.lower() == name for c in ctes):
                return True
        below, child, node = child, node, node.parent
    return False


# a file named as a table (``FROM 'trips.csv'``): DuckDB reads it with this function
FILE_SUFFIXES = {".csv": "read_csv_auto", ".tsv": "read_csv_auto", ".csv.gz": "read_csv_auto",
                 ".parquet": "read_parquet", ".json": "read_json_auto",
                 ".jsonl": "read_json_auto", ".ndjson": "read_json_auto"}


def file_reader(table: exp.Table) -> str | None:
    """The function DuckDB reads a table named like a file with (None: not a file name)."""
    if table.args.get("db") or table.args.get("catalog") or not table.name:
        return None
    name = table.name.lower()
    return next((f for suffix, f in FILE_SUFFIXES.items() if name.endswith(suffix)), None)


def _recursive_step(with_: exp.With, cte: exp.CTE, table: exp.Table) -> bool:
    """Whether ``table`` is in the recursive step of a RECURSIVE CTE (the right of its UNION),
    where the CTE's own name means the CTE; anywhere else in its body DuckDB reads a table."""
    body = cte.this
    if not (with_.args.get("recursive") and isinstance(body, exp.Union)):
        return False
    node = table
    while node is not None and node is not body:
        if node is body.expression:
            return True
        node = node.parent
    return False


def relations(tree: exp.Expression):
    """(table node, function name or None) of every relation ``tree`` names: a table function
    (a file named as a table counts as its reader), or a stored relation (not a CTE)."""
    for t in tree.find_all(exp.Table):
        name = func_name(t.this) or file_reader(t)
        if name is not None:
            yield t, name
        elif t.name and not _names_a_cte(t):
            yield t, None
    for node in tree.find_all(exp.Unnest):
        yield node, "unnest"
    # ``LATERAL fn(…)`` holds its function in a Lateral, not a Table: it is a table function
    # all the same (``LATERAL query('SELECT * FROM t')`` reads t)
    for node in tree.find_all(exp.Lateral):
        name = func_name(node.this)
        if name is not None:
            yield node, name


def _target(node: exp.Expression) -> exp.Table | None:
    t = node.this
    if isinstance(t, exp.Schema):
        t = t.this
    return t if isinstance(t, exp.Table) else None


# --------------------------------------------------------------------------- what each needs
def _insert(n: Needs, node: exp.Insert, targets: set) -> None:
    t = _target(node)
    if t is None:
        return
    targets.add(id(t))
    wanted = ["INSERT"]
    conflict = node.args.get("conflict")
    if node.args.get("alternative") or (conflict is not None and
                                       "UPDATE" in str(conflict.args.get("action")).upper()):
        wanted.append("UPDATE")            # an upsert changes rows that are there
    if node.args.get("returning") or conflict is not None:
        wanted.append("SELECT")
    n.writes += [(p, *_where(t)) for p in wanted]


def _update(n: Needs, node: exp.Update, targets: set) -> None:
    t = _target(node)
    if t is None:
        return
    targets.add(id(t))
    n.writes.append(("UPDATE", *_where(t)))
    reads_rows = node.args.get("where") or node.args.get("returning") or any(
        e.expression.find(exp.Column) for e in node.expressions if isinstance(e, exp.EQ))
    if reads_rows:                         # PostgreSQL: reading columns needs SELECT
        n.writes.append(("SELECT", *_where(t)))


def _delete(n: Needs, node: exp.Delete, targets: set) -> None:
    t = _target(node)
    if t is None:
        return
    targets.add(id(t))
    n.writes.append(("DELETE", *_where(t)))
    if node.args.get("where") or node.args.get("returning"):
        n.writes.append(("SELECT", *_where(t)))


def _merge(n: Needs, node: exp.Merge, targets: set) -> None:
    t = _target(node)
    if t is not None:
        targets.add(id(t))
        n.writes += [(p, *_where(t)) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")]


def _truncate(n: Needs, node: exp.TruncateTable, targets: set) -> None:
    for t in node.expressions:
        targets.add(id(t))
        n.writes.append(("TRUNCATE", *_where(t)))


def _drop_alter_comment(n: Needs, node: exp.Expression, targets: set) -> None:
    kind = (node.args.get("kind") or "TABLE").upper()
    noun = _NOUNS.get(kind, kind.lower())
    if isinstance(node.this, exp.Column):           # COMMENT ON COLUMN t.c: t's owner
        table, db = node.this.args.get("table"), node.this.args.get("db")
        if table is not None:
            n.owns.append(("table", None, db.name.lower() if db else None, table.name))
        return
    tables = node.args.get("tables") or (
        [node.this] if isinstance(node.this, exp.Table) else [])
    for t in tables:
        targets.add(id(t))
        where = (None, None, t.db or t.name) if noun == "schema" else _where(t)
        n.owns.append((noun, *where))
        if isinstance(node, exp.Drop):
            n.drops.append((noun, *where))
    for action in node.args.get("actions") or ():
        if isinstance(action, exp.AlterRename) and tables:
            targets.add(id(action.this))
            n.renames.append((_where(tables[0])[1], tables[0].name, action.this.name))


def _create(n: Needs, node: exp.Create, targets: set) -> None:
    kind = (node.args.get("kind") or "TABLE").upper()
    if kind in ("FUNCTION", "MACRO", "PROCEDURE"):
        n.superuser_only = "CREATE FUNCTION"
        return
    properties = (node.args.get("properties") or exp.Properties()).expressions
    if any(isinstance(p, exp.TemporaryProperty) for p in properties):
        t = _target(node)
        if t is not None:
            targets.add(id(t))                       # the session's own, gone with it
        return
    n.replace = bool(node.args.get("replace"))
    if isinstance(node.this, exp.Index):             # CREATE INDEX needs the table's owner
        table = node.this.args.get("table")
        if table is not None:
            targets.add(id(table))
            n.owns.append(("table", *_where(table)))
        return
    t = _target(node)
    if t is None:
        return
    targets.add(id(t))
    if kind == "SCHEMA":
        n.creates.append(("schema", None, None, t.db or t.name))
    else:
        n.creates.append((_NOUNS.get(kind, kind.lower()), *_where(t)))


_STATEMENT_PARTS = {exp.Insert: _insert, exp.Update: _update, exp.Delete: _delete,
                    exp.Merge: _merge, exp.TruncateTable: _truncate}
_TOP_LEVEL = {exp.Drop: _drop_alter_comment, exp.Alter: _drop_alter_comment,
              exp.Comment: _drop_alter_comment, exp.Create: _create}


def needs(ast: exp.Expression) -> Needs:
    """What running ``ast`` (as translated for DuckDB) would read, write and change."""
    n = Needs()
    if not isinstance(ast, ORDINARY):
        n.superuser_only = ast.key.upper()
    targets: set = set()
    top = _TOP_LEVEL.get(type(ast))
    if top is not None:
        top(n, ast, targets)
    for node_type, part in _STATEMENT_PARTS.items():
        for node in ast.find_all(node_type):
            part(n, node, targets)
    for t, function in relations(ast):
        if function in FILE_READERS:
            n.files.append(function)
        elif function is not None and function not in ROW_MAKERS:
            n.superuser_only = f"function {function}"
        elif function is None and id(t) not in targets:
            n.reads.append(_where(t))
    for call in ast.find_all(exp.Func):
        if func_name(call) in FILE_READERS and not isinstance(call.parent, exp.Table):
            n.files.append(func_name(call))
    return n


# --------------------------------------------------------------------------- checking
def _is_server_relation(catalog: str | None, schema: str | None, name: str,
                        database: str) -> bool:
    """The server's catalog, DuckDB's own relations, or a live table of the catalog."""
    if name.lower() in INTERNAL_LIVE and catalog in (None, "temp", CATALOG):
        return True
    if catalog is not None and catalog != database:
        return catalog != "temp"
    return schema in SYSTEM_SCHEMAS


def _catalog_change(n: Needs, database: str) -> str | None:
    """The name of a catalog relation the statement would change (for anyone)."""
    changed = [(c, s, name) for _p, c, s, name in n.writes] + \
        [(c, s, name) for kind, c, s, name in n.owns + n.creates if kind != "schema"]
    for catalog, schema, name in changed:
        if _is_server_relation(catalog, schema, name, database) or schema == "main":
            return name
    for kind, _c, _s, name in n.owns + n.creates:
        if kind == "schema" and name.lower() in ("main", "pg_catalog", "information_schema",
                                                 CATALOG):
            return name
    return None


def check(ctx: StatementContext, n: Needs) -> list:
    """Raise 42501 for the first thing ``n`` holds that the session's role may not do; else
    the relations the statement creates that do not exist yet (``record`` gives them their
    owner: CREATE … IF NOT EXISTS and CREATE OR REPLACE keep an existing one's)."""
    svc = ctx.services
    role, roles, grants = ctx.user, svc.roles, svc.grants
    database = svc.store.name.lower()
    changed = _catalog_change(n, database)
    if changed:
        raise deny("table", changed)
    superuser = roles.is_superuser(role)
    for catalog, _schema, name in n.reads:
        if name.lower() in INTERNAL_LIVE and catalog in (None, "temp", CATALOG) \
                and not superuser:
            raise deny("table", name)
    fresh = [c for c in n.creates if c[0] == "schema" or not exists(ctx, *c)]
    if superuser:
        return fresh
    if n.superuser_only:
        raise E.InsufficientPrivilege(f"permission denied to run {n.superuser_only}",
                                      hint="Only a superuser may run it.")
    if n.files and not roles.has_privs_of(role, READ_SERVER_FILES):
        raise E.InsufficientPrivilege(
            f"permission denied for function {n.files[0]}",
            hint="Reading the server's files needs superuser or the privileges of the "
                 "pg_read_server_files role.")
    own_temp = ctx.relation_facts.fresh(ctx).temporary if any(
        s is None for _c, s, _n in n.reads + [w[1:] for w in n.writes]) else set()
    for catalog, schema, name in n.reads:
        if catalog in (None, database) and schema not in SYSTEM_SCHEMAS \
                and not (schema is None and name.lower() in own_temp):
            require(ctx, "SELECT", schema, name)
            _through_view(ctx, schema, name, 0)
    for privilege, catalog, schema, name in n.writes:
        if not (schema is None and catalog is None and name.lower() in own_temp):
            require(ctx, privilege, schema, name)
    for kind, catalog, schema, name in n.owns:
        if not exists(ctx, kind, catalog, schema, name):
            continue                     # DROP … IF EXISTS, or DuckDB's own error
        owner = grants.schema_owner(name) if kind == "schema" else \
            grants.owner(key(schema, _index_table(ctx, schema, name)
                             if kind == "index" else name))
        if not roles.has_privs_of(role, owner):
            raise must_own(kind, name)
    for kind, catalog, schema, name in n.creates:
        if kind == "schema":
            raise E.InsufficientPrivilege(f"permission denied for database {svc.store.name}",
                                          hint="Only a superuser may create schemas.")
        if not grants.schema_allowed(role, "CREATE", schema or "public"):
            raise deny("schema", schema or "public")
        if (kind, catalog, schema, name) not in fresh and n.replace \
                and not grants.owns(role, key(schema, name)):
            raise must_own(kind, name)       # CREATE OR REPLACE of another's relation
    return fresh


# what a kind of object is looked up in: DuckDB's function, and its name column
_LOOKUPS = {"sequence": ("duckdb_sequences()", "sequence_name"),
            "index": ("duckdb_indexes()", "index_name"),
            "type": ("duckdb_types()", "type_name")}


def exists(ctx: StatementContext, kind: str, catalog: str | None, schema: str | None,
           name: str) -> bool:
    """Whether the object a statement names is there already."""
    if kind == "schema":
        return bool(ctx.con.execute(
            "SELECT 1 FROM duckdb_schemas() WHERE database_name = ? AND schema_name = ?",
            [ctx.services.store.name, name]).fetchall())
    lookup = _LOOKUPS.get(kind)
    if lookup is not None:
        function, column = lookup
        return bool(ctx.con.execute(
            f"SELECT 1 FROM {function} WHERE database_name = ? AND schema_name = ? AND "
            f"lower({column}) = ?", [ctx.services.store.name, schema or "public",
                                     name.lower()]).fetchall())
    return ctx.services.streams.get(schema, name) is not None or bool(
        ctx.columns.of(schema if schema != "public" else None, name))


def _index_table(ctx: StatementContext, schema: str | None, index: str) -> str:
    row = ctx.con.execute(
        "SELECT table_name FROM duckdb_indexes() WHERE database_name = ? AND schema_name = ? "
        "AND lower(index_name) = ?", [ctx.services.store.name, schema or "public",
                                      index.lower()]).fetchall()
    return row[0][0] if row else index


class RelationFacts:
    """What ``check`` asks of DuckDB's catalog for one session, asked once per catalog version:
    the session's temporary relations and the views there are (with what each reads, parsed
    when first needed)."""

    def __init__(self):
        self.version = -1
        self.temporary: set = set()
        self.views: dict = {}         # (schema, lower name) -> SQL, then [(schema, name)]

    def fresh(self, ctx: StatementContext) -> "RelationFacts":
        version = ctx.services.store.catalog_version
        if version != self.version:
            con, db = ctx.con, ctx.services.store.name
            self.temporary = {r[0].lower() for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE temporary UNION ALL "
                "SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()} \
                - set(INTERNAL_LIVE)
            self.views = {(r[0], r[1].lower()): r[2] for r in con.execute(
                "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE "
                "database_name = ? AND NOT internal AND NOT temporary", [db]).fetchall()}
            self.version = version
        return self

    def view_reads(self, schema: str | None, name: str) -> list | None:
        """(schema, name) of the relations a view reads; None when it is no view."""
        k = (schema or "public", name.lower())
        found = self.views.get(k)
        if isinstance(found, str):
            found = self.views[k] = [
                (t.db or schema, t.name) for t, function in
                relations(sqlglot.parse_one(found, read="duckdb")) if function is None]
        return found


VIEW_DEPTH = 16      # views over views checked this deep


def _through_view(ctx: StatementContext, schema: str | None, name: str, depth: int) -> None:
    """A view reads its relations with its owner's privileges, as in PostgreSQL: the owner
    must hold SELECT on each (and so on through views it reads); DuckDB itself refuses a
    view's file functions to everyone."""
    svc = ctx.services
    reads = ctx.relation_facts.fresh(ctx).view_reads(schema, name)
    if reads is None or depth > VIEW_DEPTH:
        return
    owner = svc.grants.owner(key(schema, name))
    for inner_schema, inner in reads:
        if not svc.grants.allowed(owner, "SELECT", key(inner_schema, inner)):
            raise deny("table", inner)
        _through_view(ctx, inner_schema, inner, depth + 1)


def check_reads(ctx: StatementContext, tree: exp.Expression) -> None:
    """A query over streams (continuous, snapshot, EXPLAIN, RECOMPUTE, a window's definition,
    INSERT … SELECT into a stream): SELECT on every relation it names, no table function
    beyond ROW_MAKERS, and files only for roles that may read them."""
    roles = ctx.services.roles
    if roles.is_superuser(ctx.user):
        return
    database = ctx.services.store.name.lower()
    for t, function in relations(tree):
        if function is not None:
            if function in FILE_READERS and roles.has_privs_of(ctx.user, READ_SERVER_FILES):
                continue
            if function not in ROW_MAKERS:
                raise E.InsufficientPrivilege(f"permission denied for function {function}")
            continue
        catalog, schema, name = _where(t)
        if catalog in (None, database) and schema not in SYSTEM_SCHEMAS:
            require(ctx, "SELECT", schema, name)
            _through_view(ctx, schema, name, 0)


def key(schema: str | None, name: str) -> str:
    """A relation's key in the grants: ``schema.name``, lower case."""
    return f"{schema or 'public'}.{name}".lower()


def require(ctx: StatementContext, privilege: str, schema: str | None, name: str) -> None:
    """42501 unless the session's role holds ``privilege`` on the relation (a table, view,
    stream, named window or derived stream)."""
    svc = ctx.services
    if svc.grants.allowed(ctx.user, privilege, key(schema, name)):
        return
    obj = svc.streams.get(schema, name)
    raise deny(obj.kind if obj is not None else "table", name)


def require_create(ctx: StatementContext, schema: str | None) -> None:
    """CREATE on the schema a new relation goes into."""
    if not ctx.services.grants.schema_allowed(ctx.user, "CREATE", schema or "public"):
        raise deny("schema", schema or "public")


def require_owner(ctx: StatementContext, kind: str, schema: str | None, name: str) -> None:
    """42501 unless the session's role is the relation's owner (or has its privileges)."""
    if not ctx.services.grants.owns(ctx.user, key(schema, name)):
        raise must_own(kind, name)


def require_superuser(ctx: StatementContext, what: str) -> None:
    """42501 unless the session's role is a superuser."""
    if not ctx.services.roles.is_superuser(ctx.user):
        raise E.InsufficientPrivilege(f"permission denied to {what}",
                                      hint="Only a superuser may do this.")


def record(ctx: StatementContext, n: Needs, fresh: list) -> None:
    """After the statement succeeded: its creator owns what it made (``fresh``: what did not
    exist before); what it dropped has no owner any more; a renamed relation keeps its
    privileges. Inside a transaction block this waits for COMMIT (ROLLBACK forgets it)."""
    if not (fresh or n.drops or n.renames):
        return
    grants, user = ctx.services.grants, ctx.user
    database = ctx.services.store.name.lower()

    def apply() -> None:
        for kind, catalog, schema, name in fresh:
            if kind == "schema":
                grants.schema_created(name, user)
            elif catalog in (None, database):
                grants.created(key(schema, name), user)
        for kind, catalog, schema, name in n.drops:
            if kind == "schema":
                grants.schema_dropped(name)
            elif not exists(ctx, kind, catalog, schema, name):
                grants.dropped(key(schema, name))
        for schema, old, new in n.renames:
            grants.renamed(key(schema, old), key(schema, new))
    ctx.on_commit(apply)
