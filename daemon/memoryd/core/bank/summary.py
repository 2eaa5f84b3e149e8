"""The memory bank's session-start summary (design §10): the current focus and the
blockers from activeContext.md, the work in progress from progress.md, and the next steps
(activeContext.md's, else progress.md's Upcoming). Derived from the two files, never the whole
files: a few short lines, template placeholders left out. Pure: texts in, text out."""

from __future__ import annotations

import re

import msgspec

from memoryd.core.bank import model as bank

MAX_ITEMS = 5  # per list: a summary, not the file
MAX_CHARS = 240  # per line
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_BRACKETED = re.compile(r"^\[[^\]]*\]$")  # the seed's own placeholders: "[Immediate next task]"
_NOTHING = frozenset({"none", "n/a", "na", "-", "nothing", "none yet", "tbd"})


class BankSummary(msgspec.Struct, frozen=True, kw_only=True):
    focus: str = ""
    blockers: tuple[str, ...] = ()
    in_progress: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.focus or self.blockers or self.in_progress or self.next_steps)


def _clean(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1].rstrip() + "…"


def _meaningful(text: str) -> bool:
    return bool(text) and not _BRACKETED.match(text) and text.casefold() not in _NOTHING


def _section_text(text: str, heading: str) -> str:
    section = bank.find_section(text, heading)
    return "" if section is None else _COMMENT.sub("", text[section.body_start : section.own_end])


def _items(text: str | None, heading: str, *, open_only: bool = False) -> tuple[str, ...]:
    """The section's list items, or its lines when it has no list; placeholders left out."""
    body = _section_text(text or "", heading)
    lines = [line for line in body.splitlines() if line.strip()]
    if any(_MARKER.match(line) for line in lines):
        lines = _list_lines(lines)
    found = []
    for line in lines:
        if open_only and re.match(r"^\s*[-*+]\s+\[[xX]\]", line):
            continue
        item = _clean(_MARKER.sub("", line, count=1))
        if _meaningful(item):
            found.append(item)
    return tuple(found[:MAX_ITEMS])


def _list_lines(lines: list[str]) -> list[str]:
    """Each top-level item with its indented continuation folded into it."""
    items: list[str] = []
    for line in lines:
        if _MARKER.match(line) and not line[:1].isspace():
            items.append(line)
        elif items and line[:1].isspace():
            items[-1] += " " + line.strip()
    return items


def _paragraph(text: str | None, heading: str) -> str:
    body = _clean(_section_text(text or "", heading))
    return body if _meaningful(body) else ""


def session_summary(active_context: str | None, progress: str | None) -> BankSummary:
    next_steps = _items(active_context, "Next Steps") or _items(
        progress, "Upcoming", open_only=True
    )
    return BankSummary(
        focus=_paragraph(active_context, "Current Focus"),
        blockers=_items(active_context, "Blockers"),
        in_progress=_items(progress, "In Progress", open_only=True),
        next_steps=next_steps,
    )


def render_summary(summary: BankSummary) -> str:
    """The summary as a few lines of text; "" when the bank says nothing yet."""
    if summary.empty:
        return ""
    lines = [f"Session summary (from memory-bank/{bank.ACTIVE_CONTEXT} and {bank.PROGRESS}):"]
    if summary.focus:
        lines.append(f"Current focus: {summary.focus}")
    for title, items in (
        ("Blockers", summary.blockers),
        ("In progress", summary.in_progress),
        ("Next steps", summary.next_steps),
    ):
        if items:
            lines += [f"{title}:", *(f"- {item}" for item in items)]
    return "\n".join(lines)
