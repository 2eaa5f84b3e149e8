"""``memctl install-hooks``: the agents' settings files edited idempotently, with a backup, never
losing what was there, and refusing files it cannot parse (SPEC §12; agent-formats.md §1.1,
§3.2, §4.3). Every test runs the real memctl against a private HOME."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import BIN, Env, memctl
from memctl.install_hooks import FEATURE_LINE, enable_codex_hooks

AGENTS = ("claude", "codex", "gemini")
SCOPES = ("user", "project")
EVENTS = {
    "claude": ["SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"],
    "codex": ["SessionStart", "UserPromptSubmit", "PreCompact", "Stop"],
    "gemini": ["SessionStart", "BeforeAgent", "PreCompress", "SessionEnd"],
}


def command(agent: str, scope: str = "user") -> str:
    """The user's settings name this installation; a project's (committed, shared) name the hook
    as each developer's PATH finds it, ``memctl hook`` where PATH has no ``memctl-hook`` (an
    older memoryd). ``memctl-hook`` where there is one: no pip wrapper (issue 12)."""
    if scope == "project":
        return (
            """sh -c 'command -v memctl-hook >/dev/null && exec memctl-hook "$@"; """
            f"""exec memctl hook "$@"' memctl-hook --agent {agent}"""
        )
    return f"{BIN / 'memctl-hook'} --agent {agent}"


def handler(agent: str, scope: str = "user") -> dict[str, object]:
    run = command(agent, scope)
    if agent == "gemini":
        return {"type": "command", "command": run, "name": "memoryd", "timeout": 3000}
    return {"type": "command", "command": run, "timeout": 3}


def folder(env: Env, home: Path, agent: str, scope: str) -> Path:
    return (env.project if scope == "project" else home) / f".{agent}"


def hooks_file(env: Env, home: Path, agent: str, scope: str = "user") -> Path:
    name = "hooks.json" if agent == "codex" else "settings.json"
    return folder(env, home, agent, scope) / name


def install(env: Env, agent: str, *flags: str, code: int = 0) -> str:
    result = memctl(env, "install-hooks", agent, *flags)
    assert result.code == code, result.stderr
    return result.stderr if code else result.stdout


def snapshot(path: Path) -> dict[str, bytes]:
    """The files in ``path`` (the agents' own subfolders, e.g. ~/.claude/projects, aside)."""
    if not path.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".memoryd-backup-*"))


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("agent", AGENTS)
def test_install_registers_every_event(env: Env, home: Path, agent: str, scope: str) -> None:
    install(env, agent, "--scope", scope)
    settings = json.loads(hooks_file(env, home, agent, scope).read_text())
    assert settings == {"hooks": {e: [{"hooks": [handler(agent, scope)]}] for e in EVENTS[agent]}}
    if scope == "project":  # nothing of this machine's install in a file meant to be committed
        assert str(BIN) not in hooks_file(env, home, agent, scope).read_text()
    if agent == "codex":
        config = folder(env, home, agent, scope) / "config.toml"
        assert tomllib.loads(config.read_text()) == {"features": {"codex_hooks": True}}
    assert snapshot(folder(env, home, agent, "project" if scope == "user" else "user")) == {}
    # The command as written runs through a shell and honours the hook contract.
    stdin = json.dumps({"hook_event_name": EVENTS[agent][1], "prompt": "hi", "cwd": "/"})
    on_path = {**env.environ(), "PATH": f"{BIN}{os.pathsep}{env.environ().get('PATH', '')}"}
    ran = subprocess.run(
        command(agent, scope), shell=True, input=stdin, capture_output=True, text=True, env=on_path
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("agent", AGENTS)
def test_second_install_changes_no_byte(env: Env, home: Path, agent: str, scope: str) -> None:
    install(env, agent, "--scope", scope)
    before = snapshot(folder(env, home, agent, scope))
    out = install(env, agent, "--scope", scope)
    assert snapshot(folder(env, home, agent, scope)) == before  # no rewrite, no backup
    assert "already up to date" in out


USER_SETTINGS: dict[str, dict[str, object]] = {
    "claude": {
        "model": "opus",
        "permissions": {"allow": ["Bash(git status)"]},
        "hooks": {
            "SessionStart": [
                {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
            ],
            "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}],
        },
    },
    "codex": {  # hooks.json holds only "hooks" (Codex rejects other top-level keys)
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
    },
    "gemini": {
        "general": {"vimMode": True},
        "hooks": {
            "disabled": ["secret-scanner"],
            "BeforeAgent": [{"hooks": [{"type": "command", "command": "lint-prompt"}]}],
        },
    },
}
USER_CONFIG_TOML = """\
# my codex config
model = "gpt-5.2-codex"   # keep this comment

[features]
web_search_request = true

[profiles.fast]
model = "gpt-5-mini"
"""


@pytest.mark.parametrize("agent", AGENTS)
def test_existing_settings_survive_install_and_uninstall(env: Env, home: Path, agent: str) -> None:
    path = hooks_file(env, home, agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = json.dumps(USER_SETTINGS[agent])  # compact: ours will be re-indented
    path.write_text(original)
    config = path.parent / "config.toml"
    if agent == "codex":
        config.write_text(USER_CONFIG_TOML)

    install(env, agent)
    settings = json.loads(path.read_text())
    for event in EVENTS[agent]:
        assert settings["hooks"][event][-1] == {"hooks": [handler(agent)]}
    assert {k: v for k, v in settings.items() if k != "hooks"} == {
        k: v for k, v in USER_SETTINGS[agent].items() if k != "hooks"
    }
    [backup] = backups(path)
    assert backup.read_text() == original
    if agent == "codex":
        lines = USER_CONFIG_TOML.splitlines(keepends=True)
        expected = "".join([*lines[:4], FEATURE_LINE + "\n", *lines[4:]])
        assert config.read_text() == expected  # one line added, every other byte kept
        assert [b.read_text() for b in backups(config)] == [USER_CONFIG_TOML]

    install(env, agent, "--uninstall")
    assert json.loads(path.read_text()) == USER_SETTINGS[agent]
    assert len(backups(path)) == 2
    if agent == "codex":  # the feature switch stays (other hooks may rely on it), and says so
        assert FEATURE_LINE in config.read_text()


@pytest.mark.parametrize("agent", AGENTS)
def test_a_stale_entry_of_ours_is_replaced_not_duplicated(env: Env, home: Path, agent: str) -> None:
    path = hooks_file(env, home, agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = {"type": "command", "command": f"'/old venv/bin/memctl' hook --agent {agent}"}
    newer = {"type": "command", "command": f"/old/bin/memctl-hook --agent {agent}"}
    mine = {"type": "command", "command": "my-own-hook"}
    event = EVENTS[agent][0]
    path.write_text(json.dumps({"hooks": {event: [{"hooks": [mine, old]}, {"hooks": [newer]}]}}))
    install(env, agent)
    groups = json.loads(path.read_text())["hooks"][event]
    assert groups == [{"hooks": [mine]}, {"hooks": [handler(agent)]}]


@pytest.mark.parametrize("agent", AGENTS)
def test_uninstall_without_install_touches_nothing(env: Env, home: Path, agent: str) -> None:
    install(env, agent, "--uninstall")
    assert snapshot(folder(env, home, agent, "user")) == {}
    path = hooks_file(env, home, agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(USER_SETTINGS[agent]))
    before = snapshot(path.parent)
    install(env, agent, "--uninstall")
    assert snapshot(path.parent) == before


# (content, exit code of --uninstall): a file with none of our entries needs no uninstalling.
BROKEN = [
    ("{not json", 2),
    ("[1, 2]", 2),
    ('{"hooks": []}', 0),
    ('{"hooks": {"SessionStart": 1}}', 0),
    ("[" * 100_000 + "]" * 100_000, 2),  # nested past what json can read
]


@pytest.mark.parametrize(("content", "uninstall_code"), BROKEN, ids=lambda v: str(v)[:20])
@pytest.mark.parametrize("agent", AGENTS)
def test_unparsable_settings_are_refused(
    env: Env, home: Path, agent: str, content: str, uninstall_code: int
) -> None:
    path = hooks_file(env, home, agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    err = install(env, agent, code=2)
    assert str(path) in err and "nothing was changed" in err
    assert snapshot(path.parent) == {path.name: content.encode()}  # untouched, no backup
    install(env, agent, "--uninstall", code=uninstall_code)
    assert snapshot(path.parent) == {path.name: content.encode()}


@pytest.mark.parametrize(
    "content",
    ["[features\ncodex_hooks = true\n", "a = " + "[" * 5_000 + "]" * 5_000 + "\n"],
    ids=["broken", "too-deep"],
)
def test_unparsable_codex_config_is_refused(env: Env, home: Path, content: str) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(content)
    err = install(env, "codex", code=2)
    assert str(config) in err and "not valid TOML" in err
    assert snapshot(config.parent) == {"config.toml": content.encode()}


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("agent", AGENTS)
def test_dry_run_writes_nothing(env: Env, home: Path, agent: str, scope: str) -> None:
    out = install(env, agent, "--scope", scope, "--dry-run")
    as_json = json.dumps(command(agent, scope))[1:-1]  # as the diff of a JSON file shows it
    assert as_json in out
    assert snapshot(folder(env, home, agent, scope)) == {}
    install(env, agent, "--scope", scope)
    before = snapshot(folder(env, home, agent, scope))
    out = install(env, agent, "--scope", scope, "--uninstall", "--dry-run")
    removed = [line for line in out.splitlines() if line[:1] == "-" and '"command":' in line]
    assert removed and all(as_json in line for line in removed)
    assert snapshot(folder(env, home, agent, scope)) == before


@pytest.mark.parametrize(
    ("agent", "variable", "where"),
    [
        ("claude", "CLAUDE_CONFIG_DIR", "settings.json"),
        ("codex", "CODEX_HOME", "hooks.json"),
        ("gemini", "GEMINI_CLI_HOME", ".gemini/settings.json"),
    ],
)
def test_config_dir_overrides(env: Env, home: Path, agent: str, variable: str, where: str) -> None:
    elsewhere = env.root / "elsewhere"
    env.vars[variable] = str(elsewhere)
    install(env, agent)
    assert json.loads((elsewhere / where).read_text())["hooks"]
    assert snapshot(home / f".{agent}") == {}


def test_symlinked_settings_stay_a_symlink(env: Env, home: Path) -> None:
    dotfiles = env.root / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "claude.json").write_text('{"model": "opus"}')
    link = home / ".claude" / "settings.json"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(dotfiles / "claude.json")
    install(env, "claude")
    assert link.is_symlink()
    assert json.loads(link.read_text())["model"] == "opus"
    assert json.loads(link.read_text())["hooks"]["SessionStart"]
    assert len(list(dotfiles.glob("claude.json.memoryd-backup-*"))) == 1


def test_json_output(env: Env, home: Path) -> None:
    result = memctl(env, "--json", "install-hooks", "gemini")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    path = str(hooks_file(env, home, "gemini"))
    assert report["agent"] == "gemini" and report["action"] == "install"
    assert report["files"] == [{"path": path, "changed": True, "backup": None}]


# ----------------------------------------------------------------------------- config.toml text


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", f"[features]  # added by memctl install-hooks\n{FEATURE_LINE}\n"),
        (
            'model = "x"',
            f'model = "x"\n\n[features]  # added by memctl install-hooks\n{FEATURE_LINE}\n',
        ),
        (
            "[features]\r\nfoo = true\r\n[x]\r\ny = 1\r\n",
            f"[features]\r\n{FEATURE_LINE}\r\nfoo = true\r\n[x]\r\ny = 1\r\n",
        ),
        ("[ features ] # mine\n", f"[ features ] # mine\n{FEATURE_LINE}\n"),
        ("[features]", f"[features]\n{FEATURE_LINE}\n"),
        ("[features]\ncodex_hooks = false\n", "[features]\ncodex_hooks = false\n"),  # user's call
        ("[features]\nhooks = true\n", "[features]\nhooks = true\n"),  # the newer name
        ("features = { foo = true }\n", None),  # inline table: cannot add a line; say so
        ("features.foo = true\n", None),
    ],
)
def test_codex_feature_switch_is_added_as_one_line(before: str, after: str | None) -> None:
    assert enable_codex_hooks(before) == after


def test_project_scope_says_when_memctl_is_not_on_path(env: Env, home: Path) -> None:
    """The shared settings run `memctl` from PATH: the developer installing them is told when
    that would find nothing on their own machine, and how to fix it."""
    bare = {**env.environ(), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(BIN / "memctl"), "install-hooks", "claude", "--scope", "project"],
        env=bare, cwd=env.project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "memctl-hook is not on your PATH" in proc.stdout and str(BIN) in proc.stdout
    on_path = {**bare, "PATH": f"{BIN}:/usr/bin:/bin"}
    proc = subprocess.run(
        [str(BIN / "memctl"), "install-hooks", "claude", "--scope", "project"],
        env=on_path, cwd=env.project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "not on your PATH" not in proc.stdout


@pytest.mark.parametrize("programs", [("memctl-hook", "memctl"), ("memctl",)])
def test_project_hook_runs_with_or_without_memctl_hook(
    env: Env, home: Path, daemon, programs: tuple[str, ...]
) -> None:
    """A teammate whose memoryd predates ``memctl-hook`` has only ``memctl`` on PATH: the shared
    settings' command runs ``memctl hook`` there, and answers the prompt as ``memctl-hook`` does."""
    assert memctl(env, "remember", "Run the tests with pytest -q from the repo root").code == 0
    install(env, "claude", "--scope", "project")
    settings = json.loads(hooks_file(env, home, "claude", "project").read_text())
    run = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    path = env.root / "path"
    path.mkdir()
    for program in programs:
        (path / program).symlink_to(BIN / program)
    prompt = {
        "session_id": "7d3f6a10-2b4c-4e8f-9a1d-0c5e7b9f2a61",
        "transcript_path": str(home / ".claude" / "projects" / "p" / "7d3f6a10.jsonl"),
        "cwd": str(env.project),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "How do we run the tests with pytest here?",
    }
    proc = subprocess.run(
        ["/bin/sh", "-c", run],
        input=json.dumps(prompt),
        env={**env.environ(), "PATH": f"{path}:/usr/bin:/bin"},
        cwd=env.project, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "pytest -q from the repo root" in proc.stdout
