"""``memctl hook``: what an agent's hook runs (SPEC §12; agent-formats.md §1, §3.2, §4.3).

The agent starts ``memctl hook --agent A`` with its hook JSON on stdin. We turn that JSON into one
``Hook`` request, give the daemon at most the client's budget (1.5 s, stdin included) and print
exactly what the agent takes as context: for every agent the same object,
``{"hookSpecificOutput": {"hookEventName": E, "additionalContext": TEXT}}``, and only for the
events whose stdout the agent reads (SessionStart and the per-prompt event). Claude and Codex
would also take plain text, Gemini only JSON; one shape serves all three.

Memory is an extra, so a failure must never reach the agent: whatever happens (no daemon, a hung
daemon, an error reply, an empty payload, unreadable stdin) the exit code is 0 and stdout empty.
Nothing goes to stderr either: Claude shows a hook's stderr in its transcript view, and the
reference does not promise that Codex ignores it.

This module is on every prompt's path: it imports nothing beyond what ``memctl.cli`` already has.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import TYPE_CHECKING, Any

import msgspec

from memctl import protocol
from memctl.transport import DaemonUnavailable, MessageTooLarge

if TYPE_CHECKING:
    from memctl.cli import Session

# Per agent: its event name -> (our Hook.event, whether the agent reads context from stdout for
# it). Events not listed are ignored without asking the daemon.
EVENTS: dict[str, dict[str, tuple[protocol.HookKind, bool]]] = {
    "claude": {
        "SessionStart": ("session_start", True),
        "UserPromptSubmit": ("prompt", True),
        "PreCompact": ("pre_compact", False),  # stdout only shown in verbose mode
        "SessionEnd": ("session_end", False),
        "Stop": ("session_end", False),
    },
    "codex": {
        "SessionStart": ("session_start", True),
        "UserPromptSubmit": ("prompt", True),
        "PreCompact": ("pre_compact", False),  # its output schema has no hookSpecificOutput
        "Stop": ("session_end", False),  # Codex has no SessionEnd in most builds
        "SessionEnd": ("session_end", False),
    },
    "gemini": {
        "SessionStart": ("session_start", True),
        "BeforeAgent": ("prompt", True),
        "PreCompress": ("pre_compact", False),  # advisory, fired asynchronously
        "SessionEnd": ("session_end", False),  # the CLI does not wait for it
    },
}
# Events only Gemini has; Claude and Codex payloads never carry a ``timestamp``.
_GEMINI_ONLY = frozenset(
    "BeforeAgent AfterAgent BeforeModel AfterModel BeforeToolSelection BeforeTool AfterTool "
    "PreCompress".split()
)

MAX_STDIN_BYTES = 8 * 1024 * 1024
# Field limits of protocol.Hook: a longer prompt is cut, any other field too long is dropped.
PROMPT_LIMIT = 262_144
SESSION_ID_LIMIT = 256
PATH_LIMIT = 4096
SOURCE_LIMIT = 64


def run(s: Session) -> None:
    """Answer one agent hook. Never raises and never prints anything but the agent's JSON."""
    try:
        out = _answer(s, time.monotonic() + s.client.budget_s)
        if out:
            _emit(out)
    except Exception:  # the agent must see exit 0 and nothing on stdout, whatever broke
        return


def _answer(s: Session, deadline: float) -> bytes:
    payload = _read_payload(deadline)
    if payload is None:
        return b""
    agent = s.args.agent or detect_agent(payload)
    event = event_name(agent, payload, s.args.event)
    if event is None:
        return b""
    kind, answers = EVENTS[agent][event]
    project = s.project if s.args.project else _project(payload, s.project)
    request = translate(agent, kind, payload, project)
    request.project_explicit = bool(s.args.project)
    request.session_over = event == "SessionEnd"  # a Stop ends only a turn
    budget = deadline - time.monotonic()
    if budget <= 0:
        return b""
    try:
        reply = s.client.call(request, budget)
    except (DaemonUnavailable, MessageTooLarge):
        return b""
    text = _payload_text(request, reply)
    return render(event, text) if answers and text else b""


def detect_agent(payload: dict[str, Any]) -> protocol.Agent:
    """Which agent sent ``payload``, from its fields alone (the environment is no guide: Gemini
    sets ``CLAUDE_PROJECT_DIR`` for its hooks too). Claude is the default."""
    if payload.get("hook_event_name") in _GEMINI_ONLY or "timestamp" in payload:
        return "gemini"
    if "turn_id" in payload:
        return "codex"
    path = payload.get("transcript_path", "")
    if path is None:
        return "codex"  # Codex sends null when there is no rollout file; Claude always a path
    if isinstance(path, str):
        if os.path.basename(path).startswith("rollout-") or "/.codex/" in path:
            return "codex"
        if "/.gemini/" in path:
            return "gemini"
    return "claude"


def event_name(agent: str, payload: dict[str, Any], override: str | None) -> str | None:
    """The agent's name of the event (``--event`` wins over the payload; it may also name our
    kind, e.g. ``prompt``), or None when we do nothing for it."""
    table = EVENTS[agent]
    name = override or payload.get("hook_event_name")
    if not isinstance(name, str):
        return None
    if name in table:
        return name
    return next((event for event, (kind, _) in table.items() if kind == name), None)


def translate(
    agent: protocol.Agent, kind: protocol.HookKind, payload: dict[str, Any], project: str
) -> protocol.Hook:
    prompt = payload.get("prompt")
    return protocol.Hook(
        agent=agent,
        event=kind,
        project=project,
        session_id=_field(payload, "session_id", SESSION_ID_LIMIT),
        transcript_path=_field(payload, "transcript_path", PATH_LIMIT),
        prompt=prompt[:PROMPT_LIMIT] if isinstance(prompt, str) else "",
        source=_field(payload, "source", SOURCE_LIMIT),
    )


def render(event: str, text: str) -> bytes:
    """The stdout for an event whose context the agent reads (the same JSON for all three)."""
    output = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    return msgspec.json.encode(output) + b"\n"


def _read_payload(deadline: float) -> dict[str, Any] | None:
    raw = _read_stdin(deadline)
    if raw is None:
        return None
    try:
        payload = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return payload if isinstance(payload, dict) else None


def _read_stdin(deadline: float) -> bytes | None:
    # Read under the deadline: an agent that never closes stdin must not hold us past the budget.
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None
    if os.isatty(fd):
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_STDIN_BYTES:
            return None
        chunks.append(chunk)


def _field(payload: dict[str, Any], key: str, limit: int) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and len(value) <= limit else None


def _project(payload: dict[str, Any], fallback: str) -> str:
    cwd = _field(payload, "cwd", PATH_LIMIT)
    return cwd if cwd and os.path.isabs(cwd) else fallback


def _payload_text(request: protocol.Hook, reply: protocol.Reply) -> str:
    if not isinstance(reply, protocol.Ok):
        return ""
    try:
        text = protocol.result_of(request, reply).text
    except (msgspec.DecodeError, msgspec.ValidationError):  # a daemon of another version
        return ""
    return text if text.strip() else ""


def _emit(out: bytes) -> None:
    try:
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    except (OSError, ValueError):
        # The agent stopped reading. Point stdout at /dev/null so that the interpreter's final
        # flush does not fail too, print a traceback and exit non-zero.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
