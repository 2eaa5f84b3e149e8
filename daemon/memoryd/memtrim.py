"""Give the heap that big work freed back to the system (issue 12: RSS after imports).

glibc keeps freed memory in its arenas (one per thread that allocated: the owner, tantivy's
writer and committer threads), so a daemon that imported 30,000 entries kept ~70 MB it no longer
used. ``malloc_trim(0)`` returns the free pages of every arena. Elsewhere (macOS, musl) there is
nothing to call and this does nothing: their allocators give memory back by themselves or not at
all, and nothing depends on it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_loaded = False


def _load() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only once big work is done: not on the start path

    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        trim = libc.malloc_trim  # glibc only: AttributeError on musl
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back() -> bool:
    """Return the free pages of the C heap to the system; whether there was a way to."""
    global _trim, _loaded
    with _lock:
        if not _loaded:
            _trim, _loaded = _load(), True
        trim = _trim
    if trim is None:
        return False
    trim(0)
    return True
