"""Running the role and privilege commands (``role_syntax.py``) with PostgreSQL's rules: who may
create, alter and drop roles, grant what on which relations, and give them away. Like stream
DDL they take effect at once, outside any transaction."""
from __future__ import annotations

from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.security.privileges import RELATION_PRIVILEGES, SCHEMA_PRIVILEGES, must_own
from gateway.security.roles import PUBLIC
from gateway.syntax import role_syntax as R
from gateway.tables import settings as S


def _me(session, name: str) -> str:
    """A role name as written, CURRENT_USER (and SESSION_USER) being the session's."""
    return session.user if name == "current_user" else name


def _connected(services, role: str) -> bool:
    """Whether a session is logged in as ``role`` (sessions know their role by name)."""
    return any(s.user == role for s in list(services.sessions.values()))


def _may_manage(session, target_superuser: bool, action: str) -> None:
    """Superusers manage every role; CREATEROLE roles manage roles that are not superusers."""
    roles = session.services.roles
    if roles.is_superuser(session.user):
        return
    me = roles.get(session.user)
    if target_superuser or me is None or not me.createrole:
        what = "superusers" if target_superuser else "roles"
        raise E.InsufficientPrivilege(f"permission denied to {action} {what}",
                                      hint="Only superusers, and roles with CREATEROLE for "
                                           "roles that are not superusers, may do this.")


def _may_grant_membership(session, group: str) -> None:
    """Membership in a superuser role or a predefined one (server files, signals) is only a
    superuser's to give: it would hand over what CREATEROLE alone cannot."""
    roles = session.services.roles
    target = roles.get(group)
    if target is None:
        raise E.UndefinedObject(f'role "{group}" does not exist')
    _may_manage(session, target.superuser or target.predefined, "grant")


def _attributes(options: tuple) -> dict:
    out = {}
    for key, value in options:
        if key in ("superuser", "login", "createrole", "inherit", "password"):
            out[key] = value
    return out


async def create_role(session, p, params):
    """CREATE ROLE / USER / GROUP."""
    cmd, roles = p.command, session.services.roles
    attrs = _attributes(cmd.options)
    _may_manage(session, bool(attrs.get("superuser")), "create")
    in_roles = [g for k, v in cmd.options if k == "in_role" for g in v]
    members = [m for k, v in cmd.options if k in ("role", "admin") for m in v]
    for group in in_roles:
        _may_grant_membership(session, group)
    await session.in_thread(lambda: roles.create(cmd.name, in_roles=in_roles, **attrs))
    for member in members:
        roles.grant_membership(cmd.name, _me(session, member))
    return Done("CREATE ROLE")


async def alter_role(session, p, params):
    """ALTER ROLE: attributes, password, RENAME TO."""
    cmd, svc = p.command, session.services
    name = _me(session, cmd.name)
    target = svc.roles.get(name)
    if target is None:
        raise E.UndefinedObject(f'role "{name}" does not exist')
    if cmd.rename_to is not None:
        if name == session.user:
            raise E.FeatureNotSupported("session user cannot be renamed")
        if _connected(svc, name):      # sessions know their role by name
            raise E.ObjectInUse(f'role "{name}" cannot be renamed while it is connected')
        _may_manage(session, target.superuser, "rename")

        def rename():
            svc.roles.rename(name, cmd.rename_to)
            svc.grants.role_renamed(name, cmd.rename_to)
        await session.in_thread(rename)
        return Done("ALTER ROLE")
    attrs = _attributes(cmd.options)
    own_password = name == session.user and set(attrs) <= {"password"}
    if not own_password:
        _may_manage(session, target.superuser or bool(attrs.get("superuser")), "alter")
    if any(k in ("in_role", "role", "admin") for k, _ in cmd.options):
        raise E.SyntaxError_("ALTER ROLE takes no IN ROLE or ROLE; use GRANT role TO role")
    await session.in_thread(lambda: svc.roles.alter(name, **attrs))
    return Done("ALTER ROLE")


async def alter_role_setting(session, p, params):
    """ALTER ROLE … SET / RESET: the role's sessions start with that setting (PostgreSQL's
    pg_db_role_setting), before their own startup options. A role may set its own; others'
    need CREATEROLE (a superuser's, superuser)."""
    cmd, svc = p.command, session.services
    name = _me(session, cmd.name)
    target = svc.roles.get(name)
    if target is None:
        raise E.UndefinedObject(f'role "{name}" does not exist')
    if name != session.user:
        _may_manage(session, target.superuser, "alter")
    key = cmd.setting
    value = cmd.value
    if key is not None and S.canonical(key) in S.READ_ONLY | {"session_authorization"}:
        raise E.PgError(f'parameter "{key}" cannot be set', sqlstate="55P02")
    if key is not None:
        if value is not None:                # as SET would take it in the role's sessions
            key, value = session.checked_setting(key, value, for_user=name)
        elif not S.is_known(key):
            raise E.UndefinedParameter(f'unrecognized configuration parameter "{key}"')
        else:
            key = S.canonical(key)
    await session.in_thread(lambda: svc.roles.set_default(name, key, value))
    return Done("ALTER ROLE")


async def drop_role(session, p, params):
    """DROP ROLE: not the current user, a connected role, or one that owns something."""
    cmd, svc = p.command, session.services
    for name in cmd.names:
        target = svc.roles.get(name)
        if target is None:
            if cmd.if_exists:
                session.notices.append(("NOTICE", "00000",
                                        f'role "{name}" does not exist, skipping'))
                continue
            raise E.UndefinedObject(f'role "{name}" does not exist')
        if name == session.user:
            raise E.ObjectInUse("current user cannot be dropped")
        if _connected(svc, name):
            raise E.ObjectInUse(f'role "{name}" cannot be dropped while it is connected')
        _may_manage(session, target.superuser, "drop")
        owned = svc.grants.owned_by(name)
        if owned:
            raise E.DependentObjectsStillExist(
                f'role "{name}" cannot be dropped because some objects depend on it',
                detail="\n".join(f"owner of {k}" for k in owned[:10]),
                hint="Drop them first, or give them to another role with ALTER … OWNER TO.")
        await session.in_thread(svc.roles.drop, name)
        await session.in_thread(svc.grants.role_dropped, name)
    return Done("DROP ROLE")


def _relations(session, cmd) -> list:
    """(kind, key, name) of what a GRANT names, each checked to exist."""
    svc = session.services
    if cmd.kind == "schema":
        for schema in cmd.objects:
            if not access.exists(session.ctx, "schema", None, None, schema):
                raise E.UndefinedObject(f'schema "{schema}" does not exist', sqlstate="3F000")
        return [("schema", s.lower(), s) for s in cmd.objects]
    out = []
    if cmd.kind == "all_tables":
        for schema in cmd.objects:
            rows = session.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND "
                "schema_name = ? AND NOT temporary UNION ALL SELECT view_name FROM "
                "duckdb_views() WHERE database_name = ? AND schema_name = ? AND NOT internal "
                "AND NOT temporary", [svc.store.name, schema] * 2).fetchall()
            out += [("table", access.key(schema, r[0]), r[0]) for r in rows]
            out += [(o.kind, o.key, o.name) for o in svc.streams.objects.values()
                    if o.schema.lower() == schema.lower() and o.kind != "wrapper"]
        return out
    for schema, name in cmd.objects:
        out.append((_relation(session, schema, name), access.key(schema, name), name))
    return out


def _relation(session, schema: str | None, name: str) -> str:
    """The kind of the relation named (42P01 when there is none)."""
    obj = session.services.streams.get(schema, name, kinds=("stream", "window", "derived"))
    if obj is None and not session.columns.of(schema, name):
        raise E.UndefinedTable(f'relation "{name}" does not exist')
    return obj.kind if obj else "table"


async def grant_privileges(session, p, params):
    """GRANT / REVOKE privileges on relations or schemas: the owner's to give."""
    return Done(await session.in_thread(_grant_privileges, session, p.command))


def _grant_privileges(session, cmd) -> str:
    svc = session.services
    tag = "GRANT" if cmd.grant else "REVOKE"
    schema_kind = cmd.kind == "schema"
    privileges = sorted((SCHEMA_PRIVILEGES if schema_kind else RELATION_PRIVILEGES)
                        if "ALL" in cmd.privileges else set(cmd.privileges))
    grantees = [_me(session, g) for g in cmd.grantees]
    for g in grantees:
        if g != PUBLIC and svc.roles.get(g) is None:
            raise E.UndefinedObject(f'role "{g}" does not exist')
    targets = _relations(session, cmd)
    for kind, key, name in targets:
        owner = svc.grants.schema_owner(key) if schema_kind else svc.grants.owner(key)
        if not svc.roles.has_privs_of(session.user, owner):
            raise must_own(kind, name)
    if not cmd.grant_option_only:       # no role holds a grant option: nothing to take back
        svc.grants.change([key for _, key, _ in targets], privileges, grantees, cmd.grant,
                          schema=schema_kind)
    return tag


async def grant_roles(session, p, params):
    """GRANT / REVOKE role membership."""
    cmd, svc = p.command, session.services
    for group in cmd.roles:
        _may_grant_membership(session, group)
        for member in cmd.members:
            member = _me(session, member)
            if cmd.grant:
                svc.roles.grant_membership(group, member)
            elif not svc.roles.revoke_membership(group, member):
                session.notices.append(("WARNING", "01000", f'role "{member}" has not been '
                                        f'granted membership in role "{group}"'))
    return Done("GRANT ROLE" if cmd.grant else "REVOKE ROLE")


async def alter_owner(session, p, params):
    """ALTER … OWNER TO: the owner (or a superuser) gives an object to a role it is a member of."""
    cmd, svc = p.command, session.services
    owner = _me(session, cmd.owner)
    if svc.roles.get(owner) is None:
        raise E.UndefinedObject(f'role "{owner}" does not exist')
    if cmd.kind == "schema":
        if not await session.in_thread(access.exists, session.ctx, "schema", None, None, cmd.name):
            raise E.UndefinedObject(f'schema "{cmd.name}" does not exist', sqlstate="3F000")
        key, current = cmd.name.lower(), svc.grants.schema_owner(cmd.name)
    else:
        key = access.key(cmd.schema, cmd.name)
        _relation(session, cmd.schema, cmd.name)
        current = svc.grants.owner(key)
    me = session.user
    if not svc.roles.is_superuser(me):
        if not svc.roles.has_privs_of(me, current):
            raise must_own(cmd.kind, cmd.name)
        if not svc.roles.is_member_of(me, owner):
            raise E.InsufficientPrivilege(f'must be able to SET ROLE "{owner}"')
    if cmd.kind == "schema":
        svc.grants.set_schema_owner(cmd.name, owner)
    else:
        svc.grants.set_owner(key, owner)
    return Done(f"ALTER {cmd.kind.upper()}")


HANDLERS = {R.CreateRole: create_role, R.AlterRole: alter_role,
            R.AlterRoleSetting: alter_role_setting, R.DropRole: drop_role,
            R.GrantPrivileges: grant_privileges, R.GrantRoles: grant_roles,
            R.AlterOwner: alter_owner}
