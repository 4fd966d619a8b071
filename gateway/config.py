"""Server configuration: command-line flags, with ``CQGATE_*`` environment variables as
defaults, and defaults that are safe (loopback only, not port 5432)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields


def _default_data_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cqgate", "data")


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 55433
    ingest_port: int = 55533
    data_dir: str = ""
    auth: str = "trust"                  # trust | password | md5 | scram-sha-256
    users_file: str | None = None        # lines of user:password
    users: str | None = None             # inline "user:password,user2:password2"
    superuser: str = "cq"                # the superuser role a fresh data directory gets
    max_connections: int = 100           # sessions at once; the next is refused (53300)
    duckdb_memory: str = "50%"           # DuckDB's memory limit; bigger queries spill, then fail
    result_memory: str = "16MB"          # a continuous query's unread rows held in memory …
    result_spill: str = "1GB"            # … then on disk; past that the query ends (54000)
    ingest_role: str | None = None       # the role of sources that name none
    tls_cert: str | None = None
    tls_key: str | None = None
    require_tls: bool = False
    max_message_bytes: int = 64 * 1024 * 1024
    max_line_bytes: int = 1024 * 1024    # longest line a source may send
    workers: int = 16                    # threads running DuckDB work
    backend_workers: int = 1             # back-end processes keyed aggregates are split across
    checkpoint_interval: float = 0.0     # seconds between a cursor's checkpoints; 0: none
    log_level: str = "INFO"
    aggregates: str | None = None        # user aggregates: "name=module:Class,..."
    functions: str | None = None         # Python functions: "name=module:function,..."
    spark_master: str = "local[*]"       # where archive queries run: local, or spark://host:port
    spark_warm: bool = False             # start Spark with the server, not at the first query
    spark_conf: str | None = None        # the server's Spark settings: "key=value,..."
    spark_real_time: int | None = None   # cursors' queries in Spark's real-time mode at once;
    #                                      None: a local master's cores minus one, else 0
    wrapper_path: str | None = None      # more folders of CREATE WRAPPER modules (os.pathsep)
    http_port: int | None = None         # /metrics over HTTP; None: off
    http_host: str = "127.0.0.1"
    log_format: str = "text"             # text | json (one object a line)

    def __post_init__(self):
        if not self.data_dir:
            self.data_dir = _default_data_dir()

    @classmethod
    def env_defaults(cls) -> dict:
        """Values from CQGATE_<FIELD> environment variables, typed like the fields."""
        out = {}
        for f in fields(cls):
            raw = os.environ.get("CQGATE_" + f.name.upper())
            if raw is None:
                continue
            if f.type in ("int", int, "int | None"):
                out[f.name] = int(raw)
            elif f.type in ("float", float):
                out[f.name] = float(raw)
            elif f.type in ("bool", bool):
                out[f.name] = raw.lower() in ("1", "true", "yes", "on")
            else:
                out[f.name] = raw
        return out


def spark_settings(text: str | None) -> dict:
    """``--spark-conf``'s settings, "key=value" separated by commas (a comma inside a value
    stays in it unless another "key=" follows it)."""
    out = {}
    for item in re.split(r",(?=\s*[A-Za-z][\w.]*=)", text or ""):
        if item.strip():
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--spark-conf {item.strip()!r} is not key=value")
            out[key.strip()] = value.strip()
    return out
