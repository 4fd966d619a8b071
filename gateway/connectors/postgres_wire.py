"""An asyncio client of PostgreSQL's protocol 3.0 on plain streams: connect (trust, cleartext,
MD5, SCRAM-SHA-256), simple queries, COPY TO STDOUT, logical replication streams. Every failure
is a PgError, every wait has a timeout, and every time it gives is in µs since the Unix epoch."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import re
import stringprep
import struct
import time
import unicodedata
from dataclasses import dataclass, field
from typing import AsyncIterator, NamedTuple

PG_EPOCH_US = 946_684_800_000_000   # 2000-01-01, the replication protocol's epoch, in Unix µs

_PROTOCOL_3_0 = 196608
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_XLOG = struct.Struct(">QQq").unpack_from          # XLogData: start, end, send time
_KEEPALIVE = struct.Struct(">QqB").unpack_from     # keepalive: WAL end, send time, reply?
_STATUS = struct.Struct(">QQQqB").pack             # status update: write, flush, apply, now, reply
_TERMINATE = b"X\0\0\0\x04"
_READ_SIZE = 1 << 17       # the most a stream reader holds before it pauses the socket
_DSN_DEFAULTS = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}

# SQLSTATEs of the failures the client itself reports (the server's come in ErrorResponse)
CANNOT_CONNECT = "08001"        # never reached ReadyForQuery: refused, timed out, auth unsupported
CONNECTION_LOST = "08006"       # closed or silent past the timeout after it was established
NOT_CONNECTED = "08003"         # used after close()
PROTOCOL_VIOLATION = "08P01"    # the server sent what the protocol does not allow here
WRONG_STATE = "55000"           # e.g. query() on a connection that is streaming replication


# -- LSNs and connection strings -------------------------------------------------------------

_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def parse_lsn(text: str) -> int:
    """``16/B374D848`` -> 0x16B374D848."""
    m = _LSN.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not an LSN: {text!r}")
    return int(m[1], 16) << 32 | int(m[2], 16)


def format_lsn(lsn: int) -> str:
    if not 0 <= lsn < 1 << 64:
        raise ValueError(f"LSN out of range: {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


# keyword = value, where value is 'single quoted' or runs to the next blank; \ escapes in both
_DSN_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"
                       r"(?:'((?:[^'\\]|\\.)*)'|((?:[^\s'\\]|\\.)+))", re.S)
_DSN_ESCAPE = re.compile(r"\\(.)", re.S)


def parse_dsn(text: str) -> dict:
    """A libpq keyword/value string -> {"host", "port" (int), "user", "dbname", ...}; the keys
    it does not name take libpq's defaults here (host 127.0.0.1, not a unix socket)."""
    settings: dict = {}
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _DSN_PAIR.match(text, pos)
        if m is None:
            raise ValueError(f"malformed connection string at {text[pos:pos + 20]!r}")
        raw = m[2] if m[2] is not None else m[3]
        settings[m[1]] = _DSN_ESCAPE.sub(r"\1", raw)
        pos = m.end()
    return _with_defaults(settings)


def _with_defaults(settings: dict) -> dict:
    out = {**_DSN_DEFAULTS, **settings}
    try:
        out["port"] = int(out["port"])
    except ValueError:
        raise ValueError(f"invalid port: {out['port']!r}") from None
    out.setdefault("dbname", out["user"])
    return out


# -- errors ----------------------------------------------------------------------------------

class PgError(Exception):
    """An ErrorResponse from the server, or a failure of the connection itself (sqlstate 08xxx);
    str() is the message."""

    def __init__(self, message: str, sqlstate: str = "XX000", detail: str | None = None,
                 hint: str | None = None, severity: str = "ERROR",
                 fields: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint
        self.severity = severity
        self.fields = fields or {}     # every field of the ErrorResponse, by its code letter

    @classmethod
    def from_response(cls, body: bytes) -> PgError:
        fields = {item[:1].decode(): item[1:].decode("utf-8", "replace")
                  for item in body.split(b"\0") if item}
        return cls(fields.get("M", "unknown error"), fields.get("C", "XX000"), fields.get("D"),
                   fields.get("H"), fields.get("V", fields.get("S", "ERROR")), fields)

    @property
    def fatal(self) -> bool:
        """The server closes the connection after a FATAL or PANIC error."""
        return self.severity in ("FATAL", "PANIC")


# -- results and replication messages --------------------------------------------------------

@dataclass(slots=True)
class Result:
    """One statement's answer: its columns' names, rows as text (None for NULL), command tag."""
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[str | None, ...]] = field(default_factory=list)
    tag: str = ""


class XLogData(NamedTuple):
    start_lsn: int
    end_lsn: int            # the server's WAL end when it sent this
    send_time_us: int
    payload: bytes          # one pgoutput message (gateway/connectors/pgoutput.py decodes it)


class Keepalive(NamedTuple):
    wal_end: int
    send_time_us: int
    reply_requested: bool   # answer with send_status soon, or the server ends the stream


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + (len(body) + 4).to_bytes(4, "big") + body


def _cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    # the replication command scanner knows only '' inside quotes, no backslash escapes (as
    # SQL with standard_conforming_strings, the default since PostgreSQL 9.1)
    return "'" + value.replace("'", "''") + "'"


def _version_num(version: str) -> int:
    """server_version ("18.6", "9.6.24", "18beta1") as server_version_num counts it."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if m is None:
        return 0
    major, minor, patch = (int(g or 0) for g in m.groups())
    return major * 10000 + minor if major >= 10 else major * 10000 + minor * 100 + patch


# -- authentication --------------------------------------------------------------------------

_SASLPREP_PROHIBITED = (stringprep.in_table_c12, stringprep.in_table_c21_c22,
                        stringprep.in_table_c3, stringprep.in_table_c4, stringprep.in_table_c5,
                        stringprep.in_table_c6, stringprep.in_table_c7, stringprep.in_table_c8,
                        stringprep.in_table_c9, stringprep.in_table_a1)


def _saslprep(password: str) -> bytes:
    """RFC 4013 as the server applies it to a password it stores: where the password is not
    valid SASLprep the server keeps the raw bytes, and so must the client."""
    if password.isascii():          # maps to itself, or is prohibited and so stays raw
        return password.encode()
    mapped = "".join(" " if stringprep.in_table_c12(c) else c
                     for c in password if not stringprep.in_table_b1(c))
    prepared = unicodedata.normalize("NFKC", mapped)
    if not prepared or any(check(c) for c in prepared for check in _SASLPREP_PROHIBITED):
        return password.encode()
    if any(map(stringprep.in_table_d1, prepared)) and (
            any(map(stringprep.in_table_d2, prepared))
            or not stringprep.in_table_d1(prepared[0])
            or not stringprep.in_table_d1(prepared[-1])):
        return password.encode()
    return prepared.encode()


class _Scram:
    """The client side of SCRAM-SHA-256 (RFC 5802, 7677) without channel binding. The server
    ignores the user name in the exchange (it has the startup message's), hence "n=,"."""

    def __init__(self, password: str):
        self.password = _saslprep(password)
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.first_bare = f"n=,r={self.nonce}"
        self.server_signature: bytes | None = None
        self.verified = False

    def first_message(self) -> bytes:
        return b"n,," + self.first_bare.encode()

    def final_message(self, server_first: str) -> bytes:
        attrs = _scram_attributes(server_first)
        nonce = attrs.get("r", "")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise PgError("SCRAM: the server's nonce does not extend ours", CANNOT_CONNECT)
        try:
            salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        except (KeyError, ValueError) as e:
            raise PgError(f"SCRAM: malformed server-first-message {server_first!r}",
                          CANNOT_CONNECT) from e
        salted = hashlib.pbkdf2_hmac("sha256", self.password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={nonce}"          # biws: base64 of the gs2 header "n,,"
        auth = f"{self.first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
        proof = (int.from_bytes(client_key, "big") ^ int.from_bytes(signature, "big"))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.server_signature = hmac.digest(server_key, auth, "sha256")
        return f"{without_proof},p={base64.b64encode(proof.to_bytes(32, 'big')).decode()}".encode()

    def verify(self, server_final: str) -> None:
        attrs = _scram_attributes(server_final)
        if "e" in attrs:
            raise PgError(f"SCRAM: the server refused: {attrs['e']}", CANNOT_CONNECT)
        try:
            signature = base64.b64decode(attrs["v"])
        except (KeyError, ValueError) as e:
            raise PgError(f"SCRAM: malformed server-final-message {server_final!r}",
                          CANNOT_CONNECT) from e
        expected = self.server_signature
        if expected is None or not hmac.compare_digest(signature, expected):
            raise PgError("SCRAM: the server's signature is wrong", CANNOT_CONNECT)
        self.verified = True


def _scram_attributes(message: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in message.split(",") if "=" in part)


# -- the connection --------------------------------------------------------------------------

class PgConnection:
    """One connection; not for concurrent use by several tasks. ``timeout`` bounds every wait
    for the server (per message for queries and COPY); a timeout closes the connection, whose
    protocol state is then unknown."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 timeout: float, replication: bool):
        self._reader = reader
        self._writer = writer
        self._buf = b""                    # received, not yet parsed from _pos on
        self._pos = 0
        self.timeout = timeout
        self.replication = replication
        self.parameters: dict[str, str] = {}
        self.server_version_num = 0
        self.backend_pid = 0
        self.auth_method = "trust"
        self.transaction_status = "I"     # ReadyForQuery's: I idle, T in a block, E failed block
        self._closed = False
        self._streaming = False            # in CopyBoth after START_REPLICATION
        self._unfinished = False           # a command's answer is not read to ReadyForQuery yet
        self._command = 0                  # counts commands, so an abandoned COPY knows it is
        self._lost = CANNOT_CONNECT        # what a transport failure is: 08001 until ready

    # -- connecting

    @classmethod
    async def connect(cls, dsn: str | dict, *, replication: bool = False, timeout: float = 10.0,
                      application_name: str = "cqgate") -> PgConnection:
        settings = parse_dsn(dsn) if isinstance(dsn, str) else _with_defaults(dict(dsn))
        host, port = settings["host"], settings["port"]
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            async with asyncio.timeout(timeout):
                if host.startswith("/"):       # a unix socket directory, as libpq reads host
                    reader, writer = await asyncio.open_unix_connection(
                        f"{host}/.s.PGSQL.{port}")
                else:
                    reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError as e:
            raise PgError(f"could not connect to {host}:{port}: timed out after {timeout} s",
                          CANNOT_CONNECT) from e
        except OSError as e:
            raise PgError(f"could not connect to {host}:{port}: {e}", CANNOT_CONNECT) from e
        conn = cls(reader, writer, timeout, replication)
        try:
            await conn._startup(settings, application_name, deadline)
        except BaseException:
            conn._abort()
            raise
        conn._lost = CONNECTION_LOST
        return conn

    async def _startup(self, settings: dict, application_name: str, deadline: float) -> None:
        params = {"user": settings["user"], "database": settings["dbname"],
                  "application_name": application_name, "client_encoding": "UTF8"}
        if settings.get("options"):
            params["options"] = settings["options"]
        if self.replication:
            params["replication"] = "database"   # logical replication, and SQL as well
        body = _PROTOCOL_3_0.to_bytes(4, "big") + b"".join(
            _cstr(k) + _cstr(v) for k, v in params.items()) + b"\0"
        self._writer.write((len(body) + 4).to_bytes(4, "big") + body)
        auth = _Auth(settings)
        loop = asyncio.get_running_loop()
        while True:
            kind, body = await self._next_message(max(0.0, deadline - loop.time()))
            if kind == 0x5A:                                       # Z: ReadyForQuery
                self.transaction_status = chr(body[0])
                break
            handler = _STARTUP_HANDLERS.get(kind)
            if handler is None:
                raise PgError(f"unexpected message {chr(kind)!r} during startup", CANNOT_CONNECT)
            await handler(self, auth, body)
        if auth.scram is not None and not auth.scram.verified:
            # else a server that never proved it knows the password could impersonate one
            raise PgError("SCRAM: the server skipped its final message", CANNOT_CONNECT)
        self.auth_method = auth.method
        reported = self.parameters.get("server_version_num")
        self.server_version_num = (int(reported) if reported
                                   else _version_num(self.parameters.get("server_version", "")))

    async def _on_authentication(self, auth: _Auth, body: bytes) -> None:
        code = _I32(body, 0)[0]
        step = _AUTH_STEPS.get(code)
        if step is None:
            raise PgError(f"authentication method {code} is not supported", CANNOT_CONNECT)
        reply = step(auth, body[4:])
        if reply is not None:
            await self._send(reply)

    async def _on_startup_error(self, auth: _Auth, body: bytes) -> None:
        raise PgError.from_response(body)

    async def _on_backend_key(self, auth: _Auth, body: bytes) -> None:
        self.backend_pid = _I32(body, 0)[0]

    async def _on_startup_parameter(self, auth: _Auth, body: bytes) -> None:
        name, value, _ = body.split(b"\0", 2)
        self.parameters[name.decode()] = value.decode()

    async def _ignore(self, auth: _Auth, body: bytes) -> None:
        """NoticeResponse, NotificationResponse, NegotiateProtocolVersion (a minor version or
        option the server lacks: it goes on with 3.0, which is all this client speaks)."""

    # -- transport

    @property
    def closed(self) -> bool:
        return self._closed

    def _take(self) -> tuple[int, bytes] | None:
        """The next whole message in the buffer (type byte, body), or None."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 5:
            return None
        size = _I32(buf, pos + 1)[0]
        if size < 4:
            self._abort()
            raise PgError(f"message length {size}", PROTOCOL_VIOLATION)
        end = pos + 1 + size
        if end > len(buf):
            return None
        self._pos = end
        return buf[pos], buf[pos + 5:end]

    async def _fill(self, timeout: float | None) -> None:
        """More bytes into the buffer. A read of up to _READ_SIZE takes whatever the stream
        holds, so that messages are then cut from one bytes object with no await each; a
        message bigger than that is read whole. Cancelled, a read consumes nothing. Raises
        TimeoutError, or OSError/IncompleteReadError when the server is gone."""
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        need = 1 + _I32(buf, pos + 1)[0] - have if have >= 5 else 5 - have
        async with asyncio.timeout(timeout):
            if need > _READ_SIZE:
                data = await self._reader.readexactly(need)
            else:
                data = await self._reader.read(_READ_SIZE)
        if not data:
            raise asyncio.IncompleteReadError(b"", need)
        self._buf = buf[pos:] + data if have else data
        self._pos = 0

    async def _next_message(self, timeout: float | None = None) -> tuple[int, bytes]:
        """The next message; ``timeout`` (default: the connection's) bounds each wait."""
        while (message := self._take()) is None:
            try:
                await self._fill(self.timeout if timeout is None else timeout)
            except TimeoutError as e:
                self._abort()
                raise PgError("the server did not answer in time", self._lost) from e
            except (asyncio.IncompleteReadError, OSError) as e:
                self._abort()
                raise PgError(f"the server closed the connection ({e})", self._lost) from e
        return message

    async def _send(self, data: bytes) -> None:
        if self._closed:
            raise PgError("the connection is closed", NOT_CONNECTED)
        self._writer.write(data)
        try:
            async with asyncio.timeout(self.timeout):
                await self._writer.drain()
        except TimeoutError as e:
            self._abort()
            raise PgError("the server does not read what we send", self._lost) from e
        except OSError as e:
            self._abort()
            raise PgError(f"the connection was lost ({e})", self._lost) from e

    def _abort(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.transport.abort()

    async def close(self) -> None:
        """Terminate and close; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.write(_TERMINATE)
            self._writer.close()
            async with asyncio.timeout(min(self.timeout, 5.0)):
                await self._writer.wait_closed()
        except (OSError, TimeoutError):
            # the server is gone already, or slow to see us go: nothing is left to tell it
            self._writer.transport.abort()

    async def __aenter__(self) -> PgConnection:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- simple query protocol

    async def _begin_command(self, sql: str) -> int:
        if self._streaming:
            raise PgError("the connection is streaming replication", WRONG_STATE)
        if self._unfinished:           # an abandoned copy_out: skip the rest of its answer
            await self._drain(_Reply())
        self._command += 1
        self._unfinished = True
        await self._send(_message(b"Q", _cstr(sql)))
        return self._command

    async def _drain(self, reply: _Reply, timeout: float | None = None) -> None:
        """Read messages up to ReadyForQuery into ``reply``."""
        while not reply.ready:
            kind, body = await self._next_message(timeout)
            self._handle(reply, kind, body)
        self._unfinished = False

    def _handle(self, reply: _Reply, kind: int, body: bytes) -> None:
        """One message of a command's reply, by its kind; any other is a protocol error."""
        handler = _REPLY_HANDLERS.get(kind)
        if handler is None:
            self._abort()
            raise PgError(f"unexpected message {chr(kind)!r}", PROTOCOL_VIOLATION)
        handler(self, reply, body)

    async def query(self, sql: str, *, timeout: float | None = None) -> list[Result]:
        """Run ``sql`` (one or more statements) with the simple Query protocol: one Result a
        statement, values as text. An ErrorResponse is raised as PgError once ReadyForQuery
        has come, so the connection stays usable. ``timeout`` bounds each wait for a message
        (default: the connection's)."""
        await self._begin_command(sql)
        reply = _Reply()
        await self._drain(reply, timeout)
        if reply.error is not None:
            raise reply.error
        return reply.results

    async def copy_out(self, sql: str) -> AsyncIterator[bytes]:
        """The CopyData payloads of ``COPY … TO STDOUT`` (one row each in text and CSV format).
        Stopping early is allowed: the next command skips the rest of the answer."""
        command = await self._begin_command(sql)
        reply = _Reply()
        while not reply.ready:
            kind, body = await self._next_message()
            if kind == 0x64:                                       # d: CopyData
                yield body
                if self._command != command:
                    raise PgError("copy_out was abandoned for another command", WRONG_STATE)
                continue
            self._handle(reply, kind, body)
        self._unfinished = False
        if reply.error is not None:
            raise reply.error
        if not reply.copied:
            raise PgError("copy_out needs a COPY … TO STDOUT statement", WRONG_STATE)

    # -- logical replication

    async def start_replication(self, slot: str, start_lsn: int,
                                options: dict[str, str]) -> ReplicationStream:
        """START_REPLICATION of a logical slot from ``start_lsn`` (0: where the slot stands),
        with the output plugin's options (pgoutput: proto_version, publication_names, ...)."""
        if not self.replication:
            raise PgError("start_replication needs a connection made with replication=True",
                          WRONG_STATE)
        sql = f"START_REPLICATION SLOT {quote_ident(slot)} LOGICAL {format_lsn(start_lsn)}"
        if options:
            sql += " (" + ", ".join(f"{quote_ident(k)} {quote_literal(v)}"
                                    for k, v in options.items()) + ")"
        await self._begin_command(sql)
        reply = _Reply()
        while not reply.ready:
            kind, body = await self._next_message()
            if kind == 0x57:                                       # W: CopyBothResponse
                self._streaming = True
                self._unfinished = False
                return ReplicationStream(self)
            self._handle(reply, kind, body)
        self._unfinished = False
        raise reply.error or PgError("START_REPLICATION ended without streaming",
                                     PROTOCOL_VIOLATION)


class _Auth:
    """What the authentication exchange needs and what it chose."""

    def __init__(self, settings: dict):
        self.user: str = settings["user"]
        self.password: str | None = settings.get("password")
        self.method = "trust"
        self.scram: _Scram | None = None

    def need_password(self) -> str:
        if self.password is None:
            raise PgError("the server asks for a password and none was given", CANNOT_CONNECT)
        return self.password

    def ok(self, data: bytes) -> None:
        return None

    def cleartext(self, data: bytes) -> bytes:
        self.method = "password"
        return _message(b"p", _cstr(self.need_password()))

    def md5(self, salt: bytes) -> bytes:
        self.method = "md5"
        inner = hashlib.md5((self.need_password() + self.user).encode()).hexdigest()
        outer = hashlib.md5(inner.encode() + salt[:4]).hexdigest()
        return _message(b"p", _cstr("md5" + outer))

    def sasl(self, data: bytes) -> bytes:
        mechanisms = [m.decode() for m in data.split(b"\0") if m]
        if "SCRAM-SHA-256" not in mechanisms:
            raise PgError(f"no supported SASL mechanism among {mechanisms}", CANNOT_CONNECT)
        self.method = "scram-sha-256"
        self.scram = _Scram(self.need_password())
        first = self.scram.first_message()
        return _message(b"p", _cstr("SCRAM-SHA-256") + len(first).to_bytes(4, "big") + first)

    def sasl_continue(self, data: bytes) -> bytes:
        if self.scram is None:
            raise PgError("SASLContinue before SASL", CANNOT_CONNECT)
        return _message(b"p", self.scram.final_message(data.decode()))

    def sasl_final(self, data: bytes) -> None:
        if self.scram is None:
            raise PgError("SASLFinal before SASL", CANNOT_CONNECT)
        self.scram.verify(data.decode())


# AuthenticationRequest codes -> the step that answers (None: nothing to send)
_AUTH_STEPS = {0: _Auth.ok, 3: _Auth.cleartext, 5: _Auth.md5, 10: _Auth.sasl,
               11: _Auth.sasl_continue, 12: _Auth.sasl_final}

_STARTUP_HANDLERS = {
    ord("R"): PgConnection._on_authentication,
    ord("E"): PgConnection._on_startup_error,
    ord("K"): PgConnection._on_backend_key,
    ord("S"): PgConnection._on_startup_parameter,
    ord("N"): PgConnection._ignore,
    ord("v"): PgConnection._ignore,
}


class _Reply:
    """What one simple-protocol command's messages add up to, up to ReadyForQuery."""
    __slots__ = ("results", "current", "error", "copied", "ready")

    def __init__(self):
        self.results: list[Result] = []
        self.current: Result | None = None
        self.error: PgError | None = None
        self.copied = False
        self.ready = False


def _on_row_description(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    count, pos, columns = _I16(body, 0)[0], 2, []
    for _ in range(count):
        end = body.index(0, pos)
        columns.append(body[pos:end].decode())
        pos = end + 19      # table oid, column number, type oid, size, modifier, format
    reply.current = Result(columns)


def _on_data_row(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    count, pos, values = _I16(body, 0)[0], 2, []
    for _ in range(count):
        size = _I32(body, pos)[0]
        pos += 4
        if size < 0:
            values.append(None)
        else:
            values.append(body[pos:pos + size].decode())
            pos += size
    if reply.current is None:
        reply.current = Result()
    reply.current.rows.append(tuple(values))


def _on_command_complete(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    result = reply.current or Result()
    result.tag = body.rstrip(b"\0").decode()
    reply.results.append(result)
    reply.current = None


def _on_empty_query(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    reply.current = None


def _on_error(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    error = PgError.from_response(body)
    if error.fatal:                    # the server closes the connection: no ReadyForQuery
        conn._abort()
        raise error
    reply.error = reply.error or error


def _on_ready(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    conn.transaction_status = chr(body[0])
    reply.ready = True


def _on_parameter(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    name, value, _ = body.split(b"\0", 2)
    conn.parameters[name.decode()] = value.decode()


def _on_copy_out(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    reply.copied = True


def _on_copy_in(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    # COPY FROM STDIN is not supported: CopyFail makes the server answer with an error
    conn._writer.write(_message(b"f", _cstr("cqgate's client does not send COPY data")))


def _on_copy_both(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    conn._abort()
    raise PgError("replication streaming needs start_replication", WRONG_STATE)


def _skip(conn: PgConnection, reply: _Reply, body: bytes) -> None:
    """NoticeResponse, NotificationResponse, CopyDone, and CopyData outside copy_out."""


_REPLY_HANDLERS = {
    ord("T"): _on_row_description, ord("D"): _on_data_row, ord("C"): _on_command_complete,
    ord("I"): _on_empty_query, ord("E"): _on_error, ord("Z"): _on_ready,
    ord("S"): _on_parameter, ord("H"): _on_copy_out, ord("G"): _on_copy_in,
    ord("W"): _on_copy_both, ord("N"): _skip, ord("A"): _skip, ord("c"): _skip,
    ord("d"): _skip,
}


class ReplicationStream:
    """The CopyBoth stream of START_REPLICATION: XLogData and keepalives from the server,
    standby status updates to it. Answer a keepalive that asks for a reply within the server's
    wal_sender_timeout (60 s by default), or it ends the stream."""

    def __init__(self, conn: PgConnection):
        self.connection = conn

    async def next(self, timeout: float) -> XLogData | Keepalive | None:
        """The next message, or None when ``timeout`` seconds pass without one. Messages
        already received come with no wait (and no timer) each."""
        conn = self.connection
        deadline = None
        while True:
            if conn._closed:
                raise PgError("the replication connection is closed", NOT_CONNECTED)
            message = conn._take()
            if message is None:
                loop = asyncio.get_running_loop()
                if deadline is None:
                    deadline = loop.time() + timeout
                try:
                    await conn._fill(max(0.0, deadline - loop.time()))
                except TimeoutError:
                    return None
                except (asyncio.IncompleteReadError, OSError) as e:
                    conn._abort()
                    raise PgError(f"the server closed the replication connection ({e})",
                                  CONNECTION_LOST) from e
                continue
            kind, body = message
            if kind == 0x64:                                       # d: CopyData
                kind = body[0]
                if kind == 0x77:                                   # w: XLogData
                    start, end, sent = _XLOG(body, 1)
                    return XLogData(start, end, sent + PG_EPOCH_US, body[25:])
                if kind == 0x6B:                                   # k: keepalive
                    end, sent, reply = _KEEPALIVE(body, 1)
                    return Keepalive(end, sent + PG_EPOCH_US, reply == 1)
                conn._abort()
                raise PgError(f"unknown replication message {chr(kind)!r}", PROTOCOL_VIOLATION)
            handler = _STREAM_HANDLERS.get(kind)
            if handler is None:
                conn._abort()
                raise PgError(f"unexpected message {chr(kind)!r} in the replication stream",
                              PROTOCOL_VIOLATION)
            handler(conn, body)

    async def send_status(self, written_lsn: int, flushed_lsn: int, applied_lsn: int,
                          reply: bool = False) -> None:
        """A standby status update: the server may recycle WAL and moves the slot's
        confirmed_flush_lsn up to ``flushed_lsn``. ``reply`` asks for a keepalive back."""
        now = time.time_ns() // 1000 - PG_EPOCH_US
        body = b"r" + _STATUS(written_lsn, flushed_lsn, applied_lsn, now, 1 if reply else 0)
        await self.connection._send(_message(b"d", body))


def _stream_error(conn: PgConnection, body: bytes) -> None:
    conn._abort()
    raise PgError.from_response(body)


def _stream_done(conn: PgConnection, body: bytes) -> None:
    # CopyDone: the walsender ends streaming (it does so when the server shuts down)
    conn._abort()
    raise PgError("the server ended the replication stream", CONNECTION_LOST)


def _stream_parameter(conn: PgConnection, body: bytes) -> None:
    name, value, _ = body.split(b"\0", 2)
    conn.parameters[name.decode()] = value.decode()


def _stream_skip(conn: PgConnection, body: bytes) -> None:
    """NoticeResponse."""


_STREAM_HANDLERS = {ord("E"): _stream_error, ord("c"): _stream_done,
                    ord("S"): _stream_parameter, ord("N"): _stream_skip}
