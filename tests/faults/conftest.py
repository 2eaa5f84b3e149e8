"""Faults made real: a small tmpfs that can be filled and emptied again (the machine must let the
test mount one: root, or a container allowed to; otherwise the test is skipped with the reason)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class SmallDisk:
    """A tmpfs mounted at ``path``; ``fill`` takes every free byte, ``free`` gives them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / ".filler"

    def fill(self, leave: int = 0) -> None:
        """Take every free byte; then give back the whole pages that hold ``leave`` bytes."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * 4096
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(block) == 1:
                        break
                    block = block[: len(block) // 2]  # the last few bytes too
            if leave:
                page = os.statvfs(self.path).f_frsize
                size = os.fstat(fd).st_size
                os.ftruncate(fd, max(0, (size - leave) // page * page))
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[SmallDisk]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
