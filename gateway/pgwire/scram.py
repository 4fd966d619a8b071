"""SCRAM-SHA-256 secrets in PostgreSQL's stored format,
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (base64): made from a password,
parsed, and checked against one. The server keeps only these, never a password.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import stringprep
import unicodedata

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096                       # PostgreSQL's scram_iterations default
SALT_BYTES = 16


def hmac_sha256(key: bytes, msg: bytes) -> bytes:
    """HMAC-SHA-256 of ``msg`` under ``key``."""
    return hmac.new(key, msg, hashlib.sha256).digest()


def _prohibited(c: str) -> bool:
    return any(check(c) for check in (
        stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
        stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6,
        stringprep.in_table_c7, stringprep.in_table_c8, stringprep.in_table_c9,
        stringprep.in_table_a1))


def saslprep(password: str) -> str:
    """RFC 4013 SASLprep as PostgreSQL and libpq apply it before hashing; a password it
    refuses is used as it is, as they do, so both ends still agree."""
    if password.isascii():
        return password
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in password
                     if not stringprep.in_table_b1(c))
    out = unicodedata.normalize("NFKC", mapped)
    if not out or any(_prohibited(c) for c in out):
        return password
    if any(stringprep.in_table_d1(c) for c in out) and (
            any(stringprep.in_table_d2(c) for c in out)
            or not (stringprep.in_table_d1(out[0]) and stringprep.in_table_d1(out[-1]))):
        return password
    return out


def scram_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of RFC 5802 for SCRAM-SHA-256."""
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password).encode("utf-8"), salt, iterations)
    return hashlib.sha256(hmac_sha256(salted, b"Client Key")).digest(), \
        hmac_sha256(salted, b"Server Key")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def make_verifier(password: str, *, salt: bytes | None = None,
                  iterations: int = ITERATIONS) -> str:
    """PostgreSQL's stored form of a SCRAM-SHA-256 secret (``SCRAM-SHA-256$i:salt$…``): what
    the server keeps instead of the password."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored_key, server_key = scram_keys(password, salt, iterations)
    return f"{MECHANISM}${iterations}:{_b64(salt)}${_b64(stored_key)}:{_b64(server_key)}"


def parse_verifier(verifier: str) -> tuple[bytes, int, bytes, bytes]:
    """(salt, iterations, StoredKey, ServerKey); ValueError if ``verifier`` is not one."""
    try:
        mechanism, params, keys = verifier.split("$")
        iterations, salt = params.split(":")
        stored_key, server_key = keys.split(":")
        out = (base64.b64decode(salt, validate=True), int(iterations),
               base64.b64decode(stored_key, validate=True),
               base64.b64decode(server_key, validate=True))
    except (AttributeError, ValueError, binascii.Error):
        raise ValueError("not a SCRAM-SHA-256 secret") from None
    if mechanism != MECHANISM or out[1] < 1 or len(out[2]) != 32 or len(out[3]) != 32:
        raise ValueError("not a SCRAM-SHA-256 secret")
    return out


def check_password(verifier: str | None, password: str) -> bool:
    """Whether ``password`` is the one ``verifier`` was made from (constant-time compare)."""
    try:
        salt, iterations, stored_key, server_key = parse_verifier(verifier)
    except ValueError:
        return False
    want_stored, want_server = scram_keys(password, salt, iterations)
    return hmac.compare_digest(want_stored, stored_key) & \
        hmac.compare_digest(want_server, server_key)
