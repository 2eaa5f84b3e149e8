"""``memctl hook``: what an agent's hook runs (design §12; agent-formats.md §1, §3.2, §4.3).

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

This module is on every prompt's path and imports only the standard library and memctl's
stdlib-only modules: the request goes out over ``memctl.zmtp`` (ZMTP written out, no pyzmq),
packed by ``memctl.minipack`` (no msgspec); the JSON in and out goes through CPython's ``_json``.
``memctl-hook`` and ``memctl hook`` reach ``main`` without argparse (``memctl.launch``). When the
daemon's socket answers in a way the wire client does not expect (another ZMTP version or socket
type, a reply it cannot read), the same request (same id: a retried change is answered from the
daemon's reply cache, not applied twice) goes through pyzmq (``transport.Client``, pyzmq only). No
socket or a refused connection answers nothing at once; a daemon that closes the connection or
says nothing after the request was sent answers nothing too (within the budget).
``MEMCTL_HOOK_TRANSPORT=pyzmq`` (or ``MEMCTL_TRANSPORT=pyzmq``, which every command follows) runs
the hook as before the wire client (argparse, pyzmq): the
way out should the wire client ever misbehave, and the baseline of the tests and the benchmark.
"""

from __future__ import annotations

import os
import select
import sys
import time

from memctl import minipack, paths, zmtp

try:  # CPython's string quoting, without ``json`` (which imports ``re``)
    from _json import encode_basestring as _quote
except ImportError:  # pragma: no cover - another interpreter: the json module's
    from json.encoder import py_encode_basestring as _quote

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing would import ``re``
if TYPE_CHECKING:
    from typing import Any

    from memctl import protocol
    from memctl.cli import Session

# Per agent: its event name -> (our Hook.event, whether the agent reads context from stdout for
# it). Events not listed are ignored without asking the daemon.
EVENTS: dict[str, dict[str, tuple[protocol.HookKind, bool]]] = {
    "claude": {
        "SessionStart": ("session_start", True),
        "UserPromptSubmit": ("prompt", True),
        "PreCompact": ("pre_compact", False),  # stdout only shown in verbose mode
        "SessionEnd": ("session_end", False),
        "Stop": ("turn_end", False),  # the end of a turn: the session goes on
    },
    "codex": {
        "SessionStart": ("session_start", True),
        "UserPromptSubmit": ("prompt", True),
        "PreCompact": ("pre_compact", False),  # its output schema has no hookSpecificOutput
        # The end of every turn. Codex has no SessionEnd in most builds: its session is
        # finalized at its next session, when idle, or when the daemon stops.
        "Stop": ("turn_end", False),
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


# memctl.protocol's, which this module does not import (a test holds them equal).
PROTOCOL_VERSION = 3
BUDGET_S = 1.5  # as memctl.cli.QUICK_BUDGET_S: stdin, the request and the reply together
AGENTS: tuple[protocol.Agent, ...] = ("claude", "codex", "gemini")


class Options:
    """What the hook's command line says (the global options and the hook's own)."""

    def __init__(
        self,
        agent: protocol.Agent | None = None,
        event: str | None = None,
        project: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self.agent, self.event, self.project, self.timeout = agent, event, project, timeout


def run_words(words: list[str]) -> int:
    """``memctl ... hook ...``'s whole command line (``words``: after the program). Always 0.

    A line this parser does not take apart for certain (an abbreviated option, ``--help``, a
    value argparse would refuse) goes to ``memctl.cli``, which answers it as it always has."""
    opts = None if paths.pyzmq_only() else parse(words)
    try:
        if opts is None:
            from memctl.cli import main as cli_main

            return cli_main(words)  # the hook's contract there too: exit 0, nothing on error
        answer(opts, time.monotonic() + (opts.timeout or BUDGET_S))
    except BaseException:  # the agent must see exit 0 and nothing on stdout, whatever broke
        pass
    return 0


def parse(words: list[str]) -> Options | None:
    """The options of a hook's command line, or None when it is anything else."""
    opts = Options()
    seen_hook = False
    it = iter(words)
    for word in it:
        name, eq, value = word.partition("=")
        if word == "hook" and not seen_hook:
            seen_hook = True
            continue
        if word == "--json":
            continue  # the hook's output is the agent's JSON either way
        if name not in ("--agent", "--event", "--project", "--timeout"):
            return None
        if name in ("--agent", "--event") and not seen_hook:
            return None  # a hook option before the command: argparse's business
        if not eq:
            value = next(it, "")
            if not value or value.startswith("-"):
                return None
        if name == "--agent":
            opts.agent = next((agent for agent in AGENTS if agent == value), None)
            if opts.agent is None:
                return None
        elif name == "--event":
            opts.event = value
        elif name == "--project":
            opts.project = value
        else:
            try:
                opts.timeout = float(value)
            except ValueError:
                return None
            if not opts.timeout > 0 or opts.timeout == float("inf"):
                return None
    return opts if seen_hook else None


def run(s: Session) -> None:
    """``memctl hook`` as parsed by ``memctl.cli``: its options and its client."""
    a = s.args
    opts = Options(a.agent, a.event, a.project, a.timeout)
    try:
        answer(opts, time.monotonic() + s.client.budget_s, s.project)
    except Exception:  # the agent must see exit 0 and nothing on stdout, whatever broke
        return


def answer(opts: Options, deadline: float, project: str | None = None) -> None:
    out = _answer(opts, deadline, project or os.path.abspath(opts.project or paths.cwd()))
    if out:
        _emit(out)


def _answer(opts: Options, deadline: float, cwd_project: str) -> bytes:
    payload = _read_payload(deadline)
    if payload is None:
        return b""
    agent = opts.agent or detect_agent(payload)
    event = event_name(agent, payload, opts.event)
    if event is None:
        return b""
    kind, answers = EVENTS[agent][event]
    project = cwd_project if opts.project else _project(payload, cwd_project)
    fields = translate(agent, kind, payload, project)
    fields["project_explicit"] = bool(opts.project)
    fields["id"] = os.urandom(16).hex()  # as memctl.transport.new_request_id
    text = _call(fields, deadline)
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
) -> dict[str, Any]:
    """The ``protocol.Hook`` request's fields, in the order msgspec encodes them (the subclass's
    fields, then the base's: tests/test_hook_wire.py holds the two to the same bytes)."""
    prompt = payload.get("prompt")
    return {
        "agent": agent,
        "event": kind,
        "session_id": _field(payload, "session_id", SESSION_ID_LIMIT),
        "transcript_path": _field(payload, "transcript_path", PATH_LIMIT),
        "prompt": prompt[:PROMPT_LIMIT] if isinstance(prompt, str) else "",
        "source": _field(payload, "source", SOURCE_LIMIT),
        "remaining_context": None,
        "files": [],
        "v": PROTOCOL_VERSION,
        "id": 0,
        "project": project,
        "project_explicit": False,
    }


def encode(fields: dict[str, Any]) -> bytes:
    """The request frame: what ``protocol.encode(protocol.Hook(**fields))`` gives."""
    return minipack.pack({"op": "hook", **fields})


def render(event: str, text: str) -> bytes:
    """The stdout for an event whose context the agent reads (the same JSON for all three):
    the bytes ``msgspec.json.encode`` gives (``_json`` quotes strings exactly as it does)."""
    head = '{"hookSpecificOutput":{"hookEventName":'
    return f'{head}{_quote(event)},"additionalContext":{_quote(text)}}}}}\n'.encode()


def _read_payload(deadline: float) -> dict[str, Any] | None:
    raw = _read_stdin(deadline)
    if raw is None:
        return None
    try:
        payload = loads(raw)
    except (ValueError, StopIteration, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return payload if isinstance(payload, dict) else None


class _JsonContext:
    """What ``_json.make_scanner`` reads off ``json.JSONDecoder``; NaN, Infinity and numbers
    past a float's range are refused, as msgspec refuses them."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_int = int

    @staticmethod
    def parse_float(text: str) -> float:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise ValueError(f"{text[:32]} is out of range")
        return value

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")


def loads(raw: bytes) -> Any:
    """The JSON document ``raw`` (UTF-8), refused where ``msgspec.json.decode`` refuses it too
    (bad UTF-8, a byte-order mark, trailing data, NaN, an escaped lone surrogate)."""
    text = raw.decode("utf-8").strip(" \t\n\r")
    try:
        from _json import make_scanner  # CPython's scanner, without ``json`` and its ``re``
    except ImportError:  # pragma: no cover - another interpreter
        import json

        value = json.loads(text)
    else:
        value, end = make_scanner(_JsonContext())(text, 0)  # type: ignore[arg-type]
        if end != len(text):
            raise ValueError("data after the JSON document")
    if "\\u" in text or "\\U" in text:
        _check_no_surrogates(value)
    return value


def _check_no_surrogates(value: Any) -> None:
    if isinstance(value, str):
        value.encode("utf-8")  # UnicodeEncodeError (a ValueError) on a lone surrogate
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_no_surrogates(key)
            _check_no_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _check_no_surrogates(item)


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


# ----------------------------------------------------------------------------- the request


class _Foreign(Exception):
    """A reply the wire client cannot vouch for: msgspec and pyzmq get the question."""


def _call(fields: dict[str, Any], deadline: float) -> str:
    """The daemon's payload text for the request ``fields`` ("" for none, or on any failure)."""
    if not paths.pyzmq_only():
        path = paths.ipc_path(paths.endpoint())
        if path is not None:  # tcp:// is pyzmq's
            try:
                return _text_of(zmtp.request(path, [encode(fields)], deadline), fields["id"])
            except (zmtp.Unreachable, zmtp.Lost):
                return ""  # nobody there, or the daemon dropped us: no waiting out the budget
            except (zmtp.Unexpected, _Foreign):
                pass
    return _call_pyzmq(fields, deadline)


def _text_of(frames: list[bytes], request_id: str) -> str:
    if len(frames) != 1:
        raise _Foreign(f"{len(frames)} frames")
    try:
        reply = minipack.unpack(frames[0])
    except minipack.UnpackError as exc:
        raise _Foreign(str(exc)) from None
    if not isinstance(reply, dict) or reply.get("id") != request_id:
        raise _Foreign("not the reply to this request")
    status = reply.get("status")
    if status == "error":
        return ""
    if status != "ok":
        raise _Foreign(f"status {status!r}")
    text = _hook_result_text(reply.get("result"))
    return text if text.strip() else ""


def _hook_result_text(result: object) -> str:
    """``HookResult.text``; "" when ``result`` is not a ``HookResult`` (a daemon of another
    version), as ``protocol.result_of`` would refuse it."""
    if not isinstance(result, dict):
        return ""
    text = result.get("text", "")
    ok = isinstance(text, str)
    for key in ("entries", "remembered"):
        items = result.get(key, [])
        ok = ok and isinstance(items, list) and all(isinstance(i, str) for i in items)
    for key in ("finalized", "bank_update"):
        ok = ok and isinstance(result.get(key, False), bool)
    tokens = result.get("tokens")
    ok = ok and (tokens is None or _is_token_info(tokens))
    return text if ok else ""


def _is_token_info(tokens: object) -> bool:
    if not isinstance(tokens, dict):
        return False
    tiers = tokens.get("tiers")
    return (
        all(_is_int(tokens.get(key)) for key in ("total", "budget"))
        and isinstance(tiers, dict)
        and all(isinstance(k, str) and _is_int(v) for k, v in tiers.items())
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _call_pyzmq(fields: dict[str, Any], deadline: float) -> str:
    """The request through ``memctl.transport`` with pyzmq alone (msgspec encoding it)."""
    import msgspec

    from memctl import protocol
    from memctl.transport import Client, DaemonUnavailable, MessageTooLarge

    request = protocol.Hook(**fields)
    budget = deadline - time.monotonic()
    if budget <= 0:
        return ""
    # pyzmq alone: the wire client has had its try (``_call``), or is not to be used.
    pyzmq = Client(budget_s=budget, wire=False)
    try:
        reply = pyzmq.call(request, budget)
    except (DaemonUnavailable, MessageTooLarge):
        return ""
    finally:
        pyzmq.close()
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
