"""The live tables of the read-only catalog (``pg_catalog.LIVE_TABLES``) as one session sees
them: registered on its own DuckDB connection, again before a statement whenever streams,
roles or privileges changed, so each session reads current rows and no session can write them."""
from __future__ import annotations

import duckdb
import pyarrow as pa


class LiveCatalog:
    """The live tables registered on one session's connection, and what they were made
    from (streams', roles' and grants' versions), so they are made again only on a change."""

    def __init__(self, con: duckdb.DuckDBPyConnection, services):
        self.con, self.services = con, services
        self._seen = None
        schemas = services.store.live_schemas
        # every live table exists from the start, empty until filled, so the views bind
        self.register({name: schema.empty_table() for name, schema in schemas.items()})
        self.refresh()

    def refresh(self) -> None:
        """Register what changed since the session last looked."""
        svc = self.services
        seen = (svc.store.catalog_version, svc.roles.version, svc.grants.version)
        if seen == self._seen:
            return
        self.register({**svc.streams.catalog_tables(), **security_tables(svc)})
        self._seen = seen

    def register(self, tables: dict) -> None:
        schemas = self.services.store.live_schemas
        for name, table in tables.items():
            try:
                self.con.register(name, _conform(table, schemas[name]))
            except duckdb.Error:
                # an aborted transaction: the next statement after ROLLBACK registers again
                self._seen = None


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the live table's column types; durations stay durations, which DuckDB
    reads as the INTERVAL the view expects (Arrow casts no duration to an interval)."""
    if table.schema == schema:
        return table
    fields = [table.schema.field(i).with_name(f.name)
              if pa.types.is_duration(table.schema.field(i).type)
              and pa.types.is_interval(f.type) else f for i, f in enumerate(schema)]
    return table.rename_columns(schema.names).cast(pa.schema(fields))


def rows_table(store, name: str, rows: list) -> pa.Table:
    """The live table ``name`` holding ``rows`` (tuples in its columns' order)."""
    schema = store.live_schemas[name]
    return pa.table([pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)],
                    schema=schema)


def security_tables(services) -> dict:
    """``cq_roles``, ``cq_auth_members`` and ``cq_acl`` from the roles and the grants."""
    roles, grants = services.roles, services.grants
    everyone = roles.all()
    oid = {r.name: r.oid for r in everyone}
    role_rows = [(r.oid, r.name, r.superuser, r.inherit, r.createrole, r.superuser, r.login,
                  False, -1, "********" if r.verifier else None, None, r.superuser, None)
                 for r in everyone]
    members = [(oid[g], r.oid, oid.get(roles.bootstrap, 10), False)
               for r in everyone for g in r.member_of if g in oid]
    acl = []
    for key, entry in sorted(grants.relations.items()):
        schema, _, name = key.partition(".")
        owner = entry.get("owner") or roles.bootstrap
        acl.append((schema, name, oid.get(owner, 10), grants.aclitems(key)))
    return {"cq_roles": rows_table(services.store, "cq_roles", role_rows),
            "cq_auth_members": rows_table(services.store, "cq_auth_members", members),
            "cq_acl": rows_table(services.store, "cq_acl", acl)}

