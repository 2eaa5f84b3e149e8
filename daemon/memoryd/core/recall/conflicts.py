"""Conflict detection (design §5): two entries that say opposite things about the
same subject. Opposition pairs only count between entries sharing a file path or a category
and enough content words, so unrelated entries are never flagged."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memctl.protocol import Entry
from memoryd.core.recall.retrieval import keywords

# Negated forms are folded into one token ("don't use" → "not_use") before comparing.
_NEGATION = re.compile(
    r"\b(?:don'?t|do not|never|shouldn'?t|should not|must not|mustn'?t)\s+(\w+)", re.I
)
# (positive, negative) word pairs; a conflict is one side in each entry.
OPPOSITIONS: tuple[tuple[str, str], ...] = (
    ("use", "not_use"),
    ("always", "never"),
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("add", "remove"),
    ("should", "shouldn't"),
    ("do", "not_do"),
    ("allow", "not_allow"),
)
MIN_SHARED_WORDS = 2
_POLARITY_WORDS = frozenset(w for pair in OPPOSITIONS for w in pair) | {"not", "don", "t"}


def _marks(text: str) -> set[str]:
    lowered = text.lower()
    folded = _NEGATION.sub(lambda m: f" not_{m.group(1).lower()} ", lowered)
    words = set(re.findall(r"[\w']+", folded))
    if re.search(r"\bnever\b", lowered):
        words.add("never")
    if re.search(r"\bshouldn'?t\b|\bshould not\b", lowered):
        words.add("shouldn't")
    return words


def _opposed(a: set[str], b: set[str]) -> bool:
    return any((pos in a and neg in b) or (neg in a and pos in b) for pos, neg in OPPOSITIONS)


def _related(a: Entry, b: Entry) -> bool:
    if a.category != b.category and not set(a.file_paths) & set(b.file_paths):
        return False
    shared = (set(keywords(a.content)) & set(keywords(b.content))) - _POLARITY_WORDS
    return len(shared) >= MIN_SHARED_WORDS


def detect(new: Entry, others: Sequence[Entry]) -> list[str]:
    """Ids of the entries in ``others`` that ``new`` contradicts."""
    marks = _marks(new.content)
    return [
        other.id
        for other in others
        if other.id != new.id and _related(new, other) and _opposed(marks, _marks(other.content))
    ]


def marker(a: Entry, b: Entry) -> str:
    """The text injected with both sides of a conflict. Each side's ``"`` is folded to ``'``:
    inside the marker's quotes it could otherwise end its side and forge the rest."""
    return (
        f'[⚠ CONFLICT] Entry #{a.id[:4]} says "{_clip(a.content)}" but Entry #{b.id[:4]} says '
        f'"{_clip(b.content)}". Verify which is current.'
    )


def _clip(text: str, limit: int = 120) -> str:
    text = text.replace('"', "'")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
