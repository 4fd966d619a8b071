"""A tiny raw PostgreSQL-protocol client for tests that must see individual messages."""
from __future__ import annotations

import socket
import struct


def msg(tag: bytes, body: bytes = b"") -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def startup(user: str = "cq", **params) -> bytes:
    body = struct.pack("!i", 196608) + cstr("user") + cstr(user)
    for k, v in params.items():
        body += cstr(k) + cstr(v)
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def parse(name: str, sql: str) -> bytes:
    return msg(b"P", cstr(name) + cstr(sql) + struct.pack("!h", 0))


def bind(portal: str, stmt: str, params=()) -> bytes:
    body = cstr(portal) + cstr(stmt) + struct.pack("!h", 0) + struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", len(p)) + p
    return msg(b"B", body + struct.pack("!h", 0))


def execute(portal: str = "", max_rows: int = 0) -> bytes:
    return msg(b"E", cstr(portal) + struct.pack("!i", max_rows))


def sync() -> bytes:
    return msg(b"S")


def flush() -> bytes:
    return msg(b"H")


def query(sql: str) -> bytes:
    return msg(b"Q", cstr(sql))


class Client:
    """Connects, starts up under trust, then lets a test send bytes and read message tags."""

    def __init__(self, port: int, **params):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.sock.sendall(startup(**params))
        self.params: dict = {}
        for tag, body in self.until(b"Z"):
            if tag == b"S":
                k, v, _ = body.split(b"\0", 2)
                self.params[k.decode()] = v.decode()
            if tag == b"K":
                self.pid, self.secret = struct.unpack("!ii", body)

    def send(self, *parts: bytes) -> None:
        self.sock.sendall(b"".join(parts))

    def read(self) -> tuple[bytes, bytes]:
        while len(self.buf) < 5 or len(self.buf) < 1 + struct.unpack("!i", self.buf[1:5])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        n = struct.unpack("!i", self.buf[1:5])[0]
        tag, body, self.buf = self.buf[:1], self.buf[5:1 + n], self.buf[1 + n:]
        return tag, body

    def until(self, last: bytes) -> list:
        out = []
        while True:
            tag, body = self.read()
            out.append((tag, body))
            if tag == last:
                return out

    def close(self) -> None:
        self.sock.close()


def cancel(port: int, pid: int, secret: int) -> None:
    """Send a CancelRequest on a connection of its own, as libpq does."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack("!iiii", 16, 80877102, pid, secret))
        s.recv(1)


def error_fields(body: bytes) -> dict:
    return {f[:1].decode(): f[1:].decode() for f in body.split(b"\0") if f}
