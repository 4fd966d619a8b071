"""Column metadata as one session sees it: the columns of tables, views and streams, cached per
catalog version, and the RowDescription fields of a result, with the table column each came from."""
from __future__ import annotations

import duckdb
from sqlglot import exp

from gateway.pgwire import types as T
from gateway.pgwire.results import Field
from gateway.streams.registry import StreamRegistry
from gateway.tables import translate as TR
from gateway.tables.store import Store, pg_error


class ColumnInfo:
    """A session's column lookups, read on the session's own DuckDB connection (inside its
    transaction), the table columns being cached until the catalog changes."""

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Store, streams: StreamRegistry):
        self.con, self.store, self.streams = con, store, streams
        self._cache: dict = {}
        self._cache_version = -1

    def of(self, schema: str | None, table: str) -> list:
        """[(name, duckdb type, table oid, attnum)] of a user table or view (a stream's have no
        oid nor attnum), cached per catalog version."""
        if self._cache_version != self.store.catalog_version:
            self._cache.clear()
            self._cache_version = self.store.catalog_version
        key = (schema, table.lower())
        if key not in self._cache:
            rows = self.con.execute(
                "SELECT c.column_name, c.data_type, t.table_oid, c.column_index "
                "FROM duckdb_columns() c LEFT JOIN duckdb_tables() t "
                "ON t.database_name = c.database_name AND t.schema_name = c.schema_name "
                "AND t.table_name = c.table_name "
                "WHERE c.database_name = ? AND lower(c.table_name) = ? "
                "AND (c.schema_name = ? OR (? IS NULL AND c.schema_name = 'public')) "
                "ORDER BY c.column_index",
                [self.store.name, table.lower(), schema, schema]).fetchall()
            if not rows:          # a stream, window or derived stream: its declared columns
                obj = self.streams.get(schema, table, kinds=("stream", "window", "derived"))
                rows = [(c[0], c[1], None, i) for i, c in enumerate(obj.columns)] if obj else []
            self._cache[key] = rows
        return self._cache[key]

    def sql_function(self, name: str, schema: str | None = None) -> tuple | None:
        """A user's SQL function (a macro of the session's database; in ``schema``, or else
        public's): (parameter names, its body as DuckDB SQL), or None."""
        rows = self.con.execute(      # fetched to the end: DuckDB's connection is free then
            "SELECT parameters, macro_definition FROM duckdb_functions() "
            "WHERE database_name = ? AND function_type = 'macro' AND lower(function_name) = ? "
            "AND lower(schema_name) IN (?, ?) ORDER BY schema_name <> 'public' LIMIT 1",
            [self.store.name, name.lower(), *((schema.lower(),) * 2 if schema
                                               else ("public", "main"))]).fetchall()
        return (tuple(rows[0][0]), rows[0][1]) if rows else None

    def function_exists(self, name: str) -> bool:
        """Whether the session's DuckDB has a function of this name (a user's SQL function,
        the catalog's own, or a built-in)."""
        return bool(self.con.execute("SELECT count(*) FROM duckdb_functions() "
                                     "WHERE lower(function_name) = ?", [name.lower()])
                    .fetchall()[0][0])

    def type_oid(self, tables, alias, col) -> int:
        """The PostgreSQL type oid of column ``col`` (a name, or a position) of the table
        ``alias`` names among ``tables`` (any of them when None); 0: unknown."""
        candidates = [t for t in tables if alias is None or (t[2] or "").lower() == alias.lower()]
        for schema, name, _alias in candidates:
            cols = self.of(schema, name)
            if isinstance(col, int):
                if col < len(cols):
                    return T.duck_to_pg(cols[col][1]).oid
                continue
            for cname, ctype, *_ in cols:
                if cname.lower() == col.lower():
                    return T.duck_to_pg(ctype).oid
        return 0

    def origins(self, t: TR.Translated, names: list) -> list:
        """(table oid, attnum) for each output column that is a plain column of a table."""
        out = [(0, 0)] * len(names)
        if not t.projections or not t.tables or t.catalog:
            return out
        expanded = []
        for name, alias, col in t.projections:
            if name == "*":
                tabs = [x for x in t.tables if alias is None or (x[2] or "").lower() == alias.lower()]
                if len(tabs) != 1 and alias is None and len(t.tables) != 1:
                    return out
                for c in self.of(tabs[0][0], tabs[0][1]) if tabs else []:
                    expanded.append((c[2] or 0, c[3]))
            elif col is not None:
                tabs = [x for x in t.tables if alias is None or (x[2] or "").lower() == alias.lower()]
                found = (0, 0)
                for schema, tname, _ in tabs:
                    for c in self.of(schema, tname):
                        if c[0].lower() == col.lower():
                            found = (c[2] or 0, c[3])
                            break
                    if found != (0, 0):
                        break
                expanded.append(found)
            else:
                expanded.append((0, 0))
        return expanded if len(expanded) == len(names) else out

    def fields(self, tr: TR.Translated | None, names: list, types: list) -> list:
        """The RowDescription fields of a result with these DuckDB column names and types."""
        origins = self.origins(tr, names) if tr is not None else [(0, 0)] * len(names)
        vectors = TR.vector_columns(tr.catalog_relations) if tr is not None else {}
        out = []
        for name, ty, (toid, attnum) in zip(names, types, origins):
            # the catalog's int2vector and oidvector columns are lists in DuckDB
            pg = T.BY_OID[vectors[name]] if vectors.get(name) and ty.endswith("[]") \
                else T.duck_to_pg(ty)
            out.append(Field(name, pg.oid, T.duck_typmod(ty), toid, attnum))
        return out

    def describe(self, tr: TR.Translated, oids: list, bind) -> list:
        """The fields of a DuckDB statement's result, without running it: its parameters
        become typed NULLs, and ``bind`` makes the SQL with the session's values."""
        ast = tr.ast.copy()

        def null_param(node):
            if isinstance(node, exp.Anonymous) and node.name.lower() == "set_config":
                return exp.Literal.string("")
            idx = TR.param_index(node)
            if idx is not None:
                t = T.BY_OID.get(oids[idx - 1] if idx <= len(oids) else 25)
                return exp.Cast(this=exp.Null(), to=exp.DataType.build(
                    t.duckdb if t else "VARCHAR", dialect="duckdb"))
            return node

        ast = ast.transform(null_param)
        if isinstance(ast, (exp.Insert, exp.Update, exp.Delete)):
            target = ast.this.this if isinstance(ast.this, exp.Schema) else ast.this
            ret = ast.args["returning"].expressions
            ast = exp.select(*ret).from_(target.copy()).limit(0)
        try:
            rel = self.con.sql(bind(ast))
            names, types = rel.columns, [str(x) for x in rel.types]
        except duckdb.Error as e:
            raise pg_error(e) from None
        return self.fields(tr, names, types)


def table_key(schema: str | None, name: str) -> str:
    """A table as stream–table joins name it: ``name``, or ``schema.name`` outside public."""
    schema = (schema or "public").lower()
    return name.lower() if schema == "public" else f"{schema}.{name.lower()}"
