"""Roles and privileges as PostgreSQL spells them, read from the lexer's tokens into typed
commands: CREATE/ALTER/DROP ROLE (USER, GROUP), GRANT/REVOKE of privileges and of roles, and
ALTER … OWNER TO. Other CREATE/ALTER/DROP statements read as None and go to the translator."""
from __future__ import annotations

from dataclasses import dataclass

from gateway.pgwire import errors as E
from gateway.security.privileges import RELATION_PRIVILEGES, SCHEMA_PRIVILEGES
from gateway.syntax.token_reader import TokenReader


class _RoleCommand:
    returns_rows = False
    allowed_when_failed = False


@dataclass(frozen=True)
class CreateRole(_RoleCommand):
    name: str
    options: tuple          # ((option, value), …) in the order written


@dataclass(frozen=True)
class AlterRole(_RoleCommand):
    name: str
    options: tuple
    rename_to: str | None = None


@dataclass(frozen=True)
class AlterRoleSetting(_RoleCommand):
    """ALTER ROLE name SET setting = value (value None: RESET, or SET … TO DEFAULT)."""
    name: str
    setting: str | None
    value: str | None
    reset_all: bool = False


@dataclass(frozen=True)
class DropRole(_RoleCommand):
    names: tuple
    if_exists: bool


@dataclass(frozen=True)
class GrantPrivileges(_RoleCommand):
    grant: bool             # False: REVOKE
    privileges: tuple       # upper-case names; ("ALL",) for ALL [PRIVILEGES]
    kind: str               # table | schema | all_tables (ALL TABLES IN SCHEMA)
    objects: tuple          # (schema | None, name) for tables; schema names otherwise
    grantees: tuple         # role names, "public" for PUBLIC
    grant_option_only: bool = False   # REVOKE GRANT OPTION FOR …


@dataclass(frozen=True)
class GrantRoles(_RoleCommand):
    grant: bool
    roles: tuple
    members: tuple


@dataclass(frozen=True)
class AlterOwner(_RoleCommand):
    kind: str               # the word after ALTER: table, stream, view, window, schema, …
    schema: str | None
    name: str
    owner: str


_ROLE_WORDS = ("role", "user", "group")
_FLAGS = {"superuser": ("superuser", True), "nosuperuser": ("superuser", False),
          "login": ("login", True), "nologin": ("login", False),
          "createrole": ("createrole", True), "nocreaterole": ("createrole", False),
          "inherit": ("inherit", True), "noinherit": ("inherit", False),
          # accepted as PostgreSQL does, with no effect in cqgate
          "createdb": ("createdb", True), "nocreatedb": ("createdb", False),
          "replication": ("replication", False), "noreplication": ("replication", False),
          "bypassrls": ("bypassrls", False), "nobypassrls": ("bypassrls", False)}


def _role_name(r: TokenReader) -> str:
    tok = r.peek()
    if tok is not None and tok.is_word("current_user", "session_user", "current_role"):
        r.take()
        return "current_user"
    return r.name()


def _names(r: TokenReader, read=_role_name) -> tuple:
    out = [read(r)]
    while r.symbol(","):
        out.append(read(r))
    return tuple(out)


def _role_options(r: TokenReader) -> tuple:
    r.accept("with")
    options = []
    while not r.at_end():
        word = r.take()
        key = word.value.lower() if word.kind == "word" else None
        if key in _FLAGS:
            options.append(_FLAGS[key])
        elif key == "encrypted" or key == "password":
            if key == "encrypted":
                r.expect("password")
            tok = r.take()
            if tok.is_word("null"):
                options.append(("password", None))
            elif tok.kind == "string":
                options.append(("password", tok.value))
            else:
                r.error(tok)
        elif key == "connection":
            r.expect("limit")
            r.take()
        elif key == "valid":
            r.expect("until")
            r.take()
        elif key == "in":
            r.expect("role", "group")
            options.append(("in_role", _names(r)))
        elif key in ("role", "admin", "user"):
            options.append(("role" if key != "admin" else "admin", _names(r)))
        elif key == "sysid":
            r.take()
        else:
            r.error(word)
    return tuple(options)


def _create(r: TokenReader):
    word = r.accept(*_ROLE_WORDS)
    if word is None:
        return None
    name = r.name()
    options = _role_options(r)
    if word == "user" and not any(k == "login" for k, _ in options):
        options = (("login", True),) + options     # CREATE USER is CREATE ROLE … LOGIN
    return CreateRole(name, options)


def _alter(r: TokenReader):
    word = r.accept(*_ROLE_WORDS)
    if word is None:
        return _alter_owner(r)
    name = _role_name(r)
    if r.accept("rename"):
        r.expect("to")
        new = r.name()
        r.end()
        return AlterRole(name, (), new)
    if r.accept("set"):
        setting = r.dotted()
        if not r.symbol("="):
            r.expect("to")
        first = r.peek()
        if first is None:
            r.error()
        if first.is_word("default") and r.peek(1) is None:
            return AlterRoleSetting(name, setting, None)
        rest = r.text_from(first)
        one = r.take()
        value = one.value if r.at_end() and one.kind in ("string", "name", "word") else rest
        r.i = len(r.toks)                   # the rest is the value, as SET takes it
        return AlterRoleSetting(name, setting, value)
    if r.accept("reset"):
        setting = None if r.accept("all") else r.dotted()
        r.end()
        return AlterRoleSetting(name, setting, None, reset_all=setting is None)
    return AlterRole(name, _role_options(r))


def _alter_owner(r: TokenReader):
    """ALTER <kind> name OWNER TO role; anything else is the translator's."""
    toks = r.toks
    if len(toks) < 5 or not (toks[-3].is_word("owner") and toks[-2].is_word("to")):
        return None
    kind = r.take().value.lower()
    if kind in ("materialized", "foreign"):
        kind = r.take().value.lower()
    parts = [r.name()]
    while r.symbol("."):
        parts.append(r.name())
    r.expect("owner")
    r.expect("to")
    owner = _role_name(r)
    r.end()
    schema = parts[-2] if len(parts) > 1 else None
    return AlterOwner(kind, schema, parts[-1], owner)


def _drop(r: TokenReader):
    if r.accept(*_ROLE_WORDS) is None:
        return None
    if_exists = False
    if r.accept("if"):
        r.expect("exists")
        if_exists = True
    names = _names(r, lambda rr: rr.name())
    r.end()
    return DropRole(names, if_exists)


def _privilege(r: TokenReader) -> str:
    tok = r.take()
    word = tok.value.upper() if tok.kind == "word" else ""
    if word == "ALL":
        r.accept("privileges")
        return "ALL"
    if word in RELATION_PRIVILEGES or word in SCHEMA_PRIVILEGES:
        if r.symbol("("):
            raise E.FeatureNotSupported("column privileges are not supported",
                                        hint="Grant on the whole table.")
        return word
    return r.error(tok)


def _relation(r: TokenReader) -> tuple:
    parts = [r.name()]
    while r.symbol("."):
        parts.append(r.name())
    return (parts[-2] if len(parts) > 1 else None, parts[-1])


def _grant_or_revoke(r: TokenReader, grant: bool):
    option_only = False
    if not grant and r.accept("grant"):
        r.expect("option")
        r.expect("for")
        option_only = True
    start = r.i
    while not r.at_end() and not r.at("on", "to", "from"):
        r.take()
    if r.at_end():
        r.error()
    if not r.at("on"):                              # GRANT role, … TO role, …
        r.i = start
        roles = _names(r, lambda rr: rr.name())
        r.expect("to" if grant else "from")
        members = _names(r)
        _grant_tail(r, grant, ("admin",))
        return GrantRoles(grant, roles, members)
    r.i = start
    privileges = [_privilege(r)]
    while r.symbol(","):
        privileges.append(_privilege(r))
    r.expect("on")
    if r.accept("all"):
        r.expect("tables", "streams")
        r.expect("in")
        r.expect("schema")
        kind, objects = "all_tables", _names(r, lambda rr: rr.name())
    elif r.accept("schema"):
        kind, objects = "schema", _names(r, lambda rr: rr.name())
    else:
        r.accept("table", "stream", "view", "window")
        kind, objects = "table", _names(r, _relation)
    r.expect("to" if grant else "from")
    grantees = _names(r, _grantee)
    _grant_tail(r, grant, ("grant",))
    allowed = SCHEMA_PRIVILEGES if kind == "schema" else RELATION_PRIVILEGES
    for p in privileges:
        if p != "ALL" and p not in allowed:
            raise E.InvalidGrantOperation(f"invalid privilege type {p} for "
                                          f"{'schema' if kind == 'schema' else 'relation'}")
    return GrantPrivileges(grant, tuple(privileges), kind, objects, grantees, option_only)


def _grantee(r: TokenReader) -> str:
    r.accept("group")
    tok = r.peek()
    if tok is not None and tok.is_word("public"):
        r.take()
        return "public"
    return _role_name(r)


def _grant_tail(r: TokenReader, grant: bool, option_words: tuple) -> None:
    if grant and r.accept("with"):
        r.expect(*option_words)
        r.expect("option")
        raise E.FeatureNotSupported("WITH GRANT OPTION and WITH ADMIN OPTION are not supported",
                                    hint="Owners and superusers grant; members cannot pass "
                                         "privileges on.")
    r.accept("granted")
    if r.accept("by"):
        _role_name(r)
    r.accept("cascade", "restrict")
    r.end()


READERS = {"create": _create, "alter": _alter, "drop": _drop,
           "grant": lambda r: _grant_or_revoke(r, True),
           "revoke": lambda r: _grant_or_revoke(r, False)}
