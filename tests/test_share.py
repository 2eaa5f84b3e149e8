"""Sharing memory through git (issue 9, seed 001, SPEC §3), on real daemons, real git and the real
client: ``memctl share``, the file ``.memoryd/memory.jsonl`` the daemon keeps, merging it after
a pull, and ``export``/``import`` round-tripping identities and edges."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import Daemon, Env, make_env, memctl, ok_json, until
from memctl import protocol
from memctl.transport import Client, DaemonUnavailable

SHARE = Path(".memoryd") / "memory.jsonl"
ATTRIBUTES = Path(".memoryd") / ".gitattributes"


def read_share(root: Path) -> list[dict[str, Any]]:
    """The shared file, every line parsed: a half-written file fails here."""
    return [json.loads(line) for line in (root / SHARE).read_text().splitlines()]


def entries_in(root: Path) -> dict[str, dict[str, Any]]:
    try:
        return {r["id"]: r for r in read_share(root) if r["type"] == "entry"}
    except FileNotFoundError:
        return {}


def listed(env: Env, *extra: str) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in ok_json(env, "list", *extra)["entries"]}


def remember(env: Env, text: str, *extra: str) -> str:
    return ok_json(env, "remember", text, *extra)["id"]


# --------------------------------------------------------------------------- one project


def test_share_on_writes_the_file_and_keeps_it_up_to_date(env: Env, daemon: Daemon) -> None:
    kept = remember(env, "Deploys go through ArgoCD", "--tag", "ops", "--file", "deploy.yaml")
    pinned = remember(env, "Never force-push to main", "--pin")
    gone = remember(env, "The staging database is db-stage-2")
    old = remember(env, "The API listens on port 8080")
    new = ok_json(env, "supersede", old, "The API listens on port 9090")["id"]
    ok_json(env, "forget", gone)

    assert ok_json(env, "share")["enabled"] is False  # no file yet, never turned on
    status = ok_json(env, "share", "on")
    # Answered once the file is written.
    assert status["enabled"] and status["setting"] == "on" and not status["pending"]
    lines = read_share(env.project)
    assert [line["type"] for line in lines][-1] == "edge"  # entries and tombstones, then edges
    versions = [r for r in lines if r["type"] != "edge"]
    assert [r["id"] for r in versions] == sorted(r["id"] for r in versions)  # sorted by id
    by_id = {r["id"]: r for r in versions}
    assert set(by_id) == {kept, pinned, old, new, gone}
    assert by_id[gone]["type"] == "tombstone" and by_id[gone]["reason"] == "forgotten"
    assert by_id[pinned]["status"] == "pinned"
    assert by_id[kept]["tags"] == ["ops"] and by_id[kept]["file_paths"] == ["deploy.yaml"]
    assert by_id[old]["archived"] and by_id[old]["superseded_by"] == new
    assert "access_count" not in by_id[kept]  # local use is not shared
    edges = [r for r in lines if r["type"] == "edge"]
    assert [(e["source"], e["target"], e["relation"]) for e in edges] == [(new, old, "replaces")]
    assert (env.project / ATTRIBUTES).read_text() == "memory.jsonl merge=union\n"
    assert (status["entries"], status["tombstones"], status["edges"]) == (4, 1, 1)

    # Idempotent: a second `on` changes neither file.
    before = (env.project / SHARE).read_bytes()
    ok_json(env, "share", "on")
    assert (env.project / SHARE).read_bytes() == before
    assert (env.project / ATTRIBUTES).read_text() == "memory.jsonl merge=union\n"

    # Written on change, through the writer: a new entry, a pin, a forget.
    later = remember(env, "Feature flags live in LaunchDarkly")
    ok_json(env, "pin", kept)
    ok_json(env, "forget", pinned)
    until(
        lambda: (
            later in entries_in(env.project)
            and entries_in(env.project)[kept]["status"] == "pinned"
            and pinned not in entries_in(env.project)
        ),
        "the file follows the changes",
    )
    tomb = {r["id"]: r for r in read_share(env.project) if r["type"] == "tombstone"}
    assert set(tomb) == {gone, pinned}

    # Off: the file stays (it is the team's), but no longer follows.
    assert ok_json(env, "share", "off")["enabled"] is False
    remember(env, "Logs go to Loki")
    assert ok_json(env, "share", "off")["setting"] == "off"
    assert "Loki" not in (env.project / SHARE).read_text()
    assert (env.project / ATTRIBUTES).exists()


def test_the_setting_survives_a_restart(env: Env) -> None:
    daemon = Daemon(env).start()
    try:
        remember(env, "Builds run on Buildkite")
        ok_json(env, "share", "on")
    finally:
        daemon.stop()
    daemon = Daemon(env).start()
    try:
        assert ok_json(env, "share")["setting"] == "on"
        added = remember(env, "Releases are tagged vX.Y.Z")
        until(lambda: added in entries_in(env.project), "written after the restart")
        ok_json(env, "share", "off")
    finally:
        daemon.stop()
    daemon = Daemon(env).start()
    try:
        assert ok_json(env, "share") == ok_json(env, "share") | {"enabled": False, "setting": "off"}
    finally:
        daemon.stop()


def test_a_changed_file_is_merged_and_written_back_clean(env: Env, daemon: Daemon) -> None:
    """What a pull brings: a teammate's entry (twice, as a union merge leaves a line both sides
    changed), a newer version of a local entry, a tombstone of another, and a bad line."""
    mine = remember(env, "Tests run with pytest -n 2")
    doomed = remember(env, "The cache is memcached")
    ok_json(env, "share", "on")
    lines = read_share(env.project)
    by_id = {r["id"]: r for r in lines}
    newer = dict(by_id[mine], status="pinned", updated_at=by_id[mine]["updated_at"] + 60)
    older = dict(by_id[doomed], content="The cache was memcached once", updated_at=1.0)
    theirs = {
        "type": "entry",
        "id": "f" * 32,
        "updated_at": 1_700_000_100.0,
        "content": "Payments go through Stripe",
        "category": "architecture",
        "status": "confirmed",
        "created_at": 1_700_000_000.0,
        "tags": ["billing"],
    }
    tomb = {"type": "tombstone", "id": doomed, "updated_at": by_id[doomed]["updated_at"] + 1}
    text = [json.dumps(r) for r in (*lines, newer, theirs, theirs, older, tomb)]
    text.insert(1, '{"type": "entry", "id": "broken", "content": ')  # cut short
    pulled = "\n".join(text) + "\n"
    (env.project / SHARE).write_text(pulled)

    held = until(
        lambda: (found := listed(env)) and "f" * 32 in found and doomed not in found and found,
        "the file is merged",
    )
    assert held[mine]["status"] == "pinned"  # the newer version won
    assert held["f" * 32]["content"] == "Payments go through Stripe"
    assert held["f" * 32]["tags"] == ["billing"] and held["f" * 32]["created_at"] == 1_700_000_000
    # Written back in canonical form: one line per id, the bad line gone from the file...
    # (The memory shows the merge before the file is written back: until then it is the file
    # as pulled, bad line and all; any other content must parse, line by line.)
    until(
        lambda: (
            (env.project / SHARE).read_text() != pulled
            and len(lines := read_share(env.project)) == len({r["id"] for r in lines}) == 3
        ),
        "the file is written back without duplicates",
    )
    # ...but kept in the audit log, with the merge.
    merged = [
        json.loads(line)["event"]
        for line in memctl(env, "audit", "-n", "50").stdout.splitlines()
        if '"memory_merged"' in line
    ]
    assert merged and merged[0]["skipped"][0]["line"] == 2
    assert "broken" in merged[0]["skipped"][0]["text"]
    status = ok_json(env, "status")
    assert any("malformed" in e["description"] for e in status["errors"]), status["errors"]
    # Nothing loops: the daemon's own write merged nothing more.
    ok_json(env, "share")
    audit = memctl(env, "audit", "-n", "100").stdout
    assert audit.count('"memory_merged"') == 1


# --------------------------------------------------------------------------- export / import


def test_export_import_round_trip_ids_status_times_and_edges(env: Env, daemon: Daemon) -> None:
    a = remember(env, "Migrations run with alembic", "--tag", "db", "--file", "alembic.ini")
    b = remember(env, "Schema changes need a review", "--pin")
    old = remember(env, "Python 3.10 is the floor")
    new = ok_json(env, "supersede", old, "Python 3.11 is the floor")["id"]
    candidate = {
        "id": "c" * 32,
        "content": "Maybe use uv for installs",
        "category": "discovery",
        "status": "candidate",
        "created_at": 1_700_000_000.0,
        "updated_at": 1_700_000_000.0,
        "last_accessed_at": 1_700_000_500.0,
        "access_count": 2,
    }
    assert ok_json(env, "import", "-", stdin=json.dumps(candidate))["imported"] == 1

    plain = memctl(env, "export").stdout.splitlines()
    # Confirmed and pinned, active: the superseded one and the candidate stay out, and so
    # does the edge to the superseded one.
    assert [json.loads(x)["id"] for x in plain] == sorted([a, b, new])
    full = [json.loads(x) for x in memctl(env, "export", "--all").stdout.splitlines()]
    entries = {e["id"]: e for e in full if "type" not in e}
    edges = [e for e in full if e.get("type") == "edge"]
    assert set(entries) == {a, b, old, new, "c" * 32}
    assert [(e["source"], e["target"], e["relation"]) for e in edges] == [(new, old, "replaces")]
    assert entries["c" * 32]["access_count"] == 2

    other = env.root / "other"
    (other / ".git").mkdir(parents=True)
    source = "\n".join(json.dumps(x) for x in full) + "\n"
    result = ok_json(env, "--project", str(other), "import", "-", stdin=source)
    assert result == {"imported": 5, "duplicates": 0, "rejected": []}
    again = [
        json.loads(x)
        for x in memctl(env, "--project", str(other), "export", "--all").stdout.splitlines()
    ]
    assert again == full  # ids, status, tags, files, times, archive state and edges
    # Importing it again changes nothing.
    result = ok_json(env, "--project", str(other), "import", "-", stdin=source)
    assert result == {"imported": 0, "duplicates": 5, "rejected": []}


# ------------------------------------------------------------------ two clones (acceptance 3)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


def clone(origin: Path, env: Env, name: str) -> None:
    shutil.rmtree(env.project)
    git(env.root, "clone", "-q", str(origin), str(env.project))
    git(env.project, "config", "user.name", name)
    git(env.project, "config", "user.email", f"{name}@example.invalid")
    git(env.project, "config", "pull.rebase", "false")


def commit_all(env: Env, message: str) -> None:
    git(env.project, "add", "-A")
    if git(env.project, "status", "--porcelain"):
        git(env.project, "commit", "-q", "-m", message)


def test_two_clones_share_memory_through_git(tmp_path: Path) -> None:
    origin = tmp_path / "origin.git"
    seed = tmp_path / "seed"
    seed.mkdir()
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(seed, "init", "-q", "-b", "main")
    (seed / "README").write_text("a project\n")
    git(seed, "add", "README")
    git(seed, "-c", "user.name=s", "-c", "user.email=s@example.invalid", "commit", "-q", "-m", "i")
    git(seed, "push", "-q", str(origin), "main")
    alice, bob = make_env(tmp_path / "alice"), make_env(tmp_path / "bob")
    clone(origin, alice, "alice")
    clone(origin, bob, "bob")
    daemons = [Daemon(alice).start(), Daemon(bob).start()]
    try:
        # Alice shares three entries and commits the file.
        edited = remember(alice, "The queue is RabbitMQ")
        doomed = remember(alice, "Staging lives on host stage-1")
        kept = remember(alice, "Code review needs two approvals")
        ok_json(alice, "share", "on")
        commit_all(alice, "share memory")
        git(alice.project, "push", "-q", "origin", "main")

        # Bob pulls: his daemon shares too (the repository holds the file) and merges it.
        git(bob.project, "pull", "-q", "origin", "main")
        until(lambda: {edited, doomed, kept} <= set(listed(bob)), "bob's daemon merged the pull")
        assert ok_json(bob, "share")["setting"] == "auto"

        # Concurrent changes: both edit one entry (bob's edit is the newer), alice forgets one,
        # each adds one.
        ok_json(alice, "pin", edited)
        ok_json(alice, "forget", doomed)
        from_alice = remember(alice, "Alice: metrics go to Prometheus")
        from_bob = remember(bob, "Bob: traces go to Tempo")
        ok_json(bob, "archive", edited)
        for env in (alice, bob):
            until(lambda env=env: not ok_json(env, "share")["pending"], "file written")
        commit_all(alice, "alice's memory")
        git(alice.project, "push", "-q", "origin", "main")
        commit_all(bob, "bob's memory")
        git(bob.project, "pull", "-q", "--no-edit", "origin", "main")  # a real merge: union
        merged_text = (bob.project / SHARE).read_text()
        assert merged_text.count(edited) >= 2, "the union merge kept both versions of the edit"

        def settled(env: Env) -> bool:
            active, archived = listed(env), listed(env, "--archived")
            return (
                {from_alice, from_bob, kept} <= set(active)
                and edited in archived
                and doomed not in active
                and doomed not in archived
            )

        until(lambda: settled(bob), "bob's daemon merged the union")
        until(lambda: not ok_json(bob, "share")["pending"], "bob's file written back")
        commit_all(bob, "merged memory")
        git(bob.project, "push", "-q", "origin", "main")
        git(alice.project, "pull", "-q", "--no-edit", "origin", "main")
        until(lambda: settled(alice), "alice's daemon merged bob's push")

        for env in (alice, bob):
            archived = listed(env, "--archived")
            # Newest edit wins: bob archived it after alice pinned it.
            assert archived[edited]["status"] == "confirmed", env.root
            until(lambda env=env: not ok_json(env, "share")["pending"], "file written")
        # Both hold the same memory, and the files agree byte for byte.
        assert set(listed(alice)) == set(listed(bob)) == {kept, from_alice, from_bob}
        assert (alice.project / SHARE).read_bytes() == (bob.project / SHARE).read_bytes()
        assert git(alice.project, "status", "--porcelain") == ""  # nothing left to commit
        # A forgotten entry stays forgotten, even after a restart and another merge.
        daemons[1].stop()
        daemons[1] = Daemon(bob).start()
        assert doomed not in listed(bob) and doomed not in listed(bob, "--archived")
    finally:
        for daemon in daemons:
            daemon.stop()
        for env in (alice, bob):
            shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)


# ------------------------------------------------------------------ SIGKILL (acceptance 5)

KILLS = 6


def writing(root: Path) -> bool:
    return any(n.startswith(".memory.jsonl.") for n in os.listdir(root / ".memoryd"))


SEED = 20_240_907


@pytest.mark.slow
def test_sigkill_during_share_writes_loses_nothing_and_never_tears_the_file(env: Env) -> None:
    """Remembers stream in while the daemon rewrites the shared file after each of them; it is
    killed at random moments. Every acknowledged entry survives, the file always parses whole,
    and after the restart it is brought up to date (on the project's open)."""
    rng = random.Random(SEED)
    daemon = Daemon(env).start()
    # Many entries: each rewrite of the file takes a while, so kills land inside writes.
    ok_json(
        env,
        "import",
        "-",
        stdin="".join(
            json.dumps({"content": f"bulk fact {i} about subsystem {i % 97}"}) + "\n"
            for i in range(2_000)
        ),
    )
    ok_json(env, "share", "on")
    acked: dict[str, str] = {}
    torn = 0  # kills that landed inside a write (its temp file left behind)
    try:
        for cycle in range(KILLS):
            stop = threading.Event()

            def stream(cycle: int = cycle, stop: threading.Event = stop) -> None:
                with Client(endpoint="ipc://" + str(env.socket), budget_s=0.5) as client:
                    n = 0
                    while not stop.is_set():
                        text = f"streamed fact {cycle}-{n}"
                        n += 1
                        request = protocol.Remember(content=text, project=str(env.project))
                        try:
                            reply = client.call(request)
                        except DaemonUnavailable:
                            continue  # killed: the next request finds the daemon down too
                        if isinstance(reply, protocol.Ok):
                            acked[text] = protocol.result_of(request, reply).id

            writer = threading.Thread(target=stream)
            writer.start()
            until(
                lambda c=cycle: sum(t.startswith(f"streamed fact {c}-") for t in acked) >= 3,
                "writes acknowledged",
            )
            if cycle % 2:
                threading.Event().wait(rng.uniform(0.0, 0.3))  # a random kill point
            else:  # the moment a write is under way: its temp file exists
                until(lambda: writing(env.project), "a write of the shared file under way")
            daemon.stop(signal.SIGKILL)
            stop.set()
            writer.join(timeout=30)
            read_share(env.project)  # never half-written: every line parses
            torn += bool(list((env.project / ".memoryd").glob(".memory.jsonl.*.tmp")))
            daemon = Daemon(env).start()
            ok_json(env, "share")  # the project opens (merge, compaction) before the stream
        # Brought up to date after the restart: the project's open merges and writes it.
        shared = until(
            lambda: (
                (found := entries_in(env.project)) and set(acked.values()) <= set(found) and found
            ),
            "the file holds every acknowledged entry",
        )
        held = listed(env, "--limit", "10000") | listed(env, "--archived", "--limit", "10000")
        assert set(acked.values()) <= set(held)
        assert {held[i]["content"] for i in acked.values()} == set(acked)
        assert set(shared) == set(held)
        assert not list((env.project / ".memoryd").glob(".memory.jsonl.*.tmp"))
        assert ok_json(env, "check")["ok"]
        print(f"\n{KILLS} kills, {torn} inside a write of the shared file")
        assert torn >= 1, "no kill landed inside a write"
    finally:
        daemon.stop()
