"""The sans-I/O protocol core driven with bytes and no sockets: startup with and without
SSLRequest, trust/cleartext/md5/SCRAM authentication, the simple and extended query cycles,
discarding until Sync after an error, COPY IN, portal suspension, and replays of the frontend
bytes real clients send (tests/fixtures/client_traffic)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import pathlib
import struct

import pytest

from gateway.pgwire import messages as M
from gateway.pgwire.errors import PgError, QueryCanceled, UndefinedTable
from gateway.pgwire.protocol import (Authenticated, CopyInDone, CopyInFailed, Fatal,
                                     ProtocolStateError, ServerProtocol, StartTLS, State)
from gateway.security.roles import Roles
from pgwire import bind, cstr, error_fields, execute, flush, msg, parse, query, startup, sync

TRAFFIC = pathlib.Path(__file__).parent / "fixtures" / "client_traffic"
SSL_REQUEST = struct.pack("!ii", 8, 80877103)
GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)
REPORTED = [("server_version", "16.0"), ("client_encoding", "UTF8")]
# the bootstrap superuser cq, alice with a password, and postgres, whom the captured clients are
ROLES = Roles(None)
ROLES.create("alice", login=True, password="s3cret")
ROLES.create("postgres", login=True)
ROLES.create("group_only")                                      # NOLOGIN


def messages(data: bytes) -> list:
    """Backend bytes → [(tag, body)]."""
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("!i", data, pos + 1)
        out.append((data[pos:pos + 1], bytes(data[pos + 5:pos + 1 + n])))
        pos += 1 + n
    return out


def tags(data: bytes) -> str:
    return "".join(t.decode() for t, _ in messages(data))


def password(payload: bytes) -> bytes:
    return msg(b"p", payload)


def opened(core: ServerProtocol, user: str = "cq") -> ServerProtocol:
    """The core after startup (trust) and the session's opening; its output drained."""
    events = core.receive_data(startup(user))
    assert events == [Authenticated(user, {"user": user})]
    core.session_started(7, 1234, REPORTED)
    core.data_to_send()
    return core


# --------------------------------------------------------------------------- startup
def test_startup_without_ssl_request():
    core = ServerProtocol(roles=ROLES)
    assert core.receive_data(startup("alice", database="db")) == \
        [Authenticated("alice", {"user": "alice", "database": "db"})]
    assert core.state is State.AUTHENTICATED and core.data_to_send() == b""
    core.session_started(42, 99, REPORTED)
    out = messages(core.data_to_send())
    assert [t for t, _ in out] == [b"R", b"S", b"S", b"K", b"Z"]
    assert out[0][1] == struct.pack("!i", 0)                     # AuthenticationOk
    assert out[1][1] == b"server_version\x0016.0\x00"
    assert out[3][1] == struct.pack("!ii", 42, 99)
    assert out[4][1] == b"I" and core.state is State.READY


def test_startup_after_ssl_request_without_certificate():
    core = ServerProtocol(roles=ROLES)
    events = core.receive_data(SSL_REQUEST + startup())
    assert events == [Authenticated("cq", {"user": "cq"})]
    assert core.data_to_send() == b"N"


def test_ssl_request_with_certificate_asks_the_shell_to_start_tls():
    core = ServerProtocol(roles=ROLES, tls_available=True)
    # the startup packet that follows is not read until the shell says TLS is on
    assert core.receive_data(SSL_REQUEST + startup()) == [StartTLS()]
    assert core.data_to_send() == b"S" and core.state is State.TLS
    assert core.events() == []
    core.tls_started()
    assert core.events() == [Authenticated("cq", {"user": "cq"})]
    assert core.tls


def test_second_ssl_request_inside_tls_is_answered_n():
    core = ServerProtocol(roles=ROLES, tls_available=True, tls=True)
    assert core.receive_data(SSL_REQUEST) == [] and core.data_to_send() == b"N"


def test_gssenc_request_answered_n_then_startup():
    core = ServerProtocol(roles=ROLES)
    assert core.receive_data(GSSENC_REQUEST + startup()) == [Authenticated("cq", {"user": "cq"})]
    assert core.data_to_send() == b"N"


def test_cancel_request_is_an_event_and_ends_the_connection():
    core = ServerProtocol(roles=ROLES)
    events = core.receive_data(struct.pack("!iiii", 16, 80877102, 7, 1234) + startup())
    assert events == [M.CancelRequest(7, 1234)] and core.state is State.CLOSED
    assert core.data_to_send() == b""


@pytest.mark.parametrize("packet, sqlstate", [
    (struct.pack("!ii", 9, 196608) + b"\0", "28000"),              # no user
    (struct.pack("!ii", 8, 0x20000), "08P01"),                      # protocol 2.0
    (struct.pack("!i", 3), "08P01"),                                # a lying length
    (b"GET / HTTP/1.1\r\n", "08P01"),
])
def test_bad_startup_packets_are_fatal(packet, sqlstate):
    events = ServerProtocol(roles=ROLES).receive_data(packet)
    assert len(events) == 1 and isinstance(events[0], Fatal)
    assert events[0].error.sqlstate == sqlstate


def test_require_tls_refuses_a_plain_startup():
    core = ServerProtocol(roles=ROLES, require_tls=True)
    [event] = core.receive_data(startup())
    assert isinstance(event, Fatal) and event.error.sqlstate == "28000"
    [(tag, body)] = messages(core.data_to_send())
    fields = error_fields(body)
    assert tag == b"E" and fields["S"] == "FATAL" and "only TLS" in fields["M"]
    assert core.state is State.CLOSED


# --------------------------------------------------------------------------- authentication
def _failed_with(core: ServerProtocol, events: list, sqlstate: str) -> None:
    assert len(events) == 1 and isinstance(events[0], Fatal), events
    [(tag, body)] = messages(core.data_to_send())
    assert tag == b"E" and error_fields(body)["C"] == sqlstate
    assert error_fields(body)["S"] == "FATAL" and core.state is State.CLOSED


@pytest.mark.parametrize("user, message", [
    ("bob", 'role "bob" does not exist'),
    ("group_only", 'role "group_only" is not permitted to log in')])
def test_trust_admits_only_login_roles(user, message):
    [event] = ServerProtocol("trust", ROLES).receive_data(startup(user))
    assert isinstance(event, Fatal) and event.error.sqlstate == "28000"
    assert event.error.message == message


def test_a_nologin_role_with_the_right_password_is_refused_after_it():
    roles = Roles(None)
    roles.create("carol", password="pw")
    core = ServerProtocol("password", roles)
    _challenge(core, "carol")
    _failed_with(core, core.receive_data(password(cstr("pw"))), "28000")


def test_without_a_role_catalog_nobody_logs_in():
    core = ServerProtocol()
    _failed_with(core, core.receive_data(startup()), "28000")


def _challenge(core: ServerProtocol, user: str) -> tuple[int, bytes]:
    assert core.receive_data(startup(user)) == []
    [(tag, body)] = messages(core.data_to_send())
    assert tag == b"R"
    return struct.unpack_from("!i", body)[0], body[4:]


@pytest.mark.parametrize("user, given, ok", [
    ("alice", "s3cret", True), ("alice", "wrong", False), ("bob", "s3cret", False)])
def test_cleartext_password(user, given, ok):
    core = ServerProtocol("password", ROLES)
    assert _challenge(core, user) == (3, b"")
    events = core.receive_data(password(cstr(given)))
    if ok:
        assert events == [Authenticated(user, {"user": user})]
        assert core.data_to_send() == b""
    else:
        _failed_with(core, events, "28P01")


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


class ScramClient:
    """The client side of SCRAM-SHA-256 (RFC 5802/7677) as libpq runs it, written from the
    RFC rather than from the server's code."""

    def __init__(self, pw: str):
        self.pw = pw
        self.nonce = base64.b64encode(b"client-nonce-123").decode()
        self.first_bare = f"n=,r={self.nonce}"

    def first(self) -> bytes:
        data = ("n,," + self.first_bare).encode()
        return cstr("SCRAM-SHA-256") + struct.pack("!i", len(data)) + data

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac("sha256", self.pw.encode(), base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))
        client_key = _hmac(salted, b"Client Key")
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={attrs['r']}"
        self.auth_message = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = _hmac(hashlib.sha256(client_key).digest(), self.auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_key = _hmac(salted, b"Server Key")
        assert attrs["r"].startswith(self.nonce)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("method", ["scram-sha-256", "md5"])   # md5 meets a SCRAM secret
@pytest.mark.parametrize("user, given, ok", [
    ("alice", "s3cret", True), ("alice", "wrong", False), ("bob", "s3cret", False),
    ("postgres", "", False)])                                  # no password: no way in
def test_scram_sha_256(method, user, given, ok):
    core = ServerProtocol(method, ROLES)
    code, mechanisms = _challenge(core, user)
    assert (code, mechanisms) == (10, b"SCRAM-SHA-256\0\0")
    client = ScramClient(given)
    assert core.receive_data(password(client.first())) == []
    [(tag, body)] = messages(core.data_to_send())
    assert tag == b"R" and struct.unpack_from("!i", body)[0] == 11    # SASLContinue
    events = core.receive_data(password(client.final(body[4:])))
    if not ok:
        _failed_with(core, events, "28P01")
        return
    assert events == [Authenticated(user, {"user": user})]
    [(tag, body)] = messages(core.data_to_send())
    assert tag == b"R" and struct.unpack_from("!i", body)[0] == 12    # SASLFinal
    want = base64.b64encode(_hmac(client.server_key, client.auth_message)).decode()
    assert body[4:] == f"v={want}".encode()


def test_scram_with_another_mechanism_is_refused():
    core = ServerProtocol("scram-sha-256", ROLES)
    _challenge(core, "alice")
    _failed_with(core, core.receive_data(password(cstr("SCRAM-SHA-256-PLUS") + b"\0\0\0\0")),
                 "28000")


def test_malformed_sasl_message_is_a_protocol_violation():
    core = ServerProtocol("scram-sha-256", ROLES)
    _challenge(core, "alice")
    _failed_with(core, core.receive_data(password(cstr("SCRAM-SHA-256") + b"\0")), "08P01")


def test_a_query_instead_of_a_password_is_a_protocol_violation():
    core = ServerProtocol("md5", ROLES)
    _challenge(core, "alice")
    _failed_with(core, core.receive_data(query("SELECT 1")), "08P01")


# --------------------------------------------------------------------------- simple query
def test_simple_query_cycle():
    core = opened(ServerProtocol(roles=ROLES))
    # two queries in one read: the second waits until the first is answered
    assert core.receive_data(query("SELECT 1") + query("SELECT 2")) == [M.Query("SELECT 1")]
    assert core.state is State.IN_QUERY and core.events() == []
    core.send(M.command_complete("SELECT 1"))
    core.ready("I")
    with pytest.raises(ProtocolStateError):
        core.ready("I")                                # one ReadyForQuery per Query
    core.done()
    assert core.state is State.READY
    assert tags(core.data_to_send()) == "CZ"
    assert core.events() == [M.Query("SELECT 2")]


def test_error_in_a_simple_query_does_not_discard():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(query("SELECT * FROM nowhere"))
    core.fail(UndefinedTable('relation "nowhere" does not exist', position=15))
    core.ready("I")
    core.done()
    out = messages(core.data_to_send())
    assert [t for t, _ in out] == [b"E", b"Z"]
    assert error_fields(out[0][1]) == {"S": "ERROR", "V": "ERROR", "C": "42P01",
                                       "M": 'relation "nowhere" does not exist', "P": "15"}
    assert core.state is State.READY
    assert core.receive_data(parse("", "SELECT 1")) == [M.Parse("", "SELECT 1", ())]


def test_terminate_closes():
    core = opened(ServerProtocol(roles=ROLES))
    assert core.receive_data(msg(b"X") + query("SELECT 1")) == [M.Terminate()]
    assert core.state is State.CLOSED and core.events() == []


def test_ready_outside_a_query_or_sync_is_refused():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(parse("", "SELECT 1"))
    with pytest.raises(ProtocolStateError):
        core.ready("I")
    core.done()
    with pytest.raises(ProtocolStateError):
        core.done()


# --------------------------------------------------------------------------- extended query
def _answer(core: ServerProtocol, event, status: str = "I") -> None:
    """What a session that succeeds at everything answers."""
    if core.ready_owed:
        core.ready(status)
    core.done()


def test_extended_error_discards_until_sync_with_one_ready_for_query():
    core = opened(ServerProtocol(roles=ROLES))
    data = (parse("", "SELECT * FROM nowhere") + bind("", "") + msg(b"D", b"P\0")
            + execute() + flush() + msg(b"C", b"S\0") + sync() + sync()
            + parse("", "SELECT 1") + bind("", "") + execute() + sync())
    [event] = core.receive_data(data)
    assert isinstance(event, M.Parse)
    core.fail(UndefinedTable('relation "nowhere" does not exist'))
    core.done()
    assert core.state is State.DISCARD
    seen = []
    while True:
        events = core.events()
        if not events:
            break
        seen += events
        for e in events:
            _answer(core, e)
    assert [type(e).__name__ for e in seen] == ["Sync", "Sync", "Parse", "Bind", "Execute", "Sync"]
    assert tags(core.data_to_send()) == "EZZZ"           # one ReadyForQuery per Sync
    assert core.state is State.READY


def test_a_simple_query_ends_discarding():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(bind("", "missing"))
    core.fail(PgError('prepared statement "missing" does not exist', sqlstate="26000"))
    core.done()
    assert core.receive_data(execute() + query("SELECT 1")) == [M.Query("SELECT 1")]


def test_flush_is_an_event_but_not_while_discarding():
    core = opened(ServerProtocol(roles=ROLES))
    assert core.receive_data(flush()) == [M.Flush()]
    core.done()
    core.receive_data(execute("nope"))
    core.fail(PgError("no portal", sqlstate="34000"))
    core.done()
    assert core.receive_data(flush()) == []


def test_portal_suspension():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(execute("p1", 2))
    core.end_execute("SELECT 2", max_rows=2, more=True)
    core.done()
    core.receive_data(execute("p1", 2))
    core.end_execute("SELECT 1", max_rows=2, more=False)
    core.done()
    core.receive_data(execute("p1", 0))
    core.end_execute("SELECT 0", max_rows=0, more=True)   # no limit: runs to completion
    core.done()
    assert tags(core.data_to_send()) == "sCC"
    core.receive_data(query("FETCH 1 FROM c"))
    with pytest.raises(ProtocolStateError):
        core.end_execute("SELECT 1", max_rows=1, more=True)


def test_copy_messages_outside_copy_are_ignored_and_a_password_is_not():
    core = opened(ServerProtocol(roles=ROLES))
    assert core.receive_data(msg(b"d", b"x") + msg(b"c") + msg(b"f", b"why\0")) == []
    [event] = core.receive_data(password(b"secret\0"))
    assert isinstance(event, Fatal) and event.error.sqlstate == "08P01"
    assert "unexpected message PasswordMessage" in event.error.message


def test_garbage_after_good_messages_is_fatal_in_its_turn():
    core = opened(ServerProtocol(roles=ROLES))
    assert core.receive_data(query("SELECT 1") + b"\x01\x00\x00\x00\x04") == \
        [M.Query("SELECT 1")]
    core.ready("I")
    core.done()
    [event] = core.events()
    assert isinstance(event, Fatal) and "invalid frontend message type" in event.error.message
    assert tags(core.data_to_send()) == "ZE"


def test_message_over_the_limit_is_fatal():
    core = opened(ServerProtocol(roles=ROLES, max_message=1000))
    [event] = core.receive_data(b"Q" + struct.pack("!i", 5000))
    assert isinstance(event, Fatal) and event.error.sqlstate == "54000"
    assert error_fields(messages(core.data_to_send())[0][1])["S"] == "FATAL"


# --------------------------------------------------------------------------- COPY
def _copy_data(*rows: bytes) -> bytes:
    return b"".join(msg(b"d", r) for r in rows)


def test_copy_in_collects_until_copy_done_ignoring_flush_and_sync():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(query("COPY t FROM STDIN"))
    core.start_copy_in(2)
    assert tags(core.data_to_send()) == "G" and core.state is State.COPY_IN
    events = core.receive_data(_copy_data(b"1\tx\n", b"2\t") + flush() + sync())
    assert events == []
    events = core.receive_data(_copy_data(b"y\n") + msg(b"c") + query("SELECT 1"))
    assert events == [CopyInDone(b"1\tx\n2\ty\n")]
    assert core.state is State.IN_QUERY
    core.send(M.command_complete("COPY 2"))
    core.ready("I")
    core.done()
    assert tags(core.data_to_send()) == "CZ"
    assert core.events() == [M.Query("SELECT 1")]


def test_copy_fail_in_a_simple_query():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(query("COPY t FROM STDIN"))
    core.start_copy_in(1)
    core.data_to_send()
    [event] = core.receive_data(_copy_data(b"1\n") + msg(b"f", b"client gave up\0"))
    assert isinstance(event, CopyInFailed) and isinstance(event.error, QueryCanceled)
    assert event.error.message == "COPY from stdin failed: client gave up"
    core.fail(event.error)
    core.ready("I")
    core.done()
    out = messages(core.data_to_send())
    assert [t for t, _ in out] == [b"E", b"Z"] and error_fields(out[0][1])["C"] == "57014"
    assert core.state is State.READY


def test_copy_fail_in_the_extended_protocol_discards_until_sync():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(execute())
    core.start_copy_in(1)
    [event] = core.receive_data(msg(b"f", b"no\0") + execute() + sync())
    core.fail(event.error)
    core.done()
    assert core.events() == [M.Sync()]


def test_unexpected_message_during_copy_in():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(query("COPY t FROM STDIN"))
    core.start_copy_in(1)
    [event] = core.receive_data(query("SELECT 1"))
    assert isinstance(event, CopyInFailed) and event.error.sqlstate == "08P01"


def test_copy_out_frames_the_data():
    core = opened(ServerProtocol(roles=ROLES))
    core.receive_data(query("COPY t TO STDOUT"))
    core.start_copy_out(2)
    core.send(M.copy_data(b"1\tx\n"))
    core.end_copy_out()
    with pytest.raises(ProtocolStateError):
        core.end_copy_out()
    assert tags(core.data_to_send()) == "Hdc" and core.state is State.IN_QUERY


# --------------------------------------------------------------------------- client replays
def _traffic(name: str) -> list:
    """[(message name as captured, bytes)] of one client session."""
    rows = [line.split(" ") for line in (TRAFFIC / f"{name}.hex").read_text().splitlines()]
    return [(n, bytes.fromhex(h)) for n, h in rows]


CLIENTS = sorted(p.stem for p in TRAFFIC.glob("*.hex"))
# what the core makes of each captured frontend message: no event (an 'N' answer), or an
# event of the same name as the message
EVENT_OF = {"SSLRequest": None, "StartupMessage": "Authenticated"}


def _replay(traffic: list, chunk: int, fail_first_parse: bool = False):
    """Feeds a session's bytes ``chunk`` bytes at a time, answering each event as a session
    that succeeds would (optionally failing the first Parse); returns (events, output)."""
    core = ServerProtocol(roles=ROLES)
    data = b"".join(b for _, b in traffic)
    seen, out, failed = [], bytearray(), not fail_first_parse
    pending = []
    for i in range(0, len(data), chunk):
        pending += core.receive_data(data[i:i + chunk])
        while pending:
            event = pending.pop(0)
            seen.append(event)
            if isinstance(event, Authenticated):
                core.session_started(1, 2, REPORTED)
            elif isinstance(event, M.Parse) and not failed:
                failed = True
                core.fail(PgError("no such thing", sqlstate="42P01"))
                core.done()
            elif not isinstance(event, M.Terminate):
                _answer(core, event)
            pending += core.events()
        out += core.data_to_send()
    return seen, bytes(out)


def test_every_client_is_replayed():
    assert CLIENTS == ["asyncpg", "node_postgres", "pgjdbc", "psql15", "psql18", "psqlodbc",
                       "psycopg", "sqlalchemy"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_replay_of_client_traffic(client, chunk):
    traffic = _traffic(client)
    seen, out = _replay(traffic, chunk)
    names = [EVENT_OF.get(n, n) for n, _ in traffic]
    assert [type(e).__name__ for e in seen] == [n for n in names if n is not None]
    # the core's own answers: 'N' to SSLRequest, the opening, one ReadyForQuery per Query/Sync
    if traffic[0][0] == "SSLRequest":
        assert out[:1] == b"N"
        out = out[1:]
    assert tags(out) == "RSSKZ" + "Z" * sum(n in ("Query", "Sync") for n, _ in traffic)
    assert isinstance(seen[-1], M.Terminate) == (traffic[-1][0] == "Terminate")


@pytest.mark.parametrize("client", [c for c in CLIENTS
                                    if any(n == "Parse" for n, _ in _traffic(c))])
def test_replay_with_a_failed_parse_discards_until_sync(client):
    traffic = _traffic(client)
    seen, out = _replay(traffic, 13, fail_first_parse=True)
    names = [n for n in (EVENT_OF.get(n, n) for n, _ in traffic) if n is not None]
    first = names.index("Parse")
    skipped = names[first + 1:].index("Sync")            # until the next Sync (or Query)
    if "Query" in names[first + 1:first + 1 + skipped]:
        skipped = names[first + 1:].index("Query")
    assert [type(e).__name__ for e in seen] == names[:first + 1] + names[first + 1 + skipped:]
    n_ready = sum(n in ("Query", "Sync") for n in names[:first + 1] + names[first + 1 + skipped:])
    assert tags(out).count("Z") == 1 + n_ready and tags(out).count("E") == 1


def test_replay_events_carry_what_the_clients_sent():
    jdbc = [e for e in _replay(_traffic("pgjdbc"), 64)[0] if isinstance(e, M.Execute)]
    assert M.Execute("C_1", 2) in jdbc and M.Execute("", 1) in jdbc
    asyncpg = _replay(_traffic("asyncpg"), 64)[0]
    assert M.Describe("S", "__asyncpg_stmt_1__") in asyncpg and M.Flush() in asyncpg
    assert asyncpg[0] == Authenticated("postgres", {"client_encoding": "'utf-8'",
                                                    "user": "postgres",
                                                    "database": "postgres"})
    node = _replay(_traffic("node_postgres"), 64)[0]
    assert M.Close("P", "C_1") in node
    binds = [e for e in _replay(_traffic("psycopg"), 64)[0] if isinstance(e, M.Bind)]
    assert binds[0] == M.Bind("", "", (1,), (b"\x00\x01",), (0,))
