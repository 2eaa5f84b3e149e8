"""Bank changes exactly once (issue 10, problem 6): a client's retry carries the request id of
its first attempt, and may reach a daemon that restarted in between."""

from __future__ import annotations

import uuid

from conftest import Daemon, Env, ok_json
from memctl import protocol
from memctl.transport import Client

DECISION = (
    "## Decision: Retries carry their first request id\n\n"
    "- **Date**: 2026-11-21\n- **Status**: Accepted\n- **Decision**: one id per change.\n"
)


def _send(env: Env, request: protocol.Request) -> protocol.Ok:  # type: ignore[type-arg]
    with Client(endpoint="ipc://" + str(env.socket)) as client:
        reply = client.call(request, budget_s=20)
    assert isinstance(reply, protocol.Ok), reply
    return reply


def test_a_bank_change_retried_after_a_restart_is_applied_once(env: Env) -> None:
    """Proves that a bank update or write retried with the same request id after the daemon
    restarted (its reply lost with it, the change already synced to disk and the journal
    emptied) is answered, not applied again: decisionLog.md holds the decision once, and the
    written file is the first version, not the retry's. On main the request ids lived only in
    the journal until it was emptied, so the retry appended the decision a second time."""
    daemon = Daemon(env).start()
    project = str(env.project)
    update = protocol.BankUpdate(
        id=uuid.uuid4().hex, project=project, name="decisionLog.md", content=DECISION
    )
    write = protocol.BankWrite(
        id=uuid.uuid4().hex, project=project, name="notes.md", content="# Notes\n\nfirst\n"
    )
    try:
        ok_json(env, "bank", "init")
        _send(env, update)
        _send(env, write)
        # Someone else's change to the same file after the write: the retry must not undo it.
        ok_json(env, "bank", "write", "notes.md", stdin="# Notes\n\nsecond\n")
        ok_json(env, "bank", "sync")
    finally:
        assert daemon.stop() == 0
    decision_log = env.project / "memory-bank" / "decisionLog.md"
    assert decision_log.read_text().count("Retries carry their first request id") == 1
    daemon = Daemon(env).start()
    try:
        _send(env, update)
        _send(env, write)
        ok_json(env, "bank", "sync")
        entries = ok_json(env, "list")["entries"]
    finally:
        daemon.stop()
    assert decision_log.read_text().count("Retries carry their first request id") == 1
    assert "second" in (env.project / "memory-bank" / "notes.md").read_text()
    assert sum("Retries carry their first request id" in e["content"] for e in entries) == 1
