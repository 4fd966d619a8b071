"""Authentication exchanges: trust, cleartext password, md5 and SCRAM-SHA-256.

Each method is a coroutine that talks through ``send``/``receive`` callables, so it can be driven
by the connection shell or by a test without sockets.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass, field

from gateway.pgwire import messages as M
from gateway.pgwire.errors import InvalidPassword, InvalidAuthorization, ProtocolViolation

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


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def scram_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802 for SCRAM-SHA-256."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return hashlib.sha256(_hmac(salted, b"Client Key")).digest(), _hmac(salted, b"Server Key")


def _attrs(msg: str) -> dict:
    return dict(part.split("=", 1) for part in msg.split(",") if "=" in part)


async def _scram(user, users, send, receive):
    """SCRAM-SHA-256 without channel binding (RFC 5802, 7677). libpq sends an empty user name
    in the SCRAM messages: the startup packet's user is the one authenticated."""
    mech_name = "SCRAM-SHA-256"
    await send(M.authentication_sasl([mech_name]))
    msg = await receive()
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation("expected SASL response")
    data = msg.payload
    end = data.find(b"\0")
    if end < 0 or data[:end].decode("ascii", "replace") != mech_name:
        raise InvalidAuthorization("unsupported SASL mechanism; use SCRAM-SHA-256")
    (n,) = struct.unpack_from("!i", data, end + 1)
    client_first = data[end + 5:end + 5 + n].decode("utf-8")
    if not client_first.startswith(("n,", "y,")):
        raise InvalidAuthorization("SCRAM channel binding is not supported")
    gs2_end = client_first.index(",", 2) + 1
    gs2, first_bare = client_first[:gs2_end], client_first[gs2_end:]
    client_nonce = _attrs(first_bare).get("r")
    if not client_nonce:
        raise ProtocolViolation("malformed SCRAM client-first message")
    password = users.passwords.get(user)
    # An unknown user still runs the exchange (with a throwaway secret) so it fails at the end.
    salt, iterations = os.urandom(16), 4096
    stored_key, server_key = scram_keys(password if password is not None else os.urandom(16).hex(),
                                        salt, iterations)
    nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
    server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={iterations}"
    await send(M.authentication_sasl_continue(server_first.encode()))
    msg = await receive()
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation("expected SASL response")
    client_final = msg.payload.decode("utf-8")
    attrs = _attrs(client_final)
    without_proof = client_final[:client_final.rfind(",p=")]
    if attrs.get("r") != nonce or attrs.get("c") != base64.b64encode(gs2.encode()).decode():
        raise _fail(user)
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    try:
        proof = base64.b64decode(attrs.get("p", ""), validate=True)
    except ValueError:
        raise _fail(user) from None
    signature = _hmac(stored_key, auth_message)
    client_key = bytes(a ^ b for a, b in zip(proof, signature))
    if password is None or len(proof) != len(signature) or \
            not hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key):
        raise _fail(user)
    server_sig = base64.b64encode(_hmac(server_key, auth_message)).decode()
    await send(M.authentication_sasl_final(f"v={server_sig}".encode()))


AUTHENTICATORS = {"trust": _trust, "password": _password, "md5": _md5,
                  "scram-sha-256": _scram}


async def authenticate(method: str, user: str, users: Users, send, receive) -> None:
    await AUTHENTICATORS[method](user, users, send, receive)
