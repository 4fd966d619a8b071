"""Files that survive a crash whole: after a file is written to a temporary name, fsynced and
renamed into place, its folder is fsynced too, so the new name is on disk (``fsync_dir``,
``write_text``); a folder made for them is in its parent for good (``make_dirs``)."""
from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Put folder ``path``'s entries (a rename into it) on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: str, text: str, tmp: str | None = None) -> None:
    """``text`` as the file ``path``, whole or not at all after a crash: written under
    ``tmp`` (default ``path`` + .tmp), fsynced, renamed over ``path``, the folder fsynced."""
    tmp = tmp or path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, each folder it makes fsynced into its parent,
    so the files renamed into it later are not lost with their folder."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        os.makedirs(folder, exist_ok=True)
        fsync_dir(os.path.dirname(folder) or ".")
