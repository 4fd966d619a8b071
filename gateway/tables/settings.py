"""Session settings (GUCs): defaults, which ones are reported with ParameterStatus, and
canonical spelling; SET/SHOW/RESET, ``-c`` startup options and set_config all go through here."""
from __future__ import annotations

import re

from gateway.tables.pg_catalog import SERVER_VERSION

DEFAULTS = {
    "server_version": SERVER_VERSION,
    "server_version_num": "150018",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "TimeZone": "UTC",
    "application_name": "",
    "is_superuser": "on",
    "session_authorization": "",
    "default_transaction_read_only": "off",
    "in_hot_standby": "off",
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "search_path": '"$user", public',
    "extra_float_digits": "1",
    "max_identifier_length": "63",
    "jit": "off",
    "lc_messages": "C.UTF-8",
    "lc_monetary": "C.UTF-8",
    "lc_numeric": "C.UTF-8",
    "lc_time": "C.UTF-8",
    "lc_collate": "C.UTF-8",
    "lc_ctype": "C.UTF-8",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "bytea_output": "hex",
    "client_min_messages": "notice",
    "block_size": "8192",
    "max_connections": "100",
    "transaction_read_only": "off",
    "cq.mode": "continuous",
    "cq.progress_interval": "1s",      # how often a long archive query reports progress
    "cq.result_memory": "16MB",        # a continuous query's rows held for its client …
    "cq.result_spill": "1GB",          # … and spilled to disk past that (server flags set them)
    "cq.join_recall": "off",           # a recall target for joins of two streams (QJoin) …
    "cq.join_recall_period": "1 minute",   # … over this period
    "cq.engine": "backend",            # where continuous queries run: backend or spark
    "cq.unbounded_state": "off",       # on: a cursor may keep tuples forever (Flink's default)
}

# settings that take one of a few words, as PostgreSQL's enum settings
CHOICES = {"cq.engine": ("backend", "spark"), "cq.unbounded_state": ("off", "on")}

# settings whose default is the server's (a flag), and which only a superuser may raise above it
SERVER_BOUNDS = {"cq.result_memory": "result_memory", "cq.result_spill": "result_spill"}
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}

REPORTED = ("application_name", "client_encoding", "DateStyle", "default_transaction_read_only",
            "in_hot_standby", "integer_datetimes", "IntervalStyle", "is_superuser",
            "server_encoding", "server_version", "session_authorization",
            "standard_conforming_strings", "TimeZone")

READ_ONLY = {"server_version", "server_version_num", "server_encoding", "integer_datetimes",
             "max_identifier_length", "block_size", "lc_collate", "lc_ctype", "in_hot_standby",
             "is_superuser"}

CANONICAL = {k.lower(): k for k in DEFAULTS}
UTF8_NAMES = {"utf8", "utf-8", "unicode", "sql_ascii"}


def canonical(name: str) -> str:
    n = name.strip().strip('"')
    return CANONICAL.get(n.lower(), n.lower())


def is_known(name: str) -> bool:
    n = canonical(name)
    return n in DEFAULTS or "." in n  # dotted names are custom settings, as in PostgreSQL


def size_bytes(text: str, bare_unit: str = "kB") -> int:
    """A memory size as PostgreSQL writes it (``64kB``, ``16MB``, ``1GB``; a bare number is in
    ``bare_unit``, kilobytes as for work_mem); ValueError if it is not one."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text.strip("'"))
    unit = (m.group(2) or bare_unit).lower() if m else ""
    if unit not in _SIZE_UNITS:
        raise ValueError(f"invalid memory size {text!r}: write a number with B, kB, MB, GB "
                         "or TB")
    return int(m.group(1)) * _SIZE_UNITS[unit]
