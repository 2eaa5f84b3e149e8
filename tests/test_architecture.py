"""The direction of imports, as the architecture promises it (ARCHITECTURE.md): a walk over every
module's import statements, so a wrong-way import fails here the day it is written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"memoryd": ROOT / "daemon" / "memoryd", "memctl": ROOT / "client" / "memctl"}

# Every part of the daemon outside the core, found in the tree (a new module is covered too).
_DAEMON_OUTSIDE_CORE = sorted(
    path.stem
    for path in SOURCES["memoryd"].iterdir()
    if path.name != "core"
    and not path.name.startswith("_")
    and (path.suffix == ".py" or path.is_dir())
)

# (modules under this prefix, may not import modules under any of these prefixes)
RULES: list[tuple[str, tuple[str, ...]]] = [
    # The pure core: data in, results out; nothing of the daemon's adapters or services.
    ("memoryd.core", tuple(f"memoryd.{m}" for m in _DAEMON_OUTSIDE_CORE)),
    # Storage knows entries and events, never who uses it.
    ("memoryd.store", ("memoryd.project", "memoryd.server", "memoryd.app", "memoryd.registry")),
    ("memoryd.index", ("memoryd.project", "memoryd.server", "memoryd.app")),
    ("memoryd.audit", ("memoryd.project", "memoryd.server", "memoryd.app")),
    # Services are driven by the server, never the other way round.
    ("memoryd.project", ("memoryd.server", "memoryd.app")),
    ("memoryd.recall", ("memoryd.server", "memoryd.app")),
    ("memoryd.capture", ("memoryd.server", "memoryd.app")),
    ("memoryd.banks", ("memoryd.server", "memoryd.app")),
    ("memoryd.compactor", ("memoryd.server", "memoryd.app")),
    ("memoryd.share", ("memoryd.server", "memoryd.app")),
    ("memoryd.server", ("memoryd.app",)),
    # The client never imports the daemon (SPEC §1).
    ("memctl", ("memoryd",)),
]


def _module_name(package: str, path: Path) -> str:
    parts = path.relative_to(SOURCES[package]).with_suffix("").parts
    return ".".join((package, *parts)).removesuffix(".__init__")


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _all_imports() -> dict[str, set[str]]:
    return {
        _module_name(package, path): _imports(path, _module_name(package, path))
        for package, root in SOURCES.items()
        for path in root.rglob("*.py")
    }


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(imports: dict[str, set[str]]) -> list[str]:
    found = []
    for module, names in sorted(imports.items()):
        for prefix, forbidden in RULES:
            if not _under(module, prefix):
                continue
            for name in sorted(names):
                if any(_under(name, f) for f in forbidden):
                    found.append(f"{module} imports {name}")
    return found


def test_imports_go_one_way() -> None:
    assert {"server", "store", "project", "capture"} <= set(_DAEMON_OUTSIDE_CORE)
    imports = _all_imports()
    assert len(imports) > 80  # the walk found the tree
    assert violations(imports) == []


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("memoryd.core.recall.retrieval", "memoryd.store.sqlite"),
        ("memoryd.store.sqlite", "memoryd.project"),
        ("memctl.cli", "memoryd.config"),
        ("memoryd.project", "memoryd.server.context"),
    ],
)
def test_the_check_catches_a_wrong_way_import(module: str, imported: str) -> None:
    assert violations({module: {imported}}) == [f"{module} imports {imported}"]
