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


# What the daemon creates for itself is private (it runs with umask 077, as its systemd unit
# sets); what it creates in a project's repository is made as the repository needs.
PRIVATE_UMASK = 0o077
REPOSITORY_DIR_MODE = 0o755


def make_repository_dir(path: Path) -> None:
    """``path`` created (its parent must exist) readable like the rest of the repository, not
    with the daemon's private umask; an existing directory is left as it is."""
    try:
        path.mkdir()
    except FileExistsError:
        return
    os.chmod(path, REPOSITORY_DIR_MODE)


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
