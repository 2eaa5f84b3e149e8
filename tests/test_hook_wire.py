"""The hook's own wire client (issue 12): ZMTP 3.1 written out (``memctl.zmtp``), a MessagePack
subset (``memctl.minipack``) and JSON through ``_json`` (``memctl.hook``), checked against what
they replace (msgspec's encoders, pyzmq's client) and against the real daemon's libzmq ROUTER;
peers that speak something else are small Unix-socket servers in the test."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BIN, Daemon, Env, ok_json, until
from memctl import hook, minipack, protocol, zmtp
from test_hook_contract import payload

DEADLINE_S = 30.0  # far past any answer: a test that reaches it has found a client that waits


def deadline() -> float:
    return time.monotonic() + DEADLINE_S


# ----------------------------------------------------------------------------- encoders

texts = st.text(max_size=300)
optional = st.none() | texts


@settings(max_examples=60, deadline=None)
@given(
    agent=st.sampled_from(["claude", "codex", "gemini"]),
    event=st.sampled_from(["session_start", "prompt", "pre_compact", "turn_end", "session_end"]),
    session_id=optional,
    transcript=optional,
    prompt=st.text(max_size=70_000) | st.sampled_from(["", "x" * 70_000]),
    source=optional,
    project=texts,
    explicit=st.booleans(),
)
def test_the_request_is_the_bytes_msgspec_sends(
    agent: str,
    event: str,
    session_id: str | None,
    transcript: str | None,
    prompt: str,
    source: str | None,
    project: str,
    explicit: bool,
) -> None:
    raw = {
        "session_id": session_id,
        "transcript_path": transcript,
        "prompt": prompt,
        "source": source,
    }
    fields = hook.translate(agent, event, raw, project)  # type: ignore[arg-type]
    fields["project_explicit"] = explicit
    fields["id"] = os.urandom(16).hex()
    assert hook.encode(fields) == protocol.encode(protocol.Hook(**fields))
    assert hook.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=70)
    | st.binary(max_size=300)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_minipack_reads_and_writes_what_msgspec_does(value: object) -> None:
    packed = msgspec.msgpack.encode(value)
    assert minipack.pack(value) == packed
    assert minipack.unpack(packed) == msgspec.msgpack.decode(packed)


def test_minipack_refuses_what_it_cannot_read() -> None:
    whole = minipack.pack({"text": "abc", "entries": ["a"]})
    for bad in (whole[:-1], whole + b"\x00", b"\xc1", b"\xd4\x01\x00", b"\xa2\xff\xfe", b""):
        with pytest.raises(minipack.UnpackError):
            minipack.unpack(bad)
    with pytest.raises(minipack.UnpackError):  # nesting past MAX_DEPTH, no RecursionError
        minipack.unpack(b"\x91" * 10_000 + b"\xc0")


def test_the_replies_hook_reads() -> None:
    """Ok with a HookResult, tokens included; an Error; a reply to another request; a result
    that is no HookResult (another daemon version) reads as nothing, as protocol.result_of
    refuses it."""
    tokens = protocol.TokenInfo(total=12, budget=400, tiers={"relevant": 12})
    result = protocol.HookResult(text="ctx", entries=["e1"], tokens=tokens)
    ok = protocol.encode(protocol.ok("r1", result))
    assert hook._text_of([ok], "r1") == "ctx"
    error = protocol.Error(id="r1", code=protocol.ErrorCode.NOT_FOUND, message="no project")
    error.previous_errors = [protocol.BackgroundError(timestamp=1.5, description="d")]
    assert hook._text_of([protocol.encode(error)], "r1") == ""
    with pytest.raises(hook._Foreign):
        hook._text_of([ok], "another id")
    with pytest.raises(hook._Foreign):
        hook._text_of([b"", ok], "r1")
    request = protocol.Hook(agent="claude", event="prompt")
    for result_fields in ({"text": 5}, {"text": "t", "tokens": {"total": "x"}}, {"entries": 1}):
        frame = protocol.encode(
            protocol.Ok(id="r1", result=msgspec.Raw(minipack.pack(result_fields)))
        )
        reply = protocol.decode_reply(frame)
        assert isinstance(reply, protocol.Ok)
        with pytest.raises(msgspec.ValidationError):
            protocol.result_of(request, reply)
        assert hook._text_of([frame], "r1") == ""


STDIN_CASES = [
    b'{"hook_event_name": "UserPromptSubmit", "prompt": "caf\\u00e9 \\ud83d\\ude00 \\t"}',
    b' \n{"a": [1, 2.5, -3e2, true, false, null, {"b": "\xc3\xa9"}]}\r\n',
    b'{"a": 1, "a": 2}',
    b'{"a": 123456789012345678901234567890}',
    b'"\\ud800"',  # a lone surrogate: msgspec refuses
    b'{"a": NaN}',
    b'{"a": 1e400}',
    b"\xef\xbb\xbf{}",  # a byte-order mark
    b"{} x",
    b'"a\tb"',  # a raw control character in a string
    b"\xff",
    b"",
    b"[" * 5000,
]


@pytest.mark.parametrize("raw", STDIN_CASES)
def test_stdin_json_reads_as_msgspec_reads_it(raw: bytes) -> None:
    try:
        expected: object = msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        expected = "refused"  # the old hook answered nothing on any of these
    try:
        got: object = hook.loads(raw)
    except (ValueError, StopIteration, RecursionError):
        got = "refused"
    assert got == expected


def test_stdout_is_the_bytes_msgspec_writes() -> None:
    text = "".join(map(chr, range(0x100))) + '\u2028\u2029\U0001f600 <entry id="x">a\\b</entry>'
    for event in ("UserPromptSubmit", "SessionStart", "BeforeAgent"):
        output = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
        assert hook.render(event, text) == msgspec.json.encode(output) + b"\n"


# ----------------------------------------------------------------------------- the real ROUTER


def test_handshake_and_round_trip_with_the_daemons_router(env: Env, daemon: Daemon) -> None:
    conn = zmtp.Connection(str(env.socket), deadline())
    try:
        conn.handshake()
        assert conn.peer[b"socket-type"] == b"ROUTER"  # libzmq's READY, read as it sent it
        hello = protocol.encode(protocol.Hello(id="h1"))
        conn.send_message([hello])
        [frame] = conn.recv_message()
    finally:
        conn.close()
    reply = minipack.unpack(frame)
    assert reply == msgspec.msgpack.decode(frame)
    assert (reply["status"], reply["id"], reply["result"]["protocol"]) == ("ok", "h1", 3)


def test_a_multipart_message_each_way(env: Env, daemon: Daemon) -> None:
    """A REQ-style envelope: the ROUTER answers with the empty delimiter frame and the reply,
    two frames with MORE on the first."""
    hello = protocol.encode(protocol.Hello(id="h2"))
    delimiter, frame = zmtp.request(str(env.socket), [b"", hello], deadline())
    assert delimiter == b"" and minipack.unpack(frame)["id"] == "h2"
    big = protocol.encode(protocol.Hello(id="h3", client_version="v" * 100))  # > 255: LONG
    [frame] = zmtp.request(str(env.socket), [big], deadline())
    assert minipack.unpack(frame)["id"] == "h3"


def test_hook_answers_byte_for_byte_as_the_pyzmq_path(env: Env, daemon: Daemon) -> None:
    """SessionStart and UserPromptSubmit, through ``memctl-hook``, ``memctl hook`` and the old
    path (``MEMCTL_HOOK_TRANSPORT=pyzmq``: argparse, msgspec, pyzmq). The daemon's answer moves
    while its first prompts are counted (access counts), so the paths are compared once two
    answers of the old path in a row agree, the new ones between them."""
    ok_json(env, "remember", "Deploys always go through the staging cluster first", "--pin")
    ok_json(
        env,
        "remember",
        'Tests run with "pytest -q" \\ from the root, é 😀',
        "--category",
        "pattern",
    )
    ok_json(env, "remember", "The web client is built with pnpm, never npm")
    old = {**env.environ(), "MEMCTL_HOOK_TRANSPORT": "pyzmq"}
    programs = {
        "old": ([str(BIN / "memctl"), "hook", "--agent", "claude"], old),
        "memctl hook": ([str(BIN / "memctl"), "hook", "--agent", "claude"], env.environ()),
        "memctl-hook": ([str(BIN / "memctl-hook"), "--agent", "claude"], env.environ()),
    }

    def outputs(event: str) -> list[bytes]:
        stdin = json.dumps(payload("claude", event, env.project, prompt="how do tests run?"))
        return [
            subprocess.run(
                argv, input=stdin.encode(), capture_output=True, env=environ, cwd=env.project
            ).stdout
            for argv, environ in (*programs.values(), programs["old"])
        ]

    for event in ("SessionStart", "UserPromptSubmit"):
        out = until(
            lambda event=event: (o := outputs(event))[0] and len(set(o)) == 1 and o,
            f"the three hook paths agree on {event}",
        )
        assert b'"hookEventName":"' + event.encode() in out[0]


# ----------------------------------------------------------------------------- other peers


class FakePeer:
    """A Unix-socket server in a thread: each connection is handed to ``serve``; it counts them."""

    def __init__(self, path: Path, serve: Callable[[socket.socket], None]) -> None:
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.connections = 0
        self._serve = serve
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            self.connections += 1
            with conn, contextlib.suppress(OSError):
                self._serve(conn)

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self._thread.join(timeout=DEADLINE_S)


@contextlib.contextmanager
def fake_peer(env: Env, serve: Callable[[socket.socket], None]) -> Iterator[FakePeer]:
    peer = FakePeer(env.socket, serve)
    try:
        yield peer
    finally:
        peer.close()


def read_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("client gone")
        data += chunk
    return data


def greets_with(greeting: bytes) -> Callable[[socket.socket], None]:
    def serve(conn: socket.socket) -> None:
        conn.sendall(greeting)
        conn.recv(1024)  # then waits for the client to give up
        conn.recv(1024)

    return serve


ZMTP2_GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x01" + b"\x06" + b"\x00\x00"  # rev 1, ROUTER
ZMTP4_GREETING = (
    b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x04\x00" + b"NULL".ljust(20, b"\x00") + bytes(32)
)


@pytest.mark.parametrize("greeting", [ZMTP2_GREETING, ZMTP4_GREETING], ids=["zmtp2", "zmtp4"])
def test_another_protocol_version_is_unexpected(env: Env, greeting: bytes) -> None:
    with fake_peer(env, greets_with(greeting)), pytest.raises(zmtp.Unexpected, match="major"):
        zmtp.request(str(env.socket), [b"x"], deadline())


def closes_mid_reply(conn: socket.socket) -> None:
    """A peer that completes the handshake as a ROUTER, takes the request and dies halfway
    through a reply frame."""
    read_exactly(conn, 64)
    conn.sendall(zmtp.GREETING)
    ready = zmtp.command(b"READY", zmtp.properties({b"Socket-Type": b"ROUTER"}))
    conn.sendall(zmtp.frame(ready, zmtp.COMMAND))
    read_exactly(conn, len(zmtp.READY))
    flags = read_exactly(conn, 1)[0]
    size = int.from_bytes(read_exactly(conn, 8 if flags & zmtp.LONG else 1))
    read_exactly(conn, size)
    conn.sendall(zmtp.frame(b"x" * 100)[:40])


def test_a_peer_that_closes_mid_reply_is_lost(env: Env) -> None:
    with fake_peer(env, closes_mid_reply), pytest.raises(zmtp.Lost):
        zmtp.request(str(env.socket), [b"request"], deadline())


def test_a_dead_peer_is_unreachable(env: Env) -> None:
    """The socket file is there, nobody listens (a daemon killed with its socket left)."""
    env.socket.parent.mkdir(parents=True, mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(env.socket))  # bound, never listening: connections are refused
    try:
        with pytest.raises(zmtp.Unreachable):
            zmtp.request(str(env.socket), [b"x"], deadline())
    finally:
        stale.close()
    with pytest.raises(zmtp.Unreachable):
        zmtp.request(str(env.root / "absent.sock"), [b"x"], deadline())


def run_hook(env: Env, *args: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    stdin = json.dumps(payload("claude", "UserPromptSubmit", env.project)).encode()
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "memctl-hook"), "--agent", "claude", *args],
        input=stdin,
        capture_output=True,
        env=env.environ(),
        cwd=env.project,
        timeout=2 * DEADLINE_S,
    )
    return proc, time.monotonic() - started


def test_hook_answers_nothing_at_once_when_the_peer_dies_or_is_dead(env: Env) -> None:
    """Exit 0 and nothing, without waiting out the budget (30 s here) and without trying pyzmq:
    the request was sent and the peer closed, or nobody listens."""
    with fake_peer(env, closes_mid_reply) as peer:
        proc, elapsed = run_hook(env, "--timeout", str(DEADLINE_S))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert peer.connections == 1 and elapsed < DEADLINE_S
    env.socket.unlink()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(env.socket))
    try:
        proc, elapsed = run_hook(env, "--timeout", str(DEADLINE_S))
    finally:
        stale.close()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert elapsed < DEADLINE_S


def test_hook_falls_back_to_pyzmq_on_an_unexpected_peer(env: Env) -> None:
    """A peer greeting as ZMTP 2: the hook asks again through pyzmq (a second connection), which
    gets nowhere either; exit 0, nothing, within the budget."""
    with fake_peer(env, greets_with(ZMTP2_GREETING)) as peer:
        proc, _ = run_hook(env, "--timeout", "0.5")
        connections = peer.connections
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert connections >= 2  # the wire client's, then libzmq's
