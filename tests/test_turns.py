"""Hooks within a session (issue 17): ``Stop`` ends a turn, not the session, which is finalized
once (at SessionEnd, at the agent's next session, or when the daemon stops); a ``remember:`` in a
prompt keeps its clause only, and the reply to that prompt does not carry it back."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Daemon, Env, memctl, ok_json, until

SESSION = "6a1d3b0f-2e3c-4d4e-9f50-b1c2d3e4f5a6"


def transcript(env: Env, session: str = SESSION) -> Path:
    folder = (
        env.home / ".claude" / "projects" / ("-" + str(env.project).strip("/").replace("/", "-"))
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{session}.jsonl"


def say(env: Env, path: Path, role: str, text: str, n: int, session: str = SESSION) -> None:
    content: object = text if role == "user" else [{"type": "text", "text": text}]
    record = {
        "type": role,
        "sessionId": session,
        "cwd": str(env.project),
        "uuid": f"{role}{n}",
        "timestamp": f"2026-11-21T10:{n:02d}:00Z",
        "message": {"role": role, "content": content},
    }
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def hook(env: Env, event: str, path: Path, session: str = SESSION, **more: object) -> str:
    payload = {"session_id": session, "transcript_path": str(path), "cwd": str(env.project),
               "hook_event_name": event, **more}  # fmt: skip
    done = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(payload))
    assert done.code == 0, done.stderr
    return done.stdout


def finalized(env: Env) -> list[dict]:
    audit = [json.loads(x) for x in memctl(env, "audit", "-n", "500").stdout.splitlines()]
    return [a["event"] for a in audit if a["event"]["type"] == "session_finalized"]


TURNS = [
    ("user", "The invoice export times out on large accounts."),
    ("assistant", "We decided to stream the export in pages of 500 rows."),
    ("user", "I prefer small commits with descriptive messages."),
    ("assistant", "Never load the whole account ledger into memory at once."),
    ("user", "Good. Please add a test for the paging."),
    ("assistant", "The export service is responsible for pagination of the ledger."),
]


def test_three_stops_then_session_end_finalize_once(env: Env, daemon: Daemon) -> None:
    path = transcript(env)
    for turn in range(3):
        for n, (role, text) in enumerate(TURNS[2 * turn : 2 * turn + 2], start=2 * turn):
            say(env, path, role, text, n)
        assert hook(env, "Stop", path, stop_hook_active=False) == ""
        # A Stop is a checkpoint: what the turn said is searchable, and nothing is finalized.
        needle = TURNS[2 * turn + 1][1][:20]
        results = ok_json(env, "search", TURNS[2 * turn + 1][1], "-k", "10")["results"]
        assert any(needle in r["content"] for r in results), needle
        assert finalized(env) == [] and ok_json(env, "episodes")["episodes"] == []
    hook(env, "SessionEnd", path, reason="exit")
    [done] = finalized(env)
    assert done["reason"] == "session_end"
    [episode] = ok_json(env, "episodes")["episodes"]
    assert episode["session_id"] == SESSION and episode["turns"] == 3


def test_a_session_without_an_end_is_finalized_by_the_next_one_or_at_shutdown(env: Env) -> None:
    daemon = Daemon(env).start()
    first, second = transcript(env), transcript(env, "second-session")
    try:
        for n, (role, text) in enumerate(TURNS[:2]):
            say(env, first, role, text, n)
        hook(env, "Stop", first)
        assert finalized(env) == []
        # Codex never sends SessionEnd: the agent's next session in the project ends this one.
        hook(env, "SessionStart", second, "second-session", source="startup")
        [done] = finalized(env)
        assert done["session_id"] == SESSION and done["reason"] == "new_session"
        for n, (role, text) in enumerate(TURNS[2:4], start=2):
            say(env, second, role, text, n, "second-session")
        hook(env, "Stop", second, "second-session")
    finally:
        assert daemon.stop() == 0
    # The daemon stopped while the second session was open: it was finalized on the way out.
    again = Daemon(env).start()
    try:
        reasons = {e["session_id"]: e["reason"] for e in finalized(env)}
        assert reasons == {SESSION: "new_session", "second-session": "shutdown"}
        assert len(ok_json(env, "episodes")["episodes"]) == 2
    finally:
        again.stop()


PROMPT = "Please fix the login bug. remember: we use argon2, never bcrypt. Then run the tests."


def test_remember_in_a_prompt_keeps_the_clause_and_is_not_sent_back(
    env: Env, daemon: Daemon
) -> None:
    ok_json(env, "remember", "Login bugs are reproduced with the tests in tests/test_login.py")
    path = transcript(env)
    out = hook(env, "UserPromptSubmit", path, prompt=PROMPT)
    entries = ok_json(env, "list")["entries"]
    contents = [e["content"] for e in entries]
    assert "we use argon2, never bcrypt" in contents
    assert not any("login bug" in c or "run the tests" in c for c in contents)
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""
    assert "argon2" not in context  # the prompt's own words are not sent back to it
    assert "tests/test_login.py" in context  # the rest of memory still is
    # The next prompt gets it like any other memory.
    asked = "Should the new endpoint hash with argon2 or bcrypt?"
    later = hook(env, "UserPromptSubmit", path, prompt=asked)
    assert (
        "we use argon2, never bcrypt"
        in json.loads(later)["hookSpecificOutput"]["additionalContext"]
    )

    # The other two spellings keep the same clause.
    for spelling in (
        "#remember we use ruff, never flake8.",
        "Remember that we use ruff, never flake8.",
    ):
        hook(env, "UserPromptSubmit", path, prompt=f"Lint the repo. {spelling} Then push.")
    ruff = [e["content"] for e in ok_json(env, "list")["entries"] if "ruff" in e["content"]]
    assert ruff == ["we use ruff, never flake8"]  # one entry: the same words twice

    # A prompt without the marker stores nothing now: what the user says otherwise is a finding
    # for promotion and review, never a confirmed entry from the hook.
    before = ok_json(env, "list")["total"]
    hook(env, "UserPromptSubmit", path, prompt="Please keep the retry loop around the login call")
    assert ok_json(env, "list")["total"] == before

    # When the transcript is captured, the prompt's finding is the same text: one entry still.
    say(env, path, "user", PROMPT, 0)
    hook(env, "SessionEnd", path, reason="exit")
    until(lambda: finalized(env), "the session finalized")
    argon = [
        e for e in ok_json(env, "list", "--limit", "100")["entries"] if "argon2" in e["content"]
    ]
    assert [e["content"] for e in argon] == ["we use argon2, never bcrypt"]
