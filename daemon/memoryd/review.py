"""Review: what memory learned, shown to its user (``memctl review``, the MCP server's
``memory_review*`` tools, the memory browser), and the user's word on it.

Lists the candidates (entries capture promoted, in quarantine) and the findings not promoted,
newest first, each scored the way promotion scores it now (``core.review``) and traced to the
line of the transcript it came from. Accept, reject and edit are each one event through
``ProjectMemory``: journaled, then applied.
"""

from __future__ import annotations

import bisect
import json
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from memctl import protocol as p
from memoryd.capture.parsers import new_state, parse_line
from memoryd.core.capture.findings import SessionFinding, finding_id
from memoryd.core.capture.promotion import Preset
from memoryd.core.errors import EntryNotFound
from memoryd.core.redaction import redact
from memoryd.core.review import Item, Knowledge, plan_accept, plan_edit, plan_reject, resolve
from memoryd.project import REVIEW_COUNT_CAP, ProjectMemory


def list_items(project: ProjectMemory, default_preset: Preset, limit: int) -> p.ReviewResult:
    candidates = _candidates(project)
    findings = project.awaiting_review(REVIEW_COUNT_CAP)
    preset = project.preset() or default_preset
    behind = _findings_behind(project, candidates)
    scored = [*findings, *behind.values()]
    sessions, agents = project.finding_spread([f.fingerprint for f in scored])
    knowledge = Knowledge(
        preset=preset, sessions=sessions, agents=agents, pinned=project.pinned_fingerprints()
    )
    lines = _Lines()
    items = [_candidate_item(e, behind.get(e.id), knowledge, lines) for e in candidates]
    started = _session_starts(project, {f.session_id for f in findings if f.session_id})
    for f in findings:
        path, at = started.get(f.session_id or "", (None, None))
        items.append(_finding_item(f, knowledge, path, lines.line(path, f.offset), at))
    items.sort(key=lambda i: i.id)
    items.sort(key=lambda i: i.created_at or 0.0, reverse=True)  # stable: ties stay by id
    return p.ReviewResult(items=items[:limit], total=len(items), preset=preset)


def accept(project: ProjectMemory, ids: Sequence[str]) -> p.ReviewDecisionResult:
    items = _resolve_all(project, ids)
    event = plan_accept(
        items, now=project.now(), new_id=project.new_id, transcript_of=_transcript_of(project)
    )
    project.commit(event)
    entries = [*event.confirmed, *(e.id for e in event.added)]
    return p.ReviewDecisionResult(action="accepted", ids=[i.id for i in items], entries=entries)


def reject(project: ProjectMemory, ids: Sequence[str], reason: str) -> p.ReviewDecisionResult:
    items = _resolve_all(project, ids)
    event = plan_reject(items, reason, now=project.now())
    project.commit(event)
    return p.ReviewDecisionResult(
        action="rejected", ids=[i.id for i in items], entries=list(event.archived)
    )


def edit(project: ProjectMemory, target: str, content: str) -> p.ReviewDecisionResult:
    [item] = _resolve_all(project, [target])
    event = plan_edit(
        item,
        content,
        now=project.now(),
        new_id=project.new_id,
        transcript_of=_transcript_of(project),
        taken=project.holds,
    )
    project.commit(event)
    entries = [*event.confirmed, *(e.id for e in event.added)]
    return p.ReviewDecisionResult(action="edited", ids=[item.id], entries=entries)


# --------------------------------------------------------------------------- helpers


def _candidates(project: ProjectMemory) -> list[p.Entry]:
    found, _total = project.list_entries(
        category=None, status="candidate", archived=False, limit=REVIEW_COUNT_CAP, offset=0
    )
    return found


def _resolve_all(project: ProjectMemory, ids: Iterable[str]) -> list[Item]:
    pool: list[Item] = [*_candidates(project), *project.awaiting_review(REVIEW_COUNT_CAP)]
    return [resolve(pool, wanted) for wanted in ids]


def _findings_behind(
    project: ProjectMemory, candidates: Sequence[p.Entry]
) -> dict[str, SessionFinding]:
    """Candidate id → the finding it was promoted from (its id derives from session and text)."""
    wanted = {
        finding_id(e.source.session_id, e.fingerprint): e.id
        for e in candidates
        if e.source.session_id is not None
    }
    found = project.findings_by_id(list(wanted))
    return {wanted[fid]: f for fid, f in found.items()}


def _session_starts(
    project: ProjectMemory, session_ids: Iterable[str]
) -> dict[str, tuple[str | None, float | None]]:
    started: dict[str, tuple[str | None, float | None]] = {}
    for sid in session_ids:
        record = project.session(sid)
        if record is not None:
            started[sid] = (record.transcript_path or None, record.created_at)
    return started


def _transcript_of(project: ProjectMemory) -> Callable[[SessionFinding], str | None]:
    def path(finding: SessionFinding) -> str | None:
        record = project.session(finding.session_id) if finding.session_id else None
        return (record.transcript_path or None) if record is not None else None

    return path


def _candidate_item(
    entry: p.Entry, finding: SessionFinding | None, knowledge: Knowledge, lines: _Lines
) -> p.ReviewItem:
    src = entry.source
    if finding is not None:
        decision = knowledge.score(finding)
        signals: list[str] = list(decision.signals)
        points, threshold = decision.points, decision.threshold
        reason = decision.reason
    else:
        signals, points, threshold = [], 0, 0
        reason = "promoted; the finding it came from is no longer recorded"
    return p.ReviewItem(
        id=entry.id,
        kind="candidate",
        content=entry.content,
        category=entry.category,
        importance=entry.importance,
        signals=signals,
        points=points,
        threshold=threshold,
        reason=reason,
        rule_id=src.rule_id,
        agent=src.agent,
        session_id=src.session_id,
        transcript_path=src.transcript_path,
        line=lines.line(src.transcript_path, src.offset),
        created_at=entry.created_at,
    )


def _finding_item(
    f: SessionFinding,
    knowledge: Knowledge,
    path: str | None,
    line: int | None,
    started: float | None,
) -> p.ReviewItem:
    decision = knowledge.score(f)
    return p.ReviewItem(
        id=f.id,
        kind="finding",
        content=f.content,
        category=f.category,
        importance=f.importance,
        signals=list(decision.signals),
        points=decision.points,
        threshold=decision.threshold,
        reason=decision.reason,
        rule_id=f.rule_id or None,
        agent=f.agent,
        session_id=f.session_id,
        transcript_path=path,
        line=line,
        created_at=started,
    )


class _Lines:
    """Line numbers of byte offsets in transcripts, each file read once per listing."""

    CHUNK = 1 << 20

    def __init__(self) -> None:
        self._starts: dict[str, list[int] | None] = {}

    def line(self, path: str | None, offset: int | None) -> int | None:
        if not path or offset is None or not path.endswith(".jsonl"):
            return None  # a .json document's offsets count messages, not bytes
        if path not in self._starts:
            self._starts[path] = self._newlines(path)
        newlines = self._starts[path]
        if newlines is None:
            return None
        return bisect.bisect_left(newlines, offset) + 1

    def _newlines(self, path: str) -> list[int] | None:
        """The byte offset of every newline in ``path`` (None: unreadable now)."""
        found: list[int] = []
        try:
            with open(path, "rb") as fh:
                base = 0
                while chunk := fh.read(self.CHUNK):
                    at = chunk.find(b"\n")
                    while at != -1:
                        found.append(base + at)
                        at = chunk.find(b"\n", at + 1)
                    base += len(chunk)
        except OSError:
            return None
        return found


# --------------------------------------------------------------------------- a session's lines

LINE_READ_MAX = 1 << 20  # bytes of one transcript line read at most


def transcript_line(path: str | None, offset: int | None) -> int | None:
    """The 1-based line of ``path`` holding byte ``offset`` (None: not a JSONL file, or
    unreadable now)."""
    return _Lines().line(path, offset)


def session(project: ProjectMemory, session_id: str) -> p.SessionResult:
    """A captured session's findings beside the transcript lines they came from. The daemon
    reads the lines (the page never reads a file): each from its byte offset, at most
    ``LINE_READ_MAX`` bytes, through its agent's parser, redacted, cut to
    ``SESSION_LINE_CHARS``."""
    record = project.session(session_id)
    if record is None:
        raise EntryNotFound(f"no captured session {session_id!r} in this project")
    found = project.session_findings(session_id)
    shown = found[: p.SESSION_FINDINGS]
    promoted = project.promoted_findings([f.id for f in shown])
    path = record.transcript_path
    why = _unreadable(path)
    lines = _Lines()
    items: list[p.SessionFindingLine] = []
    handle = None if why else open(path, "rb")  # noqa: SIM115  # closed below
    try:
        for f in shown:
            item = p.SessionFindingLine(
                id=f.id,
                content=f.content,
                category=f.category,
                rule_id=f.rule_id,
                promoted=f.id in promoted,
            )
            if handle is not None:
                role, text, cut = _line_text(handle, record.agent, path, f.offset)
                item.line = lines.line(path, f.offset)
                item.role, item.text, item.cut = role, text, cut
            items.append(item)
    finally:
        if handle is not None:
            handle.close()
    return p.SessionResult(
        session_id=record.id,
        agent=record.agent,
        transcript_path=path,
        created_at=record.created_at,
        finalized_at=record.finalized_at,
        findings=items,
        total=len(found),
        unreadable=why,
    )


def _unreadable(path: str) -> str | None:
    if not path.endswith(".jsonl"):
        return "a .json transcript: its findings name messages, not lines"
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"the transcript cannot be read now ({exc.strerror or exc})"
    if not stat.S_ISREG(mode):
        return "the transcript is not a regular file"
    return None


def _line_text(handle: BinaryIO, agent: str, path: str, offset: int) -> tuple[str, str, bool]:
    """(role, text, cut) of the line starting at byte ``offset``."""
    handle.seek(offset)
    raw = handle.read(LINE_READ_MAX).split(b"\n", 1)[0]
    role, text = "", ""
    if agent in ("claude", "codex", "gemini"):
        messages = parse_line(agent, raw, offset, new_state(agent, path))  # type: ignore[arg-type]
        parts: list[str] = []
        for m in messages:
            role = role or m.role
            parts.append(m.text)
            parts += (f"{c.name} {json.dumps(c.input, ensure_ascii=False)}" for c in m.tool_calls)
            parts += (r.text for r in m.tool_results)
        text = "\n".join(x for x in parts if x)
    if not text:
        text = raw.decode("utf-8", "replace")
    text = redact(text).text
    cut = len(text) > p.SESSION_LINE_CHARS
    return role, text[: p.SESSION_LINE_CHARS], cut
