"""The ``auto`` episode of a finished session (design §2 Episode): a short narrative built from its
messages and findings, without an LLM."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from memoryd.core.capture.findings import SessionFinding, truncate
from memoryd.core.capture.transcript import Message
from memoryd.core.events import Episode

TITLE_CHARS = 80
GOAL_CHARS = 300
OUTCOME_CHARS = 600
# The closing summary is the last reply long enough to say what changed; "Done!" is not one.
SUMMARY_MIN_CHARS = 200
MAX_DECISIONS = 10
MAX_FILES = 50


def _first_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return truncate(line, limit) if line else ""


def _closing(replies: Sequence[Message]) -> str:
    """The agent's closing summary: its last substantial reply, markdown marks left out."""
    summary = next((m.text for m in reversed(replies) if len(m.text) >= SUMMARY_MIN_CHARS), "")
    return _MARKS.sub("", summary or replies[-1].text)


_MARKS = re.compile(r"\*\*|^#{1,6}\s+|[✅❌]", re.MULTILINE)


def build_episode(
    *,
    episode_id: str,
    session_id: str,
    agent: str,
    messages: Sequence[Message],
    findings: Sequence[SessionFinding],
    redact: Callable[[str], str],
) -> Episode:
    """What the session set out to do (its first prompt), what was decided, which files it
    touched, how it ended (the agent's closing summary), and its counts. Text and file paths go
    through ``redact`` (secrets out, paths relative to the project)."""
    spoken = [m for m in messages if not m.injected]
    prompts = [m for m in spoken if m.role == "user" and m.text.strip()]
    replies = [m for m in spoken if m.role == "assistant" and m.text.strip()]
    goal = redact(_first_line(prompts[0].text, GOAL_CHARS)) if prompts else ""
    files: dict[str, None] = {}
    for m in spoken:
        files.update(dict.fromkeys(m.files))
    times = [m.timestamp for m in spoken if m.timestamp is not None]
    decisions = [f.content for f in findings if f.category == "decision"][:MAX_DECISIONS]
    return Episode(
        id=episode_id,
        session_id=session_id,
        agent=agent,
        title=_first_line(goal, TITLE_CHARS) or f"{agent} session {session_id[:8]}",
        goal=goal,
        decisions=tuple(decisions),
        outcome=redact(_first_line(_closing(replies), OUTCOME_CHARS)) if replies else "",
        files=tuple(dict.fromkeys(redact(f) for f in list(files)[:MAX_FILES])),
        turns=len(prompts),
        tool_calls=sum(len(m.tool_calls) for m in spoken),
        errors=sum(1 for m in spoken for r in m.tool_results if r.is_error),
        started_at=min(times) if times else None,
        ended_at=max(times) if times else None,
    )
