"""One handler per request type; ``HANDLERS`` is the dispatch table.

A handler takes the daemon context and a decoded request and returns a result struct (or
``Parked`` to answer later). It raises a ``MemorydError`` subclass for anything the client did
wrong; the loop turns that into an ``Error`` reply. Each handler's docstring is its help text.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from memctl import __version__
from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.banks.service import BankService
from memoryd.capture.service import CaptureService
from memoryd.core.capture.extraction import remembered_text
from memoryd.core.errors import MemorydError, Unavailable
from memoryd.core.redaction import redact
from memoryd.project import ProjectMemory
from memoryd.recall import Recall
from memoryd.registry import ProjectRegistry

# A request id this long is taken as unique (memctl sends 32 hex digits): a retry can be told
# by it. Shorter ids are counters, reused by every client.
UNIQUE_ID_CHARS = 16


def unique_id(req: p.Request) -> str:
    """The request's id if a retry can be recognised by it, else ""."""
    return req.id if isinstance(req.id, str) and len(req.id) >= UNIQUE_ID_CHARS else ""


@dataclass
class DaemonContext:
    registry: ProjectRegistry
    errors: BackgroundErrors
    endpoint: str
    request_stop: Callable[[str], None]
    recall: Recall
    capture: CaptureService | None = None
    banks: BankService | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Parked:
    """Answer later: when the handler, run again, returns a result, or at ``deadline``
    (monotonic) with ``on_timeout``."""

    deadline: float
    on_timeout: msgspec.Struct
    # A cheap test of whether running the handler again could answer now; without it the
    # handler is re-run after every message the loop serves.
    ready: Callable[[], bool] | None = None


def hello(ctx: DaemonContext, req: p.Hello) -> p.HelloResult:
    return p.HelloResult(protocol=p.PROTOCOL_VERSION, version=__version__, pid=os.getpid())


def status(ctx: DaemonContext, req: p.StatusRequest) -> p.StatusResult:
    project = ctx.registry.get(req.project).info() if req.project else None
    return p.StatusResult(
        daemon=p.DaemonInfo(
            version=__version__,
            protocol=p.PROTOCOL_VERSION,
            pid=os.getpid(),
            uptime_s=round(time.monotonic() - ctx.started, 3),
            socket=ctx.endpoint,
        ),
        project=project,
        slo=p.SloInfo(**msgspec.structs.asdict(ctx.recall.slo.state())),
        errors=ctx.errors.recent(),
        capture=ctx.capture.status() if ctx.capture else {"enabled": False},
    )


def remember(ctx: DaemonContext, req: p.Remember) -> p.RememberResult:
    return ctx.registry.get(req.project).remember(req)


def search(ctx: DaemonContext, req: p.Search) -> p.SearchResult:
    return p.SearchResult(results=ctx.recall.search(ctx.registry.get(req.project), req))


def inject(ctx: DaemonContext, req: p.Inject) -> p.InjectResult:
    return ctx.recall.inject(ctx.registry.get(req.project), req)


def budget(ctx: DaemonContext, req: p.Budget) -> p.BudgetResult:
    project = ctx.registry.get(req.project)
    if req.tokens is not None:
        project.set_budget_ceiling(req.tokens)
    default = ctx.recall.default_ceiling
    ceiling = project.budget_ceiling(default)
    return p.BudgetResult(ceiling=ceiling, default=default, overridden=ceiling != default)


def alias_add(ctx: DaemonContext, req: p.AliasAdd) -> p.Alias:
    return ctx.registry.get(req.project).alias_add(req.term, req.synonyms)


def alias_list(ctx: DaemonContext, req: p.AliasList) -> p.AliasListResult:
    return p.AliasListResult(aliases=ctx.registry.get(req.project).alias_list())


def alias_remove(ctx: DaemonContext, req: p.AliasRemove) -> p.AliasListResult:
    project = ctx.registry.get(req.project)
    project.alias_remove(req.term)
    return p.AliasListResult(aliases=project.alias_list())


def list_entries(ctx: DaemonContext, req: p.ListEntries) -> p.ListResult:
    project = ctx.registry.get(req.project)
    project.flush_accesses()  # so listed access counts include the latest injections
    entries, total = project.store.list_entries(
        category=req.category,
        status=req.status,
        archived=req.archived,
        limit=req.limit,
        offset=req.offset,
    )
    return p.ListResult(entries=entries, total=total)


def forget(ctx: DaemonContext, req: p.Forget) -> p.ForgetResult:
    return p.ForgetResult(forgotten=ctx.registry.get(req.project).forget(req.target, req.confirm))


def pin(ctx: DaemonContext, req: p.Pin) -> p.PinResult:
    return ctx.registry.get(req.project).pin(req.target)


def unpin(ctx: DaemonContext, req: p.Unpin) -> p.PinResult:
    return ctx.registry.get(req.project).unpin(req.target)


def import_entries(ctx: DaemonContext, req: p.Import) -> p.ImportResult:
    return ctx.registry.get(req.project).import_lines(req.lines, req.first_line)


def export(ctx: DaemonContext, req: p.Export) -> p.ExportResult:
    project = ctx.registry.get(req.project)
    project.flush_accesses()
    store = project.store
    return p.ExportResult(
        entries=[e for e in store.iter_all() if req.include_archived or not e.archived]
    )


def audit_tail(ctx: DaemonContext, req: p.AuditTail) -> p.AuditResult | Parked:
    journal = ctx.registry.get(req.project).journal
    events = journal.tail(req.n, req.after_seq)
    if events or req.after_seq is None or req.wait_ms == 0:
        return p.AuditResult(events=events, last_seq=journal.last_seq)
    deadline = time.monotonic() + req.wait_ms / 1000
    seen = journal.last_seq
    return Parked(
        deadline, p.AuditResult(events=[], last_seq=seen), ready=lambda: journal.last_seq > seen
    )


def check(ctx: DaemonContext, req: p.Check) -> p.CheckResult:
    return ctx.registry.get(req.project).check()


def shutdown(ctx: DaemonContext, req: p.Shutdown) -> p.ShutdownResult:
    ctx.request_stop("shutdown request")
    return p.ShutdownResult(stopping=True)


# Each agent reads the payload in its own format (SPEC §5 Formats).
_FORMAT_OF: dict[str, p.Format] = {"claude": "claude", "codex": "codex", "gemini": "gemini"}


def hook(ctx: DaemonContext, req: p.Hook) -> p.HookResult:
    project = ctx.registry.get(req.project)
    fmt = _FORMAT_OF[req.agent]
    sessions = [req.session_id] if req.session_id else []
    if ctx.capture is not None:
        sessions += ctx.capture.live_sessions(project)
    inject_req = p.Inject(
        format=fmt,
        query=req.prompt,
        remaining_context=req.remaining_context,
        files=req.files,
    )
    match req.event:
        case "session_end":
            done = (
                ctx.capture.finalize_session(project, req.transcript_path, req.agent)
                if ctx.capture
                else False
            )
            return p.HookResult(finalized=done)
        case "pre_compact":
            payload = ctx.recall.inject(project, inject_req, always_only=True)
            return p.HookResult(text=payload.text, entries=payload.entries)
        case "prompt":
            remembered = _remember_from_prompt(ctx, project, req.prompt, req.agent)
            payload = ctx.recall.inject(project, inject_req, session_ids=sessions)
            return p.HookResult(text=payload.text, entries=payload.entries, remembered=remembered)
        case _:
            payload = ctx.recall.inject(project, inject_req, session_ids=sessions)
            return p.HookResult(text=payload.text, entries=payload.entries)


def _remember_from_prompt(
    ctx: DaemonContext, project: ProjectMemory, prompt: str, agent: str
) -> list[str]:
    """``remember: X`` (or ``#remember X``) in a prompt is the user asking to keep X. Worded by
    the same rule capture applies to the transcript later, so the two share a fingerprint and
    one request is one entry. A failure here is reported in the background: it must not cost
    the agent its memory payload."""
    text = remembered_text(prompt, agent, redact=lambda t: redact(t).text)
    if not text:
        return []
    try:
        return [project.remember(p.Remember(content=text, tags=["remember"])).id]
    except MemorydError as exc:
        ctx.errors.record(f"remember: from a prompt was not stored: {exc}", "warning")
        return []


def auto(ctx: DaemonContext, req: p.Auto) -> p.AutoResult:
    project = ctx.registry.get(req.project)
    if req.enabled is not None:
        project.set_setting("auto_memory", req.enabled)
    default = ctx.capture.default_preset if ctx.capture else "balanced"
    return p.AutoResult(
        enabled=project.store.setting("auto_memory") != 0,
        preset=str(project.store.setting("preset") or default),
    )


def preset(ctx: DaemonContext, req: p.Preset) -> p.AutoResult:
    project = ctx.registry.get(req.project)
    if req.name is not None:
        project.set_setting("preset", req.name)
    return auto(ctx, p.Auto(project=req.project))


def episodes(ctx: DaemonContext, req: p.Episodes) -> p.EpisodesResult:
    project = ctx.registry.get(req.project)
    found = project.store.episodes(10_000 if req.query else req.limit)
    needle = req.query.lower()
    if needle:
        found = [
            e
            for e in found
            if needle in f"{e.title} {e.goal} {e.outcome} {' '.join(e.decisions)}".lower()
        ]
    return p.EpisodesResult(
        episodes=[
            msgspec.convert(msgspec.to_builtins(e), p.EpisodeInfo) for e in found[: req.limit]
        ]
    )


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
    return _banks(ctx).projects()


def files_show(ctx: DaemonContext, req: p.FilesShow) -> p.FilesShowResult:
    return _banks(ctx).files_show(req.project)


def files_list(ctx: DaemonContext, req: p.FilesList) -> p.FilesListResult:
    return _banks(ctx).files_list(req.project)


def files_refresh(ctx: DaemonContext, req: p.FilesRefresh) -> p.FilesListResult:
    return _banks(ctx).files_list(req.project, refresh=True)


def save_memory(ctx: DaemonContext, req: p.SaveMemory) -> p.SaveMemoryResult:
    return _banks(ctx).save_memory(req)


def ingest_lifecycle(ctx: DaemonContext, req: p.IngestLifecycle) -> p.IngestResult:
    return _banks(ctx).ingest(req.project)


Handler = Callable[[DaemonContext, Any], Any]
HANDLERS: dict[type[p.Request], Handler] = {
    p.Hello: hello,
    p.StatusRequest: status,
    p.Remember: remember,
    p.Search: search,
    p.ListEntries: list_entries,
    p.Forget: forget,
    p.Pin: pin,
    p.Unpin: unpin,
    p.Import: import_entries,
    p.Export: export,
    p.AuditTail: audit_tail,
    p.Check: check,
    p.Shutdown: shutdown,
    p.Inject: inject,
    p.Budget: budget,
    p.AliasAdd: alias_add,
    p.AliasList: alias_list,
    p.AliasRemove: alias_remove,
    p.Hook: hook,
    p.Auto: auto,
    p.Preset: preset,
    p.Episodes: episodes,
    p.BankInit: bank_init,
    p.BankValidate: bank_validate,
    p.BankRead: bank_read,
    p.BankWrite: bank_write,
    p.BankUpdate: bank_update,
    p.BankList: bank_list,
    p.BankActivate: bank_activate,
    p.BankProcess: bank_process,
    p.BankSync: bank_sync,
    p.BankOptimise: bank_optimise,
    p.Projects: projects,
    p.FilesShow: files_show,
    p.FilesList: files_list,
    p.FilesRefresh: files_refresh,
    p.SaveMemory: save_memory,
    p.IngestLifecycle: ingest_lifecycle,
}

# Requests that change memory: their replies are cached by request id so a retry is answered
# from the cache instead of being applied twice.
MUTATING: frozenset[type[p.Request]] = frozenset(
    {
        p.Remember,
        p.Forget,
        p.Pin,
        p.Unpin,
        p.Import,
        p.AliasAdd,
        p.AliasRemove,
        p.Budget,
        p.Auto,
        p.Preset,
        p.Hook,  # a prompt's `remember:` writes; a session end finalizes
        p.BankInit,
        p.BankWrite,
        p.BankUpdate,
        p.BankProcess,  # with apply
        p.BankOptimise,  # with apply
        p.SaveMemory,  # when confirmed
        p.IngestLifecycle,
    }
)
