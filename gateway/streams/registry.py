"""The registry of streams, named windows, derived streams and wrappers: kept in the DuckDB
file (table ``main.cq_objects``, outside the schemas clients browse), mirrored into the
emulated pg_catalog (``pgcat.cq_relations`` / ``cq_columns``) so psql, JDBC and BI tools list
them with their columns, and offered to the planner as its catalog.

Streams list as tables (relkind ``r``, TelegraphCQ's "like tables"); windows and derived
streams as views. Stream DDL is not transactional: it takes effect at once.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from dialect.planner import Relation
from executor import plan as P

from gateway.tables.pg_catalog import CATALOG

FIRST_OID = 3_000_000
BUILTIN_WRAPPERS = ("csvwrapper", "jsonwrapper")

_SCHEMA = """CREATE TABLE IF NOT EXISTS main.cq_objects (
    oid BIGINT PRIMARY KEY, kind VARCHAR NOT NULL, schema_name VARCHAR NOT NULL,
    name VARCHAR NOT NULL, definition VARCHAR, columns VARCHAR, timestamp_column VARCHAR,
    end_column VARCHAR, archived BOOLEAN, options VARCHAR, depends_on VARCHAR)"""


@dataclass
class StreamObject:
    oid: int
    kind: str                     # stream | window | derived | wrapper
    schema: str
    name: str
    definition: str = ""
    columns: list = field(default_factory=list)        # [(name, type, not_null)]
    timestamp_column: str | None = None
    end_column: str | None = None
    archived: bool | None = None
    options: dict = field(default_factory=dict)
    depends_on: list = field(default_factory=list)     # ["schema.name"] it reads

    @property
    def key(self) -> str:
        return f"{self.schema}.{self.name}".lower()

    def relation(self) -> Relation:
        return Relation(self.key if self.schema != "public" else self.name, self.kind,
                        tuple((c[0], c[1]) for c in self.columns), self.timestamp_column,
                        self.end_column)


class StreamRegistry:
    def __init__(self, store):
        self.store = store
        self._lock = threading.Lock()
        con = store.db.cursor()
        con.execute(_SCHEMA)
        rows = con.execute("SELECT oid, kind, schema_name, name, definition, columns, "
                           "timestamp_column, end_column, archived, options, depends_on "
                           "FROM main.cq_objects ORDER BY oid").fetchall()
        con.close()
        self.objects: dict = {}
        for r in rows:
            obj = StreamObject(r[0], r[1], r[2], r[3], r[4] or "", json.loads(r[5] or "[]"),
                               r[6], r[7], r[8], json.loads(r[9] or "{}"),
                               json.loads(r[10] or "[]"))
            self.objects[obj.key] = obj
        self._mirror_all()

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
        return max([FIRST_OID - 1] + [o.oid for o in self.objects.values()]) + 1

    def dependents(self, obj: StreamObject) -> list:
        return [o for o in self.objects.values() if obj.key in o.depends_on]

    # ------------------------------------------------------------------ changes
    def save(self, obj: StreamObject) -> None:
        with self._lock:
            con = self.store.db.cursor()
            try:
                con.execute("DELETE FROM main.cq_objects WHERE oid = ?", [obj.oid])
                con.execute("INSERT INTO main.cq_objects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [obj.oid, obj.kind, obj.schema, obj.name, obj.definition,
                             json.dumps(obj.columns), obj.timestamp_column, obj.end_column,
                             obj.archived, json.dumps(obj.options), json.dumps(obj.depends_on)])
                self.objects[obj.key] = obj
                self._mirror(con, obj)
            finally:
                con.close()
            self.store.bump()

    def remove(self, obj: StreamObject) -> None:
        with self._lock:
            con = self.store.db.cursor()
            try:
                con.execute("DELETE FROM main.cq_objects WHERE oid = ?", [obj.oid])
                self.objects.pop(obj.key, None)
                self._unmirror(con, obj.oid)
            finally:
                con.close()
            self.store.bump()

    # ------------------------------------------------------------------ pg_catalog mirror
    def _unmirror(self, con, oid: int) -> None:
        con.execute(f"DELETE FROM {CATALOG}.main.cq_relations WHERE oid = ?", [oid])
        con.execute(f"DELETE FROM {CATALOG}.main.cq_columns WHERE attrelid = ?", [oid])

    def _mirror(self, con, obj: StreamObject) -> None:
        self._unmirror(con, obj.oid)
        if obj.kind == "wrapper":
            return
        relkind = "r" if obj.kind == "stream" else "v"
        description = {"stream": "stream" + (" (archived)" if obj.archived else ""),
                       "window": "named window", "derived": "derived stream"}[obj.kind]
        con.execute(f"INSERT INTO {CATALOG}.main.cq_relations VALUES (?, ?, ?, ?, ?, ?)",
                    [obj.oid, obj.schema, obj.name, relkind, obj.kind, description])
        for i, (name, typ, not_null) in enumerate(obj.columns, 1):
            con.execute(f"INSERT INTO {CATALOG}.main.cq_columns VALUES (?, ?, ?, ?, ?)",
                        [obj.oid, name, i, typ, bool(not_null)])

    def _mirror_all(self) -> None:
        con = self.store.db.cursor()
        try:
            for obj in self.objects.values():
                self._mirror(con, obj)
        finally:
            con.close()


class SessionCatalog:
    """The planner's catalog for one session: stream objects, then the session's DuckDB
    tables (as the session sees them, inside its transaction: ``columns`` is the session's
    ``gateway.sessions.columns.ColumnInfo``)."""

    def __init__(self, registry: StreamRegistry, columns):
        self.registry = registry
        self.columns = columns

    def relation(self, schema: str | None, name: str) -> Relation | None:
        obj = self.registry.get(schema, name, kinds=("stream", "window", "derived"))
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
