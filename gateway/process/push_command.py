"""``cqgate push``: a source program. Sends a file (or standard input) to a stream through the
ingest port, as fast as the server takes it, at a fixed rate (``--rate`` lines/s), or replayed
at event-time speed (``--speed 10``: ten times faster than the timestamps say), with a progress
line on stderr. The server's answer (an ``ERROR:`` line) ends it with exit code 1."""
from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sys
import time

PIECE = 1 << 20            # bytes read and sent at a time when nothing limits the pace
TICK = 0.05                # seconds between paced sends


def first_line(args) -> str:
    """``<wrapper>,<stream>[,<role>,<password>]``: the role from ``--role``, its password
    from PGPASSWORD (as psql takes it), never from the command line."""
    head = f"{args.wrapper},{args.stream}"
    if getattr(args, "role", None):
        head += f",{args.role}"
        if os.environ.get("PGPASSWORD"):
            head += f",{os.environ['PGPASSWORD']}"
    return head + "\n"


class Progress:
    """One line on stderr, redrawn at most ten times a second."""

    def __init__(self, total: int | None, quiet: bool):
        self.total, self.quiet = total, quiet
        self.bytes = self.lines = 0
        self.start = self._drawn = time.monotonic()

    def add(self, data: bytes) -> None:
        self.bytes += len(data)
        self.lines += data.count(b"\n")
        if time.monotonic() - self._drawn >= 0.1:
            self.draw()

    def draw(self, end: str = "") -> None:
        if self.quiet:
            return
        self._drawn = now = time.monotonic()
        rate = self.lines / max(now - self.start, 1e-9)
        bar = ""
        if self.total:
            done = min(1.0, self.bytes / self.total)
            bar = f"{done:4.0%} |{'#' * int(done * 20):<20}| "
        print(f"\r{bar}{self.bytes / 2**20:.1f} MiB, {self.lines:,} lines, {rate:,.0f} lines/s",
              end=end, file=sys.stderr, flush=True)


def _event_time(line: bytes, field: str | None, wrapper: str) -> float | None:
    """A line's event time in seconds, from ``field`` (a 1-based position for CSV, a key
    for JSON); without ``field``, the first CSV field that reads as a timestamp."""
    text = line.decode("utf-8", "replace").strip()
    if not text or text.startswith("#"):
        return None
    if wrapper == "jsonwrapper":
        try:
            values = [json.loads(text).get(field)] if field else list(json.loads(text).values())
        except (ValueError, AttributeError):
            return None
    else:
        fields = text.split(",")
        values = [fields[int(field) - 1]] if field and int(field) <= len(fields) else \
            [] if field else fields
    for v in values:
        try:
            return dt.datetime.fromisoformat(str(v).strip().strip('"')).timestamp()
        except ValueError:
            continue
    return None


def _pieces(src, args):
    """What to send, and when (seconds after the start), as (due, bytes) pairs."""
    if args.speed is None and args.rate is None:
        while piece := src.read(PIECE):
            yield 0.0, piece
        return
    first = None
    batch, due = [], 0.0
    for n, line in enumerate(src):
        if args.speed is not None:
            t = _event_time(line, args.time_field, args.wrapper)
            if t is not None:
                first = t if first is None else first
                at = max(0.0, (t - first) / args.speed)
            else:
                at = due
        else:
            at = n / args.rate
        if batch and at - due >= TICK:
            yield due, b"".join(batch)
            batch = []
        if not batch:
            due = at
        batch.append(line)
    if batch:
        yield due, b"".join(batch)


def _answer(sock) -> bytes:
    answer = b""
    try:
        while chunk := sock.recv(4096):
            answer += chunk
    except OSError:
        pass
    return answer


def push(args) -> int:
    if args.wrapper == "arrowwrapper" and (args.rate is not None or args.speed is not None):
        print("cqgate push: --rate and --speed pace lines; an Arrow stream (arrowwrapper) is "
              "sent as fast as the server takes it", file=sys.stderr)
        return 2
    src = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    total = None if args.file == "-" else os.path.getsize(args.file)
    progress = Progress(total, args.quiet)
    closed = False
    try:
        with socket.create_connection((args.host, args.port), timeout=30) as sock:
            try:
                sock.sendall(first_line(args).encode())
                start = time.monotonic()
                for due, piece in _pieces(src, args):
                    wait = start + due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    sock.sendall(piece)
                    progress.add(piece)
                sock.shutdown(socket.SHUT_WR)
            except OSError:                # the server hung up (EPIPE, ECONNRESET,
                closed = True              # ENOTCONN): its answer says why
            answer = _answer(sock)
    except ConnectionRefusedError:
        print(f"\ncqgate push: nothing listens on {args.host}:{args.port}; start the server "
              "(cqgate serve) or give its ingest port with --port", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"\ncqgate push: {e}", file=sys.stderr)
        return 1
    finally:
        if src is not sys.stdin.buffer:
            src.close()
    progress.draw(end="\n")
    if answer or closed:
        print((answer.decode("utf-8", "replace").strip() or
               "ERROR: the server closed the connection"), file=sys.stderr)
        return 1
    return 0
