"""The agent hook (design §12): a session starts, a prompt arrives, a compaction is near, a turn
ends, a session ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from memctl import protocol as p
from memoryd.banks import payload as bank_payload
from memoryd.banks.service import BankService
from memoryd.capture.service import CaptureService
from memoryd.core.capture.extraction import remembered_text
from memoryd.core.errors import MemorydError
from memoryd.core.recall.formatting import Item
from memoryd.core.redaction import redact
from memoryd.project import ProjectMemory
from memoryd.server.context import DaemonContext, Deferred, Handler, Parked, deferred_read

# Each agent reads the payload in its own format (design §5 Formats).
_FORMAT_OF: dict[str, p.Format] = {"claude": "claude", "codex": "codex", "gemini": "gemini"}


def hook(
    ctx: DaemonContext, req: p.Hook
) -> p.HookResult | Parked | Deferred[p.InjectResult, p.HookResult]:
    project = ctx.registry.get(req.project)
    fmt = _FORMAT_OF[req.agent]
    if ctx.capture is not None and req.transcript_path:
        req = msgspec.structs.replace(req, transcript_path=_transcript(ctx, project, req))
    if req.event == "session_start" and ctx.capture is not None:
        # Before the payload: the sessions it ends no longer feed its session tier.
        ctx.capture.session_started(project, req.transcript_path, req.agent)
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
        case "turn_end":
            if ctx.capture is not None:
                ctx.capture.turn_ended(project, req.transcript_path, req.agent)
                return _read_first(ctx.capture, req.transcript_path, p.HookResult())
            return p.HookResult()
        case "session_end":
            # A session_end is the agent's SessionEnd (a Stop is a turn_end). Its working
            # memory goes first: a run again, after waiting for the transcript, releases none.
            if req.session_id:
                project.release(req.session_id, "session_end")
            if ctx.capture is None:
                return p.HookResult(finalized=False)
            capture, path = ctx.capture, req.transcript_path
            done = capture.finalize_session(project, path, req.agent)
            if done is None:  # closed by a run again once read, or by the reading
                return _read_first(
                    capture,
                    path,
                    p.HookResult(finalized=False),
                    lambda: capture.close_once_read(path),
                )
            return p.HookResult(finalized=done)
        case "pre_compact":
            return _payload(ctx, project, inject_req, _result, always_only=True)
        case "prompt":
            remembered = _remember_from_prompt(ctx, project, req.prompt, req.agent)
            # What the prompt asked to keep is in front of the agent already: not sent back.
            extra = _extra(ctx, lambda b: bank_payload.prompt(b, req.project, req.prompt))
            return _payload(
                ctx,
                project,
                inject_req,
                lambda payload: _result(
                    payload, remembered=remembered, bank_update="bank" in extra
                ),
                session_ids=sessions,
                leave_out=frozenset(remembered),
                extra=extra,
            )
        case _:
            extra = _extra(ctx, lambda b: bank_payload.session_start(b, req.project, req.agent))
            return _payload(ctx, project, inject_req, _result, session_ids=sessions, extra=extra)


def _read_first(
    capture: CaptureService,
    path: str | None,
    result: p.HookResult,
    expired: Callable[[], None] | None = None,
) -> p.HookResult | Parked:
    """``result`` once the transcript at ``path`` is read up to date: a large append is read a
    slice per loop turn, other clients served between them, while the hook waits, parked, at
    most ``[capture] hook_wait_s`` (the agent's hook gives up at 1.5 s). Then the hook runs
    again; at the deadline it is answered ``result``, ``expired`` is called and the reading
    goes on."""
    if not capture.reading(path):
        return result
    capture.hurry(path)
    deadline = time.monotonic() + capture.hook_wait_s
    return Parked(deadline, result, ready=lambda: not capture.reading(path), expired=expired)


def _payload(
    ctx: DaemonContext,
    project: ProjectMemory,
    req: p.Inject,
    answer: Callable[[p.InjectResult], p.HookResult],
    **options: Any,
) -> Deferred[p.InjectResult, p.HookResult]:
    """The payload, built on a reader thread from what was gathered here on the owner thread
    (the prompt's own remember, the sessions, the bank's and instruction files' items)."""
    searches = bool(req.query.strip()) and not options.get("always_only", False)
    return deferred_read(
        ctx,
        project,
        "active" if searches else None,
        lambda reader: ctx.recall.inject(reader, req, **options),
        answer,
    )


def _transcript(ctx: DaemonContext, project: ProjectMemory, req: p.Hook) -> str | None:
    """The hook's transcript as capture knows it. A turn's or a session's end reads it: one
    outside the agent's transcript folders, or of another project, is refused before anything
    is read or written. The other events only name it (the payload is served regardless)."""
    assert ctx.capture is not None and req.transcript_path
    if req.event in ("turn_end", "session_end"):
        return ctx.capture.admit(project, req.transcript_path, req.agent)
    try:
        return ctx.capture.admit(project, req.transcript_path, req.agent)
    except MemorydError:
        return None


def _result(payload: p.InjectResult, **fields: Any) -> p.HookResult:
    tokens = payload.tokens if payload.text else None
    return p.HookResult(text=payload.text, entries=payload.entries, tokens=tokens, **fields)


def _extra(
    ctx: DaemonContext, gather: Callable[[BankService], dict[str, list[Item]]]
) -> dict[str, list[Item]]:
    """The instruction files' and the memory bank's part of the payload (``banks.payload``).
    A failure there is reported in the background: the agent still gets its memory."""
    if ctx.banks is None:
        return {}
    try:
        return gather(ctx.banks)
    except (MemorydError, OSError) as exc:
        ctx.errors.record(f"hook: instruction files or memory bank left out: {exc}", "warning")
        return {}


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
