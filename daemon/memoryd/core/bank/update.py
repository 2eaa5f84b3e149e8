"""What ``bank_update`` does to a file (design §10): the update is markdown sections merged into
the file by name, so a client sends only what changed.

- decisionLog.md: each ``## Decision:`` entry is appended at the end (the log is append-only).
- History sections (activeContext Recent Changes, progress Completed): the update's items are
  appended; a lone paragraph becomes one item.
- Every other section replaces the section of the same name, subsections included, or is added
  at the end of the file when the file has none; an update that is a whole file (``# Title``)
  therefore replaces the whole file.
"""

from __future__ import annotations

from memoryd.core.bank.model import (
    ACTIVE_CONTEXT,
    DECISION_LOG,
    PROGRESS,
    Outline,
    Section,
    is_decision,
    list_items,
    normalise_heading,
    sections,
)
from memoryd.core.errors import BadRequest

# Sections that are history rather than state: an update adds to them instead of replacing.
LOG_SECTIONS: dict[str, frozenset[str]] = {
    ACTIVE_CONTEXT: frozenset({"recent changes"}),
    PROGRESS: frozenset({"completed"}),
}


def _units(content: str) -> list[Section]:
    """The top-level sections of an update; text before the first heading has no place."""
    found = sections(content)
    if not found or content[: found[0].start].strip():
        raise BadRequest(
            "an update is made of markdown sections (e.g. '## Current Focus'); "
            "use write to replace a whole file"
        )
    top = min(section.level for section in found)
    return [section for section in found if section.level == top]


def merge_update(name: str, old: str, content: str) -> str:
    """The file ``name`` after merging ``content`` into its text ``old`` (see the module)."""
    if name == DECISION_LOG:
        return _append_decisions(old, content)
    # One Outline for the whole update: each section costs what it touches, not the file's
    # length (2,000 sections re-read the file 4,000 times and took 20 s).
    merged = Outline(old)
    history = LOG_SECTIONS.get(name, frozenset())
    for unit in _units(content):
        body = unit.body(content)
        if normalise_heading(unit.heading) in history and merged.has(unit.heading):
            merged.append_items(unit.heading, _history_items(content, unit))
        else:
            merged.replace_section(f"{'#' * unit.level} {unit.heading}", body)
    return merged.text()


def _history_items(content: str, unit: Section) -> list[str]:
    """The items an update adds to a history section: its list items, or a lone paragraph as
    one item. Anything else would have no place in a list, and is refused rather than lost."""
    items = [content[i.start : i.end] for i in list_items(content, unit)]
    body = unit.body(content)
    if not items and unit.own_end == unit.end and body.strip():
        return [body]
    if [ln for ln in body.splitlines() if ln.strip()] != "".join(items).splitlines():
        raise BadRequest(f"{unit.heading!r} keeps history: an update adds list items to it")
    return items


def _append_decisions(old: str, content: str) -> str:
    entries = [section for section in sections(content) if is_decision(section)]
    if not entries:
        raise BadRequest("a decisionLog.md update needs at least one '## Decision: <title>' entry")
    gaps = zip(
        [0] + [entry.end for entry in entries],
        [entry.start for entry in entries] + [-1],
        strict=True,
    )
    rest = "".join(content[start:end] if end >= 0 else content[start:] for start, end in gaps)
    if any(line.strip() and not line.startswith("# ") for line in rest.splitlines()):
        raise BadRequest("a decisionLog.md update holds '## Decision:' entries and nothing else")
    merged = Outline(old)
    for entry in entries:
        merged.append_block(content[entry.start : entry.end])
    return merged.text()
