"""The bank cache and its FIFO writer (issue 5 acceptance 3; SPEC §10; seed 002 §2.1), through
the real memctl against the real daemon: changes reach disk in order, a large one at once, none
is lost to a SIGKILL, a user's edit made before the sync survives with the pending change on
top (or the change is reported, never forced), and no reader sees a half-written file."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
from pathlib import Path

from conftest import Daemon, Env, memctl, ok_json, until

NEVER = {"MEMORYD_BANKS__SYNC_INTERVAL_S": "3600"}  # only explicit, large and final syncs
OFTEN = {"MEMORYD_BANKS__SYNC_INTERVAL_S": "0.2"}


def _decision(n: int) -> str:
    return (
        f"## Decision: Choice number {n}\n\n"
        f"- **Date**: 2026-11-21\n- **Status**: Accepted\n- **Decision**: option {n}.\n"
    )


def _bank(env: Env) -> Path:
    return env.project / "memory-bank"


def _started(env: Env, extra: dict[str, str]) -> Daemon:
    return Daemon(env, extra).start()


def test_changes_reach_disk_in_order_and_no_read_is_torn(env: Env) -> None:
    daemon = _started(env, OFTEN)
    try:
        ok_json(env, "bank", "init")
        notes = _bank(env) / "notes.md"
        filler = "".join(
            f"- line {i} of a long note that keeps the file large\n" for i in range(3000)
        )
        versions = set()
        seen: list[str] = []
        stop = threading.Event()

        def reader() -> None:  # a user's tool reading the file while the writer replaces it
            while not stop.is_set():
                with contextlib.suppress(FileNotFoundError):  # before the first write
                    text = notes.read_text()
                    if not seen or seen[-1] != text:  # each version once, torn ones included
                        seen.append(text)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            for step in range(1, 16):
                text = f"# Notes\n\n## Step\n\nstep {step}\n\n## Body\n\n{filler}"
                ok_json(env, "bank", "write", "notes.md", stdin=text)
                versions.add(text)
                ok_json(env, "bank", "update", "decisionLog.md", stdin=_decision(step))
            final = text
            until(lambda: notes.exists() and notes.read_text() == final, "the last write on disk")
            log = _bank(env) / "decisionLog.md"
            until(lambda: "Choice number 15" in log.read_text(), "the last decision on disk")
        finally:
            stop.set()
            thread.join()
        assert seen, "the reader never saw the file"
        assert all(text in versions for text in seen), "a reader saw a half-written file"
        steps = [int(re.search(r"step (\d+)", text)[1]) for text in seen]  # type: ignore[index]
        assert steps == sorted(steps), "an older version replaced a newer one on disk"
        titles = re.findall(r"Choice number (\d+)", log.read_text())
        assert titles == [str(n) for n in range(1, 16)]  # each once, in the order sent
    finally:
        daemon.stop()


def test_large_change_is_written_at_once_small_one_waits(env: Env) -> None:
    daemon = _started(env, NEVER)
    try:
        ok_json(env, "bank", "init")
        active = _bank(env) / "activeContext.md"
        before = active.read_text()
        small = ok_json(env, "bank", "update", "activeContext.md", stdin="## Current Focus\n\nx\n")
        assert small["sync"] == "scheduled"
        big = "# Big\n\n" + "word " * 2000  # > 4 KB
        large = ok_json(env, "bank", "write", "notes.md", stdin=big)
        assert large["sync"] == "immediate"
        until(lambda: (_bank(env) / "notes.md").exists(), "the large write on disk")
        assert (_bank(env) / "notes.md").read_text() == big
        # The FIFO writer has done the large job; the small change is still only in the cache.
        assert active.read_text() == before
        assert "x" in ok_json(env, "bank", "read", "activeContext.md")["content"].split("\n")
        listed = {f["name"]: f["size"] for f in ok_json(env, "bank", "list")["files"]}
        assert listed["notes.md"] == len(big.encode())
        cache = ok_json(env, "bank", "activate")["cache"]
        assert cache["key"] == f"memory-bank:{env.project.resolve()}"
        assert cache["pending_changes"] == 1 and cache["pending_files"] == ["activeContext.md"]
        assert cache["sync_interval_s"] == 3600
    finally:
        daemon.stop()


def test_sigkill_between_change_and_sync_loses_nothing(env: Env) -> None:
    daemon = _started(env, NEVER)
    ok_json(env, "bank", "init")
    on_disk = {p.name: p.read_text() for p in _bank(env).iterdir()}
    ok_json(env, "bank", "write", "notes.md", stdin="# Notes\n\nkept through a crash\n")
    ok_json(env, "bank", "update", "activeContext.md", stdin="## Current Focus\n\ncrash test\n")
    ok_json(env, "bank", "update", "decisionLog.md", stdin=_decision(1))
    applied = ok_json(env, "bank", "process", "--apply", stdin="Finished the crash recovery.")
    assert applied["applied"] == ["progress.md"]
    assert {p.name: p.read_text() for p in _bank(env).iterdir()} == on_disk  # all pending
    daemon.stop(signal.SIGKILL)

    daemon = _started(env, NEVER)  # recovery writes what the journal holds, without a sync
    try:
        assert "crash test" in ok_json(env, "bank", "read", "activeContext.md")["content"]
        notes = _bank(env) / "notes.md"
        until(lambda: notes.exists(), "notes.md written after the restart")
        assert notes.read_text() == "# Notes\n\nkept through a crash\n"
        until(lambda: "crash test" in (_bank(env) / "activeContext.md").read_text(), "update")
        log = (_bank(env) / "decisionLog.md").read_text()
        progress = (_bank(env) / "progress.md").read_text()
        assert log.count("## Decision: Choice number 1") == 1
        assert progress.count("Finished the crash recovery") == 1
        assert ok_json(env, "bank", "sync") == {"pending": 0, "writing": False}
    finally:
        daemon.stop()
    # A second restart finds nothing pending and applies nothing twice.
    daemon = _started(env, NEVER)
    try:
        assert ok_json(env, "bank", "sync") == {"pending": 0, "writing": False}
        assert (_bank(env) / "decisionLog.md").read_text() == log
        assert (_bank(env) / "progress.md").read_text() == progress
    finally:
        daemon.stop()


def test_user_edit_before_sync_survives_pending_change_on_top(env: Env) -> None:
    daemon = _started(env, NEVER)
    try:
        ok_json(env, "bank", "init")
        ok_json(env, "bank", "update", "activeContext.md", stdin="## Next Steps\n\n- by agent\n")
        ok_json(env, "bank", "update", "decisionLog.md", stdin=_decision(2))
        active = _bank(env) / "activeContext.md"
        user = active.read_text().replace("## Current Focus\n", "## Current Focus\n\nby user\n")
        active.write_text(user)  # the user's editor, before the sync
        log = _bank(env) / "decisionLog.md"
        log.write_text(log.read_text() + "\n" + _decision(1).replace("option 1", "the user's"))
        # Readers through the daemon see the user's edit with the pending change on top at once.
        view = ok_json(env, "bank", "read", "activeContext.md")["content"]
        assert "by user" in view and "- by agent" in view

        synced = memctl(env, "--json", "bank", "sync")
        assert synced.code == 0 and json.loads(synced.stdout)["pending"] == 0
        assert "not applied" not in synced.stderr
        text = active.read_text()
        assert "by user" in text and "- by agent" in text and text == view
        decisions = re.findall(r"Choice number (\d+)", log.read_text())
        assert decisions == ["1", "2"]  # the user's entry kept, ours appended after it
    finally:
        daemon.stop()


def test_whole_file_write_over_a_user_edit_is_reported_not_forced(env: Env) -> None:
    daemon = _started(env, NEVER)
    try:
        ok_json(env, "bank", "init")
        ok_json(env, "bank", "write", "techContext.md", stdin="# Tech Context\n\nagent's\n")
        tech = _bank(env) / "techContext.md"
        tech.write_text("# Tech Context\n\nthe user's own words\n")
        synced = memctl(env, "--json", "bank", "sync")
        assert synced.code == 0, synced.stderr
        assert tech.read_text() == "# Tech Context\n\nthe user's own words\n"  # never forced
        assert "was not applied" in synced.stderr and "techContext.md" in synced.stderr
        saved = Path(re.search(r"saved in (\S+)", synced.stderr)[1])  # type: ignore[index]
        assert saved.read_text() == "# Tech Context\n\nagent's\n"  # and not lost either
        assert ok_json(env, "bank", "read", "techContext.md")["content"] == tech.read_text()
    finally:
        daemon.stop()


def test_sigterm_writes_pending_changes_and_dump_is_written(env: Env) -> None:
    daemon = _started(env, NEVER | {"MEMORYD_BANKS__DEBUG_DUMP": "true"})
    ok_json(env, "bank", "init")
    ok_json(env, "bank", "update", "activeContext.md", stdin="## Current Focus\n\nshutdown\n")
    assert daemon.stop(signal.SIGTERM) == 0
    assert "shutdown" in (_bank(env) / "activeContext.md").read_text()
    dump = json.loads((env.state / "cache_memory_dump.json").read_text())
    bank = dump[f"memory-bank:{env.project.resolve()}"]
    assert "shutdown" in bank["files"]["activeContext.md"]["text"]
    assert bank["files"]["activeContext.md"]["pending"] == []


def test_a_file_that_became_unwritable_keeps_the_change_aside(env: Env) -> None:
    daemon = _started(env, NEVER)
    try:
        ok_json(env, "bank", "init")
        ok_json(env, "bank", "update", "progress.md", stdin="## Completed\n\n- [x] shipped\n")
        progress = _bank(env) / "progress.md"
        progress.unlink()
        progress.mkdir()  # whatever it is now, it is not a bank file the daemon may replace
        synced = memctl(env, "--json", "bank", "sync")
        assert synced.code == 0 and json.loads(synced.stdout)["pending"] == 0
        assert progress.is_dir() and "was not applied" in synced.stderr
        saved = Path(re.search(r"saved in (\S+)", synced.stderr)[1])  # type: ignore[index]
        assert "- [x] shipped" in saved.read_text()
    finally:
        daemon.stop()


def test_every_write_to_a_bank_file_is_in_the_audit_log(env: Env) -> None:
    daemon = _started(env, NEVER)
    try:
        ok_json(env, "bank", "init")
        ok_json(env, "bank", "write", "notes.md", stdin="# Notes\n\n## A\n\none\n")
        ok_json(env, "bank", "update", "notes.md", stdin="## A\n\ntwo\n")
        ok_json(env, "bank", "write", "techContext.md", stdin="# Tech Context\n\nours\n")
        (_bank(env) / "techContext.md").write_text("# Tech Context\n\ntheirs\n")
        ok_json(env, "bank", "sync")
        audit = memctl(env, "audit", "-n", "100")
        assert audit.code == 0, audit.stderr
        events = [json.loads(line)["event"] for line in audit.stdout.splitlines()]
        synced = {e["file"]: e for e in events if e["type"] == "bank_file_synced"}
        notes = synced["memory-bank/notes.md"]
        assert notes["applied"] == ["write", "update"] and notes["written"] is True
        assert notes["left_out"] == [] and notes["sha"]
        tech = synced["memory-bank/techContext.md"]
        assert tech["applied"] == [] and tech["written"] is False
        [saved] = tech["left_out"]
        assert Path(saved).read_text() == "# Tech Context\n\nours\n"
    finally:
        daemon.stop()
