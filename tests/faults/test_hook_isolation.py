"""Hooks cannot cross projects (issue 10, problem 8): a hook's ``transcript_path`` is taken only
when it resolves inside that agent's transcript folders and records a session of the hook's own
project; otherwise the hook is refused and nothing is read or written."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Daemon, Env, memctl
from memctl import protocol
from memctl.transport import Client

SESSION = "7a1c2a9e-1d2b-4c3d-8e4f-a1b2c3d4e5f6"
DECISION = "We decided to keep the ledger service on Postgres 15."


def _transcript(path: Path, cwd: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [
        {"type": "user", "cwd": str(cwd), "text": "Which database for the ledger?"},
        {"type": "assistant", "cwd": str(cwd), "text": DECISION},
    ]
    with open(path, "w", encoding="utf-8") as fh:
        for n, r in enumerate(records):
            content = r["text"] if r["type"] == "user" else [{"type": "text", "text": r["text"]}]
            line = {"type": r["type"], "sessionId": SESSION, "cwd": r["cwd"], "uuid": f"u{n}",
                    "timestamp": f"2026-11-21T10:0{n}:00Z",
                    "message": {"role": r["type"], "content": content}}  # fmt: skip
            fh.write(json.dumps(line) + "\n")
    return path


def _hook(env: Env, transcript: Path, project: Path) -> protocol.Reply:
    request = protocol.Hook(agent="claude", event="session_end", session_id=SESSION,
                            transcript_path=str(transcript), project=str(project))  # fmt: skip
    with Client(endpoint="ipc://" + str(env.socket), budget_s=20) as client:
        return client.call(request)


def _knows_decision(env: Env, project: Path) -> bool:
    result = memctl(env, "--json", "search", "ledger Postgres", cwd=project)
    assert result.code == 0, result.stderr
    return any("ledger" in r["content"] for r in json.loads(result.stdout)["results"])


def test_a_hook_naming_another_projects_transcript_writes_nothing(env: Env) -> None:
    """Proves that a hook of project A naming (1) a Claude transcript of project B, inside
    Claude's folder, or (2) a symlink inside Claude's folder to a transcript kept elsewhere, is
    refused (``forbidden``, with the reason) and writes nothing: no finding reaches B or A.
    The files exist before the daemon starts and no start-up catch-up reads them, so only the
    hook could. On main the hook read both first, wrote B's findings into B and A's from the
    outside file into A, and only then answered ``finalized: false``."""
    other = env.root / "other"
    (other / ".git").mkdir(parents=True)
    claude = env.home / ".claude" / "projects"
    of_other = _transcript(claude / "-other" / f"{SESSION}.jsonl", other)
    outside = _transcript(env.root / "elsewhere" / f"{SESSION}.jsonl", env.project)
    linked = claude / "-linked" / f"{SESSION}.jsonl"
    linked.parent.mkdir()
    linked.symlink_to(outside)
    daemon = Daemon(env, {"MEMORYD_CAPTURE__BACKFILL_DAYS": "0"}).start()
    try:
        crossed = _hook(env, of_other, env.project)
        assert isinstance(crossed, protocol.Error), crossed
        assert crossed.code == protocol.ErrorCode.FORBIDDEN
        assert "records a session of" in crossed.message and str(other) in crossed.message
        escaped = _hook(env, linked, env.project)
        assert isinstance(escaped, protocol.Error), escaped
        assert escaped.code == protocol.ErrorCode.FORBIDDEN
        assert "transcript folders" in escaped.message
        assert not _knows_decision(env, other)
        assert not _knows_decision(env, env.project)
        # The hook of B itself is served: its transcript is read, into B.
        own = _hook(env, of_other, other)
        assert isinstance(own, protocol.Ok), own
        assert _knows_decision(env, other)
        assert not _knows_decision(env, env.project)
    finally:
        daemon.stop()
