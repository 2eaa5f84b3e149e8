"""Instruction files, the pure part (design §11): tiers and their order, frontmatter,
the ``@import`` grammar, provenance segments, rendering, the files each agent loads itself, and
``save_memory`` planning. Nothing here touches the file system; ``memoryd.instructions.loader``
does.

Precedence, lowest to highest (a later segment overrides an earlier one, so ``render`` emits them
in this order and the strongest instruction sits closest to the prompt):

====================================  ========
file                                  priority
====================================  ========
global ``MEMORY.md``                       100
global ``MEMORY.local.md``                 120
plugin ``<name>/memory/MEMORY.md``         200  (plugins by name)
plugin ``<name>/memory/MEMORY.local.md``   220
project ``.memoryd/MEMORY.md``             300
project ``MEMORY.md``                      310
project ``.memoryd/MEMORY.local.md``       320
project ``MEMORY.local.md``                330
====================================  ========

The explicit project file outranks the hidden one, and every ``.local.md`` outranks every
shared file of its tier (design §11). A frontmatter ``priority`` replaces the file's default number;
ties keep the table's order. Imported files carry no priority of their own: their segments follow
the importing file's segment, depth first, in directive order.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os.path
import re
from collections.abc import Sequence
from pathlib import PurePath
from typing import Literal

import msgspec

from memoryd.core.errors import BadRequest, TooLarge
from memoryd.core.recall.budget import count_tokens

Tier = Literal["global", "plugin", "project"]
Variant = Literal["main", "local", "hidden", "hidden_local"]
ProblemKind = Literal[
    "frontmatter", "depth", "fan_out", "cycle", "duplicate", "untrusted", "extension",
    "too_large", "too_many_files", "missing", "unreadable", "not_a_file", "bad_import",
]  # fmt: skip

DEFAULT_FILE_NAME = "MEMORY.md"
DEFAULT_SECTION = "Saved memories"
MAX_DEPTH = 5
MAX_IMPORTS_PER_FILE = 20
MAX_FILE_BYTES = 100 * 1024

_PRIORITIES: dict[tuple[Tier, Variant], int] = {
    ("global", "main"): 100,
    ("global", "local"): 120,
    ("plugin", "main"): 200,
    ("plugin", "local"): 220,
    ("project", "hidden"): 300,
    ("project", "main"): 310,
    ("project", "hidden_local"): 320,
    ("project", "local"): 330,
}


def default_priority(tier: Tier, variant: Variant) -> int:
    try:
        return _PRIORITIES[(tier, variant)]
    except KeyError:
        raise BadRequest(f"no {variant!r} instruction file in the {tier} tier") from None


def local_name(file_name: str) -> str:
    """``MEMORY.md`` → ``MEMORY.local.md``."""
    if not file_name.endswith(".md") or "/" in file_name or file_name in {".md", ".local.md"}:
        raise BadRequest(f"instruction file name must be a plain *.md name: {file_name!r}")
    return file_name[: -len(".md")] + ".local.md"


# --- frontmatter -------------------------------------------------------------------------------


class Frontmatter(msgspec.Struct, frozen=True, kw_only=True):
    version: int = 1
    priority: int | None = None  # None: the file's default priority
    enabled: bool = True


class ParsedFile(msgspec.Struct, frozen=True, kw_only=True):
    front: Frontmatter
    body: str
    notes: tuple[str, ...] = ()  # why some of the frontmatter was ignored


_FENCE = "---"
_INT = re.compile(r"^[+-]?\d{1,9}$")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def parse_frontmatter(text: str) -> ParsedFile:
    """A YAML subset: ``key: value`` lines between ``---`` fences at the very top of the file.

    Only ``version`` (int), ``priority`` (int) and ``enabled`` (bool) are understood; anything
    else (other keys, nesting, lists, quoted or malformed values) is ignored and noted, and the
    field keeps its default. An unterminated block is not frontmatter: the whole text is body.
    """
    lines = text.lstrip("\ufeff").split("\n")
    if not lines or lines[0].rstrip() != _FENCE:
        return ParsedFile(front=Frontmatter(), body=text)
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE), None)
    if end is None:
        return ParsedFile(front=Frontmatter(), body=text, notes=("unterminated frontmatter",))
    values: dict[str, int | bool] = {}
    notes: list[str] = []
    for number, raw in enumerate(lines[1:end], start=2):
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or raw[:1].isspace() or not key:
            notes.append(f"line {number}: not a 'key: value' line, ignored")
        elif key not in ("version", "priority", "enabled"):
            notes.append(f"line {number}: unknown key {key!r} ignored")
        elif key == "enabled":
            if value.lower() in _BOOLS:
                values[key] = _BOOLS[value.lower()]
            else:
                notes.append(f"line {number}: enabled must be true or false, got {value!r}")
        elif _INT.match(value):
            values[key] = int(value)
        else:
            notes.append(f"line {number}: {key} must be an integer, got {value!r}")
    front = msgspec.convert(values, Frontmatter)
    return ParsedFile(front=front, body="\n".join(lines[end + 1 :]), notes=tuple(notes))


# --- @import ----------------------------------------------------------------------------------

# A directive is a whole line: optional indentation, ``@import``, whitespace, a path. Lines in
# fenced code blocks are text, so documentation can show the syntax without triggering it.
_IMPORT = re.compile(r"^[ \t]*@import[ \t]+(?P<target>\S(?:.*\S)?)[ \t]*$")
_CODE_FENCE = re.compile(r"^[ \t]*(```|~~~)")


def split_imports(body: str) -> tuple[str, list[str]]:
    """The body without its directive lines, and the directive targets in order."""
    kept: list[str] = []
    targets: list[str] = []
    in_code = False
    for line in body.split("\n"):
        if _CODE_FENCE.match(line):
            in_code = not in_code
        match = None if in_code else _IMPORT.match(line)
        if match:
            targets.append(match["target"])
        else:
            kept.append(line)
    return "\n".join(kept), targets


def resolve_target(target: str, importer: PurePath, home: PurePath) -> PurePath:
    """Where a directive points, lexically: ``~`` is ``home``, a relative path is relative to the
    importing file's directory, ``..`` is folded. Symlinks are the loader's business."""
    if target == "~" or target.startswith("~/"):
        path = home / target[2:]
    elif target.startswith("~"):
        raise BadRequest(f"~user paths are not supported: {target!r}")
    else:
        path = importer.parent / target  # an absolute target replaces the parent
    return PurePath(os.path.normpath(path))


def is_markdown(path: PurePath) -> bool:
    return path.suffix.lower() == ".md"


def is_trusted(path: PurePath, roots: Sequence[PurePath]) -> bool:
    """Whether ``path`` (already resolved) lies inside one of the (resolved) trusted roots."""
    return any(path.is_relative_to(root) for root in roots)


# --- provenance -------------------------------------------------------------------------------


class Segment(msgspec.Struct, frozen=True, kw_only=True):
    """One file's contribution, with where it came from. ``hash`` is the sha256 of ``content``."""

    tier: Tier
    path: str
    imported_from: str | None
    tokens: int
    hash: str
    content: str
    priority: int


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    kind: ProblemKind
    path: str
    message: str
    imported_from: str | None = None


def make_segment(
    tier: Tier, path: str, content: str, priority: int, imported_from: str | None = None
) -> Segment:
    return Segment(
        tier=tier,
        path=path,
        imported_from=imported_from,
        tokens=count_tokens(content),
        hash=hashlib.sha256(content.encode()).hexdigest(),
        content=content,
        priority=priority,
    )


def provenance(segment: Segment) -> dict[str, object]:
    """A segment's provenance as a plain dict (no content), for listings."""
    fields = msgspec.structs.asdict(segment)
    del fields["content"]
    return fields


def _comment_value(value: str) -> str:
    # Quoted and escaped, so a hostile path cannot end the comment or start a new line.
    return json.dumps(value).replace("--", "-\\u002d")


def provenance_note(seg: Segment) -> str:
    """What the comment above a segment says: where it comes from, its size and hash."""
    origin = f" imported_from={_comment_value(seg.imported_from)}" if seg.imported_from else ""
    return (
        f"memoryd: tier={seg.tier} path={_comment_value(seg.path)}{origin}"
        f" tokens={seg.tokens} sha256={seg.hash[:12]}"
    )


def render(segments: Sequence[Segment]) -> str:
    """The segments in order, each under an HTML comment naming its source."""
    parts = [f"<!-- {provenance_note(seg)} -->\n{seg.content.strip()}\n" for seg in segments]
    return "\n".join(parts)


# --- what each agent loads itself (design §11: not injected again) ------------------------------

# agent-formats.md §2 (Claude: CLAUDE.md, CLAUDE.local.md, .claude/rules/*.md), §3.4 (Codex:
# AGENTS.md, AGENTS.override.md), §4.1 (Gemini: GEMINI.md, its default name).
_NATIVE_NAMES: dict[str, frozenset[str]] = {
    "claude": frozenset({"CLAUDE.md", "CLAUDE.local.md"}),
    "codex": frozenset({"AGENTS.md", "AGENTS.override.md"}),
    "gemini": frozenset({"GEMINI.md"}),
}
_NATIVE_DIRS: dict[str, tuple[str, ...]] = {"claude": (".claude/rules",)}


def loaded_natively(agent: str, path: str) -> bool:
    """Whether ``agent`` reads the instruction file at ``path`` by itself, so that memoryd
    leaves it out of that agent's payload (an import of CLAUDE.md, a file_name of AGENTS.md)."""
    pure = PurePath(path)
    if pure.name in _NATIVE_NAMES.get(agent, frozenset()):
        return True
    parent = pure.parent.as_posix()
    return any(parent.endswith(f"/{d}") or parent == d for d in _NATIVE_DIRS.get(agent, ()))


def plan_gitignore(text: str | None, name: str) -> str | None:
    """``.gitignore`` (``text``; None: no file) with a line ignoring ``name`` at the project root
    appended, or None when a line already ignores it (``MEMORY.local.md``, ``/MEMORY.local.md``,
    ``*.local.md``, …): a local instruction file is personal and may hold secrets."""
    for line in (text or "").splitlines():
        pattern = line.strip().removeprefix("/")
        rule = pattern and not pattern.startswith(("#", "!"))
        if rule and fnmatch.fnmatchcase(name, pattern.removesuffix("/")):
            return None
    body = text or ""
    gap = "" if not body or body.endswith("\n") else "\n"
    return f"{body}{gap}{name}\n"


# --- save_memory ------------------------------------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")


def diff(old: str, new: str, label: str = "MEMORY.md") -> str:
    """A unified diff of a planned save, for the preview."""
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{label}",
            tofile=f"b/{label}",
        )
    )


def _section_title(section: str | None) -> str:
    title = (section or DEFAULT_SECTION).strip().lstrip("#").strip()
    if not title or "\n" in title or "\r" in title:
        raise BadRequest("section must be a single non-empty line")
    return title


def _section_bounds(lines: list[str], title: str) -> tuple[int, int] | None:
    """The ``## title`` line and the index of the next heading of level 1 or 2 (or the end)."""
    start: int | None = None
    in_code = False
    for i, line in enumerate(lines):
        if _CODE_FENCE.match(line):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if not match or len(match[1]) > 2:
            continue
        if start is not None:
            return start, i
        if len(match[1]) == 2 and match[2].strip().casefold() == title.casefold():
            start = i
    return None if start is None else (start, len(lines))


def plan_save(
    existing: str | None, content: str, section: str | None, *, max_bytes: int = MAX_FILE_BYTES
) -> str:
    """The file after appending ``content`` to its ``## section`` (created at the end if missing).

    The content is stored verbatim, always below a heading, so it can never become the file's
    frontmatter; a directive in it is text here and meets the trust rules when loaded.
    """
    text = content.strip()
    if not text:
        raise BadRequest("nothing to save")
    title = _section_title(section)
    base = (existing or "").rstrip()
    lines = base.split("\n") if base else []
    bounds = _section_bounds(lines, title)
    if bounds is None:
        new = (f"{base}\n\n" if base else "") + f"## {title}\n\n{text}\n"
    else:
        start, end = bounds
        last = end - 1
        while last > start and not lines[last].strip():
            last -= 1
        addition = text.split("\n") if last > start else ["", *text.split("\n")]
        if last + 1 == end < len(lines):
            addition.append("")  # keep a blank line before the next heading
        lines[last + 1 : last + 1] = addition
        new = "\n".join(lines).rstrip() + "\n"
    if len(new.encode()) > max_bytes:
        raise TooLarge(f"the file would exceed {max_bytes} bytes")
    return new
