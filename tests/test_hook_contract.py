"""``memctl hook``'s contract with each agent (SPEC §12; agent-formats.md §1.4-1.5, §3.2, §4.3).

The exact stdin JSON each agent sends goes through the real ``memctl hook``, against no daemon, a
hung one, a scripted one (a bare ROUTER that answers ``HookResult``s: the client's side alone) and
the real daemon. Whatever happens the agent sees exit 0, nothing on stderr, and on stdout either
nothing or the one JSON object it reads.

Timing bounds: the client gives up after its 1.5 s budget, but a test measures the whole process,
Python start-up and imports included, on a machine that may be busy; 3 s is the generous ceiling
for "gave up on its own", far below anything an agent's timeout would have to cut.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import zmq

from conftest import BIN, Daemon, Env, ok_json
from memctl import protocol

BUDGET_S = 1.5
CEILING_S = 3.0
PROMPT = "How do we run the tests with pytest here?"
SESSION = "7d3f6a10-2b4c-4e8f-9a1d-0c5e7b9f2a61"
TRANSCRIPTS = {
    "claude": f"/home/dev/.claude/projects/-home-dev-shop/{SESSION}.jsonl",
    "codex": "/home/dev/.codex/sessions/2026/02/23/"
    "rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl",
    "gemini": "/home/dev/.gemini/tmp/shop/chats/session-2026-04-29T21-39-7d3f6a10.jsonl",
}
# Per agent and event: (the fields beyond the base ones, our Hook.event, whether stdout is read).
EVENTS: dict[str, dict[str, tuple[Mapping[str, object], str, bool]]] = {
    "claude": {  # §1.4
        "SessionStart": (
            {"source": "startup", "model": "claude-sonnet-4-5"},
            "session_start",
            True,
        ),
        "UserPromptSubmit": ({"prompt": PROMPT}, "prompt", True),
        "PreCompact": ({"trigger": "auto", "custom_instructions": ""}, "pre_compact", False),
        "SessionEnd": ({"reason": "prompt_input_exit"}, "session_end", False),
        "Stop": (
            {"stop_hook_active": False, "last_assistant_message": "Done."},
            "turn_end",  # the end of a turn, not of the session (issue 17)
            False,
        ),
    },
    "codex": {  # §3.2 and codex-rs/hooks/schema/generated/*.command.input.schema.json
        "SessionStart": (
            {"model": "gpt-5.2-codex", "permission_mode": "default", "source": "startup"},
            "session_start",
            True,
        ),
        "UserPromptSubmit": (
            {"turn_id": "t-1", "model": "gpt-5.2-codex", "permission_mode": "default"}
            | {"prompt": PROMPT},
            "prompt",
            True,
        ),
        "PreCompact": (
            {"turn_id": "t-2", "model": "gpt-5.2-codex", "trigger": "auto"},
            "pre_compact",
            False,
        ),
        "Stop": (
            {"turn_id": "t-3", "model": "gpt-5.2-codex", "permission_mode": "default"}
            | {"stop_hook_active": False, "last_assistant_message": "Done."},
            "turn_end",
            False,
        ),
    },
    "gemini": {  # §4.3
        "SessionStart": ({"source": "startup"}, "session_start", True),
        "BeforeAgent": ({"prompt": PROMPT}, "prompt", True),
        "PreCompress": ({"trigger": "auto"}, "pre_compact", False),
        "SessionEnd": ({"reason": "exit"}, "session_end", False),
    },
}
CASES = [(agent, event) for agent, events in EVENTS.items() for event in events]
INJECTING = [(agent, event) for agent, event in CASES if EVENTS[agent][event][2]]
QUIET = [(agent, event) for agent, event in CASES if not EVENTS[agent][event][2]]


def payload(agent: str, event: str, project: Path, **changes: object) -> dict[str, object]:
    """What ``agent`` writes on a hook's stdin for ``event`` (field names from the reference)."""
    base: dict[str, object] = {
        "session_id": SESSION,
        "transcript_path": TRANSCRIPTS[agent],
        "cwd": str(project),
        "hook_event_name": event,
    }
    if agent == "claude":
        base["permission_mode"] = "default"
    if agent == "gemini":
        base["timestamp"] = "2026-04-29T21:39:22.319Z"
    return {**base, **EVENTS[agent][event][0], **changes}


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: bytes
    elapsed: float


def run_hook(
    env: Env, stdin: bytes | Mapping[str, object], *args: str, module: bool = False
) -> Run:
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    program = [sys.executable, "-m", "memctl"] if module else [str(BIN / "memctl")]
    started = time.perf_counter()
    proc = subprocess.run(
        [*program, "hook", *args],
        input=data,
        capture_output=True,
        env=env.environ(),
        cwd=env.project,
        timeout=30,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started)


def assert_silent(run: Run) -> None:
    assert (run.code, run.stdout, run.stderr) == (0, b"", b"")


def injected(run: Run, event: str) -> str:
    """The additionalContext of a well-formed answer to ``event``: exit 0, one JSON line."""
    assert run.code == 0 and run.stderr == b""
    assert run.stdout.endswith(b"\n") and run.stdout.count(b"\n") == 1, run.stdout
    answer = json.loads(run.stdout)
    assert list(answer) == ["hookSpecificOutput"]
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    assert set(answer["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert isinstance(context, str) and context.strip()
    return context


# ----------------------------------------------------------------------------- scripted daemon

Answer = Callable[[protocol.Request], "protocol.Reply | None"]


def hook_result(text: str) -> Answer:
    def answer(request: protocol.Request) -> protocol.Reply:
        return protocol.Ok(id=request.id, result=protocol.HookResult(text=text))

    return answer


def never(request: protocol.Request) -> None:
    return None


class ScriptedDaemon:
    """A ROUTER on the test socket that records each request and replies ``answer(request)``
    (no reply when that is None: a hung daemon)."""

    def __init__(self, env: Env, answer: Answer) -> None:
        env.socket.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        self._ctx = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.bind("ipc://" + str(env.socket))
        self._answer = answer
        self._stop = threading.Event()
        self.requests: list[protocol.Request] = []
        self._thread = threading.Thread(target=self._serve)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._router.poll(50):
                identity, frame = self._router.recv_multipart()
                request = protocol.decode_request(frame)
                self.requests.append(request)
                reply = self._answer(request)
                if reply is not None:
                    self._router.send_multipart([identity, protocol.encode(reply)])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._router.close()
        self._ctx.term()


@contextlib.contextmanager
def scripted(env: Env, answer: Answer) -> Iterator[ScriptedDaemon]:
    daemon = ScriptedDaemon(env, answer)
    try:
        yield daemon
    finally:
        daemon.close()


# ----------------------------------------------------------------------------- no daemon


@pytest.mark.parametrize(("agent", "event"), CASES)
def test_daemon_down_is_silent_and_quick(env: Env, agent: str, event: str) -> None:
    run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert_silent(run)
    assert run.elapsed < CEILING_S  # no socket: the client does not wait at all


@pytest.mark.parametrize("agent", list(EVENTS))
def test_stale_socket_is_silent_within_budget(env: Env, agent: str) -> None:
    env.socket.parent.mkdir(parents=True, mode=0o700)
    env.socket.touch()  # a daemon that died without removing its socket
    event = next(e for e, spec in EVENTS[agent].items() if spec[1] == "prompt")
    run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert_silent(run)
    assert run.elapsed < CEILING_S


@pytest.mark.parametrize(("agent", "event"), CASES)
def test_hung_daemon_is_silent_within_budget(env: Env, agent: str, event: str) -> None:
    with scripted(env, never) as daemon:
        run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert_silent(run)
    assert BUDGET_S - 0.1 <= run.elapsed < CEILING_S  # waited its budget out, and no longer
    # Asked once: the wire client's connection loses nothing unseen, so a retry would only queue
    # behind the first request.
    assert len(daemon.requests) == 1


def test_hung_daemon_through_pyzmq_is_asked_twice(env: Env) -> None:
    """``MEMCTL_HOOK_TRANSPORT=pyzmq`` (the hook as before the wire client) retries once on a
    fresh socket, with the same request id, as every command does."""
    env.vars["MEMCTL_HOOK_TRANSPORT"] = "pyzmq"
    with scripted(env, never) as daemon:
        run = run_hook(env, payload("claude", "UserPromptSubmit", env.project))
    assert_silent(run)
    assert BUDGET_S - 0.1 <= run.elapsed < CEILING_S
    assert len(daemon.requests) == 2
    assert daemon.requests[0].id == daemon.requests[1].id


def test_stdin_left_open_gives_up_within_budget(env: Env) -> None:
    """An agent that never closes stdin does not hold the hook past its budget."""
    with scripted(env, hook_result("never asked")) as daemon:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [str(BIN / "memctl"), "hook", "--agent", "claude"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env.environ(),
            cwd=env.project,
        )
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(b'{"hook_event_name": "UserPromptSubmit", ')
        proc.stdin.flush()
        try:
            code = proc.wait(timeout=10)  # stdin still open: the hook ends on its own deadline
        finally:
            proc.kill()
            proc.stdin.close()
        elapsed = time.perf_counter() - started
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    assert (code, out, err) == (0, b"", b"")
    assert elapsed < CEILING_S
    assert daemon.requests == []


# ----------------------------------------------------------------------------- bad input

GARBAGE = [
    b"",
    b"not json at all",
    b'{"hook_event_name": "UserPromptSubmit", "prompt": ',
    b"[1, 2, 3]",
    b"null",
    b'"UserPromptSubmit"',
    b"\xff\xfe\x00{}",
    b'{"hook_event_name": 42, "prompt": "x"}',
    b'{"prompt": "no event name"}',
]


@pytest.mark.parametrize("agent_args", [(), ("--agent", "claude"), ("--agent", "gemini")])
@pytest.mark.parametrize("stdin", GARBAGE)
def test_garbage_stdin_is_silent_and_asks_nothing(
    env: Env, stdin: bytes, agent_args: tuple[str, ...]
) -> None:
    with scripted(env, hook_result("must not be printed")) as daemon:
        run = run_hook(env, stdin, *agent_args)
    assert_silent(run)
    assert daemon.requests == []


@pytest.mark.parametrize(
    ("agent", "event"),
    [
        ("claude", "PreToolUse"),
        ("claude", "Notification"),
        ("codex", "PostToolUse"),
        ("codex", "BeforeAgent"),
        ("gemini", "AfterTool"),
        ("gemini", "UserPromptSubmit"),
    ],
)
def test_events_we_do_not_handle_are_ignored(env: Env, agent: str, event: str) -> None:
    stdin = {"session_id": SESSION, "cwd": str(env.project), "hook_event_name": event}
    with scripted(env, hook_result("must not be printed")) as daemon:
        run = run_hook(env, stdin, "--agent", agent)
    assert_silent(run)
    assert daemon.requests == []


# ----------------------------------------------------------------------------- scripted answers


@pytest.mark.parametrize(("agent", "event"), CASES)
def test_request_carries_the_payload(env: Env, agent: str, event: str) -> None:
    stdin = payload(agent, event, env.project)
    with scripted(env, hook_result("")) as daemon:
        assert_silent(run_hook(env, stdin, "--agent", agent))
    [request] = daemon.requests
    assert isinstance(request, protocol.Hook)
    assert (request.agent, request.event) == (agent, EVENTS[agent][event][1])
    assert request.project == str(env.project)
    assert request.session_id == SESSION
    assert request.transcript_path == TRANSCRIPTS[agent]
    assert request.prompt == stdin.get("prompt", "")
    assert request.source == stdin.get("source")


@pytest.mark.parametrize(("agent", "event"), INJECTING)
def test_payload_text_is_printed_as_the_agent_expects(env: Env, agent: str, event: str) -> None:
    text = 'Project memory\n- [pattern] "Tests run with pytest -q" (#0123abcd)\n<é ✓ "quoted">\n'
    with scripted(env, hook_result(text)):
        run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert injected(run, event) == text


@pytest.mark.parametrize(("agent", "event"), QUIET)
def test_events_without_context_print_nothing(env: Env, agent: str, event: str) -> None:
    with scripted(env, hook_result("some text the agent would not read")) as daemon:
        run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert_silent(run)
    assert len(daemon.requests) == 1  # the daemon still hears of it (compaction, session end)


def _error(request: protocol.Request) -> protocol.Reply:
    return protocol.Error(id=request.id, code=protocol.ErrorCode.BAD_REQUEST, message="no")


def _odd_result(request: protocol.Request) -> protocol.Reply:
    return protocol.Ok(id=request.id, result={"text": ["not", "a", "string"]})


@pytest.mark.parametrize("answer", [_error, _odd_result, hook_result(""), hook_result(" \n")])
@pytest.mark.parametrize(("agent", "event"), INJECTING)
def test_error_or_empty_answer_prints_nothing(
    env: Env, agent: str, event: str, answer: Answer
) -> None:
    with scripted(env, answer):
        run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
    assert_silent(run)


DETECTION: list[tuple[str, str, dict[str, object]]] = [
    (agent, event, {}) for agent, event in CASES
] + [
    ("codex", "SessionStart", {"transcript_path": None}),  # Codex without a rollout file
    ("claude", "SessionStart", {"transcript_path": f"/elsewhere/{SESSION}.jsonl"}),
    ("gemini", "SessionStart", {"transcript_path": "/elsewhere/session.json"}),  # by timestamp
]


@pytest.mark.parametrize(("agent", "event", "changes"), DETECTION)
def test_agent_is_detected_from_the_payload(
    env: Env, agent: str, event: str, changes: dict[str, object]
) -> None:
    stdin = payload(agent, event, env.project, **changes)
    with scripted(env, hook_result("remembered text")) as daemon:
        run = run_hook(env, stdin)
    [request] = daemon.requests
    assert isinstance(request, protocol.Hook) and request.agent == agent
    assert request.event == EVENTS[agent][event][1]
    if EVENTS[agent][event][2]:
        assert injected(run, event) == "remembered text"
    else:
        assert_silent(run)


@pytest.mark.parametrize("event_arg", ["UserPromptSubmit", "prompt"])
def test_event_flag_names_the_event(env: Env, event_arg: str) -> None:
    stdin = payload("claude", "UserPromptSubmit", env.project)
    del stdin["hook_event_name"]
    with scripted(env, hook_result("ctx")) as daemon:
        run = run_hook(env, stdin, "--agent", "claude", "--event", event_arg)
    assert injected(run, "UserPromptSubmit") == "ctx"
    assert isinstance(daemon.requests[0], protocol.Hook) and daemon.requests[0].event == "prompt"


def test_overlong_prompt_is_cut_to_the_protocol_limit(env: Env) -> None:
    stdin = payload("claude", "UserPromptSubmit", env.project, prompt="x" * 300_000)
    with scripted(env, hook_result("ctx")) as daemon:
        run = run_hook(env, stdin, "--agent", "claude")
    assert injected(run, "UserPromptSubmit") == "ctx"
    [request] = daemon.requests
    assert isinstance(request, protocol.Hook) and len(request.prompt) == 262_144
    msgspec.convert(msgspec.to_builtins(request), protocol.Hook)  # within every limit


def test_python_dash_m_memctl_hook(env: Env) -> None:
    with scripted(env, hook_result("ctx")):
        run = run_hook(env, payload("gemini", "BeforeAgent", env.project), module=True)
    assert injected(run, "BeforeAgent") == "ctx"


# ----------------------------------------------------------------------------- the real daemon

PINNED = "Deploys always go through the staging cluster first"
RELEVANT = "Tests run with pytest -q from the repository root"


@pytest.mark.parametrize("agent", list(EVENTS))
def test_real_daemon_injects_memory(env: Env, daemon: Daemon, agent: str) -> None:
    ok_json(env, "remember", PINNED, "--pin")
    ok_json(env, "remember", RELEVANT, "--category", "pattern")
    ok_json(env, "remember", "The web client is built with pnpm, never npm")
    for event, (_, kind, reads_stdout) in EVENTS[agent].items():
        run = run_hook(env, payload(agent, event, env.project), "--agent", agent)
        if not reads_stdout:
            assert_silent(run)
        elif kind == "session_start":
            assert PINNED in injected(run, event)
        else:
            assert RELEVANT in injected(run, event)


@pytest.mark.parametrize("agent", list(EVENTS))
def test_real_daemon_remembers_from_the_prompt(env: Env, daemon: Daemon, agent: str) -> None:
    event = next(e for e, spec in EVENTS[agent].items() if spec[1] == "prompt")
    prompt = "remember: always run make lint before pushing"
    run = run_hook(env, payload(agent, event, env.project, prompt=prompt), "--agent", agent)
    assert run.code == 0 and run.stderr == b""
    if run.stdout:
        injected(run, event)
    contents = [e["content"] for e in ok_json(env, "list")["entries"]]
    assert any("always run make lint before pushing" in c for c in contents), contents


def test_hook_start_up_imports_almost_nothing_more() -> None:
    """The hook runs on every prompt: beyond what ``memctl`` loads anyway it imports only its own
    modules (and ``select``, json and struct), and no other command loads them or
    ``install_hooks`` (the wire client, ``memctl.zmtp``, is every command's transport). (What a
    hook's own process loads, without memctl.cli: tests/test_imports.py.)"""
    script = (
        "import sys, memctl.cli; before = set(sys.modules); import memctl.hook; "
        "print(*sorted(before & {'memctl.hook', 'memctl.minipack', 'memctl.install_hooks'}), '|', "
        "*sorted(set(sys.modules) - before))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    eager, added = out.stdout.split("|")
    assert eager.split() == []
    # json and struct (the standard library's C parts) came with pyzmq before the commands spoke
    # the wire protocol themselves.
    own = {"memctl.hook", "memctl.zmtp", "memctl.minipack", "select"}
    assert set(added.split()) <= own | {"json", "json.decoder", "json.encoder", "json.scanner",
                                        "_json", "struct", "_struct"}  # fmt: skip
