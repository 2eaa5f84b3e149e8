"""Capture end to end (SPEC §6–§7): a transcript written line by line into a watched root becomes
searchable findings, the SessionEnd hook finalizes it into an episode and promoted candidates,
a restart mid-file adds nothing twice, and no planted secret reaches any file memoryd writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Daemon, Env, memctl, ok_json, until
from memctl import protocol
from memctl.transport import Client

SESSION = "5f0c2a9e-1d2b-4c3d-8e4f-a1b2c3d4e5f6"


def _record(env: Env, role: str, text: str, n: int) -> dict[str, Any]:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    return {
        "type": role,
        "sessionId": SESSION,
        "cwd": str(env.project),
        "uuid": f"{role[0]}{n}",
        "timestamp": f"2026-11-21T10:{n:02d}:00Z",
        "message": {"role": role, "content": content},
    }


CONVERSATION = [
    ("user", "The checkout tests are flaky again. remember: always run make lint before pushing"),
    ("assistant", "Turns out the root cause was a race in the cart cache warmup."),
    ("assistant", "We decided to use a lock around the cart cache refresh."),
    ("user", "I prefer small commits with descriptive messages."),
    ("assistant", "Never call the cart cache refresh from a request handler."),
    ("assistant", "The pricing service is responsible for currency conversion."),
]


def _transcript(env: Env) -> Path:
    folder = (
        env.home / ".claude" / "projects" / ("-" + str(env.project).strip("/").replace("/", "-"))
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{SESSION}.jsonl"


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
            fh.flush()


def _found(env: Env, query: str, needle: str) -> bool:
    results = ok_json(env, "search", query, "-k", "10")["results"]
    return any(needle in r["content"] for r in results)


def _session_end(env: Env, path: Path) -> protocol.HookResult:
    request = protocol.Hook(agent="claude", event="session_end", session_id=SESSION,
                            transcript_path=str(path), project=str(env.project))  # fmt: skip
    with Client(endpoint="ipc://" + str(env.socket), budget_s=20) as client:
        reply = client.call(request)
    assert isinstance(reply, protocol.Ok), reply
    return protocol.result_of(request, reply)


def test_transcript_to_findings_to_episode_and_candidates(env: Env, daemon: Daemon) -> None:
    path = _transcript(env)
    for n, (role, text) in enumerate(CONVERSATION[:3]):
        _append(path, [_record(env, role, text, n)])
    until(lambda: _found(env, "cart cache lock", "decided to use a lock"), "decision finding")
    hit = next(r for r in ok_json(env, "search", "cart cache lock")["results"]
               if "decided" in r["content"])  # fmt: skip
    assert hit["kind"] == "finding" and hit["session_id"] == SESSION

    for n, (role, text) in enumerate(CONVERSATION[3:], start=3):
        _append(path, [_record(env, role, text, n)])
    until(lambda: _found(env, "pricing currency", "currency conversion"), "architecture finding")

    # SessionEnd exactly as Claude Code sends it, through the real `memctl hook`.
    payload = {
        "session_id": SESSION,
        "transcript_path": str(path),
        "cwd": str(env.project),
        "hook_event_name": "SessionEnd",
        "reason": "exit",
    }
    hooked = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(payload))
    assert hooked.code == 0 and hooked.stdout == ""  # SessionEnd expects no output
    episodes = until(lambda: ok_json(env, "episodes")["episodes"], "the episode")
    assert len(episodes) == 1
    episode = episodes[0]
    assert episode["session_id"] == SESSION and episode["agent"] == "claude"
    assert episode["turns"] == 2 and "auto" in episode["tags"]
    assert "checkout tests are flaky" in episode["goal"]
    assert any("lock" in d for d in episode["decisions"])

    candidates = ok_json(env, "list", "--status", "candidate")["entries"]
    assert any("make lint" in e["content"] for e in candidates)  # user intent: 5 points
    assert all(e["source"]["kind"] == "transcript" for e in candidates)
    assert all(e["source"]["session_id"] == SESSION for e in candidates)
    assert ok_json(env, "list", "--status", "pinned")["entries"] == []  # never pinned by capture

    audit = [json.loads(line) for line in memctl(env, "audit", "-n", "50").stdout.splitlines()]
    final = next(e["event"] for e in audit if e["event"]["type"] == "session_finalized")
    decisions = final["decisions"]
    assert decisions and all(
        {"signals", "points", "threshold", "promoted"} <= set(d) for d in decisions
    )
    assert any(d["promoted"] and "user-intent" in d["signals"] for d in decisions)

    # A second SessionEnd for the same transcript changes nothing.
    assert _session_end(env, path).finalized is False
    assert len(ok_json(env, "episodes")["episodes"]) == 1


def test_restart_mid_file_resumes_without_duplicates(env: Env) -> None:
    path = _transcript(env)
    daemon = Daemon(env).start()
    try:
        for n, (role, text) in enumerate(CONVERSATION[:3]):
            _append(path, [_record(env, role, text, n)])
        until(lambda: _found(env, "cart cache lock", "decided to use a lock"), "first findings")
    finally:
        daemon.kill()  # no chance to save cursors: the file is read again from the start
    for n, (role, text) in enumerate(CONVERSATION[3:], start=3):
        _append(path, [_record(env, role, text, n)])
    again = Daemon(env).start()
    try:
        until(lambda: _found(env, "pricing currency", "currency conversion"), "later findings")
        results = ok_json(env, "search", "cart cache", "-k", "50")["results"]
        contents = [r["content"] for r in results]
        assert len(contents) == len(set(contents)), contents
        assert _session_end(env, path).finalized is True
        entries = ok_json(env, "list", "--limit", "1000")["entries"]
        assert len({e["fingerprint"] for e in entries}) == len(entries)
        assert len(ok_json(env, "episodes")["episodes"]) == 1
        assert ok_json(env, "status")["project"]["sessions"] == 1
    finally:
        again.stop()


def _secrets() -> dict[str, str]:
    # Built at run time so no literal token sits in the source for scanners to trip on.
    return {
        "aws": "AKIA" + "Q" * 4 + "7EXAMPLEKEY1",
        "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" + "kLmNoPqRsTuV",
        "openai": "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
        "anthropic": "sk-ant-api03-" + "Qw3Er4Ty5Ui6Op7As8Df9Gh0Jk1Lz2Xc",
        "slack": "xoxb-" + "123456789012-123456789012-" + "AbCdEfGhIjKlMnOpQrStUvWx",
        "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "password": "hunter2" + "Sup3rS3cret!",
        "jwt": "eyJhbGciOiJIUzI1NiJ9."
        + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "email": "jane.doe" + "@example-corp.com",
        "pg": "s3cr3t" + "Passw0rd",
    }


def test_planted_secrets_reach_no_file(env: Env, daemon: Daemon) -> None:
    s = _secrets()
    path = _transcript(env)
    texts = [
        (
            "user",
            f"Deploy with AWS key {s['aws']} please. remember: the staging token is {s['github']}",
        ),
        ("assistant", f"Turns out the root cause was the expired key {s['openai']} in CI."),
        ("assistant", f"We decided to use the Anthropic key {s['anthropic']} for the eval job."),
        ("user", f"Never paste {s['slack']} or {s['stripe']} into chat."),
        ("assistant", f"Careful: the config had password={s['password']} and token {s['jwt']}."),
        ("user", f"I prefer that alerts go to {s['email']}."),
        ("assistant", f"Never commit postgres://app:{s['pg']}@db.internal:5432/shop again."),
    ]
    for n, (role, text) in enumerate(texts):
        _append(path, [_record(env, role, text, n)])
    until(lambda: _found(env, "postgres commit", "postgres"), "the last finding")
    # The session view reads the transcript's lines back for a person: redacted too.
    shown = memctl(env, "--json", "session", SESSION)
    assert shown.code == 0 and json.loads(shown.stdout)["findings"], shown.stderr
    assert "[REDACTED:" in shown.stdout
    assert [n for n, secret in s.items() if secret in shown.stdout] == []
    ok_json(env, "remember", f"The backup key is {s['aws']} and the admin is {s['email']}")
    assert _session_end(env, path).finalized is True
    ok_json(env, "check")
    hook_prompt = protocol.Hook(agent="claude", event="prompt", session_id=SESSION,
                                prompt=f"remember: rotate {s['stripe']} monthly",
                                project=str(env.project))  # fmt: skip
    with Client(endpoint="ipc://" + str(env.socket), budget_s=20) as client:
        assert isinstance(client.call(hook_prompt), protocol.Ok)
    daemon.stop()  # flush everything to disk before looking

    roots = [
        env.data,
        env.state,
        Path(env.vars["XDG_CONFIG_HOME"]),
        Path(env.vars["XDG_CACHE_HOME"]),
    ]
    files = [f for root in roots if root.exists() for f in root.rglob("*") if f.is_file()]
    assert any(f.name == "memory.db" for f in files) and any(f.name == "memoryd.log" for f in files)
    leaks = {
        (name, str(f))
        for f in files
        for name, secret in s.items()
        if secret.encode() in f.read_bytes()
    }
    assert leaks == set()
    redacted = (next(f for f in files if f.name == "audit.jsonl")).read_text()
    assert "[REDACTED:" in redacted


def _codex_rollout(
    env: Env, session: str, lines: list[str], forked_from: str | None = None
) -> Path:
    folder = env.home / ".codex" / "sessions" / "2026" / "11" / "21"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-2026-11-21T10-00-00-{session}.jsonl"
    meta: dict[str, Any] = {"id": session, "cwd": str(env.project), "cli_version": "0.120.0"}
    if forked_from:
        meta["forked_from_id"] = forked_from
    records = [{"timestamp": "2026-11-21T10:00:00Z", "type": "session_meta", "payload": meta}]
    for i, text in enumerate(lines):
        item = {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}  # fmt: skip
        records.append({"timestamp": f"2026-11-21T10:00:{i + 1:02d}Z", "type": "response_item",
                        "payload": item})  # fmt: skip
    _append(path, records)
    return path


def test_forked_session_starts_with_its_parents_findings(env: Env, daemon: Daemon) -> None:
    parent, child = "0199aaaa-0000-7000-8000-000000000001", "0199aaaa-0000-7000-8000-000000000002"
    _codex_rollout(env, parent, ["We decided to use Temporal for the billing workflows."])
    until(lambda: _found(env, "temporal billing", "Temporal"), "the parent's finding")
    _codex_rollout(env, child, ["Turns out the root cause was clock skew on the worker."], parent)
    until(lambda: _found(env, "clock skew worker", "clock skew"), "the child's own finding")
    sessions = {
        r["session_id"]
        for r in ok_json(env, "search", "temporal billing", "-k", "10")["results"]
        if "Temporal" in r["content"]
    }
    assert sessions == {parent, child}  # copied to the fork, under the fork's own session


def test_repeated_finalization_keeps_one_episode(env: Env, daemon: Daemon) -> None:
    """Codex sends Stop after every turn: each finalization refreshes the session's episode."""
    path = _transcript(env)
    _append(path, [_record(env, "user", "Please migrate the invoices table.", 0)])
    _append(path, [_record(env, "assistant", "We decided to use a backfill job for invoices.", 1)])
    until(lambda: _found(env, "backfill invoices", "backfill job"), "first turn")
    assert _session_end(env, path).finalized is True
    _append(path, [_record(env, "user", "Now add an index on invoices.customer_id.", 2)])
    _append(path, [_record(env, "assistant", "Turns out the index already existed in staging.", 3)])
    until(lambda: _found(env, "index staging", "already existed"), "second turn")
    assert _session_end(env, path).finalized is True
    episodes = ok_json(env, "episodes")["episodes"]
    assert len(episodes) == 1 and episodes[0]["turns"] == 2


def test_agent_installed_after_the_daemon_started_is_captured(env: Env) -> None:
    """~/.claude/projects did not exist when the daemon started (Claude Code installed later):
    once it appears, it is watched, and what was already written there is caught up."""
    root = env.home / ".claude" / "projects"
    root.rmdir()
    daemon = Daemon(env, {"MEMORYD_JOBS__CAPTURE_IDLE_CHECK_S": "0.3"}).start()
    try:
        path = _transcript(env)  # creates the folder
        role, text = CONVERSATION[2]
        _append(path, [_record(env, role, text, 2)])  # before the daemon noticed the folder
        until(lambda: _found(env, "cart cache lock", "decided to use a lock"), "caught up")
        role, text = CONVERSATION[5]
        _append(path, [_record(env, role, text, 5)])  # and watched from then on
        until(lambda: _found(env, "pricing currency", "currency conversion"), "watched")
    finally:
        daemon.stop()


def test_a_finalized_session_leaves_its_candidates_not_its_raw_findings(
    env: Env, daemon: Daemon
) -> None:
    """Issue 19: after the session ends, the next SessionStart gets the candidates promotion let
    in (marked as candidates) and the episode; the finished session is no longer live, so its
    raw findings no longer fill the session tier. A query that matches nothing gets nothing."""
    path = _transcript(env)
    _append(path, [_record(env, role, text, n) for n, (role, text) in enumerate(CONVERSATION)])
    until(lambda: _found(env, "pricing currency", "currency conversion"), "the findings")
    assert _session_end(env, path).finalized is True
    (candidate,) = [
        e
        for e in ok_json(env, "list", "--status", "candidate")["entries"]
        if "make lint" in e["content"]
    ]
    start = ok_json(env, "inject", "--format", "claude")
    assert candidate["id"] in start["entries"]
    assert (
        f'<entry id="{candidate["id"][:8]}" category="{candidate["category"]}" status="candidate">'
        in (start["text"])
    )
    assert "<session>" not in start["text"]  # the finished session's findings are not live
    assert start["tokens"]["tiers"]["session"] == 0
    unrelated = ok_json(env, "inject", "--query", "MDX build fails on URLs in angle brackets")
    assert unrelated["entries"] == []


def _tool_use(env: Env, n: int, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    record = _record(env, "assistant", "", n)
    record["message"]["content"] = [
        {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": tool_input}
    ]
    return record


def _tool_result(env: Env, n: int, text: str, is_error: bool = False) -> dict[str, Any]:
    record = _record(env, "user", "", n)
    record["message"]["content"] = [
        {"type": "tool_result", "tool_use_id": f"toolu_{n - 1}", "content": text,
         "is_error": is_error}
    ]  # fmt: skip
    return record


def test_the_final_pass_replaces_what_a_checkpoint_found(env: Env) -> None:
    """Issue 19: a checkpoint over the first messages records a diagnosis that a later one
    replaced before the fix; after SessionEnd it is gone (store, search), and the audit log
    says why (findings_dropped)."""
    guess = "The problem is the cart cache key."
    right = "The real problem was the stale lockfile in the build folder."
    daemon = Daemon(env, {"MEMORYD_CAPTURE__CHECKPOINT_EVERY": "2"}).start()
    try:
        path = _transcript(env)
        _append(path, [_record(env, "user", "The checkout build fails again.", 0),
                       _record(env, "assistant", guess, 1)])  # fmt: skip
        until(lambda: _found(env, "cart cache key", guess), "the checkpoint's guess")
        _append(
            path,
            [
                _record(env, "assistant", right, 2),
                _tool_use(env, 3, "Edit", {"file_path": str(env.project / "build.sh"),
                                           "old_string": "a", "new_string": "rm -f .lock"}),
                _tool_result(env, 4, "The file build.sh has been updated."),
                _tool_use(env, 5, "Bash", {"command": "make build"}),
                _tool_result(env, 6, "built in 2s"),
            ],
        )  # fmt: skip
        assert _session_end(env, path).finalized is True
        assert not _found(env, "cart cache key", guess)
        assert _found(env, "stale lockfile", right)
        audit = [json.loads(line) for line in memctl(env, "audit", "-n", "50").stdout.splitlines()]
        (dropped,) = [e["event"] for e in audit if e["event"]["type"] == "findings_dropped"]
        assert dropped["session_id"] == SESSION and len(dropped["ids"]) == 1
    finally:
        daemon.stop()
