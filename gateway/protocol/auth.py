"""Authentication exchanges: trust, cleartext password, md5 and SCRAM-SHA-256 (via scramp).

Each method is a coroutine that talks through ``send``/``receive`` callables, so it can be driven
by the connection shell or by a test without sockets.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import struct
from dataclasses import dataclass, field

from . import messages as M
from .errors import InvalidPassword, InvalidAuthorization, ProtocolViolation

METHODS = ("trust", "password", "md5", "scram-sha-256")


@dataclass
class Users:
    """user -> password, from a ``user:password`` file and/or settings."""
    passwords: dict = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None, inline: str | None = None) -> "Users":
        pw = {}
        if path:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#") and ":" in line:
                        u, p = line.split(":", 1)
                        pw[u.strip()] = p
        for item in (inline or "").split(","):
            if ":" in item:
                u, p = item.split(":", 1)
                pw[u.strip()] = p
        return cls(pw)


def _fail(user: str) -> InvalidPassword:
    return InvalidPassword(f'password authentication failed for user "{user}"')


async def _trust(user, users, send, receive):
    return None


async def _password(user, users, send, receive):
    await send(M.authentication_cleartext())
    msg = await receive()
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation("expected password response")
    given = msg.payload.rstrip(b"\0").decode("utf-8", "replace")
    expected = users.passwords.get(user)
    if expected is None or not hmac.compare_digest(given, expected):
        raise _fail(user)


async def _md5(user, users, send, receive):
    salt = os.urandom(4)
    await send(M.authentication_md5(salt))
    msg = await receive()
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation("expected password response")
    given = msg.payload.rstrip(b"\0").decode("ascii", "replace")
    expected = users.passwords.get(user)
    if expected is None:
        raise _fail(user)
    inner = hashlib.md5((expected + user).encode()).hexdigest()
    want = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
    if not hmac.compare_digest(given, want):
        raise _fail(user)


async def _scram(user, users, send, receive):
    import scramp
    mech_name = "SCRAM-SHA-256"
    await send(M.authentication_sasl([mech_name]))
    msg = await receive()
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation("expected SASL response")
    data = msg.payload
    end = data.index(b"\0")
    if data[:end].decode() != mech_name:
        raise InvalidAuthorization("unsupported SASL mechanism")
    (n,) = struct.unpack_from("!i", data, end + 1)
    first = data[end + 5:end + 5 + n].decode()
    expected = users.passwords.get(user)
    mech = scramp.ScramMechanism(mech_name)
    # An unknown user still runs the exchange (with a throwaway secret) so it fails at the end.
    auth_info = mech.make_auth_info(expected if expected is not None else os.urandom(16).hex())
    server = mech.make_server(lambda _u: auth_info)
    try:
        server.set_client_first(first)
        await send(M.authentication_sasl_continue(server.get_server_first().encode()))
        msg = await receive()
        if not isinstance(msg, M.PasswordMessage):
            raise ProtocolViolation("expected SASL response")
        server.set_client_final(msg.payload.decode())
    except scramp.ScramException:
        raise _fail(user) from None
    if expected is None:
        raise _fail(user)
    await send(M.authentication_sasl_final(server.get_server_final().encode()))


AUTHENTICATORS = {"trust": _trust, "password": _password, "md5": _md5,
                  "scram-sha-256": _scram}


async def authenticate(method: str, user: str, users: Users, send, receive) -> None:
    await AUTHENTICATORS[method](user, users, send, receive)
