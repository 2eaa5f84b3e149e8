"""The FIFO writer (seed 002 §2.1): one thread that writes bank files, one job at a time, in the
order the cache handed them over, so two writes of a file never race.

A job carries the cache's text for the file and the operations behind it. If the file on disk is
still the one the cache loaded, the text is written as it is; if the user changed it meanwhile,
the operations are applied again on top of the user's version (``core.bank_ops.replay``) and
those that no longer apply are left out and reported. Every write is atomic: a reader sees the
old file or the new one. The thread touches no daemon state: results go back through a queue,
and ``notify`` wakes the owner thread to collect them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
from msgspec.structs import replace

from memoryd.banks.files import Bank, Sig
from memoryd.core.bank_ops import Failed, Op, replay, text_hash
from memoryd.core.errors import MemorydError


class FlushJob(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    name: str
    base_hash: str  # the disk text the cache's text was made from
    text: str | None  # the cache's text: base with the operations applied
    ops: list[tuple[int, Op]]
    failed: list[Failed] = []  # operations the cache found not to apply on the base
    upto: int  # the last operation's sequence number


class FlushResult(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    name: str
    upto: int
    # On success: the file as it now is on disk (None: it does not exist) and its signature.
    text: str | None = None
    sig: Sig | None = None
    rebased: bool = False  # the user's version was found on disk and the operations re-applied
    failed: list[Failed] = []  # operations left out, with why
    # On failure: why, and whether trying again later can help (an I/O error) or not (the
    # project is gone, the file became a symlink out of the bank, or is no longer text).
    error: str | None = None
    retry: bool = False


def flush_file(job: FlushJob) -> FlushResult:
    """Bring one bank file up to date with the cache. Never raises for a problem on disk."""
    root = Path(job.root)
    done = FlushResult(root=job.root, name=job.name, upto=job.upto)
    if not root.is_dir():
        return replace(done, error=f"project directory {root} no longer exists")
    bank = Bank(root)
    try:
        path, _real, disk, sig = bank.load(job.name)
        if text_hash(disk) == job.base_hash:
            text, failed, rebased = job.text, job.failed, False
        else:
            replayed = replay(job.name, disk, job.ops)
            text, failed, rebased = replayed.text, replayed.failed, True
        if text is not None and text != disk:
            sig = bank.store(path, text)
        return replace(done, text=text, sig=sig, rebased=rebased, failed=failed)
    except MemorydError as exc:
        return replace(done, error=str(exc))
    except OSError as exc:
        return replace(done, error=f"{exc.strerror or exc}", retry=True)


_STOP = None


class BankWriter:
    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._jobs: queue.Queue[FlushJob | None] = queue.Queue()
        self._results: queue.SimpleQueue[FlushResult] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="memoryd-bank-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: FlushJob) -> None:
        self._jobs.put(job)

    def results(self) -> list[FlushResult]:
        """The results not collected yet, in the order the jobs were done."""
        found = []
        while True:
            try:
                found.append(self._results.get_nowait())
            except queue.Empty:
                return found

    def stop(self) -> None:
        """Finish the jobs already submitted, then end the thread."""
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            try:
                result = flush_file(job)
            except Exception as exc:  # a bug must not kill the thread and strand the job
                reason = f"internal error: {type(exc).__name__}: {exc}"
                result = FlushResult(
                    root=job.root, name=job.name, upto=job.upto, error=reason, retry=True
                )
            self._results.put(result)
            self._notify()
