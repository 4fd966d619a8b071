"""The ``cqgate`` command: ``cqgate serve`` runs the server, ``cqgate push`` sends a file to a
stream. Every ``serve`` flag can also come from a ``CQGATE_<NAME>`` variable; the help says which."""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import sys
from importlib import metadata

from executor import plan as P
from executor import wire

from gateway.process import server
from gateway.config import Config
from gateway.process.push_command import push


class JsonLines(logging.Formatter):
    """--log-format json: one object a line, with stable keys (time in UTC, ISO 8601)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
               .isoformat(timespec="milliseconds"),
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def _serve(args) -> int:
    # flags win over CQGATE_* variables, which win over the defaults (also for settings that
    # have no flag, such as CQGATE_MAX_MESSAGE_BYTES and CQGATE_WORKERS)
    cfg = Config(**{**Config.env_defaults(),
                    **{k: v for k, v in vars(args).items()
                       if k in Config.__dataclass_fields__ and v is not None}})
    for listed in ("aggregates", "functions", "spark_conf"):
        if isinstance(getattr(cfg, listed), list):
            setattr(cfg, listed, ",".join(getattr(cfg, listed)))
    if cfg.backend_workers < 1:
        print(f"cqgate: --backend-workers must be at least 1, not {cfg.backend_workers}",
              file=sys.stderr)
        return 2
    if not cfg.checkpoint_interval >= 0:
        print(f"cqgate: --checkpoint-interval must be 0 (off) or more seconds, not "
              f"{cfg.checkpoint_interval}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if cfg.log_format == "json" else logging.Formatter(
        "%(asctime)s cqgate %(levelname)s %(message)s"))
    logging.basicConfig(level=cfg.log_level.upper(), handlers=[handler])
    wire.keep_freed_memory()
    try:
        P.load_user_aggregates(cfg.aggregates)
    except (ImportError, AttributeError, ValueError) as e:
        print(f"cqgate: cannot load the user aggregates {cfg.aggregates!r}: {e}",
              file=sys.stderr)
        return 2
    try:
        P.load_python_functions(cfg.functions)
    except P.FunctionError as e:
        print(f"cqgate: cannot load the Python functions {cfg.functions!r}: {e}",
              file=sys.stderr)
        return 2
    try:
        asyncio.run(server.serve(
            cfg, ready=lambda line: print(line, flush=True)))
    except KeyboardInterrupt:
        pass
    except server.ConfigError as e:
        print(f"cqgate: {e}", file=sys.stderr)
        return 2
    return 0


TOP_EPILOG = """\
examples:
  cqgate serve                                 # 127.0.0.1:55433, data in ~/.cqgate/data
  psql -h 127.0.0.1 -p 55433 -U cq             # then: CREATE STREAM ..., SELECT ... FROM s [RANGE ...]
  cqgate push trips trips.csv                  # send a CSV file to the stream trips

Run 'cqgate COMMAND --help' for a command's options. Documentation: docs/README.md.
"""

SERVE_EPILOG = """\
settings with no flag (environment only):
  CQGATE_SPARK_DRIVER_HOST   where a remote Spark cluster's executors reach the gateway
                             (default: loopback for local[*], the host name otherwise)
  CQGATE_MAX_MESSAGE_BYTES   a larger protocol message closes its connection with 54000
                             (default 64 MiB)
  CQGATE_WORKERS             threads running DuckDB work for all sessions (default 16)

The server logs one line per event to standard error: the back end starting, clients
connecting and leaving, continuous queries starting and stopping (cursor or window name,
session pid and query), sources connecting and finishing, late tuples (at most one line per
stream every 10 s), cancel requests and archive compaction failures.

examples:
  cqgate serve --data-dir /var/lib/cqgate
  cqgate serve --host 0.0.0.0 --auth scram-sha-256 --users-file /etc/cqgate/users
  cqgate serve --spark-master spark://spark-master:7077 --spark-warm
"""

PUSH_EPILOG = """\
A progress line on standard error shows lines sent and the rate (--quiet hides it). The
exit code is 0 when the server took every line, 1 when it could not be reached or answered
with an ERROR: line (a stream that does not exist, a line too long); bad lines are skipped
by the server and counted in cq_ingest_errors.

examples:
  cqgate push trips trips.csv
  cqgate push --wrapper jsonwrapper clicks clicks.jsonl
  cqgate push --speed 10 trips trips.csv         # replay ten times faster than event time
  cqgate push --wrapper arrowwrapper trips trips.arrows   # an Arrow IPC stream file
  tail -f app.log | cqgate push --wrapper syslog logs -
"""


def _version() -> str:
    try:
        return metadata.version("cqgate")
    except metadata.PackageNotFoundError:       # run from a checkout without installing
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    env = Config.env_defaults()
    d = Config(**env)
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(
        prog="cqgate", formatter_class=raw, epilog=TOP_EPILOG,
        description="cqgate: a continuous-query gateway that speaks the PostgreSQL protocol.")
    p.add_argument("--version", action="version", version=f"cqgate {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="run the server", formatter_class=raw,
                       epilog=SERVE_EPILOG,
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
                   help="where tables, catalog and archives live (default "
                        f"{_home(d.data_dir)}; env CQGATE_DATA_DIR)")
    s.add_argument("--auth", default=d.auth, choices=["trust", "password", "md5",
                                                      "scram-sha-256"],
                   help=f"client authentication (default {d.auth}; env CQGATE_AUTH)")
    s.add_argument("--users-file", default=d.users_file,
                   help="file of user:password lines for password authentication "
                        "(env CQGATE_USERS_FILE)")
    s.add_argument("--users", default=d.users,
                   help="inline user:password[,user:password] (env CQGATE_USERS)")
    s.add_argument("--superuser", default=d.superuser,
                   help="the superuser role a fresh data directory gets (default "
                        f"{d.superuser}; env CQGATE_SUPERUSER)")
    s.add_argument("--max-connections", type=int, default=d.max_connections,
                   help="sessions at once; the next is refused with 53300 (default "
                        f"{d.max_connections}; env CQGATE_MAX_CONNECTIONS)")
    s.add_argument("--backend-workers", type=int, default=d.backend_workers,
                   help="back-end processes; a continuous keyed aggregate over one stream is "
                        "split across them by its key, everything else runs on the first "
                        f"(default {d.backend_workers}; env CQGATE_BACKEND_WORKERS)")
    s.add_argument("--checkpoint-interval", type=float, default=d.checkpoint_interval,
                   metavar="SECONDS",
                   help="how often a cursor that can go on after a back-end crash saves its "
                        "operators' state, so that its restart reads the archive only from "
                        f"there (default {d.checkpoint_interval:g}: never; env "
                        "CQGATE_CHECKPOINT_INTERVAL)")
    s.add_argument("--duckdb-memory", default=d.duckdb_memory,
                   help="memory DuckDB may use for SQL on tables (a size such as 4GB, or a "
                        "share of the machine's memory such as 50%%); larger queries spill to "
                        f"DATA_DIR/duckdb_tmp (default {d.duckdb_memory.replace('%', '%%')}; env "
                        "CQGATE_DUCKDB_MEMORY)")
    s.add_argument("--result-memory", default=d.result_memory,
                   help="a continuous query's rows its client has not read yet, held in "
                        "memory; more goes to DATA_DIR/result_spill (default "
                        f"{d.result_memory}; env CQGATE_RESULT_MEMORY; a session may set "
                        "cq.result_memory lower)")
    s.add_argument("--result-spill", default=d.result_spill,
                   help="how much of those rows may wait on disk before the query ends with "
                        f"54000 (default {d.result_spill}; env CQGATE_RESULT_SPILL; a session "
                        "may set cq.result_spill lower)")
    s.add_argument("--ingest-role", default=d.ingest_role,
                   help="the role whose INSERT privilege a source on the ingest port uses "
                        "when its first line names none (default: the superuser of a fresh "
                        "data directory; env CQGATE_INGEST_ROLE)")
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
    s.add_argument("--function", dest="functions", action="append",
                   default=[d.functions] if d.functions else None,
                   help="a Python scalar function, name=module:function (repeatable; also "
                        "CQGATE_FUNCTIONS, comma-separated); the function has 'arg_types' "
                        "and 'returns' SQL types, and 'vectorized' when it takes Arrow arrays")
    s.add_argument("--max-line-bytes", type=int, default=d.max_line_bytes,
                   help="longest line a source may send on the ingest port; a longer one "
                        f"closes the connection (default {d.max_line_bytes}; env "
                        "CQGATE_MAX_LINE_BYTES)")
    s.add_argument("--spark-master", default=d.spark_master,
                   help="Spark master for queries over archived streams: local[*] (the "
                        "default, in this process) or spark://host:7077 for a standalone "
                        "cluster, which must read the data directory at the same path "
                        "(env CQGATE_SPARK_MASTER)")
    s.add_argument("--spark-warm", action="store_true", default=d.spark_warm,
                   help="start Spark with the server rather than at the first archive query "
                        "(env CQGATE_SPARK_WARM)")
    s.add_argument("--spark-conf", dest="spark_conf", action="append",
                   default=[d.spark_conf] if d.spark_conf else None, metavar="KEY=VALUE",
                   help="a setting of the server's SparkSession, as spark-submit's --conf "
                        "(repeatable; also CQGATE_SPARK_CONF, comma-separated), e.g. "
                        "spark.driver.memory=4g")
    s.add_argument("--spark-real-time", dest="spark_real_time", type=int,
                   default=d.spark_real_time, metavar="N",
                   help="cursors' queries on Spark that may run in Spark's real-time mode at "
                        "once, each holding an executor core while it runs (default: a local "
                        "master's cores minus one; 0 on a cluster, or to run micro-batches "
                        "only; env CQGATE_SPARK_REAL_TIME)")
    s.add_argument("--wrapper-path", default=d.wrapper_path,
                   help="folders (separated by ':') whose Python modules CREATE WRAPPER may "
                        "name, besides DATA_DIR/wrappers (env CQGATE_WRAPPER_PATH)")
    s.add_argument("--log-level", default=d.log_level, help="DEBUG, INFO, WARNING "
                                                             "(env CQGATE_LOG_LEVEL)")
    s.add_argument("--log-format", default=d.log_format, choices=("text", "json"),
                   help="text (default) or json: one JSON object a line with the keys time, "
                        "level, logger and message (env CQGATE_LOG_FORMAT)")
    s.add_argument("--http-port", type=int, default=d.http_port,
                   help="serve Prometheus metrics at http://HOST:PORT/metrics (0: any free "
                        "port, printed on the ready line; default off; env CQGATE_HTTP_PORT)")
    s.add_argument("--http-host", default=d.http_host,
                   help="address for --http-port (default 127.0.0.1; from another host a "
                        "request needs the token the ready line prints; env "
                        "CQGATE_HTTP_HOST)")
    s.set_defaults(func=_serve)
    u = sub.add_parser("push", help="send a file to a stream through the ingest port",
                       formatter_class=raw, epilog=PUSH_EPILOG,
                       description="Send FILE (or standard input, '-') to STREAM through the "
                                   "server's ingest port, as a source: the first line names "
                                   "the wrapper and the stream, then the file's lines follow.")
    u.add_argument("stream", help="the stream, optionally schema-qualified")
    u.add_argument("file", help="a file of lines, or - for standard input")
    u.add_argument("--wrapper", default="csvwrapper",
                   help="csvwrapper (default), jsonwrapper, arrowwrapper (FILE is an Arrow "
                        "IPC stream, sent as fast as the server takes it), or a wrapper made "
                        "with CREATE WRAPPER and attached to the stream")
    pace = u.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, help="send at most this many lines a second")
    pace.add_argument("--speed", type=float,
                      help="replay at event-time speed times this (1 = as the timestamps "
                           "say, 10 = ten times faster)")
    u.add_argument("--time-field", help="with --speed: the event-time field (1-based CSV "
                                        "position or JSON key; default: the first field "
                                        "that reads as a timestamp)")
    u.add_argument("--role", help="the role that writes (it needs INSERT on the stream); its "
                                  "password comes from PGPASSWORD. Without it the server's "
                                  "--ingest-role writes, or under trust its superuser")
    u.add_argument("--quiet", action="store_true", help="no progress line")
    u.add_argument("--host", default=d.host if d.host != "0.0.0.0" else "127.0.0.1",
                   help="the server's address (default %(default)s)")
    u.add_argument("--port", type=int, default=d.ingest_port,
                   help=f"the ingest port (default {d.ingest_port}; env CQGATE_INGEST_PORT)")
    u.set_defaults(func=_push)
    return p


def _home(path: str) -> str:
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def _push(args) -> int:
    return push(args)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
