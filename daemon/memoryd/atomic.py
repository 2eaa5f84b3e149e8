"""Atomic file replacement: temp file in the same directory, flush + fsync, rename, fsync the
directory (design §3). Readers see the old file or the new one, never a mix."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path, data: bytes, mode: int = 0o600, *, unless: Callable[[], bool] | None = None
) -> os.stat_result | None:
    """Returns the new file's status as written (taken before the rename, which keeps the
    inode, size and modification time): a caller can tell its own write from a later one.
    ``unless``, asked at the last moment before the rename, can call the write off (None):
    the file changed since the caller read it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            written = os.fstat(fh.fileno())
        os.chmod(tmp, mode)
        if unless is not None and unless():
            Path(tmp).unlink()
            return None
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return written
