"""Session findings: the shape of what extraction captures, and how captured text is kept.

Captured text is tidied, optionally redacted, cut to the content limit at a word boundary and
fingerprinted; within one extraction, one finding is kept per fingerprint.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from memctl.protocol import Category
from memoryd.core.capture.rules import ExtractionRule
from memoryd.core.entries import MAX_CONTENT_CHARS, fingerprint, infer_category


class SessionFinding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing worth remembering from a session (design §6), before promotion."""

    id: str
    fingerprint: str
    content: str
    category: Category
    importance: float
    confidence: float
    rule_id: str
    agent: str
    session_id: str | None
    offset: int
    file_paths: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    user_intent: bool = False
    resolved_error: bool = False
    # The agent said it and the user's next words went on without correcting it.
    accepted: bool = False


# What a session did, not what it learnt: these feed its episode, never project memory.
EPISODE_ONLY: frozenset[str] = frozenset({"file_change", "task_progress"})


def session_memory_keeps(finding: SessionFinding, *, final: bool) -> bool:
    """Whether session memory records ``finding``. A checkpoint sees only part of the session,
    so an error it finds unresolved may be fixed later: only the final pass records those, and
    a fixed twin never sits beside its unresolved copy."""
    if finding.category in EPISODE_ONLY:
        return False
    return final or finding.category != "error" or finding.resolved_error


class Origin(NamedTuple):
    """Where in the transcript a finding was seen."""

    agent: str
    session_id: str | None
    offset: int


_RAW_LIMIT = 8 * MAX_CONTENT_CHARS
_CONTENTS_KEPT = 4096  # texts whose content a sink remembers (a session's repeats)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACES = re.compile(r"[ \t\xa0]+")
_BLANK_LINES = re.compile(r"\s*\n\s*")
# Markdown bold only: underscores are part of names such as __init__.py.
_EMPHASIS = re.compile(r"\*\*")


def tidy(text: str) -> str:
    text = unicodedata.normalize("NFC", _CONTROL.sub(" ", text.replace("\r", "")))
    text = _EMPHASIS.sub("", text)
    return _BLANK_LINES.sub("\n", _SPACES.sub(" ", text)).strip()


def truncate(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    """At most ``limit`` characters, cut at a word boundary and marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    boundary = max(cut.rfind(" "), cut.rfind("\n"))
    # A single enormous token has no boundary worth keeping; cut it mid-word instead.
    if boundary >= limit // 2:
        cut = cut[:boundary]
    return cut.rstrip() + "…"


def finding_id(session_id: str | None, fp: str) -> str:
    return hashlib.sha256(f"{session_id or ''}\x1f{fp}".encode()).hexdigest()[:32]


def _mentioned(files: Sequence[str], text: str) -> tuple[str, ...]:
    return tuple(f for f in files if f and (f in text or f.rsplit("/", 1)[-1] in text))


# Near-duplicates: two statements of at least this many words, nearly all the words of the
# shorter in the longer, and at least half of the longer's in the shorter.
NEAR_MIN_WORDS = 5
NEAR_CONTAINED = 0.8
NEAR_SHARED = 0.5
_WORD = re.compile(r"[^\W_]+(?:[-_.'][^\W_]+)*")


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def _near_duplicates(a: frozenset[str], b: frozenset[str]) -> bool:
    if len(a) < NEAR_MIN_WORDS or len(b) < NEAR_MIN_WORDS:
        return False
    shared = len(a & b)
    return shared >= NEAR_CONTAINED * min(len(a), len(b)) and shared >= NEAR_SHARED * max(
        len(a), len(b)
    )


class FindingSink:
    """Keeps one finding per fingerprint: the most important, the earliest among equals. A
    statement that nearly repeats a kept one is the same fact: the more important is kept, the
    later wording among equals (the one the session ended with)."""

    def __init__(
        self, redact: Callable[[str], str] | None, paths: Callable[[str], str] | None = None
    ) -> None:
        self._redact = redact
        self._paths = paths
        self._best: dict[str, tuple[tuple[float, bool, bool], int, SessionFinding]] = {}
        self._seq = 0
        # The same text recurs within a session (todo lists are re-sent whole); hash it once.
        self._fingerprints: dict[str, str] = {}
        # The words of each prose statement kept in its own slot, for near-duplicates.
        self._statements: dict[str, frozenset[str]] = {}
        # Texts already made contents (tidied, paths rewritten, redacted, cut), shared with
        # copies: a session's snapshot adds its open errors and edit tallies again at each
        # checkpoint, and that preparation is the cost of an add.
        self._contents: dict[str, str] = {}

    def copy(self) -> FindingSink:
        """A sink holding what this one holds, to add to without changing this one."""
        other = FindingSink(self._redact, self._paths)
        other._best = dict(self._best)
        other._seq = self._seq
        other._fingerprints = self._fingerprints  # a cache of a pure function: shared
        other._statements = dict(self._statements)
        other._contents = self._contents
        return other

    def add(
        self,
        rule: ExtractionRule,
        text: str,
        origin: Origin,
        files: Sequence[str] = (),
        *,
        resolved: bool = False,
        importance: float | None = None,
        key: str | None = None,
    ) -> bool:
        """Keep ``text`` as a finding unless one of the same fingerprint, or of the same ``key``
        (one fact in other words: the same failure, fixed or not), ranks higher."""
        content = self._contents.get(text)
        if content is None:
            content = self._content(text)
            if len(self._contents) >= _CONTENTS_KEPT:
                self._contents.clear()
            self._contents[text] = content
        if not content:
            return False
        if self._paths is not None:
            files = [self._paths(f) for f in files]
        fp = self._fingerprints.get(content)
        if fp is None:
            fp = self._fingerprints[content] = fingerprint(content)
        finding = SessionFinding(
            id=finding_id(origin.session_id, fp),
            fingerprint=fp,
            content=content,
            category=infer_category(content) if rule.category == "infer" else rule.category,
            importance=rule.importance if importance is None else importance,
            confidence=rule.confidence,
            rule_id=rule.id,
            agent=origin.agent,
            session_id=origin.session_id,
            offset=origin.offset,
            file_paths=_mentioned(files, content) if rule.collect == "match" else tuple(files),
            tags=rule.tags,
            user_intent=rule.user_intent,
            resolved_error=resolved,
        )
        rank = (finding.importance, finding.user_intent, resolved)
        self._seq += 1
        slot = fp if key is None else f"key\x1f{key}"
        if key is None and rule.collect == "match" and slot not in self._best:
            slot = self._near(content) or slot
        current = self._best.get(slot)
        # One fact in other words: the latest wording wins a tie (a later fix is the one that
        # held, a summary's wording the one the session ended with).
        latest = key is not None or slot != fp
        if current is None or rank > current[0] or (latest and rank == current[0]):
            self._best[slot] = (rank, self._seq, finding)
        return True

    def _content(self, text: str) -> str:
        # Only the start of a text can fit in a finding; cutting first keeps huge prompts cheap.
        content = tidy(text[:_RAW_LIMIT])
        if self._paths is not None and content:
            content = self._paths(content)
        if self._redact is not None and content:
            content = tidy(self._redact(content))
        return truncate(content)

    def _near(self, content: str) -> str | None:
        """The slot of a kept statement that says nearly the same as ``content`` (the same
        sentence said again with a few words more or less), so one fact is one finding."""
        words = _words(content)
        if len(words) < NEAR_MIN_WORDS:
            return None
        for slot, other in self._statements.items():
            if _near_duplicates(words, other):
                return slot
        self._statements[self._fingerprints[content]] = words
        return None

    def revise(self, judge: Callable[[SessionFinding], SessionFinding | None]) -> None:
        """Replace each finding by what ``judge`` makes of it, or drop it on None: a judgement
        that needs the whole session."""
        for slot, (rank, seq, finding) in list(self._best.items()):
            revised = judge(finding)
            if revised is None:
                del self._best[slot]
            elif revised is not finding:
                self._best[slot] = (rank, seq, revised)

    def findings(self) -> list[SessionFinding]:
        ordered = sorted(self._best.values(), key=lambda kept: (kept[2].offset, kept[1]))
        return [finding for _rank, _seq, finding in ordered]
