"""Fixes from the independent review of sharing and review (each test failed before its fix):
a fresh clone keeps the team's memory; compaction's archives and purges stay on the machine
that made them; a link in place of the shared folder or file is refused; a teammate's file and
the user's review words are input like any other (redacted, bounded); a pin survives a merge
with a confirmed twin."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from conftest import Daemon, Env, memctl, ok_json
from memctl.protocol import Source
from memoryd.core import entries as core_entries
from memoryd.core import share

DAY = 86_400.0
SHARED = Path(".memoryd") / "memory.jsonl"


def _secret() -> str:
    return "ghp_" + "A1b2C3d4E5f6G7h8I9j0" + "K1l2M3n4O5p6Q7r8"  # built: no literal token


def _line(**fields: object) -> str:
    return json.dumps(fields, separators=(",", ":")) + "\n"


def test_a_fresh_clone_keeps_the_teams_older_memory(env: Env) -> None:
    """The file's entries carry no local use: their TTL starts when they arrive, so the first
    compaction archives none of them, and nothing archived goes back into the file."""
    now = time.time()
    (env.project / ".memoryd").mkdir()
    team = [
        _line(type="entry", id="team0001", updated_at=now - 100 * DAY, category="decision",
              content="Deploys go through ArgoCD", status="confirmed", created_at=now - 100 * DAY),
        _line(type="entry", id="team0002", updated_at=now - 40 * DAY, category="warning",
              content="The staging DB is read only on Fridays", status="confirmed",
              created_at=now - 40 * DAY),
    ]  # fmt: skip
    (env.project / SHARED).write_text("".join(team))
    daemon = Daemon(env).start()
    try:
        assert ok_json(env, "share")["enabled"]
        report = ok_json(env, "compact")
        assert (report["expired"], report["evicted"]) == (0, 0)
        assert sorted(e["id"] for e in ok_json(env, "list")["entries"]) == ["team0001", "team0002"]
    finally:
        daemon.stop()
    assert '"archived":true' not in (env.project / SHARED).read_text()


def _entry(entry_id: str, content: str, at: float, **fields: object) -> share.Entry:
    base = core_entries.new_entry(
        entry_id=entry_id, content=content, category="decision", status="confirmed", now=at,
        source=Source(kind="user"),
    )  # fmt: skip
    return msgspec.structs.replace(base, **fields)  # type: ignore[arg-type]


def test_compactions_archives_and_purges_stay_local() -> None:
    kept = _entry("a1", "Use UTC everywhere", 10.0)
    stale = _entry("b2", "The CI cache is warm", 11.0, archived=True, archived_reason="stale")
    evicted = _entry("c3", "Lint with ruff", 12.0, archived=True, archived_reason="evicted")
    superseded = _entry("d4", "Lint with flake8", 13.0, archived=True, archived_reason="superseded")
    purged = share.Tombstone(id="e5", updated_at=14.0, reason="purged")
    forgotten = share.Tombstone(id="f6", updated_at=15.0)
    data = share.render([kept, stale, evicted, superseded], [purged, forgotten], [])
    assert [json.loads(x)["id"] for x in data.splitlines()] == ["a1", "d4", "f6"]


def test_a_new_entry_from_the_file_counts_as_used_when_it_arrived() -> None:
    version = share.to_shared(_entry("a1", "Use UTC everywhere", 10.0))
    assert share.to_entry(version, None, now=500.0).last_accessed_at == 500.0
    held = _entry("a1", "Use UTC everywhere", 10.0, last_accessed_at=42.0)
    assert share.to_entry(version, held, now=500.0).last_accessed_at == 42.0


def test_a_pinned_twin_stays_over_a_confirmed_one() -> None:
    """Two entries with one text: the pinned one stays, whatever the ids."""
    mine = _entry("b9", "Deploy on Tuesdays", 10.0, status="pinned")
    theirs = share.to_shared(_entry("a1", "Deploy on Tuesdays", 20.0))
    plan = share.plan_merge(
        [theirs], [], local={}, owners={mine.fingerprint: mine}, present=set(),
        local_edges={}, total=1,
    )  # fmt: skip
    (written,) = plan.entries
    assert (written.id, written.archived, written.superseded_by) == ("a1", True, "b9")
    assert plan.twins == ()  # the local pinned entry is not archived


def test_a_teammates_free_text_is_redacted_and_bounded() -> None:
    secret = _secret()
    source = {"kind": "agent", "agent": f"claude {secret}", "rule_id": "r" * 3000}
    data = (
        _line(type="entry", id="t1", updated_at=1.0, content="Deploys use ArgoCD",
              category="decision", status="confirmed", created_at=1.0, source=source)
        + '{"type":"entry","id":"x1","content":"token ' + secret + '" BROKEN\n'
        + _line(type="tombstone", id="t2", updated_at=1.0, fingerprint=f"fp {secret}")
    ).encode()  # fmt: skip
    parsed = share.parse(data)
    (entry,) = parsed.records
    assert isinstance(entry, share.SharedEntry)
    assert entry.source.agent == "claude [REDACTED:github_token]"
    assert entry.source.rule_id == "r" * share.SOURCE_FIELD_CHARS
    assert [m.line for m in parsed.malformed] == [2, 3]
    assert all(secret not in m.text + m.reason for m in parsed.malformed)


@pytest.mark.parametrize("linked", ["folder", "file"])
def test_a_link_in_place_of_the_shared_folder_or_file_is_refused(
    env: Env, tmp_path: Path, linked: str
) -> None:
    other = tmp_path / "other"
    (other / ".memoryd").mkdir(parents=True)
    (other / ".memoryd" / "memory.jsonl").write_text("")
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[default]\ntoken = {_secret()}\n")
    if linked == "folder":
        (env.project / ".memoryd").symlink_to(other / ".memoryd")
    else:
        (env.project / ".memoryd").mkdir()
        (env.project / SHARED).symlink_to(credentials)
    daemon = Daemon(env).start()
    try:
        ok_json(env, "remember", "Project A's plan is codename Falcon")
        refused = memctl(env, "share", "on")
        assert refused.code == 1 and "symbolic link" in refused.stderr
        status = ok_json(env, "status")
        assert not ok_json(env, "share")["enabled"]
    finally:
        daemon.stop()
    assert (other / ".memoryd" / "memory.jsonl").read_text() == ""  # nothing written through
    assert (env.project / ".memoryd").is_symlink() or (env.project / SHARED).is_symlink()
    audit = next(env.data.rglob("audit.jsonl")).read_text()
    assert "[default]" not in audit and _secret() not in audit  # nothing read through
    assert status["project"] is not None


def test_review_edit_and_reject_reason_are_redacted_and_bounded(
    env: Env, daemon: Daemon, tmp_path: Path
) -> None:
    now, secret = time.time(), _secret()
    candidates = "".join(
        _line(id=i, content=text, category="preference", status="candidate",
              updated_at=now, created_at=now)
        for i, text in [("cand0001", "Use pnpm for installs"), ("cand0002", "Use yarn"),
                        ("cand0003", "Use npm for installs")]
    )  # fmt: skip
    ok_json(env, "import", "-", stdin=candidates)
    editor = tmp_path / "editor.sh"
    editor.write_text(f"#!/bin/sh\necho 'Use pnpm; the registry token is {secret}' > \"$1\"\n")
    editor.chmod(0o755)
    env.vars["EDITOR"] = str(editor)
    assert memctl(env, "review", "edit", "cand0001").code == 0
    ok_json(env, "review", "reject", "cand0002", "--reason", f"it leaks {secret}")
    editor.write_text('#!/bin/sh\npython3 -c "print(\'x\' * 5000)" > "$1"\n')
    too_long = memctl(env, "review", "edit", "cand0003")
    assert too_long.code == 1 and "the limit is 500" in too_long.stderr
    contents = [e["content"] for e in ok_json(env, "list")["entries"]]
    assert "Use pnpm; the registry token is [REDACTED:github_token]" in contents
    assert all(len(c) <= 500 for c in contents)
    daemon.stop()
    leaks = [
        f.name for f in env.data.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()
    ]
    assert leaks == []
