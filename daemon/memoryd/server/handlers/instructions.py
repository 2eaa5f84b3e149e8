"""Handlers of the instruction files (design §11): MEMORY.md, its imports and save_memory."""

from __future__ import annotations

from typing import Any

from memctl import protocol as p
from memoryd.server.context import DaemonContext, Handler
from memoryd.server.handlers.bank import _banks


def files_show(ctx: DaemonContext, req: p.FilesShow) -> p.FilesShowResult:
    return _banks(ctx).files_show(req.project)


def files_list(ctx: DaemonContext, req: p.FilesList) -> p.FilesListResult:
    return _banks(ctx).files_list(req.project)


def files_refresh(ctx: DaemonContext, req: p.FilesRefresh) -> p.FilesListResult:
    return _banks(ctx).files_list(req.project, refresh=True)


def save_memory(ctx: DaemonContext, req: p.SaveMemory) -> p.SaveMemoryResult:
    return _banks(ctx).save_memory(req)


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.FilesShow: files_show,
    p.FilesList: files_list,
    p.FilesRefresh: files_refresh,
    p.SaveMemory: save_memory,
}
