"""Claude Code transcripts: ``~/.claude/projects/<dir>/<session>.jsonl`` and sub-agent files
``<session>/subagents/agent-<id>.jsonl`` (reference/agent-formats.md §2).

An ``assistant`` line carries one content block (one API message is split over several lines),
so each line becomes at most one assistant message. Tool results come back as ``user`` lines
with ``tool_result`` blocks and become ``tool`` messages.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

from memoryd.capture.parsers.base import (
    ParserState,
    count_unknown,
    decode_object,
    get_dict,
    get_str,
    new_message,
    tally,
    text_messages,
    text_parts,
)
from memoryd.core.capture.transcript import (
    Message,
    ToolCall,
    ToolResult,
    files_touched,
    parse_timestamp,
)

# Known record types that carry no conversation (titles, snapshots, progress, queue, modes).
QUIET_TYPES = frozenset(
    {
        "summary",
        "progress",
        "file-history-snapshot",
        "queue-operation",
        "last-prompt",
        "permission-mode",
        "custom-title",
        "ai-title",
        "tag",
        "agent_metadata",
    }
)


# Claude Code names a session's file after the session, ``<uuid>.jsonl``; only such a name is
# trusted over the records' ``sessionId`` (a hand-made file may be named otherwise).
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def new_state(path: str | None = None) -> ParserState:
    """State for one file; the path names the session, or the parent session and agent id of a
    sub-agent file, until the records say so themselves."""
    state = ParserState()
    if path is None:
        return state
    pure = PurePath(path)
    if pure.name.startswith("agent-"):
        state.subagent_id = pure.stem.removeprefix("agent-")
        parents = pure.parts[:-1]
        if "subagents" in parents:
            index = len(parents) - 1 - parents[::-1].index("subagents")
            state.session_id = state.parent_session_id = parents[index - 1] if index else None
    else:
        state.session_id = pure.stem
        if _UUID.fullmatch(pure.stem):
            state.file_session_id = pure.stem
    return state


def parse_line(line: bytes, offset: int, state: ParserState) -> list[Message]:
    record = decode_object(line, state)
    if record is None:
        return []
    _learn_envelope(record, state)
    timestamp = parse_timestamp(record.get("timestamp"))
    match record.get("type"):
        case "user":
            messages = _user(record, offset, timestamp, state)
        case "assistant":
            messages = _assistant(record, offset, timestamp, state)
        case "system":
            messages = _injected_text(get_str(record, "content"), offset, timestamp, state)
        case "attachment":
            messages = _attachment(get_dict(record, "attachment"), offset, timestamp, state)
        case str(kind) if kind in QUIET_TYPES:
            messages = []
        case kind:
            count_unknown(state, kind if isinstance(kind, str) else "<no type>")
            messages = []
    return tally(state, messages)


def _learn_envelope(record: dict[str, Any], state: ParserState) -> None:
    """Every conversational line repeats cwd and session; a sub-agent line also names its agent
    and is a sidechain of the session it is logged under."""
    state.cwd = get_str(record, "cwd") or state.cwd
    session = get_str(record, "sessionId")
    if not _learn_parent(record, session, state):
        state.session_id = session or state.session_id
    agent_id = get_str(record, "agentId")
    if agent_id and (record.get("isSidechain") is True or state.subagent_id):
        state.subagent_id = agent_id
    if state.subagent_id and state.session_id:
        state.parent_session_id = state.session_id


def _learn_parent(record: dict[str, Any], session: str | None, state: ParserState) -> bool:
    """A session started from another one (``--fork-session``, ``/branch``, ``--resume`` into a
    new file) begins with the parent's conversation copied into its own file: each copied line
    names the parent in ``forkedFrom.sessionId``, or (a resumed session) still carries the
    parent's ``sessionId``, while the file is named after the new session. The first parent
    named is kept, and the file's own id stays the session's. True when the line was copied."""
    if state.subagent_id:
        return False
    own = state.file_session_id
    forked = get_str(get_dict(record, "forkedFrom"), "sessionId")
    if forked and forked != (session or own):
        state.parent_session_id = state.parent_session_id or forked
    if own is not None and session is not None and session != own:
        state.parent_session_id = state.parent_session_id or session
        return True
    return False


def _user(
    record: dict[str, Any], offset: int, timestamp: float | None, state: ParserState
) -> list[Message]:
    content = get_dict(record, "message").get("content")
    blocks = content if isinstance(content, list) else [content]
    texts: list[str] = []
    results: list[ToolResult] = []
    for block in blocks:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            results.append(_tool_result(block))
        elif isinstance(block, dict) and block.get("type") == "text":
            texts.extend(text_parts(block))
    messages: list[Message] = []
    if results:
        messages.append(
            new_message(state, "claude", "tool", offset, timestamp, tool_results=tuple(results))
        )
    # isMeta lines (caveats, expanded slash commands) and compaction summaries are written by
    # Claude Code, not typed by the user.
    meta = record.get("isMeta") is True or record.get("isCompactSummary") is True
    messages += text_messages(state, "claude", "user", texts, offset, timestamp, injected=meta)
    return messages


def _tool_result(block: dict[str, Any]) -> ToolResult:
    return ToolResult(
        call_id=get_str(block, "tool_use_id") or "",
        is_error=block.get("is_error") is True,
        text="\n".join(text_parts(block.get("content"))),
    )


def _assistant(
    record: dict[str, Any], offset: int, timestamp: float | None, state: ParserState
) -> list[Message]:
    content = get_dict(record, "message").get("content")
    blocks = content if isinstance(content, list) else [content]
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            texts.extend(text_parts(block))
        elif isinstance(block, dict) and block.get("type") == "tool_use":
            calls.append(_tool_call(block))
    text = "\n\n".join(t for t in texts if t.strip())
    if not text and not calls:
        return []  # thinking, images: nothing to learn from
    # Synthetic "API Error: …" replies are written by Claude Code, not by the model.
    synthetic = record.get("isApiErrorMessage") is True
    message = new_message(
        state,
        "claude",
        "assistant",
        offset,
        timestamp,
        text=text,
        tool_calls=tuple(calls),
        injected=synthetic,
    )
    return [message]


def _tool_call(block: dict[str, Any]) -> ToolCall:
    name = get_str(block, "name") or ""
    tool_input = get_dict(block, "input")
    return ToolCall(
        id=get_str(block, "id") or "",
        name=name,
        input=tool_input,
        files=files_touched(name, tool_input),
    )


def _attachment(
    attachment: dict[str, Any], offset: int, timestamp: float | None, state: ParserState
) -> list[Message]:
    """Hook results (``hook_success`` and kin) are where our own SessionStart payload lands."""
    kind = get_str(attachment, "type") or ""
    if not kind.startswith("hook"):
        return []
    text = get_str(attachment, "stdout") or "\n".join(text_parts(attachment.get("content")))
    return _injected_text(text, offset, timestamp, state)


def _injected_text(
    text: str | None, offset: int, timestamp: float | None, state: ParserState
) -> list[Message]:
    if not text or not text.strip():
        return []
    return [new_message(state, "claude", "system", offset, timestamp, text=text, injected=True)]
