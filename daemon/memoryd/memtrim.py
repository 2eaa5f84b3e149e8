"""Keep the C heap small (issue 12: RSS at 30,000 entries; ``bench/memory.py``).

Two habits of glibc's malloc kept memory the daemon had freed:

- It gives a thread that allocates while another holds the lock of its arena an arena of its
  own, up to eight per core, and freed memory stays in the arena that had it. tantivy starts a
  fresh indexing thread at every commit (and merge threads), so a compaction run, a commit every
  few hundred decisions, spread each writer's ~15 MB of indexing memory over a new arena each
  time: ~250 MB resident at the peak of the run after a 30,000-entry import. Capped at
  ``ARENAS`` (the main one and one for every other thread), the next writer reuses what the last
  one freed: ~130 MB.
- Its mmap threshold rises to the largest block freed (up to 32 MB) and the trim threshold to
  twice that, so tantivy's multi-MB buffers came from the heap and their pages were never given
  back: ~40 MB more while a writer commits often. ``TRIM_THRESHOLD`` fixed (which fixes the mmap
  threshold at its 128 KiB default too) returns them as they are freed: the peak fell to
  ~105 MB, commits took no longer (``bench/memory.py``, ``bench/retrieval.py``).

``tune`` sets both before the daemon starts a thread (a user's own ``MALLOC_ARENA_MAX`` or
``MALLOC_TRIM_THRESHOLD_`` is left as it is). ``give_back`` (``malloc_trim(0)``) returns the free
pages inside every arena after big work: a daemon that imported 30,000 entries kept ~70 MB it no
longer used. Elsewhere (macOS, musl) there is nothing to call and both do nothing: their
allocators give memory back by themselves or not at all, and nothing depends on it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

ARENAS = 2
TRIM_THRESHOLD = 1 << 20
# mallopt's parameter numbers (malloc.h), and the variable a user would set each with.
_SETTINGS = (
    (-8, "MALLOC_ARENA_MAX", ARENAS),  # M_ARENA_MAX
    (-1, "MALLOC_TRIM_THRESHOLD_", TRIM_THRESHOLD),  # M_TRIM_THRESHOLD
)

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


def tune() -> bool:
    """Cap glibc's arenas and fix its trim threshold (see above); whether it could. Before any
    thread starts: glibc counts the arenas it may make when it first needs more than eight."""
    mallopt = _glibc_call("mallopt")
    if mallopt is None:
        return False
    import ctypes

    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    for param, variable, value in _SETTINGS:
        if not os.environ.get(variable):  # else the user's own, which glibc read at start
            mallopt(param, value)
    return True


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
