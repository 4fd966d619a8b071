"""The live tables of the read-only catalog (``pg_catalog.LIVE_TABLES``) as one session sees
them: registered on its own DuckDB connection, again before a statement whenever streams,
roles or privileges changed, so each session reads current rows and no session can write them."""
from __future__ import annotations

import weakref

import duckdb

from gateway.security.access import SYSTEM_SCHEMAS, key
from gateway.security.privileges import RELATION_PRIVILEGES, SCHEMA_PRIVILEGES
from gateway.tables.store import conform


class LiveCatalog:
    """The live tables registered on one session's connection, and what they were made
    from (streams', roles' and grants' versions), so they are made again only on a change."""

    def __init__(self, con: duckdb.DuckDBPyConnection, services, user: str):
        self.con, self.services, self.user = con, services, user
        self._seen = None
        self._made = False

    def refresh(self) -> None:
        """Register what changed since the session last looked (everything, the first time
        a statement of the session reads the catalog: a session that never does pays nothing)."""
        svc = self.services
        if not self._made:
            # every live table exists from then on, empty until filled, so the views bind
            self.register({name: schema.empty_table()
                           for name, schema in svc.store.live_schemas.items()})
            self._made = True
        seen = (svc.store.catalog_version, svc.roles.version, svc.grants.version)
        if seen == self._seen:
            return
        self.register({**svc.streams.catalog_tables(), **security_tables(svc),
                       **self._own_privileges()})
        self._seen = seen

    def _own_privileges(self) -> dict:
        """``cq_me``, ``cq_my_roles``, ``cq_my_privileges`` and ``cq_my_schemas``: what the
        session's role may do, which has_table_privilege() and its kin read."""
        svc, user = self.services, self.user
        roles, grants, db = svc.roles, svc.grants, svc.store.name
        rels = self.con.execute(
            "SELECT schema_name, table_name, table_oid FROM duckdb_tables() "
            "WHERE database_name = ? AND NOT temporary UNION ALL "
            "SELECT schema_name, view_name, view_oid FROM duckdb_views() "
            "WHERE database_name = ? AND NOT internal AND NOT temporary", [db, db]).fetchall()
        rels += [(o.schema, o.name, o.oid) for o in svc.streams.objects.values()
                 if o.kind != "wrapper"]
        schemas = [r[0] for r in self.con.execute(
            "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ?", [db]).fetchall()]
        store = svc.store
        return {
            "cq_me": store.live_table("cq_me", [(user,)]),
            "cq_my_roles": store.live_table("cq_my_roles", [
                (r.name,) for r in roles.all() if roles.has_privs_of(user, r.name)]),
            "cq_my_privileges": store.live_table("cq_my_privileges", [
                (oid, [p for p in RELATION_PRIVILEGES if grants.allowed(user, p, key(s, n))])
                for s, n, oid in rels]),
            "cq_my_schemas": store.live_table("cq_my_schemas", [
                (s, [p for p in SCHEMA_PRIVILEGES if grants.schema_allowed(user, p, s)])
                for s in schemas] + [(s, ["USAGE"]) for s in SYSTEM_SCHEMAS])}

    def forget(self) -> None:
        """The connection's transaction rolled back, and with it what was registered in it:
        register everything again before the next statement that reads the catalog."""
        self._made, self._seen = False, None

    def register(self, tables: dict) -> None:
        schemas = self.services.store.live_schemas
        for name, table in tables.items():
            try:
                self.con.register(name, conform(table, schemas[name]))
            except duckdb.Error:
                # an aborted transaction: the next statement after ROLLBACK registers again
                self._seen = None


# grants -> ((roles' version, grants' version), tables): made once per change, for all sessions
_SECURITY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def security_tables(services) -> dict:
    """``cq_roles``, ``cq_auth_members`` and ``cq_acl`` from the roles and the grants, made
    again only when either changed (every session registers the same tables)."""
    roles, grants = services.roles, services.grants
    versions = (roles.version, grants.version)
    made = _SECURITY.get(grants)
    if made is None or made[0] != versions:
        made = _SECURITY[grants] = (versions, _security_rows(services))
    return made[1]


def _security_rows(services) -> dict:
    roles, grants = services.roles, services.grants
    everyone = roles.all()
    oid = {r.name: r.oid for r in everyone}
    role_rows = [(r.oid, r.name, r.superuser, r.inherit, r.createrole, r.superuser, r.login,
                  False, -1, "********" if r.verifier else None, None, r.superuser,
                  [f"{k}={v}" for k, v in r.config.items()] or None)
                 for r in everyone]
    members = [(oid[g], r.oid, oid.get(roles.bootstrap, 10), False)
               for r in everyone for g in r.member_of if g in oid]
    acl = []
    for key, entry in sorted(grants.relations.items()):
        schema, _, name = key.partition(".")
        owner = entry.get("owner") or roles.bootstrap
        acl.append((schema, name, oid.get(owner, 10), grants.aclitems(key)))
    return {"cq_roles": services.store.live_table("cq_roles", role_rows),
            "cq_auth_members": services.store.live_table("cq_auth_members", members),
            "cq_acl": services.store.live_table("cq_acl", acl)}
