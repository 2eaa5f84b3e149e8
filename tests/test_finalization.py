"""plan_finalization: closing a session as a pure plan (the service only gathers and commits)."""

from __future__ import annotations

import itertools
import json

from memoryd.capture import parsers
from memoryd.core.capture.finalization import SessionClose, plan_finalization
from memoryd.core.capture.transcript import Message
from test_promotion import finding

USER_INTENT = finding(
    "Always run make lint before pushing", rule_id="remember.explicit", user_intent=True
)
OTHER = finding("Never commit directly to main; open a pull request", user_intent=True)


def _close(**kw: object) -> SessionClose:
    defaults: dict[str, object] = dict(
        session_id="s1",
        agent="claude",
        reason="session_end",
        transcript_path="/t/s1.jsonl",
        messages=[Message(role="user", agent="claude", text="Ship the login fix", offset=0)],
        findings=[USER_INTENT, OTHER],
        preset="balanced",
        sessions_by_fingerprint={},
        agents_by_fingerprint={},
        pinned_fingerprints=frozenset(),
        not_promotable=frozenset(),
    )
    return SessionClose(**(defaults | kw))  # type: ignore[arg-type]


def _plan(close: SessionClose):  # type: ignore[no-untyped-def]
    ids = (f"e{n}" for n in itertools.count())
    return plan_finalization(close, now=100.0, new_id=lambda: next(ids), redact=str.upper)


def test_promoted_findings_become_candidates_sourced_to_the_transcript() -> None:
    event = _plan(_close())
    assert [d.finding_id for d in event.decisions] == [USER_INTENT.id, OTHER.id]
    assert [e.id for e in event.promoted] == ["e0", "e1"]
    assert {e.status for e in event.promoted} == {"candidate"}  # never pinned
    assert {e.source.transcript_path for e in event.promoted} == {"/t/s1.jsonl"}
    assert event.promoted_from == ((USER_INTENT.id, "e0"), (OTHER.id, "e1"))
    assert (event.session_id, event.reason, event.finalized_at) == ("s1", "session_end", 100.0)


def test_what_may_not_be_promoted_again_is_decided_but_not_promoted() -> None:
    event = _plan(_close(not_promotable={USER_INTENT.id}))
    assert len(event.decisions) == 2  # the decision is still audited
    assert [f for f, _ in event.promoted_from] == [OTHER.id]


def test_one_episode_per_session_whatever_the_closing() -> None:
    first, again = _plan(_close()), _plan(_close(reason="idle"))
    assert first.episode.id == again.episode.id
    assert first.episode.session_id == "s1"
    assert first.episode.goal == "SHIP THE LOGIN FIX"  # text goes through the redactor


def _subagent_messages(prompt: str, answer: str) -> tuple[str, list[Message]]:
    """A Claude Code sub-agent transcript (<session>/subagents/agent-<id>.jsonl), as parsed."""
    path = "/h/.claude/projects/-w-app/5f0c2a9e/subagents/agent-a1b2c3.jsonl"
    envelope = {"sessionId": "5f0c2a9e", "agentId": "a1b2c3", "isSidechain": True, "cwd": "/w/app"}
    lines = [
        {**envelope, "type": "user", "message": {"role": "user", "content": prompt}},
        {**envelope, "type": "assistant",
         "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]}},
    ]  # fmt: skip
    state = parsers.new_state("claude", path)
    messages: list[Message] = []
    for n, line in enumerate(lines):
        messages += parsers.parse_line("claude", json.dumps(line).encode(), n * 100, state)
    return f"{state.session_id}/{state.subagent_id}", messages


def test_a_sub_agents_warm_up_makes_no_episode_and_promotes_nothing() -> None:
    greeting = (
        "I'm ready to help you search and explore the codebase. I'm Claude Code's file search"
        " specialist. What would you like me to find?"
    )
    session, messages = _subagent_messages("Warmup", greeting)
    assert session == "5f0c2a9e/a1b2c3"
    event = _plan(_close(session_id=session, messages=messages))
    assert event.episode is None and event.decisions == () and event.promoted == ()
    # A sub-agent that worked has its episode; so has a main session, whatever its prompt.
    worked, work = _subagent_messages("Find where the tokenizer renders ruby text", greeting)
    assert _plan(_close(session_id=worked, messages=work)).episode is not None
    assert _plan(_close(messages=messages)).episode is not None
