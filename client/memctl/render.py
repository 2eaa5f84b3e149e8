"""Short, readable human output for each command (``--json`` bypasses all of this)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from memctl import protocol as p


def _short(entry_id: str) -> str:
    return entry_id[:8]


def ago(ts: float | None, now: float | None = None) -> str:
    """How long ago, in the largest unit that fits: ``45s``, ``12m``, ``3h``, ``5d``, ``8mo``."""
    if ts is None:
        return "-"
    seconds = max(0.0, (time.time() if now is None else now) - ts)
    for unit, size in (("y", 365 * 86400), ("mo", 30 * 86400), ("d", 86400), ("h", 3600)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds // 60)}m" if seconds >= 60 else f"{int(seconds)}s"


def table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as aligned columns (the last column, free text, is not padded)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


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
        if project.awaiting_review:
            lines.append(f"review: {project.awaiting_review} waiting (memctl review)")
        if project.open_conflicts:
            lines.append(f"conflicts: {project.open_conflicts} open (memctl conflicts)")
        if project.last_capture_at is not None:
            lines.append(f"capture: last session recorded {ago(project.last_capture_at)} ago")
        if project.size_bytes is not None:
            bank = ", memory-bank/ present" if project.bank else ""
            lines.append(f"on disk: {size(project.size_bytes)}{bank}")
        if project.last_compacted_at is not None:
            lines.append(f"compaction: last ran {ago(project.last_compacted_at)} ago")
        if (rebuild := project.index.rebuilding) is not None:
            why = f" ({project.index.rebuilt_at_open})" if project.index.rebuilt_at_open else ""
            lines.append(
                f"index: rebuilding{why}, {rebuild.done:,} of {rebuild.total:,} documents "
                "(memctl status --wait)"
            )
    backlog = r.capture.backlog
    if backlog is not None and backlog.files.done < backlog.files.total:
        lines.append(
            f"capture: reading transcripts, {backlog.files.done:,} of {backlog.files.total:,} "
            f"files, {_mb(backlog.bytes.done)} of {_mb(backlog.bytes.total)} MB "
            "(memctl status --wait)"
        )
    slo = r.slo
    if slo.p95_ms is not None:
        state = "degraded" if slo.degraded else "normal"
        lines.append(f"retrieval: p50 {slo.p50_ms} ms, p95 {slo.p95_ms} ms ({state})")
    for err in r.errors:
        lines.append(f"recent {err.severity}: {err.description}")
    return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1_000_000:,.1f}"


def compacted(r: p.CompactResult) -> str:
    head = "would compact" if r.dry_run else "compacted"
    if not r.done:
        return "compaction still running (it goes on in the background)"
    return (
        f"{head}: {r.expired} expired, {r.evicted} evicted, {r.purged} purged, "
        f"{r.decayed} decayed; {r.active} active, {r.archived} archived"
    )


def superseded(r: p.SupersedeResult) -> str:
    return f"{_short(r.id)} supersedes {_short(r.superseded)} (archived)"


def archived(r: p.ArchiveResult) -> str:
    verb = "archived" if r.archived else "unarchived"
    if not r.ids:
        return f"nothing {verb}"
    return f"{verb} {len(r.ids)}: " + ", ".join(_short(i) for i in r.ids)


def conflicts(r: p.ConflictsResult) -> str:
    if not r.conflicts:
        return "no open conflicts"
    return "\n".join(
        f"{c.id}  {c.conflict_type}\n  {_short(c.a.id)}  {c.a.content}\n  {_short(c.b.id)}  "
        f"{c.b.content}"
        for c in r.conflicts
    )


def resolved(r: p.ResolveResult) -> str:
    if r.kept is None or r.superseded is None:
        return f"{r.id}: both kept"
    return f"{r.id}: kept {_short(r.kept)}, {_short(r.superseded)} superseded (archived)"


def focused(r: p.FocusResult) -> str:
    head = f"session {r.session}: {len(r.ids)} in working memory"
    added = f" ({len(r.added)} added)" if r.added else " (nothing new)"
    return head + added + ("\n" + ", ".join(_short(i) for i in r.ids) if r.ids else "")


def released(r: p.ReleaseResult) -> str:
    if not r.sessions:
        return "no working memory to release"
    return f"released {r.released} entries of {len(r.sessions)} session(s): " + ", ".join(
        r.sessions
    )


def connected(r: p.Edge) -> str:
    return f"{_short(r.source)} {r.relation} {_short(r.target)}"


def graph(r: p.GraphResult) -> str:
    rows = [["ID", "DEPTH", "KIND", "CONTENT"]]
    rows += [
        [
            _short(n.id),
            str(n.depth),
            f"{n.category}/{'archived' if n.archived else n.status}",
            n.content,
        ]
        for n in r.nodes
    ]
    edges = [f"  {_short(e.source)} {e.relation} {_short(e.target)}" for e in r.edges]
    more = "\n… more nodes than one answer shows" if r.truncated else ""
    return table(rows) + ("\nedges:\n" + "\n".join(edges) if edges else "\nno edges") + more


def noted(r: p.Note) -> str:
    return f"noted {_short(r.id)}"


def notes(r: p.NotesResult) -> str:
    done = f"done: {', '.join(_short(i) for i in r.done)}\n" if r.done else ""
    if not r.notes:
        return done + "no pending notes"
    rows = [["ID", "ADDED", "NOTE"]]
    rows += [[_short(n.id), ago(n.created_at), n.content] for n in r.notes]
    return done + table(rows)


def remembered(r: p.RememberResult) -> str:
    verb = "already remembered" if r.duplicate else "remembered"
    return f"{verb} {_short(r.id)} ({r.status})"


def search(r: p.SearchResult) -> str:
    if not r.results:
        return "no results"
    rows = [["ID", "SCORE", "KIND", "CONTENT"]]
    rows += [
        [_short(x.id), f"{x.score:.3f}", f"{x.category}/{x.status}", x.content] for x in r.results
    ]
    return table(rows)


def review(r: p.ReviewResult) -> str:
    """One row an item: its age, category, score against the preset's threshold and the
    signals that made it, where it was captured (agent, session, transcript line), its text."""
    if not r.items:
        return "nothing waits for review"
    rows = [["ID", "AGE", "KIND", "SCORE", "WHY", "FROM", "CONTENT"]]
    rows += [
        [
            _short(x.id),
            ago(x.created_at),
            f"{x.category}/{x.kind}",
            f"{x.points}/{x.threshold}",
            "+".join(x.signals) or ("filtered" if x.reason.startswith("filtered") else "-"),
            _origin(x),
            _line(x.content, REVIEW_TEXT_CHARS),
        ]
        for x in r.items
    ]
    more = r.total - len(r.items)
    tail = f"\n… {more} more (use --limit)" if more > 0 else ""
    return table(rows) + tail + f"\n(score: points/threshold of the {r.preset} preset)"


REVIEW_TEXT_CHARS = 100  # of a row's text; --json has it whole


def _line(text: str, limit: int) -> str:
    """``text`` on one line (a captured text may hold several), cut at ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _origin(x: p.ReviewItem) -> str:
    where = x.agent or "?"
    if x.session_id:
        where += f" {x.session_id[:8]}"
    return where + (f":{x.line}" if x.line is not None else "")


def review_decided(r: p.ReviewDecisionResult) -> str:
    if r.action == "rejected":
        return f"rejected {len(r.ids)}: " + ", ".join(_short(i) for i in r.ids)
    made = ", ".join(_short(i) for i in r.entries)
    return f"{r.action} {len(r.ids)}: " + ", ".join(_short(i) for i in r.ids) + f" → {made}"


def listing(r: p.ListResult) -> str:
    if not r.entries:
        return "no entries"
    rows = [["ID", "KIND", "UPDATED", "CONTENT"]]
    rows += [
        [_short(e.id), f"{e.category}/{e.status}", ago(e.updated_at), e.content] for e in r.entries
    ]
    more = r.total - len(r.entries)
    return table(rows) + (f"\n… {more} more (use --limit)" if more > 0 else "")


def forgotten(r: p.ForgetResult) -> str:
    return f"forgot {len(r.forgotten)}: " + ", ".join(_short(i) for i in r.forgotten)


def pinned(r: p.PinResult) -> str:
    return f"{_short(r.id)} is {r.status}"


def imported(r: p.ImportResult) -> str:
    lines = [f"imported {r.imported}, duplicates {r.duplicates}, rejected {len(r.rejected)}"]
    lines += [f"  line {x.line}: {x.reason}" for x in r.rejected[:20]]
    return "\n".join(lines)


def shared(r: p.ShareResult) -> str:
    if not r.enabled:
        why = "turned off" if r.setting == "off" else f"no {r.file}"
        return f"sharing: off ({why}); memctl share on starts it"
    lines = [
        f"sharing: on ({r.setting}) -> {r.file}",
        f"  {r.entries} entries, {r.tombstones} tombstones, {r.edges} edges"
        + (" (a change is not written yet)" if r.pending else ""),
        f"  written {ago(r.last_written_at)}, merged {ago(r.last_merged_at)}",
    ]
    if r.error:
        lines.append(f"  last write failed: {r.error}")
    return "\n".join(lines)


def checked(r: p.CheckResult) -> str:
    return f"database: {r.database}\naudit: {r.audit}\nindex: {r.index}\nbank journal: {r.bank}"


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


def session(r: p.SessionResult) -> str:
    """The session, then each finding: its line and rule, its text, and the line it came from."""
    state = f"closed {ago(r.finalized_at)} ago" if r.finalized_at else "open"
    lines = [f"session {r.session_id} ({r.agent}, {state})", f"transcript {r.transcript_path}"]
    if r.unreadable:
        lines.append(f"lines not shown: {r.unreadable}")
    for f in r.findings:
        where = f"line {f.line}" if f.line else "line ?"
        promoted = ", promoted" if f.promoted else ""
        lines.append(f"\n{where} [{f.category}, {f.rule_id or '-'}{promoted}] {f.content}")
        if f.text is not None:
            lines.append(f"  {f.role or 'line'}: {_line(f.text, REVIEW_TEXT_CHARS)}")
    if not r.findings:
        lines.append("no findings")
    if r.total > len(r.findings):
        lines.append(
            f"… {r.total - len(r.findings)} more findings (the first {len(r.findings)} are shown)"
        )
    return "\n".join(lines)


def episodes(r: p.EpisodesResult) -> str:
    if not r.episodes:
        return "no episodes"
    rows = [["ID", "AGENT", "ENDED", "TURNS", "FILES", "TITLE"]]
    rows += [
        [e.id[:8], e.agent, ago(e.ended_at), str(e.turns), str(len(e.files)), e.title]
        for e in r.episodes
    ]
    return table(rows)


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
    info = r.bank_info
    parts = []
    if info.mode is not None:
        writes = ", ".join(info.writes) or "nothing (read-only)"
        parts.append(f"<!-- mode {info.mode}: reads {', '.join(info.reads)}; writes {writes} -->")
    parts += [f"<!-- {name} -->\n{text.rstrip()}" for name, text in r.content.items()]
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


def size(n: int | None) -> str:
    """Bytes in the largest binary unit that keeps a number under 1024: ``812K``, ``3.4M``."""
    if n is None:
        return "-"
    value, unit = float(n), "B"
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            break
        value /= 1024
    return f"{value:.0f}{unit}" if unit == "B" or value >= 10 else f"{value:.1f}{unit}"


def projects(r: p.ProjectsResult) -> str:
    if not r.projects:
        return "no projects"
    rows = [["NAME", "ENTRIES", "REVIEW", "SESSIONS", "CAPTURED", "BANK", "SIZE", "PATH"]]
    for x in r.projects:
        e = x.entries
        active = "-" if e is None else str(e.candidate + e.confirmed + e.pinned)
        review = "-" if x.awaiting_review is None else str(x.awaiting_review)
        sessions = "-" if x.sessions is None else str(x.sessions)
        captured = "-" if x.last_capture_at is None else ago(x.last_capture_at) + " ago"
        bank = "yes" if x.bank else "no"
        rows.append([x.name, active, review, sessions, captured, bank, size(x.size_bytes), x.path])
    return table(rows)


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


def shown(r: p.ShowResult) -> str:
    e, s = r.entry, r.entry.source
    state = f"archived ({e.archived_reason})" if e.archived else e.status
    where = " ".join(
        f"{k}={v}"
        for k, v in (
            ("agent", s.agent),
            ("session", s.session_id),
            ("transcript", s.transcript_path),
            ("offset", s.offset),
            ("rule", s.rule_id),
        )
        if v is not None
    )
    lines = [
        f"{e.id}  {e.category}/{state}  importance {e.importance:.2f}  "
        f"confidence {e.confidence:.2f}",
        e.content,
        f"source: {s.kind}" + (f" ({where})" if where else ""),
        f"created {ago(e.created_at)} ago, updated {ago(e.updated_at)} ago",
    ]
    if e.tags:
        lines.append("tags: " + ", ".join(e.tags))
    if e.file_paths:
        lines.append("files: " + ", ".join(e.file_paths))
    lines += [f"edge: {_short(x.source)} {x.relation} {_short(x.target)}" for x in r.edges]
    lines.append(f"history: {len(r.history)} audit events (memctl --json show lists them)")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def health(r: p.HealthResult) -> str:
    rows = [["OP", "WINDOW", "COUNT", "P50 MS", "P95 MS"]]
    rows += [[w.op, w.window, str(w.count), _ms(w.p50_ms), _ms(w.p95_ms)] for w in r.windows]
    mode = "degraded" if r.slo.degraded else "normal"
    lines = [
        table(rows),
        f"SLO: retrieval degrades above p95 {r.slo_ms:.0f} ms (now {mode}); "
        f"{len(r.degrade_events)} degrade events",
        f"capture: {r.capture.files} files, {r.capture.messages} messages, "
        f"{r.capture.live_sessions} live sessions in {r.uptime_s:.0f}s",
    ]
    if r.rss_bytes is not None:
        lines.append(f"memory: {r.rss_bytes / 2**20:.1f} MiB resident")
    if r.index_documents is not None:
        lines.append(f"index: {r.index_documents} documents")
    return "\n".join(lines)
