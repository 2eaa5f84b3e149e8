"""Transcript parsers: bytes in, ``Message`` values out, one module per agent.

Usage, per watched file::

    agent = detect_agent(path)            # from the path shape alone
    state = new_state(agent, path)        # small per-file state; keep it beside the cursor
    for offset, line in complete_lines:   # the tailer hands over whole lines only
        messages = parse_line(agent, line, offset, state)
    state.stats                           # counts, unknown record types, malformed lines

A legacy Gemini ``session-*.json`` is one document: ``parse_document(data, state)``.
"""

from __future__ import annotations

import os
from pathlib import PurePath

from memoryd.capture.parsers import claude, codex, gemini
from memoryd.capture.parsers.base import ParserState
from memoryd.capture.parsers.gemini import GeminiState, parse_document
from memoryd.core.capture.transcript import Agent, Message

__all__ = [
    "GeminiState",
    "ParserState",
    "detect_agent",
    "new_state",
    "parse_document",
    "parse_line",
]


def new_state(agent: Agent, path: str | os.PathLike[str] | None = None) -> ParserState:
    """Fresh state for one file of ``agent``; the path supplies session and sub-agent ids."""
    where = os.fspath(path) if path is not None else None
    match agent:
        case "claude":
            return claude.new_state(where)
        case "codex":
            return codex.new_state(where)
        case "gemini":
            return gemini.new_state(where)


def parse_line(agent: Agent, line: bytes, offset: int, state: ParserState) -> list[Message]:
    """Messages from one complete line at byte ``offset``; never raises on any line.

    ``state`` must come from ``new_state`` for the same agent (a TypeError otherwise: that is a
    programming error, not bad input)."""
    try:
        if agent == "claude":
            return claude.parse_line(line, offset, state)
        if agent == "codex":
            return codex.parse_line(line, offset, state)
        if agent == "gemini" and isinstance(state, GeminiState):
            return gemini.parse_line(line, offset, state)
    except Exception:
        # The parsers are tested never to raise; should one still fail on a shape nobody has
        # seen, that costs one line, not the capture of the whole file.
        state.stats.malformed += 1
        return []
    raise TypeError(f"no parser for agent {agent!r} with {type(state).__name__}")


def detect_agent(path: str | os.PathLike[str]) -> Agent | None:
    """Which agent wrote the transcript at ``path``, from its shape under the agent's root:
    Claude ``projects/<dir>/<session>.jsonl`` and ``<session>/subagents/**/agent-*.jsonl``;
    Codex ``sessions/**/rollout-*.jsonl``; Gemini ``tmp/<project>/chats/session-*.json[l]`` and
    sub-agents ``chats/<parent>/<session>.jsonl``. None for anything else."""
    pure = PurePath(path)
    parents = pure.parts[:-1]
    name, suffix = pure.name, pure.suffix
    is_rollout = name.startswith("rollout-") and suffix == ".jsonl"
    if is_rollout and {"sessions", "archived_sessions"} & set(parents):
        return "codex"
    if "chats" in parents and _is_gemini(parents, name, suffix):
        return "gemini"
    if "projects" in parents and suffix == ".jsonl" and _is_claude(parents, name):
        return "claude"
    return None


def _below(parents: tuple[str, ...], folder: str) -> tuple[str, ...]:
    """The folders below the last ``folder`` in ``parents``."""
    index = len(parents) - 1 - parents[::-1].index(folder)
    return parents[index + 1 :]


def _is_gemini(parents: tuple[str, ...], name: str, suffix: str) -> bool:
    below = _below(parents, "chats")
    chats_at = len(parents) - len(below) - 1
    if chats_at < 2 or parents[chats_at - 2] != "tmp":
        return False
    if not below:
        return name.startswith("session-") and suffix in {".json", ".jsonl"}
    return len(below) == 1 and suffix == ".jsonl"


def _is_claude(parents: tuple[str, ...], name: str) -> bool:
    below = _below(parents, "projects")
    if len(below) == 1:
        return True  # a session file, or an old-style agent-<id>.jsonl beside it
    return len(below) >= 3 and below[2] == "subagents" and name.startswith("agent-")
