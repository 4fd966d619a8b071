"""How the server's processes ask glibc for memory: blocks up to 32 MiB come from the heap, and
up to 256 MiB of freed heap is kept for reuse instead of being handed back to the kernel.

Stream data passes through in megabyte pieces (received chunks, frames, batches). By default
glibc maps each such block fresh and unmaps it when freed, so every page of the next one
faults and is zeroed by the kernel again: about 1 ms a megabyte, twelve times the cost of
filling memory already held. ``keep_freed_memory()`` is called once at each process's start;
elsewhere than glibc it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20      # glibc's largest; blocks below it come from the heap
TRIM_THRESHOLD = 256 << 20     # freed heap kept for reuse before any is given back


def keep_freed_memory() -> bool:
    """Whether glibc took the settings."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
