"""Files that survive a crash whole: after a file is written to a temporary name, fsynced and
renamed into place, its folder is fsynced too, so the new name is on disk."""
from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """Put folder ``path``'s entries (a rename into it) on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
