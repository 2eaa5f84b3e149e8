"""Compaction on the real daemon (SPEC §8, issue 9 acceptance 1): backdated imports expire by
their category's TTL, the soft limit evicts down to the target, and everything removed is in
the archive and the audit log."""

from __future__ import annotations

import json
import time

from conftest import Env, memctl, ok_json

DAY = 86_400.0


def _import(env: Env, lines: list[dict]) -> dict:
    result = ok_json(env, "import", "-", stdin="".join(json.dumps(x) + "\n" for x in lines))
    assert result["imported"] == len(lines), result
    return result


def _ids_by_content(env: Env, archived: bool = False) -> dict[str, dict]:
    args = ["list", "--limit", "10000"] + (["--archived"] if archived else [])
    return {e["content"]: e for e in ok_json(env, *args)["entries"]}


def _compaction_decisions(env: Env) -> dict[str, dict]:
    out = memctl(env, "audit", "-n", "5000")
    assert out.code == 0, out.stderr
    decisions: dict[str, dict] = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        event = record.get("event", record)
        if event.get("type") == "compaction_applied":
            decisions.update((d["id"], d) for d in event["decisions"])
    return decisions


def test_backdated_entries_expire_by_ttl_unless_used_or_pinned(env: Env, daemon) -> None:
    ok_json(env, "status")  # the project opens and its on-load run (of nothing) is over
    now = time.time()
    lines = [
        {"content": "old progress: wired the parser", "category": "task_progress",
         "created_at": now - 200 * DAY},
        {"content": "old progress but used often", "category": "task_progress",
         "created_at": now - 200 * DAY, "last_accessed_at": now - 100 * DAY, "access_count": 3},
        {"content": "old progress that is pinned", "category": "task_progress",
         "created_at": now - 200 * DAY},
        {"content": "a warning past its thirty days", "category": "warning",
         "created_at": now - 40 * DAY},
        {"content": "a warning used recently", "category": "warning",
         "created_at": now - 40 * DAY, "last_accessed_at": now - 2 * DAY, "access_count": 1},
        {"content": "a decision within ninety days", "category": "decision",
         "created_at": now - 60 * DAY},
    ]  # fmt: skip
    _import(env, lines)
    active = _ids_by_content(env)
    assert active["old progress but used often"]["access_count"] == 3
    assert active["a warning used recently"]["last_accessed_at"] < now
    ok_json(env, "pin", active["old progress that is pinned"]["id"])

    preview = ok_json(env, "compact", "--dry-run")
    assert (preview["expired"], preview["dry_run"]) == (2, True)
    assert len(_ids_by_content(env)) == 6  # a dry run changes nothing

    result = ok_json(env, "compact")
    assert {k: result[k] for k in ("expired", "evicted", "purged", "active", "archived")} == {
        "expired": 2, "evicted": 0, "purged": 0, "active": 4, "archived": 2,
    }  # fmt: skip
    expired = {"old progress: wired the parser", "a warning past its thirty days"}
    assert set(_ids_by_content(env)) == {x["content"] for x in lines} - expired
    archived = _ids_by_content(env, archived=True)
    assert set(archived) == expired
    assert {e["archived_reason"] for e in archived.values()} == {"stale"}
    found = ok_json(env, "search", "parser progress", "--archive")["results"]
    assert archived["old progress: wired the parser"]["id"] in [r["id"] for r in found]
    assert not any(
        r["id"] == archived["old progress: wired the parser"]["id"]
        for r in ok_json(env, "search", "parser progress")["results"]
    )
    decisions = _compaction_decisions(env)
    for entry in archived.values():
        decision = decisions[entry["id"]]
        assert decision["type"] == "entry_expired" and decision["days_since_access"] > 30
    assert ok_json(env, "status")["project"]["last_compacted_at"] >= now
    again = ok_json(env, "compact")
    assert (again["expired"], again["active"], again["archived"]) == (0, 4, 2)


def test_past_the_soft_limit_active_memory_is_evicted_to_the_target(env: Env, daemon) -> None:
    ok_json(env, "status")
    now = time.time()
    lines = [
        {
            "content": f"fact number {i} about module m{i} and its helper h{i}",
            "category": "preference",  # a long TTL: only eviction removes these
            "created_at": now - 3 * DAY,
            "importance": round(0.2 + (i % 70) / 100, 2),
        }
        for i in range(3_500)
    ]
    _import(env, lines)
    result = ok_json(env, "compact")
    assert (result["evicted"], result["active"], result["archived"]) == (800, 2_700, 800)
    archived = _ids_by_content(env, archived=True)
    assert len(archived) == 800 and {e["archived_reason"] for e in archived.values()} == {"evicted"}
    kept = _ids_by_content(env)
    assert len(kept) == 2_700
    assert max(e["importance"] for e in archived.values()) <= min(
        e["importance"] for e in kept.values()
    )  # the least important went
    decisions = _compaction_decisions(env)
    assert {e["id"] for e in archived.values()} <= set(decisions)
    sample = sorted(archived)[:3]
    for content in sample:
        hits = ok_json(env, "search", content, "--archive", "-k", "3")["results"]
        assert archived[content]["id"] in [h["id"] for h in hits]
