"""A turn's or a session's end hook right after a large append to its transcript: the daemon reads
it a slice per loop turn, serving other clients between the slices, while the hook waits
(parked) for the reading to end, at most ``[capture] hook_wait_s``; past that the hook is
answered and the reading goes on, closing an ended session once done. Read in one step, such an
append held the owner thread, and every other agent's prompt, for as long as it took."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from conftest import Daemon, Env, memctl, ok_json, until
from memctl import protocol as p
from test_capture_e2e import SESSION, _record, _transcript

# The watcher waits this long for a quiet file: the hook is what reads the append; and the hook
# waits long enough for any machine to read it.
QUIET = {"MEMORYD_CAPTURE__DEBOUNCE_S": "60", "MEMORYD_CAPTURE__HOOK_WAIT_S": "30"}
# A hook that waits a millisecond: answered while most of the append is still unread (the
# watcher, at its usual debounce, reads slices of it too).
HASTY = {"MEMORYD_CAPTURE__HOOK_WAIT_S": "0.001"}
FILLER = "The asset step copies images into the bundle folder and logs every file it touched. "
RECORDS = 2_000  # ~2 MB: several slices of reading (256 KiB each at most)
LAST = "We decided to use the zebra queue for the billing retries."


def _large_append(env: Env) -> Path:
    path = _transcript(env)
    records = [_record(env, "assistant", FILLER * 12 + f"({n})", n % 60) for n in range(RECORDS)]
    records.append(_record(env, "assistant", LAST, 59))
    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(record) + "\n" for record in records)
    return path


@contextlib.contextmanager
def _appended(env: Env, settings: dict[str, str]) -> Iterator[Path]:
    """A daemon with ``settings`` running while the large append is written; its path."""
    daemon = Daemon(env, settings).start()
    try:
        yield _large_append(env)
    finally:
        daemon.stop()


def _hook(env: Env, path: Path, event: p.HookKind) -> p.Hook:
    return p.Hook(id=uuid.uuid4().hex, agent="claude", event=event, session_id=SESSION,
                  transcript_path=str(path), project=str(env.project))  # fmt: skip


def _pipelined(env: Env, requests: list[p.Request[Any]]) -> list[p.Ok]:
    """Send ``requests`` at once over one connection (the daemon reads them in that order);
    their replies in the order they arrive."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(f"ipc://{env.socket}")
    try:
        for request in requests:
            socket.send(p.encode(request))
        replies = []
        for _ in requests:
            assert socket.poll(30_000), "no reply within 30 s"
            reply = p.decode_reply(socket.recv())
            assert isinstance(reply, p.Ok), reply
            replies.append(reply)
        return replies
    finally:
        context.destroy(linger=0)


def _messages_read(env: Env) -> int:
    return int(ok_json(env, "status")["capture"]["messages"])


def test_a_turn_end_lets_other_clients_in_and_answers_once_its_transcript_is_read(
    env: Env,
) -> None:
    with _appended(env, QUIET) as path:
        hook, hello = _hook(env, path, "turn_end"), p.Hello(id=uuid.uuid4().hex)
        replies = _pipelined(env, [hook, hello])
        # The hello, sent after the hook, was answered while the hook waited for its slices.
        assert [r.id for r in replies] == [hello.id, hook.id]
        assert _messages_read(env) == RECORDS + 1  # and the hook only once all was read
        found = until(
            lambda: [
                r
                for r in ok_json(env, "search", "zebra queue billing")["results"]
                if LAST in r["content"]
            ],
            "the last line's finding",
        )
        assert found[0]["session_id"] == SESSION


def test_a_session_end_is_answered_finalized_once_its_transcript_is_read(env: Env) -> None:
    with _appended(env, QUIET) as path:
        end, hello = _hook(env, path, "session_end"), p.Hello(id=uuid.uuid4().hex)
        replies = _pipelined(env, [end, hello])
        assert [r.id for r in replies] == [hello.id, end.id]
        assert p.result_of(end, replies[1]).finalized is True
        assert _messages_read(env) == RECORDS + 1
        episodes = ok_json(env, "episodes")["episodes"]
        assert [e["session_id"] for e in episodes] == [SESSION]


def _finalized(env: Env) -> list[dict[str, Any]]:
    """The audit log's ``session_finalized`` events, oldest first."""
    lines = memctl(env, "audit", "-n", "500").stdout.splitlines()
    events = [json.loads(line)["event"] for line in lines]
    return [e for e in events if e["type"] == "session_finalized"]


def _closed_on_all_of_it(env: Env) -> None:
    """One close of the session, at its end, over the whole transcript (its last line's
    decision is in the episode)."""
    (final,) = until(lambda: _finalized(env), "the session closed")
    assert (final["session_id"], final["reason"]) == (SESSION, "session_end")
    (episode,) = ok_json(env, "episodes")["episodes"]
    assert any("zebra queue" in d for d in episode["decisions"]), episode


def test_a_session_end_that_stopped_waiting_is_closed_once_read(env: Env) -> None:
    with _appended(env, HASTY) as path:
        end = _hook(env, path, "session_end")
        (reply,) = _pipelined(env, [end])
        assert p.result_of(end, reply).finalized is False
        _closed_on_all_of_it(env)
        # Closed once: a later end of the same session changes nothing.
        again = _hook(env, path, "session_end")
        (reply,) = _pipelined(env, [again])
        assert p.result_of(again, reply).finalized is False
        assert len(_finalized(env)) == 1


@pytest.mark.parametrize("waiting", ["the hook waits", "the hook stopped waiting"])
def test_a_session_begun_meanwhile_leaves_the_ended_one_to_close_once_read(
    env: Env, waiting: str
) -> None:
    waits = waiting == "the hook waits"
    with _appended(env, QUIET if waits else HASTY) as path:
        end = _hook(env, path, "session_end")
        nxt = p.Hook(id=uuid.uuid4().hex, agent="claude", event="session_start",
                     session_id=str(uuid.uuid4()), project=str(env.project))  # fmt: skip
        replies = {r.id: r for r in _pipelined(env, [end, nxt])}
        # Closed by the hook that waits for it, else by the reading; on all of it, once.
        assert p.result_of(end, replies[end.id]).finalized is waits
        _closed_on_all_of_it(env)


def test_a_stop_while_an_ended_session_is_read_closes_it_on_all_of_it(env: Env) -> None:
    daemon = Daemon(env, HASTY).start()
    try:
        path = _large_append(env)
        end = _hook(env, path, "session_end")
        (reply,) = _pipelined(env, [end])
        assert p.result_of(end, reply).finalized is False
    finally:
        assert daemon.stop() == 0  # the rest is read before the session is closed
    again = Daemon(env, QUIET).start()
    try:
        _closed_on_all_of_it(env)
    finally:
        again.stop()
