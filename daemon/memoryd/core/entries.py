"""Entries: categories and sections, fingerprints, and turning a user's draft into an Entry."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import get_args

from memctl.protocol import NAME_PATTERN, NAME_RULE, Category, Entry, Source, Status
from memoryd.core.errors import BadRequest, TooLarge

MAX_CONTENT_CHARS = 500

# design §2, in table order: TTL in days and the section each category renders under.
CATEGORY_TABLE: dict[Category, tuple[int, str]] = {
    "task_progress": (14, "Recent Work"),
    "discovery": (21, "Architecture"),
    "file_change": (21, "Recent Work"),
    "warning": (30, "Constraints"),
    "decision": (90, "Decisions"),
    "error": (90, "Known Issues"),
    "pattern": (180, "Patterns & Conventions"),
    "architecture": (180, "Architecture"),
    "spec": (180, "Specs"),
    "preference": (365, "Patterns & Conventions"),
}
CATEGORIES: tuple[Category, ...] = get_args(Category)
STATUSES: tuple[Status, ...] = get_args(Status)


def _first_category_per_section() -> dict[str, Category]:
    mapping: dict[str, Category] = {}
    for category, (_ttl, section) in CATEGORY_TABLE.items():
        mapping.setdefault(section.casefold(), category)
    return mapping


SECTION_TO_CATEGORY = _first_category_per_section()


def section_of(category: Category) -> str:
    return CATEGORY_TABLE[category][1]


def category_for_section(section: str) -> Category:
    """A section maps to its first category in the design §2 table (Constraints → warning)."""
    try:
        return SECTION_TO_CATEGORY[section.strip().casefold()]
    except KeyError:
        known = ", ".join(sorted({s for _, s in CATEGORY_TABLE.values()}))
        raise BadRequest(f"unknown section {section!r}; known sections: {known}") from None


# Cheap wording cues for a remembered text that names no category. Order matters: the first
# family that matches wins, and constraints come first because missing one is the costliest.
_CATEGORY_CUES: tuple[tuple[Category, re.Pattern[str]], ...] = (
    (
        "warning",
        re.compile(r"\b(never|don'?t|do not|must not|avoid|careful|warning|beware)\b", re.I),
    ),
    (
        "decision",
        re.compile(r"\b(decided|decision|we chose|chose|we use|going with|switched to)\b", re.I),
    ),
    ("preference", re.compile(r"\b(i prefer|prefer|i like|i want)\b", re.I)),
    ("error", re.compile(r"\b(error|exception|fails?|failing|crash(es)?|bug|broken)\b", re.I)),
    ("pattern", re.compile(r"\b(always|convention|pattern|naming|style)\b", re.I)),
    ("architecture", re.compile(r"\b(architecture|module|layer|service|component)\b", re.I)),
)


def infer_category(content: str) -> Category:
    for category, cue in _CATEGORY_CUES:
        if cue.search(content):
            return category
    return "discovery"


_WS = re.compile(r"\s+")


def normalize(content: str) -> str:
    """Fingerprint normalization (design §5): lowercase, collapse whitespace, trim."""
    return _WS.sub(" ", content.lower()).strip()


def _djb2(text: str, seed: int) -> int:
    # Over UTF-16 code units, as the original JavaScript implementation hashes charCodeAt().
    h = seed
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = ((h * 33) ^ (data[i] | data[i + 1] << 8)) & 0xFFFFFFFF
    return h


def fingerprint(content: str) -> str:
    """djb2 double hash of the normalized content, seeds 0xdeadbeef and 0x41c6ce57."""
    norm = normalize(content)
    return f"{_djb2(norm, 0xDEADBEEF):08x}{_djb2(norm, 0x41C6CE57):08x}"


# What never belongs in memory text: controls (C0 other than tab and newline, DEL, C1: terminal
# escapes, no text needs them) and the bidi embeddings, overrides and isolates (they reorder how
# the rest reads, "Trojan Source"). Text keeps its lines and tabs, and the bidi marks (U+200E/F,
# U+061C) and joiners (U+200C/D) that right-to-left scripts and emoji need; every payload strips
# those on the way to an agent (core.recall.formatting).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAME = re.compile(NAME_PATTERN)


def clean_content(raw: str) -> str:
    """Validate user-supplied content; raise a clear error rather than store something odd."""
    content = unicodedata.normalize("NFC", _CONTROL.sub("", raw)).strip()
    if not content:
        raise BadRequest("content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise TooLarge(
            f"content is {len(content)} characters; the limit is {MAX_CONTENT_CHARS}. "
            "Split it into smaller entries."
        )
    return content


def clean_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Tags as memory keeps them; one holding a control or bidi character is refused (an import
    line or a teammate's file do not pass through the request schema's check)."""
    seen: dict[str, None] = {}
    for tag in tags:
        if not _NAME.match(tag):
            raise BadRequest(f"tag {ascii(tag)[:80]}: {NAME_RULE}")
        t = _WS.sub("-", tag.strip().lower())
        if t:
            seen.setdefault(t, None)
    return tuple(seen)


def clean_paths(paths: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for path in paths:
        p = path.strip()
        if "\x00" in p:
            raise BadRequest("file path contains a NUL byte")
        if p:
            seen.setdefault(p, None)
    return tuple(seen)


def resolve_category(category: Category | None, section: str | None, content: str) -> Category:
    if category is not None and section is not None:
        expected = category_for_section(section)
        if section_of(category).casefold() != section.strip().casefold():
            raise BadRequest(
                f"category {category!r} renders under {section_of(category)!r}, "
                f"not {section!r} (that section stores {expected!r}); give one or the other"
            )
        return category
    if category is not None:
        return category
    if section is not None:
        return category_for_section(section)
    return infer_category(content)


def new_entry(
    *,
    entry_id: str,
    content: str,
    category: Category,
    status: Status,
    now: float,
    source: Source,
    tags: tuple[str, ...] = (),
    file_paths: tuple[str, ...] = (),
    importance: float = 0.7,
    confidence: float = 1.0,
    created_at: float | None = None,
) -> Entry:
    return Entry(
        id=entry_id,
        fingerprint=fingerprint(content),
        content=content,
        category=category,
        section=section_of(category),
        importance=importance,
        confidence=confidence,
        status=status,
        source=source,
        tags=tags,
        file_paths=file_paths,
        created_at=now if created_at is None else created_at,
        updated_at=now,
    )
