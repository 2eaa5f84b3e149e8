"""Fixes from the independent review of the renovation, each with the case that showed it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import BIN, Daemon, Env, memctl, ok_json, until
from memctl import protocol
from memoryd.core.bank.apply import already_filed
from test_capture_e2e import CONVERSATION, SESSION, _append, _record


def test_an_item_that_is_part_of_an_existing_line_is_still_new() -> None:
    text = "## Next Steps\n\n- Todo: deploy the staging server\n- Backup taken 2026-01-05\n"
    assert not already_filed(text, "- Todo: deploy")
    assert not already_filed(text, "- Backup taken 2026-02-09")  # a date in its own words
    assert already_filed(text, "- Todo: deploy the staging server")
    # The router's own stamps do not make a refiled item new.
    done = "- [x] Ship the CLI — 2026-03-01"
    assert already_filed(f"## Completed\n\n{done}\n", "- [x] Ship the CLI — 2026-03-02")
    log = "## Decision: Use SQLite\n- **Date**: 2026-03-01\n- **Status**: Accepted\n"
    assert already_filed(log, log.replace("2026-03-01", "2026-04-01"))
    stamped = "- 2026-03-01 10:00 UTC: talked to ops"
    assert already_filed(stamped, "- 2026-03-02 11:30 UTC: talked to ops")


def test_projects_and_bank_init_work_outside_a_project(env: Env, daemon: Daemon) -> None:
    scratch = env.root / "fresh"
    scratch.mkdir()
    assert memctl(env, "projects", cwd=scratch).code == 0
    created = memctl(env, "--json", "bank", "init", cwd=scratch)
    assert created.code == 0, created.stderr  # its memory-bank/ makes the folder a project
    assert "progress.md" in json.loads(created.stdout)["created"]
    assert (scratch / "memory-bank" / "progress.md").is_file()
    assert memctl(env, "bank", "list", cwd=scratch).code == 0


def test_capture_makes_no_project_of_a_scratch_folder(env: Env, daemon: Daemon) -> None:
    scratch = env.root / "scratch"
    scratch.mkdir()
    folder = env.home / ".claude" / "projects" / "-scratch"
    folder.mkdir(parents=True)
    records = [_record(env, role, text, n) for n, (role, text) in enumerate(CONVERSATION)]
    for record in records:
        record["cwd"] = str(scratch)
    _append(folder / f"{SESSION}.jsonl", records)
    until(lambda: ok_json(env, "status")["capture"]["unresolved_files"] >= 1, "the file read")
    slugs = [p.name for p in (env.data / "projects").iterdir()]
    assert not [s for s in slugs if s.startswith("scratch-")], slugs


def test_json_usage_errors_and_options_after_a_group(env: Env, daemon: Daemon) -> None:
    bogus = memctl(env, "list", "--json", "--bogus")
    assert bogus.code == 2 and json.loads(bogus.stdout)["error"] == "usage"
    timeout = memctl(env, "--json", "--timeout", "0", "list")
    assert timeout.code == 2 and "positive" in json.loads(timeout.stdout)["message"]
    listed = memctl(env, "bank", "--json", "list")
    assert listed.code == 0 and "files" in json.loads(listed.stdout)


def test_the_hook_never_fails_the_agent(env: Env, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    payload = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": "/"})
    for args in (["hook", "--agent", "claude"], ["hook", "--timeout", "0"], ["hook", "--agent=x"]):
        # The working directory deleted under the agent, a bad option: exit 0, print nothing.
        proc = subprocess.run(
            ["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$0" "$@"', BIN / "memctl", *args],
            input=payload, capture_output=True, text=True, env=env.environ(), timeout=60,
        )  # fmt: skip
        gone.mkdir(exist_ok=True)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), args


def test_projects_remove_twice_in_one_second(env: Env, daemon: Daemon) -> None:
    for _ in range(2):
        ok_json(env, "remember", "Use the staging cluster for load tests")
        removed = ok_json(env, "projects", "remove", str(env.project))
        assert Path(removed["archived_to"]).is_dir()
    assert len(os.listdir(env.data / "removed")) == 2


def test_an_intermediate_base_is_not_an_operation() -> None:
    class _Shared(protocol.Request[protocol.HelloResult]):
        """A base other requests could share."""

    assert _Shared not in protocol._request_types()
