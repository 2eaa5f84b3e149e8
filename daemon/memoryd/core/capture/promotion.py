"""Promotion (design §7): which session findings become project memory, and the
24-hour quarantine of what was promoted. Pure: data and a clock in, decisions out.

Nothing captured from a transcript is ever pinned automatically. A promoted finding becomes a
``candidate`` entry: ``PromotionDecision.status`` and ``candidate_entry`` can express no other
status, and a quarantine review can only confirm or penalize. Pinning stays the user's act.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

import msgspec

from memctl.protocol import Entry, Source
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.entries import new_entry

Preset = Literal["conservative", "balanced", "aggressive"]
Signal = Literal[
    "user-intent",
    "explicit-pin",
    "multi-session",
    "error-resolution",
    "multi-agent",
    "high-importance",
    "user-accepted",
]

SIGNAL_POINTS: Mapping[Signal, int] = {
    "user-intent": 5,
    "explicit-pin": 5,
    "multi-session": 2,
    "error-resolution": 2,
    "multi-agent": 1,
    "high-importance": 1,
    # The agent said it and the user went on without correcting it: the aggressive preset's
    # reach (2 points); the balanced one wants more (a high importance as well).
    "user-accepted": 2,
}
HIGH_IMPORTANCE = 0.7


class PromotionThreshold(msgspec.Struct, frozen=True, kw_only=True):
    min_points: int
    min_importance: float
    min_content_length: int


PRESETS: Mapping[Preset, PromotionThreshold] = {
    "conservative": PromotionThreshold(min_points=4, min_importance=0.4, min_content_length=50),
    "balanced": PromotionThreshold(min_points=3, min_importance=0.25, min_content_length=30),
    "aggressive": PromotionThreshold(min_points=2, min_importance=0.15, min_content_length=20),
}


class PromotionDecision(msgspec.Struct, frozen=True, kw_only=True):
    """Why a finding was or was not promoted; written to the audit log as it is."""

    finding_id: str
    fingerprint: str
    signals: tuple[Signal, ...]
    points: int
    threshold: int
    preset: Preset
    promoted: bool
    reason: str
    # The only status a promotion can give: the type has no room for a pin.
    status: Literal["candidate"] = "candidate"


def signals_of(
    finding: SessionFinding,
    *,
    sessions: AbstractSet[str],
    agents: AbstractSet[str],
    pinned: bool,
) -> tuple[Signal, ...]:
    """The signals a finding carries. Its own session and agent count towards the multi-session
    and multi-agent signals whether or not the caller's sets already include them."""
    own_session = {finding.session_id} if finding.session_id is not None else set()
    # A sub-agent ("<session>/<agent id>") works inside its parent session: not a second one.
    independent = {_parent(s) for s in sessions | own_session}
    found: list[Signal] = []
    if finding.user_intent:
        found.append("user-intent")
    if pinned:
        found.append("explicit-pin")
    if len(independent) >= 2:
        found.append("multi-session")
    if finding.resolved_error:
        found.append("error-resolution")
    if len(agents | {finding.agent}) >= 2:
        found.append("multi-agent")
    if finding.importance >= HIGH_IMPORTANCE:
        found.append("high-importance")
    if finding.accepted:
        found.append("user-accepted")
    return tuple(found)


def _parent(session_id: str) -> str:
    return session_id.split("/", 1)[0]


def _filtered(finding: SessionFinding, preset: Preset) -> str | None:
    """Why a hard filter rejects the finding, or None. Filters apply before any scoring."""
    limits = PRESETS[preset]
    if len(finding.content) < limits.min_content_length:
        return (
            f"filtered: content is {len(finding.content)} characters, "
            f"{preset} needs {limits.min_content_length}"
        )
    if finding.importance < limits.min_importance:
        return f"filtered: importance {finding.importance:g} is below {limits.min_importance:g}"
    return None


def decide(
    finding: SessionFinding,
    *,
    preset: Preset,
    sessions: AbstractSet[str],
    agents: AbstractSet[str],
    pinned: bool,
) -> PromotionDecision:
    threshold = PRESETS[preset].min_points

    def decision(signals: tuple[Signal, ...], points: int, ok: bool, why: str) -> PromotionDecision:
        return PromotionDecision(
            finding_id=finding.id,
            fingerprint=finding.fingerprint,
            signals=signals,
            points=points,
            threshold=threshold,
            preset=preset,
            promoted=ok,
            reason=why,
        )

    # The user asking to remember bypasses the hard filters (design §7).
    rejected = None if finding.user_intent else _filtered(finding, preset)
    if rejected is not None:
        return decision((), 0, False, rejected)
    signals = signals_of(finding, sessions=sessions, agents=agents, pinned=pinned)
    points = sum(SIGNAL_POINTS[s] for s in signals)
    named = ", ".join(signals) or "no signals"
    if points >= threshold:
        bypass = "; user intent bypasses the filters" if finding.user_intent else ""
        return decision(signals, points, True, f"{points} points >= {threshold} ({named}){bypass}")
    return decision(signals, points, False, f"{points} points < {threshold} ({named})")


def plan_promotion(
    findings: Sequence[SessionFinding],
    *,
    preset: Preset,
    sessions_by_fingerprint: Mapping[str, AbstractSet[str]],
    agents_by_fingerprint: Mapping[str, AbstractSet[str]],
    pinned_fingerprints: AbstractSet[str],
) -> list[PromotionDecision]:
    """One decision per finding, in order. A fingerprint is promoted at most once per plan
    (forked sessions carry copies of the same findings); later copies say so."""
    decisions: list[PromotionDecision] = []
    promoted: dict[str, str] = {}
    for finding in findings:
        made = decide(
            finding,
            preset=preset,
            sessions=sessions_by_fingerprint.get(finding.fingerprint, frozenset()),
            agents=agents_by_fingerprint.get(finding.fingerprint, frozenset()),
            pinned=finding.fingerprint in pinned_fingerprints,
        )
        first = promoted.get(finding.fingerprint)
        if made.promoted and first is not None:
            made = msgspec.structs.replace(
                made, promoted=False, reason=f"already promoted in this plan as finding {first}"
            )
        elif made.promoted:
            promoted[finding.fingerprint] = finding.id
        decisions.append(made)
    return decisions


def candidate_entry(
    finding: SessionFinding,
    *,
    entry_id: str,
    now: float,
    transcript_path: str | None = None,
) -> Entry:
    """The entry a promoted finding becomes: always a candidate, sourced to its transcript."""
    source = Source(
        kind="transcript",
        agent=finding.agent,
        session_id=finding.session_id,
        transcript_path=transcript_path,
        offset=finding.offset,
        rule_id=finding.rule_id,
    )
    return new_entry(
        entry_id=entry_id,
        content=finding.content,
        category=finding.category,
        status="candidate",
        now=now,
        source=source,
        tags=finding.tags,
        file_paths=finding.file_paths,
        importance=finding.importance,
        confidence=finding.confidence,
    )


# --------------------------------------------------------------------------- quarantine

QUARANTINE_SECONDS = 24 * 60 * 60.0
UNUSED_CANDIDATE_FACTOR = 0.8


class QuarantineOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """A change to one candidate, in absolute values so applying it twice changes nothing."""

    entry_id: str
    action: Literal["confirmed", "penalized"]
    status: Literal["candidate", "confirmed"]
    importance: float
    updated_at: float


def review_quarantine(entries: Sequence[Entry], now: float) -> list[QuarantineOutcome]:
    """Candidates at least 24 h old: confirmed if they were ever accessed, otherwise importance
    × 0.8 and still a candidate.

    A penalty sets ``updated_at`` to ``now`` and is given only when ``updated_at`` is itself 24 h
    old, so an unused candidate loses 20% once per 24 h however often the review runs. Pinned and
    confirmed entries are never touched, nor archived ones (they are out of active memory)."""
    cutoff = now - QUARANTINE_SECONDS
    outcomes: list[QuarantineOutcome] = []
    for entry in entries:
        if entry.status != "candidate" or entry.archived or entry.created_at > cutoff:
            continue
        if entry.access_count > 0:
            outcomes.append(_outcome(entry, "confirmed", "confirmed", entry.importance, now))
        elif entry.updated_at <= cutoff:
            lowered = round(entry.importance * UNUSED_CANDIDATE_FACTOR, 6)
            outcomes.append(_outcome(entry, "penalized", "candidate", lowered, now))
    return outcomes


def _outcome(
    entry: Entry,
    action: Literal["confirmed", "penalized"],
    status: Literal["candidate", "confirmed"],
    importance: float,
    now: float,
) -> QuarantineOutcome:
    return QuarantineOutcome(
        entry_id=entry.id, action=action, status=status, importance=importance, updated_at=now
    )
