"""Regression tests for defects found in review: each failed before its fix."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, Daemon, Env, memctl, ok_json, until
from memctl import protocol
from memctl.transport import Client
from test_capture_e2e import SESSION, _append, _record, _session_end, _transcript


def _call(env: Env, request: protocol.Request, budget: float = 20) -> protocol.Reply:
    with Client(endpoint="ipc://" + str(env.socket), budget_s=budget) as client:
        return client.call(request)


def test_background_failure_is_reported_not_fatal(env: Env, tmp_path: Path) -> None:
    """A transcript of a project whose database is newer than this memoryd used to kill the
    daemon (and again at every start)."""
    other = tmp_path / "newer"
    (other / ".git").mkdir(parents=True)
    daemon = Daemon(env).start()
    ok_json(env, "--project", str(other), "status")  # creates its data directory
    daemon.stop()
    db = next(p for p in (env.data / "projects").iterdir() if p.name.startswith("newer"))
    conn = sqlite3.connect(db / "memory.db")
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    folder = env.home / ".claude" / "projects" / "-newer"
    folder.mkdir(parents=True)
    record = {
        "type": "user",
        "sessionId": SESSION,
        "cwd": str(other),
        "uuid": "u1",
        "message": {"role": "user", "content": "We decided to use Rust."},
    }
    (folder / f"{SESSION}.jsonl").write_text(json.dumps(record) + "\n")
    daemon = Daemon(env).start()  # the start-up scan reads that transcript
    try:
        errors = until(lambda: ok_json(env, "status")["errors"], "the failure reported")
        assert any("newer" in e["description"] or "schema" in e["description"] for e in errors)
        assert daemon.proc.poll() is None
    finally:
        daemon.stop()


def test_scheduled_jobs_include_idle_and_quarantine() -> None:
    import zmq

    from memoryd.jobs import Jobs

    ctx = zmq.Context()
    try:
        assert set(Jobs(ctx, index_commit_s=5).jobs()) == {
            "index_commit",
            "socket",
            "capture_idle",
            "quarantine",
            "compaction",
            "bank_sync",
        }
    finally:
        ctx.term()


def test_idle_sessions_are_finalized_without_a_hook(env: Env) -> None:
    env.vars["MEMORYD_CAPTURE__IDLE_MINUTES"] = "0.002"
    env.vars["MEMORYD_JOBS__CAPTURE_IDLE_CHECK_S"] = "0.2"
    daemon = Daemon(env).start()
    try:
        path = _transcript(env)
        _append(path, [_record(env, "user", "remember: staging uses the eu-west-1 region", 0)])
        episodes = until(lambda: ok_json(env, "episodes")["episodes"], "an idle finalization")
        assert episodes[0]["session_id"] == SESSION
    finally:
        daemon.stop()


def test_many_transcripts_at_start_do_not_stop_the_daemon(env: Env) -> None:
    folder = env.home / ".claude" / "projects" / "-many"
    folder.mkdir(parents=True)
    for i in range(1100):
        (folder / f"{i:08d}-0000-0000-0000-000000000000.jsonl").write_text('{"type":"summary"}\n')
    daemon = Daemon(env).start()
    try:
        until(lambda: ok_json(env, "status")["capture"]["files"] >= 1100, "every file read")
        assert daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0


def test_prompt_remember_with_secrets_near_the_limit(env: Env, daemon: Daemon) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuV"
    text = ("remember: " + " ".join([secret] * 40))[:2000]
    reply = _call(
        env, protocol.Hook(agent="claude", event="prompt", prompt=text, project=str(env.project))
    )
    assert isinstance(reply, protocol.Ok)
    stored = ok_json(env, "list")["entries"]
    assert len(stored) == 1 and secret not in stored[0]["content"]
    assert len(stored[0]["content"]) <= 500


def test_hook_retry_is_not_applied_twice(env: Env, daemon: Daemon) -> None:
    request = protocol.Hook(
        id="r" * 32,
        agent="claude",
        event="prompt",
        prompt="remember: the API gateway is Kong",
        project=str(env.project),
    )
    first, second = _call(env, request), _call(env, request)
    assert isinstance(first, protocol.Ok) and first == second
    entry = ok_json(env, "list")["entries"][0]
    assert entry["importance"] == 0.7  # a second application would have reinforced it to 0.8


def test_tcp_endpoint_is_refused(env: Env) -> None:
    environ = env.environ() | {"MEMORYD_SOCKET": "tcp://127.0.0.1:5599"}
    result = subprocess.run(
        [str(BIN / "memoryd"), "run"], env=environ, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 1 and "only ipc://" in result.stderr


def test_shared_socket_directory_is_refused_not_chmodded(env: Env, tmp_path: Path) -> None:
    shared = Path(f"/tmp/mdt-shared-{os.getpid()}")
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    try:
        environ = env.environ() | {"MEMORYD_SOCKET": str(shared / "memoryd.sock")}
        result = subprocess.run(
            [str(BIN / "memoryd"), "run"], env=environ, capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 1 and "open to other users" in result.stderr
        assert oct(shared.stat().st_mode & 0o777) == oct(0o755)
    finally:
        shared.rmdir()


def test_hook_cannot_name_a_fifo_or_another_projects_transcript(env: Env, daemon: Daemon) -> None:
    fifo = env.home / ".claude" / "projects" / "-x" / f"{SESSION}.jsonl"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    started = time.monotonic()
    assert _session_end(env, fifo).finalized is False
    assert time.monotonic() - started < 10
    assert memctl(env, "status").code == 0  # still serving
    # A transcript of this project, finalized from another project's hook: refused.
    path = _transcript(env)
    _append(path, [_record(env, "assistant", "We decided to use Kafka for events.", 0)])
    until(lambda: ok_json(env, "search", "kafka")["results"], "the finding")
    other = env.root / "intruder"
    (other / ".git").mkdir(parents=True)
    request = protocol.Hook(
        agent="claude",
        event="session_end",
        session_id=SESSION,
        transcript_path=str(path),
        project=str(other),
    )
    refused = _call(env, request)
    assert isinstance(refused, protocol.Error) and refused.code == protocol.ErrorCode.FORBIDDEN
    assert json.loads(memctl(env, "--json", "--project", str(other), "episodes").stdout) == {
        "episodes": []
    }


def test_forgotten_promoted_entry_is_not_promoted_again(env: Env, daemon: Daemon) -> None:
    path = _transcript(env)
    _append(path, [_record(env, "user", "remember: never deploy on Fridays", 0)])
    until(lambda: ok_json(env, "search", "deploy fridays")["results"], "the finding")
    assert _session_end(env, path).finalized is True
    promoted = ok_json(env, "list", "--status", "candidate")["entries"]
    assert len(promoted) == 1
    ok_json(env, "forget", promoted[0]["id"])
    _append(path, [_record(env, "assistant", "Turns out the build cache was stale.", 1)])
    until(lambda: ok_json(env, "search", "build cache stale")["results"], "next turn")
    assert _session_end(env, path).finalized is True
    again = ok_json(env, "list", "--status", "candidate")["entries"]
    assert all("Fridays" not in e["content"] for e in again)


@pytest.mark.parametrize("followers", [3])
def test_parked_followers_do_not_slow_requests(env: Env, daemon: Daemon, followers: int) -> None:
    for i in range(30):
        ok_json(env, "remember", f"Audit filler fact number {i}")
    procs = [
        subprocess.Popen(
            [str(BIN / "memctl"), "audit", "--follow", "-n", "0"],
            cwd=env.project,
            env=env.environ(),
            stdout=subprocess.DEVNULL,
        )
        for _ in range(followers)
    ]
    try:
        ok_json(env, "remember", "A fact while followers wait")
        assert ok_json(env, "search", "followers wait")["results"]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def test_next_turn_after_finalize_reads_only_new_lines(env: Env, daemon: Daemon) -> None:
    """Codex sends Stop after every turn: the next turn must continue from the cursor, not read
    (and extract) the whole transcript again."""
    path = _transcript(env)
    for n in range(6):
        _append(path, [_record(env, "assistant", f"We decided to use option {n} for step {n}.", n)])
    until(lambda: ok_json(env, "status")["capture"]["messages"] >= 6, "the first turn")
    assert _session_end(env, path).finalized is True
    before = ok_json(env, "status")["capture"]["messages"]
    _append(path, [_record(env, "assistant", "Turns out the queue was never drained.", 7)])
    until(lambda: ok_json(env, "search", "queue drained")["results"], "the next turn")
    assert ok_json(env, "status")["capture"]["messages"] == before + 1
    assert _session_end(env, path).finalized is True
    assert len(ok_json(env, "episodes")["episodes"]) == 1


def test_write_refused_by_a_locked_database_is_applied_later(env: Env, daemon: Daemon) -> None:
    ok_json(env, "remember", "First fact before the lock")
    db = next((env.data / "projects").iterdir()) / "memory.db"
    locker = sqlite3.connect(db, isolation_level=None, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        refused = memctl(env, "--timeout", "10", "remember", "Written while the database is locked")
        assert (
            refused.code == 1 and "unavailable" in refused.stderr and "journaled" in refused.stderr
        )
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    ok_json(env, "remember", "Third fact after the lock")
    contents = sorted(e["content"] for e in ok_json(env, "list")["entries"])
    assert contents == [
        "First fact before the lock",
        "Third fact after the lock",
        "Written while the database is locked",
    ]
    assert ok_json(env, "check")["ok"] is True


def test_registry_keeps_only_recent_projects_open(tmp_path: Path) -> None:
    from memoryd.background import BackgroundErrors
    from memoryd.config import StorageSettings
    from memoryd.registry import ProjectRegistry

    registry = ProjectRegistry(tmp_path / "data", StorageSettings(), BackgroundErrors(), max_open=3)
    roots = []
    for i in range(5):
        root = tmp_path / f"p{i}"
        (root / ".git").mkdir(parents=True)
        roots.append(root)
        registry.get(str(root)).remember(protocol.Remember(content=f"Fact of project {i}"))
    try:
        assert [p.root.name for p in registry.opened()] == ["p2", "p3", "p4"]
        reopened = registry.get(str(roots[0]))  # closed, then opened again with its data
        assert reopened.store.find_keyword("project 0", 5)[0].content == "Fact of project 0"
        assert [p.root.name for p in registry.opened()] == ["p3", "p4", "p0"]
    finally:
        registry.close()


def test_a_marker_made_or_removed_moves_the_project_root_at_once(tmp_path: Path) -> None:
    # The registry keeps a folder's root between requests (a hook asks every prompt); a marker
    # created below the root, or the root's own removed, is seen by the very next request.
    from memoryd.background import BackgroundErrors
    from memoryd.config import StorageSettings
    from memoryd.core.errors import NoProject
    from memoryd.registry import ProjectRegistry

    registry = ProjectRegistry(tmp_path / "data", StorageSettings(), BackgroundErrors())
    outer, inner = tmp_path / "repo", tmp_path / "repo" / "packages" / "api"
    inner.mkdir(parents=True)
    (outer / ".git").mkdir()
    assert registry.root_for(str(inner)) == outer
    (inner / ".memoryd").mkdir()
    assert registry.root_for(str(inner)) == inner
    (inner / ".memoryd").rmdir()
    assert registry.root_for(str(inner)) == outer
    (outer / ".git").rmdir()
    with pytest.raises(NoProject):
        registry.check_project(str(inner))


def test_one_remember_prompt_is_one_entry(env: Env, daemon: Daemon) -> None:
    """The hook stores the remember: text when the prompt is sent; capture later reads the same
    prompt from the transcript. Both word it alike, so there is one entry, not two."""
    prompt = "The checkout tests are flaky again. remember: always run make lint before pushing"
    request = protocol.Hook(
        agent="claude", event="prompt", session_id=SESSION, prompt=prompt, project=str(env.project)
    )
    reply = _call(env, request)
    assert (
        isinstance(reply, protocol.Ok) and len(protocol.result_of(request, reply).remembered) == 1
    )
    path = _transcript(env)
    _append(path, [_record(env, "user", prompt, 0)])
    until(lambda: ok_json(env, "status")["capture"]["messages"] >= 1, "the transcript read")
    assert _session_end(env, path).finalized is True
    lint = [e for e in ok_json(env, "list")["entries"] if "make lint" in e["content"]]
    assert len(lint) == 1 and lint[0]["status"] == "confirmed"


def test_restart_continues_a_transcript_from_its_cursor(env: Env) -> None:
    """After a clean restart, an unfinished transcript is read from where reading stopped, not
    from its first byte; its episode still covers the whole session."""
    path = _transcript(env)
    daemon = Daemon(env).start()
    try:
        _append(path, [_record(env, "user", "Let's speed up the search page.", 0)])
        _append(path, [_record(env, "assistant", "We decided to use a covering index.", 1)])
        until(lambda: ok_json(env, "search", "covering index")["results"], "the first turn")
    finally:
        assert daemon.stop() == 0  # a clean stop saves the cursors
    again = Daemon(env).start()
    try:
        _append(path, [_record(env, "user", "Now cache the facet counts.", 2)])
        _append(path, [_record(env, "assistant", "Turns out the facets were never cached.", 3)])
        until(lambda: ok_json(env, "search", "facets cached")["results"], "the second turn")
        assert ok_json(env, "status")["capture"]["messages"] == 2  # only the new lines
        assert _session_end(env, path).finalized is True
        episode = ok_json(env, "episodes")["episodes"][0]
        assert episode["turns"] == 2 and "search page" in episode["goal"]
    finally:
        again.stop()
