"""The registry of streams, named windows, derived streams and wrappers: kept in the server's
own catalog (``<data_dir>/catalog/objects.json``, which no SQL reaches), listed in the emulated
pg_catalog through the live tables ``cq_relations`` / ``cq_columns`` so psql, JDBC and BI tools
show them with their columns, and offered to the planner as its catalog.

Streams list as tables (relkind ``r``, TelegraphCQ's "like tables"); windows and derived
streams as views. Stream DDL is not transactional: it takes effect at once.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import threading
from dataclasses import dataclass, field

import duckdb
import sqlglot
from sqlglot import exp

from dialect.planner import Relation
from executor import plan as P

from gateway import catalog_files
from gateway.pgwire import errors as E

FIRST_OID = 3_000_000
RELATION_KINDS = ("stream", "window", "derived", "view")   # the rest: wrappers, connectors
HIDDEN = "__cq_"               # a column of a stream's own bookkeeping, never shown
BUILTIN_WRAPPERS = ("csvwrapper", "jsonwrapper")
DOCUMENT = "objects.json"
# where an earlier version kept the objects: inside the DuckDB file, where SQL could reach them
_LEGACY = ("SELECT oid, kind, schema_name, name, definition, columns, timestamp_column, "
           "end_column, archived, options, depends_on FROM main.cq_objects ORDER BY oid")
_DESCRIPTIONS = {"window": "named window", "derived": "derived stream"}


def _query_text(obj) -> str | None:
    """A named window's or derived stream's query, as pg_get_viewdef shows a view's."""
    if obj.kind not in _DESCRIPTIONS or not obj.definition:
        return None
    try:
        query = obj.tree.args.get("expression")
    except sqlglot.errors.ParseError:
        return None
    return query.sql("cql", pretty=True) if query is not None else None


@dataclass
class StreamObject:
    oid: int
    kind: str                     # stream | window | derived | view | wrapper
    schema: str
    name: str
    definition: str = ""
    columns: list = field(default_factory=list)        # [(name, type, not_null)]
    timestamp_column: str | None = None
    end_column: str | None = None
    archived: bool | None = None
    options: dict = field(default_factory=dict)
    depends_on: list = field(default_factory=list)     # ["schema.name"] it reads
    partitioned_by: list = field(default_factory=list)  # PARTITIONED BY: its queries on Spark

    @property
    def key(self) -> str:
        return f"{self.schema}.{self.name}".lower()

    @functools.cached_property
    def tree(self) -> exp.Expression:
        """The definition's parse tree: the statement's own when it made the object
        (``made_from``), else parsed once, when first needed after loading."""
        return sqlglot.parse_one(self.definition, read="cql")

    def made_from(self, tree: exp.Expression) -> "StreamObject":
        """This object, keeping ``tree`` (the statement that made it) as its parse tree."""
        self.__dict__["tree"] = tree
        return self

    def query(self) -> exp.Expression:
        """A named window's or derived stream's query, a copy of its own for the planner."""
        return self.tree.args["expression"].copy()

    @property
    def births(self) -> dict:
        """A named window's or derived stream's reads that start with its query ([UNBOUNDED],
        ROWS, a session, a pattern): {stream: the first event time it reads}, as its query
        first started (``executor.plan.born_from``)."""
        return json.loads(self.options.get("born", "{}"))

    def refuse_writes(self) -> None:
        """A stream that follows a PostgreSQL table has its rows from the table alone:
        INSERT, COPY and the ingest port are refused (0A000)."""
        if self.options.get("source"):
            raise E.FeatureNotSupported(
                f'stream "{self.name}" follows {self.options.get("table")} in PostgreSQL '
                f'through source {self.options["source"]}; its rows come only from there',
                hint=f"Write to {self.options.get('table')} in PostgreSQL.")

    @property
    def visible_columns(self) -> list:
        """The columns queries and the catalog see: a source's bookkeeping (``__cq_…``: a
        PostgreSQL table's commit time, change kind and LSN) stays out of sight."""
        return [c for c in self.columns if not c[0].startswith(HIDDEN)]

    def relation(self) -> Relation:
        key = self.options.get("key") if self.options.get("source") else None
        return Relation(self.key if self.schema != "public" else self.name, self.kind,
                        tuple((c[0], c[1]) for c in self.visible_columns),
                        self.timestamp_column, self.end_column,
                        query=self.query().sql("cql") if self.kind == "view" else "",
                        versions=tuple(key.split(",")) if key else ())


class StreamRegistry:
    def __init__(self, store, data_dir: str):
        self.store = store
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self._last_oid = FIRST_OID - 1     # the last OID handed out
        saved = catalog_files.load(data_dir, DOCUMENT)
        if saved is None:
            saved = self._take_legacy()
        self.objects: dict = {}
        for d in saved:
            obj = StreamObject(**{**d, "columns": [tuple(c) for c in d["columns"]]})
            self.objects[obj.key] = obj
        self._tables: tuple = (-1, {})

    def _take_legacy(self) -> list:
        """Objects an earlier version kept in ``main.cq_objects``: moved to the catalog file,
        then that table dropped."""
        con = self.store.db.cursor()
        try:
            try:
                rows = con.execute(_LEGACY).fetchall()
            except duckdb.CatalogException:
                return []
            names = ("oid", "kind", "schema", "name", "definition", "columns",
                     "timestamp_column", "end_column", "archived", "options", "depends_on")
            decoded = [dict(zip(names, r)) for r in rows]
            for d in decoded:
                d["definition"] = d["definition"] or ""
                for key, empty in (("columns", "[]"), ("options", "{}"), ("depends_on", "[]")):
                    d[key] = json.loads(d[key] or empty)
            catalog_files.save(self.data_dir, DOCUMENT, decoded)
            con.execute("DROP TABLE main.cq_objects")
            return decoded
        finally:
            con.close()

    # ------------------------------------------------------------------ lookups
    def get(self, schema: str | None, name: str, kinds=None) -> StreamObject | None:
        obj = self.objects.get(f"{schema or 'public'}.{name}".lower())
        if obj is not None and (kinds is None or obj.kind in kinds):
            return obj
        return None

    def by_relation(self, name: str, kinds=None) -> StreamObject | None:
        """The object a plan names (``StreamObject.relation().name``: schema-qualified
        outside public)."""
        schema, _, bare = name.rpartition(".")
        return self.get(schema or None, bare, kinds)

    def next_oid(self) -> int:
        """A new object's OID, never handed out twice: sessions create objects at the same
        time, and an object is saved only once its query runs (under ``-oid``)."""
        with self._lock:
            self._last_oid = max([FIRST_OID - 1, self._last_oid] +
                                 [o.oid for o in self.objects.values()]) + 1
            return self._last_oid

    def dependents(self, obj: StreamObject) -> list:
        return [o for o in self.objects.values() if obj.key in o.depends_on]

    # ------------------------------------------------------------------ changes
    def save(self, obj: StreamObject) -> None:
        with self._lock:
            self.objects = {**self.objects, obj.key: obj}
            self._write()
        self.store.bump()

    def remove(self, obj: StreamObject) -> None:
        with self._lock:
            self.objects = {k: o for k, o in self.objects.items() if o.oid != obj.oid}
            self._write()
        self.store.bump()

    def _write(self) -> None:
        catalog_files.save(self.data_dir, DOCUMENT,
                           [dataclasses.asdict(o) for o in sorted(self.objects.values(),
                                                                  key=lambda o: o.oid)])

    # ------------------------------------------------------------------ pg_catalog rows
    def catalog_tables(self) -> dict:
        """``cq_relations`` and ``cq_columns`` as Arrow tables, rebuilt when the catalog
        changed."""
        version = self.store.catalog_version
        if self._tables[0] != version:
            rels, cols = [], []
            for obj in sorted(self.objects.values(), key=lambda o: o.oid):
                if obj.kind not in RELATION_KINDS:
                    continue
                description = _DESCRIPTIONS.get(obj.kind) or (
                    "stream" + (" (archived)" if obj.archived else ""))
                rels.append((obj.oid, obj.schema, obj.name, "r" if obj.kind == "stream"
                             else "v", obj.kind, description, _query_text(obj)))
                cols += [(obj.oid, name, i, typ, bool(not_null))
                         for i, (name, typ, not_null) in enumerate(obj.visible_columns, 1)]
            self._tables = (version, {"cq_relations": self.store.live_table("cq_relations", rels),
                                      "cq_columns": self.store.live_table("cq_columns", cols)})
        return self._tables[1]


class SessionCatalog:
    """The planner's catalog for one session: stream objects, then the session's DuckDB
    tables (as the session sees them, inside its transaction: ``columns`` is the session's
    ``gateway.sessions.columns.ColumnInfo``)."""

    def __init__(self, registry: StreamRegistry, columns, inline: frozenset = frozenset()):
        self.registry = registry
        self.columns = columns
        self.inline = inline      # keys of derived streams read through their query, as views

    def relation(self, schema: str | None, name: str) -> Relation | None:
        obj = self.registry.get(schema, name, kinds=("stream", "window", "derived", "view"))
        if obj is not None and obj.key in self.inline:
            return dataclasses.replace(obj.relation(), kind="view",
                                       query=obj.query().sql("cql"),
                                       born=tuple(obj.births.items()))
        if obj is not None:
            return obj.relation()
        cols = self.columns.of(schema, name)
        if cols:
            return Relation(f"{schema}.{name}" if schema else name, "table",
                            tuple((c[0], c[1]) for c in cols))
        return None

    def is_aggregate(self, name: str) -> bool:
        return name.lower() in P.user_aggregate_names()

    def aggregate_type(self, name: str) -> str:
        return P.user_aggregate_type(name)

    def function_exists(self, name: str) -> bool:
        return self.columns.function_exists(name)

    def sql_function(self, name: str, schema: str | None = None) -> tuple | None:
        return self.columns.sql_function(name, schema)

    def python_function(self, name: str):
        return self.registry.store.functions.get(name)
