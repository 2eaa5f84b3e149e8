"""Handlers of the memory bank (design §10): the seven files through the daemon's cache, routing
free text, the optimiser, sync, projects and the lifecycle import."""

from __future__ import annotations

import time
from typing import Any

from memctl import protocol as p
from memoryd.banks.service import BankService
from memoryd.core.errors import Unavailable
from memoryd.server.context import DaemonContext, Handler, Parked, unique_id


def _banks(ctx: DaemonContext) -> BankService:
    if ctx.banks is None:
        raise Unavailable("memory banks are not enabled in this daemon")
    return ctx.banks


def bank_init(ctx: DaemonContext, req: p.BankInit) -> p.BankInitResult:
    return _banks(ctx).init(req.project, req.brief)


def bank_validate(ctx: DaemonContext, req: p.BankValidate) -> p.BankValidateResult:
    return _banks(ctx).validate(req.project)


def bank_read(ctx: DaemonContext, req: p.BankRead) -> p.BankReadResult:
    return _banks(ctx).read(req.project, req.name)


def bank_write(ctx: DaemonContext, req: p.BankWrite) -> p.BankWriteResult:
    banks, request = _banks(ctx), unique_id(req)
    return banks.write(req.project, req.name, req.content, req.mode, request=request)


def bank_update(ctx: DaemonContext, req: p.BankUpdate) -> p.BankWriteResult:
    banks, request = _banks(ctx), unique_id(req)
    return banks.update(req.project, req.name, req.content, req.mode, request=request)


def bank_list(ctx: DaemonContext, req: p.BankList) -> p.BankListResult:
    return _banks(ctx).list_files(req.project)


def bank_activate(ctx: DaemonContext, req: p.BankActivate) -> p.BankActivateResult:
    return _banks(ctx).activate(req.project, req.mode, req.files)


def bank_process(ctx: DaemonContext, req: p.BankProcess) -> p.BankProcessResult | Parked:
    banks, request = _banks(ctx), unique_id(req)
    routing = banks.route_async(request, req.project, req.content, apply=req.apply, mode=req.mode)
    if routing is not None and not routing.done():  # the LLM thinks; everyone else is served
        deadline = time.monotonic() + banks.llm_wait_s
        return Parked(deadline, banks.timed_out(), ready=routing.done)
    return banks.process(req.project, req.content, apply=req.apply, mode=req.mode, request=request)


def bank_optimise(ctx: DaemonContext, req: p.BankOptimise) -> p.BankOptimiseResult:
    return _banks(ctx).optimise(req.project, apply=req.apply, mode=req.mode, request=unique_id(req))


def bank_sync(ctx: DaemonContext, req: p.BankSync) -> p.BankSyncResult | Parked:
    banks = _banks(ctx)
    # Run again while parked: the request id makes it hand the bank over only once.
    root = banks.sync_now(unique_id(req), req.project)
    state = banks.sync_state(root)
    if not state.writing or req.wait_ms == 0:
        return state
    cache = banks.cache
    deadline = time.monotonic() + req.wait_ms / 1000
    return Parked(deadline, state, ready=lambda: not cache.busy(root))


def projects(ctx: DaemonContext, req: p.Projects) -> p.ProjectsResult:
    listed = _banks(ctx).projects().projects
    return p.ProjectsResult(projects=[ctx.registry.describe(known) for known in listed])


def ingest_lifecycle(ctx: DaemonContext, req: p.IngestLifecycle) -> p.IngestResult:
    return _banks(ctx).ingest(req.project)


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.BankInit: bank_init,
    p.BankValidate: bank_validate,
    p.BankRead: bank_read,
    p.BankWrite: bank_write,
    p.BankUpdate: bank_update,
    p.BankList: bank_list,
    p.BankActivate: bank_activate,
    p.BankProcess: bank_process,
    p.BankOptimise: bank_optimise,
    p.BankSync: bank_sync,
    p.Projects: projects,
    p.IngestLifecycle: ingest_lifecycle,
}
