"""Codex rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl``
(reference/agent-formats.md §3.1).

Each line is ``{timestamp, type, payload}``. ``response_item`` payloads are what the model saw:
they give assistant text, tool calls and results. A person's prompt is the ``event_msg``
``user_message``, which Codex writes only for real input; every ``response_item`` user message
is therefore returned injected: it is either context Codex or a hook put there (AGENTS.md,
``<environment_context>``, hook output, whose text may carry no marker at all) or the mirror of
a prompt already carried by ``user_message``. Rollouts from before mid-2025 have no envelope
and no events: a bare meta line, bare response items and ``{"record_type": "state"}`` lines;
there a user item is the prompt, unless its text says it is injected.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import msgspec

from memoryd.capture.parsers.base import (
    ParserState,
    count_unknown,
    decode_object,
    get_dict,
    get_list,
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
    patch_files,
)

# Envelope types that carry no conversation for us (newer multi-agent and baseline records).
QUIET_ENVELOPES = frozenset(
    {"world_state", "inter_agent_communication", "inter_agent_communication_metadata"}
)
# Response items with nothing to learn from (reasoning is the model's scratchpad).
QUIET_ITEMS = frozenset({"reasoning", "ghost_snapshot", "tool_search_call", "compaction"})
# UI events: duplicates of response items, progress, usage, lifecycle.
KNOWN_EVENTS = frozenset(
    {
        "task_started",
        "task_complete",
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "agent_reasoning_section_break",
        "token_count",
        "exec_command_begin",
        "exec_command_end",
        "patch_apply_begin",
        "patch_apply_end",
        "turn_aborted",
        "turn_diff",
        "undo_completed",
        "context_compacted",
        "error",
        "warning",
        "stream_error",
        "mcp_tool_call_begin",
        "mcp_tool_call_end",
        "web_search_begin",
        "web_search_end",
        "view_image_tool_call",
        "plan_update",
        "entered_review_mode",
        "exited_review_mode",
    }
)
# Built-in calls whose items carry no name.
_UNNAMED_TOOLS = {"local_shell_call": "local_shell", "web_search_call": "web_search"}
_UUID_TAIL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# exec_command output starts with a small header; an exit status other than 0 is an error.
_EXIT_LINE = re.compile(r"^(?:Exit code|Process exited with code):?\s*(-?\d+)", re.M)


def new_state(path: str | None = None) -> ParserState:
    """The rollout file name ends in the thread id, known before ``session_meta`` is read."""
    state = ParserState()
    found = _UUID_TAIL.search(PurePath(path).stem) if path else None
    state.session_id = found.group(0) if found else None
    return state


def parse_line(line: bytes, offset: int, state: ParserState) -> list[Message]:
    record = decode_object(line, state)
    if record is None:
        return []
    timestamp = parse_timestamp(record.get("timestamp"))
    kind = record.get("type")
    payload = get_dict(record, "payload")
    messages: list[Message]
    match kind:
        case "session_meta":
            _learn_meta(payload, state)
            messages = []
        case "turn_context":
            state.cwd = get_str(payload, "cwd") or state.cwd
            messages = []
        case "response_item":
            messages = _item(payload, offset, timestamp, state, envelope=True)
        case "event_msg":
            messages = _event(payload, offset, timestamp, state)
        case "compacted":
            summary = get_str(payload, "message") or ""
            messages = _system(summary, offset, timestamp, state)
        case str(name) if name in QUIET_ENVELOPES:
            messages = []
        case _:
            messages = _legacy(record, offset, state)
    return tally(state, messages)


def _learn_meta(meta: dict[str, Any], state: ParserState) -> None:
    state.session_id = get_str(meta, "id") or state.session_id
    state.cwd = get_str(meta, "cwd") or state.cwd
    state.parent_session_id = get_str(meta, "forked_from_id") or state.parent_session_id


def _event(
    event: dict[str, Any], offset: int, timestamp: float | None, state: ParserState
) -> list[Message]:
    kind = event.get("type")
    if kind == "user_message":
        texts = text_parts(event.get("message"))
        return text_messages(state, "codex", "user", texts, offset, timestamp)
    if not (isinstance(kind, str) and kind in KNOWN_EVENTS):
        count_unknown(state, f"event_msg:{kind if isinstance(kind, str) else '<no type>'}")
    return []


def _legacy(record: dict[str, Any], offset: int, state: ParserState) -> list[Message]:
    """Pre-envelope rollouts: a bare meta line, bare response items, ``record_type`` lines."""
    kind = record.get("type")
    if "record_type" in record:
        return []
    if kind is None and isinstance(record.get("id"), str):
        _learn_meta(record, state)
        return []
    if isinstance(kind, str) and "payload" not in record:
        return _item(record, offset, None, state, envelope=False)
    count_unknown(state, kind if isinstance(kind, str) else "<no type>")
    return []


def _item(
    item: dict[str, Any],
    offset: int,
    timestamp: float | None,
    state: ParserState,
    *,
    envelope: bool,
) -> list[Message]:
    kind = item.get("type")
    match kind:
        case "message":
            return _message(item, offset, timestamp, state, envelope=envelope)
        case "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call":
            call = _tool_call(item)
            return [new_message(state, "codex", "assistant", offset, timestamp, tool_calls=(call,))]
        case "function_call_output" | "custom_tool_call_output":
            result = _tool_result(item)
            return [new_message(state, "codex", "tool", offset, timestamp, tool_results=(result,))]
        case str(name) if name in QUIET_ITEMS:
            return []
        case _:
            count_unknown(state, f"response_item:{kind if isinstance(kind, str) else '<no type>'}")
            return []


def _message(
    item: dict[str, Any],
    offset: int,
    timestamp: float | None,
    state: ParserState,
    *,
    envelope: bool,
) -> list[Message]:
    texts = text_parts(item.get("content"))
    match item.get("role"):
        case "user":
            # With an envelope the prompt comes from event_msg user_message (module docstring);
            # without one, split_injected tells AGENTS.md and environment blocks by their headers.
            return text_messages(
                state, "codex", "user", texts, offset, timestamp, injected=envelope
            )
        case "assistant":
            return text_messages(state, "codex", "assistant", texts, offset, timestamp)
        case _:
            # developer/system messages are Codex's own instructions to the model.
            return _system("\n\n".join(texts), offset, timestamp, state)


def _system(text: str, offset: int, timestamp: float | None, state: ParserState) -> list[Message]:
    if not text.strip():
        return []
    return [new_message(state, "codex", "system", offset, timestamp, text=text, injected=True)]


def _tool_call(item: dict[str, Any]) -> ToolCall:
    kind = item.get("type")
    name = get_str(item, "name") or _UNNAMED_TOOLS.get(str(kind), str(kind))
    call_id = get_str(item, "call_id") or get_str(item, "id") or ""
    if kind == "function_call":
        tool_input = _arguments(item.get("arguments"))
    elif kind == "custom_tool_call":
        tool_input = {"input": item.get("input")}
    else:
        tool_input = get_dict(item, "action")
    return ToolCall(id=call_id, name=name, input=tool_input, files=_files(name, tool_input))


def _arguments(raw: object) -> dict[str, Any]:
    """Function arguments are a JSON string; keep the raw text when it is not an object."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return {}
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError, UnicodeError):
        value = None
    return value if isinstance(value, dict) else {"arguments": raw}


def _files(name: str, tool_input: dict[str, Any]) -> tuple[str, ...]:
    """Besides the apply_patch tool, older Codex ran ``shell`` with argv
    ``["apply_patch", "<patch>"]``; that argv is a patch, not a shell command line."""
    command = tool_input.get("command")
    if isinstance(command, list) and len(command) >= 2 and command[0] == "apply_patch":
        return patch_files(command[1]) if isinstance(command[1], str) else ()
    return files_touched(name, tool_input)


def _tool_result(item: dict[str, Any]) -> ToolResult:
    text, is_error = _output(item.get("output"))
    return ToolResult(call_id=get_str(item, "call_id") or "", is_error=is_error, text=text)


def _output(output: object) -> tuple[str, bool]:
    """Text and error flag of a tool output: shell outputs are JSON-in-a-string with
    ``metadata.exit_code``; exec_command outputs start with an exit-code line; MCP results
    may say ``isError``; newer outputs can be a list of content items."""
    if isinstance(output, list):
        return "\n".join(text_parts(output)), False
    if isinstance(output, dict):
        failed = output.get("success") is False or output.get("isError") is True
        return "\n".join(text_parts(output.get("content"))), failed
    if not isinstance(output, str):
        return "", False
    if output.lstrip().startswith("{"):
        parsed = _arguments(output)
        exit_code = get_dict(parsed, "metadata").get("exit_code")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool):
            return str(parsed.get("output", "")), exit_code != 0
        if parsed.get("isError") is True or parsed.get("is_error") is True:
            return "\n".join(text_parts(get_list(parsed, "content"))) or output, True
    found = _EXIT_LINE.search(output[:400])
    return output, bool(found and int(found.group(1)) != 0)
