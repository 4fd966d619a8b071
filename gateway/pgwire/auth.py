"""Authentication exchanges without I/O: trust, cleartext password, md5 and SCRAM-SHA-256, each a
generator that yields the challenge bytes to send, is sent the client's next message, and
returns the last bytes to send once the client is authenticated (or raises 28P01/28000/08P01).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass, field
from typing import Generator

from gateway.pgwire import messages as M
from gateway.pgwire.errors import InvalidPassword, InvalidAuthorization, ProtocolViolation

METHODS = ("trust", "password", "md5", "scram-sha-256")

# yields bytes to send, is sent the frontend message that answers them, returns the final bytes
Exchange = Generator[bytes, object, bytes | None]


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


def _payload(msg, expected: str) -> bytes:
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation(expected)
    return msg.payload


def _trust(user: str, users: Users) -> Exchange:
    yield from ()
    return None


def _password(user: str, users: Users) -> Exchange:
    msg = yield M.authentication_cleartext()
    given = _payload(msg, "expected password response").rstrip(b"\0").decode("utf-8", "replace")
    expected = users.passwords.get(user)
    if expected is None or not hmac.compare_digest(given, expected):
        raise _fail(user)
    return None


def _md5(user: str, users: Users) -> Exchange:
    salt = os.urandom(4)
    msg = yield M.authentication_md5(salt)
    given = _payload(msg, "expected password response").rstrip(b"\0").decode("ascii", "replace")
    expected = users.passwords.get(user)
    if expected is None:
        raise _fail(user)
    inner = hashlib.md5((expected + user).encode()).hexdigest()
    want = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
    if not hmac.compare_digest(given, want):
        raise _fail(user)
    return None


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def scram_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802 for SCRAM-SHA-256."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return hashlib.sha256(_hmac(salted, b"Client Key")).digest(), _hmac(salted, b"Server Key")


def _attrs(msg: str) -> dict:
    return dict(part.split("=", 1) for part in msg.split(",") if "=" in part)


SCRAM = "SCRAM-SHA-256"


def _client_first(data: bytes) -> tuple[str, str]:
    """(gs2 header, client-first-message-bare) of a SASLInitialResponse."""
    end = data.find(b"\0")
    if end < 0 or data[:end].decode("ascii", "replace") != SCRAM:
        raise InvalidAuthorization("unsupported SASL mechanism; use SCRAM-SHA-256")
    try:
        (n,) = struct.unpack_from("!i", data, end + 1)
        client_first = data[end + 5:end + 5 + n].decode("utf-8")
        if not client_first.startswith(("n,", "y,")):
            raise InvalidAuthorization("SCRAM channel binding is not supported")
        gs2_end = client_first.index(",", 2) + 1
    except (struct.error, UnicodeDecodeError, ValueError):
        raise ProtocolViolation("malformed SCRAM client-first message") from None
    return client_first[:gs2_end], client_first[gs2_end:]


def _scram(user: str, users: Users) -> Exchange:
    """SCRAM-SHA-256 without channel binding (RFC 5802, 7677). libpq sends an empty user name
    in the SCRAM messages: the startup packet's user is the one authenticated."""
    msg = yield M.authentication_sasl([SCRAM])
    gs2, first_bare = _client_first(_payload(msg, "expected SASL response"))
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
    msg = yield M.authentication_sasl_continue(server_first.encode())
    try:
        client_final = _payload(msg, "expected SASL response").decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolViolation("malformed SCRAM client-final message") from None
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
    return M.authentication_sasl_final(f"v={server_sig}".encode())


AUTHENTICATORS = {"trust": _trust, "password": _password, "md5": _md5,
                  "scram-sha-256": _scram}


def exchange(method: str, user: str, users: Users) -> Exchange:
    """The exchange that authenticates ``user`` by ``method`` (one of METHODS)."""
    return AUTHENTICATORS[method](user, users)
