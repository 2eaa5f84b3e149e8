"""The dispatch table of internal messages: what signals, the watcher, the scheduler and the bank
writer post to the owner thread. Same shape as the request table: ``handler(ctx, message)``, run
by the loop one message at a time; a handler that raises is logged and reported to the next client.

SIGTERM/SIGINT arrive as ``StopRequested`` and SIGHUP as ``ReloadRequested``, so a signal takes
the path of every other message instead of running code in a signal handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memoryd import messages
from memoryd.banks.service import BankService
from memoryd.server.context import DaemonContext
from memoryd.share import is_share_file

InternalHandler = Callable[[DaemonContext, Any], None]
# How long a session may stay quiet before its working memory goes, when capture (whose
# idle_minutes says it otherwise) is off.
SESSION_IDLE_S = 30 * 60.0


def stop(ctx: DaemonContext, message: messages.StopRequested) -> None:
    ctx.request_stop(message.reason)


def reload(ctx: DaemonContext, message: messages.ReloadRequested) -> None:
    ctx.reload()


def file_changed(ctx: DaemonContext, message: messages.FileChanged) -> None:
    if is_share_file(message.path):
        if ctx.share is not None:
            ctx.share.file_changed(message.path)
    elif ctx.banks is not None and BankService.is_lifecycle_file(message.path):
        ctx.banks.file_changed(message.path)
    elif ctx.banks is not None and ctx.banks.is_instruction_file(message.path):
        ctx.banks.instruction_file_changed(message.path)
    elif ctx.capture is not None:
        ctx.capture.file_changed(message.path)


def banks_written(ctx: DaemonContext, message: messages.BanksWritten) -> None:
    if ctx.banks is not None and ctx.bank_writer is not None:
        ctx.banks.written(ctx.bank_writer.results())


def shares_written(ctx: DaemonContext, message: messages.SharesWritten) -> None:
    if ctx.share is not None and ctx.share_writer is not None:
        ctx.share.written(ctx.share_writer.results())


def wake(ctx: DaemonContext, message: messages.Wake) -> None:
    """Nothing to do here: the loop looks at parked requests after every message."""


def tick(ctx: DaemonContext, message: messages.Tick) -> None:
    job = JOBS.get(message.job)
    if job is None:
        ctx.log.warning("unknown_job", job=message.job)
        return
    job(ctx)


def _index_commit(ctx: DaemonContext) -> None:
    """Commits in the background what the index lacks (a search that needs it waits for it
    itself); also flushes access counts and capture cursors."""
    for project in ctx.registry.opened():
        project.catch_up()
        project.flush_accesses()
        project.commit_index_in_background()
    if ctx.capture is not None:
        ctx.capture.save_cursors()
    if ctx.share is not None:
        ctx.share.retry_failed()


def _socket(ctx: DaemonContext) -> None:
    """The runtime directory may be removed under us (logind at logout): bind again."""
    if ctx.keep_socket is not None:
        ctx.keep_socket()


def _bank_sync(ctx: DaemonContext) -> None:
    if ctx.banks is not None:
        ctx.banks.sync_due()


def _capture_idle(ctx: DaemonContext) -> None:
    """Finalize quiet sessions and let their working memory go; a transcript folder missing at
    start (the agent was installed later) is watched once it exists, and what it already holds
    is caught up."""
    idle_s = ctx.capture.idle_s if ctx.capture is not None else SESSION_IDLE_S
    for project in ctx.registry.opened():
        project.expire_working_memory(idle_s)
    if ctx.capture is None:
        return
    if ctx.watcher is not None:
        appeared = ctx.watcher.watch_missing()
        if appeared:
            ctx.log.info("capture_roots_appeared", roots=[r.path for r in appeared])
            ctx.capture.queue(ctx.watcher.scan(ctx.backfill_days, time.time(), roots=appeared))
    ctx.capture.finalize_idle()


def _quarantine(ctx: DaemonContext) -> None:
    for project in ctx.registry.opened():
        project.review_quarantine(time.time())


def _compaction(ctx: DaemonContext) -> None:
    """Memory that keeps itself healthy: every open project's entries are compacted (design
    §8), and its memory bank, when above its budget, optimised (design §10)."""
    if ctx.compactor is not None:
        ctx.compactor.request_all()
    if ctx.banks is not None:
        for project, result in ctx.banks.optimise_due():
            ctx.log.info(
                "bank_optimised",
                project=str(project.root),
                tokens_before=result.tokens_before,
                tokens_after=result.tokens_after,
                archived=result.archived,
            )


JOBS: dict[str, Callable[[DaemonContext], None]] = {
    "compaction": _compaction,
    "index_commit": _index_commit,
    "socket": _socket,
    "bank_sync": _bank_sync,
    "capture_idle": _capture_idle,
    "quarantine": _quarantine,
}

INTERNAL_HANDLERS: dict[type[messages.Internal], InternalHandler] = {
    messages.StopRequested: stop,
    messages.ReloadRequested: reload,
    messages.FileChanged: file_changed,
    messages.BanksWritten: banks_written,
    messages.SharesWritten: shares_written,
    messages.Wake: wake,
    messages.Tick: tick,
}
