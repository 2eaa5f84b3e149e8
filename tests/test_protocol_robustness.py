"""Protocol robustness against the real daemon, spoken to over a raw ZeroMQ socket.

Acceptance: malformed frames, unknown ops, oversized messages and wrong field types get error
replies (or are dropped when unanswerable) and the daemon keeps serving; a property test over
random bytes proves it.

Nothing here sleeps for a fixed time. Waiting is always a ZeroMQ poll with a timeout; the usual
way to know the daemon is done with everything sent before is a *sentinel*: a ``hello`` with a
unique id sent on the same socket. The daemon serves one connection's messages in order on one
thread, so every reply to what came before arrives ahead of the sentinel's ``Ok``.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from conftest import Daemon, Env, make_env, memctl
from memctl import protocol as p

REPLY_TIMEOUT_MS = 10_000  # generous: only ever reached when something is wrong
SILENCE_MS = 500  # how long "no reply" is waited for, where no reply is the expected outcome

ALL_OPS = sorted(str(t.__struct_config__.tag) for t in p.REQUEST_TYPES)
GENERATED_OPS = [op for op in ALL_OPS if op != "shutdown"]
# Only these ops are sent with the real project: reads, and remember (which just adds entries
# to the temporary project). Every other op (forget, pin, import, any op added later ...) is
# still generated, so its schema validation is exercised, but names a relative project path,
# which the daemon refuses before touching anything.
REAL_PROJECT_OPS = (
    "hello",
    "status",
    "remember",
    "search",
    "list",
    "export",
    "audit_tail",
    "check",
)
PROJECT = "<project>"  # placeholder in generated dicts, replaced by the test's project path


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def zctx() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def endpoint(env: Env) -> str:
    return "ipc://" + str(env.socket)


def connect(ctx: zmq.Context[Any], env: Env, kind: int = zmq.DEALER) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, REPLY_TIMEOUT_MS)
    sock.setsockopt(zmq.SNDTIMEO, REPLY_TIMEOUT_MS)
    sock.connect(endpoint(env))
    return sock


def pack(obj: Any) -> bytes:
    return msgspec.msgpack.encode(obj)


def daemon_alive(daemon: Daemon) -> bool:
    return daemon.proc is not None and daemon.proc.poll() is None


def poll_reply(sock: zmq.Socket[Any], daemon: Daemon, timeout_ms: int) -> bool:
    """Poll for a reply in short slices, giving up early if the daemon has died."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left = int((deadline - time.monotonic()) * 1000)
        if sock.poll(max(0, min(left, 100)), zmq.POLLIN):
            return True
        if left <= 0 or not daemon_alive(daemon):
            return bool(sock.poll(0, zmq.POLLIN))


def recv_reply(
    sock: zmq.Socket[Any], daemon: Daemon, timeout_ms: int = REPLY_TIMEOUT_MS
) -> p.Ok | p.Error:
    """The next reply on ``sock`` (one frame after any empty delimiter), decoded. Fails at once
    if the daemon process dies while waiting."""
    if not poll_reply(sock, daemon, timeout_ms):
        alive = daemon_alive(daemon)
        raise AssertionError(
            f"no reply within {timeout_ms} ms (daemon alive: {alive})\n{daemon.log()}"
        )
    frames = sock.recv_multipart()
    while frames and frames[0] == b"":
        frames = frames[1:]
    assert len(frames) == 1, f"expected one reply frame, got {frames!r}"
    return p.decode_reply(frames[0])


def ask(sock: zmq.Socket[Any], daemon: Daemon, frame: bytes | list[bytes]) -> p.Ok | p.Error:
    if isinstance(frame, list):
        sock.send_multipart(frame)
    else:
        sock.send(frame)
    return recv_reply(sock, daemon)


def assert_silent(sock: zmq.Socket[Any], timeout_ms: int = SILENCE_MS) -> None:
    if sock.poll(timeout_ms, zmq.POLLIN):
        raise AssertionError(f"unexpected reply: {sock.recv_multipart()!r}")


def sync(sock: zmq.Socket[Any], daemon: Daemon) -> list[p.Ok | p.Error]:
    """Send a sentinel hello; return every reply that arrived before its ``Ok``."""
    sentinel = "sentinel-" + uuid.uuid4().hex
    sock.send(p.encode(p.Hello(id=sentinel)))
    before: list[p.Ok | p.Error] = []
    while True:
        reply = recv_reply(sock, daemon)
        if reply.id == sentinel:
            assert isinstance(reply, p.Ok), f"sentinel hello failed: {reply!r}"
            assert p.result_of(p.Hello(), reply).protocol == p.PROTOCOL_VERSION
            return before
        before.append(reply)


def assert_error(reply: p.Ok | p.Error, code: p.ErrorCode, request_id: Any) -> p.Error:
    assert isinstance(reply, p.Error), f"expected Error {code}, got {reply!r}"
    assert reply.code == code, reply
    assert reply.id == request_id and type(reply.id) is type(request_id), reply
    return reply


def assert_serving(ctx: zmq.Context[Any], env: Env, daemon: Daemon) -> None:
    """A fresh client's hello is answered, and the process is alive."""
    sock = connect(ctx, env)
    try:
        reply = ask(sock, daemon, p.encode(p.Hello(id="after")))
        assert isinstance(reply, p.Ok) and reply.id == "after", reply
    finally:
        sock.close(linger=0)
    assert daemon_alive(daemon), daemon.log()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, list[Daemon]]]:
    """One daemon for the module: a daemon per case cost more than the cases (~60 s of a
    worker). Each case leaves it serving, which most of them assert; the one case that counts
    what the daemon did from its start has its own (``own_daemon``)."""
    shared_env = make_env(tmp_path_factory.mktemp("robustness"))
    holder = [Daemon(shared_env).start()]
    yield shared_env, holder
    holder[0].stop()
    shutil.rmtree(shared_env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def env(shared: tuple[Env, list[Daemon]]) -> Env:
    return shared[0]


@pytest.fixture
def daemon(shared: tuple[Env, list[Daemon]]) -> Daemon:
    """The module's daemon; one that died in an earlier case (which failed then) is replaced,
    so that one failure does not fail every case after it."""
    shared_env, holder = shared
    if not daemon_alive(holder[0]):
        holder[0].stop()  # reaps it and closes its log
        holder[0] = Daemon(shared_env).start()
    return holder[0]


@pytest.fixture
def own_env(tmp_path: Path) -> Iterator[Env]:
    e = make_env(tmp_path)
    yield e
    shutil.rmtree(e.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def own_daemon(own_env: Env) -> Iterator[Daemon]:
    d = Daemon(own_env).start()
    yield d
    d.stop()


@pytest.fixture
def sock(zctx: zmq.Context[Any], env: Env, daemon: Daemon) -> Iterator[zmq.Socket[Any]]:
    s = connect(zctx, env)
    yield s
    s.close(linger=0)


@pytest.fixture(autouse=True)
def _reap_dead_daemon(daemon: Daemon) -> Iterator[None]:
    """Every test here runs against a daemon. If it died during the test (which has then failed
    already), reap it: the ``daemon`` fixture only stops a live process and would leave its log
    file open, a ResourceWarning that this suite's filterwarnings turns into an error in some
    later, unrelated test."""
    yield
    if daemon.proc is not None and daemon.proc.poll() is not None:
        daemon.stop()


# --------------------------------------------------------------------------- explicit cases


@pytest.mark.parametrize(
    "frame",
    [b"\xc1", b"not msgpack at all", b"\x82\xa2op", b"\xff\xfe\x00garbage"],
    ids=["reserved-byte", "text", "truncated-map", "bytes"],
)
def test_non_msgpack_frame_is_bad_request_without_id(sock, daemon, zctx, env, frame):
    reply = assert_error(ask(sock, daemon, frame), p.ErrorCode.BAD_REQUEST, None)
    assert "MessagePack" in reply.message, reply.message
    assert_serving(zctx, env, daemon)


def test_empty_frame_is_bad_request(sock, daemon, zctx, env):
    assert_error(ask(sock, daemon, b""), p.ErrorCode.BAD_REQUEST, None)
    assert_serving(zctx, env, daemon)


@pytest.mark.parametrize(
    "value",
    [["op", "hello"], [], 42, -1, None, "hello", 1.5, True, b"hello"],
    ids=["list", "empty-list", "int", "negative", "nil", "str", "float", "bool", "bin"],
)
def test_msgpack_that_is_not_a_map_is_bad_request(sock, daemon, zctx, env, value):
    reply = assert_error(ask(sock, daemon, pack(value)), p.ErrorCode.BAD_REQUEST, None)
    assert "map" in reply.message, reply.message
    assert_serving(zctx, env, daemon)


def test_unknown_op_is_bad_request_naming_the_op(sock, daemon, zctx, env):
    reply = ask(sock, daemon, pack({"op": "frobnicate", "v": p.PROTOCOL_VERSION, "id": 7}))
    reply = assert_error(reply, p.ErrorCode.BAD_REQUEST, 7)
    assert "unknown op" in reply.message and "frobnicate" in reply.message, reply.message
    assert_serving(zctx, env, daemon)


def test_unknown_op_name_is_truncated_in_the_message(sock, daemon):
    reply = ask(sock, daemon, pack({"op": "x" * 10_000, "id": "long"}))
    reply = assert_error(reply, p.ErrorCode.BAD_REQUEST, "long")
    assert len(reply.message) <= 500


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"op": "remember", "id": "abc", "content": 123}, "$.content"),
        ({"op": "remember", "id": "abc", "content": "x", "tags": "not-a-list"}, "$.tags"),
        ({"op": "remember", "id": "abc", "content": "x", "pin": "yes"}, "$.pin"),
        ({"op": "search", "id": "abc", "query": "q", "k": "five"}, "$.k"),
        ({"op": "search", "id": "abc", "query": "q", "k": 0}, "$.k"),
        ({"op": "list", "id": "abc", "status": "bogus"}, "$.status"),
        ({"op": "forget", "id": "abc", "target": ""}, "$.target"),
        ({"op": "hello", "id": "abc", "project": 5}, "$.project"),
    ],
    ids=[
        "content-int",
        "tags-str",
        "pin-str",
        "k-str",
        "k-zero",
        "status-enum",
        "target-empty",
        "project-int",
    ],
)
def test_wrong_field_type_is_bad_request_with_the_id(sock, daemon, zctx, env, request_, field):
    request_ = {"v": p.PROTOCOL_VERSION, "project": str(env.project), **request_}
    reply = assert_error(ask(sock, daemon, pack(request_)), p.ErrorCode.BAD_REQUEST, "abc")
    assert field in reply.message, reply.message  # names the offending field
    assert_serving(zctx, env, daemon)


@pytest.mark.parametrize("bad_id", [[1], {"a": 1}, 1.5, None, -1, "x" * 129])
def test_invalid_id_is_not_echoed_unless_int_or_str(sock, daemon, bad_id):
    reply = ask(sock, daemon, pack({"op": "hello", "v": p.PROTOCOL_VERSION, "id": bad_id}))
    expected = bad_id if isinstance(bad_id, int | str) else None
    assert_error(reply, p.ErrorCode.BAD_REQUEST, expected)


def test_missing_required_field_is_bad_request(sock, daemon, zctx, env):
    reply = ask(
        sock,
        daemon,
        pack({"op": "remember", "v": p.PROTOCOL_VERSION, "id": 8, "project": str(env.project)}),
    )
    reply = assert_error(reply, p.ErrorCode.BAD_REQUEST, 8)
    assert "missing" in reply.message and "content" in reply.message, reply.message
    assert_serving(zctx, env, daemon)


def test_missing_op_is_bad_request(sock, daemon):
    reply = assert_error(
        ask(sock, daemon, pack({"v": p.PROTOCOL_VERSION, "id": 9})), p.ErrorCode.BAD_REQUEST, 9
    )
    assert "'op'" in reply.message, reply.message


@pytest.mark.parametrize("op", [5, ["hello"], None])
def test_op_of_the_wrong_type_is_bad_request(sock, daemon, op):
    assert_error(
        ask(sock, daemon, pack({"op": op, "v": p.PROTOCOL_VERSION, "id": 10})),
        p.ErrorCode.BAD_REQUEST,
        10,
    )


@pytest.mark.parametrize(
    ("version", "side"),
    [(999, "older"), (0, "newer"), (p.PROTOCOL_VERSION + 1, "older"), (1, "newer")],
)
def test_other_protocol_version_is_version_mismatch(sock, daemon, zctx, env, version, side):
    reply = ask(sock, daemon, pack({"op": "hello", "v": version, "id": 11}))
    reply = assert_error(reply, p.ErrorCode.VERSION_MISMATCH, 11)
    assert f"protocol {version}" in reply.message and side in reply.message, reply.message
    assert_serving(zctx, env, daemon)


def test_version_of_the_wrong_type_is_bad_request(sock, daemon):
    assert_error(
        ask(sock, daemon, pack({"op": "hello", "v": "1", "id": 12})), p.ErrorCode.BAD_REQUEST, 12
    )


def test_two_payload_frames_are_bad_request(sock, daemon, zctx, env):
    hello = p.encode(p.Hello(id=13))
    reply = assert_error(ask(sock, daemon, [hello, hello]), p.ErrorCode.BAD_REQUEST, None)
    assert "one message frame" in reply.message and "2" in reply.message, reply.message
    reply = assert_error(ask(sock, daemon, [b"x", b"y", b"z"]), p.ErrorCode.BAD_REQUEST, None)
    assert "one message frame" in reply.message and "3" in reply.message, reply.message
    # The same socket goes on being served normally.
    assert sync(sock, daemon) == []
    assert_serving(zctx, env, daemon)


def test_req_socket_gets_replies_through_its_delimiter(zctx, env, daemon):
    req = connect(zctx, env, zmq.REQ)
    try:
        reply = ask(req, daemon, p.encode(p.Hello(id="req-1")))
        assert isinstance(reply, p.Ok) and reply.id == "req-1", reply
        assert p.result_of(p.Hello(), reply).protocol == p.PROTOCOL_VERSION
        # Garbage from a REQ client is answered too (or its REQ state machine would be stuck) ...
        assert_error(ask(req, daemon, b"\xc1"), p.ErrorCode.BAD_REQUEST, None)
        # ... and so is a REQ request carrying two payload frames.
        assert_error(ask(req, daemon, [b"a", b"b"]), p.ErrorCode.BAD_REQUEST, None)
        reply = ask(req, daemon, p.encode(p.Hello(id="req-2")))
        assert isinstance(reply, p.Ok) and reply.id == "req-2", reply
    finally:
        req.close(linger=0)


def test_unknown_fields_in_a_valid_request_are_ignored(sock, daemon):
    request = {"op": "hello", "v": p.PROTOCOL_VERSION, "id": 14, "client_version": "9.9"}
    extra = {"future": {"nested": [1, 2, {"x": None}]}, "flag": True, "blob": b"\x00\x01"}
    frame = pack(request | extra)
    reply = ask(sock, daemon, frame)
    assert isinstance(reply, p.Ok) and reply.id == 14, reply
    assert p.result_of(p.Hello(), reply).protocol == p.PROTOCOL_VERSION


@pytest.mark.parametrize("depth", [5_000, 3_000_000])
@pytest.mark.parametrize(
    "field",
    ["id", "future", "client_version"],
)
def test_deeply_nested_msgpack_is_rejected_not_fatal(sock, daemon, zctx, env, field, depth):
    """Nested one-element arrays, a few kilobytes or 3 MB (3 million deep, under the 4 MiB
    frame limit): msgspec raises ``RecursionError`` (not a ``DecodeError``) on them, which must
    still become an error reply that says what is wrong: too deep, or the field whose type is
    wrong. On main both said the frame had no valid 'op' or was not a map."""
    nested = b"\x91" * depth + b"\x01"
    body = {"op": "hello", "v": p.PROTOCOL_VERSION, "id": 15}
    head = pack({k: v for k, v in body.items() if k != field})
    # Append one more key to the map: bump the fixmap count and add key + nested value.
    frame = bytes([head[0] + 1]) + head[1:] + pack(field) + nested
    assert len(frame) < p.MAX_MESSAGE_BYTES
    reply = ask(sock, daemon, frame)
    assert isinstance(reply, p.Error) and reply.code == p.ErrorCode.BAD_REQUEST, reply
    if field == "future":  # a field no request has: only its depth is wrong
        assert reply.message == "malformed request: nested too deeply to read", reply
    else:
        assert f"got `array` - at `$.{field}`" in reply.message, reply
    assert_serving(zctx, env, daemon)


@pytest.mark.parametrize(
    ("frame", "request_id"),
    [
        (b"\x83\xa2op\xa5h\x96llo\xa1v\x01\xa2id\x15", 21),  # in the op
        (b"\x83\xa2op\xa5hello\xa1v\x01\xa2id\xa3\xff\xfe\xfd", None),  # in the id
        (b"\x83\xa2op\xa5hello\xa2id\x15\xaeclient_version\xa2\xc3\x28", 21),  # in a str field
    ],
    ids=["op", "id", "field"],
)
def test_invalid_utf8_in_a_string_is_bad_request(sock, daemon, zctx, env, frame, request_id):
    """A MessagePack str that is not UTF-8: msgspec raises ``UnicodeDecodeError`` (not a
    ``DecodeError``) on it, which must still become an error reply."""
    reply = ask(sock, daemon, frame)
    assert isinstance(reply, p.Error) and reply.code == p.ErrorCode.BAD_REQUEST, reply
    assert reply.id in (request_id, None), reply  # the id is echoed when it can be read
    assert_serving(zctx, env, daemon)


def test_invalid_utf8_where_it_is_never_decoded_is_harmless(sock, daemon):
    # In a map key, and in the value of an unknown (skipped) field, msgspec never decodes it.
    version = bytes([p.PROTOCOL_VERSION])  # a positive fixint
    frame = b"\x84\xa2op\xa5hello\xa1v" + version + b"\xa2id\x16\xa3\xff\xfe\xfd\xa2\xc3\x28"
    reply = ask(sock, daemon, frame)
    assert isinstance(reply, p.Ok) and reply.id == 22, reply


# --------------------------------------------------------------------------- sizes


def test_frame_over_the_limit_is_dropped_and_the_daemon_keeps_serving(sock, daemon, zctx, env):
    frame = pack(
        {"op": "hello", "v": p.PROTOCOL_VERSION, "id": 16, "pad": "x" * p.MAX_MESSAGE_BYTES}
    )
    assert len(frame) > p.MAX_MESSAGE_BYTES
    sock.send(frame)
    # ZeroMQ's MAXMSGSIZE drops it (and the connection) before the daemon sees it: no reply.
    assert_silent(sock)
    # Not even a late one: the same socket reconnects, and its sentinel hello is the first
    # thing answered.
    assert sync(sock, daemon) == []
    assert_serving(zctx, env, daemon)


def test_frame_of_exactly_the_limit_is_served(sock, daemon):
    def frame_with(pad: int) -> bytes:
        return pack({"op": "hello", "v": p.PROTOCOL_VERSION, "id": 17, "pad": "x" * pad})

    overhead = len(frame_with(100_000)) - 100_000  # str32 header from here on
    frame = frame_with(p.MAX_MESSAGE_BYTES - overhead)
    assert len(frame) == p.MAX_MESSAGE_BYTES
    reply = ask(sock, daemon, frame)
    assert isinstance(reply, p.Ok) and reply.id == 17, reply


def test_one_byte_over_the_limit_is_dropped(sock, daemon, zctx, env):
    frame = b"\xc1" * (p.MAX_MESSAGE_BYTES + 1)
    sock.send(frame)
    assert_silent(sock)
    assert sync(sock, daemon) == []
    assert_serving(zctx, env, daemon)


def test_content_over_500_chars_is_too_large(sock, daemon, env):
    project = str(env.project)
    reply = ask(sock, daemon, p.encode(p.Remember(id="big", project=project, content="a" * 501)))
    reply = assert_error(reply, p.ErrorCode.TOO_LARGE, "big")
    assert "501" in reply.message and "500" in reply.message, reply.message
    # The boundary itself is accepted.
    reply = ask(sock, daemon, p.encode(p.Remember(id="fits", project=project, content="b" * 500)))
    assert isinstance(reply, p.Ok) and reply.id == "fits", reply
    # Over the schema's own cap it is rejected before any handler runs.
    frame = pack(
        {
            "op": "remember",
            "v": p.PROTOCOL_VERSION,
            "id": "huge",
            "project": project,
            "content": "c" * 65_537,
        }
    )
    reply = assert_error(ask(sock, daemon, frame), p.ErrorCode.BAD_REQUEST, "huge")
    assert "$.content" in reply.message, reply.message


def test_query_over_the_schema_max_is_bad_request(sock, daemon, env):
    project = str(env.project)
    frame = pack(
        {
            "op": "search",
            "v": p.PROTOCOL_VERSION,
            "id": "q",
            "project": project,
            "query": "q" * 8_193,
        }
    )
    reply = assert_error(ask(sock, daemon, frame), p.ErrorCode.BAD_REQUEST, "q")
    assert "$.query" in reply.message, reply.message
    ok = ask(sock, daemon, p.encode(p.Search(id="q-max", project=project, query="q" * 8_192)))
    assert isinstance(ok, p.Ok) and ok.id == "q-max", ok


# --------------------------------------------------------------------------- property tests


def _is_shutdown(frame: bytes) -> bool:
    try:
        return isinstance(p.decode_request(frame), p.Shutdown)
    except Exception:
        return False


class _IdOnly(msgspec.Struct):
    id: msgspec.Raw = msgspec.Raw(b"\xc0")


def _best_effort_id(frame: bytes) -> Any:
    """The frame's top-level ``id`` if it is an int or a str that can be read, else None."""
    try:
        value = msgspec.msgpack.decode(msgspec.msgpack.decode(frame, type=_IdOnly).id)
    except Exception:
        return None
    return value if isinstance(value, int | str) else None


def _oracle(frame: bytes) -> tuple[set[p.ErrorCode] | None, list[Any]]:
    """What the daemon must answer: (allowed error codes, or None for "Ok or any error but
    internal or version_mismatch"), and the ids the reply may carry. Whatever makes the
    schema's decoder raise (whichever exception it is) must be answered with bad_request,
    carrying the request's id if it could be read (None is always acceptable then)."""
    try:
        request = p.decode_request(frame)
    except Exception:
        return {p.ErrorCode.BAD_REQUEST}, [None, _best_effort_id(frame)]
    if request.v != p.PROTOCOL_VERSION:
        return {p.ErrorCode.VERSION_MISMATCH}, [request.id]
    return None, [request.id]


class Link:
    """The one DEALER connection all examples of a property test share.

    If an example kills the daemon, that example fails (no sentinel reply, daemon dead). The
    next example then starts a fresh daemon and socket, so Hypothesis goes on shrinking against
    a live daemon and reports the smallest frame that kills it, not an empty frame sent to a
    corpse."""

    def __init__(self, ctx: zmq.Context[Any], env: Env, daemon: Daemon) -> None:
        self.ctx, self.env, self.daemon = ctx, env, daemon
        self.sock = connect(ctx, env)
        self.restarts = 0

    def check(self, frame: bytes) -> None:
        if not daemon_alive(self.daemon):
            self.sock.close(linger=0)
            self.daemon.stop()
            self.daemon.start()
            self.sock = connect(self.ctx, self.env)
            self.restarts += 1
        codes, ids = _oracle(frame)
        self.sock.send(frame)
        replies = sync(self.sock, self.daemon)  # the sentinel hello after it must get Ok
        # A single frame is always answerable, so it is answered: exactly once.
        assert len(replies) == 1, f"expected one reply to {frame!r}, got {replies!r}"
        reply = replies[0]
        outcome = "ok" if isinstance(reply, p.Ok) else reply.code.value
        event(f"{'rejected' if codes == {p.ErrorCode.BAD_REQUEST} else 'decoded'}, reply {outcome}")
        assert any(reply.id == i and type(reply.id) is type(i) for i in ids), (frame, reply, ids)
        if codes is None:
            never = (p.ErrorCode.INTERNAL, p.ErrorCode.VERSION_MISMATCH)
            assert isinstance(reply, p.Ok) or reply.code not in never, (frame, reply)
        else:
            assert isinstance(reply, p.Error) and reply.code in codes, (frame, reply)
        assert daemon_alive(self.daemon), self.daemon.log()

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def link(zctx: zmq.Context[Any], env: Env, daemon: Daemon) -> Iterator[Link]:
    lk = Link(zctx, env, daemon)
    yield lk
    lk.close()


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY_SETTINGS
@given(frame=st.binary(max_size=2048))
def test_random_bytes_never_break_the_daemon(link, frame):
    assume(not _is_shutdown(frame))
    link.check(frame)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nine times in ten a well-typed value, else anything: so that a fair share of the
    generated requests decodes and reaches a handler, and the rest fails validation."""
    return st.integers(0, 9).flatmap(lambda n: _values if n == 0 else valid)


_FIELDS = {
    "op": _mostly(
        st.sampled_from(GENERATED_OPS) | st.sampled_from(GENERATED_OPS) | st.text(max_size=20)
    ),
    "v": _mostly(st.one_of(st.just(p.PROTOCOL_VERSION), st.integers(-2, 1000))),
    "id": _mostly(st.one_of(st.integers(0, 2**63 - 1), st.text(max_size=140))),
    "project": _mostly(st.just(PROJECT)),
    "content": _mostly(st.text(max_size=600)),
    "query": _mostly(st.text(max_size=200)),
    "k": _mostly(st.integers(-5, 20_000)),
    "target": _mostly(st.text(max_size=40)),
}
request_dicts = st.one_of(
    st.fixed_dictionaries(
        {"op": _FIELDS["op"]}, optional={k: v for k, v in _FIELDS.items() if k != "op"}
    ),
    st.fixed_dictionaries({}, optional=_FIELDS),
)


def _materialize(request: dict[str, Any], project: str) -> dict[str, Any]:
    request = dict(request)
    if request.get("project") == PROJECT:
        request["project"] = project if request.get("op") in REAL_PROJECT_OPS else "not/absolute"
    return request


@PROPERTY_SETTINGS
@given(request=request_dicts)
def test_random_requests_never_break_the_daemon(link, env, request):
    frame = pack(_materialize(request, str(env.project)))
    assume(not _is_shutdown(frame))
    link.check(frame)


@st.composite
def corrupted_frames(draw: st.DrawFn) -> bytes:
    """A valid request frame, then truncated, or with bytes overwritten or inserted: the
    near-misses that random bytes almost never produce."""
    request = draw(
        st.sampled_from([
            p.Hello(id=1, client_version="0.1"),
            p.StatusRequest(id="s" * 20, project=PROJECT),
            p.Remember(id="r" * 20, project=PROJECT, content="note", tags=["t"], file_paths=["a"]),
            p.Search(id=3, project=PROJECT, query="note", k=3, files=["a.py"]),
            p.ListEntries(id=4, project=PROJECT, category="decision", limit=5),
            p.AuditTail(id=5, project=PROJECT, n=2),
            p.Export(id=6, project=PROJECT),
        ])
    )  # fmt: skip
    frame = bytearray(p.encode(request))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["truncate", "overwrite", "insert"]))
        at = draw(st.integers(0, max(0, len(frame) - 1)))
        if how == "truncate":
            del frame[at:]
        elif how == "overwrite" and frame:
            frame[at] = draw(st.integers(0, 255))
        else:
            frame[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(frame)


@PROPERTY_SETTINGS
@given(frame=corrupted_frames())
def test_corrupted_valid_frames_never_break_the_daemon(link, frame):
    # Requests name the placeholder, a relative path: handlers refuse them, nothing is stored.
    assume(not _is_shutdown(frame))
    link.check(frame)


# --------------------------------------------------------------------------- clients that misbehave


def _vanish(ctx: zmq.Context[Any], env: Env, kind: int, frame: bytes) -> None:
    """A client that sends one request and closes its socket at once, without reading the
    reply. (``close`` returns immediately; the linger only lets ZeroMQ's I/O thread finish
    writing the request, so the daemon does get it and then answers a peer that is gone.)"""
    gone = connect(ctx, env, kind)
    gone.setsockopt(zmq.LINGER, 5_000)
    gone.send(frame)
    gone.close()


def _request_log(daemon: Daemon) -> list[dict[str, Any]]:
    lines = []
    # The whole log of the current process (``Daemon.log`` returns only its tail).
    for line in daemon.stderr_path.read_text(errors="replace").splitlines():
        try:
            record = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue
        if isinstance(record, dict) and record.get("event") == "request":
            lines.append(record)
    return lines


def test_vanishing_clients_do_not_disturb_others(zctx, own_env, own_daemon):
    """Counts the entries and the requests in the log since the daemon started: a daemon of
    its own."""
    env, daemon = own_env, own_daemon
    project = str(env.project)
    for i in range(50):
        remember = p.Remember(id=f"gone-{i:04d}-remember", project=project, content=f"note {i}")
        _vanish(zctx, env, zmq.DEALER, p.encode(remember))
    _vanish(zctx, env, zmq.REQ, p.encode(p.Hello(id="req-gone")))

    survivor = connect(zctx, env)
    try:
        reply = ask(survivor, daemon, p.encode(p.Hello(id="survivor")))
        assert isinstance(reply, p.Ok) and reply.id == "survivor", reply
        # Every vanished client's request was served (and its reply sent into the void): the
        # entries all exist. Requests on other connections may still be in flight, so ask
        # until they are all in (each ask is a round trip; the deadline bounds it).
        deadline = time.monotonic() + REPLY_TIMEOUT_MS / 1000
        while True:
            listed = ask(survivor, daemon, p.encode(p.ListEntries(id="n", project=project)))
            assert isinstance(listed, p.Ok), listed
            total = p.result_of(p.ListEntries(), listed).total
            if total == 50 or time.monotonic() > deadline:
                break
        assert total == 50, total

        # A long poll parked for a client that then vanishes is answered into the void when
        # its wait ends, and the loop goes on: the survivor's own, longer, long poll is
        # answered after it, and so is a plain hello.
        reply = ask(survivor, daemon, p.encode(p.AuditTail(id="seq", project=project, n=1)))
        assert isinstance(reply, p.Ok), reply
        last = p.result_of(p.AuditTail(), reply).last_seq
        parked = p.AuditTail(id="parked", project=project, after_seq=last, wait_ms=100)
        _vanish(zctx, env, zmq.DEALER, p.encode(parked))
        mine = p.AuditTail(id="mine", project=project, after_seq=last, wait_ms=600)
        reply = ask(survivor, daemon, p.encode(mine))
        assert isinstance(reply, p.Ok) and reply.id == "mine", reply
        assert p.result_of(mine, reply).events == [], reply
        assert sync(survivor, daemon) == []
    finally:
        survivor.close(linger=0)
    assert daemon_alive(daemon), daemon.log()
    log = _request_log(daemon)
    remembered = [r for r in log if r.get("op") == "remember" and r.get("outcome") == "ok"]
    assert len(remembered) == 50, log
    long_polls = [r for r in log if r.get("op") == "audit_tail" and r.get("ms", 0) >= 100]
    assert len(long_polls) == 2, long_polls  # the vanished client's, then the survivor's


def _garbage(rng: random.Random, i: int) -> bytes | list[bytes]:
    kind = i % 8
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 200))
    if kind == 1:
        return b"\xc1" + rng.randbytes(rng.randrange(0, 20))
    if kind == 2:
        return pack(rng.choice([[1, 2, 3], 7, None, "hello", 2.5, [], b"x"]))
    if kind == 3:
        return pack({"op": f"nope-{rng.randrange(10**6)}", "v": p.PROTOCOL_VERSION, "id": i})
    if kind == 4:
        return pack(
            {
                "op": "remember",
                "v": p.PROTOCOL_VERSION,
                "id": i,
                "content": rng.choice([1, None, [], {}]),
            }
        )
    if kind == 5:
        return pack({"op": "hello", "v": rng.randrange(2, 10**6), "id": i})
    if kind == 6:
        return [b"m" + rng.randbytes(5), rng.randbytes(rng.randrange(0, 30))]
    return b""


def test_burst_of_garbage_then_hello(sock, daemon, zctx, env):
    rng = random.Random(20240601)
    frames = [_garbage(rng, i) for i in range(2_000)]
    assert not any(_is_shutdown(f) for f in frames if isinstance(f, bytes))
    for frame in frames:
        if isinstance(frame, list):
            sock.send_multipart(frame)
        else:
            sock.send(frame)
    replies = sync(sock, daemon)
    assert len(replies) == len(frames)
    allowed = {p.ErrorCode.BAD_REQUEST, p.ErrorCode.VERSION_MISMATCH}
    assert all(isinstance(r, p.Error) and r.code in allowed for r in replies), [
        r for r in replies if not (isinstance(r, p.Error) and r.code in allowed)
    ][:5]
    assert daemon_alive(daemon), daemon.log()
    assert_serving(zctx, env, daemon)


# --------------------------------------------------------------------------- names (issue 10)

HIDDEN = ["\u202e", "\u2066", "\u200f", "\x1b", "\x85", "\u200b", "\U000e0041", "\n"]


def _named(project: str, name: str) -> list[p.Request[Any]]:
    """Every request that takes a name from its user, with ``name`` in that place."""
    at = {"project": project}
    return [
        p.Remember(content="A fact", tags=[name], **at),
        p.Remember(content="A fact", section=name, **at),
        p.AliasAdd(term=name, synonyms=["x"], **at),
        p.AliasAdd(term="x", synonyms=[name], **at),
        p.AliasRemove(term=name, **at),
        p.BankRead(name=name, **at),
        p.BankWrite(name=name, content="# x\n", **at),
        p.BankUpdate(name="activeContext.md", content="## x\n", mode=name, **at),
        p.SaveMemory(content="A rule", section=name, **at),
        p.Focus(session=name, targets=["x"], **at),
        p.Release(session=name, **at),
        p.Inject(session=name, **at),
        p.SessionShow(session_id=name, **at),
    ]


def test_names_with_control_or_bidi_characters_are_refused(sock, daemon, env):
    """Proves that no name a user gives (tag, section, alias, bank file, mode, session) can hold
    a control, bidi or invisible character: the daemon refuses each such request saying why and
    where, memctl refuses it before sending (usage, exit 2), and an import line's tag too. On
    main a bank name with U+202E was accepted."""
    project = str(env.project)
    for hidden in HIDDEN:
        for n, request in enumerate(_named(project, f"rele{hidden}ase.md")):
            request.id = n + 1
            reply = ask(sock, daemon, p.encode(request))
            error = assert_error(reply, p.ErrorCode.BAD_REQUEST, n + 1)
            assert p.NAME_RULE in error.message and " - at `$." in error.message, error
    for request in _named(project, "release-notes.md"):  # the same requests pass without it
        reply = ask(sock, daemon, p.encode(request))
        assert not (isinstance(reply, p.Error) and p.NAME_RULE in reply.message), reply
    result = memctl(env, "bank", "write", "evil\u202edm.md", stdin="# x\n")
    assert result.code == 2 and p.NAME_RULE in result.stderr, result
    imported = memctl(
        env, "--json", "import", "-", stdin='{"content": "A b", "tags": ["a\u202eb"]}\n'
    )
    [rejected] = json.loads(imported.stdout)["rejected"]
    assert p.NAME_RULE in rejected["reason"] and "\u202e" not in rejected["reason"], rejected


def test_content_keeps_its_lines_not_its_controls_or_overrides(own_daemon, own_env):
    """Proves what entry text keeps: newlines and tabs (formatting), right-to-left marks and
    joiners (RTL scripts and emoji need them); and what it loses: C0 and C1 controls (terminal
    escapes) and the bidi embeddings, overrides and isolates that reorder how text reads."""
    env = own_env  # lists every entry of the project: a daemon of its own
    kept = "Run\tmake\nthen \u05e9\u05dc\u05d5\u05dd\u200f ok \U0001f468\u200d\U0001f4bb"
    text = kept + "\x1b[2J\x9b1m\u202eevil\u202c\u2066x\u2069"
    entry_id = json.loads(memctl(env, "--json", "remember", text).stdout)["id"]
    [entry] = [e for e in json.loads(memctl(env, "--json", "list").stdout)["entries"]]
    assert entry["id"] == entry_id
    assert entry["content"] == kept + "[2J1mevilx"
