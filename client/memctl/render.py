"""Short, readable human output for each command (``--json`` bypasses all of this)."""

from __future__ import annotations

from memctl import protocol as p


def _short(entry_id: str) -> str:
    return entry_id[:8]


def status(r: p.StatusResult) -> str:
    d = r.daemon
    head = f"memoryd {d.version} (protocol {d.protocol}), pid {d.pid}"
    lines = [f"{head}, up {d.uptime_s:.0f}s"]
    if r.project:
        project, e = r.project, r.project.entries
        lines.append(f"project {project.root} ({project.slug})")
        lines.append(
            f"entries: {e.confirmed} confirmed, {e.pinned} pinned, "
            f"{e.candidate} candidate, {e.archived} archived"
        )
    slo = r.slo
    if slo.p95_ms is not None:
        state = "degraded" if slo.degraded else "normal"
        lines.append(f"retrieval: p50 {slo.p50_ms} ms, p95 {slo.p95_ms} ms ({state})")
    for err in r.errors:
        lines.append(f"recent {err.severity}: {err.description}")
    return "\n".join(lines)


def remembered(r: p.RememberResult) -> str:
    verb = "already remembered" if r.duplicate else "remembered"
    return f"{verb} {_short(r.id)} ({r.status})"


def search(r: p.SearchResult) -> str:
    if not r.results:
        return "no results"
    return "\n".join(
        f"{_short(x.id)}  {x.score:7.3f}  [{x.category}/{x.status}]  {x.content}" for x in r.results
    )


def listing(r: p.ListResult) -> str:
    if not r.entries:
        return "no entries"
    rows = [f"{_short(e.id)}  [{e.category}/{e.status}]  {e.content}" for e in r.entries]
    if r.total > len(r.entries):
        rows.append(f"… {r.total - len(r.entries)} more (use --limit)")
    return "\n".join(rows)


def forgotten(r: p.ForgetResult) -> str:
    return f"forgot {len(r.forgotten)}: " + ", ".join(_short(i) for i in r.forgotten)


def pinned(r: p.PinResult) -> str:
    return f"{_short(r.id)} is {r.status}"


def imported(r: p.ImportResult) -> str:
    lines = [f"imported {r.imported}, duplicates {r.duplicates}, rejected {len(r.rejected)}"]
    lines += [f"  line {x.line}: {x.reason}" for x in r.rejected[:20]]
    return "\n".join(lines)


def checked(r: p.CheckResult) -> str:
    return f"database: {r.database}\naudit: {r.audit}\nindex: {r.index}"


def injected(r: p.InjectResult) -> str:
    return str(r.text)


def budget(r: p.BudgetResult) -> str:
    note = "" if r.overridden else " (default)"
    return f"budget ceiling {r.ceiling} tokens{note}"


def alias(r: p.Alias) -> str:
    return f"{r.term} → {', '.join(r.synonyms)}"


def aliases(r: p.AliasListResult) -> str:
    return "\n".join(f"{a.term} → {', '.join(a.synonyms)}  [{a.source}]" for a in r.aliases)


def auto(r: p.AutoResult) -> str:
    state = "on" if r.enabled else "off"
    return f"auto-memory {state}, promotion preset {r.preset}"


def episodes(r: p.EpisodesResult) -> str:
    if not r.episodes:
        return "no episodes"
    return "\n".join(
        f"{e.id[:8]}  [{e.agent}] {e.title} ({e.turns} turns, {len(e.files)} files)"
        for e in r.episodes
    )


def bank_init(r: p.BankInitResult) -> str:
    lines = [f"created {name}" for name in r.created]
    lines += [f"kept existing {name}" for name in r.existing]
    return "\n".join(lines)


def bank_validate(r: p.BankValidateResult) -> str:
    lines = ["memory bank is valid" if r.valid else "memory bank has problems"]
    lines += [f"missing (required): {n}" for n in r.missing_required]
    lines += [f"missing (recommended): {n}" for n in r.missing_recommended]
    lines += [f"{x.file}: {x.message}" for x in r.problems]
    return "\n".join(lines)


def bank_read(r: p.BankReadResult) -> str:
    return str(r.content)


def bank_written(r: p.BankWriteResult) -> str:
    note = f" ({r.ingested} new entries)" if r.ingested else ""
    when = {
        "scheduled": "; on disk at the next sync (memctl bank sync: now)",
        "immediate": "; being written to disk now",
    }.get(r.sync, "")
    return f"saved {r.path}{note}{when}"


def bank_optimised(r: p.BankOptimiseResult) -> str:
    if not r.changed:
        return f"memory bank is {r.tokens_before} tokens: nothing to optimise"
    verb = "moved" if r.applied else "would move"
    return (
        f"{verb} {r.removed_tokens} tokens from {', '.join(r.changed)} to "
        f"{', '.join(r.archived)}: {r.tokens_before} → {r.tokens_after} tokens"
        + ("" if r.applied else " (--apply to do it)")
    )


def bank_synced(r: p.BankSyncResult) -> str:
    if r.writing:
        return "the writer is still busy; run memctl bank sync again"
    if r.pending:
        return f"{r.pending} change(s) could not be written yet (see the errors above)"
    return "memory bank is on disk"


def bank_list(r: p.BankListResult) -> str:
    if not r.files:
        return "no memory bank files (memctl bank init creates them)"
    return "\n".join(f"{f.size:>8}  {f.name}" for f in r.files)


def bank_activate(r: p.BankActivateResult) -> str:
    parts = [f"<!-- {name} -->\n{text.rstrip()}" for name, text in r.content.items()]
    parts += [f"<!-- {rule.source} -->\n{rule.content.rstrip()}" for rule in r.custom_instructions]
    return "\n\n".join(parts)


def bank_process(r: p.BankProcessResult) -> str:
    lines = [
        f"{x.target_file} {x.operation_type}"
        + (f" [{x.metadata['section']}]" if "section" in x.metadata else "")
        + f": {x.content}"
        for x in r.items
    ]
    if r.fallback_reason:
        lines.append(f"(keyword rules used: the LLM failed: {r.fallback_reason})")
    if r.applied:
        lines.append("applied to " + ", ".join(r.applied))
    return "\n".join(lines) or "nothing to file"


def ingested(r: p.IngestResult) -> str:
    return (
        f"ingested {r.decisions} decisions, {r.completed} completed items "
        f"({r.duplicates} already known)"
    )


def projects(r: p.ProjectsResult) -> str:
    return "\n".join(f"{x.name}  {x.path}" for x in r.projects) or "no projects"


def project_removed(r: p.ProjectRemovedResult) -> str:
    return f"forgot {r.path}; its memory is kept in {r.archived_to}"


def files_list(r: p.FilesListResult) -> str:
    lines = [f"{f.tier}  {f.path}  ({f.tokens} tokens)" for f in r.files]
    lines += [f"disabled: {name}" for name in r.disabled]
    lines += [f"problem: {x.message}" for x in r.problems]
    return "\n".join(lines) or "no instruction files"


def files_show(r: p.FilesShowResult) -> str:
    return str(r.text)


def saved_memory(r: p.SaveMemoryResult) -> str:
    if r.written:
        return f"{r.diff}\nsaved to {r.path}"
    return f"{r.diff}\nnot written: pass --yes to save to {r.path}"


def version(r: p.HelloResult) -> str:
    return f"memoryd {r.version} (protocol {r.protocol}), pid {r.pid}"


def shutdown(r: p.ShutdownResult) -> str:
    return "memoryd is stopping" if r.stopping else "memoryd was already stopping"
