"""The FIFO writer (design §10): one thread that writes bank files, one job at a time, in the
order the cache handed them over, so two writes of a file never race.

A job carries the cache's text for the file and the hash of the disk text it was made from. The
writer writes that text, atomically (a reader sees the old file or the new one), only if the file
on disk is still the one the text was made from; if the user changed it meanwhile, nothing is
written and the job comes back "stale" with the user's version, for the cache to apply its
operations on top and hand the file over again. So the writer only ever writes a text the cache
journaled the hash of, which is what makes recovery after a crash exact. The thread touches no
daemon state: results go back through a queue, and ``notify`` wakes the owner thread (the
thread itself is ``memoryd.fifo.FifoWriter``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
from msgspec.structs import replace

from memoryd.banks.files import Bank, Sig
from memoryd.core.bank.ops import Failed, text_hash
from memoryd.core.errors import MemorydError
from memoryd.fifo import FifoWriter


class FlushJob(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    name: str
    base_hash: str  # the disk text the cache's text was made from
    text: str | None  # the cache's text: base with the operations applied
    failed: list[Failed] = []  # operations the text leaves out: they do not apply on the base
    upto: int  # the last operation's sequence number


class FlushResult(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    name: str
    upto: int
    # The file as it now is on disk (None: it does not exist) and its signature: written, or
    # found changed (``stale``: nothing was written).
    text: str | None = None
    sig: Sig | None = None
    stale: bool = False
    failed: list[Failed] = []  # operations left out of the text written, with why
    # On failure: why, and whether trying again later can help (an I/O error) or not (the
    # project is gone, the file became a symlink out of the bank, or is no longer text).
    error: str | None = None
    retry: bool = False


def flush_file(job: FlushJob) -> FlushResult:
    """Bring one bank file up to date with the cache. Never raises for a problem on disk."""
    root = Path(job.root)
    done = _outcome(job)
    if not root.is_dir():
        return replace(done, error=f"project directory {root} no longer exists")
    bank = Bank(root)
    try:
        path, _real, disk, sig = bank.load(job.name)
        if text_hash(disk) != job.base_hash:
            return replace(done, text=disk, sig=sig, stale=True)
        if job.text is not None and job.text != disk:
            written = bank.store_if_unchanged(path, job.text, sig)
            if written is None:  # saved by the user since we read it, up to the rename
                path, _real, disk, sig = bank.load(job.name)
                return replace(done, text=disk, sig=sig, stale=True)
            sig, disk = written, job.text
        return replace(done, text=disk, sig=sig, failed=job.failed)
    except MemorydError as exc:
        return replace(done, error=str(exc))
    except OSError as exc:
        return replace(done, error=f"{exc.strerror or exc}", retry=True)


def _outcome(job: FlushJob) -> FlushResult:
    """The result of ``job`` before anything is known of it."""
    return FlushResult(root=job.root, name=job.name, upto=job.upto)


def _crashed(job: FlushJob, reason: str) -> FlushResult:
    return replace(_outcome(job), error=reason, retry=True)


class BankWriter(FifoWriter[FlushJob, FlushResult]):
    def __init__(self, notify: Callable[[], None]) -> None:
        super().__init__(flush_file, _crashed, notify, name="memoryd-bank-writer")
