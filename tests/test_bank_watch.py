"""Lifecycle ingestion from edits made on disk (issue 5 acceptance 5): a decision appended to
decisionLog.md by hand, or by `git pull`, becomes a searchable decision entry, once."""

from __future__ import annotations

from conftest import Daemon, Env, ok_json, until


def _decision(title: str, text: str) -> str:
    fields = f"- **Date**: 2026-11-21\n- **Status**: Accepted\n- **Decision**: {text}\n"
    return f"\n## Decision: {title}\n\n{fields}"


def _entries_like(env: Env, needle: str) -> list[dict]:
    return [
        e for e in ok_json(env, "list", "--limit", "10000")["entries"] if needle in e["content"]
    ]


def test_decision_appended_on_disk_becomes_an_entry_once(env: Env, daemon) -> None:
    ok_json(env, "bank", "init", "--brief", "A shop")
    log = env.project / "memory-bank" / "decisionLog.md"
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(_decision("Use Temporal", "Billing workflows run on Temporal."))
    until(lambda: _entries_like(env, "Temporal"), "the first decision ingested")
    hits = ok_json(env, "search", "billing workflows temporal")["results"]
    assert hits and hits[0]["category"] == "decision"

    with open(log, "a", encoding="utf-8") as fh:  # a second edit, and a second decision
        fh.write(_decision("Use Loki", "Logs are shipped to Loki."))
    until(lambda: _entries_like(env, "Loki"), "the second decision ingested")
    assert len(_entries_like(env, "Temporal")) == 1  # ingested again, added once
    assert _entries_like(env, "Temporal")[0]["source"]["kind"] == "memory-bank"


def test_completed_progress_item_edited_on_disk(env: Env, daemon) -> None:
    ok_json(env, "bank", "init")
    progress = env.project / "memory-bank" / "progress.md"
    text = progress.read_text()
    progress.write_text(
        text.replace(
            "## Completed\n", "## Completed\n\n- [x] Ship the search page — 2026-11-20\n", 1
        )
    )
    found = until(lambda: _entries_like(env, "search page"), "the completed item ingested")
    assert found[0]["category"] == "task_progress"


def test_banks_are_watched_with_capture_disabled(env: Env) -> None:
    daemon = Daemon(env, {"MEMORYD_CAPTURE__ENABLED": "false"}).start()
    try:
        ok_json(env, "bank", "init")
        log = env.project / "memory-bank" / "decisionLog.md"
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(_decision("Use NATS", "Events go over NATS."))
        until(lambda: _entries_like(env, "NATS"), "the decision ingested without capture")
    finally:
        daemon.stop()
