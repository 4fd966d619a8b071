"""Roles as PostgreSQL has them (attributes, SCRAM-SHA-256 verifiers, memberships), kept in
``<data_dir>/catalog/roles.json``; every change is written atomically before it returns and
raises PostgreSQL's SQLSTATE and message when PostgreSQL would refuse it."""
from __future__ import annotations

import dataclasses
import threading
from collections import deque
from dataclasses import dataclass, field

from gateway import catalog_files
from gateway.pgwire import errors as E
from gateway.pgwire.scram import check_password, make_verifier, parse_verifier

DOCUMENT = "roles.json"
BOOTSTRAP_OID = 10                 # the superuser initdb makes
FIRST_NORMAL_OID = 16384           # PostgreSQL's FirstNormalObjectId
READ_SERVER_FILES, WRITE_SERVER_FILES = "pg_read_server_files", "pg_write_server_files"
SIGNAL_BACKEND = "pg_signal_backend"
READ_ALL_STATS = "pg_read_all_stats"   # every session's SQL, the console and EXPLAIN ANALYZE
PREDEFINED = {READ_ALL_STATS: 3375, SIGNAL_BACKEND: 4200, READ_SERVER_FILES: 4569,
              WRITE_SERVER_FILES: 4570}
PUBLIC = "public"
# names the grammar takes for something else (RoleSpec's PUBLIC and NONE)
_GRAMMAR_RESERVED = (PUBLIC, "none")
UNCHANGED = object()               # alter(password=UNCHANGED) keeps the verifier


@dataclass
class Role:
    name: str
    oid: int
    superuser: bool = False
    login: bool = False
    createrole: bool = False
    inherit: bool = True
    verifier: str | None = None
    member_of: list = field(default_factory=list)      # names of the roles it is a member of
    config: dict = field(default_factory=dict)         # ALTER ROLE … SET: session defaults

    @property
    def predefined(self) -> bool:
        return PREDEFINED.get(self.name) == self.oid


def load_passwords(path: str | None, inline: str | None = None) -> dict:
    """user -> password from a file of ``user:password`` lines (``#`` comments) and an inline
    ``user:password,user2:password2``; the password is everything after the first colon."""
    lines = []
    if path:
        with open(path, encoding="utf-8") as f:
            lines = [ln.strip() for ln in f if not ln.lstrip().startswith("#")]
    out = {}
    for item in lines + (inline or "").split(","):
        if ":" in item:
            user, password = item.split(":", 1)
            out[user.strip()] = password
    return out


def _reserved(name: str, detail: str = 'Role names starting with "pg_" are reserved.'):
    """42939 if ``name`` is not free for a role: PUBLIC and NONE, or the pg_ prefix."""
    if name in _GRAMMAR_RESERVED:
        return E.ReservedName(f'role name "{name}" is reserved')
    if name.startswith("pg_"):
        return E.ReservedName(f'role name "{name}" is reserved', detail=detail)
    return None


def _missing(name: str) -> E.PgError:
    return E.UndefinedObject(f'role "{name}" does not exist')


def _secret(password: str | None) -> str | None:
    """What is stored for a password: a SCRAM verifier. An empty password is none (PostgreSQL:
    "empty string is not a valid password, clearing password"); a verifier given as the
    password (from a dump) is kept as it is."""
    if not password:
        return None
    try:
        parse_verifier(password)
        return password
    except ValueError:
        return make_verifier(password)


class Roles:
    """The roles of one data directory (``data_dir=None``: in memory only, for tests). Reads
    return copies; ``version`` grows with every change, for caches of catalog views."""

    def __init__(self, data_dir: str | None, superuser: str = "cq"):
        self.data_dir = data_dir
        self._lock = threading.Lock()
        self.version = 0
        saved = catalog_files.load(data_dir, DOCUMENT) if data_dir else None
        if saved is None:
            saved = {"next_oid": FIRST_NORMAL_OID, "roles": [
                dataclasses.asdict(Role(superuser, BOOTSTRAP_OID, superuser=True, login=True,
                                        createrole=True))]}
        self._next_oid = saved["next_oid"]
        self._roles = {d["name"]: Role(**d) for d in saved["roles"]}
        missing = [n for n in PREDEFINED if n not in self._roles]
        for name in missing:                # a fresh directory, or one from before a new one
            self._roles[name] = Role(name, PREDEFINED[name])
        if missing:
            self._save()

    # ------------------------------------------------------------------ questions
    def get(self, name: str) -> Role | None:
        """The role named exactly ``name`` (callers fold unquoted identifiers), a copy."""
        with self._lock:
            role = self._roles.get(name)
            return _copy(role) if role else None

    def all(self) -> list[Role]:
        with self._lock:
            return sorted((_copy(r) for r in self._roles.values()), key=lambda r: r.oid)

    @property
    def bootstrap(self) -> str:
        """The bootstrap superuser's name (it may have been renamed)."""
        with self._lock:
            return next(r.name for r in self._roles.values() if r.oid == BOOTSTRAP_OID)

    def is_superuser(self, name: str) -> bool:
        with self._lock:
            role = self._roles.get(name)
            return role is not None and role.superuser

    def has_privs_of(self, member: str, group: str) -> bool:
        """Whether ``member`` has ``group``'s privileges: it is ``group``, a superuser, or a
        member through roles that inherit; everyone has PUBLIC's."""
        if group == PUBLIC:
            return True
        with self._lock:
            role = self._roles.get(member)
            if role is not None and role.superuser:
                return True
            return group in self._reachable(member, inherit_only=True)

    def sees_activity_of(self, viewer: str, owner: str) -> bool:
        """Whether ``viewer`` may see what ``owner``'s sessions run (their SQL, their query's
        plan and counters): with ``owner``'s privileges, or pg_read_all_stats's."""
        return self.has_privs_of(viewer, owner) or self.has_privs_of(viewer, READ_ALL_STATS)

    def is_member_of(self, member: str, group: str) -> bool:
        """Whether ``member`` is ``group`` or a member of it, directly or not (whatever INHERIT
        says, and superusers are not members of everything)."""
        with self._lock:
            return group in self._reachable(member, inherit_only=False)

    def _reachable(self, member: str, inherit_only: bool) -> set:
        seen, todo = {member}, deque([member])
        while todo:
            role = self._roles.get(todo.popleft())
            if role is None or (inherit_only and not role.inherit):
                continue
            for group in role.member_of:
                if group not in seen:
                    seen.add(group)
                    todo.append(group)
        return seen

    # ------------------------------------------------------------------ changes
    def create(self, name: str, *, superuser: bool = False, login: bool = False,
               createrole: bool = False, inherit: bool = True, password: str | None = None,
               in_roles=()) -> Role:
        error = _reserved(name)
        if error:
            raise error
        secret = _secret(password)          # the slow part, outside the lock
        with self._lock:
            if name in self._roles:
                raise E.DuplicateObject(f'role "{name}" already exists')
            for group in in_roles:
                if group not in self._roles:
                    raise _missing(group)
            role = Role(name, self._next_oid, superuser=superuser, login=login,
                        createrole=createrole, inherit=inherit, verifier=secret,
                        member_of=list(dict.fromkeys(in_roles)))
            self._next_oid += 1
            self._roles[name] = role
            self._save()
            return _copy(role)

    def alter(self, name: str, *, superuser: bool | None = None, login: bool | None = None,
              createrole: bool | None = None, inherit: bool | None = None,
              password=UNCHANGED) -> Role:
        """Changes the attributes given; ``password=None`` clears the password."""
        if name.startswith("pg_"):
            raise _reserved(name, "Cannot alter reserved roles.")
        secret = UNCHANGED if password is UNCHANGED else _secret(password)
        with self._lock:
            role = self._get(name)
            if superuser is False and role.oid == BOOTSTRAP_OID:
                raise E.InsufficientPrivilege(
                    "permission denied to alter role",
                    detail="The bootstrap user must have the SUPERUSER attribute.")
            changes = {"superuser": superuser, "login": login, "createrole": createrole,
                       "inherit": inherit}
            for attribute, value in changes.items():
                if value is not None:
                    setattr(role, attribute, value)
            if secret is not UNCHANGED:
                role.verifier = secret
            self._save()
            return _copy(role)

    def set_default(self, name: str, setting: str | None, value: str | None) -> Role:
        """ALTER ROLE … SET (``value``) or RESET (None) of one setting, or (``setting`` None)
        RESET ALL."""
        with self._lock:
            role = self._get(name)
            if setting is None:
                role.config = {}
            elif value is None:
                role.config.pop(setting, None)
            else:
                role.config[setting] = value
            self._save()
            return _copy(role)

    def rename(self, old: str, new: str) -> Role:
        # PostgreSQL clears an MD5 password on rename, since the user name is its salt; a SCRAM
        # verifier does not depend on the name, so it stays.
        with self._lock:
            role = self._get(old)
            error = _reserved(old) if old.startswith("pg_") else None
            error = error or _reserved(new)
            if error:
                raise error
            if new in self._roles:
                raise E.DuplicateObject(f'role "{new}" already exists')
            del self._roles[old]
            role.name = new
            self._roles[new] = role
            for other in self._roles.values():
                other.member_of = [new if g == old else g for g in other.member_of]
            self._save()
            return _copy(role)

    def drop(self, name: str, if_exists: bool = False) -> bool:
        """False when there was no such role and ``if_exists`` (PostgreSQL's NOTICE is the
        caller's; so are "current user cannot be dropped" and objects the role owns)."""
        with self._lock:
            role = self._roles.get(name)
            if role is None:
                if if_exists:
                    return False
                raise _missing(name)
            if role.oid == BOOTSTRAP_OID or role.predefined:
                raise E.DependentObjectsStillExist(
                    f"cannot drop role {name} because it is required by the database system")
            del self._roles[name]
            for other in self._roles.values():
                if name in other.member_of:
                    other.member_of.remove(name)
            self._save()
            return True

    def grant_membership(self, group: str, member: str) -> bool:
        """Makes ``member`` a member of ``group``; False if it already was one."""
        with self._lock:
            self._get(group)
            role = self._get(member)
            # no loops, not even a role in itself; superuserness does not count here, or no
            # one could be granted a superuser role
            if member in self._reachable(group, inherit_only=False):
                raise E.InvalidGrantOperation(f'role "{group}" is a member of role "{member}"')
            if group in role.member_of:
                return False
            role.member_of.append(group)
            self._save()
            return True

    def revoke_membership(self, group: str, member: str) -> bool:
        """False if ``member`` was not a member of ``group`` (PostgreSQL warns)."""
        with self._lock:
            self._get(group)
            role = self._get(member)
            if group not in role.member_of:
                return False
            role.member_of.remove(group)
            self._save()
            return True

    def seed(self, passwords: dict) -> None:
        """Each ``user: password`` (``--users``, ``--users-file``) as a LOGIN role with that
        password: created when missing, its verifier replaced when the password changed."""
        for user, password in passwords.items():
            role = self.get(user)
            if role is None:
                self.create(user, login=True, password=password)
            elif not check_password(role.verifier, password):
                self.alter(user, password=password)

    # ------------------------------------------------------------------ internals
    def _get(self, name: str) -> Role:
        role = self._roles.get(name)
        if role is None:
            raise _missing(name)
        return role

    def _save(self) -> None:
        """Under the lock: the catalog file first, then the version others cache by."""
        if self.data_dir:
            catalog_files.save(self.data_dir, DOCUMENT, {
                "next_oid": self._next_oid,
                "roles": [dataclasses.asdict(r)
                          for r in sorted(self._roles.values(), key=lambda r: r.oid)]})
        self.version += 1


def _copy(role: Role) -> Role:
    return dataclasses.replace(role, member_of=list(role.member_of), config=dict(role.config))
