"""Looking at projects from outside: what a codebase is made of, for a new bank's techContext and
systemPatterns (design §10), and which directories hold a bank (design §10). Both are
bounded and never follow a symlink, so a link cannot lead a scan out of the tree it was given."""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any

from memoryd.banks.paths import BANK_DIRNAME
from memoryd.core.bank.templates import CodebaseFacts

MAX_MANIFEST_BYTES = 256 * 1024
MAX_LAYOUT_ENTRIES = 60
MAX_DIRS_VISITED = 20_000  # a bound on find_banks whatever the roots hold
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", "build", "dist",
     "target", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".next", "out"}
)  # fmt: skip
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _manifest(root: Path, name: str) -> str | None:
    """A manifest's text when it is a regular file (not a symlink) of a sane size."""
    try:
        info = os.lstat(root / name)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST_BYTES:
            return None
        return (root / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _names(requirements: Iterable[str]) -> list[str]:
    return [m[1] for req in requirements if isinstance(req, str) and (m := _REQUIREMENT.match(req))]


def _python(doc: dict[str, Any], found: dict[str, Any]) -> None:
    project = doc.get("project") or doc.get("tool", {}).get("poetry") or {}
    found["name"] = found["name"] or project.get("name")
    found["description"] = found["description"] or project.get("description")
    version = project.get("requires-python") or ""
    found["languages"].append(f"Python {version}".strip())
    deps = project.get("dependencies") or []
    found["deps"] += _names(deps) if isinstance(deps, list) else [d for d in deps if d != "python"]
    for extra in (project.get("optional-dependencies") or {}).values():
        found["dev"] += _names(extra)
    found["commands"].append(("Install", "pip install -e ."))
    if "pytest" in found["deps"] + found["dev"]:
        found["commands"].append(("Test", "python -m pytest"))


def _node(doc: dict[str, Any], found: dict[str, Any]) -> None:
    found["name"] = found["name"] or doc.get("name")
    found["description"] = found["description"] or doc.get("description")
    deps, dev = list(doc.get("dependencies") or {}), list(doc.get("devDependencies") or {})
    language = "TypeScript" if "typescript" in deps + dev else "JavaScript"
    engine = (doc.get("engines") or {}).get("node")
    found["languages"].append(f"{language} (Node.js {engine})" if engine else language)
    found["deps"] += deps
    found["dev"] += dev
    found["commands"].append(("Install", "npm install"))
    for script in ("build", "test", "lint", "dev", "start"):
        if script in (doc.get("scripts") or {}):
            found["commands"].append((script.capitalize(), f"npm run {script}"))


def _rust(doc: dict[str, Any], found: dict[str, Any]) -> None:
    package = doc.get("package") or {}
    found["name"] = found["name"] or package.get("name")
    found["description"] = found["description"] or package.get("description")
    edition = package.get("rust-version") or package.get("edition")
    found["languages"].append(f"Rust {edition}" if edition else "Rust")
    found["deps"] += list(doc.get("dependencies") or {})
    found["dev"] += list(doc.get("dev-dependencies") or {})
    found["commands"] += [("Build", "cargo build"), ("Test", "cargo test")]


def _go(text: str, found: dict[str, Any]) -> None:
    module = re.search(r"^module\s+(\S+)", text, re.M)
    version = re.search(r"^go\s+(\S+)", text, re.M)
    found["name"] = found["name"] or (module[1].rsplit("/", 1)[-1] if module else None)
    found["languages"].append(f"Go {version[1]}" if version else "Go")
    found["deps"] += re.findall(r"^\s*(?:require\s+)?([\w.-]+\.[\w.-]+/\S+)\s+v\S+", text, re.M)
    found["commands"] += [("Build", "go build ./..."), ("Test", "go test ./...")]


def _requirements(text: str, found: dict[str, Any]) -> None:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("#", "-"))]
    if not any(lang.startswith("Python") for lang in found["languages"]):
        found["languages"].append("Python")
    found["deps"] += _names(lines)
    found["commands"].append(("Install", "pip install -r requirements.txt"))


def _parse(name: str, text: str, found: dict[str, Any]) -> None:
    if name == "pyproject.toml":
        _python(tomllib.loads(text), found)
    elif name == "package.json":
        _node(json.loads(text), found)
    elif name == "Cargo.toml":
        _rust(tomllib.loads(text), found)
    elif name == "go.mod":
        _go(text, found)
    else:
        _requirements(text, found)


def _layout(root: Path) -> list[str]:
    try:
        with os.scandir(root) as entries:
            listed = [
                entry.name + ("/" if entry.is_dir(follow_symlinks=False) else "")
                for entry in entries
                if not entry.name.startswith(".") and entry.name not in SKIP_DIRS
            ]
    except OSError:
        return []
    return sorted(listed, key=lambda n: (not n.endswith("/"), n))[:MAX_LAYOUT_ENTRIES]


def scan_codebase(root: Path) -> CodebaseFacts:
    """Manifests at the project root and its top-level layout. An unreadable or malformed
    manifest is skipped: a scan helps initialisation and never fails it."""
    found: dict[str, Any] = {"name": None, "description": None, "languages": [], "deps": []}
    found.update(dev=[], commands=[])
    manifests = []
    for name in ("pyproject.toml", "package.json", "Cargo.toml", "go.mod", "requirements.txt"):
        text = _manifest(root, name)
        if text is None:
            continue
        try:
            _parse(name, text, found)
        except (ValueError, TypeError, AttributeError):  # TOML/JSON errors are ValueErrors
            continue
        manifests.append(name)
    return CodebaseFacts(
        name=str(found["name"]) if found["name"] else root.name,
        description=str(found["description"]) if found["description"] else None,
        manifests=tuple(manifests),
        languages=tuple(dict.fromkeys(found["languages"])),
        dependencies=tuple(dict.fromkeys(str(d) for d in found["deps"])),
        dev_dependencies=tuple(dict.fromkeys(str(d) for d in found["dev"])),
        commands=tuple(dict.fromkeys(found["commands"])),
        layout=tuple(_layout(root)),
    )


def _breadth_first(root: Path, max_depth: int) -> Iterator[tuple[Path, set[str]]]:
    """Each directory under ``root`` (itself first, down to ``max_depth``) with the names of its
    subdirectories; hidden and build directories and banks themselves are not entered."""
    level = [root]
    for depth in range(max_depth + 1):
        below: list[Path] = []
        for directory in level:
            try:
                with os.scandir(directory) as entries:
                    names = {e.name for e in entries if e.is_dir(follow_symlinks=False)}
            except OSError:
                continue
            yield directory, names
            if depth < max_depth:
                enter = sorted(n for n in names - SKIP_DIRS if n != BANK_DIRNAME)
                below += [directory / n for n in enter if not n.startswith(".")]
        level = below


def find_banks(roots: Iterable[Path], max_depth: int = 4) -> list[tuple[str, Path]]:
    """(directory name, directory) of every directory holding ``memory-bank/`` under the roots,
    at most ``max_depth`` levels down, each once, sorted by path. At most MAX_DIRS_VISITED
    directories are read in all, so a huge tree costs a bounded time."""
    walks = chain.from_iterable(_breadth_first(root, max_depth) for root in roots)
    seen: dict[str, Path] = {}
    for directory, names in islice(walks, MAX_DIRS_VISITED):
        if BANK_DIRNAME in names:
            seen.setdefault(os.path.realpath(directory), directory)
    return sorted(((path.name, path) for path in seen.values()), key=lambda pair: str(pair[1]))
