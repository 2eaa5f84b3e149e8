"""What the agent harness says, as opposed to the project (issue 19, design §6 capture quality).

A tool result flagged as an error is often not the project failing but the harness refusing:
an edit before a read, a replace string that is missing or not unique, a tool that does not
exist, a tool use the user declined. None of these is worth remembering. Two kinds of tool
result are not tool output at all but the user speaking: the reason given when declining a tool
use, and the answers to a question tool. Those are read as the user's own words.
"""

from __future__ import annotations

import re

# Claude Code's, Codex's and Gemini CLI's refusals and tool mechanics, by their fixed wording.
_HARNESS = re.compile(
    r"(?i)</?tool_use_error>|file has not been read yet|file has been (?:unexpectedly )?modified"
    r" since (?:it was )?read|string to replace not found|found \d+ matches of the string to"
    r" replace|no such tool available|is not running, so cannot be killed|doesn'?t want to"
    r" (?:proceed with this tool use|take this action)|tool use was rejected|interrupted by user"
    r"|permission to use \S+ has been denied|user (?:rejected|denied|aborted|cancelled)"
)
_DECLINED = re.compile(
    r"(?i)doesn'?t want to (?:proceed with this tool use|take this action)|tool use was rejected"
)
_REASON = re.compile(r"(?is)the user provided the following reason for the rejection:\s*(.+)")
_ANSWERS = re.compile(r"(?is)^\s*user has answered your questions?:\s*(.+?)(?:\.\s*you can now|$)")
_ANSWER = re.compile(r'"((?:[^"\\]|\\.)+)"\s*=\s*"((?:[^"\\]|\\.)*)"')
_INTERRUPTED = "[Request interrupted by user"
# The harness's own files (plans, settings, memory) are not the project's code.
_HARNESS_DIRS = re.compile(r"(?:^|/)\.(?:claude|codex|gemini)/")
# Hedges and thinking aloud: "is likely", "might be", "I think", "let me check".
HEDGE = re.compile(
    r"(?i)\b(?:(?:is|are|was|'s)\s+(?:likely|probably)|might\s+be|may\s+be|i\s+think|perhaps"
    r"|seems?\s+(?:to|like)|(?:it|this|that)\s+looks\s+like|i\s+suspect|not\s+sure|maybe"
    r"|let\s+me\s+(?:check|try|look|see|verify|find|test|run|fix|update|read))\b"
)


# A user's words that do not accept what the agent just did: a refusal, a doubt, a report that
# it still fails. Read at the start of the prompt (and anywhere for "still fails" reports).
_DISSENT = re.compile(
    r"(?i)^\W*(?:no\b|nope\b|wait\b|stop\b|hold\s+on|actually\b|hmm|undo\b|revert\b|wrong\b"
    r"|not\s+(?:quite|what|right)\b|that'?s\s+(?:not|wrong)\b|this\s+is\s+(?:not|wrong)\b"
    r"|why\s+(?:did|is|are|does|do|would)\b|(?:please\s+)?(?:don'?t|do\s+not)\b|but\b)"
    r"|\b(?:doesn'?t|does\s+not|didn'?t|did\s+not)\s+work|\bnot\s+working\b|\bis\s+broken\b"
    r"|\bstill\s+(?:broken|fails?|failing|not\b|doesn'?t|get(?:s|ting)?|see(?:s|ing)?|shows?)"
)


def dissents(prompt: str) -> bool:
    """Whether a user's prompt corrects or doubts what the agent said just before it."""
    return _DISSENT.search(prompt[:2000]) is not None


# Claude Code starts a sub-agent with this one-word prompt to warm its cache; the sub-agent's
# answer is a greeting, not work.
_WARMUP = re.compile(r"(?i)^\s*warm-?up\s*$")


def is_warmup(prompt: str) -> bool:
    """Whether a user prompt is the harness's warm-up of a sub-agent."""
    return _WARMUP.match(prompt) is not None


def is_harness_error(text: str) -> bool:
    """Whether an error result is the harness's own refusal rather than the project's failure."""
    return _HARNESS.search(text[:2000]) is not None


def is_harness_file(path: str) -> bool:
    """Whether ``path`` is one of the harness's own files (a saved plan, its settings)."""
    return _HARNESS_DIRS.search(path) is not None


def is_declined(text: str) -> bool:
    """Whether a tool result says the user declined the tool use."""
    return _DECLINED.search(text[:2000]) is not None


def is_interruption(text: str) -> bool:
    """Whether a user message is the harness's note that the user interrupted the agent."""
    return text.lstrip().startswith(_INTERRUPTED)


def user_words(text: str) -> str | None:
    """What the user said inside a tool result: the reason for declining a tool use, or the
    answers to a question tool as "question → answer"; None for any other result."""
    if (reason := _REASON.search(text)) is not None:
        said = reason.group(1).strip()
        return said or None
    if (answers := _ANSWERS.match(text)) is not None:
        pairs = [f"{q.strip()} → {a.strip()}" for q, a in _ANSWER.findall(answers.group(1))]
        return "\n".join(pairs) or None
    return None
