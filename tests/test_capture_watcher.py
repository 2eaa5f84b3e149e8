"""The transcript watcher with real folders and the real watchdog observer (SPEC §6).

Nothing sleeps: each test waits for the expected ``on_change`` under a deadline. To show that
something was *not* reported, a sentinel transcript is written afterwards in the same root: events
of one root arrive in order and the debounce reports paths in due order, so once the sentinel is
reported, anything earlier would have been too.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from memoryd.capture.watcher import TranscriptWatcher, WatchRoot, default_roots

# watchdog (7.x) warns "Callback with id ... already exists ... It will be Overwritten." from its
# inotify thread when nested folders appear quickly (``mkdir -p``): it walks the new folder and
# then also gets the inner folder's own creation event. Harmless, but under this suite's
# "warnings are errors" the warning would raise inside that thread and end it.
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")

DEADLINE_S = 10.0
SESSION = "0b5b3d4e-8f5e-4c47-9d1c-2f0a4a1b2c3d"


class Calls:
    """Records on_change calls (path, monotonic time) and lets a test wait for one."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, float]] = queue.Queue()
        self.seen: list[tuple[str, float]] = []

    def __call__(self, path: str) -> None:
        self._queue.put((path, time.monotonic()))

    def wait_for(self, path: Path, *, after: float = 0.0) -> float:
        """The time of the first call for ``path`` made after ``after``."""
        deadline = time.monotonic() + DEADLINE_S
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                got, at = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            self.seen.append((got, at))
            if got == str(path) and at > after:
                return at
        raise AssertionError(f"no on_change({path}) within {DEADLINE_S}s; got {self.seen}")

    def paths(self) -> list[str]:
        return [path for path, _at in self.seen]


@contextmanager
def watching(
    roots: Sequence[WatchRoot], on_change: Callable[[str], None], debounce_s: float = 0.25
) -> Iterator[TranscriptWatcher]:
    watcher = TranscriptWatcher(roots, on_change, debounce_s=debounce_s)
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()


def append(path: Path, text: str = '{"type":"user"}\n') -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".claude" / "projects").mkdir(parents=True)
    (tmp_path / ".codex" / "sessions").mkdir(parents=True)
    (tmp_path / ".gemini" / "tmp").mkdir(parents=True)
    return tmp_path


def test_claude_session_and_subagent_files_are_reported(tmp_path: Path) -> None:
    projects = tmp_path / ".claude" / "projects"
    projects.mkdir(parents=True)
    calls = Calls()
    with watching(default_roots(tmp_path), calls) as watcher:
        assert watcher.missing_roots == [
            str(tmp_path / ".codex" / "sessions"),
            str(tmp_path / ".gemini" / "tmp"),
        ]
        # Both folders are created after start: the recursive watch must follow them.
        session = projects / "-home-me-app" / f"{SESSION}.jsonl"
        append(session)
        calls.wait_for(session)
        subagent = projects / "-home-me-app" / SESSION / "subagents" / "agent-a1b2c3.jsonl"
        append(subagent)
        calls.wait_for(subagent)
        append(session)  # an append to a known file is reported again
        calls.wait_for(session)


def test_a_burst_of_appends_gives_few_calls_the_last_after_the_last_write(home: Path) -> None:
    session = home / ".claude" / "projects" / "-home-me-app" / f"{SESSION}.jsonl"
    calls = Calls()
    with watching(default_roots(home), calls, debounce_s=0.5):
        for number in range(50):
            append(session, f'{{"n":{number}}}\n')
        last_write = time.monotonic()
        calls.wait_for(session, after=last_write)
        sentinel = session.with_name("ffffffff-0000-4000-8000-000000000000.jsonl")
        append(sentinel)
        calls.wait_for(sentinel)
    burst = [at for path, at in calls.seen if path == str(session)]
    assert 1 <= len(burst) <= 5
    assert burst[-1] > last_write


def test_files_that_are_not_transcripts_are_ignored(home: Path) -> None:
    project = home / ".claude" / "projects" / "-home-me-app"
    calls = Calls()
    with watching(default_roots(home), calls):
        append(project / "notes.txt")
        append(project / "foo.json")
        append(project / SESSION / "subagents" / "agent-a1b2c3.meta.json")
        append(project / SESSION / "subagents" / "helper.jsonl")  # not agent-*
        append(home / ".claude" / "projects" / "stray.jsonl")  # not in a project folder
        sentinel = project / f"{SESSION}.jsonl"
        append(sentinel)
        calls.wait_for(sentinel)
    assert calls.paths() == [str(sentinel)]


def test_codex_rollouts_are_reported(home: Path) -> None:
    sessions = home / ".codex" / "sessions"
    calls = Calls()
    with watching(default_roots(home), calls) as watcher:
        assert watcher.missing_roots == []
        append(sessions / "2026" / "01" / "02" / "notes.jsonl")
        rollout = sessions / "2026" / "01" / "02" / f"rollout-2026-01-02T10-00-00-{SESSION}.jsonl"
        append(rollout)
        calls.wait_for(rollout)
    assert calls.paths() == [str(rollout)]


def test_gemini_sessions_are_reported_however_they_are_written(home: Path) -> None:
    chats = home / ".gemini" / "tmp" / "0b7d5e" / "chats"
    chats.mkdir(parents=True)
    calls = Calls()
    with watching(default_roots(home), calls):
        append(chats.parent / "logs.json")
        streamed = chats / "session-2026-04-29T21-39-0b5b3d4e.jsonl"
        append(streamed)
        calls.wait_for(streamed)
        # A legacy document replaced atomically arrives as a move inside the root.
        legacy = chats / "session-2026-01-01T10-00-abcd1234.json"
        temporary = chats / "session-2026-01-01T10-00-abcd1234.json.tmp"
        temporary.write_text('{"messages": []}')
        os.replace(temporary, legacy)
        calls.wait_for(legacy)
        # One moved in from outside the root arrives as a creation.
        outside = home / "elsewhere.json"
        outside.write_text('{"messages": []}')
        moved_in = chats / "session-2026-01-02T10-00-abcd1234.json"
        os.replace(outside, moved_in)
        calls.wait_for(moved_in)
    assert str(chats.parent / "logs.json") not in calls.paths()
    assert not [path for path in calls.paths() if path.endswith(".tmp")]


def test_scan_returns_recent_transcripts_oldest_first(home: Path) -> None:
    now = time.time()
    day = 86_400
    claude = home / ".claude" / "projects" / "-home-me-app"
    recent = claude / f"{SESSION}.jsonl"
    old = claude / "11111111-2222-4333-8444-555555555555.jsonl"
    notes = claude / "notes.txt"
    rollout = home / ".codex" / "sessions" / "2026" / "01" / "02" / "rollout-2026-01-02T10-00.jsonl"
    gemini = home / ".gemini" / "tmp" / "0b7d5e" / "chats" / "session-2026-01-01T10-00-ab.json"
    for path, age_days in [(recent, 1), (old, 20), (notes, 1), (rollout, 3), (gemini, 13.9)]:
        append(path)
        os.utime(path, (now - age_days * day, now - age_days * day))
    roots = [*default_roots(home), WatchRoot(str(home / "absent"), "claude")]
    watcher = TranscriptWatcher(roots, Calls())
    assert watcher.scan(14, now) == [str(gemini), str(rollout), str(recent)]
    assert watcher.scan(2, now) == [str(recent)]


def test_stop_is_idempotent_and_leaves_no_thread_running(home: Path) -> None:
    before = set(threading.enumerate())
    never_started = TranscriptWatcher(default_roots(home), Calls())
    never_started.stop()
    never_started.stop()

    calls = Calls()
    watcher = TranscriptWatcher(default_roots(home), calls)
    watcher.start()
    assert set(threading.enumerate()) - before  # the observer and the debounce thread
    session = home / ".claude" / "projects" / "-home-me-app" / f"{SESSION}.jsonl"
    append(session)
    calls.wait_for(session)
    watcher.stop()
    watcher.stop()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(RuntimeError):
        watcher.start()  # single use


def test_a_failing_on_change_does_not_stop_the_watcher(home: Path) -> None:
    calls = Calls()
    failures: list[str] = []

    def on_change(path: str) -> None:
        calls(path)
        if not failures:
            failures.append(path)
            raise OSError("consumer failed")

    project = home / ".claude" / "projects" / "-home-me-app"
    first, second = project / f"{SESSION}.jsonl", project / "agent-1234abcd.jsonl"
    with watching(default_roots(home), on_change):
        append(first)
        calls.wait_for(first)
        append(second)
        calls.wait_for(second)
    assert failures == [str(first)]


def test_a_root_that_appears_after_start_is_watched_and_scanned(tmp_path: Path) -> None:
    (tmp_path / ".claude" / "projects").mkdir(parents=True)
    calls = Calls()
    with watching(default_roots(tmp_path), calls) as watcher:
        sessions = tmp_path / ".codex" / "sessions"
        assert str(sessions) in watcher.missing_roots
        assert watcher.watch_missing() == []  # still absent: nothing new, still listed
        assert str(sessions) in watcher.missing_roots
        day = sessions / "2026" / "01" / "02"
        early = day / f"rollout-2026-01-02T10-00-00-{SESSION}.jsonl"
        append(early)  # written before the daemon noticed the folder
        [appeared] = watcher.watch_missing()
        assert appeared.path == str(sessions) and str(sessions) not in watcher.missing_roots
        assert watcher.scan(1, time.time(), roots=[appeared]) == [str(early)]
        later = day / "rollout-2026-01-02T11-00-00-0b5b3d4e-8f5e-4c47-9d1c-2f0a4a1b2c3e.jsonl"
        append(later)
        calls.wait_for(later)  # and it is watched from now on
