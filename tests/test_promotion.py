"""Unit tests of promotion (SPEC §7, seed 004 §9): signals, preset thresholds, hard filters, the
user-intent bypass, never pinning, and the 24-hour candidate quarantine."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from memctl.protocol import Entry, Source
from memoryd.core.capture.findings import SessionFinding, finding_id
from memoryd.core.capture.promotion import (
    PRESETS,
    SIGNAL_POINTS,
    Preset,
    PromotionDecision,
    candidate_entry,
    plan_promotion,
    review_quarantine,
)
from memoryd.core.entries import fingerprint, new_entry

CONTENT = "The watcher thread must never call the store directly; it sends messages."
DAY = 24 * 60 * 60.0


def finding(content: str = CONTENT, **kw: Any) -> SessionFinding:
    fp = fingerprint(content)
    defaults: dict[str, Any] = dict(
        id=finding_id(kw.get("session_id", "s1"), fp),
        fingerprint=fp,
        content=content,
        category="warning",
        importance=0.5,
        confidence=0.7,
        rule_id="warning.must_not",
        agent="claude-code",
        session_id="s1",
        offset=1200,
    )
    return SessionFinding(**(defaults | kw))


def plan(
    findings: list[SessionFinding],
    preset: Preset = "balanced",
    *,
    sessions: set[str] = frozenset(),  # type: ignore[assignment]
    agents: set[str] = frozenset(),  # type: ignore[assignment]
    pinned: bool = False,
) -> list[PromotionDecision]:
    fps = {f.fingerprint for f in findings}
    return plan_promotion(
        findings,
        preset=preset,
        sessions_by_fingerprint={fp: sessions for fp in fps},
        agents_by_fingerprint={fp: agents for fp in fps},
        pinned_fingerprints=fps if pinned else set(),
    )


def decide(found: SessionFinding, preset: Preset = "balanced", **kw: Any) -> PromotionDecision:
    (decision,) = plan([found], preset, **kw)
    return decision


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize(
    ("signal", "found", "context"),
    [
        ("user-intent", finding(user_intent=True), {}),
        ("explicit-pin", finding(), {"pinned": True}),
        ("multi-session", finding(), {"sessions": {"s2"}}),
        ("error-resolution", finding(resolved_error=True, category="error"), {}),
        ("multi-agent", finding(), {"agents": {"codex"}}),
        ("high-importance", finding(importance=0.7), {}),
        ("user-accepted", finding(accepted=True), {}),
    ],
)
def test_each_signal_alone(signal: str, found: SessionFinding, context: dict[str, Any]) -> None:
    decision = decide(found, "aggressive", **context)
    assert decision.signals == (signal,)
    assert decision.points == SIGNAL_POINTS[signal]  # type: ignore[index]


def test_a_sub_agent_is_not_a_second_session() -> None:
    own = finding(session_id="s1")
    assert "multi-session" not in decide(own, "aggressive", sessions={"s1/agent-a1b2"}).signals
    assert "multi-session" in decide(own, "aggressive", sessions={"s2/agent-a1b2"}).signals


def test_signal_points_are_the_seeds() -> None:
    """The seed's six signals, and issue 19's: what the user accepted."""
    assert dict(SIGNAL_POINTS) == {
        "user-intent": 5,
        "explicit-pin": 5,
        "multi-session": 2,
        "error-resolution": 2,
        "multi-agent": 1,
        "high-importance": 1,
        "user-accepted": 2,
    }


def test_what_the_user_accepted_reaches_aggressive_not_balanced_alone() -> None:
    accepted = finding(accepted=True, importance=0.6)
    assert decide(accepted, "aggressive").promoted
    assert not decide(accepted, "balanced").promoted  # 2 points < 3
    assert decide(finding(accepted=True, importance=0.7), "balanced").promoted


def test_own_session_and_agent_do_not_count_twice() -> None:
    # The caller may or may not include the finding's own session and agent; neither is a signal.
    assert decide(finding(), sessions={"s1"}, agents={"claude-code"}).signals == ()
    assert decide(finding(importance=0.69)).signals == ()
    assert decide(finding(resolved_error=False, category="error")).signals == ()


# --------------------------------------------------------------------------- thresholds


@pytest.mark.parametrize(
    ("preset", "below", "at"),
    [
        # conservative needs 4: multi-session + high-importance = 3; + error-resolution = 4
        (
            "conservative",
            ({"importance": 0.7}, {"sessions": {"s2"}}),
            ({"resolved_error": True}, {"sessions": {"s2"}}),
        ),
        # balanced needs 3: multi-session = 2; multi-session + high-importance = 3
        ("balanced", ({}, {"sessions": {"s2"}}), ({"importance": 0.7}, {"sessions": {"s2"}})),
        # aggressive needs 2: multi-agent = 1; multi-session = 2
        ("aggressive", ({}, {"agents": {"codex"}}), ({}, {"sessions": {"s2"}})),
    ],
)
def test_preset_threshold_boundaries(
    preset: Preset,
    below: tuple[dict[str, Any], dict[str, Any]],
    at: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    threshold = PRESETS[preset].min_points
    short = decide(finding(**below[0]), preset, **below[1])
    assert (short.points, short.threshold, short.promoted) == (threshold - 1, threshold, False)
    assert f"{threshold - 1} points < {threshold}" in short.reason
    enough = decide(finding(**at[0]), preset, **at[1])
    assert (enough.points, enough.promoted) == (threshold, True)
    assert f"{threshold} points >= {threshold}" in enough.reason


def test_presets_are_the_seeds() -> None:
    assert {name: tuple(msgspec.structs.astuple(p)) for name, p in PRESETS.items()} == {
        "conservative": (4, 0.4, 50),
        "balanced": (3, 0.25, 30),
        "aggressive": (2, 0.15, 20),
    }


# --------------------------------------------------------------------------- hard filters


@pytest.mark.parametrize("preset", ["conservative", "balanced", "aggressive"])
def test_content_length_filter_boundary(preset: Preset) -> None:
    length = PRESETS[preset].min_content_length
    too_short = decide(finding("x" * (length - 1), importance=0.9), preset, pinned=True)
    assert not too_short.promoted and too_short.reason.startswith("filtered: content")
    assert (too_short.signals, too_short.points) == ((), 0)  # filtered before scoring
    long_enough = decide(finding("x" * length, importance=0.9), preset, pinned=True)
    assert long_enough.promoted


@pytest.mark.parametrize("preset", ["conservative", "balanced", "aggressive"])
def test_importance_filter_boundary(preset: Preset) -> None:
    minimum = PRESETS[preset].min_importance
    below = decide(finding(importance=round(minimum - 0.01, 2)), preset, pinned=True)
    assert not below.promoted and below.reason.startswith("filtered: importance")
    at = decide(finding(importance=minimum), preset, pinned=True)
    assert at.promoted and at.signals == ("explicit-pin",)


def test_user_intent_bypasses_the_filters() -> None:
    decision = decide(finding("use uv", importance=0.0, user_intent=True), "conservative")
    assert decision.promoted and decision.signals == ("user-intent",)
    assert "bypasses the filters" in decision.reason


def test_a_pin_elsewhere_does_not_bypass_the_filters() -> None:
    assert not decide(finding("use uv", importance=0.9), "aggressive", pinned=True).promoted


# --------------------------------------------------------------------------- never pinned


def test_promotion_never_pins() -> None:
    found = [
        finding(user_intent=True),
        finding("Another pinned-elsewhere statement that is long enough.", importance=0.9),
    ]
    decisions = plan(found, pinned=True)
    assert all(d.promoted and d.status == "candidate" for d in decisions)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(
            {**msgspec.to_builtins(decisions[0]), "status": "pinned"}, PromotionDecision
        )
    entry = candidate_entry(found[0], entry_id="e" * 32, now=1000.0, transcript_path="/t.jsonl")
    assert entry.status == "candidate"
    assert entry.source == Source(
        kind="transcript",
        agent="claude-code",
        session_id="s1",
        transcript_path="/t.jsonl",
        offset=1200,
        rule_id="warning.must_not",
    )
    assert (entry.fingerprint, entry.content) == (found[0].fingerprint, found[0].content)


def test_a_fingerprint_is_promoted_once_per_plan() -> None:
    forked = [finding(session_id="s1"), finding(session_id="s2")]
    first, second = plan(forked, "aggressive", sessions={"s1", "s2"})
    assert first.promoted and not second.promoted
    assert second.reason == f"already promoted in this plan as finding {forked[0].id}"


# --------------------------------------------------------------------------- quarantine

NOW = 1_000_000_000.0


def entry(**kw: Any) -> Entry:
    made = new_entry(
        entry_id=kw.pop("entry_id", "a" * 32),
        content=CONTENT,
        category="warning",
        status=kw.pop("status", "candidate"),
        now=NOW - 2 * DAY,
        source=Source(kind="transcript"),
        importance=0.5,
    )
    return msgspec.structs.replace(made, **kw)


def test_accessed_candidate_is_confirmed_after_a_day() -> None:
    (outcome,) = review_quarantine([entry(access_count=2)], NOW)
    assert (outcome.action, outcome.status, outcome.importance, outcome.updated_at) == (
        "confirmed",
        "confirmed",
        0.5,
        NOW,
    )


def test_unaccessed_candidate_is_penalized_once_per_day() -> None:
    (outcome,) = review_quarantine([entry()], NOW)
    assert (outcome.action, outcome.status, outcome.importance) == ("penalized", "candidate", 0.4)
    penalized = entry(importance=outcome.importance, updated_at=outcome.updated_at)
    assert review_quarantine([penalized], NOW) == []  # a second review the same moment
    assert review_quarantine([penalized], NOW + DAY - 1) == []
    (again,) = review_quarantine([penalized], NOW + DAY)
    assert again.importance == pytest.approx(0.32)


def test_candidates_younger_than_a_day_are_untouched() -> None:
    young = entry(created_at=NOW - DAY + 1, updated_at=NOW - DAY + 1)
    assert review_quarantine([young, entry(created_at=NOW - 60, access_count=5)], NOW) == []
    (boundary,) = review_quarantine([entry(created_at=NOW - DAY, updated_at=NOW - DAY)], NOW)
    assert boundary.action == "penalized"


def test_pinned_confirmed_and_archived_entries_are_untouched() -> None:
    untouched = [
        entry(status="pinned"),
        entry(status="pinned", access_count=3),
        entry(status="confirmed"),
        entry(archived=True, archived_reason="stale"),
    ]
    assert review_quarantine(untouched, NOW) == []
