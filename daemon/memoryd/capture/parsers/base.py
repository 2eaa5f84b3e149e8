"""What every transcript parser shares: the per-file state, decoding one line, reading fields of
untrusted JSON without raising, and building and counting messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from memoryd.core.capture.transcript import (
    Agent,
    Message,
    ParseStats,
    Role,
    ToolCall,
    ToolResult,
    split_injected,
)


@dataclass
class ParserState:
    """What a parser remembers between the lines of one file: ids and cwd learnt from earlier
    records (a Codex ``session_meta`` names the cwd for every later line), and the counts."""

    session_id: str | None = None
    parent_session_id: str | None = None
    subagent_id: str | None = None
    cwd: str | None = None
    # The session the file's own name gives (a Claude Code ``<uuid>.jsonl``): it outranks the
    # ``sessionId`` of lines copied into the file from a parent session.
    file_session_id: str | None = None
    stats: ParseStats = field(default_factory=ParseStats)
    seen_files: set[str] = field(default_factory=set)


def decode_object(line: bytes, state: ParserState) -> dict[str, Any] | None:
    """The JSON object on ``line``, or None for a blank line or one that is not an object
    (those are counted as malformed)."""
    if not line.strip():
        return None
    state.stats.records += 1
    try:
        value = msgspec.json.decode(line)
    except (msgspec.MsgspecError, RecursionError, UnicodeError):
        # msgspec raises RecursionError for absurdly deep nesting and UnicodeDecodeError for
        # invalid UTF-8 inside a string, not DecodeError.
        value = None
    if not isinstance(value, dict):
        state.stats.malformed += 1
        return None
    return value


def count_unknown(state: ParserState, kind: str) -> None:
    unknown = state.stats.unknown_records
    unknown[kind] = unknown.get(kind, 0) + 1


def get_str(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) else None


def get_dict(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def get_list(record: dict[str, Any], key: str) -> list[Any]:
    value = record.get(key)
    return value if isinstance(value, list) else []


def text_parts(content: object) -> list[str]:
    """The texts of a content value: a string, or a list of blocks/parts carrying ``text``
    (Anthropic ``text`` blocks, Codex ``input_text``/``output_text``, Gemini ``{text}`` parts).
    Other blocks (images, thinking, function calls) carry no text for us."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return []
    return [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]


def new_message(
    state: ParserState,
    agent: Agent,
    role: Role,
    offset: int,
    timestamp: float | None,
    *,
    text: str = "",
    tool_calls: tuple[ToolCall, ...] = (),
    tool_results: tuple[ToolResult, ...] = (),
    injected: bool = False,
) -> Message:
    """A message stamped with what the state knows about its session; files come from calls."""
    files = tuple(dict.fromkeys(path for call in tool_calls for path in call.files))
    return Message(
        role=role,
        agent=agent,
        offset=offset,
        text=text,
        tool_calls=tool_calls,
        tool_results=tool_results,
        files=files,
        timestamp=timestamp,
        cwd=state.cwd,
        session_id=state.session_id,
        parent_session_id=state.parent_session_id,
        subagent_id=state.subagent_id,
        injected=injected or role == "system",
    )


def text_messages(
    state: ParserState,
    agent: Agent,
    role: Role,
    texts: list[str],
    offset: int,
    timestamp: float | None,
    *,
    injected: bool = False,
) -> list[Message]:
    """At most two messages for one record's texts: what a person or model wrote, and what a
    harness injected beside it, so a system reminder never hides the prompt next to it."""
    own: list[str] = []
    hidden: list[str] = []
    for text in texts:
        mine, theirs = ("", text.strip()) if injected else split_injected(text)
        if mine:
            own.append(mine)
        if theirs:
            hidden.append(theirs)
    messages: list[Message] = []
    if own:
        messages.append(new_message(state, agent, role, offset, timestamp, text="\n\n".join(own)))
    if hidden:
        text = "\n\n".join(hidden)
        messages.append(
            new_message(state, agent, role, offset, timestamp, text=text, injected=True)
        )
    return messages


def tally(state: ParserState, messages: list[Message]) -> list[Message]:
    """Add ``messages`` to the file's counts and hand them back."""
    stats = state.stats
    for message in messages:
        stats.messages += 1
        stats.tool_calls += len(message.tool_calls)
        stats.tool_results += len(message.tool_results)
        stats.errors += sum(result.is_error for result in message.tool_results)
        stats.skipped_injected += message.injected
        state.seen_files.update(message.files)
    stats.files = len(state.seen_files)
    return messages
