"""Supersede, archive and unarchive through memctl on the real daemon (SPEC §9, issue 9
acceptance 2): archived entries are found with search --archive and never injected."""

from __future__ import annotations

import json

from conftest import Env, memctl, ok_json


def _audit_types(env: Env) -> list[str]:
    out = memctl(env, "audit", "-n", "100").stdout.splitlines()
    return [json.loads(line)["event"]["type"] for line in out]


def test_supersede_replaces_an_entry_atomically(env: Env, daemon) -> None:
    old = ok_json(env, "remember", "Deploys run from Jenkins", "--tag", "ops", "--pin")["id"]
    before = len(_audit_types(env))
    result = ok_json(env, "supersede", old[:8], "Deploys run from GitHub Actions")
    new = result["id"]
    assert result["superseded"] == old and new != old
    assert _audit_types(env)[before:] == ["entry_superseded"]  # one event
    active = ok_json(env, "list")["entries"]
    assert [(e["id"], e["status"], e["tags"]) for e in active] == [(new, "pinned", ["ops"])]
    (archived,) = ok_json(env, "list", "--archived")["entries"]
    assert (archived["id"], archived["archived_reason"], archived["superseded_by"]) == (
        old,
        "superseded",
        new,
    )
    payload = ok_json(env, "inject", "--query", "how do deploys run")["text"]
    assert "GitHub Actions" in payload and "Jenkins" not in payload
    hits = ok_json(env, "search", "Jenkins deploys", "--archive")["results"]
    assert [h["id"] for h in hits] == [old]
    again = memctl(env, "supersede", old, "Deploys run from GitLab")
    assert again.code != 0 and "archived" in again.stderr  # an archived entry is history


def test_archive_and_unarchive(env: Env, daemon) -> None:
    a = ok_json(env, "remember", "The cache is Redis 7")["id"]
    b = ok_json(env, "remember", "Sessions expire after an hour", "--pin")["id"]
    c = ok_json(env, "remember", "Logs go to Loki")["id"]
    result = ok_json(env, "archive", a, b[:8])
    assert result == {"ids": [a, b], "archived": True}
    assert [e["id"] for e in ok_json(env, "list")["entries"]] == [c]
    reasons = {e["id"]: e["archived_reason"] for e in ok_json(env, "list", "--archived")["entries"]}
    assert reasons == {a: "user", b: "user"}
    payload = ok_json(env, "inject", "--query", "redis cache sessions expire")["text"]
    assert "Redis" not in payload and "Sessions expire" not in payload  # pinned, but archived
    assert [h["id"] for h in ok_json(env, "search", "redis cache", "--archive")["results"]] == [a]
    assert ok_json(env, "search", "redis cache")["results"] == []
    assert ok_json(env, "archive", a) == {"ids": [], "archived": True}  # already archived

    assert ok_json(env, "unarchive", a) == {"ids": [a], "archived": False}
    restored = {e["id"]: e for e in ok_json(env, "list")["entries"]}
    assert restored[a]["archived_reason"] is None
    assert "Redis" in ok_json(env, "inject", "--query", "redis cache")["text"]
    # Its text remembered again meanwhile: bringing the old one back would make two.
    ok_json(env, "remember", "Sessions expire after an hour")
    clash = memctl(env, "unarchive", b)
    assert clash.code != 0 and "holds this text" in clash.stderr
    assert memctl(env, "archive", "no-such-entry-anywhere").code != 0


def _conflicting_pair(env: Env, subject: str) -> tuple[str, str]:
    a = ok_json(env, "remember", f"Always use {subject}", "--category", "pattern")["id"]
    b = ok_json(env, "remember", f"Never use {subject}", "--category", "pattern")["id"]
    return a, b


def test_conflicts_are_listed_and_resolved(env: Env, daemon) -> None:
    a, b = _conflicting_pair(env, "the repository pattern for database access")
    c, d = _conflicting_pair(env, "tabs for indentation in the makefiles")
    listed = ok_json(env, "conflicts")["conflicts"]
    assert [(x["a"]["id"], x["b"]["id"]) for x in listed] == [(a, b), (c, d)]
    assert listed[0]["b"]["content"].startswith("Never use the repository")
    assert ok_json(env, "status")["project"]["open_conflicts"] == 2
    first, second = listed[0]["id"], listed[1]["id"]

    kept = ok_json(env, "resolve", first, "--keep", b)
    assert kept == {"id": first, "kept": b, "superseded": a}
    (gone,) = ok_json(env, "list", "--archived")["entries"]
    assert (gone["id"], gone["archived_reason"], gone["superseded_by"]) == (a, "superseded", b)
    payload = ok_json(env, "inject", "--query", "repository pattern database")["text"]
    assert "CONFLICT" not in payload and "Always use the repository" not in payload

    assert ok_json(env, "resolve", second, "--both") == {"id": second, "kept": None,
                                                         "superseded": None}  # fmt: skip
    payload = ok_json(env, "inject", "--query", "tabs indentation makefiles")["text"]
    assert (
        "CONFLICT" not in payload and "Always use tabs" in payload and "Never use tabs" in payload
    )
    assert ok_json(env, "conflicts")["conflicts"] == []
    assert ok_json(env, "status")["project"]["open_conflicts"] == 0
    again = memctl(env, "resolve", first, "--both")
    assert again.code != 0 and "no open conflict" in again.stderr
    assert memctl(env, "resolve", second).code == 2  # --keep or --both is required
