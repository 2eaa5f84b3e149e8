"""A project's custom instructions for ``bank_activate`` (design §10): ``.clinerules``
(a file, or a directory of ``*.md`` rule files), and the mode files ``.clinerules-<mode>`` and
``.roorules-<mode>``. A rule file may open with a YAML-style frontmatter whose ``paths:`` list
scopes it to the files the client is working on; unscoped rules always apply."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import msgspec

from memoryd.core.errors import BadRequest

RULES_NAME = ".clinerules"
MODE_PREFIXES = (".clinerules-", ".roorules-")
MAX_RULE_BYTES = 64 * 1024  # rules are instructions, not documents; a bigger file is skipped
MAX_RULE_FILES = 50
_MODE = re.compile(r"[A-Za-z0-9_-]{1,32}")
_PATHS_KEY = re.compile(r"^paths\s*:\s*(?P<inline>.*?)\s*$")
_LIST_ITEM = re.compile(r"^\s+-\s+(?P<value>.+?)\s*$")


class Instruction(msgspec.Struct, frozen=True):
    source: str  # path relative to the project root
    content: str  # the frontmatter removed
    paths: list[str] = []  # patterns it is scoped to; empty: always applies


def _unquote(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def _paths(lines: list[str]) -> list[str]:
    """The ``paths:`` value of a frontmatter: a block list, an inline list, or one pattern."""
    for index, line in enumerate(lines):
        match = _PATHS_KEY.match(line.rstrip("\r\n"))
        if not match:
            continue
        inline = match["inline"]
        if inline.startswith("[") and inline.endswith("]"):
            return [_unquote(v) for v in inline[1:-1].split(",") if v.strip()]
        if inline:
            return [_unquote(inline)]
        items = []
        for item_line in lines[index + 1 :]:
            item = _LIST_ITEM.match(item_line.rstrip("\r\n"))
            if not item:
                break
            items.append(_unquote(item["value"]))
        return items
    return []


def split_frontmatter(text: str) -> tuple[list[str], str]:
    """The ``paths:`` patterns of a leading ``---`` block, and the text after the block."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return [], text
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return [], text
    return _paths(lines[1:end]), "".join(lines[end + 1 :]).lstrip("\r\n")


def _relative(name: str, root: Path) -> str:
    path = PurePosixPath(name)
    if path.is_absolute():
        path = PurePosixPath(os.path.realpath(name))  # root is real too: compare like with like
        try:
            path = path.relative_to(root.as_posix())
        except ValueError:
            return path.as_posix()
    return path.as_posix().removeprefix("./")


def applies(patterns: Sequence[str], files: Sequence[str], root: Path) -> bool:
    """Whether any named file matches any pattern. ``**/`` also matches no directory at all,
    so ``src/**/*.ts`` covers ``src/a.ts`` as a glob user expects."""
    if not patterns:
        return True
    names = [_relative(name, root) for name in files]
    return any(
        fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern.replace("**/", ""))
        for name in names
        for pattern in patterns
    )


def _read_rule(path: Path, root: Path) -> str | None:
    """A rule file's text, or None when it is missing, not a regular file inside the project
    (a symlink may not pull text from elsewhere into the agent's context), too big or not UTF-8."""
    try:
        real = Path(os.path.realpath(path))
        info = real.stat()
        if not real.is_relative_to(root) or not stat.S_ISREG(info.st_mode):
            return None
        if info.st_size > MAX_RULE_BYTES:
            return None
        return real.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _candidates(root: Path, mode: str | None) -> list[Path]:
    rules = root / RULES_NAME
    found = [rules]
    if rules.is_dir() and not rules.is_symlink():
        found = sorted(rules.glob("*.md"))[:MAX_RULE_FILES]
    if mode:
        found += [root / f"{prefix}{mode}" for prefix in MODE_PREFIXES]
    return found


def collect(project_root: Path, mode: str | None, files: Sequence[str]) -> list[Instruction]:
    """The instructions that apply in ``mode`` to the named ``files``, general rules first."""
    if mode is not None and not _MODE.fullmatch(mode):
        raise BadRequest(f"mode {mode!r} must be a short word (letters, digits, '-', '_')")
    root = Path(os.path.realpath(project_root))
    instructions = []
    for path in _candidates(root, mode):
        text = _read_rule(path, root)
        if text is None:
            continue
        patterns, body = split_frontmatter(text)
        if applies(patterns, files, root):
            source = path.relative_to(root).as_posix()
            instructions.append(Instruction(source, body, patterns))
    return instructions
