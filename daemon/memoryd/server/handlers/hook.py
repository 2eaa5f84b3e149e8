"""The agent hook (SPEC §12): a session starts, a prompt arrives, a compaction is near, a
session ends."""

from __future__ import annotations

from typing import Any

from memctl import protocol as p
from memoryd.core.capture.extraction import remembered_text
from memoryd.core.errors import MemorydError
from memoryd.core.redaction import redact
from memoryd.project import ProjectMemory
from memoryd.server.context import DaemonContext, Handler

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
        session=req.session_id,  # its working memory is in every payload of the session
    )
    match req.event:
        case "session_end":
            done = (
                ctx.capture.finalize_session(project, req.transcript_path, req.agent)
                if ctx.capture
                else False
            )
            if req.session_over and req.session_id:
                project.release(req.session_id, "session_end")
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


HANDLERS: dict[type[p.Request[Any]], Handler] = {
    p.Hook: hook,
}
