"""``memctl install-mcp``: each agent's MCP configuration written in the shape that agent documents
(docs/mcp.md), holding exactly one memoryd server, idempotent, with a backup, and undone by
``--uninstall`` leaving everything else as it was. The real memctl against a private HOME."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from conftest import BIN, Env, memctl
from memctl.install_mcp import toml_string

AGENTS = ("claude", "codex", "gemini")
SCOPES = ("user", "project")


def config(env: Env, home: Path, agent: str, scope: str) -> Path:
    base = env.project if scope == "project" else home
    return {
        "claude": base / ".mcp.json" if scope == "project" else home / ".claude.json",
        "codex": base / ".codex" / "config.toml",
        "gemini": base / ".gemini" / "settings.json",
    }[agent]


def parse(path: Path) -> dict[str, Any]:
    text = path.read_text()
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


def servers(path: Path) -> dict[str, Any]:
    data = parse(path)
    return data["mcp_servers" if path.suffix == ".toml" else "mcpServers"]


def expected(agent: str, scope: str) -> dict[str, Any]:
    command = "memctl" if scope == "project" else str(BIN / "memctl")
    entry: dict[str, Any] = {"command": command, "args": ["mcp"]}
    return {"type": "stdio", **entry} if agent == "claude" else entry


def install(env: Env, agent: str, *flags: str, code: int = 0) -> str:
    result = memctl(env, "install-mcp", agent, *flags)
    assert result.code == code, result.stderr
    return result.stderr if code else result.stdout


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".memoryd-backup-*"))


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("agent", AGENTS)
def test_install_writes_one_server_in_the_documented_shape(
    env: Env, home: Path, agent: str, scope: str
) -> None:
    out = install(env, agent, "--scope", scope)
    path = config(env, home, agent, scope)
    assert servers(path) == {"memoryd": expected(agent, scope)}
    assert str(path) in out
    first = path.read_bytes()
    again = install(env, agent, "--scope", scope)
    assert path.read_bytes() == first and "already up to date" in again
    assert backups(path) == []  # there was nothing to back up, and the second run wrote nothing


OTHERS: dict[str, str] = {
    "json": json.dumps(
        {
            "numStartups": 12,
            "mcpServers": {"github": {"command": "npx", "args": ["-y", "gh-mcp"], "env": {}}},
            "theme": "dark",
        },
        indent=2,
    )
    + "\n",
    "toml": '# my settings\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "npx"\n'
    'args = ["-y", "docs-mcp"]\n\n[mcp_servers.docs.env]\nTOKEN_VAR = "X"\n',
}


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("agent", AGENTS)
def test_uninstall_restores_the_file_and_other_servers_are_untouched(
    env: Env, home: Path, agent: str, scope: str
) -> None:
    path = config(env, home, agent, scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    original = OTHERS["toml" if agent == "codex" else "json"]
    path.write_text(original)
    before = parse(path)
    install(env, agent, "--scope", scope)
    listed = servers(path)
    assert listed["memoryd"] == expected(agent, scope)
    assert {k: v for k, v in listed.items() if k != "memoryd"} == servers_of(before, path)
    assert [b.read_text() for b in backups(path)] == [original]
    install(env, agent, "--scope", scope, "--uninstall")
    assert parse(path) == before
    if agent == "codex":  # edited as text: byte for byte what it was
        assert path.read_text() == original


def servers_of(data: dict[str, Any], path: Path) -> dict[str, Any]:
    return data["mcp_servers" if path.suffix == ".toml" else "mcpServers"]


@pytest.mark.parametrize("agent", AGENTS)
def test_a_file_that_held_only_us_is_removed_and_uninstall_alone_creates_nothing(
    env: Env, home: Path, agent: str
) -> None:
    path = config(env, home, agent, "project")
    install(env, agent, "--scope", "project", "--uninstall")
    assert not path.exists()
    install(env, agent, "--scope", "project")
    install(env, agent, "--scope", "project", "--uninstall")
    assert not path.exists()
    assert len(backups(path)) == 1  # the file as it was before it was removed


def test_a_hand_added_memctl_mcp_server_is_replaced_not_duplicated(env: Env, home: Path) -> None:
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    hand = {"command": "/opt/memoryd/bin/memctl", "args": ["--project", "/x", "mcp"]}
    path.write_text(json.dumps({"mcpServers": {"memory": hand, "other": {"command": "y"}}}))
    install(env, "gemini")
    assert servers(path) == {"other": {"command": "y"}, "memoryd": expected("gemini", "user")}
    install(env, "gemini", "--uninstall")
    assert servers(path) == {"other": {"command": "y"}}


def test_an_older_memoryd_entry_is_updated(env: Env, home: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[mcp_servers.memoryd]\ncommand = "/old/venv/bin/memctl"\nargs = ["mcp"]\n')
    install(env, "codex")
    assert servers(path) == {"memoryd": expected("codex", "user")}
    assert path.read_text().count("[mcp_servers.memoryd]") == 1


@pytest.mark.parametrize(
    "content",
    [
        'mcp_servers = { memoryd = { command = "x" } }\n',  # inline: not editable as lines
        'mcp_servers.memoryd.command = "x"\n',  # dotted keys
        "[mcp_servers\nbroken",  # not TOML
        "a = " + "[" * 5_000 + "]" * 5_000 + "\n",  # nested past what tomllib can read
    ],
    ids=["inline", "dotted", "broken", "too-deep"],
)
def test_codex_config_it_cannot_edit_safely_is_refused_and_unchanged(
    env: Env, home: Path, content: str
) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    err = install(env, "codex", code=2)
    assert "nothing was changed" in err
    assert path.read_text() == content and backups(path) == []


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"mcpServers": [1]}', "[" * 100_000 + "]" * 100_000],
    ids=["broken", "array", "servers-array", "too-deep"],
)
def test_json_it_cannot_edit_is_refused_and_unchanged(env: Env, home: Path, content: str) -> None:
    path = home / ".claude.json"
    path.write_text(content)
    err = install(env, "claude", code=2)
    assert "nothing was changed" in err
    assert path.read_text() == content


def test_codex_project_scope_says_it_needs_a_trusted_project(env: Env, home: Path) -> None:
    out = install(env, "codex", "--scope", "project")
    assert "trusted project" in out and str(env.project) in out


def test_dry_run_shows_the_change_and_writes_nothing(env: Env, home: Path) -> None:
    out = install(env, "claude", "--scope", "project", "--dry-run")
    assert '"memoryd"' in out and '"mcp"' in out
    assert not (env.project / ".mcp.json").exists()


@pytest.mark.parametrize(
    "value",
    ["C:\\tools\\memctl", 'a "quoted" name', "tab\there", "del\x7fete", "π/日本/🚀", "nl\n"],
)
def test_toml_strings_read_back_as_written(value: str) -> None:
    assert tomllib.loads(f"v = {toml_string(value)}\n") == {"v": value}
