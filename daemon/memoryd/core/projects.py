"""Project identity: which directory a request belongs to, and its storage slug (design §3)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import PurePath

PROJECT_MARKERS = (".git", "memory-bank", ".memoryd")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(root: PurePath) -> str:
    """Directory name + '-' + the first 8 hex of sha256 of its real path."""
    name = _UNSAFE.sub("_", root.name).strip("._") or "root"
    return f"{name[:64]}-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"


def find_root(cwd: PurePath, has_marker: Callable[[PurePath, str], bool]) -> PurePath | None:
    """The nearest ancestor of ``cwd`` (itself included) holding a project marker, if any."""
    for candidate in (cwd, *cwd.parents):
        if any(has_marker(candidate, marker) for marker in PROJECT_MARKERS):
            return candidate
    return None
