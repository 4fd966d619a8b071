"""The ``cqgate`` command: ``cqgate serve`` starts the server (more subcommands arrive with the
ingest and archive layers). Every flag can also come from a ``CQGATE_<NAME>`` variable."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .config import Config


def _serve(args) -> int:
    # flags win over CQGATE_* variables, which win over the defaults (also for settings that
    # have no flag, such as CQGATE_MAX_MESSAGE_BYTES and CQGATE_WORKERS)
    cfg = Config(**{**Config.env_defaults(),
                    **{k: v for k, v in vars(args).items()
                       if k in Config.__dataclass_fields__ and v is not None}})
    if isinstance(cfg.aggregates, list):
        cfg.aggregates = ",".join(cfg.aggregates)
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s cqgate %(levelname)s %(message)s")
    from executor import udf
    try:
        udf.load(cfg.aggregates)
    except (ImportError, AttributeError, ValueError) as e:
        print(f"cqgate: cannot load the user aggregates {cfg.aggregates!r}: {e}",
              file=sys.stderr)
        return 2
    try:
        asyncio.run(__import__("gateway.server", fromlist=["serve"]).serve(
            cfg, ready=lambda line: print(line, flush=True)))
    except KeyboardInterrupt:
        pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    env = Config.env_defaults()
    d = Config(**env)
    p = argparse.ArgumentParser(
        prog="cqgate",
        description="cqgate: a continuous-query gateway that speaks the PostgreSQL protocol.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the server",
                       description="Run the cqgate server until SIGTERM or Ctrl-C. It prints a "
                                   "line containing 'ready' once it accepts connections.")
    s.add_argument("--host", default=d.host, help=f"address to listen on (default {d.host}; "
                                                  "env CQGATE_HOST)")
    s.add_argument("--port", type=int, default=d.port,
                   help=f"PostgreSQL protocol port, 0 = any free port (default {d.port}; "
                        "env CQGATE_PORT)")
    s.add_argument("--ingest-port", type=int, default=d.ingest_port,
                   help=f"port for stream sources (default {d.ingest_port}; "
                        "env CQGATE_INGEST_PORT)")
    s.add_argument("--data-dir", default=d.data_dir,
                   help=f"where tables, catalog and archives live (default {d.data_dir}; "
                        "env CQGATE_DATA_DIR)")
    s.add_argument("--auth", default=d.auth, choices=["trust", "password", "md5",
                                                      "scram-sha-256"],
                   help=f"client authentication (default {d.auth}; env CQGATE_AUTH)")
    s.add_argument("--users-file", default=d.users_file,
                   help="file of user:password lines for password authentication "
                        "(env CQGATE_USERS_FILE)")
    s.add_argument("--users", default=d.users,
                   help="inline user:password[,user:password] (env CQGATE_USERS)")
    s.add_argument("--tls-cert", default=d.tls_cert, help="TLS certificate (PEM) "
                                                           "(env CQGATE_TLS_CERT)")
    s.add_argument("--tls-key", default=d.tls_key, help="TLS private key (PEM) "
                                                         "(env CQGATE_TLS_KEY)")
    s.add_argument("--require-tls", action="store_true", default=d.require_tls,
                   help="refuse connections that do not use TLS (env CQGATE_REQUIRE_TLS)")
    s.add_argument("--aggregate", dest="aggregates", action="append",
                   default=[d.aggregates] if d.aggregates else None,
                   help="a user-defined aggregate, name=module:Class (repeatable; also "
                        "CQGATE_AGGREGATES, comma-separated); the class has add(value), "
                        "result() and a 'returns' SQL type")
    s.add_argument("--log-level", default=d.log_level, help="DEBUG, INFO, WARNING "
                                                             "(env CQGATE_LOG_LEVEL)")
    s.set_defaults(func=_serve)
    u = sub.add_parser("push", help="send a file to a stream through the ingest port",
                       description="Send FILE (or standard input, '-') to STREAM through the "
                                   "server's ingest port, as a source: the first line names "
                                   "the wrapper and the stream, then the file's lines follow.")
    u.add_argument("stream", help="the stream, optionally schema-qualified")
    u.add_argument("file", help="a file of lines, or - for standard input")
    u.add_argument("--wrapper", default="csvwrapper", help="csvwrapper (default) or "
                                                            "jsonwrapper")
    u.add_argument("--host", default=d.host if d.host != "0.0.0.0" else "127.0.0.1")
    u.add_argument("--port", type=int, default=d.ingest_port,
                   help=f"the ingest port (default {d.ingest_port}; env CQGATE_INGEST_PORT)")
    u.set_defaults(func=_push)
    return p


def _push(args) -> int:
    """A source program: streams the file in 1 MiB pieces and reports progress on stderr."""
    import socket
    src = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    sent = 0
    try:
        with socket.create_connection((args.host, args.port), timeout=30) as sock:
            sock.sendall(f"{args.wrapper},{args.stream}\n".encode())
            while piece := src.read(1 << 20):
                sock.sendall(piece)
                sent += len(piece)
                print(f"\r{sent / 2**20:.1f} MiB sent", end="", file=sys.stderr, flush=True)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError as e:
        print(f"cqgate push: {e}", file=sys.stderr)
        return 1
    finally:
        if src is not sys.stdin.buffer:
            src.close()
    print(f"\r{sent / 2**20:.1f} MiB sent", file=sys.stderr)
    if answer:
        print(answer.decode("utf-8", "replace").strip(), file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
