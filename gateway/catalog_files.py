"""The server's own catalog (stream objects, roles, owners and privileges): JSON documents in
``<data_dir>/catalog``, outside DuckDB so no SQL reaches them, each replaced atomically."""
from __future__ import annotations

import json
import os

from gateway.durable import fsync_dir

FOLDER = "catalog"


def path(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, FOLDER, name)


def load(data_dir: str, name: str):
    """The document ``name`` holds, or None when there is none yet."""
    try:
        with open(path(data_dir, name), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def save(data_dir: str, name: str, document) -> None:
    """Write ``document`` so that a crash leaves the old or the new one, never half of either:
    a temporary file beside it, fsynced, renamed over it, the folder fsynced. Only the server's
    user may read it (roles hold password verifiers)."""
    folder = os.path.join(data_dir, FOLDER)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    final = os.path.join(folder, name)
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fsync_dir(folder)
