"""Who closes a session whose transcript is still being read when its end is announced, on the
real capture service, project store and index (no daemon: the test takes the loop's place, so
it chooses which reader takes the last slice). However the reading, the end's hook and the next
session interleave, the session is closed once, on all of its transcript, as its end: the hook
that waits to close it does, and reports it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from faults.conftest import small_disk
from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.capture.service import SLICE_BYTES, CaptureService
from memoryd.config import StorageSettings
from memoryd.core.capture.rules import DEFAULT_RULES
from memoryd.core.errors import MemorydError
from memoryd.project import ProjectMemory
from memoryd.registry import ProjectRegistry
from memoryd.server.context import Parked
from memoryd.server.handlers.hook import _read_first

SESSION = "9b2f6c1e-4a3d-4e5f-8a7b-1c2d3e4f5a6b"
FILLER = "The asset step copies images into the bundle folder and logs every file it touched. "
LAST = "We decided to use the zebra queue for the billing retries."


@dataclass
class Capture:
    service: CaptureService
    project: ProjectMemory
    path: Path

    def read_slice(self) -> None:
        """A slice read by someone other than the hook (the watcher, the loop's idle work)."""
        self.service.file_changed(str(self.path), "claude")

    def unread(self) -> int:
        live = self.service._live[str(self.path)]
        offset = live.cursor.offset if live.cursor is not None else 0
        return self.path.stat().st_size - offset

    def end(self) -> bool | None:
        """A run of the session end's hook."""
        return self.service.finalize_session(self.project, str(self.path), "claude")

    def closes(self) -> list[dict]:
        """The project's ``session_finalized`` events."""
        lines = (self.project.dir / "audit.jsonl").read_text().splitlines()
        events = [json.loads(line)["event"] for line in lines if line.strip()]
        return [e for e in events if e["type"] == "session_finalized"]


@pytest.fixture
def capture(tmp_path: Path) -> Iterator[Capture]:
    with _capture(tmp_path, tmp_path / "data") as found:
        yield found


@contextlib.contextmanager
def _capture(tmp_path: Path, data: Path, *, restarted: bool = False) -> Iterator[Capture]:
    """A transcript of 1,001 lines in a Claude project folder, and capture over a project whose
    memory lives in ``data``. ``restarted``: capture again over those made before (a daemon
    started again: the saved cursors are read)."""
    root = tmp_path / "project"
    folder = tmp_path / "home" / ".claude" / "projects" / "-project"
    path = folder / f"{SESSION}.jsonl"
    if not restarted:
        _write_transcript(root, folder, path)
    errors = BackgroundErrors()
    registry = ProjectRegistry(data, StorageSettings(), errors)
    service = CaptureService(
        registry,
        errors,
        cursor_file=tmp_path / "cursors.json",
        rules=DEFAULT_RULES,
        home=str(tmp_path / "home"),
        roots=[(str(tmp_path / "home" / ".claude" / "projects"), "claude")],
    )
    try:
        yield Capture(service, registry.get(str(root)), path)
    finally:
        registry.close()


def _write_transcript(root: Path, folder: Path, path: Path) -> None:
    (root / ".memoryd").mkdir(parents=True)
    folder.mkdir(parents=True)
    # Every slice holds decisions: each slice's checkpoint journals findings.
    records = [
        FILLER * 12 + (f"We decided to use plan {n} for the rollout." if n % 20 == 0 else f"({n})")
        for n in range(1_000)
    ] + [LAST]
    with open(path, "w", encoding="utf-8") as fh:
        for n, text in enumerate(records):
            content = [{"type": "text", "text": text}]
            record = {"type": "assistant", "sessionId": SESSION, "cwd": str(root),
                      "uuid": f"a{n}", "timestamp": f"2026-11-21T10:{n % 60:02d}:00Z",
                      "message": {"role": "assistant", "content": content}}  # fmt: skip
            fh.write(json.dumps(record) + "\n")


def _closed_once_as_its_end(capture: Capture) -> None:
    (close,) = capture.closes()
    assert (close["session_id"], close["reason"]) == (SESSION, "session_end")
    assert any("zebra queue" in d for d in close["episode"]["decisions"])  # all of it read


def test_a_next_session_leaves_the_close_to_the_hook_that_waits(capture: Capture) -> None:
    assert capture.end() is None  # a slice read; the hook waits for the rest
    while capture.service.reading(str(capture.path)):
        capture.read_slice()  # the last slice read by someone else, before the hook runs again
    assert capture.service.session_started(capture.project, None, "claude") == 0
    assert capture.closes() == []
    assert capture.end() is True  # the hook, run again, closes it and says so
    _closed_once_as_its_end(capture)


def test_an_end_that_reads_the_last_slice_itself_closes_it_as_its_end(capture: Capture) -> None:
    capture.read_slice()
    # A next session begins while the transcript is read: it leaves the close to the reading.
    assert capture.service.session_started(capture.project, None, "claude") == 0
    while capture.unread() > SLICE_BYTES:
        capture.read_slice()
    assert capture.service.reading(str(capture.path)) and capture.closes() == []
    # The hook's run reads the rest (one slice; a machine too slow for it within the step's
    # budget runs it again, as the loop would): closed by the hook, as its end.
    runs = [capture.end()]
    while runs[-1] is None:
        runs.append(capture.end())
    assert runs[-1] is True
    _closed_once_as_its_end(capture)


def test_a_stop_reads_the_rest_and_closes_it_once(capture: Capture) -> None:
    assert capture.end() is None
    capture.service.close_once_read(str(capture.path))  # the hook stopped waiting
    assert capture.service.finalize_all("shutdown") == 1
    _closed_once_as_its_end(capture)
    assert not capture.service.reading(str(capture.path))


def test_a_stop_with_a_last_line_still_being_written_closes_on_the_complete_ones(
    capture: Capture,
) -> None:
    with open(capture.path, "a", encoding="utf-8") as fh:
        fh.write('{"type": "assistant", "message": "' + "x" * (SLICE_BYTES + 50_000))  # no end
    assert capture.end() is None
    capture.service.close_once_read(str(capture.path))
    assert capture.service.finalize_all("shutdown") == 1  # ends: the partial line waits
    _closed_once_as_its_end(capture)


def test_an_end_whose_run_fails_leaves_the_close_to_the_next_reading(tmp_path: Path) -> None:
    """The hook's run fails (the project's disk is full: its checkpoint cannot be journaled):
    it is answered the error and never runs again, so the next reading closes the session, as
    its end, on all of it, once the disk has room again."""
    with small_disk(tmp_path / "data", "32m") as disk, _capture(tmp_path, disk.path) as capture:
        assert capture.end() is None
        disk.fill()
        with pytest.raises(MemorydError):
            capture.end()
        disk.free()
        capture.read_slice()  # the next reading (the watcher's, at the next append)
        while capture.service.reading(str(capture.path)):
            capture.read_slice()
        _closed_once_as_its_end(capture)


def test_the_transcript_an_end_hook_waits_for_is_read_before_the_others(capture: Capture) -> None:
    """Another session's transcript is being read too (a start-up's catch-up, say): the loop's
    idle work reads the one the hook waits for (``hurry``) to its end first, instead of a slice
    of each in turn."""
    other = capture.path.with_name("0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6.jsonl")
    other.write_text(capture.path.read_text().replace(SESSION, other.stem))
    capture.service.file_changed(str(other), "claude")
    assert capture.end() is None and capture.service.reading(str(other))
    left = other.stat().st_size - capture.service._live[str(other)].cursor.offset
    waiting = _read_first(capture.service, str(capture.path), p.HookResult())
    assert isinstance(waiting, Parked)  # the hook waits, and its transcript goes first
    while capture.service.reading(str(capture.path)):
        capture.service.work_backlog()
    assert other.stat().st_size - capture.service._live[str(other)].cursor.offset == left
    assert capture.end() is True  # its hook, run again: closed
    _closed_once_as_its_end(capture)
    while capture.service.work_backlog():
        pass
    assert not capture.service.reading(str(other))  # then the other, read to its end


GOAL = "Set up the billing retries on the zebra queue, please."
CLOSING = "In the end the billing retries run on the zebra queue in every region. " * 3


@contextlib.contextmanager
def _resumed(tmp_path: Path) -> Iterator[Capture]:
    """A session read whole (its first line a prompt: the episode's goal), a clean stop (its
    cursor saved, not closed), and capture started again, the session resumed from its cursor
    by a line appended since (a second prompt, read)."""
    with _capture(tmp_path, tmp_path / "data") as before:
        text = before.path.read_text()
        before.path.write_text(_line(before, "user", GOAL, "u0") + text)
        before.read_slice()
        while before.service.reading(str(before.path)):
            before.read_slice()
        before.service.save_cursors()
    with _capture(tmp_path, tmp_path / "data", restarted=True) as after:
        with open(after.path, "a", encoding="utf-8") as fh:
            fh.write(_line(after, "user", "Now check the rollout, please.", "u1"))
        after.read_slice()  # only the appended line is read: resumed from the cursor
        live = after.service._live[str(after.path)]
        assert live.resumed and len(live.messages) == 1
        yield after


def _line(capture: Capture, role: str, text: str, uuid: str) -> str:
    content = text if role == "user" else [{"type": "text", "text": text}]
    return json.dumps({"type": role, "sessionId": SESSION, "cwd": str(capture.project.root),
                       "uuid": uuid, "timestamp": "2026-11-21T11:00:00Z",
                       "message": {"role": role, "content": content}}) + "\n"  # fmt: skip


def _episode(capture: Capture) -> dict[str, Any]:
    (close,) = capture.closes()
    return dict(close["episode"])


def test_a_resumed_session_is_read_again_in_idle_turns_not_at_its_close(tmp_path: Path) -> None:
    """After a restart, a session continues from its saved cursor; its episode needs what came
    before it, which the loop's idle turns read again a slice at a time once nothing else is
    read. The close reads none of it: the first prompt, changed in place after those turns, is
    still the episode's goal as it was read; and a line appended after them is in it too."""
    with _resumed(tmp_path) as after:
        while after.service.work_backlog():  # the replay, a slice per idle turn
            pass
        with open(after.path, "r+b") as fh:  # the first prompt changed in place, same length
            head = fh.read(4096)
            fh.seek(0)
            fh.write(head.replace(GOAL.encode(), GOAL.upper().encode()))
        with open(after.path, "a", encoding="utf-8") as fh:
            fh.write(_line(after, "assistant", CLOSING, "a1001"))
        after.read_slice()  # the watcher's reading of the append
        assert after.end() is True
        episode = _episode(after)
        assert episode["goal"] == GOAL and episode["turns"] == 2  # each prompt once
        assert episode["outcome"].startswith(CLOSING[:60])


def test_a_resumed_session_closed_before_its_replay_reads_the_rest_then(tmp_path: Path) -> None:
    """A close before the idle turns read what came before the cursor reads it then: the
    episode is whole all the same."""
    with _resumed(tmp_path) as after:
        assert after.service.work_backlog()  # one slice of the replay, no more
        with open(after.path, "a", encoding="utf-8") as fh:
            fh.write(_line(after, "assistant", CLOSING, "a1001"))
        after.read_slice()
        assert after.end() is True
        episode = _episode(after)
        assert episode["goal"] == GOAL and episode["turns"] == 2  # each prompt once
        assert episode["outcome"].startswith(CLOSING[:60])
        assert not after.service.work_backlog()  # nothing left to replay


def test_a_resumed_session_whose_transcript_is_gone_closes_on_what_was_read(
    tmp_path: Path,
) -> None:
    """The transcript deleted before the idle turns read what came before the cursor: the
    close (idle, or at a stop) does not fail on it, which kept every idle session in memory;
    the episode holds what was read."""
    with _resumed(tmp_path) as after:
        after.path.unlink()
        assert after.service.finalize(str(after.path), "idle") is True
        assert _episode(after)["goal"] == "Now check the rollout, please."
