"""Which project a request belongs to, and the open ``ProjectMemory`` of each (design §3).

A request names its client's working directory; the registry resolves it to the project root
and hands out that project's memory, and nothing else: per-project isolation starts here.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import NamedTuple

import msgspec

from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.config import StorageSettings
from memoryd.core.errors import BadRequest, EntryNotFound, MemorydError, NoProject
from memoryd.core.projects import PROJECT_MARKERS, find_root, slug
from memoryd.project import ProjectMemory, describe_closed, recorded_root

MAX_OPEN = 16
# A folder's project root is kept this long, while no folder between it and the root changed
# (a marker created or removed changes its folder's mtime): a hook asks every prompt, and the
# walk up (realpath, then a marker check per folder) cost ~0.1 ms a request (issue 12). The
# time bounds what a folder's mtime does not show (a symlink above it pointed elsewhere).
ROOT_CACHE_S = 2.0
ROOT_CACHE_SIZE = 256


def _has_marker(directory: PurePath, marker: str) -> bool:
    return os.path.lexists(os.path.join(directory, marker))


class _KnownRoot(NamedTuple):
    """A folder's project root as last worked out: kept until ``until`` (monotonic) while the
    folders from the one to the other keep their ``mtimes``."""

    until: float
    real: Path
    root: Path
    folders: tuple[str, ...]
    mtimes: list[int]


def _between(folder: Path, root: Path) -> tuple[str, ...]:
    """``folder`` and each folder above it, up to ``root`` (one of them)."""
    chain = [folder]
    while chain[-1] != root and chain[-1].parent != chain[-1]:
        chain.append(chain[-1].parent)
    return tuple(map(str, chain))


def _mtimes(folders: tuple[str, ...]) -> list[int]:
    """The folders' mtimes; [] when one is gone."""
    try:
        return [os.stat(d).st_mtime_ns for d in folders]
    except OSError:
        return []


def _unused(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``… the first that does not exist."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


class ProjectRegistry:
    def __init__(
        self,
        data_root: Path,
        settings: StorageSettings,
        errors: BackgroundErrors,
        opener: Callable[..., ProjectMemory] = ProjectMemory,
        max_open: int = MAX_OPEN,
    ) -> None:
        self.data_root = data_root
        self.settings = settings
        self._errors = errors
        self._opener = opener
        self._open: OrderedDict[Path, ProjectMemory] = OrderedDict()
        self.max_open = max_open
        # What else happens when a project opens (watch its bank, compact it): set by the
        # composition root.
        self.on_open: list[Callable[[ProjectMemory], None]] = []
        self._known: set[Path] | None = None  # roots ever held memory for, read once
        self._roots: dict[str, _KnownRoot] = {}  # by cwd: ``root_for``'s answers in a project

    def root_for(self, cwd: str | None, *, named: bool = True) -> Path:
        """The project ``cwd`` belongs to: the nearest folder at or above it holding a project
        marker. A folder outside any project is a project of its own only when the user
        ``named`` it: a command run in ``/tmp``, ``/`` or the home folder, or a session there,
        must not create memory there."""
        real, found = self._resolve(cwd)
        if found is not None:
            return found
        if named:
            return real
        markers = ", ".join(f"{m}/" for m in PROJECT_MARKERS)
        raise NoProject(
            f"{real} is not inside a project (no {markers} in it or above it): run in a "
            f"repository, create {real}/.memoryd/ to make it one, or name it with --project"
        )

    def _resolve(self, cwd: str | None) -> tuple[Path, Path | None]:
        """``cwd``'s real folder and the root a marker at or above it names, if any. One inside
        a project is kept (``ROOT_CACHE_S``); one outside is worked out again each time (a
        marker created there is seen at once)."""
        if not cwd:
            raise BadRequest("the request names no project: send the client's working directory")
        now = time.monotonic()
        known = self._roots.get(cwd)
        if known is not None and now < known.until and _mtimes(known.folders) == known.mtimes:
            return known.real, known.root
        if "\x00" in cwd or not os.path.isabs(cwd):
            raise BadRequest(f"project directory must be an absolute path, got {cwd!r}")
        real = Path(os.path.realpath(cwd))
        if not real.is_dir():
            raise BadRequest(f"project directory {cwd} does not exist")
        marked = find_root(real, _has_marker)
        if marked is None:
            return real, None
        found = Path(marked)
        if len(self._roots) >= ROOT_CACHE_SIZE:
            self._roots.clear()
        folders = _between(real, found)
        self._roots[cwd] = _KnownRoot(now + ROOT_CACHE_S, real, found, folders, _mtimes(folders))
        return real, found

    def check_project(self, cwd: str | None) -> None:
        """Refuse a folder outside any project that the user did not name."""
        self.root_for(cwd, named=False)

    def resolves(self, cwd: str | None) -> bool:
        """Whether ``cwd`` lies inside a project."""
        try:
            self.check_project(cwd)
        except MemorydError:
            return False
        return True

    def get(self, cwd: str | None, *, named: bool = True) -> ProjectMemory:
        root = self.root_for(cwd, named=named)
        project = self._open.get(root)
        if project is None:
            project = self._opener(root, self.data_root, self.settings, self._errors)
            self._open[root] = project
            if self._known is not None:
                self._known.add(root)
            for hook in self.on_open:
                hook(project)
            self._close_least_recent()
        self._open.move_to_end(root)
        return project

    def _close_least_recent(self) -> None:
        """Each open project holds a database, an index writer and its threads: keep only the
        most recently used ones open (capture transcripts can name many projects)."""
        while len(self._open) > self.max_open:
            _, project = self._open.popitem(last=False)
            try:
                project.close()
            except Exception as exc:
                self._errors.record(f"{project.slug}: close failed: {exc}")

    def opened(self) -> list[ProjectMemory]:
        return list(self._open.values())

    def known(self) -> list[Path]:
        """Every project the daemon has held memory for, open or not. Read from the data folder
        once (then kept up to date as projects open); a project whose folder was gone then is
        left out."""
        if self._known is None:
            try:
                folders = sorted((self.data_root / "projects").iterdir())
            except OSError:
                folders = []
            roots = (recorded_root(folder) for folder in folders if folder.is_dir())
            self._known = {root for root in roots if root is not None and root.is_dir()}
            self._known.update(self._open)
        return sorted(self._known)

    def describe(self, known: p.KnownProject) -> p.KnownProject:
        """``known`` with its counts, review queue, sessions, last capture, bank and size: from
        the open project, else read from its data folder without opening it (``projects``
        lists every project, and opening each would evict the ones in use)."""
        opened = self._open.get(Path(known.path))
        if opened is None:
            return describe_closed(known, self.data_root)
        info = opened.info()
        return msgspec.structs.replace(
            known,
            held=True,
            open=True,
            bank=info.bank,
            entries=info.entries,
            awaiting_review=info.awaiting_review,
            sessions=info.sessions,
            last_capture_at=info.last_capture_at,
            size_bytes=info.size_bytes,
        )

    def remove(self, directory: str, now: float) -> Path:
        """Move the memory of the project at ``directory`` aside (``removed/``, never deleted),
        closing it first; returns where it went. Refused when the daemon holds none for it."""
        if "\x00" in directory or not os.path.isabs(directory):
            raise BadRequest(f"project directory must be an absolute path, got {directory!r}")
        wanted = Path(os.path.realpath(directory))
        folders = self._folders_of(wanted)
        if not folders:
            raise EntryNotFound(f"memoryd holds no memory for {wanted} (see memctl projects)")
        project = self._open.pop(wanted, None)
        if project is not None:
            project.close()
        removed = self.data_root / "removed"
        removed.mkdir(parents=True, exist_ok=True, mode=0o700)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        targets = [_unused(removed / f"{folder.name}-{stamp}") for folder in folders]
        for folder, target in zip(folders, targets, strict=True):
            os.replace(folder, target)
        target = targets[0]
        self.known()
        assert self._known is not None
        self._known.discard(wanted)
        return target

    def _folders_of(self, root: Path) -> list[Path]:
        try:
            folders = sorted((self.data_root / "projects").iterdir())
        except OSError:
            return []
        # A folder made before project.json existed is known by its slug.
        return [
            f
            for f in folders
            if f.is_dir() and (recorded_root(f) or (root if f.name == slug(root) else None)) == root
        ]

    def close(self) -> None:
        while self._open:
            _, project = self._open.popitem()
            try:
                project.close()
            except Exception as exc:  # one project failing to close must not strand the others
                self._errors.record(f"{project.slug}: close failed: {exc}")
