"""Free text → memory-bank updates by keyword rules (design §10, ``bank_process``).

Pure: text and a clock in, ``ProcessedItem`` plans out; the bank service applies them.

Splitting: blank lines, bullet lines and markdown headings start blocks; a block is cut into
sentences and each sentence takes the first rule of the table that matches it. A sentence that no
rule matches elaborates the item before it; unmatched sentences that open a block become a Recent
Changes item of their own, except before a decision, whose context they are. A checked box
(``- [x]``) makes its block a completed item, an empty one (``- [ ]``) a next step.

Operations (``content`` is always the exact markdown to write):

- ``append``: add the block at the end of the file (decisionLog.md is append-only).
- ``append_to_section``: add the line at the end of ``metadata["section"]`` (created if missing).
- ``replace_section``: the body of ``metadata["section"]`` becomes ``content`` (the last wins).
- ``complete_item``: progress.md only; drop an open ``- [ ] <metadata["item"]>`` if there is one
  and add ``content`` (``- [x] <item> — <date>``) to ``metadata["section"]`` (Completed).

Safety: item text is one line (every whitespace run, line breaks included, becomes one space);
heading markers in the input are dropped (the heading becomes text) and a leading block marker
(``#``, ``>``, fences, …) is backslash-escaped, so no item can open a section or a code block.
Nothing is truncated (design §10): text longer than ``MAX_PIECE_CHARS`` becomes numbered parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from itertools import zip_longest
from typing import Annotated

import msgspec

from memoryd.core.bank.rules import (
    CHECKBOX_RULES,
    DEFAULT_RULES,
    FALLBACK_RULE,
    BankFile,
    Operation,
    Render,
    RoutingRule,
)

SECTION_OPERATIONS = frozenset({"append_to_section", "replace_section", "complete_item"})

MAX_ITEM_CHARS = 4000  # content of one item, for rules and LLM alike
MAX_PIECE_CHARS = 1000  # user text in one rendered field; longer text becomes parts
MAX_META_CHARS = 1100

MetaKey = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
MetaValue = Annotated[str, msgspec.Meta(max_length=MAX_META_CHARS)]


class ProcessedItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One planned bank update: the schema of design §10 for the rule and the LLM path alike."""

    target_file: BankFile
    operation_type: Operation
    content: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ITEM_CHARS)]
    # rule, section, timestamp (ISO, UTC), date, item (complete_item), title (decision), part
    metadata: Annotated[dict[MetaKey, MetaValue], msgspec.Meta(max_length=16)]


_HEADING = re.compile(r"^\s{0,3}#{1,6}(?=\s|$)")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+(?:\[(?P<box>[ xX])\](?:\s+|$))?")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?]) ")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f]")
_DECISION_LABEL = re.compile(r"^\\?(?:decision)\s*:\s*", re.IGNORECASE)
_ESCAPED_START = frozenset("#>=<|~`+*_-")
_LINE_HAZARD = re.compile(r"^ {0,3}(?:#|```|~~~|(?:=+|-+|\*{3,}|_{3,})\s*$)")
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


@dataclass
class _Group:
    rule: RoutingRule
    sentences: list[str]
    context: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Clock:
    iso: str
    date: str
    stamp: str

    @classmethod
    def of(cls, now: datetime) -> _Clock:
        utc = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
        stamp = utc.strftime("%Y-%m-%d %H:%M UTC")
        return cls(utc.strftime("%Y-%m-%dT%H:%M:%SZ"), utc.strftime("%Y-%m-%d"), stamp)


def route(
    text: str, now: datetime, rules: tuple[RoutingRule, ...] = DEFAULT_RULES
) -> list[ProcessedItem]:
    """Split ``text`` into items and route each by ``rules`` (a naive ``now`` is taken as UTC).
    Deterministic; never raises on any string; blank or marker-only input gives no items."""
    clock = _Clock.of(now)
    return [
        item for block in _blocks(text) for g in _groups(block, rules) for item in _items(g, clock)
    ]


def validate_item(item: ProcessedItem) -> str | None:
    """Why ``item`` must not be applied (what the schema cannot say), or None when it may be."""
    content, op, meta = item.content, item.operation_type, item.metadata
    if not content.strip() or len(content) > MAX_ITEM_CHARS:
        return "content is empty or too long"
    if _BAD_CHARS.search(content) or any(_BAD_CHARS.search(v) or "\n" in v for v in meta.values()):
        return "control characters or line separators other than \\n"
    section = meta.get("section", "")
    if op in SECTION_OPERATIONS and (not section.strip() or section.lstrip().startswith("#")):
        return f"{op} needs metadata.section (a title without '#')"
    if op == "complete_item" and item.target_file != "progress.md":
        return "complete_item applies to progress.md only"
    lines = content.split("\n")
    if item.target_file == "decisionLog.md":
        if op != "append" or not lines[0].startswith("## Decision: "):
            return "decisionLog.md takes only appended '## Decision: <title>' blocks"
        lines = lines[1:]
    for line in lines:
        if _LINE_HAZARD.match(line):
            return f"a line would open a heading or code block: {line[:40]!r}"
    return None


def _blocks(text: str) -> list[tuple[str, str | None]]:
    """(one-line text, checkbox mark or None) per block; marker-only blocks are dropped."""
    raw: list[tuple[list[str], str | None]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            current = None
        elif (marker := _HEADING.match(line) or _BULLET.match(line)) is not None:
            box = marker.groupdict().get("box")
            current = [line[marker.end() :]]
            raw.append((current, box.lower() if box else None))
            if marker.re is _HEADING:  # a heading is a block of its own, demoted to text
                current = None
        elif current is None:
            current = [line]
            raw.append((current, None))
        else:
            current.append(line)
    blocks = [(" ".join(_CONTROL.sub(" ", " ".join(lines)).split()), box) for lines, box in raw]
    return [(text, box) for text, box in blocks if any(c.isalnum() for c in text)]


def _groups(block: tuple[str, str | None], rules: tuple[RoutingRule, ...]) -> list[_Group]:
    text, box = block
    sentences = _SENTENCE_BREAK.split(text)
    forced_id = CHECKBOX_RULES.get(box) if box is not None else None
    forced = next((rule for rule in rules if rule.id == forced_id), None)
    if forced is not None:
        return [_Group(forced, sentences)]
    groups: list[_Group] = []
    leading: list[str] = []
    for sentence in sentences:
        rule = _classify(sentence, rules)
        if rule is None:
            (groups[-1].sentences if groups else leading).append(sentence)
        elif groups and groups[-1].rule == rule:
            groups[-1].sentences.append(sentence)
        else:
            if leading and rule.render != "decision":
                groups.append(_Group(FALLBACK_RULE, leading))
            groups.append(_Group(rule, [sentence], leading if rule.render == "decision" else []))
            leading = []
    if leading:
        groups.append(_Group(FALLBACK_RULE, leading))
    return groups


def _classify(sentence: str, rules: tuple[RoutingRule, ...]) -> RoutingRule | None:
    for rule in rules:
        if _regex(rule.pattern).search(sentence) and not (
            rule.unless and _regex(rule.unless).search(sentence)
        ):
            return rule
    return None


def _items(group: _Group, clock: _Clock) -> list[ProcessedItem]:
    rule = group.rule
    texts = _pieces(" ".join(group.sentences))
    base = {"rule": rule.id, "timestamp": clock.iso, "date": clock.date}
    if rule.render == "decision":  # every part of a decision carries the decision's title
        pairs = list(zip_longest(_pieces(" ".join(group.context)), texts, fillvalue=""))
        base["title"] = _title(texts[0])
    else:
        pairs = [("", piece) for piece in texts]
    if rule.section:
        base["section"] = rule.section
    items: list[ProcessedItem] = []
    for number, (context, piece) in enumerate(pairs, 1):
        meta = dict(base)
        if len(pairs) > 1:
            meta["part"] = f"{number}/{len(pairs)}"
            if "title" in meta:
                meta["title"] += f" (part {meta['part']})"
        op = rule.operation_type
        if op == "replace_section" and number > 1:
            op = "append_to_section"  # the continuation must not replace the first part
        content = _render(rule.render, context, piece, clock, meta)
        items.append(ProcessedItem(rule.target_file, op, content, meta))
    return items


def _render(render: Render, context: str, text: str, clock: _Clock, meta: dict[str, str]) -> str:
    if render == "decision":
        return (
            f"## Decision: {meta['title']}\n- **Date**: {clock.date}\n- **Status**: Accepted\n"
            f"- **Context**: {context or 'Not stated.'}\n- **Decision**: {text or '(continued)'}"
        )
    if render == "done":
        meta["item"] = text.removesuffix(".") or text
        return f"- [x] {meta['item']} — {clock.date}"
    if render == "timestamped":
        return f"- {clock.stamp}: {text}"
    return f"- {text}" if render == "bullet" else text


def _title(text: str, limit: int = 80) -> str:
    first = _DECISION_LABEL.sub("", _SENTENCE_BREAK.split(text, maxsplit=1)[0]).rstrip(".")
    if len(first) > limit:
        cut = first.rfind(" ", 0, limit)
        first = first[: cut if cut > 0 else limit] + "…"
    return first or "Untitled"


def _pieces(text: str) -> list[str]:
    """``text`` cut at spaces into pieces of at most ``MAX_PIECE_CHARS``, each made safe to start
    a markdown line (a leading block marker is backslash-escaped)."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > MAX_PIECE_CHARS:
        cut = text.rfind(" ", start + 1, start + MAX_PIECE_CHARS + 1)
        end = cut if cut > start else start + MAX_PIECE_CHARS
        pieces.append(text[start:end])
        start = end + 1 if cut > start else end
    if start < len(text):
        pieces.append(text[start:])
    return ["\\" + p if p[0] in _ESCAPED_START else p for p in pieces]
