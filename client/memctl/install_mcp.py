"""``memctl install-mcp AGENT``: register ``memctl mcp`` in an agent's MCP configuration, where and
how that agent documents it (``docs/mcp.md`` has the shapes and their sources):

  claude  user: ``~/.claude.json``; project: ``<project>/.mcp.json``
          ``{"mcpServers": {"memoryd": {"type": "stdio", "command": …, "args": ["mcp"]}}}``
  codex   user: ``$CODEX_HOME`` or ``~/.codex``, then ``config.toml``; project:
          ``<project>/.codex/config.toml`` (read only once the project is trusted)
          ``[mcp_servers.memoryd]`` with ``command = …`` and ``args = ["mcp"]``
  gemini  user: ``$GEMINI_CLI_HOME`` or ``~``, then ``.gemini/settings.json``; project:
          ``<project>/.gemini/settings.json``
          ``{"mcpServers": {"memoryd": {"command": …, "args": ["mcp"]}}}``

Ours is the server named ``memoryd``, and any other server that runs ``memctl mcp`` (one added by
hand under another name would serve the same tools twice). Installing leaves exactly one, with the
current command; installing again changes no byte; uninstalling removes ours and nothing else
(a file left empty, ``{}`` or blank, is removed: it held only us). As for ``install-hooks``:
every existing file is parsed before anything is written, a backup is kept, writes are atomic and
read back, and a file that does not parse is refused, never overwritten. ``config.toml`` is
edited as text: our table is appended (or replaced) as a block of lines, the rest of the file
stays byte for byte, and the result must parse to exactly the expected settings.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import sys
import tomllib
from typing import Any

from memctl.cli import EXIT_USAGE, Failed, Session
from memctl.install_hooks import (
    FileChange,
    apply,
    backup_file,
    config_dir,
    human,
    load_json,
    load_toml,
    read_text,
)

NAME = "memoryd"
MARK = "# added by memctl install-mcp"
NOTES = {
    "claude": "Restart Claude Code; /mcp lists the server (a project's .mcp.json is approved "
    "once by each user).",
    "codex": "Restart Codex; /mcp lists the server.",
    "gemini": "Restart Gemini CLI; /mcp lists the server.",
}
# ``[mcp_servers.memoryd]`` and its sub-tables (``[mcp_servers.memoryd.env]``), however quoted.
_OUR_HEADER = re.compile(
    r'^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*(?:memoryd|"memoryd"|\'memoryd\')'
    r"[ \t]*(?:\.[^\]\r\n]*)?\][ \t]*(?:#[^\r\n]*)?$",
    re.M,
)
_ANY_HEADER = re.compile(r"^[ \t]*\[", re.M)


def run(s: Session) -> None:
    a = s.args
    # A project's configuration is committed and shared: it names memctl as each developer's
    # PATH finds it, never one machine's venv. The user's own names this installation.
    argv = ["memctl"] if a.scope == "project" else memctl_argv()
    path = config_path(a.agent, a.scope, s.project)
    change = plan(a.agent, path, argv, a.uninstall)
    notes: list[str] = []
    if a.scope == "project" and not a.uninstall and shutil.which("memctl") is None:
        notes.append(
            f"memctl is not on your PATH, so the agent cannot start this server for you: add "
            f"{os.path.dirname(memctl_argv()[0])} to PATH (or install memoryd with pipx)"
        )
    if a.agent == "codex" and a.scope == "project" and not a.uninstall:
        notes.append(
            f'Codex reads {path} only in a trusted project (trust_level = "trusted" under '
            f'[projects."{s.project}"] in ~/.codex/config.toml, or trust it when Codex asks)'
        )
    entry: dict[str, Any] = {"path": change.path, "changed": change.changed, "backup": None}
    if a.dry_run:
        entry["diff"] = change.diff()
    elif change.changed:
        entry["backup"] = write(change)
    if not a.uninstall:
        notes.append(NOTES[a.agent])
    action = "uninstall" if a.uninstall else "install"
    result = {"agent": a.agent, "scope": a.scope, "action": action, "dry_run": a.dry_run}
    s.emit({**result, "files": [entry], "notes": notes}, human)


def config_path(agent: str, scope: str, project: str) -> str:
    if agent == "claude":
        if scope == "project":
            return os.path.join(project, ".mcp.json")
        return os.path.join(os.path.expanduser("~"), ".claude.json")
    name = "config.toml" if agent == "codex" else "settings.json"
    return os.path.join(config_dir(agent, scope, project), name)


def memctl_argv() -> list[str]:
    """This installation's memctl as a program and its first arguments (an MCP server is started
    without a shell): the console script next to the interpreter, else the one on PATH, else
    ``python -m memctl``."""
    candidates = [sys.argv[0]] if os.path.basename(sys.argv[0]) == "memctl" else []
    candidates.append(os.path.join(os.path.dirname(sys.executable), "memctl"))
    found = shutil.which("memctl")
    for path in [*candidates, *([found] if found else [])]:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return [os.path.abspath(path)]
    return [sys.executable, "-m", "memctl"]


def server_entry(agent: str, argv: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": argv[0], "args": [*argv[1:], "mcp"]}
    return {"type": "stdio", **entry} if agent == "claude" else entry


def is_ours(name: str, server: object) -> bool:
    """The ``memoryd`` server, or another that runs ``memctl mcp`` (``python -m memctl mcp``)."""
    if name == NAME:
        return True
    if not isinstance(server, dict) or not isinstance(server.get("args"), list):
        return False
    words = [server.get("command"), *server["args"]]
    if not all(isinstance(w, str) for w in words) or "mcp" not in words:
        return False
    return any(os.path.basename(w) == "memctl" for w in words[: words.index("mcp")])


# ----------------------------------------------------------------------------- planning


def plan(agent: str, path: str, argv: list[str], uninstall: bool) -> FileChange:
    """The change to ``path``, computed (and the file parsed) before anything is written."""
    old = read_text(path)
    if agent == "codex":
        if old is not None:
            load_toml(path, old)
        new: str | None = plan_toml(old or "", argv, uninstall, path)
        return FileChange(path, old, new if old is not None or new else None, tomllib.loads)
    settings = load_json(path, old)
    updated = with_servers(settings, path, None if uninstall else server_entry(agent, argv))
    if updated == settings:
        return FileChange(path, old, old, json.loads)
    new = json.dumps(updated, indent=2, ensure_ascii=False) + "\n" if updated else ""
    return FileChange(path, old, new, json.loads)


def with_servers(
    settings: dict[str, Any], path: str, ours: dict[str, Any] | None
) -> dict[str, Any]:
    """``settings`` with none of our servers, then ``ours`` as ``memoryd`` (None: uninstall)."""
    servers = settings.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise Failed(f'{path}: "mcpServers" is not an object; nothing was changed', EXIT_USAGE)
    only_ours = [k for k, v in servers.items() if is_ours(k, v)] == [NAME]
    if ours is not None and only_ours and servers[NAME] == ours:
        return settings
    kept = {k: v for k, v in servers.items() if not is_ours(k, v)}
    if ours is None and kept == servers:
        return settings
    updated = copy.deepcopy(settings)
    if ours is not None:
        updated["mcpServers"] = {**kept, NAME: ours}
    elif kept:
        updated["mcpServers"] = kept
    else:
        updated.pop("mcpServers", None)
    return updated


def plan_toml(text: str, argv: list[str], uninstall: bool, path: str) -> str:
    """``text`` with our ``[mcp_servers.memoryd]`` table added, replaced or removed, the rest
    byte for byte; refused when the file holds it in a shape a block of lines cannot change
    (an inline table, dotted keys)."""
    data = tomllib.loads(text)
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise Failed(f"{path}: mcp_servers is not a table; nothing was changed", EXIT_USAGE)
    ours = None if uninstall else server_entry("codex", argv)
    others = [k for k, v in servers.items() if k != NAME and is_ours(k, v)]
    if ours is not None and servers.get(NAME) == ours and not others:
        return text
    if ours is None and NAME not in servers:
        if others:
            raise Failed(f"{path}: remove [mcp_servers.{others[0]}] yourself", EXIT_USAGE)
        return text
    if others:
        names = ", ".join(f"[mcp_servers.{k}]" for k in others)
        raise Failed(f"{path}: {names} also runs memctl mcp; remove it first", EXIT_USAGE)
    new = _without_our_tables(text)
    if ours is not None:
        new = _append_table(new, ours)
    expected = copy.deepcopy(data)
    expected_servers = expected.setdefault("mcp_servers", {})
    expected_servers.pop(NAME, None)
    if ours is not None:
        expected_servers[NAME] = ours
    try:
        parsed = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        parsed = None
    if parsed is not None and not expected_servers and parsed.get("mcp_servers") is None:
        expected.pop("mcp_servers")
    if parsed != expected:
        raise Failed(
            f"{path} holds mcp_servers.{NAME} in a shape memctl does not edit (an inline table "
            f"or dotted keys); change it by hand; nothing was changed",
            EXIT_USAGE,
        )
    return new


def _without_our_tables(text: str) -> str:
    """``text`` without the lines of our tables: from each of our headers to the next header
    (a table that ends the file takes the blank lines before it along)."""
    spans = []
    for header in _OUR_HEADER.finditer(text):
        nxt = _ANY_HEADER.search(text, header.end())
        spans.append((header.start(), nxt.start() if nxt else len(text)))
    for start, end in reversed(spans):
        if end < len(text):
            text = text[:start] + text[end:]
        else:
            head = text[:start].rstrip()
            text = head + _newline(text) if head else ""
    return text


def _append_table(text: str, server: dict[str, Any]) -> str:
    nl = _newline(text)
    lines = [
        f"[mcp_servers.{NAME}]  {MARK}",
        f"command = {toml_string(server['command'])}",
        "args = [" + ", ".join(toml_string(a) for a in server["args"]) + "]",
    ]
    if text and not text.endswith("\n"):
        text += nl
    return text + (nl if text else "") + nl.join(lines) + nl


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML wants escaped.
    (Non-ASCII stays as it is: ``\\u`` escapes of surrogate pairs are not TOML.)"""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


# ----------------------------------------------------------------------------- writing


def write(change: FileChange) -> str | None:
    """Write the change (backup first); an empty result removes the file (it held only us)."""
    if change.new:
        return apply(change)
    path = os.path.realpath(change.path)
    backup = backup_file(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return backup
