"""One redaction gate on every path (issue 16): secrets sent through each operation that keeps
text (entries, import, supersede, notes, the memory bank's write, update, init and routed text,
``save-memory``, the prompt hook, sharing and export) and through operations that refuse them
(error replies quote their input) reach no file the daemon writes — its data, state and log, the
project's bank, ``MEMORY.md`` and shared file, the debug dump — and no reply. Transcripts have
their own test (test_capture_e2e.py). A secret in a file the user edited is theirs: ``bank
validate`` reports it without quoting it."""

from __future__ import annotations

import json

from conftest import Daemon, Env, Result, memctl, ok_json


def _secrets() -> dict[str, str]:
    # Built at run time so no literal token sits in the source for scanners to trip on.
    return {
        "aws": "AKIA" + "Q" * 4 + "7EXAMPLEKEY1",
        "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" + "kLmNoPqRsTuV",
        "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "password": "hunter2" + "Sup3rS3cret!",
        "pg": "s3cr3t" + "Passw0rd",
        "slack": "xoxb-" + "123456789012-123456789012-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    }


def test_no_secret_reaches_a_file_or_a_reply_on_any_path(env: Env) -> None:
    s = _secrets()
    daemon = Daemon(env, {"MEMORYD_BANKS__DEBUG_DUMP": "true"}).start()
    replies: list[tuple[tuple[str, ...], Result]] = []

    def run(*args: str, stdin: str | None = None, ok: bool = True) -> Result:
        result = memctl(env, *args, stdin=stdin)
        replies.append((args, result))
        assert (result.code == 0) is ok, (args, result)
        return result

    try:
        run("remember", f"The deploy key is {s['aws']}", "--tag", "deploy")
        run("import", "-", stdin=json.dumps({"content": f"CI token {s['github']}"}) + "\n")
        run("supersede", "deploy", f"The deploy key is now {s['stripe']}")
        run("note", f"rotate password={s['password']} soon")
        run("bank", "init", "--brief", f"A shop; its database is postgres://app:{s['pg']}@db/shop")
        focus = f"# Active Context\n\n## Current Focus\n\nThe Slack bot uses {s['slack']}.\n"
        run("bank", "write", "activeContext.md", stdin=focus)
        run("bank", "update", "progress.md", stdin=f"## Done\n\n- moved {s['github']} to vault\n")
        run("bank", "process", "--apply", stdin=f"We decided to use the key {s['aws']} in CI.\n")
        run("save-memory", f"Never log {s['stripe']}")  # the preview
        run("save-memory", "--yes", f"Never log {s['stripe']}")
        hook = {
            "session_id": "s1",
            "cwd": str(env.project),
            "hook_event_name": "UserPromptSubmit",
            "prompt": f"Fix the build. remember: the registry token is {s['github']}",
        }
        run("hook", "claude", "UserPromptSubmit", stdin=json.dumps(hook))
        run("share", "on")
        run("export", str(env.root / "export.jsonl"))
        run("bank", "sync")
        # Refused requests quote what they were given: the quote is redacted too.
        run("pin", s["github"], ok=False)
        run("forget", s["aws"], ok=False)
        run("bank", "read", f"{s['stripe']}.md", ok=False)
        run("alias", "add", "tok", s["slack"], ok=False)
        run("--json", "pin", s["github"], ok=False)
        # Everything the operations stored is there, redacted (none was dropped on the way).
        listed = ok_json(env, "list")["entries"] + ok_json(env, "list", "--archived")["entries"]
        assert len(listed) >= 4 and all("[REDACTED:" in e["content"] for e in listed)
        (note,) = ok_json(env, "notes")["notes"]
        assert "[REDACTED:password_assignment]" in note["content"]
        assert "[REDACTED:" in (env.project / "memory-bank" / "activeContext.md").read_text()
    finally:
        daemon.stop()

    files = [f for f in env.root.rglob("*") if f.is_file() and "home" not in f.parts]
    names = {f.name for f in files}
    assert {"memory.db", "memoryd.log", "cache_memory_dump.json", "MEMORY.md"} <= names
    assert {"memory.jsonl", "export.jsonl", "decisionLog.md", "progress.md"} <= names
    leaks = {
        (name, str(f.relative_to(env.root)))
        for f in files
        for name, secret in s.items()
        if secret.encode() in f.read_bytes()
    }
    assert leaks == set()
    echoed = {
        (name, args[0])
        for args, r in replies
        for name, secret in s.items()
        if secret in r.stdout + r.stderr
    }
    assert echoed == set()
    refusals = [r.stdout + r.stderr for args, r in replies if r.code != 0]
    assert len(refusals) == 5 and all("[REDACTED:" in text for text in refusals)


def test_a_secret_in_a_bank_file_the_user_edited_is_reported_not_quoted(
    env: Env, daemon: Daemon
) -> None:
    s = _secrets()
    ok_json(env, "bank", "init")
    edited = env.project / "memory-bank" / "techContext.md"
    edited.write_text(f"# Tech Context\n\nStaging uses {s['github']} for the registry.\n")
    result = memctl(env, "--json", "bank", "validate")
    assert result.code == 1
    report = json.loads(result.stdout)
    assert not report["valid"]
    (problem,) = [p for p in report["problems"] if p["kind"] == "secret"]
    assert problem["file"] == "techContext.md" and "github_token" in problem["message"]
    assert s["github"] not in result.stdout + result.stderr
    assert s["github"] in edited.read_text()  # the user's file is theirs: reported, not changed
    edited.write_text("# Tech Context\n\nStaging uses the registry token from the vault.\n")
    assert memctl(env, "bank", "validate").code == 0
