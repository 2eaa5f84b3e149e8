"""Keep the C heap small (issue 12: RSS at 30,000 entries).

glibc gives a thread that allocates while another holds the lock of its arena an arena of its
own, up to eight per core; freed memory stays in the arena that had it. tantivy starts a fresh
indexing thread at every commit (and merge threads), so a compaction run, a commit every few
hundred decisions, spread each writer's ~15 MB of indexing memory over a new arena each time:
~250 MB resident at its peak, all of it freed memory (``bench/memory.py``). ``limit_arenas``,
called before the daemon starts any thread, caps them at ``ARENAS`` (the main one and one for
every other thread), so the next writer reuses what the last one freed: the peak fell to ~130 MB
with no slower commit or search (a user's own ``MALLOC_ARENA_MAX`` is left as it is).

``give_back`` (``malloc_trim(0)``) returns the free pages of every arena after big work: a
daemon that imported 30,000 entries kept ~70 MB it no longer used. Elsewhere (macOS, musl) there
is nothing to call and both do nothing: their allocators give memory back by themselves or not at
all, and nothing depends on it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

ARENAS = 2
M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_loaded = False


def _glibc_call(name: str) -> Any | None:
    """A function of glibc's malloc, or None where there is none (not Linux, or musl)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # already imported by the daemon's dependencies: nothing on the start path

    try:
        return getattr(ctypes.CDLL(None), name)  # the process's own C library
    except (OSError, AttributeError):
        return None


def _load() -> Callable[[int], int] | None:
    import ctypes

    trim = _glibc_call("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas``; whether it was set. Before any thread starts:
    glibc counts the arenas it may make when it first needs more than eight."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False  # the user's own setting, which glibc read at start
    mallopt = _glibc_call("mallopt")
    if mallopt is None:
        return False
    import ctypes

    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


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
