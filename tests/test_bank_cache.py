"""The bank cache, its journal and the writer's flush, in process with real files (the daemon-level
behaviour is in test_bank_sync.py). Jobs are run by calling the writer's own ``flush_file``, so
that a test can stop "the daemon" at any point between journal, rename and report."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from memoryd.atomic import write_atomic
from memoryd.background import BackgroundErrors
from memoryd.banks.cache import BankCache
from memoryd.banks.files import Bank, stat_sig
from memoryd.banks.journal import BankJournal, OpRecord
from memoryd.banks.writer import FlushJob, FlushResult, flush_file
from memoryd.core.bank.ops import Complete, Update, Write, replay, text_hash
from memoryd.core.errors import MemorydError, Unavailable

DECISION = "## Decision: Use WAL\n\n- **Date**: 2026-11-21\n- **Status**: Accepted\n"


class Rig:
    """A project with a bank, and a cache over a journal in ``state`` (reopened like a
    restarted daemon by ``restart``)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "project"
        self.root.mkdir()
        Bank(self.root).init("A test project")
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.jobs: list[FlushJob] = []
        self.errors = BackgroundErrors()
        self.journal_path = self.state / "bank-journal.jsonl"
        self.restart()

    def restart(self) -> None:
        self.jobs.clear()
        self.journal = BankJournal(self.journal_path)
        self.cache = BankCache(
            self.journal, self.jobs.append, self.errors, conflicts_dir=self.state / "conflicts"
        )

    def run_jobs(self, report: bool = True) -> list[FlushResult]:
        results = [flush_file(job) for job in self.jobs]
        self.jobs.clear()
        if report:
            for result in results:
                self.cache.flushed(result)
        return results

    def disk(self, name: str) -> str:
        return (self.root / "memory-bank" / name).read_text()

    def messages(self) -> list[str]:
        return [e.description for e in self.errors.take()]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.journal.close()


def test_change_is_served_at_once_and_written_at_the_sync(rig: Rig) -> None:
    before = rig.disk("decisionLog.md")
    submitted = rig.cache.update(rig.root, "decisionLog.md", DECISION)
    assert submitted.sync == "scheduled" and rig.jobs == []
    assert DECISION in rig.cache.read(rig.root, "decisionLog.md")[0]
    assert rig.disk("decisionLog.md") == before
    assert rig.cache.sync() == 1
    assert rig.cache.sync() == 0  # the writer has it: not handed over twice
    rig.run_jobs()
    assert rig.disk("decisionLog.md").count(DECISION) == 1
    assert rig.cache.pending() == 0
    assert rig.journal_path.read_bytes() == b""  # nothing pending: the journal is emptied


def test_restart_before_the_sync_keeps_the_change(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    rig.journal.close()  # the daemon dies: nothing reached the file
    rig.restart()
    assert DECISION in rig.cache.read(rig.root, "decisionLog.md")[0]
    rig.cache.sync()
    rig.run_jobs()
    assert rig.disk("decisionLog.md").count(DECISION) == 1


def test_death_after_the_rename_does_not_apply_the_change_twice(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    rig.cache.sync()
    rig.run_jobs(report=False)  # written, but the daemon died before hearing back
    rig.journal.close()
    rig.restart()
    assert rig.cache.pending() == 0
    assert rig.cache.sync() == 0
    assert rig.disk("decisionLog.md").count(DECISION) == 1


def test_death_between_handing_over_and_the_rename_applies_once(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    rig.cache.sync()  # "flushing" journaled; the writer never ran
    rig.journal.close()
    rig.restart()
    assert rig.cache.pending() == 1
    rig.cache.sync()
    rig.run_jobs()
    assert rig.disk("decisionLog.md").count(DECISION) == 1


def test_edit_outside_the_daemon_reloads_and_pending_changes_apply_on_top(rig: Rig) -> None:
    rig.cache.update(rig.root, "activeContext.md", "## Next Steps\n\n- ours\n")
    path = rig.root / "memory-bank" / "activeContext.md"
    path.write_text(path.read_text().replace("## Current Focus\n", "## Current Focus\n\ntheirs\n"))
    view = rig.cache.read(rig.root, "activeContext.md")[0]
    assert "theirs" in view and "- ours" in view
    rig.cache.sync()
    [result] = rig.run_jobs()
    assert result.stale is False  # the cache had already taken the user's version in
    assert rig.disk("activeContext.md") == view
    assert rig.messages() == []


def test_user_edit_during_the_flush_sends_the_file_back_for_rebasing(rig: Rig) -> None:
    rig.cache.update(rig.root, "activeContext.md", "## Next Steps\n\n- ours\n")
    rig.cache.sync()  # handed over; now the user saves before the writer runs
    path = rig.root / "memory-bank" / "activeContext.md"
    path.write_text(path.read_text().replace("## Current Focus\n", "## Current Focus\n\ntheirs\n"))
    [stale] = rig.run_jobs()
    assert stale.stale is True and "theirs" in (stale.text or "")
    assert "- ours" not in rig.disk("activeContext.md")  # the writer wrote nothing
    assert len(rig.jobs) == 1  # handed over again, made from the user's version
    rig.run_jobs()
    text = rig.disk("activeContext.md")
    assert "theirs" in text and "- ours" in text
    assert rig.cache.read(rig.root, "activeContext.md")[0] == text


def test_write_error_keeps_changes_retries_and_reports_once(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    for _ in range(2):
        [job] = rig.jobs if rig.cache.sync() else []
        rig.jobs.clear()
        rig.cache.flushed(
            FlushResult(
                root=job.root, name=job.name, upto=job.upto, error="No space left", retry=True
            )
        )
    messages = rig.messages()
    assert len(messages) == 1 and "No space left" in messages[0] and "retried" in messages[0]
    assert rig.cache.pending() == 1
    rig.cache.sync()
    rig.run_jobs()
    assert rig.cache.pending() == 0 and rig.disk("decisionLog.md").count(DECISION) == 1


def test_final_sync_leaves_out_files_whose_write_failed(rig: Rig) -> None:
    """At shutdown a failing file is not tried again (it stays journaled for the next start);
    the others still go to the writer."""
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    [job] = rig.jobs if rig.cache.sync() else []
    rig.jobs.clear()
    rig.cache.flushed(
        FlushResult(root=job.root, name=job.name, upto=job.upto, error="EIO", retry=True)
    )
    rig.cache.update(rig.root, "activeContext.md", "## Current Focus\n\nShutdown.\n")
    assert rig.cache.sync_except_failed() == 1
    assert [j.name for j in rig.jobs] == ["activeContext.md"]
    rig.run_jobs()
    assert rig.cache.sync_except_failed() == 0 and rig.cache.pending() == 1
    assert rig.cache.sync() == 1  # the ordinary sync tries the failed file again
    rig.run_jobs()
    assert rig.cache.pending() == 0 and rig.disk("decisionLog.md").count(DECISION) == 1


def test_change_refused_when_accepted_is_never_journaled(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    rig.cache.sync()
    rig.run_jobs()  # the decision is on disk, and settled
    with pytest.raises(Exception, match="append-only"):
        rig.cache.write(rig.root, "decisionLog.md", "# Decision Log\n")
    with pytest.raises(Exception, match="does not exist"):
        rig.cache.update(rig.root, "absent.md", "## X\n\ny\n")
    assert rig.cache.pending() == 0 and rig.journal.count == 0


def test_torn_journal_tail_is_set_aside_and_the_rest_recovered(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    rig.journal.close()
    with open(rig.journal_path, "ab") as fh:
        fh.write(b'{"type":"op","seq":2,"ts":1.0,"root":"/x","na')  # the daemon died mid-line
    rig.restart()
    assert rig.cache.pending() == 1
    assert (rig.state / "bank-journal.jsonl.bad").read_bytes().startswith(b'{"type":"op"')
    assert any("unreadable" in m for m in rig.messages())
    rig.cache.update(rig.root, "activeContext.md", "## Next Steps\n\n- after\n")
    rig.journal.close()
    rig.restart()  # appends after the repair start on a line of their own
    assert rig.cache.pending() == 2


def test_journal_records_round_trip(rig: Rig) -> None:
    rig.cache.apply(rig.root, "progress.md", Update("## Completed\n\n- [x] one\n"))
    rig.journal.close()
    reopened = BankJournal(rig.journal_path)
    reopened.close()
    recovered = reopened.recovered
    [(key, pending)] = recovered.files.items()
    assert key == (str(rig.root), "progress.md")
    assert isinstance(pending.ops[0], OpRecord) and pending.ops[0].op == Update(
        "## Completed\n\n- [x] one\n"
    )


def test_replay_leaves_out_what_no_longer_applies_and_keeps_the_rest() -> None:
    base = "# Progress\n\n## In Progress\n\n- [ ] ship\n\n## Completed\n"
    ops = [
        (1, Write("# Replaced\n", text_hash("something else"))),  # made against another text
        (2, Complete("ship", date(2026, 11, 21))),
        (3, Complete("ship", date(2026, 11, 21))),  # nothing open to move any more
        (4, Update("## Notes\n\nkept\n")),
    ]
    replayed = replay("progress.md", base, ops)
    assert [f.seq for f in replayed.failed] == [1, 3]
    assert "changed on disk" in replayed.failed[0].reason
    assert replayed.text is not None
    assert "- [x] ship — 2026-11-21" in replayed.text and "kept" in replayed.text
    missing = replay("notes.md", None, [(1, Update("## A\n\nb\n"))])
    assert missing.text is None and "does not exist" in missing.failed[0].reason


def test_large_change_made_while_the_writer_has_the_file_follows_at_once(rig: Rig) -> None:
    rig.cache.write(rig.root, "notes.md", "# Notes\n")
    rig.cache.sync()
    [first] = rig.jobs
    big = "# Notes\n\n" + "word " * 2000
    assert rig.cache.write(rig.root, "notes.md", big).sync == "immediate"
    assert rig.jobs == [first]  # one job per file at a time: the writer still has the first
    rig.jobs.clear()
    rig.cache.flushed(flush_file(first))
    assert len(rig.jobs) == 1  # handed over as soon as the first was done, not a minute later
    rig.run_jobs()
    assert rig.disk("notes.md") == big


def test_oldest_change_is_handed_over_first(rig: Rig) -> None:
    rig.cache.update(rig.root, "progress.md", "## Completed\n\n- [x] first\n")
    rig.cache.update(rig.root, "activeContext.md", "## Next Steps\n\n- second\n")
    rig.cache.update(rig.root, "progress.md", "## Completed\n\n- [x] third\n")
    rig.cache.read(rig.root, "activeContext.md")  # touching a file does not reorder anything
    rig.cache.sync()
    assert [job.name for job in rig.jobs] == ["progress.md", "activeContext.md"]
    assert [job.upto for job in rig.jobs] == [3, 2]


def test_rebased_write_then_death_before_the_report_applies_once(rig: Rig) -> None:
    rig.cache.update(rig.root, "decisionLog.md", DECISION)
    log = rig.root / "memory-bank" / "decisionLog.md"
    rig.cache.sync()
    log.write_text(log.read_text() + "\n## Decision: The user's own\n\n- **Status**: Accepted\n")
    rig.run_jobs()  # stale: handed over again on top of the user's version
    rig.run_jobs(report=False)  # written, and the daemon dies before hearing back
    rig.journal.close()
    rig.restart()
    assert rig.cache.pending() == 0 and rig.cache.sync() == 0
    text = rig.disk("decisionLog.md")
    assert text.count("Use WAL") == 1 and "The user's own" in text


def test_left_out_change_is_reported_even_if_the_daemon_died_after_the_write(rig: Rig) -> None:
    rig.cache.read(rig.root, "techContext.md")
    rig.cache.write(rig.root, "techContext.md", "# Tech Context\n\nours\n")
    tech = rig.root / "memory-bank" / "techContext.md"
    tech.write_text("# Tech Context\n\ntheirs\n")  # the whole-file write no longer applies
    rig.cache.sync()
    rig.run_jobs(report=False)
    rig.journal.close()
    rig.restart()
    assert rig.cache.pending() == 0
    [message] = rig.messages()
    assert "was not applied" in message and "changed on disk" in message
    saved = Path(message.rsplit("saved in ", 1)[1])
    assert saved.read_text() == "# Tech Context\n\nours\n"
    assert rig.disk("techContext.md") == "# Tech Context\n\ntheirs\n"


def test_changes_set_aside_never_overwrite_each_other_across_restarts(rig: Rig) -> None:
    saved = []
    for attempt in ("first", "second"):  # both are change #1: the journal empties in between
        rig.cache.read(rig.root, "techContext.md")
        rig.cache.write(rig.root, "techContext.md", f"# Tech Context\n\n{attempt}\n")
        (rig.root / "memory-bank" / "techContext.md").write_text(
            f"# Tech Context\n\nuser {attempt}\n"
        )
        rig.cache.sync()
        rig.run_jobs()
        [message] = rig.messages()
        saved.append(Path(message.rsplit("saved in ", 1)[1]))
        rig.journal.close()
        rig.restart()
    assert saved[0] != saved[1]
    assert [p.read_text() for p in saved] == [
        f"# Tech Context\n\n{a}\n" for a in ("first", "second")
    ]


def test_change_that_cannot_be_saved_aside_stays_pending_and_nothing_is_stuck(rig: Rig) -> None:
    (rig.state / "conflicts").write_text("not a folder")  # every set-aside fails
    rig.cache.read(rig.root, "techContext.md")
    rig.cache.write(rig.root, "techContext.md", "# Tech Context\n\nours\n")
    (rig.root / "memory-bank" / "techContext.md").write_text("# Tech Context\n\ntheirs\n")
    rig.cache.sync()
    rig.run_jobs()
    [message] = rig.messages()
    assert "could not be saved aside" in message and "kept in the bank journal" in message
    assert rig.cache.pending() == 1 and not rig.cache.busy()
    assert rig.disk("techContext.md") == "# Tech Context\n\ntheirs\n"
    (rig.state / "conflicts").unlink()  # fixed: the next sync sets it aside
    rig.cache.sync()
    rig.run_jobs()
    assert rig.cache.pending() == 0 and "saved in" in rig.messages()[0]


def test_journal_that_cannot_be_written_refuses_the_change(rig: Rig) -> None:
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
    saved_fd = os.dup(rig.journal._fd)
    os.dup2(full, rig.journal._fd)
    try:
        with pytest.raises(Unavailable, match="not saved"):
            rig.cache.update(rig.root, "decisionLog.md", DECISION)
    finally:
        os.dup2(saved_fd, rig.journal._fd)
        os.close(saved_fd)
        os.close(full)
    assert rig.cache.pending() == 0
    assert DECISION not in rig.cache.read(rig.root, "decisionLog.md")[0]
    rig.journal.close()
    rig.restart()
    assert rig.cache.pending() == 0  # nothing the client was refused comes back


def test_bank_folder_replaced_by_a_file_is_a_clear_refusal(rig: Rig) -> None:
    rig.cache.read(rig.root, "progress.md")
    shutil.rmtree(rig.root / "memory-bank")
    (rig.root / "memory-bank").write_text("oops")
    with pytest.raises(MemorydError):
        rig.cache.read(rig.root, "progress.md")


def test_retry_of_a_change_a_dead_daemon_journaled_is_not_applied_again(rig: Rig) -> None:
    request = "7f" * 16  # a client's unique request id
    rig.cache.update(rig.root, "decisionLog.md", DECISION, request)
    rig.journal.close()  # died before answering; the client retries against the next daemon
    rig.restart()
    again = rig.cache.update(rig.root, "decisionLog.md", DECISION, request)
    assert again.sync == "scheduled" and rig.cache.pending() == 1
    rig.cache.update(rig.root, "decisionLog.md", DECISION.replace("Use WAL", "Other"), "8e" * 16)
    rig.cache.sync()
    rig.run_jobs()
    assert rig.disk("decisionLog.md").count("Use WAL") == 1
    assert "Other" in rig.disk("decisionLog.md")


def test_retry_after_a_death_midway_through_a_multi_file_change_completes_it(rig: Rig) -> None:
    request = "5c" * 16  # one bank_process request changing two files
    rig.cache.update(rig.root, "decisionLog.md", DECISION, request)
    rig.journal.close()  # died before journaling the second file's change
    rig.restart()
    rig.cache.update(rig.root, "decisionLog.md", DECISION, request)  # the retry: known
    rig.cache.update(rig.root, "activeContext.md", "## Next Steps\n\n- retried\n", request)
    rig.cache.sync()
    rig.run_jobs()
    assert rig.disk("decisionLog.md").count("Use WAL") == 1
    assert "- retried" in rig.disk("activeContext.md")


def test_write_is_called_off_when_the_file_changed_after_it_was_read(rig: Rig) -> None:
    bank = Bank(rig.root)
    path, _real, _text, sig = bank.load("activeContext.md")
    path.write_text("# Active Context\n\nsaved by the user a moment ago, same size!\n")
    assert bank.store_if_unchanged(path, "# ours\n", sig) is None
    assert "saved by the user" in path.read_text()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left
    assert bank.store_if_unchanged(path, "# ours\n", bank.load("activeContext.md")[3]) is not None
    assert path.read_text() == "# ours\n"


def test_a_save_landing_during_the_write_calls_it_off_at_the_rename(rig: Rig) -> None:
    """The user's save lands after the temp file is written, before the rename: the check made
    at that last moment sees it, and the user's text stays."""
    bank = Bank(rig.root)
    path, _real, _text, sig = bank.load("activeContext.md")

    def user_saves_now() -> bool:
        path.write_text("# Active Context\n\nthe user's, saved mid-write\n")
        return stat_sig(path) != sig

    mode = path.stat().st_mode & 0o777
    assert write_atomic(path, b"# ours\n", mode, unless=user_saves_now) is None
    assert path.read_text() == "# Active Context\n\nthe user's, saved mid-write\n"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]
