"""The CLI contract of SPEC §12, through the real memctl against the real daemon."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import BIN, Env, memctl, ok_json


def test_status_shape(env: Env, daemon) -> None:
    status = ok_json(env, "status")
    assert set(status) >= {"daemon", "project", "slo", "errors"}
    assert set(status["daemon"]) >= {"version", "protocol", "pid", "uptime_s"}
    assert status["daemon"]["pid"] == daemon.proc.pid
    project = status["project"]
    assert project["root"] == str(env.project.resolve())
    assert project["slug"].startswith("project-")
    assert project["entries"] == {"candidate": 0, "confirmed": 0, "pinned": 0, "archived": 0}
    assert set(status["slo"]) >= {"p50_ms", "p95_ms", "p99_ms", "degraded"}


def test_remember_search_list_roundtrip(env: Env, daemon) -> None:
    r = ok_json(
        env,
        "remember",
        "Use pnpm, not npm, for the web workspace",
        "--tag",
        "tooling",
        "--file",
        "web/package.json",
    )
    assert r["duplicate"] is False and r["status"] == "confirmed" and len(r["id"]) == 32
    found = ok_json(env, "search", "pnpm workspace")["results"]
    assert [x["id"] for x in found] == [r["id"]]
    assert found[0]["score"] > 0 and found[0]["status"] == "confirmed"
    listed = ok_json(env, "list")["entries"]
    assert listed[0]["tags"] == ["tooling"] and listed[0]["file_paths"] == ["web/package.json"]
    assert listed[0]["source"]["kind"] == "user"


def test_remember_by_section_and_category(env: Env, daemon) -> None:
    a = ok_json(env, "remember", "The API is served by FastAPI behind nginx", "--section", "Specs")
    b = ok_json(env, "remember", "Retries use exponential backoff", "--category", "pattern")
    entries = {e["id"]: e for e in ok_json(env, "list")["entries"]}
    assert entries[a["id"]]["category"] == "spec"
    assert entries[b["id"]]["section"] == "Patterns & Conventions"
    bad = memctl(env, "remember", "x", "--section", "Nonsense")
    assert bad.code == 1 and "unknown section" in bad.stderr


def test_duplicate_reinforces(env: Env, daemon) -> None:
    first = ok_json(env, "remember", "Tests run with   pytest -q")
    second = ok_json(env, "remember", "tests run with pytest -Q")
    assert second == {"id": first["id"], "duplicate": True, "status": "confirmed"}
    entry = ok_json(env, "list")["entries"][0]
    assert entry["importance"] == 0.8 and entry["access_count"] == 1
    assert ok_json(env, "status")["project"]["entries"]["confirmed"] == 1


def test_content_limit_is_a_clear_error(env: Env, daemon) -> None:
    result = memctl(env, "remember", "x" * 501)
    assert result.code == 1
    assert "too_large" in result.stderr and "limit is 500" in result.stderr
    assert memctl(env, "remember", "   ").code == 1
    assert ok_json(env, "list")["entries"] == []


def test_pin_unpin_forget(env: Env, daemon) -> None:
    a = ok_json(env, "remember", "Never edit generated protobuf files")["id"]
    b = ok_json(env, "remember", "Protobuf generation runs via make proto")["id"]
    assert ok_json(env, "pin", a[:8]) == {"id": a, "status": "pinned"}
    assert ok_json(env, "list", "--status", "pinned")["entries"][0]["id"] == a
    assert ok_json(env, "unpin", a) == {"id": a, "status": "confirmed"}
    ambiguous = memctl(env, "forget", "protobuf")
    assert ambiguous.code == 1 and "2 entries match" in ambiguous.stderr
    assert sorted(ok_json(env, "forget", "protobuf", "--yes")["forgotten"]) == sorted([a, b])
    missing = memctl(env, "forget", "protobuf")
    assert missing.code == 1 and "not_found" in missing.stderr


def test_search_batch_mode(env: Env, daemon) -> None:
    ok_json(env, "remember", "Redis is the session cache")
    ok_json(env, "remember", "Postgres holds the orders table")
    result = memctl(
        env, "search", "-", stdin="redis cache\n\npostgres orders\nnothing matches zzz\n"
    )
    assert result.code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [x["query"] for x in lines] == ["redis cache", "postgres orders", "nothing matches zzz"]
    assert "Redis" in lines[0]["results"][0]["content"]
    assert "Postgres" in lines[1]["results"][0]["content"]
    assert lines[2]["results"] == []


def test_import_export_roundtrip(env: Env, daemon, tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"content": "Deploys go through ArgoCD", "category": "decision", "tags": ["ops"]}
        ),
        json.dumps(
            {"content": "Use UTC everywhere", "section": "Constraints", "created_at": 1700000000}
        ),
        "not json at all",
        json.dumps({"category": "decision"}),
        json.dumps({"content": "Deploys go through ArgoCD"}),
        "",
        json.dumps({"content": "y" * 600}),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = ok_json(env, "import", str(source))
    assert result["imported"] == 2 and result["duplicates"] == 1
    assert [r["line"] for r in result["rejected"]] == [3, 4, 7]
    assert "limit is 500" in result["rejected"][2]["reason"]

    out = tmp_path / "out.jsonl"
    # --archived: a warning created in 2023 and never used is past its TTL, and compaction
    # (on the project's load, or any run after) archives it.
    assert memctl(env, "export", str(out), "--archived").code == 0
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(e["content"] for e in exported) == [
        "Deploys go through ArgoCD",
        "Use UTC everywhere",
    ]
    assert [e["id"] for e in exported] == sorted(e["id"] for e in exported)
    assert (
        next(e for e in exported if e["content"].startswith("Use UTC"))["created_at"] == 1700000000
    )

    # Re-importing the export into another project reproduces it.
    other = env.root / "other"
    other.mkdir()
    reimport = memctl(env, "--json", "--project", str(other), "import", str(out))
    assert json.loads(reimport.stdout)["imported"] == 2


def test_import_of_missing_file_is_usage_error(env: Env, daemon) -> None:
    result = memctl(env, "import", str(env.root / "nope.jsonl"))
    assert result.code == 2 and "cannot read" in result.stderr


def test_audit_shows_changes(env: Env, daemon) -> None:
    a = ok_json(env, "remember", "Feature flags live in LaunchDarkly")["id"]
    ok_json(env, "pin", a)
    result = memctl(env, "audit", "-n", "10")
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"]["type"] for e in events] == ["entry_added", "entry_status_changed"]
    assert [e["seq"] for e in events] == [1, 2]
    assert events[1]["prev"] == events[0]["hash"]


def test_audit_follow_long_polls(env: Env, daemon) -> None:
    import subprocess
    import sys

    ok_json(env, "remember", "Staging resets every Sunday")
    with subprocess.Popen(
        [str(Path(sys.executable).parent / "memctl"), "audit", "--follow", "-n", "1"],
        cwd=env.project,
        env=env.environ(),
        stdout=subprocess.PIPE,
        text=True,
    ) as follower:
        try:
            # The first line proves the follower is connected; the second can only come from
            # the long poll being answered when the next change is journaled.
            assert json.loads(follower.stdout.readline())["seq"] == 1
            ok_json(env, "remember", "Production deploys need two approvals")
            line = json.loads(follower.stdout.readline())
            assert line["seq"] == 2 and line["event"]["entry"]["content"].startswith("Production")
        finally:
            follower.terminate()


def test_projects_are_isolated(env: Env, daemon) -> None:
    other = env.root / "other"
    (other / "sub").mkdir(parents=True)
    (other / ".git").mkdir()
    ok_json(env, "remember", "Project A uses Django")
    b = memctl(env, "--json", "--project", str(other / "sub"), "remember", "Project B uses Rails")
    assert b.code == 0
    assert [e["content"] for e in ok_json(env, "list")["entries"]] == ["Project A uses Django"]
    listed_b = json.loads(memctl(env, "--json", "--project", str(other), "list").stdout)["entries"]
    assert [e["content"] for e in listed_b] == ["Project B uses Rails"]
    assert ok_json(env, "search", "Rails")["results"] == []
    # An entry of project B cannot be forgotten from project A, even by its id.
    b_id = json.loads(b.stdout)["id"]
    assert memctl(env, "forget", b_id).code == 1


def test_project_resolution_from_subdirectory(env: Env, daemon) -> None:
    sub = env.project / "src" / "pkg"
    sub.mkdir(parents=True)
    result = memctl(env, "--json", "status", cwd=sub)
    assert json.loads(result.stdout)["project"]["root"] == str(env.project.resolve())
    bad = memctl(env, "--project", str(env.root / "missing"), "status")
    assert bad.code == 1 and "does not exist" in bad.stderr


def test_check_reports_ok(env: Env, daemon) -> None:
    ok_json(env, "remember", "CI runs on GitHub Actions")
    assert ok_json(env, "check") == {
        "ok": True,
        "database": "ok",
        "audit": "ok",
        "index": "ok",
        "bank": "ok",
    }


def test_usage_errors_exit_2(env: Env) -> None:
    assert memctl(env, "frobnicate").code == 2
    assert memctl(env, "remember").code == 2
    assert memctl(env, "--timeout", "0", "status").code == 2


def test_global_options_anywhere_and_daemon_errors_as_json(env: Env, daemon) -> None:
    ok_json(env, "remember", "The release checklist lives in docs/release.md")
    before = memctl(env, "--json", "search", "release checklist")
    after = memctl(env, "search", "release checklist", "--json")
    assert before.code == after.code == 0
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert json.loads(after.stdout)["results"]
    project = memctl(env, "list", "--project", str(env.project), "--json")
    assert project.code == 0 and json.loads(project.stdout)["total"] == 1
    refused = memctl(env, "forget", "no-such-entry-anywhere", "--json")
    assert refused.code == 1  # the daemon's refusal: exit code as before
    error = json.loads(refused.stdout)
    assert error["error"] == "not_found" and error["exit_code"] == 1


def test_version_names_client_and_daemon(env: Env, daemon) -> None:
    result = memctl(env, "--version")
    assert result.code == 0
    client, server = result.stdout.splitlines()
    assert client.startswith("memctl ") and "protocol" in client
    assert server.startswith("memoryd ") and "pid" in server


def test_a_folder_outside_any_project_is_used_only_when_named(env: Env, daemon) -> None:
    """Running memctl in a scratch folder (or /, or the home folder) creates no memory there;
    naming it with --project does."""
    scratch = env.root / "scratch"
    scratch.mkdir()
    refused = memctl(env, "--json", "remember", "scratch note", cwd=scratch)
    assert refused.code == 1
    error = json.loads(refused.stdout)
    assert error["error"] == "not_found" and "is not inside a project" in error["message"]
    assert "--project" in error["message"]
    for where in (Path("/"), env.home):
        assert memctl(env, "list", cwd=where).code == 1
    status = memctl(env, "--json", "status", cwd=scratch)  # status works anywhere
    assert status.code == 0 and json.loads(status.stdout)["project"] is None
    named = memctl(env, "--json", "--project", str(scratch), "remember", "scratch note")
    assert named.code == 0
    listed = memctl(env, "--json", "list", "--project", str(scratch))
    assert [e["content"] for e in json.loads(listed.stdout)["entries"]] == ["scratch note"]
    # A folder inside a project still resolves to it, and the data folder shows no scratch.
    (env.project / "src").mkdir()
    inside = memctl(env, "--json", "status", cwd=env.project / "src")
    assert json.loads(inside.stdout)["project"]["root"] == str(env.project.resolve())
    prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": str(scratch)}
    hook = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(prompt), cwd=scratch)
    assert (hook.code, hook.stdout) == (0, "")  # the agent is never blocked, and nothing is made


def test_projects_remove_keeps_the_memory_aside(env: Env, daemon) -> None:
    ok_json(env, "remember", "The staging database is reset every night")
    listed = ok_json(env, "projects")["projects"]
    assert str(env.project.resolve()) in [x["path"] for x in listed]
    removed = ok_json(env, "projects", "remove", str(env.project))
    archived = Path(removed["archived_to"])
    assert archived.parent == env.data / "removed" and (archived / "memory.db").is_file()
    assert str(env.project.resolve()) not in [
        x["path"] for x in ok_json(env, "projects")["projects"]
    ]
    assert ok_json(env, "list")["entries"] == []  # working there again starts afresh
    again = memctl(env, "projects", "remove", str(env.root / "never-seen"))
    assert again.code == 1 and "holds no memory" in again.stderr
    assert memctl(env, "projects", "remove").code == 2  # DIR is required


def test_human_output_is_aligned_tables_with_relative_times(env: Env, daemon) -> None:
    ok_json(env, "remember", "Deploys go through the staging cluster first", "--tag", "deploy")
    ok_json(env, "remember", "Never deploy on Fridays", "--category", "preference")
    listed = memctl(env, "list")
    assert listed.code == 0
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "KIND", "UPDATED", "CONTENT"]
    starts = {line.index(line.split()[3]) for line in rows}  # the content column lines up
    assert len(rows) == 2 and len(starts) == 1
    assert all(line.split()[2].endswith("s") for line in rows)  # seconds ago
    found = memctl(env, "search", "deploy")
    assert found.stdout.splitlines()[0].split() == ["ID", "SCORE", "KIND", "CONTENT"]


def test_relative_times() -> None:
    from memctl.render import ago, table

    assert [ago(t, now=1_000_000.0) for t in (999_990.0, 999_000.0, 990_000.0, 700_000.0)] == [
        "10s", "16m", "2h", "3d"
    ]  # fmt: skip
    assert ago(None) == "-" and ago(0.0, now=40_000_000.0) == "1y"
    assert table([["a", "bb", "x y"], ["ccc", "d", "z"]]) == "a    bb  x y\nccc  d   z"


def test_only_the_command_run_is_built_and_the_rest_still_answers(env: Env) -> None:
    """memctl builds just the parser of the command it runs (start-up of every command); an
    unknown command still lists every choice, and --help every command."""
    from memctl.cli import _parser

    only_status = _parser(command="status")
    assert only_status.parse_args(["status", "--json"]).json is True
    wrong = memctl(env, "frobnicate")
    assert wrong.code == 2 and "invalid choice" in wrong.stderr and "remember" in wrong.stderr
    helped = memctl(env, "--help")
    assert helped.code == 0 and all(c in helped.stdout for c in ("remember", "bank", "mcp"))
    options = memctl(env, "bank", "write", "--help")
    assert options.code == 0 and "--mode" in options.stdout


def test_output_that_cannot_be_written_is_an_error_and_a_closed_pipe_is_not(
    env: Env, daemon
) -> None:
    """memctl exits without the interpreter's teardown (``launch.leave``): what the teardown
    would have flushed is flushed first, and a write that fails is still reported (exit 120, as
    Python's own exit), unless the reader has gone (``memctl list | head``)."""
    ok_json(env, "remember", "Use pnpm, not npm, for the web workspace")
    command = [str(BIN / "memctl"), "list", "--json"]
    buffered = {k: v for k, v in env.environ().items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:  # every write fails: no space left on device
        failed = subprocess.run(
            command, stdout=full, stderr=subprocess.PIPE, env=buffered, cwd=env.project
        )
    assert failed.returncode == 120
    assert b"cannot write the output" in failed.stderr and b"No space left" in failed.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before a byte was written
    try:
        piped = subprocess.run(
            command, stdout=write_end, stderr=subprocess.PIPE, env=buffered, cwd=env.project
        )
    finally:
        os.close(write_end)
    assert piped.returncode == 0 and piped.stderr == b""
    whole = memctl(env, "list", "--json")  # and through a pipe read to the end, all of it
    assert whole.code == 0 and "pnpm" in json.loads(whole.stdout)["entries"][0]["content"]


def test_a_command_with_its_output_closed_at_start_exits_cleanly(env: Env, daemon) -> None:
    """A descriptor closed before the command starts (Python's stream is then None): nothing
    to write, nothing to flush, no traceback (``launch.leave``)."""
    for closed in (1, 2):
        result = subprocess.run(
            [str(BIN / "memctl"), "--version"],
            capture_output=True,
            env=env.environ(),
            cwd=env.project,
            preexec_fn=lambda fd=closed: os.close(fd),
        )
        assert result.returncode == 0 and result.stderr == b"", (closed, result.stderr)
        assert (result.stdout == b"") == (closed == 1)  # with stderr closed it still printed
