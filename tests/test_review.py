"""Review (issue 17): what memory learned from a real captured session, listed with why each item
scored what it scored and where it came from; accept confirms (then it is injected), reject
archives and is never promoted again, edit saves the user's words from $EDITOR. Against the
real daemon, over a real Claude Code transcript of ``shared/samples``."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from conftest import Env, memctl, ok_json, until
from test_readme import as_seen, shown_output

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples" / "claude"
SAMPLE = "7acd37a8-2745-4b58-a8a9-46164b22ad9e"  # 0.5 MB: a JavaScript sound recorder session


@pytest.fixture
def sample() -> Path:
    path = SAMPLES / f"{SAMPLE}.jsonl"
    if not path.exists():
        pytest.skip(f"shared samples not found at {SAMPLES}")
    return path


def capture(env: Env, sample: Path, session: str = SAMPLE) -> Path:
    """The sample as if Claude Code had written it in this project (its working directory and,
    for a copy, its session id rewritten), then the SessionEnd hook as Claude sends it."""
    folder = transcripts(env)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    with open(sample, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        for line in src:
            record = json.loads(line)
            if "cwd" in record:
                record["cwd"] = str(env.project)
            if "sessionId" in record:
                record["sessionId"] = session
            out.write(json.dumps(record) + "\n")
    end_session(env, path, session)
    return path


def end_session(env: Env, path: Path, session: str) -> None:
    payload = {"session_id": session, "transcript_path": str(path), "cwd": str(env.project),
               "hook_event_name": "SessionEnd", "reason": "exit"}  # fmt: skip
    assert memctl(env, "hook", "--agent", "claude", stdin=json.dumps(payload)).code == 0


def session_start(env: Env) -> str:
    payload = {"session_id": "next-session", "cwd": str(env.project), "source": "startup",
               "hook_event_name": "SessionStart"}  # fmt: skip
    hooked = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(payload))
    assert hooked.code == 0, hooked.stderr
    return str(json.loads(hooked.stdout)["hookSpecificOutput"]["additionalContext"])


def review(env: Env) -> list[dict]:
    return ok_json(env, "review", "--limit", "200")["items"]


def item(items: list[dict], needle: str) -> dict:
    return next(i for i in items if needle in i["content"])


def test_review_round_trip_over_a_captured_session(env: Env, daemon: object, sample: Path) -> None:
    capture(env, sample)
    items = until(lambda: review(env), "the session's findings waiting for review")

    # Each item says what it is, why it scored what it scored, and where it came from.
    kinds = {i["kind"] for i in items}
    assert kinds == {"candidate", "finding"}
    for i in items:
        assert i["category"] and i["reason"] and i["threshold"] == 3  # balanced
        assert i["agent"] == "claude" and i["session_id"] == SAMPLE
        assert i["transcript_path"].endswith(f"{SAMPLE}.jsonl") and i["line"] >= 1
    pnpm = item(items, "use pnpm")
    assert pnpm["kind"] == "candidate" and "user-intent" in pnpm["signals"]
    assert pnpm["points"] >= pnpm["threshold"] and pnpm["line"] == 77
    raw = (SAMPLES / f"{SAMPLE}.jsonl").read_text(encoding="utf-8").splitlines()
    assert "pnpm" in raw[pnpm["line"] - 1]  # the line it names is the line it came from
    finding = next(i for i in items if i["kind"] == "finding")
    assert finding["points"] < finding["threshold"] and "points <" in finding["reason"]
    started = [i["created_at"] for i in items]
    assert started == sorted(started, reverse=True)  # newest first
    assert ok_json(env, "status")["project"]["awaiting_review"] == len(items)

    # A person's view: a table with the score, the signals and the transcript line; the rows
    # the README shows are rows of this very table.
    shown = memctl(env, "review").stdout
    assert "SCORE" in shown and f"claude {SAMPLE[:8]}:77" in shown and "user-intent" in shown
    readme, real = as_seen(shown_output("memctl review")), as_seen(shown)
    assert readme[0] == real[0] and set(readme[1:]) <= set(real[1:]), (readme, real)

    # Accept: confirmed, out of review, and in the next session's payload.
    accepted = ok_json(env, "review", "accept", pnpm["id"][:8])
    assert accepted["action"] == "accepted" and accepted["entries"] == [pnpm["id"]]
    assert ok_json(env, "list", "--status", "confirmed")["entries"][0]["content"] == pnpm["content"]
    assert "use pnpm" in session_start(env)

    # Reject a candidate and a finding, with a reason: archived, audited, out of the payload.
    worklet = item(items, "AudioWorklet")
    assert worklet["kind"] == "candidate"
    rejected = ok_json(
        env, "review", "reject", worklet["id"], finding["id"], "--reason", "obsolete"
    )
    assert rejected["entries"] == [worklet["id"]]
    archived = ok_json(env, "list", "--archived")["entries"]
    assert [e["id"] for e in archived] == [worklet["id"]]
    audit = [json.loads(x) for x in memctl(env, "audit", "-n", "20").stdout.splitlines()]
    [event] = [a["event"] for a in audit if a["event"]["type"] == "review_rejected"]
    assert event["reason"] == "obsolete" and event["findings"] == [finding["id"]]
    left = {i["id"] for i in review(env)}
    assert not left & {pnpm["id"], worklet["id"], finding["id"]}
    assert "Let's also Migrate to AudioWorklet" not in session_start(env)
    searched = ok_json(env, "search", finding["content"], "-k", "20")["results"]
    assert all(r["content"] != finding["content"] for r in searched)

    # Recapture: the same transcript again, and a copy of it as a new session under the most
    # eager preset (its findings now also count as seen in two sessions). What was rejected is
    # neither promoted nor waiting for review again; what was not is promoted as before.
    end_session(env, transcripts(env) / f"{SAMPLE}.jsonl", SAMPLE)
    ok_json(env, "config", "aggressive")
    copy = "0b1c2d3e-4f50-4a61-8b72-93a4b5c6d7e8"
    capture(env, sample, copy)
    until(lambda: ok_json(env, "status")["project"]["sessions"] == 2, "the second session")
    until(lambda: len(ok_json(env, "episodes")["episodes"]) == 2, "the second session finalized")
    active = [e["content"] for e in ok_json(env, "list")["entries"]]
    assert worklet["content"] not in active and finding["content"] not in active
    assert any("let's do vite" in c for c in active)  # what was not rejected stays
    again = review(env)
    assert all(i["content"] not in (worklet["content"], finding["content"]) for i in again)
    assert "Let's also Migrate to AudioWorklet" not in session_start(env)


def transcripts(env: Env) -> Path:
    return env.home / ".claude" / "projects" / ("-" + str(env.project).strip("/").replace("/", "-"))


def test_review_edit_saves_the_users_words_from_the_editor(
    env: Env, daemon: object, sample: Path, tmp_path: Path
) -> None:
    capture(env, sample)
    items = until(lambda: review(env), "items to review")
    target = item(items, "AudioWorklet")
    editor = tmp_path / "editor.sh"  # an editor that rewrites the file it is given
    editor.write_text(
        "#!/bin/sh\nprintf '#: ignored\\nRecord through an AudioWorklet, never a "
        'ScriptProcessorNode\\n\' > "$1"\n'
    )
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    env.vars["EDITOR"] = str(editor)
    env.vars.pop("VISUAL", None)
    edited = ok_json(env, "review", "edit", target["id"][:8])
    assert edited["action"] == "edited" and edited["ids"] == [target["id"]]
    [new_id] = edited["entries"]
    entry = next(e for e in ok_json(env, "list")["entries"] if e["id"] == new_id)
    assert entry["content"] == "Record through an AudioWorklet, never a ScriptProcessorNode"
    assert entry["status"] == "confirmed" and entry["source"]["session_id"] == SAMPLE
    old = next(e for e in ok_json(env, "list", "--archived")["entries"] if e["id"] == target["id"])
    assert old["archived_reason"] == "superseded" and old["superseded_by"] == new_id
    assert all(i["id"] != target["id"] for i in review(env))

    # An editor that leaves the text as it was: nothing is sent.
    env.vars["EDITOR"] = "true"
    other = next(i for i in review(env) if i["kind"] == "candidate")
    unchanged = memctl(env, "review", "edit", other["id"])
    assert unchanged.code == 0 and "unchanged" in unchanged.stderr
    assert any(i["id"] == other["id"] for i in review(env))


def test_review_errors_are_clear(env: Env, daemon: object) -> None:
    assert ok_json(env, "review") == {"items": [], "total": 0, "preset": "balanced"}
    assert memctl(env, "review").stdout.strip() == "nothing waits for review"
    missing = memctl(env, "--json", "review", "accept", "feedbeef")
    assert missing.code == 1 and json.loads(missing.stdout)["error"] == "not_found"
    assert memctl(env, "review", "reject").code == 2  # no id
    assert memctl(env, "review", "feedbeef").code == 2  # an id without an action


def test_review_through_the_mcp_tools(env: Env, daemon: object, sample: Path) -> None:
    from mcp import Client

    from test_mcp import structured, with_server

    capture(env, sample)
    until(lambda: review(env), "items to review")

    async def script(client: Client) -> tuple[dict, dict, dict]:
        listed = structured(await client.call_tool("memory_review", {"limit": 100}))
        first, second = listed["items"][0]["id"], listed["items"][1]["id"]
        kept = structured(await client.call_tool("memory_review_accept", {"ids": [first]}))
        dropped = structured(
            await client.call_tool("memory_review_reject", {"ids": [second], "reason": "no"})
        )
        return listed, kept, dropped

    listed, kept, dropped = with_server(env, script)
    assert listed["total"] == len(listed["items"]) >= 2
    assert kept["action"] == "accepted" and dropped["action"] == "rejected"
    left = {i["id"] for i in review(env)}
    assert not left & {kept["ids"][0], dropped["ids"][0]}
