"""What closing a session decides (design §6-§7): the promotion decisions, the candidate entries
they make, and the session's episode, as one ``SessionFinalized`` event. Pure: the service reads
what the store knows (spread across sessions, pinned fingerprints, what may not be promoted
again) and hands it in; it journals and applies the event the plan returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import msgspec

from memoryd.core.capture.episodes import build_episode
from memoryd.core.capture.findings import EPISODE_ONLY, SessionFinding, finding_id
from memoryd.core.capture.harness import is_warmup
from memoryd.core.capture.promotion import Preset, candidate_entry, plan_promotion
from memoryd.core.capture.transcript import Message
from memoryd.core.events import SessionFinalized


class SessionClose(msgspec.Struct, frozen=True, kw_only=True):
    """A session being closed, and what the project already knows about its findings."""

    session_id: str
    agent: str
    reason: str
    transcript_path: str
    messages: Sequence[Message]
    findings: Sequence[SessionFinding]
    preset: Preset
    sessions_by_fingerprint: Mapping[str, AbstractSet[str]]
    agents_by_fingerprint: Mapping[str, AbstractSet[str]]
    pinned_fingerprints: AbstractSet[str]
    # Findings already in memory, promoted before, or forgotten by the user: never promoted.
    not_promotable: AbstractSet[str]


def plan_finalization(
    close: SessionClose,
    *,
    now: float,
    new_id: Callable[[], str],
    redact: Callable[[str], str],
) -> SessionFinalized:
    """The event that closes ``close``'s session. ``new_id`` names each promoted entry."""
    if _warmup(close):
        # A sub-agent's warm-up greets and stops: no episode, nothing learnt (issue 19).
        return SessionFinalized(
            session_id=close.session_id,
            reason=close.reason,
            finalized_at=now,
            episode=None,
            decisions=(),
            promoted=(),
        )
    # Edits and progress tell the episode what happened; they are never entries (issue 19).
    learnt = [f for f in close.findings if f.category not in EPISODE_ONLY]
    decisions = plan_promotion(
        learnt,
        preset=close.preset,
        sessions_by_fingerprint=close.sessions_by_fingerprint,
        agents_by_fingerprint=close.agents_by_fingerprint,
        pinned_fingerprints=close.pinned_fingerprints,
    )
    by_id = {f.id: f for f in close.findings}
    promoted, promoted_from = [], []
    for decision in decisions:
        if not decision.promoted or decision.finding_id in close.not_promotable:
            continue
        finding = by_id[decision.finding_id]
        entry = candidate_entry(
            finding, entry_id=new_id(), now=now, transcript_path=close.transcript_path
        )
        promoted.append(entry)
        promoted_from.append((finding.id, entry.id))
    # One episode per session: Codex sends Stop after every turn; a later finalization
    # refreshes the same episode instead of adding another.
    episode = build_episode(
        episode_id=finding_id(close.session_id, "episode"),
        session_id=close.session_id,
        agent=close.agent,
        messages=close.messages,
        findings=close.findings,
        redact=redact,
    )
    return SessionFinalized(
        session_id=close.session_id,
        reason=close.reason,
        finalized_at=now,
        episode=episode,
        decisions=tuple(decisions),
        promoted=tuple(promoted),
        promoted_from=tuple(promoted_from),
    )


def _warmup(close: SessionClose) -> bool:
    """A sub-agent ("<session>/<agent id>") whose every prompt is the harness's warm-up."""
    if "/" not in close.session_id:
        return False
    prompts = [m.text for m in close.messages if m.role == "user" and m.text.strip()]
    return all(is_warmup(p) for p in prompts)
