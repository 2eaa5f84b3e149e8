"""``memctl install-hooks AGENT``: register ``memctl hook`` in an agent's settings (design §12).

The command written is ``memctl-hook --agent AGENT`` where this installation has that script
(``memctl hook`` without pip's console-script wrapper, whose ``import re`` every prompt would
pay; issue 12), else ``memctl hook --agent AGENT``. A project's settings are shared with
teammates whose memoryd may predate ``memctl-hook``: there the command falls back to ``memctl
hook`` when PATH has no ``memctl-hook`` (``PROJECT_COMMAND``, through ``sh``, ~1 ms).

Where (agent-formats.md §1.1, §3.2, §4.3, §6); ``--scope project`` uses ``<project>/.<agent>/``:

  claude  ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``: ``settings.json``
  codex   ``$CODEX_HOME`` or ``~/.codex``: ``hooks.json``, plus ``codex_hooks = true`` under
          ``[features]`` in ``config.toml`` (the switch hooks need until they are on by default)
  gemini  ``$GEMINI_CLI_HOME`` or ``~``, then ``.gemini/settings.json``

All three files hold hooks in one shape, ``hooks.<Event> = [{matcher?, hooks: [handler]}]``. Our
handlers are recognised by their command (``… memctl hook …`` or ``… memctl-hook …``): installing
again replaces them
(no duplicates; a moved virtualenv is followed) and uninstalling removes them and nothing else.
Every write keeps a backup (``<file>.memoryd-backup-<UTC time>``), goes through a temporary file,
fsync and ``os.replace``, and is parsed back. A file that does not parse is refused (exit 2),
never overwritten. ``config.toml`` is edited as text, byte for byte except the lines we add,
and checked with ``tomllib``.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memctl.cli import EXIT_USAGE, Failed, Session

# The hook gives up after its 1.5 s budget by itself; the agent's timeout is only a backstop,
# with room for a cold start of Python on a loaded machine.
TIMEOUT_S = 3
EVENTS: dict[str, tuple[str, ...]] = {
    "claude": ("SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"),
    # Codex has no SessionEnd (unknown events are ignored, but Stop is what it sends instead).
    "codex": ("SessionStart", "UserPromptSubmit", "PreCompact", "Stop"),
    "gemini": ("SessionStart", "BeforeAgent", "PreCompress", "SessionEnd"),
}
NOTES = {
    "claude": "Claude Code reads hooks when it starts: restart it (or review them in /hooks).",
    "codex": "Codex runs new hooks once you trust them in /hooks.",
    "gemini": "Restart Gemini CLI; /hooks panel lists the hooks.",
}
MARK = "# added by memctl install-hooks"
FEATURE_LINE = f"codex_hooks = true  {MARK}"
_FEATURES_HEADER = re.compile(r"^[ \t]*\[[ \t]*features[ \t]*\][ \t]*(?:#[^\r\n]*)?\r?$", re.M)


class MalformedSettings(ValueError):
    """The settings parse, but our part of them is not laid out as the agent documents."""


@dataclass(frozen=True)
class FileChange:
    """One settings file: its text now (None: missing) and after (None: leave it alone)."""

    path: str
    old: str | None
    new: str | None
    parse: Callable[[str], Any]

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.old

    def diff(self) -> str:
        if not self.changed:
            return ""
        before = (self.old or "").splitlines(keepends=True)
        after = (self.new or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(before, after, self.path, self.path))


def run(s: Session) -> None:
    a = s.args
    # A project's settings are committed and shared: they name memctl as each developer's PATH
    # finds it, never one machine's venv. The user's own settings name this installation.
    hook_script = hook_script_path()
    if a.scope == "project":
        command = PROJECT_COMMAND.format(agent=a.agent)
    else:
        program = shlex.quote(hook_script) if hook_script else f"{memctl_command()} hook"
        command = f"{program} --agent {a.agent}"
    changes, notes = plan(a.agent, config_dir(a.agent, a.scope, s.project), command, a.uninstall)
    on_path = HOOK_SCRIPT if hook_script else "memctl"
    found = shutil.which(HOOK_SCRIPT) or shutil.which("memctl")
    if a.scope == "project" and not a.uninstall and found is None:
        notes.append(
            f"{on_path} is not on your PATH, so these hooks will not run for you: add "
            f"{os.path.dirname(hook_script or memctl_command())} to PATH (or install memoryd "
            "with pipx)"
        )
    files = []
    for change in changes:
        entry: dict[str, Any] = {"path": change.path, "changed": change.changed, "backup": None}
        if a.dry_run:
            entry["diff"] = change.diff()
        elif change.changed:
            entry["backup"] = apply(change)
        files.append(entry)
    if not a.uninstall:
        notes.append(NOTES[a.agent])
    action = "uninstall" if a.uninstall else "install"
    result = {"agent": a.agent, "scope": a.scope, "action": action, "dry_run": a.dry_run}
    s.emit({**result, "files": files, "notes": notes}, human)


def config_dir(agent: str, scope: str, project: str) -> str:
    if scope == "project":
        return os.path.join(project, "." + agent)
    home = os.path.expanduser("~")
    if agent == "claude":
        return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    if agent == "codex":
        return os.environ.get("CODEX_HOME") or os.path.join(home, ".codex")
    return os.path.join(os.environ.get("GEMINI_CLI_HOME") or home, ".gemini")


def memctl_command() -> str:
    """This installation's memctl, absolute: the console script next to the interpreter (a
    venv's bin/), else the one on PATH, else ``python -m memctl``."""
    candidates = [sys.argv[0]] if os.path.basename(sys.argv[0]) == "memctl" else []
    candidates.append(os.path.join(os.path.dirname(sys.executable), "memctl"))
    found = shutil.which("memctl")
    for path in [*candidates, *([found] if found else [])]:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return shlex.quote(os.path.abspath(path))
    return f"{shlex.quote(sys.executable)} -m memctl"


HOOK_SCRIPT = "memctl-hook"
# The shared (project) settings' command: `memctl-hook` where PATH has it, else `memctl hook` (a
# teammate's older memoryd). Through `sh -c` whether or not the agent runs commands in a shell;
# `$0` is memctl-hook, which is also how ``is_memctl_hook`` knows it.
PROJECT_COMMAND = (
    'sh -c \'command -v memctl-hook >/dev/null && exec memctl-hook "$@"; exec memctl hook "$@"\''
    " memctl-hook --agent {agent}"
)


def hook_script_path() -> str | None:
    """This installation's ``memctl-hook`` (installed beside memctl in the venv's bin/), absolute,
    or None (memctl run from a source tree without it)."""
    memctl = memctl_command()
    folders = [os.path.dirname(shlex.split(memctl)[0])] if memctl.endswith("memctl") else []
    folders.append(os.path.dirname(sys.executable))
    for folder in folders:
        path = os.path.join(folder, HOOK_SCRIPT)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


def is_memctl_hook(command: object) -> bool:
    """Whether a hook command runs ``memctl hook`` or ``memctl-hook`` (however spelled or
    quoted)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return any(os.path.basename(word) == HOOK_SCRIPT for word in words) or any(
        word == "hook" and os.path.basename(words[i - 1]) == "memctl"
        for i, word in enumerate(words)
        if i > 0
    )


# ----------------------------------------------------------------------------- planning


def plan(
    agent: str, folder: str, command: str, uninstall: bool
) -> tuple[list[FileChange], list[str]]:
    """Every file change, computed (and every existing file parsed) before anything is written."""
    path = os.path.join(folder, "hooks.json" if agent == "codex" else "settings.json")
    old = read_text(path)
    settings = load_json(path, old)
    try:
        updated = remove_ours(settings) if uninstall else add_ours(settings, agent, command)
    except MalformedSettings as exc:
        raise Failed(f"{path}: {exc}; nothing was changed", EXIT_USAGE) from None
    new = old if updated == settings else json.dumps(updated, indent=2, ensure_ascii=False) + "\n"
    changes = [FileChange(path, old, new, json.loads)]
    notes: list[str] = []
    if agent == "codex":
        toml_path = os.path.join(folder, "config.toml")
        toml_old = read_text(toml_path)
        toml_new = toml_old
        if toml_old is not None:
            load_toml(toml_path, toml_old)
        if uninstall:
            if toml_old and FEATURE_LINE in toml_old:
                notes.append(f"left `codex_hooks = true` in {toml_path}; remove it if unwanted")
        else:
            toml_new = enable_codex_hooks(toml_old or "")
            if toml_new is None:
                notes.append(f"add `codex_hooks = true` under [features] in {toml_path} yourself")
        changes.append(FileChange(toml_path, toml_old, toml_new, tomllib.loads))
    return changes, notes


def handler(agent: str, command: str) -> dict[str, Any]:
    if agent == "gemini":  # timeout in milliseconds; the name is what /hooks disable takes
        return {
            "type": "command",
            "command": command,
            "name": "memoryd",
            "timeout": TIMEOUT_S * 1000,
        }
    return {"type": "command", "command": command, "timeout": TIMEOUT_S}


def add_ours(settings: dict[str, Any], agent: str, command: str) -> dict[str, Any]:
    """``settings`` with exactly one group of ours per event, holding the current command."""
    settings = copy.deepcopy(settings)
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise MalformedSettings('"hooks" is not an object')
    for event in EVENTS[agent]:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise MalformedSettings(f'"hooks.{event}" is not a list')
        wanted = {"hooks": [handler(agent, command)]}
        if [g for g in groups if _holds_ours(g)] != [wanted]:
            hooks[event] = [*_without_ours(groups), wanted]
    return settings


def remove_ours(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without our handlers, and without the groups and events only they filled."""
    settings = copy.deepcopy(settings)
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    removed = False
    for event, groups in list(hooks.items()):
        if isinstance(groups, list) and any(_holds_ours(g) for g in groups):
            removed = True
            kept = _without_ours(groups)
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if removed and not hooks:
        del settings["hooks"]
    return settings


def _is_ours(handler: object) -> bool:
    return isinstance(handler, dict) and is_memctl_hook(handler.get("command"))


def _holds_ours(group: object) -> bool:
    handlers = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(handlers, list) and any(_is_ours(h) for h in handlers)


def _without_ours(groups: list[Any]) -> list[Any]:
    kept = []
    for group in groups:
        if not _holds_ours(group):
            kept.append(group)
            continue
        rest = [h for h in group["hooks"] if not _is_ours(h)]
        if rest:
            kept.append({**group, "hooks": rest})
    return kept


def enable_codex_hooks(text: str) -> str | None:
    """``text`` with ``codex_hooks = true`` under ``[features]`` and otherwise byte for byte the
    same; ``text`` itself when the flag (or its newer name ``hooks``) is already set; None when
    the file is laid out so that a line cannot be added safely (e.g. an inline features table)."""
    data = tomllib.loads(text)
    features = data.get("features", {})
    if not isinstance(features, dict) or "codex_hooks" in features or "hooks" in features:
        return text
    nl = "\r\n" if "\r\n" in text else "\n"
    header = _FEATURES_HEADER.search(text)
    if header:
        at = header.end() + 1 if text.startswith("\n", header.end()) else header.end()
        lead = "" if at > header.end() else nl
        new = text[:at] + lead + FEATURE_LINE + nl + text[at:]
    else:
        gap = "" if not text else nl if text.endswith("\n") else nl + nl
        new = f"{text}{gap}[features]  {MARK}{nl}{FEATURE_LINE}{nl}"
    try:
        ok = tomllib.loads(new) == {**data, "features": {**features, "codex_hooks": True}}
    except tomllib.TOMLDecodeError:
        ok = False
    return new if ok else None


# ----------------------------------------------------------------------------- files


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise Failed(f"cannot read {path}: {exc}", EXIT_USAGE) from None


def load_json(path: str, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Failed(f"{path} is not valid JSON ({exc}); nothing was changed", EXIT_USAGE) from None
    except RecursionError:  # the decoder's answer to nesting deeper than Python's stack
        raise Failed(
            f"{path} is not valid JSON (nested too deeply to read); nothing was changed", EXIT_USAGE
        ) from None
    if not isinstance(data, dict):
        raise Failed(f"{path} is not a JSON object; nothing was changed", EXIT_USAGE)
    return data


def load_toml(path: str, text: str) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise Failed(f"{path} is not valid TOML ({exc}); nothing was changed", EXIT_USAGE) from None
    except RecursionError:  # tomllib's answer to nesting deeper than Python's stack
        raise Failed(
            f"{path} is not valid TOML (nested too deeply to read); nothing was changed", EXIT_USAGE
        ) from None


def apply(change: FileChange) -> str | None:
    """Write ``change`` (backup first, atomically); return the backup's path, if any."""
    assert change.new is not None
    path = os.path.realpath(change.path)  # a symlinked dotfile stays a symlink
    backup = backup_file(path) if change.old is not None else None
    _write_atomic(path, change.new)
    try:
        intact = change.parse(read_text(path) or "") == change.parse(change.new)
    except ValueError:  # JSONDecodeError and TOMLDecodeError both are
        intact = False
    if not intact:
        kept = f"; the previous version is {backup}" if backup else ""
        raise Failed(f"{path} did not read back as written{kept}")
    return backup


def backup_file(path: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = f"{path}.memoryd-backup-{stamp}", 1
    while os.path.exists(target):
        target, n = f"{path}.memoryd-backup-{stamp}-{n}", n + 1
    shutil.copy2(path, target)
    return target


def _write_atomic(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def human(result: dict[str, Any]) -> str:
    lines = []
    for f in result["files"]:
        if result["dry_run"]:
            lines.append(f["diff"].rstrip("\n") or f"{f['path']}: no change")
        elif f["changed"]:
            backup = f" (backup: {f['backup']})" if f["backup"] else ""
            lines.append(f"{result['agent']}: updated {f['path']}{backup}")
        else:
            lines.append(f"{result['agent']}: {f['path']} already up to date")
    return "\n".join([*lines, *result["notes"]])
