"""Handlers of project memory: entries (remember, search, list, forget, pin, import, export), the
payload (inject, budget), aliases, learning settings (auto, preset), episodes, and design §9's
working memory (focus, release), graph (connect, graph) and notes."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import msgspec

from memctl import protocol as p
from memoryd import memtrim, review
from memoryd.core.errors import Unavailable
from memoryd.server.context import DaemonContext, Deferred, Handler, Parked, deferred_read

COMPACT_WAIT_S = 25.0  # within memctl's bulk budget; a longer run goes on in the background
SHARE_WAIT_S = 10.0  # `share on` answers once the file is written, or says it is pending
_T = TypeVar("_T")


def remember(ctx: DaemonContext, req: p.Remember) -> p.RememberResult:
    return ctx.registry.get(req.project).remember(req)


def search(ctx: DaemonContext, req: p.Search) -> Deferred[p.SearchResult, p.SearchResult]:
    return deferred_read(
        ctx,
        ctx.registry.get(req.project),
        "archived" if req.archive else "active_and_findings",
        lambda reader: p.SearchResult(results=ctx.recall.search(reader, req)),
        _same,
    )


def inject(ctx: DaemonContext, req: p.Inject) -> Deferred[p.InjectResult, p.InjectResult]:
    return deferred_read(
        ctx,
        ctx.registry.get(req.project),
        "active" if req.query.strip() else None,
        lambda reader: ctx.recall.inject(reader, req),
        _same,
    )


def _same(result: _T) -> _T:
    return result


def list_entries(ctx: DaemonContext, req: p.ListEntries) -> p.ListResult:
    project = ctx.registry.get(req.project)
    entries, total = project.list_entries(
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
    try:
        return ctx.registry.get(req.project).import_lines(req.lines, req.first_line)
    finally:
        memtrim.give_back()  # what decoding and applying up to 4 MiB of lines freed


def export(ctx: DaemonContext, req: p.Export) -> p.ExportResult:
    project = ctx.registry.get(req.project)
    entries = project.export(req.include_archived, req.include_all)
    return p.ExportResult(entries=entries, edges=project.edges_among({e.id for e in entries}))


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


def auto(ctx: DaemonContext, req: p.Auto) -> p.AutoResult:
    project = ctx.registry.get(req.project)
    if req.enabled is not None:
        project.set_auto_memory(req.enabled)
    default = ctx.capture.default_preset if ctx.capture else "balanced"
    preset = project.preset() or default
    return p.AutoResult(
        enabled=project.auto_memory_enabled(),
        preset=msgspec.convert(preset, p.PresetName),  # stored by `preset`, which validated it
    )


def preset(ctx: DaemonContext, req: p.Preset) -> p.AutoResult:
    project = ctx.registry.get(req.project)
    if req.name is not None:
        project.set_preset(req.name)
    return auto(ctx, p.Auto(project=req.project))


def episodes(ctx: DaemonContext, req: p.Episodes) -> p.EpisodesResult:
    project = ctx.registry.get(req.project)
    found = project.episodes(req.limit, req.query)
    return p.EpisodesResult(
        episodes=[msgspec.convert(msgspec.to_builtins(e), p.EpisodeInfo) for e in found]
    )


def compact(ctx: DaemonContext, req: p.Compact) -> p.CompactResult | Parked:
    if ctx.compactor is None:
        raise Unavailable("compaction is not running in this daemon")
    run = ctx.compactor.for_request(req, ctx.registry.get(req.project), req.dry_run)
    if run.result is not None:
        return run.result
    running = p.CompactResult(
        decayed=0, expired=0, evicted=0, purged=0, active=0, archived=0, done=False
    )
    return Parked(time.monotonic() + COMPACT_WAIT_S, running, ready=run.done)


def supersede(ctx: DaemonContext, req: p.Supersede) -> p.SupersedeResult:
    return ctx.registry.get(req.project).supersede(req.target, req.content, req.agent)


def archive(ctx: DaemonContext, req: p.Archive) -> p.ArchiveResult:
    return ctx.registry.get(req.project).archive(req.targets)


def unarchive(ctx: DaemonContext, req: p.Unarchive) -> p.ArchiveResult:
    return ctx.registry.get(req.project).unarchive(req.target)


def conflicts(ctx: DaemonContext, req: p.Conflicts) -> p.ConflictsResult:
    return p.ConflictsResult(conflicts=ctx.registry.get(req.project).conflicts())


def resolve(ctx: DaemonContext, req: p.Resolve) -> p.ResolveResult:
    return ctx.registry.get(req.project).resolve(req.conflict, req.keep)


def focus(ctx: DaemonContext, req: p.Focus) -> p.FocusResult:
    return ctx.registry.get(req.project).focus(req.session, req.targets)


def release(ctx: DaemonContext, req: p.Release) -> p.ReleaseResult:
    return ctx.registry.get(req.project).release(req.session)


def connect(ctx: DaemonContext, req: p.Connect) -> p.Edge:
    return ctx.registry.get(req.project).connect(req.source, req.target, req.relation)


def show(ctx: DaemonContext, req: p.Show) -> p.ShowResult:
    shown = ctx.registry.get(req.project).show(req.target)
    src = shown.entry.source
    if src.kind == "transcript":
        shown.line = review.transcript_line(src.transcript_path, src.offset)
    return shown


def graph(ctx: DaemonContext, req: p.Graph) -> p.GraphResult:
    return ctx.registry.get(req.project).graph(req.target, req.depth)


def note(ctx: DaemonContext, req: p.NoteAdd) -> p.Note:
    return ctx.registry.get(req.project).add_note(req.content)


def notes(ctx: DaemonContext, req: p.Notes) -> p.NotesResult:
    return ctx.registry.get(req.project).notes(req.done)


def share(ctx: DaemonContext, req: p.Share) -> p.ShareResult | Parked:
    """Run again until the file holds every change (idempotent: the setting is already set)."""
    if ctx.share is None:
        raise Unavailable("sharing is not running in this daemon")
    project = ctx.registry.get(req.project)
    if req.state is not None:
        ctx.share.set(project, req.state == "on")
        ctx.share.step()  # the first write starts now, not at the end of the loop turn
    service = ctx.share
    if not service.pending(project):
        return service.status(project)
    return Parked(
        time.monotonic() + SHARE_WAIT_S,
        service.status(project),
        ready=lambda: not service.pending(project),
    )


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.Show: show,
    p.Remember: remember,
    p.Search: search,
    p.Inject: inject,
    p.ListEntries: list_entries,
    p.Forget: forget,
    p.Pin: pin,
    p.Unpin: unpin,
    p.Import: import_entries,
    p.Export: export,
    p.Budget: budget,
    p.AliasAdd: alias_add,
    p.AliasList: alias_list,
    p.AliasRemove: alias_remove,
    p.Auto: auto,
    p.Preset: preset,
    p.Episodes: episodes,
    p.Compact: compact,
    p.Supersede: supersede,
    p.Archive: archive,
    p.Unarchive: unarchive,
    p.Conflicts: conflicts,
    p.Resolve: resolve,
    p.Focus: focus,
    p.Release: release,
    p.Connect: connect,
    p.Graph: graph,
    p.NoteAdd: note,
    p.Notes: notes,
    p.Share: share,
}
