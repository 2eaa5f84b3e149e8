"""Bank changes exactly once (issue 10, problem 6): a client's retry carries the request id of
its first attempt, and may reach a daemon that restarted in between."""

from __future__ import annotations

import json
import uuid

from conftest import Daemon, Env, memctl, ok_json
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


def test_check_compares_the_bank_journal_with_the_cache_and_repair_rewrites_it(
    env: Env,
) -> None:
    """Acceptance 4 (issue 10): a change the bank journal still holds as pending though it is
    on disk (its ``flushed`` line lost, as a full disk can do) would be applied a second time
    at the next start. ``check`` finds it, ``check --repair`` writes the journal anew from the
    cache, and the restart then leaves the decision once."""
    daemon = Daemon(env).start()
    journal = env.data / "bank-journal.jsonl"
    try:
        ok_json(env, "bank", "init")
        _send(env, protocol.BankUpdate(project=str(env.project), name="decisionLog.md",
                                       content=DECISION))  # fmt: skip
        op_line = next(line for line in journal.read_bytes().splitlines() if b'"op"' in line)
        assert ok_json(env, "check")["bank"] == "ok"  # pending, journaled: as it should be
        ok_json(env, "bank", "sync")
        assert b'"flushed"' in journal.read_bytes().splitlines()[-1]
        assert ok_json(env, "check")["bank"] == "ok"
        with open(journal, "ab") as fh:  # the change journaled again after its write
            fh.write(op_line + b"\n")
        found = memctl(env, "--json", "check")
        assert found.code == 1, found
        assert json.loads(found.stdout)["bank"] == (
            "decisionLog.md: 1 change(s) journaled as pending that are done "
            "(a restart would apply them again)"
        )
        repaired = ok_json(env, "check", "--repair")
        assert repaired["ok"] is True and repaired["bank"].startswith("repaired: written anew")
        assert ok_json(env, "check")["bank"] == "ok"
    finally:
        assert daemon.stop() == 0
    daemon = Daemon(env).start()
    try:
        ok_json(env, "bank", "sync")
    finally:
        daemon.stop()
    decision_log = env.project / "memory-bank" / "decisionLog.md"
    assert decision_log.read_text().count("Retries carry their first request id") == 1
