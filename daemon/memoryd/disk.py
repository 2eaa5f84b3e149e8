"""What stopped a write, named from the disk itself: libraries report a full disk or a permission
taken away in their own words ("database or disk is full", "disk I/O error", "index writer was
killed"), or hide it behind a later error."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

LOW_SPACE_BYTES = 1 << 20


def write_failure_cause(directory: Path, exc: BaseException) -> str:
    """``exc`` said plainly: no space left, a read-only file system or no permission on
    ``directory``, as the disk reports it now; else the error's own words."""
    try:
        fs = os.statvfs(directory)
        if fs.f_flag & os.ST_RDONLY:
            return f"Read-only file system: {directory} cannot be written ({exc})"
        if fs.f_bavail * fs.f_frsize < LOW_SPACE_BYTES:
            return f"No space left on the device of {directory} ({exc})"
    except OSError:
        pass
    if not os.access(directory, os.W_OK):
        return f"Permission denied: {directory} cannot be written ({exc})"
    return str(exc)


def append_durably(fd: int, data: bytes, size: int) -> int:
    """Write ``data`` at the end of the file ``fd`` (``size`` bytes long) and fsync it; returns
    the new size. On failure the file is cut back to ``size`` before the error is raised: a full
    disk can take part of a line, and the next line must start where this one did (truncating
    frees space, it never needs any)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise
    return size + len(data)
