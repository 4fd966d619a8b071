"""Authentication exchanges without I/O: trust, cleartext password and SCRAM-SHA-256, each a
generator that yields the challenge bytes to send, is sent the client's next message, and
returns the last bytes to send once the client is authenticated (or raises 28P01/28000/08P01).
Secrets are the SCRAM verifiers of a role catalog (gateway/security/roles.py); the server never
holds a password.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from typing import Generator, Protocol

from gateway.pgwire import messages as M
from gateway.pgwire.errors import InvalidPassword, InvalidAuthorization, ProtocolViolation
from gateway.pgwire.scram import (ITERATIONS, MECHANISM as SCRAM, SALT_BYTES, check_password,
                                  hmac_sha256 as _hmac, parse_verifier)

METHODS = ("trust", "password", "md5", "scram-sha-256")

# yields bytes to send, is sent the frontend message that answers them, returns the final bytes
Exchange = Generator[bytes, object, bytes | None]

# makes an unknown user's SCRAM salt the same at every attempt, so it does not give them away
_MOCK_KEY = os.urandom(32)


class RoleCatalog(Protocol):
    def get(self, name: str):
        """The role named ``name`` (with ``login`` and ``verifier``), or None."""


def _fail(user: str) -> InvalidPassword:
    return InvalidPassword(f'password authentication failed for user "{user}"')


def _payload(msg, expected: str) -> bytes:
    if not isinstance(msg, M.PasswordMessage):
        raise ProtocolViolation(expected)
    return msg.payload


def _trust(user: str, verifier: str | None) -> Exchange:
    yield from ()
    return None


def _password(user: str, verifier: str | None) -> Exchange:
    msg = yield M.authentication_cleartext()
    given = _payload(msg, "expected password response").rstrip(b"\0").decode("utf-8", "replace")
    if not check_password(verifier, given):
        raise _fail(user)
    return None


def _attrs(msg: str) -> dict:
    return dict(part.split("=", 1) for part in msg.split(",") if "=" in part)


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


def _scram_secret(user: str, verifier: str | None) -> tuple[bytes, int, bytes, bytes, bool]:
    """(salt, iterations, StoredKey, ServerKey, real) of the role's verifier; without one the
    exchange still runs, on a throwaway secret, so that it fails only at the end."""
    try:
        return (*parse_verifier(verifier), True)
    except ValueError:
        salt = _hmac(_MOCK_KEY, user.encode("utf-8"))[:SALT_BYTES]
        return salt, ITERATIONS, os.urandom(32), os.urandom(32), False


def _scram(user: str, verifier: str | None) -> Exchange:
    """SCRAM-SHA-256 without channel binding (RFC 5802, 7677). libpq sends an empty user name
    in the SCRAM messages: the startup packet's user is the one authenticated."""
    msg = yield M.authentication_sasl([SCRAM])
    gs2, first_bare = _client_first(_payload(msg, "expected SASL response"))
    client_nonce = _attrs(first_bare).get("r")
    if not client_nonce:
        raise ProtocolViolation("malformed SCRAM client-first message")
    salt, iterations, stored_key, server_key, real = _scram_secret(user, verifier)
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
    if not real or len(proof) != len(signature) or \
            not hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key):
        raise _fail(user)
    server_sig = base64.b64encode(_hmac(server_key, auth_message)).decode()
    return M.authentication_sasl_final(f"v={server_sig}".encode())


AUTHENTICATORS = {"trust": _trust, "password": _password, "scram-sha-256": _scram,
                  # every secret is a SCRAM verifier, which md5 cannot check: PostgreSQL runs
                  # SCRAM instead when md5 meets a SCRAM secret, and so do we
                  "md5": _scram}


def exchange(method: str, user: str, roles: RoleCatalog | None) -> Exchange:
    """The exchange that authenticates ``user`` by ``method`` (one of METHODS), then admits
    only an existing LOGIN role. Under a password method an unknown role fails as a wrong
    password would (28P01), so that the answer does not tell who exists."""
    role = roles.get(user) if roles is not None else None
    final = yield from AUTHENTICATORS[method](user, role.verifier if role else None)
    role = roles.get(user) if roles is not None else None     # as it is now, after the wait
    if role is None:
        raise InvalidAuthorization(f'role "{user}" does not exist')
    if not role.login:
        raise InvalidAuthorization(f'role "{user}" is not permitted to log in')
    return final
