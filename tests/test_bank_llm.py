"""The optional LLM path of ``bank_process`` (``memoryd.banks.llm``) against a tiny local
OpenAI-compatible server: a valid answer is used as returned; every failure falls back to the
rules with a reason; the API key goes only into the Authorization header."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest
import zmq

from conftest import BIN, Daemon, memctl, ok_json
from memctl import protocol
from memoryd.banks.llm import LlmProcessor, process_content
from memoryd.banks.llm_prompt import SYSTEM_PROMPT
from memoryd.core.bank.router import ProcessedItem, route

NOW = datetime(2025, 4, 10, 14, 32, tzinfo=UTC)
KEY = "sk-test-4f1c9a0e7b2d"
TEXT = "We decided to use SQLite. Shipped the parser."
ITEMS = [
    {
        "target_file": "decisionLog.md",
        "operation_type": "append",
        "content": "## Decision: Use SQLite\n- **Date**: 2025-04-10\n- **Decision**: Use SQLite.",
        "metadata": {},
    },
    {
        "target_file": "progress.md",
        "operation_type": "complete_item",
        "content": "- [x] Shipped the parser — 2025-04-10",
        "metadata": {"section": "Completed", "item": "Shipped the parser"},
    },
]


def completion(content: str) -> bytes:
    return json.dumps(
        {"id": "x", "choices": [{"index": 0, "message": {"content": content}}]}
    ).encode()


@dataclass
class Received:
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Endpoint:
    """What the server answers next, and every request it received."""

    url: str = ""
    status: int = 200
    body: bytes = completion(json.dumps(ITEMS))
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.received.append(Received(self.path, list(self.headers.items()), body))
            if state.hang:
                state.release.wait(timeout=30)  # released by the teardown, not slept through
            try:
                self.send_response(state.status)
                for name, value in {"Content-Type": "application/json", **state.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(state.body)))
                self.end_headers()
                self.wfile.write(state.body)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def processor(url: str, timeout_s: float = 5.0, key: str | None = KEY) -> LlmProcessor:
    return LlmProcessor(url, "test-model", api_key=key, timeout_s=timeout_s)


def test_a_valid_answer_is_used_exactly_as_returned(endpoint: Endpoint) -> None:
    result = process_content(TEXT, processor(endpoint.url + "/"), NOW)
    assert result.source == "llm" and result.fallback_reason is None
    assert result.items == msgspec.convert(ITEMS, list[ProcessedItem])

    [request] = endpoint.received
    assert request.path == "/v1/chat/completions"
    body = json.loads(request.body)
    assert body["model"] == "test-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    assert TEXT in body["messages"][1]["content"]
    assert "2025-04-10T14:32:00Z" in body["messages"][1]["content"]


def test_the_api_key_is_only_in_the_authorization_header(endpoint: Endpoint) -> None:
    llm = processor(endpoint.url)
    assert llm.process(TEXT, NOW) is not None
    [request] = endpoint.received
    carrying = [name for name, value in request.headers if KEY in value]
    assert carrying == ["Authorization"]
    assert dict(request.headers)["Authorization"] == f"Bearer {KEY}"
    assert KEY.encode() not in request.body and KEY not in request.path
    assert KEY not in repr(llm) and "***" in repr(llm)


def test_no_key_sends_no_authorization_header(endpoint: Endpoint) -> None:
    assert processor(endpoint.url, key=None).process(TEXT, NOW) is not None
    assert "authorization" not in {name.lower() for name, _ in endpoint.received[0].headers}


def test_a_fenced_answer_is_accepted(endpoint: Endpoint) -> None:
    endpoint.body = completion("```json\n" + json.dumps(ITEMS) + "\n```")
    assert process_content(TEXT, processor(endpoint.url), NOW).source == "llm"


WRONG_SCHEMA = [{"file": "progress.md", "text": "Shipped the parser"}]
UNKNOWN_FILE = [{**ITEMS[1], "target_file": "notes.md"}]
HEADING = [{**ITEMS[1], "operation_type": "append_to_section", "content": "# Pwned"}]
NOT_JSON = "Sure! Here are the items: [target_file: progress.md"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (200, completion(NOT_JSON), "invalid_json: "),
        (200, b"<html>not a completion</html>", "invalid_response: "),
        (200, completion(json.dumps(WRONG_SCHEMA)), "schema: "),
        (200, completion(json.dumps(UNKNOWN_FILE)), "schema: Invalid enum value 'notes.md'"),
        (200, completion(json.dumps(HEADING)), "invalid_item: item 0: a line would open"),
        (200, completion("[]"), "empty: "),
        (500, b'{"error": "boom"}', "http_status: HTTP 500"),
    ],
    ids=[
        "invalid-json",
        "not-completion",
        "wrong-schema",
        "unknown-file",
        "heading",
        "empty",
        "500",
    ],
)
def test_a_bad_answer_falls_back_to_the_rules(
    endpoint: Endpoint, status: int, body: bytes, reason: str
) -> None:
    endpoint.status, endpoint.body = status, body
    llm = processor(endpoint.url)
    result = process_content(TEXT, llm, NOW)
    assert result.source == "rules"
    assert result.items == route(TEXT, NOW)
    assert result.fallback_reason is not None and result.fallback_reason.startswith(reason)
    assert KEY not in result.fallback_reason
    assert llm.process(TEXT, NOW) is None


def test_a_redirect_is_refused_and_not_followed(endpoint: Endpoint) -> None:
    endpoint.status, endpoint.body = 307, b""
    endpoint.headers = {"Location": endpoint.url + "/elsewhere"}
    result = process_content(TEXT, processor(endpoint.url), NOW)
    assert result.fallback_reason == "http_status: HTTP 307"
    assert [r.path for r in endpoint.received] == ["/v1/chat/completions"]


def test_a_hanging_endpoint_times_out_and_falls_back(endpoint: Endpoint) -> None:
    endpoint.hang = True  # until the teardown: the only answer before then is the timeout's
    result = process_content(TEXT, processor(endpoint.url, timeout_s=0.5), NOW)
    assert not endpoint.release.is_set()
    assert result.source == "rules" and result.items == route(TEXT, NOW)
    assert result.fallback_reason == "timeout: no complete answer within 0.5 s"


def test_a_refused_connection_falls_back() -> None:
    with socket.socket() as bound:  # bound, never listening: connecting is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}/v1"
        result = process_content(TEXT, processor(url), NOW)
    assert result.source == "rules" and result.items == route(TEXT, NOW)
    assert result.fallback_reason is not None
    assert result.fallback_reason.startswith("connection: ConnectionRefusedError")


def test_loopback_endpoints_ignore_proxy_settings(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert process_content(TEXT, processor(endpoint.url), NOW).source == "llm"


def test_without_an_llm_or_text_the_rules_answer(endpoint: Endpoint) -> None:
    assert process_content(TEXT, None, NOW) == process_content(TEXT, None, NOW)
    result = process_content(TEXT, None, NOW)
    assert (result.source, result.fallback_reason, result.items) == (
        "rules",
        None,
        route(TEXT, NOW),
    )
    blank = process_content("  \n", processor(endpoint.url), NOW)
    assert (blank.source, blank.items, blank.fallback_reason) == ("rules", [], None)
    assert endpoint.received == []  # blank text never reaches the endpoint


def _holding_llm_daemon(endpoint: Endpoint, env) -> Daemon:
    """A daemon whose LLM endpoint holds every answer until released (and whose LLM timeout,
    60 s, is far longer than any test waits), with an initialised bank."""
    endpoint.hang = True
    daemon = Daemon(
        env,
        {
            "MEMORYD_BANKS__LLM_BASE_URL": endpoint.url,
            "MEMORYD_BANKS__LLM_MODEL": "m",
            "MEMORYD_BANKS__LLM_TIMEOUT_S": "60",
        },
    ).start()
    try:
        ok_json(env, "bank", "init")
    except BaseException:
        daemon.stop()
        raise
    return daemon


def _until_asked(endpoint: Endpoint, wait: Callable[[], object]) -> None:
    """Until the daemon has asked the LLM; ``wait`` waits a little on the client's side."""
    deadline = time.monotonic() + 30
    while not endpoint.received and time.monotonic() < deadline:
        wait()
    assert endpoint.received, "the daemon never asked the LLM"


@contextlib.contextmanager
def _applying(env) -> Iterator[subprocess.Popen[str]]:
    """``memctl bank process --apply`` running in the background, its text already sent."""
    process = subprocess.Popen(
        [str(BIN / "memctl"), "--json", "bank", "process", "--apply"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env.environ(),
        cwd=env.project,
    )
    try:
        assert process.stdin is not None
        process.stdin.write(TEXT)
        process.stdin.close()
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _briefly(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=0.05)


def _finished(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.wait(timeout=60)
    assert process.stdout is not None and process.stderr is not None
    return process.stdout.read(), process.stderr.read()


def test_daemon_serves_every_other_client_while_the_llm_thinks(endpoint: Endpoint, env) -> None:
    """The LLM is asked from a worker thread: while the endpoint holds its answer, other
    requests are answered (with the owner thread blocked, ``memctl status`` would give up at its
    own short timeout, well before the 60 s the daemon allows the LLM)."""
    daemon = _holding_llm_daemon(endpoint, env)
    try:
        with _applying(env) as process:
            _until_asked(endpoint, lambda: _briefly(process))
            status = memctl(env, "status")
            assert status.code == 0, status.stderr
            assert "# Progress" in ok_json(env, "bank", "read", "progress.md")["content"]
            assert process.poll() is None  # still waiting for its answer
            endpoint.release.set()
            out, err = _finished(process)
        assert process.returncode == 0, err
        result = json.loads(out)
        assert result["source"] == "llm" and result["fallback_reason"] is None
        assert result["applied"] == ["decisionLog.md", "progress.md"]
        assert "Use SQLite" in ok_json(env, "bank", "read", "decisionLog.md")["content"]
    finally:
        daemon.stop()


def test_stop_does_not_wait_for_a_hanging_llm(endpoint: Endpoint, env) -> None:
    """SIGTERM while the endpoint holds its answer: the daemon exits at once, and the client
    waiting on the LLM is told nothing was applied (the rules' fallback reason says why)."""
    daemon = _holding_llm_daemon(endpoint, env)
    try:
        with _applying(env) as process:
            _until_asked(endpoint, lambda: _briefly(process))
            assert daemon.stop() == 0  # within the harness's stop timeout, not the LLM's 60 s
            out, err = _finished(process)
    finally:
        daemon.stop()  # a no-op once stopped; stops it if an assertion came first
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["applied"] == [] and "timeout" in result["fallback_reason"]


def _dealer(ctx: zmq.Context, env) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect("ipc://" + str(env.socket))
    return sock


def test_retry_of_a_request_waiting_on_the_llm_is_answered_not_run_again(
    endpoint: Endpoint, env
) -> None:
    """A client that gave up waiting sends the same request again (same id, new socket): the
    parked request answers the retry, and the LLM is asked, and the bank changed, once."""
    daemon = _holding_llm_daemon(endpoint, env)
    ctx = zmq.Context()
    try:
        request = protocol.BankProcess(
            id=uuid.uuid4().hex, project=str(env.project), content=TEXT, apply=True
        )
        frame = protocol.encode(request)
        first, retry = _dealer(ctx, env), _dealer(ctx, env)
        first.send(frame)
        _until_asked(endpoint, lambda: first.poll(50))  # nothing comes back yet
        retry.send(frame)
        assert memctl(env, "status").code == 0  # the retry is taken in; the daemon serves on
        endpoint.release.set()
        assert retry.poll(30_000), "the retry got no answer"
        reply = protocol.decode_reply(retry.recv())
        assert isinstance(reply, protocol.Ok), reply
        assert protocol.result_of(request, reply).applied == ["decisionLog.md", "progress.md"]
        assert not first.poll(200)  # the answer went to the retry only
        log = ok_json(env, "bank", "read", "decisionLog.md")["content"]
        assert log.count("## Decision: Use SQLite") == 1
        assert len(endpoint.received) == 1
        first.close()
        retry.close()
    finally:
        ctx.term()
        daemon.stop()


def test_many_requests_waiting_on_the_llm_are_each_answered_once(endpoint: Endpoint, env) -> None:
    daemon = _holding_llm_daemon(endpoint, env)
    ctx = zmq.Context()
    try:
        sockets = []
        for n in range(24):  # more than any internal bound would hold
            request = protocol.BankProcess(
                id=uuid.uuid4().hex, project=str(env.project), content=f"{TEXT} ({n})"
            )
            sock = _dealer(ctx, env)
            sock.send(protocol.encode(request))
            sockets.append(sock)
        _until_asked(endpoint, lambda: sockets[0].poll(50))
        assert memctl(env, "status").code == 0  # 24 parked requests, and the daemon serves on
        endpoint.release.set()
        for sock in sockets:
            assert sock.poll(60_000), "a request got no answer"
            reply = protocol.decode_reply(sock.recv())
            assert isinstance(reply, protocol.Ok), reply
            assert protocol.result_of(request, reply).source == "llm", reply
            sock.close()
        assert len(endpoint.received) == 24  # each asked once: none re-run, none dropped
    finally:
        ctx.term()
        daemon.stop()
