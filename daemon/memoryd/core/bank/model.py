"""The memory bank model (design §10): the seven files and their order, validation,
markdown section editing, the append-only decision log and progress checkboxes.
Pure: text in, text out; the I/O lives in ``memoryd.banks``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date
from typing import Literal, get_args

import msgspec

from memoryd.core.bank.rules import BankFile
from memoryd.core.errors import Ambiguous, BadRequest, EntryNotFound
from memoryd.core.redaction import redact

# Most stable first (design §10). Sessions read 1→7; updates go the other way (7→1, as
# seed §2.2 and §14 and design §10 say; seed §5.2's list differs slightly), so the volatile files
# are written before a session can end and the stable ones only when needed.
FILES: tuple[str, ...] = get_args(BankFile)  # the one spelling of the seven names
READ_ORDER = FILES
UPDATE_ORDER = tuple(reversed(FILES))
REQUIRED: tuple[str, ...] = ("projectBrief.md", "activeContext.md", "progress.md")
RECOMMENDED: tuple[str, ...] = tuple(name for name in FILES if name not in REQUIRED)
DECISION_LOG = "decisionLog.md"
PROGRESS = "progress.md"
ACTIVE_CONTEXT = "activeContext.md"

RETIRED_STATUSES = ("superseded", "deprecated")

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"^[ ]{0,3}(?:[-*+]|\d+[.)])[ \t]+")
_CHECKBOX = re.compile(r"^[ ]{0,3}[-*+][ \t]+\[(?P<mark>[ xX])\][ \t]+(?P<text>.*?)\s*$")
_PLACEHOLDER = re.compile(r"^\s*<!--.*-->\s*$")
_DECISION = re.compile(r"^decision\s*:\s*(?P<title>.+)$", re.IGNORECASE)
_FIELD = re.compile(
    r"^\s*(?:[-*+]\s+)?\*\*(?P<key>date|status)\s*:?\s*\*\*\s*:?\s*(?P<value>.+?)\s*$",
    re.IGNORECASE,
)


class Section(msgspec.Struct, frozen=True):
    """A heading and the offsets of its content in the text it was parsed from."""

    heading: str
    level: int
    start: int  # the heading line
    body_start: int  # just after the heading line
    own_end: int  # the next heading of any level: the section's own content ends here
    end: int  # the next heading of the same or a higher level: subsections included

    def body(self, text: str) -> str:
        return text[self.body_start : self.end]


class Problem(msgspec.Struct, frozen=True):
    file: str
    kind: Literal["empty", "no_header", "unreadable", "secret"]
    message: str


class ValidationReport(msgspec.Struct, frozen=True):
    valid: bool
    missing_required: list[str]
    missing_recommended: list[str]
    problems: list[Problem]
    empty: bool  # no bank file at all: the client should offer to initialise


class Decision(msgspec.Struct, frozen=True):
    title: str
    body: str
    status: str  # as written; "Accepted" when the entry names none
    date: str | None = None


def normalise_heading(heading: str) -> str:
    """A heading as compared: no leading ``#``, single spaces, case-folded."""
    return " ".join(heading.strip().lstrip("#").split()).casefold()


def _headings(text: str) -> tuple[list[tuple[int, int, str, int]], str]:
    """(start, level, title, body_start) of each heading outside fenced code, and the fence
    still open at the end of the text ("" when none)."""
    found: list[tuple[int, int, str, int]] = []
    offset, fence = 0, ""
    for line in text.splitlines(keepends=True):
        fence_match = _FENCE.match(line)
        if fence_match and (not fence or fence_match.group(1).startswith(fence)):
            fence = "" if fence else fence_match.group(1)
        elif not fence and (match := _HEADING.match(line.rstrip("\r\n"))):
            found.append((offset, len(match.group(1)), match.group(2), offset + len(line)))
        offset += len(line)
    return found, fence


def sections(text: str) -> list[Section]:
    """Every ATX heading outside fenced code, in document order."""
    found, _open_fence = _headings(text)
    ends = [len(text)] * len(found)
    open_: list[int] = []  # headings whose end is not known yet, levels strictly increasing
    for index, (start, level, _title, _body) in enumerate(found):
        while open_ and found[open_[-1]][1] >= level:
            ends[open_.pop()] = start
        open_.append(index)
    own_ends = [h[0] for h in found[1:]] + [len(text)] if found else []
    return [
        Section(title, level, start, body_start, own_end, end)
        for (start, level, title, body_start), own_end, end in zip(
            found, own_ends, ends, strict=True
        )
    ]


def find_section(text: str, heading: str) -> Section | None:
    wanted = normalise_heading(heading)
    return next((s for s in sections(text) if normalise_heading(s.heading) == wanted), None)


def _heading_parts(heading: str) -> tuple[int, str]:
    stripped = heading.strip()
    level = len(stripped) - len(stripped.lstrip("#"))
    return (level or 2), stripped.lstrip("#").strip()


def _lead(region: str) -> str:
    """The file's own habit of a blank line (or none) under its headings, as ``region``, a
    section's body, shows it."""
    return "\n" if not region.strip() or region.startswith(("\n", "\r\n")) else ""


def _heading_line(text: str) -> tuple[str, str]:
    """A section's heading line, ending in a newline, and the rest of its text."""
    line = text.splitlines(keepends=True)[0]
    return (line if line.endswith("\n") else line + "\n"), text[len(line) :]


def _splice(text: str, start: int, end: int, content: str) -> str:
    """Put ``content`` between ``start`` and ``end``, a blank line before what follows."""
    head = text[:start] if text[:start].endswith("\n") or not start else text[:start] + "\n"
    tail, region = text[end:], text[start:end]
    lead = _lead(region)
    middle = lead + content.strip("\n") + "\n" if content.strip() else ""
    return head + middle + ("\n" + tail if tail else "")


def append_block(text: str, block: str) -> str:
    """``block`` at the end of ``text``, after one blank line."""
    base = text.rstrip("\n")
    _found, fence = _headings(text)
    if fence:  # a code block left open would swallow what is appended
        base += "\n" + fence
    return (base + "\n\n" if base else "") + block.strip("\n") + "\n"


def replace_section(text: str, heading: str, body: str) -> str:
    """Replace a section's content (subsections included); add the section at the end if absent."""
    level, title = _heading_parts(heading)
    found = find_section(text, title)
    if found is None:
        return append_block(text, f"{'#' * level} {title}\n\n{body.strip()}")
    return _splice(text, found.body_start, found.end, body)


def _as_item(item: str) -> str:
    lines = item.strip().splitlines()
    if not lines:
        raise BadRequest("an empty item cannot be added")
    first = lines[0] if _ITEM.match(lines[0]) else f"- {lines[0]}"
    # Continuation lines must be indented or markdown would end the list item.
    rest = [line if not line.strip() or line[0] in " \t" else f"  {line}" for line in lines[1:]]
    return "\n".join([first, *rest])


def append_to_section(text: str, heading: str, item: str) -> str:
    """Add a list item at the end of a section's own content (before any subsection); the
    template's placeholder comments there go, since real content now takes their place."""
    entry = _as_item(item)
    found = find_section(text, heading)
    if found is None:
        return replace_section(text, heading, entry)
    own = text[found.body_start : found.own_end].splitlines()
    kept = "\n".join(line for line in own if not _PLACEHOLDER.match(line)).strip("\n")
    return _splice(text, found.body_start, found.own_end, f"{kept}\n{entry}" if kept else entry)


class _Node:
    """One heading of an ``Outline`` and the text it owns: its line and its own content."""

    __slots__ = ("level", "norm", "text", "title")

    def __init__(self, text: str, level: int, title: str) -> None:
        self.text, self.level, self.title = text, level, title
        self.norm = normalise_heading(title)


def _fence_after(fence: str, line: str) -> str:
    """The code fence open after ``line`` when ``fence`` was open before it ("" for none), as
    ``_headings`` reads fences."""
    match = _FENCE.match(line)
    if match and (not fence or match.group(1).startswith(fence)):
        return "" if fence else match.group(1)
    return fence


class _Tail:
    """The lines of the nodes from ``first`` on, read one node at a time as an edit reaches
    into them."""

    def __init__(self, nodes: list[_Node], first: int) -> None:
        self._nodes, self._node = nodes, first
        self._lines: list[str] = []
        self._at = 0

    def more(self) -> bool:
        return self._at < len(self._lines) or self._node < len(self._nodes)

    def take_until_heading(self, fence: str) -> list[str]:
        """The lines (without their line ends) before the next heading outside a fence, from
        inside ``fence``; they are taken out of the tail."""
        taken: list[str] = []
        while self.more():
            if self._at == len(self._lines):
                self._lines, self._at = self._nodes[self._node].text.splitlines(True), 0
                self._node += 1
            text = self._lines[self._at]
            if not fence and not _FENCE.match(text) and _HEADING.match(text.rstrip("\r\n")):
                break
            fence = _fence_after(fence, text)
            taken.append((text.splitlines() or [""])[0])
            self._at += 1
        return taken

    def rest(self) -> tuple[int, str]:
        """The node the untouched tail starts at, and the text of the node begun before it."""
        return self._node, "".join(self._lines[self._at :])


class Outline:
    """A text cut at its headings, so ``replace_section``, ``append_to_section`` and
    ``append_block`` can be applied many times in a row at a cost that follows what they touch
    rather than the whole text: each edit re-reads only the piece it rewrites. ``text()`` is
    exactly what the same calls on a plain string give (tests/test_bank_core.py compares)."""

    def __init__(self, text: str) -> None:
        self._load(text)

    def _load(self, text: str) -> None:
        found, self._fence = _headings(text)
        self._preamble = text[: found[0][0]] if found else text
        bounds = [h[0] for h in found] + [len(text)]
        self._nodes = [
            _Node(text[start : bounds[i + 1]], level, title)
            for i, (start, level, title, _body) in enumerate(found)
        ]
        self._norms = [node.norm for node in self._nodes]

    def text(self) -> str:
        return self._preamble + "".join(node.text for node in self._nodes)

    def _find(self, heading: str) -> int | None:
        wanted = normalise_heading(heading)
        try:
            return self._norms.index(wanted)  # the first in document order, as find_section
        except ValueError:
            return None

    def _put(self, start: int, stop: int, piece: str) -> None:
        """``piece`` (read from a line start outside any fence) takes the place of the nodes
        ``start:stop``; with ``start == -1`` it replaces the preamble and every node."""
        found, fence = _headings(piece)
        last = stop == len(self._nodes)
        if (fence and not last) or (start >= 0 and (not found or found[0][0] != 0)):
            # A fence left open swallows what follows, or the piece lost its heading: read the
            # whole text again (what a plain string does on every call).
            self._load(self._rendered(start, stop, piece))
            return
        bounds = [h[0] for h in found] + [len(piece)]
        nodes = [_Node(piece[h[0] : bounds[i + 1]], h[1], h[2]) for i, h in enumerate(found)]
        if start < 0:
            self._preamble = piece[: bounds[0]]
            start = 0
        self._nodes[start:stop] = nodes
        self._norms[start:stop] = [node.norm for node in nodes]
        if last:
            self._fence = fence

    def _rendered(self, start: int, stop: int, piece: str) -> str:
        return (
            self._preamble
            + "".join(n.text for n in self._nodes[:start])
            + piece
            + "".join(n.text for n in self._nodes[stop:])
        )

    def _splice_body(self, index: int, stop: int, content: str) -> None:
        """``_splice`` from the body of node ``index`` to the start of node ``stop``."""
        head, body = _heading_line(self._nodes[index].text)
        lead = _lead(body + "".join(n.text for n in self._nodes[index + 1 : stop]))
        middle = lead + content.strip("\n") + "\n" if content.strip() else ""
        self._put(index, stop, head + middle + ("\n" if stop < len(self._nodes) else ""))

    def append_block(self, block: str) -> None:
        """As ``append_block``."""
        if self._nodes:
            index, last = len(self._nodes) - 1, self._nodes[-1].text
        else:
            index, last = -1, self._preamble
        base = last.rstrip("\n")
        if self._fence:
            base += "\n" + self._fence
        gap = "\n\n" if base or index >= 0 else ""  # a node's text is never blank
        self._put(index, index + 1, base + gap + block.strip("\n") + "\n")

    def replace_section(self, heading: str, body: str) -> None:
        """As ``replace_section``."""
        level, title = _heading_parts(heading)
        index = self._find(title)
        if index is None:
            self.append_block(f"{'#' * level} {title}\n\n{body.strip()}")
            return
        stop = index + 1
        while stop < len(self._nodes) and self._nodes[stop].level > self._nodes[index].level:
            stop += 1
        self._splice_body(index, stop, body)

    def append_to_section(self, heading: str, item: str) -> None:
        """As ``append_to_section``."""
        entry = _as_item(item)
        index = self._find(heading)
        if index is None:
            self.replace_section(heading, entry)
            return
        own = _heading_line(self._nodes[index].text)[1].splitlines()
        kept = "\n".join(line for line in own if not _PLACEHOLDER.match(line)).strip("\n")
        self._splice_body(index, index + 1, f"{kept}\n{entry}" if kept else entry)

    def append_items(self, heading: str, items: list[str]) -> None:
        """As ``append_to_section`` for each item in turn, in one edit whose cost follows the
        items and the text they reach, not items × section: each call drops the placeholder
        lines the previous item brought (only the last item keeps its own), and a code fence an
        item leaves open makes the next call's section reach over the headings it swallows, up
        to the next heading outside a fence, as reading the text again would."""
        entries = [_as_item(item) for item in items]
        index = self._find(heading)
        if index is None and entries:
            self.append_to_section(heading, items[0])  # adds the section at the end
            entries = entries[1:]
            index = self._find(heading)
        if not entries:
            return
        if index is None:  # pragma: no cover - a section just added is always found
            raise AssertionError(f"section {heading!r} not found after adding it")
        head, own = _heading_line(self._nodes[index].text)
        lead = _lead(own)
        tail = _Tail(self._nodes, index + 1)
        kept: list[str] = []  # the section's own lines so far, placeholders dropped
        fence = ""  # the fence open after ``kept``
        pending = own.splitlines()  # lines to fold into ``kept`` before the next item
        for number, entry in enumerate(entries):
            for text in pending:
                fence = _fence_after(fence, text)
                if not _PLACEHOLDER.match(text) and (text or kept):  # no leading blank line
                    kept.append(text)
            while kept and not kept[-1]:
                kept.pop()
            lines = entry.split("\n")
            if number == len(entries) - 1:
                break
            pending = lines + ([""] if tail.more() else [])
            after = fence
            for text in lines:
                after = _fence_after(after, text)
            if after:  # the fence swallows headings: the section now reaches the next one out
                pending += tail.take_until_heading(after)
        body = "\n".join([*kept, *lines])
        region = lead + body + "\n" + ("\n" if tail.more() else "")
        stop, rest = tail.rest()
        self._put(index, stop, head + region + rest)

    def has(self, heading: str) -> bool:
        return self._find(heading) is not None


class ListItem(msgspec.Struct, frozen=True):
    """A top-level list item: its offsets (continuation lines included) and its first line."""

    start: int
    end: int
    first_line: str


def list_items(text: str, section: Section) -> list[ListItem]:
    """Top-level list items of a section's own content, each with its indented continuation."""
    items: list[ListItem] = []
    offset = section.body_start
    for line in text[section.body_start : section.own_end].splitlines(keepends=True):
        if _ITEM.match(line) and not line[:1].isspace():
            items.append(ListItem(offset, offset + len(line), line.rstrip("\r\n")))
        elif items and items[-1].end == offset and line.strip() and line[:1] in " \t":
            last = items[-1]
            items[-1] = ListItem(last.start, offset + len(line), last.first_line)
        offset += len(line)
    return items


def validate(files: Mapping[str, str | None]) -> ValidationReport:
    """Missing required/recommended files, and present files that are empty or have no header.
    Missing recommended files are noted but do not make the bank invalid (design §10)."""
    present = [name for name, content in files.items() if content is not None]
    ordered = [n for n in FILES if n in present] + sorted(n for n in present if n not in FILES)
    problems: list[Problem] = []
    for name in ordered:
        content = files[name] or ""
        if not content.strip():
            problems.append(Problem(name, "empty", f"{name} is empty"))
        elif not sections(content):
            problems.append(Problem(name, "no_header", f"{name} has no markdown header"))
        # The daemon redacts what it writes; a secret here came from an edit of the user's.
        kinds = redact(content).kinds
        if kinds:
            problems.append(Problem(name, "secret", _secret_message(name, kinds)))
    missing_required = [n for n in REQUIRED if n not in present]
    return ValidationReport(
        valid=not missing_required and not problems,
        missing_required=missing_required,
        missing_recommended=[n for n in RECOMMENDED if n not in present],
        problems=problems,
        empty=not any(n in present for n in FILES),
    )


def _secret_message(name: str, kinds: tuple[str, ...]) -> str:
    return (
        f"{name} holds what looks like a secret ({', '.join(kinds)}): remove it from the file;"
        " memoryd redacts it from everything it keeps, but the file is yours and may be committed"
    )


def bank_tokens(files: Mapping[str, str | None]) -> int:
    """The bank's cost in context: ceil(chars / 4), the counter of design §5."""
    return math.ceil(sum(len(text) for text in files.values() if text) / 4)


def is_decision(section: Section) -> bool:
    return section.level == 2 and _DECISION.match(section.heading.strip()) is not None


def parse_decisions(text: str) -> list[Decision]:
    """The ``## Decision: <title>`` entries of a decision log, in order."""
    decisions = []
    for section in sections(text):
        match = _DECISION.match(section.heading.strip())
        if section.level != 2 or match is None:
            continue
        lines = section.body(text).strip("\n").splitlines()
        while lines and lines[-1].strip() in ("", "---", "***", "___"):
            lines.pop()
        fields = {m["key"].lower(): m["value"] for line in lines if (m := _FIELD.match(line))}
        body = "\n".join(lines).strip("\n")
        decisions.append(
            Decision(
                match["title"].strip(), body, fields.get("status", "Accepted"), fields.get("date")
            )
        )
    return decisions


def _comparable(body: str) -> list[str]:
    # Blank lines, trailing spaces and the status line are not part of what a decision says.
    kept = []
    for line in body.splitlines():
        field = _FIELD.match(line)
        if line.strip() and not (field and field["key"].lower() == "status"):
            kept.append(line.rstrip())
    return kept


def _words(text: str) -> str:
    return " ".join(text.split()).casefold()


def _refusal(kept: Decision, now: Decision | None) -> str | None:
    if now is None or _words(now.title) != _words(kept.title):
        return (
            f"the entry {kept.title!r} would be removed or moved; "
            "add new decisions after the existing ones"
        )
    if _comparable(now.body) != _comparable(kept.body):
        return (
            f"the entry {kept.title!r} would be changed; only its status may be marked Superseded"
        )
    status = _words(now.status)
    if status != _words(kept.status) and not status.startswith(RETIRED_STATUSES):
        return f"the status of {kept.title!r} may only change to Superseded or Deprecated"
    return None


def check_decision_log(old: str | None, new: str) -> str | None:
    """Why ``new`` may not replace ``old`` (append-only), or None when it may. Existing entries
    must stay, in order and unchanged; the only edit allowed is retiring one's status."""
    before, after = parse_decisions(old or ""), parse_decisions(new)
    for index, kept in enumerate(before):
        reason = _refusal(kept, after[index] if index < len(after) else None)
        if reason is not None:
            return f"decisionLog.md is append-only: {reason}"
    return None


def _open_items(text: str) -> list[tuple[ListItem, str]]:
    found = []
    for heading in ("In Progress", "Upcoming"):
        section = find_section(text, heading)
        for item in list_items(text, section) if section else []:
            box = _CHECKBOX.match(item.first_line)
            if box and box["mark"] == " ":
                found.append((item, box["text"]))
    return found


def complete_progress_item(text: str, item: str, when: date) -> str:
    """Move an open checkbox item from In Progress or Upcoming to Completed, checked and dated.
    An exact (case- and space-insensitive) match wins over a substring match."""
    wanted = _words(item)
    candidates = _open_items(text)
    matches = [c for c in candidates if _words(c[1]) == wanted] or [
        c for c in candidates if wanted and wanted in _words(c[1])
    ]
    if not matches:
        raise EntryNotFound(f"no open item matching {item!r} under In Progress or Upcoming")
    if len(matches) > 1:
        labels = "; ".join(label for _, label in matches)
        raise Ambiguous(f"{item!r} matches {len(matches)} open items: {labels}")
    found, label = matches[0]
    continuation = text[found.start : found.end].splitlines()[1:]
    remaining = text[: found.start] + text[found.end :]
    done = "\n".join([f"- [x] {label} — {when.isoformat()}", *continuation])
    return append_to_section(remaining, "Completed", done)


def completed_items(text: str) -> list[str]:
    """The text of each checked item under Completed (its date suffix included)."""
    section = find_section(text, "Completed")
    boxes = (_CHECKBOX.match(i.first_line) for i in (list_items(text, section) if section else []))
    return [box["text"] for box in boxes if box and box["mark"] in "xX"]
