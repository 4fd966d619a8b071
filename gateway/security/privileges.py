"""Owners and privileges of relations (tables, views, streams, named windows, derived streams,
wrappers) and schemas, kept in ``<data_dir>/catalog/privileges.json``; ``allowed`` answers as
PostgreSQL does (superuser, owner or a member of it, a grant to the role, a role it inherits, or
PUBLIC), ``deny`` raises PostgreSQL's 42501."""
from __future__ import annotations

import copy
import threading

from gateway import catalog_files
from gateway.pgwire import errors as E
from gateway.security.roles import PUBLIC

DOCUMENT = "privileges.json"
# privilege -> its letter in an aclitem, in PostgreSQL's order (as psql's \dp shows it)
RELATION_PRIVILEGES = {"INSERT": "a", "SELECT": "r", "UPDATE": "w", "DELETE": "d",
                       "TRUNCATE": "D", "REFERENCES": "x", "TRIGGER": "t"}
SCHEMA_PRIVILEGES = {"USAGE": "U", "CREATE": "C"}
# what a fresh data directory's public schema grants (PostgreSQL 15: USAGE only)
PUBLIC_SCHEMA = {"owner": None, "acl": {PUBLIC: ["USAGE"]}}

_NOUNS = {"stream": "stream", "window": "view", "derived": "view", "view": "view",
          "table": "table", "wrapper": "wrapper", "schema": "schema"}


def deny(kind: str, name: str) -> E.PgError:
    """PostgreSQL's message: ``permission denied for table t``."""
    return E.InsufficientPrivilege(f"permission denied for {_NOUNS.get(kind, kind)} {name}")


def must_own(kind: str, name: str) -> E.PgError:
    """PostgreSQL's message: ``must be owner of table t``."""
    return E.InsufficientPrivilege(f"must be owner of {_NOUNS.get(kind, kind)} {name}")


class Grants:
    """Owners and grants by key: ``schema.name`` (lower case) for relations, the schema's name
    for schemas. A relation with no entry is the bootstrap superuser's, with no grants."""

    def __init__(self, data_dir: str, roles):
        self.data_dir, self.roles = data_dir, roles
        self._lock = threading.Lock()
        saved = catalog_files.load(data_dir, DOCUMENT) or {}
        # replaced whole on every change (copy on write), never changed in place: readers in
        # other threads iterate them without the lock
        self.relations: dict = saved.get("relations", {})
        self.schemas: dict = saved.get("schemas", {"public": copy.deepcopy(PUBLIC_SCHEMA)})
        self.version = 0

    # ------------------------------------------------------------------ questions
    def owner(self, key: str) -> str:
        entry = self.relations.get(key.lower())
        return (entry or {}).get("owner") or self.roles.bootstrap

    def schema_owner(self, schema: str) -> str:
        return (self.schemas.get(schema.lower()) or {}).get("owner") or self.roles.bootstrap

    def owns(self, role: str, key: str) -> bool:
        return self.roles.has_privs_of(role, self.owner(key))

    def allowed(self, role: str, privilege: str, key: str) -> bool:
        entry = self.relations.get(key.lower()) or {}
        return self._allowed(role, privilege, entry.get("owner") or self.roles.bootstrap,
                             entry.get("acl", {}))

    def schema_allowed(self, role: str, privilege: str, schema: str) -> bool:
        entry = self.schemas.get(schema.lower()) or {}
        return self._allowed(role, privilege, entry.get("owner") or self.roles.bootstrap,
                             entry.get("acl", {}))

    def _allowed(self, role: str, privilege: str, owner: str, acl: dict) -> bool:
        if self.roles.has_privs_of(role, owner):
            return True
        return any(privilege in privs and (grantee == PUBLIC
                                           or self.roles.has_privs_of(role, grantee))
                   for grantee, privs in acl.items())

    def aclitems(self, key: str) -> list | None:
        """The relation's privileges as PostgreSQL's aclitem strings (None: never granted,
        the owner's default), as ``pg_class.relacl`` shows them."""
        entry = self.relations.get(key.lower())
        if not entry or not entry.get("acl"):
            return None
        owner = entry.get("owner") or self.roles.bootstrap
        items = [f"{_acl_name(owner)}={''.join(RELATION_PRIVILEGES.values())}/{_acl_name(owner)}"]
        for grantee, privs in sorted(entry["acl"].items()):
            letters = "".join(letter for p, letter in RELATION_PRIVILEGES.items() if p in privs)
            if letters:
                items.append(f"{'' if grantee == PUBLIC else _acl_name(grantee)}={letters}/"
                             f"{_acl_name(owner)}")
        return items

    # ------------------------------------------------------------------ changes
    def _change(self, mutate) -> None:
        """``mutate(relations, schemas)`` on copies, which then replace the originals and are
        written: readers never see a half-made change nor a dict changing under them."""
        with self._lock:
            relations, schemas = copy.deepcopy(self.relations), copy.deepcopy(self.schemas)
            mutate(relations, schemas)
            catalog_files.save(self.data_dir, DOCUMENT,
                               {"relations": relations, "schemas": schemas})
            self.relations, self.schemas = relations, schemas
            self.version += 1

    def created(self, key: str, owner: str) -> None:
        """A new relation: its creator owns it, nobody else has a privilege on it."""
        self._change(lambda rel, sch: rel.update({key.lower(): {"owner": owner, "acl": {}}}))

    def schema_created(self, schema: str, owner: str) -> None:
        self._change(lambda rel, sch: sch.update({schema.lower(): {"owner": owner,
                                                                   "acl": {}}}))

    def dropped(self, key: str) -> None:
        if key.lower() in self.relations:
            self._change(lambda rel, sch: rel.pop(key.lower(), None))

    def schema_dropped(self, schema: str) -> None:
        """The schema and whatever was in it (DROP SCHEMA … CASCADE)."""
        prefix = schema.lower() + "."

        def mutate(rel, sch):
            sch.pop(schema.lower(), None)
            for k in [k for k in rel if k.startswith(prefix)]:
                del rel[k]
        self._change(mutate)

    def renamed(self, old: str, new: str) -> None:
        def mutate(rel, sch):
            if old.lower() in rel:
                rel[new.lower()] = rel.pop(old.lower())
        self._change(mutate)

    def set_owner(self, key: str, owner: str) -> None:
        self._change(lambda rel, sch: rel.setdefault(key.lower(), {"acl": {}}).update(
            {"owner": owner}))

    def set_schema_owner(self, schema: str, owner: str) -> None:
        """ALTER SCHEMA … OWNER TO: the grants on it stay."""
        self._change(lambda rel, sch: sch.setdefault(schema.lower(), {"acl": {}}).update(
            {"owner": owner}))

    def change(self, keys: list, privileges: list, grantees: list, grant: bool,
               schema: bool = False) -> None:
        """GRANT (``grant``) or REVOKE ``privileges`` on ``keys`` to or from ``grantees``."""
        def mutate(rel, sch):
            table = sch if schema else rel
            for key in keys:
                acl = table.setdefault(key.lower(), {"owner": None, "acl": {}}).setdefault(
                    "acl", {})
                for grantee in grantees:
                    held = set(acl.get(grantee, ()))
                    held = held | set(privileges) if grant else held - set(privileges)
                    if held:
                        acl[grantee] = sorted(held)
                    else:
                        acl.pop(grantee, None)
        self._change(mutate)

    def role_renamed(self, old: str, new: str) -> None:
        def mutate(rel, sch):
            for entry in list(rel.values()) + list(sch.values()):
                if entry.get("owner") == old:
                    entry["owner"] = new
                acl = entry.get("acl", {})
                if old in acl:
                    acl[new] = acl.pop(old)
        self._change(mutate)

    def owned_by(self, role: str) -> list:
        """Keys of what ``role`` owns (DROP ROLE refuses while there are any)."""
        return sorted([k for k, e in self.relations.items() if e.get("owner") == role]
                      + [k for k, e in self.schemas.items() if e.get("owner") == role])

    def role_dropped(self, role: str) -> None:
        """The role's grants go with it (PostgreSQL's DROP OWNED's part for privileges)."""
        def mutate(rel, sch):
            for entry in list(rel.values()) + list(sch.values()):
                entry.get("acl", {}).pop(role, None)
        self._change(mutate)


def _acl_name(role: str) -> str:
    """A role name as an aclitem spells it: quoted when it is not a plain lower-case name."""
    plain = role.replace("_", "").isalnum() and role == role.lower()
    return role if plain else '"' + role.replace('"', '""') + '"'
