"""Gemini CLI chat recordings: ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` (and sub-agents
in ``chats/<parentSessionId>/<sessionId>.jsonl``), and the legacy single-object
``session-*.json`` (reference/agent-formats.md §4.2; gemini-cli chatRecordingService.ts).

The JSONL file is an upsert log: a message is written again in full, under the same ``id``,
whenever its tool calls, results or tokens change; ``{"$set": {…}}`` patches the metadata;
``{"$rewindTo": id}`` drops that message and everything after it. The state remembers what was
already returned per id, so each tool call and result comes out once, and records where a rewind
retracted messages (``retracted_from``) for the consumer to drop what it learnt from them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

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
)

# Tool call states after which the result is final.
FINAL_STATUSES = frozenset({"success", "error", "cancelled"})
# CLI notices recorded between turns.
NOTICE_TYPES = frozenset({"info", "error", "warning"})


@dataclass(slots=True)
class _Returned:
    """What was already returned for one message id (a digest of its text keeps the state small;
    the sets are made when a tool call first needs them: one per message is a lot of objects for
    the cyclic GC to walk in a long session)."""

    offset: int
    text_digest: bytes = b""
    calls: set[str] | None = None
    results: set[str] | None = None


@dataclass
class GeminiState(ParserState):
    """Per-file state; ``returned`` keeps message order (dicts keep insertion order), which is
    what a rewind cuts. ``retracted_from`` lists, per rewind, the offset of the first message it
    dropped: messages from there up to the rewind line no longer belong to the conversation."""

    returned: dict[str, _Returned] = field(default_factory=dict)
    retracted_from: list[int] = field(default_factory=list)


def new_state(path: str | None = None) -> GeminiState:
    """A sub-agent recording sits in a folder named after its parent session."""
    state = GeminiState()
    if path is None:
        return state
    pure = PurePath(path)
    parents = pure.parts[:-1]
    if not pure.name.startswith("session-") and len(parents) >= 2 and parents[-2] == "chats":
        state.parent_session_id = parents[-1]
        state.session_id = state.subagent_id = pure.stem
    return state


def parse_line(line: bytes, offset: int, state: GeminiState) -> list[Message]:
    record = decode_object(line, state)
    if record is None:
        return []
    # Same precedence as gemini-cli's own loader.
    messages: list[Message] = []
    if isinstance(record.get("$rewindTo"), str):
        _rewind(record["$rewindTo"], state)
    elif isinstance(record.get("id"), str):
        messages = _message(record, offset, state, synthetic=False)
    elif isinstance(record.get("$set"), dict):
        messages = _patch(record["$set"], offset, state)
    elif isinstance(record.get("sessionId"), str):
        _learn_meta(record, state)
    else:
        count_unknown(state, "<unrecognised>")
    return tally(state, messages)


def parse_document(data: bytes, state: GeminiState | None = None) -> list[Message]:
    """A legacy ``session-*.json`` (one ConversationRecord, rewritten whole on every change).

    Offsets are message indexes. Pass the same state to re-parse a grown document: only what is
    new comes back, and messages missing from it are retracted as by a rewind. The document
    counts as one record."""
    state = state if state is not None else GeminiState()
    record = decode_object(data, state)
    if record is None:
        return []
    _learn_meta(record, state)
    entries = [e for e in get_list(record, "messages") if isinstance(e, dict)]
    present = {e["id"] for e in entries if isinstance(e.get("id"), str)}
    gone = next((mid for mid in state.returned if mid not in present), None)
    if gone is not None:
        _rewind(gone, state)
    messages: list[Message] = []
    for index, entry in enumerate(entries):
        if isinstance(entry.get("id"), str):
            messages += _message(entry, index, state, synthetic=False)
        else:
            count_unknown(state, "<unrecognised>")
    return tally(state, messages)


def _learn_meta(meta: dict[str, Any], state: GeminiState) -> None:
    state.session_id = get_str(meta, "sessionId") or state.session_id
    if meta.get("kind") == "subagent":
        state.subagent_id = state.session_id
    directories = [d for d in get_list(meta, "directories") if isinstance(d, str)]
    state.cwd = directories[0] if directories else state.cwd


def _patch(patch: dict[str, Any], offset: int, state: GeminiState) -> list[Message]:
    """``$set.messages`` replaces the model's context (compression, masking): messages we have
    seen keep what we learnt (the conversation did happen); new ids there are synthetic turns
    such as a compression summary, so they come back injected."""
    _learn_meta(patch, state)
    messages: list[Message] = []
    for entry in get_list(patch, "messages"):
        mid = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and isinstance(mid, str) and mid not in state.returned:
            messages += _message(entry, offset, state, synthetic=True)
    return messages


def _rewind(target: str, state: GeminiState) -> None:
    """Drop ``target`` and everything after it; an unknown target clears all (as gemini-cli)."""
    ids = list(state.returned)
    dropped = ids[ids.index(target) :] if target in state.returned else ids
    if not dropped:
        return
    state.retracted_from.append(state.returned[dropped[0]].offset)
    for mid in dropped:
        del state.returned[mid]


def _message(
    record: dict[str, Any], offset: int, state: GeminiState, *, synthetic: bool
) -> list[Message]:
    returned = state.returned.setdefault(record["id"], _Returned(offset))
    timestamp = parse_timestamp(record.get("timestamp"))
    match record.get("type"):
        case "user":
            # displayContent is what the user typed; content may hold expanded @file text.
            shown = record.get("displayContent") or record.get("content")
            texts = _new_text(text_parts(shown), returned)
            return text_messages(
                state, "gemini", "user", texts, offset, timestamp, injected=synthetic
            )
        case "gemini":
            return _model_turn(record, returned, offset, timestamp, state, synthetic)
        case str(kind) if kind in NOTICE_TYPES:
            text = "\n".join(_new_text(text_parts(record.get("content")), returned))
            if not text:
                return []
            return [new_message(state, "gemini", "system", offset, timestamp, text=text)]
        case kind:
            count_unknown(state, f"message:{kind if isinstance(kind, str) else '<no type>'}")
            return []


def _new_text(texts: list[str], returned: _Returned) -> list[str]:
    """The texts unless this id already returned exactly them (an upsert for tool progress)."""
    kept = [t for t in texts if t.strip()]
    digest = hashlib.blake2b("\n\n".join(kept).encode(errors="replace"), digest_size=16).digest()
    if not kept or digest == returned.text_digest:
        return []
    returned.text_digest = digest
    return kept


def _model_turn(
    record: dict[str, Any],
    returned: _Returned,
    offset: int,
    timestamp: float | None,
    state: GeminiState,
    synthetic: bool,
) -> list[Message]:
    """A ``gemini`` record holds its tool calls and their results: an assistant message for the
    text and new calls, then a tool message for new results, like the other agents."""
    text = "\n\n".join(_new_text(text_parts(record.get("content")), returned))
    calls, results = _new_tool_activity(get_list(record, "toolCalls"), returned)
    # A turn that first appears in a $set.messages checkpoint was made up by the CLI.
    messages: list[Message] = []
    if text or calls:
        messages.append(
            new_message(
                state,
                "gemini",
                "assistant",
                offset,
                timestamp,
                text=text,
                tool_calls=calls,
                injected=synthetic,
            )
        )
    if results:
        messages.append(
            new_message(
                state, "gemini", "tool", offset, timestamp, tool_results=results, injected=synthetic
            )
        )
    return messages


def _new_tool_activity(
    tool_calls: list[Any], returned: _Returned
) -> tuple[tuple[ToolCall, ...], tuple[ToolResult, ...]]:
    """Calls not returned before, and results that became final since (status, not presence:
    a result can be filled in while the call is still running)."""
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    for index, call in enumerate(tool_calls):
        if not isinstance(call, dict):
            continue
        call_id = get_str(call, "id") or f"#{index}"
        if returned.calls is None:
            returned.calls = set()
        if call_id not in returned.calls:
            returned.calls.add(call_id)
            calls.append(_tool_call(call_id, call))
        status = get_str(call, "status")
        if returned.results is None:
            returned.results = set()
        if status in FINAL_STATUSES and call_id not in returned.results:
            returned.results.add(call_id)
            results.append(ToolResult(call_id, status == "error", _result_text(call)))
    return tuple(calls), tuple(results)


def _tool_call(call_id: str, call: dict[str, Any]) -> ToolCall:
    name = get_str(call, "name") or ""
    args = get_dict(call, "args")
    return ToolCall(id=call_id, name=name, input=args, files=files_touched(name, args))


def _result_text(call: dict[str, Any]) -> str:
    """A result is a Part list of ``functionResponse``s (``response.output`` or ``.error``) and
    text parts; fall back to what the CLI displayed."""
    result = call.get("result")
    parts = result if isinstance(result, list) else [result]
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            response = get_dict(get_dict(part, "functionResponse"), "response")
            texts += [
                v for v in (response.get("output"), response.get("error")) if isinstance(v, str)
            ]
            texts += text_parts(part)
    return "\n".join(texts) or get_str(call, "resultDisplay") or ""
