"""Watching the agents' transcript folders (design §6): which files changed, debounced.

The watcher only reports paths; reading them (``capture.tail``) and everything after happens on
the owner thread, which ``on_change`` is expected to message over ``inproc://`` (design §1): it
runs on the watcher's own debounce thread and must not touch the store.

Roots that do not exist at ``start()`` are skipped and listed in ``missing_roots``; one that
appears later (an agent installed while the daemon runs) is picked up by ``watch_missing``,
which the daemon calls periodically, and its files are caught up by a ``scan`` of that root.
On Linux (inotify) an append arrives as ``FileModifiedEvent``, a new file as ``FileCreatedEvent``
(also a file moved in from outside the root), and a rename inside the root (an atomic
``os.replace`` of a rewritten document) as ``FileMovedEvent`` whose ``dest_path`` is the file.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

import structlog
from watchdog.events import (
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from memoryd.capture.parsers import detect_agent
from memoryd.core.capture.transcript import Agent

log = structlog.get_logger()

DAY_S = 86_400.0

# The name detect_agent expects each root to have. Roots are configurable (CLAUDE_CONFIG_DIR,
# CODEX_HOME, a test folder), so a path is judged by its shape *below* its root, re-rooted here.
_ROOT_NAME: dict[Agent, str] = {"claude": "projects", "codex": "sessions", "gemini": "tmp"}

# Only these reach the handler; the inotify mask is narrowed to match, so our own reads of the
# transcripts (open / close-nowrite) do not wake the observer at all.
_EVENTS: list[type[FileSystemEvent]] = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent]


@dataclass(frozen=True)
class WatchRoot:
    """A folder holding one agent's transcripts, watched recursively."""

    path: str
    agent: Agent


def default_roots(home: Path) -> list[WatchRoot]:
    """Where Claude Code, Codex CLI and Gemini CLI keep their transcripts by default."""
    return [
        WatchRoot(str(home / ".claude" / "projects"), "claude"),
        WatchRoot(str(home / ".codex" / "sessions"), "codex"),
        WatchRoot(str(home / ".gemini" / "tmp"), "gemini"),
    ]


def is_transcript(root: WatchRoot, path: str) -> bool:
    """Whether ``path`` is a transcript of ``root.agent`` inside ``root``."""
    try:
        below = PurePath(path).relative_to(root.path)
    except ValueError:
        return False
    return detect_agent(PurePath(_ROOT_NAME[root.agent], below)) == root.agent


class RunState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


# watchdog's inotify thread warns when nested folders appear quickly ("Callback with id … already
# exists … It will be Overwritten"). Harmless, but raised as an error under -W error it would
# kill that thread and silently stop capture, so it is not raised at all.
warnings.filterwarnings(
    "ignore", message="Callback with id .* already exists", category=RuntimeWarning
)


class TranscriptWatcher:
    """Calls ``on_change(path)`` once a transcript under ``roots`` has been quiet for
    ``debounce_s`` after a burst of writes. Single use: ``start()`` once, ``stop()`` any time."""

    def __init__(
        self,
        roots: Sequence[WatchRoot],
        on_change: Callable[[str], None],
        *,
        debounce_s: float = 0.25,
    ) -> None:
        # Absolute paths, because event paths are built from the path given to the observer.
        self._roots = [WatchRoot(os.path.abspath(r.path), r.agent) for r in roots]
        self._on_change = on_change
        self._debounce_s = debounce_s
        self._state = RunState.NEW
        self._missing: list[str] = []
        self._observer: BaseObserver | None = None
        self._worker: threading.Thread | None = None
        self._wake = threading.Condition()
        self._due: dict[str, float] = {}  # path -> monotonic time its on_change is due
        self._folders: set[str] = set()  # extra folders added by watch_folder

    @property
    def missing_roots(self) -> list[str]:
        """The roots that did not exist (or could not be watched) at ``start()``."""
        return list(self._missing)

    @property
    def state(self) -> RunState:
        return self._state

    def start(self) -> None:
        """Start the debounce thread and the observer, and watch every root that exists."""
        if self._state is not RunState.NEW:
            raise RuntimeError(f"watcher cannot start when {self._state.value}")
        self._state = RunState.RUNNING
        self._worker = threading.Thread(target=self._run, name="memoryd-watch-debounce")
        self._worker.start()
        try:
            self._observer = Observer()
            self._observer.start()
            for root in self._roots:
                self._watch(self._observer, root)
        except BaseException:
            self.stop()  # no thread outlives a failed start
            raise

    def _watch(self, observer: BaseObserver, root: WatchRoot) -> None:
        if not os.path.isdir(root.path):
            self._missing.append(root.path)
            return
        try:
            # The observer is already running, so this starts the root's emitter right here and
            # raises here if the folder vanished since the check above.
            handler = _Handler(root, self._changed)
            observer.schedule(handler, root.path, recursive=True, event_filter=_EVENTS)
        except OSError as error:
            log.warning("capture.root_unwatchable", root=root.path, error=str(error))
            self._missing.append(root.path)

    def watch_missing(self) -> list[WatchRoot]:
        """Watch the missing roots that exist now; the ones newly watched (whose files the
        caller catches up with ``scan``). Callable while running, from the thread that
        started the watcher."""
        observer = self._observer
        if self._state is not RunState.RUNNING or observer is None or not self._missing:
            return []
        waiting, self._missing = self._missing, []
        appeared = []
        for root in self._roots:
            if root.path in waiting:
                self._watch(observer, root)  # lists it as missing again if it still is
                if root.path not in self._missing:
                    appeared.append(root)
        return appeared

    def watch_folder(self, path: str, accept: Callable[[str], bool]) -> bool:
        """Also report changes to the files directly in ``path`` that ``accept`` (e.g. a
        project's ``memory-bank/``), through the same debounce. Callable while running; a folder
        is watched once. False when it cannot be watched (absent, or not running)."""
        folder = os.path.abspath(path)
        observer = self._observer
        if self._state is not RunState.RUNNING or observer is None or not os.path.isdir(folder):
            return False
        if folder in self._folders:
            return True
        try:
            handler = _FolderHandler(accept, self._changed)
            observer.schedule(handler, folder, recursive=False, event_filter=_EVENTS)
        except OSError as error:
            log.warning("watch.folder_unwatchable", folder=folder, error=str(error))
            return False
        self._folders.add(folder)
        return True

    def stop(self) -> None:
        """Stop watching and join both threads. Idempotent; fine if never started. Changes still
        waiting out their debounce are dropped: the next start-up ``scan`` catches them.
        Not to be called from ``on_change`` (it would wait for itself)."""
        with self._wake:
            self._state = RunState.STOPPED
            self._wake.notify_all()
        if self._observer is not None:
            # stop() also ends the inotify reader thread, which the Observer starts when built;
            # join() refuses an observer whose start() failed, and there is nothing to wait for.
            self._observer.stop()
            with contextlib.suppress(RuntimeError):
                self._observer.join()
            self._observer = None
        if self._worker is not None:
            self._worker.join()
            self._worker = None

    def scan(
        self, backfill_days: float, now: float, roots: Sequence[WatchRoot] | None = None
    ) -> list[str]:
        """The transcripts under the roots (all, or ``roots``) modified since ``now -
        backfill_days`` (wall-clock seconds, as ``time.time()``), oldest first: the start-up
        catch-up, and that of a root that appeared later."""
        since = now - backfill_days * DAY_S
        found: list[tuple[float, str]] = []
        for root in self._roots if roots is None else roots:
            for folder, _dirs, names in os.walk(root.path):
                for name in names:
                    path = os.path.join(folder, name)
                    mtime = _mtime(path) if is_transcript(root, path) else None
                    if mtime is not None and mtime >= since:
                        found.append((mtime, path))
        return [path for _mtime_s, path in sorted(found)]

    def _changed(self, path: str) -> None:
        """Called on the observer thread for every matching event: (re)arm the path's timer."""
        with self._wake:
            fresh = path not in self._due
            self._due[path] = time.monotonic() + self._debounce_s
            # A re-armed path is due later than before, so the worker's current wait is still
            # right; only a new path can be due earlier than everything pending.
            if fresh:
                self._wake.notify()

    def _run(self) -> None:
        """The debounce thread: sleep until the earliest due time, then report the due paths."""
        while True:
            with self._wake:
                ready = self._take_due()
                while not ready and self._state is RunState.RUNNING:
                    self._wake.wait(self._wait_s())
                    ready = self._take_due()
                if self._state is not RunState.RUNNING:
                    return
            for path in ready:
                self._report(path)

    def _take_due(self) -> list[str]:
        now = time.monotonic()
        ready = [path for path, due in self._due.items() if due <= now]
        for path in ready:
            del self._due[path]
        return ready

    def _wait_s(self) -> float | None:
        # A linear scan: only the transcripts being written right now are pending, a handful.
        return max(0.0, min(self._due.values()) - time.monotonic()) if self._due else None

    def _report(self, path: str) -> None:
        try:
            self._on_change(path)
        except Exception:
            # A failing consumer costs this notification, not the watcher: the file's cursor is
            # unchanged, so its next change (or the next scan) reads the same lines again.
            log.exception("capture.on_change_failed", path=path)


class _Handler(FileSystemEventHandler):
    """Forwards one root's transcript events to the watcher; runs on the observer thread."""

    def __init__(self, root: WatchRoot, changed: Callable[[str], None]) -> None:
        self._root = root
        self._changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        # For a move the file now lives at dest_path; src_path is gone.
        target = event.dest_path if isinstance(event, FileMovedEvent) else event.src_path
        path = os.fsdecode(target)
        if path and is_transcript(self._root, path):
            self._changed(path)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None  # deleted between listing and stat


class _FolderHandler(FileSystemEventHandler):
    """Forwards the accepted files of one folder to the watcher; runs on the observer thread."""

    def __init__(self, accept: Callable[[str], bool], changed: Callable[[str], None]) -> None:
        self._accept = accept
        self._changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            return
        target = event.dest_path if isinstance(event, FileMovedEvent) else event.src_path
        path = os.fsdecode(target)
        if self._accept(path):
            self._changed(path)
