"""Roles kept in the data directory with SCRAM-SHA-256 verifiers, and logging in against them:
the verifier helpers, the catalog's rules with PostgreSQL's SQLSTATEs, and real clients against
servers on port 0 under each authentication method."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import stat

import asyncpg
import psycopg
import pytest

from gateway.pgwire.errors import PgError
from gateway.pgwire.scram import hmac_sha256
from gateway.security.roles import (Roles, check_password, load_passwords, make_verifier,
                                    parse_verifier)

VERIFIER = re.compile(r"SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]{24}\$[A-Za-z0-9+/=]{44}:"
                      r"[A-Za-z0-9+/=]{44}")


# --------------------------------------------------------------------------- verifiers
def test_verifier_in_postgresql_format():
    v = make_verifier("s3cret")
    assert VERIFIER.fullmatch(v)
    salt, iterations, stored_key, server_key = parse_verifier(v)
    assert (len(salt), iterations, len(stored_key), len(server_key)) == (16, 4096, 32, 32)
    assert make_verifier("s3cret") != v                          # a new salt each time
    assert check_password(v, "s3cret")
    assert not check_password(v, "s3cret ") and not check_password(v, "")


def test_scram_keys_give_rfc_7677s_exchange():
    """RFC 7677's example (user "user", password "pencil"): our keys make its ClientProof and
    ServerSignature."""
    salt, iterations = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096
    v = make_verifier("pencil", salt=salt, iterations=iterations)
    _, _, stored_key, server_key = parse_verifier(v)
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                    f"i=4096,c=biws,r={nonce}").encode()
    assert base64.b64encode(hmac_sha256(server_key, auth_message)).decode() == \
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_key = bytes(a ^ b for a, b in zip(proof, hmac_sha256(stored_key, auth_message)))
    assert hashlib.sha256(client_key).digest() == stored_key


@pytest.mark.parametrize("bad", [None, "", "md5abc", "SCRAM-SHA-256$4096:xx$yy:zz",
                                 "SCRAM-SHA-1$4096:AAAA$AAAA:AAAA"])
def test_parse_verifier_refuses_what_is_not_one(bad):
    with pytest.raises(ValueError):
        parse_verifier(bad)
    assert not check_password(bad, "anything")


def test_saslprep_as_libpq_applies_it():
    # RFC 4013's examples: a soft hyphen maps to nothing, a no-break space to a space
    assert check_password(make_verifier("I\u00adX"), "IX")
    assert check_password(make_verifier("a\u00a0b"), "a b")
    assert check_password(make_verifier("pässwörd"), "pässwörd")


def test_load_passwords(tmp_path):
    f = tmp_path / "users"
    f.write_text("# comment\ncarol:pa:ss\n\n  dave:x\n")
    assert load_passwords(str(f), "erin:1,frank:2") == \
        {"carol": "pa:ss", "dave": "x", "erin": "1", "frank": "2"}
    assert load_passwords(None, None) == {}


# --------------------------------------------------------------------------- the catalog
def _sqlstate(call, *args, **kw) -> PgError:
    with pytest.raises(PgError) as e:
        call(*args, **kw)
    return e.value


def test_a_fresh_data_directory(tmp_path):
    roles = Roles(str(tmp_path))
    got = {r.name: r for r in roles.all()}
    assert [r.name for r in roles.all()] == ["cq", "pg_read_all_stats", "pg_signal_backend",
                                            "pg_read_server_files",
                                            "pg_write_server_files"]     # by oid
    cq = got["cq"]
    assert (cq.oid, cq.superuser, cq.login, cq.createrole, cq.verifier) == \
        (10, True, True, True, None)
    assert {n: r.oid for n, r in got.items() if n != "cq"} == \
        {"pg_read_all_stats": 3375, "pg_signal_backend": 4200, "pg_read_server_files": 4569,
         "pg_write_server_files": 4570}
    assert not any(r.login or r.superuser for n, r in got.items() if n != "cq")
    assert roles.bootstrap == "cq" and roles.is_superuser("cq")
    path = tmp_path / "catalog" / "roles.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_roles_persist_with_verifiers_only(tmp_path):
    roles = Roles(str(tmp_path), superuser="admin")
    v0 = roles.version
    alice = roles.create("alice", login=True, password="correct horse")
    assert alice.oid == 16384 and roles.version > v0
    assert roles.create("bob").oid == 16385
    roles.drop("bob")
    again = Roles(str(tmp_path), superuser="ignored once the directory exists")
    assert again.bootstrap == "admin" and again.get("ignored once the directory exists") is None
    assert again.get("alice") == alice and check_password(alice.verifier, "correct horse")
    assert again.create("carol").oid == 16386                    # oids are not reused
    data = (tmp_path / "catalog" / "roles.json").read_bytes()
    assert b"correct horse" not in data and alice.verifier.encode() in data


def test_reads_are_copies():
    roles = Roles(None)
    roles.create("a")
    roles.get("a").member_of.append("cq")
    assert roles.get("a").member_of == [] and not roles.is_member_of("a", "cq")


def test_create_refusals():
    roles = Roles(None)
    roles.create("alice")
    e = _sqlstate(roles.create, "alice")
    assert (e.sqlstate, e.message) == ("42710", 'role "alice" already exists')
    e = _sqlstate(roles.create, "pg_x")
    assert (e.sqlstate, e.message, e.detail) == \
        ("42939", 'role name "pg_x" is reserved', 'Role names starting with "pg_" are reserved.')
    for name in ("public", "none"):
        e = _sqlstate(roles.create, name)
        assert (e.sqlstate, e.message) == ("42939", f'role name "{name}" is reserved')
    e = _sqlstate(roles.create, "bob", in_roles=["nobody"])
    assert (e.sqlstate, e.message) == ("42704", 'role "nobody" does not exist')
    assert roles.get("bob") is None
    assert roles.get("Alice") is None                            # names are case-sensitive


def test_alter_rename_drop():
    roles = Roles(None)
    roles.create("alice", password="one")
    v = roles.version
    a = roles.alter("alice", login=True, createrole=True)
    assert a.login and a.createrole and not a.superuser and roles.version > v
    assert check_password(a.verifier, "one")                     # password unchanged
    assert check_password(roles.alter("alice", password="two").verifier, "two")
    assert roles.alter("alice", password=None).verifier is None
    roles.alter("alice", password="three")
    roles.create("team")
    roles.grant_membership("team", "alice")
    renamed = roles.rename("alice", "alicia")
    assert check_password(renamed.verifier, "three")             # SCRAM survives a rename
    assert roles.get("alice") is None and roles.is_member_of("alicia", "team")
    assert roles.drop("alicia") and roles.get("alicia") is None
    assert roles.drop("alicia", if_exists=True) is False
    e = _sqlstate(roles.drop, "alicia")
    assert (e.sqlstate, e.message) == ("42704", 'role "alicia" does not exist')
    roles.create("x")
    e = _sqlstate(roles.rename, "x", "team")
    assert (e.sqlstate, e.message) == ("42710", 'role "team" already exists')
    e = _sqlstate(roles.rename, "x", "pg_y")
    assert (e.sqlstate, e.detail) == ("42939", 'Role names starting with "pg_" are reserved.')


def test_bootstrap_and_predefined_roles_are_kept():
    roles = Roles(None)
    e = _sqlstate(roles.drop, "cq")
    assert (e.sqlstate, e.message) == \
        ("2BP01", "cannot drop role cq because it is required by the database system")
    e = _sqlstate(roles.alter, "cq", superuser=False)
    assert (e.sqlstate, e.message) == ("42501", "permission denied to alter role")
    for name in ("pg_signal_backend", "pg_read_server_files", "pg_write_server_files"):
        assert _sqlstate(roles.drop, name).sqlstate == "2BP01"
        e = _sqlstate(roles.alter, name, login=True)
        assert (e.sqlstate, e.message, e.detail) == \
            ("42939", f'role name "{name}" is reserved', "Cannot alter reserved roles.")
        e = _sqlstate(roles.rename, name, "mine")
        assert (e.sqlstate, e.message) == ("42939", f'role name "{name}" is reserved')
    renamed = roles.rename("cq", "root")                         # PostgreSQL allows this
    assert roles.bootstrap == "root" and renamed.superuser


def test_membership_is_transitive_and_inherit_decides_privileges():
    roles = Roles(None)
    for name in ("a", "b", "c", "d"):
        roles.create(name)
    assert roles.grant_membership("b", "a") and roles.grant_membership("c", "b")
    assert roles.grant_membership("b", "a") is False             # already a member
    assert roles.is_member_of("a", "c") and roles.has_privs_of("a", "c")
    assert not roles.is_member_of("c", "a") and not roles.has_privs_of("c", "a")
    assert roles.is_member_of("d", "d") and roles.has_privs_of("d", "d")
    roles.alter("b", inherit=False)                              # a stops at b
    assert roles.has_privs_of("a", "b") and not roles.has_privs_of("a", "c")
    assert roles.is_member_of("a", "c")
    assert roles.has_privs_of("cq", "c") and not roles.is_member_of("cq", "c")
    assert roles.has_privs_of("d", "public") and roles.has_privs_of("nobody", "public")
    assert not roles.has_privs_of("nobody", "a") and not roles.is_superuser("nobody")
    assert roles.revoke_membership("b", "a") and not roles.is_member_of("a", "b")
    assert roles.revoke_membership("b", "a") is False
    roles.grant_membership("b", "a")
    roles.drop("b")                                              # its memberships go with it
    assert roles.get("a").member_of == [] and roles.get("c").member_of == []


def test_membership_loops_and_unknown_roles_are_refused():
    roles = Roles(None)
    for name in ("a", "b", "c"):
        roles.create(name)
    roles.grant_membership("b", "a")
    roles.grant_membership("c", "b")
    e = _sqlstate(roles.grant_membership, "a", "c")
    assert (e.sqlstate, e.message) == ("0LP01", 'role "a" is a member of role "c"')
    e = _sqlstate(roles.grant_membership, "a", "a")
    assert (e.sqlstate, e.message) == ("0LP01", 'role "a" is a member of role "a"')
    roles.alter("cq", superuser=True)
    assert roles.grant_membership("cq", "a")                     # a superuser role is grantable
    for group, member in (("zz", "a"), ("a", "zz")):
        e = _sqlstate(roles.grant_membership, group, member)
        assert (e.sqlstate, e.message) == ("42704", 'role "zz" does not exist')
        assert _sqlstate(roles.revoke_membership, group, member).sqlstate == "42704"


def test_seed_creates_or_updates_login_roles(tmp_path):
    roles = Roles(str(tmp_path))
    roles.seed({"cq": "root-pw", "alice": "pw1"})
    assert check_password(roles.get("cq").verifier, "root-pw") and roles.get("cq").superuser
    alice = roles.get("alice")
    assert alice.login and not alice.superuser and check_password(alice.verifier, "pw1")
    v = roles.version
    roles.seed({"alice": "pw1"})                                 # same password: no change
    assert roles.version == v and roles.get("alice").verifier == alice.verifier
    roles.seed({"alice": "pw2"})
    assert check_password(Roles(str(tmp_path)).get("alice").verifier, "pw2")


# --------------------------------------------------------------------------- logging in
def _refused(s, user: str, password: str | None = None) -> tuple[str, str]:
    """(SQLSTATE, message) of a refused login, seen by asyncpg (psycopg does not report the
    SQLSTATE of a failed connection), after checking that psycopg is refused alike."""
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(_dsn(s, user, password), connect_timeout=20)

    async def login():
        await asyncpg.connect(host="127.0.0.1", port=s.port, user=user, password=password,
                              database="cq", timeout=20)

    with pytest.raises(asyncpg.PostgresError) as e:
        asyncio.run(login())
    assert e.value.args[0] in str(refused.value)
    return e.value.sqlstate, e.value.args[0]


def _dsn(s, user: str, password: str | None = None) -> str:
    return f"host=127.0.0.1 port={s.port} user={user} dbname=cq" + \
        (f" password='{password}'" if password is not None else "")


def test_trust_admits_existing_login_roles_only(start_server, tmp_path):
    data = str(tmp_path / "data")
    Roles(data).create("nologin")
    s = start_server(data_dir=data)
    with psycopg.connect(s.dsn) as c:
        assert c.execute("SELECT current_user").fetchone() == ("cq",)
    assert _refused(s, "nobody") == ("28000", 'role "nobody" does not exist')
    assert _refused(s, "nologin") == ("28000", 'role "nologin" is not permitted to log in')
    assert _refused(s, "pg_signal_backend")[0] == "28000"
    names = [r.name for r in Roles(data).all()]
    assert names[0] == "cq" and "pg_read_server_files" in names


def test_scram_against_a_stored_verifier_survives_a_restart(start_server, tmp_path):
    data = str(tmp_path / "data")
    Roles(data).create("alice", login=True, password="wonder land")
    s = start_server("--auth", "scram-sha-256", data_dir=data)
    with psycopg.connect(_dsn(s, "alice", "wonder land")) as c:
        assert c.execute("SELECT current_user").fetchone() == ("alice",)
        # a verifier libpq makes itself is one we accept: the same format and SASLprep
        made = c.pgconn.encrypt_password("päss wörd".encode(), b"alice", b"scram-sha-256")
        assert check_password(made.decode(), "päss wörd")
    assert _refused(s, "alice", "wrong") == \
        ("28P01", 'password authentication failed for user "alice"')
    assert _refused(s, "nobody", "wonder land") == \
        ("28P01", 'password authentication failed for user "nobody"')   # as a wrong password
    assert _refused(s, "cq", "anything")[0] == "28P01"          # cq has no password
    s.stop()
    s = start_server("--auth", "scram-sha-256", data_dir=data)
    with psycopg.connect(_dsn(s, "alice", "wonder land")) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    path = os.path.join(data, "catalog", "roles.json")
    assert b"wonder land" not in open(path, "rb").read()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_users_flag_seeds_a_login_role(start_server, tmp_path):
    data = str(tmp_path / "data")
    s = start_server("--auth", "scram-sha-256", "--users", "cq2:pw,cq:root", data_dir=data)
    with psycopg.connect(_dsn(s, "cq2", "pw")) as c:
        assert c.execute("SELECT current_user").fetchone() == ("cq2",)
    with psycopg.connect(_dsn(s, "cq", "root")) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
    cq2 = Roles(data).get("cq2")
    assert cq2.login and not cq2.superuser and check_password(cq2.verifier, "pw")


@pytest.mark.parametrize("method", ["md5", "password"])
def test_md5_runs_scram_and_cleartext_checks_the_verifier(start_server, tmp_path, method):
    data = str(tmp_path / "data")
    Roles(data).create("alice", login=True, password="s3cret")
    Roles(data).create("ghost", password="s3cret")               # NOLOGIN
    s = start_server("--auth", method, data_dir=data)
    with psycopg.connect(_dsn(s, "alice", "s3cret")) as c:
        assert c.execute("SELECT current_user").fetchone() == ("alice",)
    assert _refused(s, "alice", "nope")[0] == "28P01"
    assert _refused(s, "ghost", "s3cret") == \
        ("28000", 'role "ghost" is not permitted to log in')    # the right password, no LOGIN


def test_superuser_flag_names_the_bootstrap_role(start_server, tmp_path):
    data = str(tmp_path / "data")
    s = start_server("--superuser", "admin", data_dir=data)
    with psycopg.connect(_dsn(s, "admin")) as c:
        assert c.execute("SELECT current_user").fetchone() == ("admin",)
    assert _refused(s, "cq")[0] == "28000"
    assert Roles(data).bootstrap == "admin"


def test_alter_role_set_gives_the_roles_sessions_their_defaults(start_server, tmp_path):
    """ALTER ROLE … SET, as BI tools that send no startup options need (Grafana): the role's
    sessions start in snapshot mode and RESET returns to it; the client's own options still
    win; a bad value is refused as SET refuses it, a memory bound above the server's as it
    would be for that role; RESET and RESET ALL take them back; it survives a restart."""
    data = str(tmp_path / "data")
    s = start_server(data_dir=data)
    with psycopg.connect(s.dsn, autocommit=True) as su:
        su.execute("CREATE ROLE dash LOGIN")
        su.execute("ALTER ROLE dash SET cq.mode = snapshot")
        su.execute("ALTER ROLE dash SET statement_timeout TO '30s'")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            su.execute("ALTER ROLE dash SET cq.engine = 'nowhere'")
        with pytest.raises(psycopg.errors.UndefinedObject):         # 42704
            su.execute("ALTER ROLE dash SET no_such_setting = 1")
        assert su.execute("SELECT rolconfig FROM pg_roles WHERE rolname = 'dash'").fetchone() \
            == (["cq.mode=snapshot", "statement_timeout=30s"],)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):     # above the server's
            su.execute("ALTER ROLE dash SET cq.result_memory = '64GB'")
        with pytest.raises(psycopg.errors.CantChangeRuntimeParam):
            su.execute("ALTER ROLE dash SET session_authorization = cq")
    with psycopg.connect(_dsn(s, "dash")) as c:
        assert c.execute("SHOW cq.mode").fetchone() == ("snapshot",)
        assert c.execute("SHOW statement_timeout").fetchone() == ("30s",)
        c.execute("SET cq.mode = continuous")
        c.execute("RESET cq.mode")                          # back to the role's default
        assert c.execute("SHOW cq.mode").fetchone() == ("snapshot",)
    with psycopg.connect(_dsn(s, "dash") + " options='-c cq.mode=continuous'") as c:
        assert c.execute("SHOW cq.mode").fetchone() == ("continuous",)
    with psycopg.connect(_dsn(s, "dash"), autocommit=True) as c:
        c.execute("ALTER ROLE dash RESET statement_timeout")        # its own: allowed
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("ALTER ROLE cq SET cq.mode = snapshot")
    s.stop()
    s = start_server(data_dir=data)
    with psycopg.connect(_dsn(s, "dash")) as c:
        assert c.execute("SHOW cq.mode").fetchone() == ("snapshot",)
        assert c.execute("SHOW statement_timeout").fetchone() == ("0",)
    with psycopg.connect(s.dsn, autocommit=True) as su:
        su.execute("ALTER ROLE dash RESET ALL")
    with psycopg.connect(_dsn(s, "dash")) as c:
        assert c.execute("SHOW cq.mode").fetchone() == ("continuous",)
