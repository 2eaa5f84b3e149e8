"""Memory banks, lifecycle import and instruction files (SPEC §9, §10, §11), through the real
memctl against the real daemon."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from conftest import Daemon, Env, memctl, ok_json, until

SEVEN = [
    "projectBrief.md",
    "productContext.md",
    "systemPatterns.md",
    "techContext.md",
    "activeContext.md",
    "progress.md",
    "decisionLog.md",
]
DECISION = (
    "## Decision: Store memory in SQLite\n\n"
    "- **Date**: 2026-01-02\n"
    "- **Status**: Accepted\n"
    "- **Decision**: One WAL database per project, journaled first.\n"
)


def _bank(env: Env) -> Path:
    return env.project / "memory-bank"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_init_creates_seven_and_never_overwrites(env: Env, daemon) -> None:
    first = ok_json(env, "bank", "init", "--brief", "A ledger for plant watering")
    assert first == {"created": SEVEN, "existing": []}
    assert "plant watering" in (_bank(env) / "projectBrief.md").read_text()
    (_bank(env) / "activeContext.md").write_text("# Active Context\n\nmine\n")
    second = ok_json(env, "bank", "init", "--brief", "something else")
    assert second == {"created": [], "existing": SEVEN}
    assert (_bank(env) / "activeContext.md").read_text() == "# Active Context\n\nmine\n"


def test_read_list_validate(env: Env, daemon) -> None:
    invalid = memctl(env, "--json", "bank", "validate")
    assert invalid.code == 1  # problems are an error a script can test
    empty = json.loads(invalid.stdout)  # the report, one JSON object, not an error object
    assert empty["valid"] is False and "progress.md" in empty["missing_required"]
    ok_json(env, "bank", "init")
    report = ok_json(env, "bank", "validate")
    assert set(report) >= {"valid", "missing_required", "missing_recommended", "problems"}
    assert report["valid"] is True and report["missing_required"] == []
    read = ok_json(env, "bank", "read", "progress.md")
    assert read["content"] == (_bank(env) / "progress.md").read_text()
    assert read["last_modified"] > 0
    files = ok_json(env, "bank", "list")["files"]
    assert [f["name"] for f in files] == SEVEN
    assert all(set(f) == {"name", "size", "last_modified"} and f["size"] > 0 for f in files)
    human = memctl(env, "bank", "read", "progress.md")
    assert human.code == 0 and human.stdout.startswith("# Progress")


def test_write_and_update_from_stdin(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    written = ok_json(env, "bank", "write", "notes.md", stdin="# Notes\n\n## Ideas\n\n- one\n")
    assert written["success"] is True and written["path"].endswith("memory-bank/notes.md")
    assert written["sync"] == "scheduled"  # in the cache now, on disk at the next sync
    assert ok_json(env, "bank", "read", "notes.md")["content"] == "# Notes\n\n## Ideas\n\n- one\n"
    ok_json(env, "bank", "update", "notes.md", stdin="## Ideas\n\n- two\n")
    assert "- two" in ok_json(env, "bank", "read", "notes.md")["content"]
    assert ok_json(env, "bank", "sync") == {"pending": 0, "writing": False}
    assert (_bank(env) / "notes.md").read_text() == "# Notes\n\n## Ideas\n\n- two\n"
    human = memctl(env, "bank", "write", "notes.md", stdin="# Notes\n")
    assert human.code == 0 and "on disk at the next sync" in human.stdout
    synced = memctl(env, "bank", "sync")
    assert synced.code == 0 and "on disk" in synced.stdout
    assert (_bank(env) / "notes.md").read_text() == "# Notes\n"
    missing = memctl(env, "bank", "update", "absent.md", stdin="## X\n\ny\n")
    assert missing.code == 1 and "does not exist" in missing.stderr


def test_security_refusals_change_nothing(env: Env, daemon, tmp_path: Path) -> None:
    ok_json(env, "bank", "init")
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    (other / "memory-bank").mkdir()
    secret = other / "memory-bank" / "projectBrief.md"
    secret.write_text("# Other project's brief\n")
    os.symlink(secret, _bank(env) / "escape.md")
    before, before_other = _snapshot(_bank(env)), _snapshot(other / "memory-bank")
    attempts = [
        (("bank", "read", "../x.md"), "'..'"),
        (("bank", "write", "../x.md"), "'..'"),
        (("bank", "read", "/etc/passwd"), "absolute paths"),
        (("bank", "write", "/etc/passwd"), "absolute paths"),
        (("bank", "write", "notes.txt"), ".md files"),
        (("bank", "read", "escape.md"), "symlink"),
        (("bank", "write", "escape.md"), "symlink"),
        (("bank", "update", "escape.md"), "symlink"),
        (("bank", "write", "activeContext.md", "--mode", "ask"), "read-only"),
        (("bank", "process", "--apply", "--mode", "ask"), "read-only"),
    ]
    for args, reason in attempts:
        result = memctl(env, *args, stdin="# Pwned\n")
        assert result.code == 1, args
        assert "forbidden" in result.stderr and reason in result.stderr, (args, result.stderr)
    assert _snapshot(_bank(env)) == before
    assert _snapshot(other / "memory-bank") == before_other
    assert not (env.project / "x.md").exists() and not (env.root / "x.md").exists()
    # Isolation: the other project is reached only by naming it, and its writes stay there.
    ok_json(env, "--project", str(other), "bank", "write", "activeContext.md", stdin="# A\n")
    ok_json(env, "--project", str(other), "bank", "sync")
    assert (other / "memory-bank" / "activeContext.md").read_text() == "# A\n"
    assert _snapshot(_bank(env)) == before
    assert ok_json(env, "bank", "read", "activeContext.md")["content"] != "# A\n"


def test_decision_log_is_append_only(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    ok_json(env, "bank", "update", "decisionLog.md", stdin=DECISION)
    ok_json(env, "bank", "sync")
    before = (_bank(env) / "decisionLog.md").read_text()
    dropped = memctl(env, "bank", "write", "decisionLog.md", stdin="# Decision Log\n")
    assert dropped.code == 1 and "append-only" in dropped.stderr
    assert (_bank(env) / "decisionLog.md").read_text() == before


def test_process_routes_and_apply_writes(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    text = (
        "We decided to use msgpack on the wire. Finished the socket layer. "
        "Next: write the docs. Found a bug in the parser."
    )
    before = _snapshot(_bank(env))
    routed = ok_json(env, "bank", "process", stdin=text)
    assert _snapshot(_bank(env)) == before  # without --apply nothing is written
    items = routed["items"]
    assert all(set(i) >= {"target_file", "operation_type", "content", "metadata"} for i in items)
    assert [(i["target_file"], i["operation_type"]) for i in items] == [
        ("decisionLog.md", "append"),
        ("progress.md", "complete_item"),
        ("activeContext.md", "append_to_section"),
        ("progress.md", "append_to_section"),
    ]
    applied = ok_json(env, "bank", "process", "--apply", stdin=text)
    assert applied["applied"] == ["decisionLog.md", "progress.md", "activeContext.md"]
    ok_json(env, "bank", "sync")
    assert "## Decision: We decided to use msgpack" in (_bank(env) / "decisionLog.md").read_text()
    progress = (_bank(env) / "progress.md").read_text()
    assert "- [x] Finished the socket layer" in progress and "bug in the parser" in progress
    assert "write the docs" in (_bank(env) / "activeContext.md").read_text()
    for untouched in ("projectBrief.md", "techContext.md", "systemPatterns.md"):
        assert (_bank(env) / untouched).read_bytes() == before[untouched]
    # The decision and the completed item were ingested as entries right away.
    assert applied["ingested"] == 2
    categories = sorted(e["category"] for e in ok_json(env, "list")["entries"])
    assert categories == ["decision", "task_progress"]
    # The same text applied again files nothing twice (the day's dates aside, it is all there).
    files = _snapshot(_bank(env))
    again = ok_json(env, "bank", "process", "--apply", stdin=text)
    assert again["applied"] == [] and again["ingested"] == 0
    ok_json(env, "bank", "sync")
    assert _snapshot(_bank(env)) == files


def test_process_apply_needs_a_bank(env: Env, daemon) -> None:
    result = memctl(env, "bank", "process", "--apply", stdin="We decided to use Go.")
    assert result.code == 1 and "bank init" in result.stderr
    assert not _bank(env).exists()


def test_lifecycle_decision_becomes_one_searchable_entry(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    written = ok_json(env, "bank", "update", "decisionLog.md", stdin=DECISION)
    assert written["ingested"] == 1
    again = ok_json(env, "ingest")
    assert again == {"decisions": 0, "completed": 0, "duplicates": 1}
    assert ok_json(env, "bank", "ingest")["decisions"] == 0
    entries = ok_json(env, "list")["entries"]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["category"] == "decision" and entry["source"]["kind"] == "memory-bank"
    assert entry["content"].startswith("Decision: Store memory in SQLite")
    found = ok_json(env, "search", "SQLite WAL database")["results"]
    assert [r["id"] for r in found] == [entry["id"]]
    audit = memctl(env, "audit", "-n", "50")
    assert audit.code == 0 and audit.stdout.count(entry["id"]) == 1  # journaled, once


def test_lifecycle_ingests_external_edits_on_request(env: Env) -> None:
    # The watcher ingests such an edit on its own after its debounce (test_bank_watch.py); with
    # the longest debounce it cannot get there before the request, however slow the machine.
    daemon = Daemon(env, {"MEMORYD_CAPTURE__DEBOUNCE_S": "60"}).start()
    try:
        ok_json(env, "bank", "init")
        progress = _bank(env) / "progress.md"
        progress.write_text(
            progress.read_text().replace(
                "## Completed\n", "## Completed\n\n- [x] Ship the first release — 2026-01-03\n"
            )
        )
        assert ok_json(env, "ingest") == {"decisions": 0, "completed": 1, "duplicates": 0}
        assert ok_json(env, "ingest") == {"decisions": 0, "completed": 0, "duplicates": 1}
        entry = ok_json(env, "list")["entries"][0]
        assert entry["category"] == "task_progress" and "first release" in entry["content"]
    finally:
        daemon.stop()


def test_activate_and_projects(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    (env.project / ".clinerules-code").write_text("Always run the tests.\n")
    active = ok_json(env, "bank", "activate", "--mode", "code", "--file", "src/app.py")
    assert set(active) == {"bank_info", "content", "custom_instructions", "cache"}
    assert list(active["content"]) == SEVEN
    assert any("run the tests" in r["content"] for r in active["custom_instructions"])
    known = ok_json(env, "projects")["projects"]
    [here] = [k for k in known if k["path"] == str(env.project.resolve())]
    assert here["name"] == "project" and here["bank"] and here["open"]


def test_files_show_list_with_import(env: Env, daemon) -> None:
    (env.project / "docs").mkdir()
    (env.project / "docs" / "style.md").write_text("Use four spaces.\n")
    (env.project / "MEMORY.md").write_text("# Project memory\n\n@import docs/style.md\n")
    listed = ok_json(env, "files", "list")
    paths = [f["path"] for f in listed["files"]]
    assert any(p.endswith("MEMORY.md") for p in paths)
    imported = [f for f in listed["files"] if f["path"].endswith("docs/style.md")]
    assert imported and imported[0]["imported_from"].endswith("MEMORY.md")
    shown = ok_json(env, "files", "show")
    assert "Use four spaces." in shown["text"] and "Project memory" in shown["text"]
    (env.project / "docs" / "style.md").write_text("Use tabs.\n")
    # Loaded files are watched (tests/test_instructions_settings.py); refresh reads them now,
    # without waiting for the watcher's debounce.
    ok_json(env, "files", "refresh")
    assert "Use tabs." in ok_json(env, "files", "show")["text"]


def test_save_memory_preview_then_yes(env: Env, daemon) -> None:
    target = env.project / "MEMORY.md"
    preview = ok_json(env, "save-memory", "Deploys go through CI only", "--section", "Rules")
    assert preview["written"] is False and "+Deploys go through CI only" in preview["diff"]
    assert not target.exists()
    human = memctl(env, "save-memory", "Deploys go through CI only")
    assert human.code == 0 and "--yes" in human.stdout and not target.exists()
    saved = ok_json(env, "save-memory", "Deploys go through CI only", "--section", "Rules", "--yes")
    assert saved["written"] is True and saved["path"] == str(target.resolve())
    assert "## Rules" in target.read_text() and "Deploys go through CI only" in target.read_text()
    assert "Deploys go through CI only" in ok_json(env, "files", "show")["text"]


def _fill_completed(env: Env) -> None:
    """320 completed items in progress.md: a bank well above its 5,000-token budget."""
    done = "".join(
        f"- [x] Shipped work item {i} with a long enough description — 2026-0{1 + i % 9}-10\n"
        for i in range(320)
    )
    progress = ok_json(env, "bank", "read", "progress.md")["content"]
    progress = progress.replace("## Completed\n", "## Completed\n\n" + done, 1)
    ok_json(env, "bank", "write", "progress.md", stdin=progress)


def _assert_each_item_kept_or_archived(env: Env) -> str:
    """Every item is in exactly one of progress.md and its archive: nothing lost, none
    doubled. Returns the archive's text."""
    kept = (_bank(env) / "progress.md").read_text()
    archive = (_bank(env) / "archive" / "progress.md").read_text()
    for i in range(320):
        item = f"Shipped work item {i} with"
        assert (item in kept) != (item in archive), i
    return archive


def test_optimise_previews_then_archives_completed_items(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    _fill_completed(env)
    assert ok_json(env, "bank", "activate")["bank_info"]["over_budget"] is True

    preview = ok_json(env, "bank", "optimise")
    assert preview["applied"] is False and preview["changed"] == ["progress.md"]
    assert preview["archived"] == ["archive/progress.md"]
    assert 4000 <= preview["tokens_after"] <= 5000 < preview["tokens_before"]
    assert "item 0 " in ok_json(env, "bank", "read", "progress.md")["content"]  # only a plan

    refused = memctl(env, "bank", "optimise", "--apply", "--mode", "ask")
    assert refused.code == 1 and "read-only" in refused.stderr
    applied = ok_json(env, "bank", "optimise", "--apply")
    assert applied["applied"] is True and applied["tokens_after"] == preview["tokens_after"]
    assert ok_json(env, "bank", "activate")["bank_info"]["over_budget"] is False
    ok_json(env, "bank", "sync")
    archive = _assert_each_item_kept_or_archived(env)
    assert archive.startswith("# Archive of progress.md")
    assert "archive/progress.md" in [f["name"] for f in ok_json(env, "bank", "list")["files"]]
    again = memctl(env, "bank", "optimise")
    assert again.code == 0 and "nothing to optimise" in again.stdout


def _audited(env: Env, kind: str, *project: str) -> list[dict]:
    out = memctl(env, *project, "audit", "-n", "200")
    assert out.code == 0, out.stderr
    events = [json.loads(line)["event"] for line in out.stdout.splitlines()]
    return [e for e in events if e["type"] == kind]


def test_a_bank_over_budget_is_optimised_on_the_schedule(env: Env, tmp_path: Path) -> None:
    """Issue 9, bank size: the compaction job optimises every loaded bank above its budget as
    ``bank optimise --apply`` would (the archive first), audited; a bank under it is left."""
    small = tmp_path / "small"
    (small / ".git").mkdir(parents=True)
    other = ("--project", str(small))
    daemon = Daemon(env, {"MEMORYD_JOBS__COMPACTION_S": "0.2"}).start()
    try:
        ok_json(env, *other, "bank", "init")  # loaded first: every tick looks at it too
        untouched = _snapshot(small / "memory-bank")
        ok_json(env, "bank", "init")
        _fill_completed(env)

        [event] = until(lambda: _audited(env, "bank_optimised"), "the scheduled optimiser")
        assert event["trigger"] == "schedule" and event["budget"] == 5000
        assert event["tokens_after"] <= 5000 < event["tokens_before"]
        assert event["changed"] == ["memory-bank/progress.md"]
        assert event["archived"] == ["memory-bank/archive/progress.md"]
        assert ok_json(env, "bank", "activate")["bank_info"]["over_budget"] is False
        ok_json(env, "bank", "sync")
        archive = _assert_each_item_kept_or_archived(env)
        assert "Shipped work item 0 with" in archive

        assert _snapshot(small / "memory-bank") == untouched
        assert not (small / "memory-bank" / "archive").exists()
        assert _audited(env, "bank_optimised", *other) == []
    finally:
        daemon.stop()


def test_projects_known_from_an_earlier_run(env: Env, tmp_path: Path) -> None:
    """``projects`` lists every project the daemon has held memory for, not only those opened
    since it started; a project whose folder is gone is left out."""
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    gone = tmp_path / "gone"
    (gone / ".git").mkdir(parents=True)
    first = Daemon(env).start()
    try:
        for project in (env.project, other, gone):
            ok_json(env, "--project", str(project), "remember", f"a fact of {project.name}")
    finally:
        first.stop()
    shutil.rmtree(gone)
    (other / "memory-bank").mkdir()
    second = Daemon(env).start()
    try:
        listed = {k["path"]: k for k in ok_json(env, "projects")["projects"]}
        # Described from its data folder without opening it: a second listing still finds it
        # closed, with the same counts.
        again = {k["path"]: k for k in ok_json(env, "projects")["projects"]}
        human = memctl(env, "projects").stdout
        status = ok_json(env, "status")["project"]
        opened = {k["path"]: k for k in ok_json(env, "projects")["projects"]}
    finally:
        second.stop()
    assert {str(env.project.resolve()), str(other.resolve())} <= set(listed)
    assert str(gone.resolve()) not in listed
    closed = listed[str(other.resolve())]
    assert {**closed, "size_bytes": 0} == {**again[str(other.resolve())], "size_bytes": 0}
    assert closed["held"] and not closed["open"] and closed["bank"]
    assert closed["entries"] == {"candidate": 0, "confirmed": 1, "pinned": 0, "archived": 0}
    assert closed["awaiting_review"] == 0 and closed["sessions"] == 0
    assert closed["last_capture_at"] is None and closed["size_bytes"] > 0
    assert "ENTRIES" in human and "SIZE" in human
    here = opened[str(env.project.resolve())]  # status opened it: described from memory now
    assert here["open"] and not here["bank"]
    for key in ("entries", "awaiting_review", "sessions", "last_capture_at", "bank"):
        assert here[key] == status[key], key
    assert here["size_bytes"] > 0 and status["size_bytes"] > 0


def test_modes_apply_the_seeds_file_access(env: Env, daemon) -> None:
    """Seed 000 §4: each mode reads and changes its own files; a refusal changes nothing."""
    ok_json(env, "bank", "init")
    design = ["productContext.md", "systemPatterns.md"]
    architect = ok_json(env, "bank", "activate", "--mode", "architect")
    assert list(architect["content"]) == design
    assert architect["bank_info"]["reads"] == design == architect["bank_info"]["writes"]
    assert architect["bank_info"]["files"] == SEVEN  # the bank is all there, only not read
    plan = ok_json(env, "bank", "activate", "--mode", "plan")["bank_info"]
    assert plan["reads"] == SEVEN and plan["writes"] == []
    shown = memctl(env, "bank", "activate", "--mode", "debug")
    assert "<!-- mode debug: reads projectBrief.md" in shown.stdout
    assert "writes activeContext.md -->" in shown.stdout
    before = _snapshot(_bank(env))
    refused = [
        (("bank", "update", "progress.md", "--mode", "architect"), "cannot change progress.md"),
        (("bank", "write", "techContext.md", "--mode", "act"), "cannot change techContext.md"),
        (("bank", "update", "progress.md", "--mode", "debug"), "cannot change progress.md"),
        (("bank", "update", "activeContext.md", "--mode", "plan"), "read-only"),
        (("bank", "process", "--apply", "--mode", "debug"), "cannot change progress.md"),
    ]
    for args, reason in refused:
        result = memctl(env, *args, stdin="## Completed\n\n- [x] done: shipped the API\n")
        assert result.code == 1 and reason in result.stderr, (args, result.stderr)
    assert _snapshot(_bank(env)) == before
    assert all(
        "shipped the API" not in ok_json(env, "bank", "read", name)["content"] for name in SEVEN
    )  # nor in the daemon's cache, waiting for the next sync
    allowed = [
        ("systemPatterns.md", "architect"),
        ("progress.md", "act"),
        ("activeContext.md", "debug"),
        ("techContext.md", "code"),
        ("techContext.md", "review"),  # a mode the seed does not name: full access
    ]
    for name, mode in allowed:
        note = f"## Notes\n\n- written in {mode} mode\n"
        ok_json(env, "bank", "update", name, "--mode", mode, stdin=note)
        assert f"written in {mode} mode" in ok_json(env, "bank", "read", name)["content"]
