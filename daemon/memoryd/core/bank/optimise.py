"""The rule-based bank optimiser (design §10, Bank budget: the rule-based path).

Above WARN_TOKENS the bank is brought back into the 4–8 K band by moving list items out of the
volatile sections into archive texts, least valuable first: completed work, then Recent Changes
older than the retention window, then the oldest items of the discussion sections, then of the
implementation notes. Architecture (systemPatterns, techContext, the brief, productContext) and
the decision log are never touched. Nothing is deleted: every item moved is in ``archived``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date, timedelta

import msgspec

from memoryd.core.bank.model import ListItem, bank_tokens, find_section, list_items
from memoryd.core.bank.ops import Append, Op, Write, text_hash

WARN_TOKENS = 5000  # above this a bank is reported, and optimising takes it back under
FLOOR_TOKENS = 4000  # never optimise below this: the bank is meant to carry 4–8 K of context
MAX_TOKENS = 8000
RETENTION_DAYS = 14
KEEP_MARKERS = ("#keep", "[critical]")  # an item tagged so is never moved

_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


class Rule(msgspec.Struct, frozen=True):
    file: str
    heading: str
    keep_newest: int = 0  # the newest items that always stay
    max_age_days: int | None = None  # when set, only dated items older than this may go


# Cheapest loss first (design §10: architecture > implementation > discussion).
RULES: tuple[Rule, ...] = (
    Rule("progress.md", "Completed"),
    Rule("activeContext.md", "Recent Changes", max_age_days=RETENTION_DAYS),
    Rule("activeContext.md", "Recent Changes", keep_newest=5),
    Rule("activeContext.md", "Open Questions", keep_newest=5),
    Rule("activeContext.md", "Active Decisions", keep_newest=5),
    Rule("progress.md", "Known Issues", keep_newest=10),
    Rule("progress.md", "Technical Debt", keep_newest=5),
)


class OptimisePlan(msgspec.Struct, frozen=True):
    new_files: dict[str, str]  # only the files that change
    archived: dict[str, str]  # archive name ("archive/progress.md") → text to append
    removed_tokens: int
    tokens_before: int
    tokens_after: int


def archive_name(file: str) -> str:
    return f"archive/{file}"


def _item_date(text: str) -> date | None:
    for match in _ISO_DATE.finditer(text):
        try:
            return date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            continue
    return None


def _candidates(text: str, rule: Rule, today: date) -> list[ListItem]:
    """The items a rule may move, oldest first. Undated items count as oldest, in file order,
    because items are appended at the end of a section."""
    section = find_section(text, rule.heading)
    items = list_items(text, section) if section else []
    aged = [(_item_date(text[i.start : i.end]), n, i) for n, i in enumerate(items)]
    aged.sort(key=lambda entry: (entry[0] or date.min, entry[1]))
    aged = aged[: max(0, len(aged) - rule.keep_newest)]
    if rule.max_age_days is not None:
        cutoff = today - timedelta(days=rule.max_age_days)
        aged = [entry for entry in aged if entry[0] is not None and entry[0] < cutoff]
    return [i for _, _, i in aged if not _tagged_keep(text[i.start : i.end])]


def _tagged_keep(item: str) -> bool:
    return any(marker in item.casefold() for marker in KEEP_MARKERS)


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)  # as bank_tokens counts


def _choose(items: list[ListItem], chars: int) -> list[ListItem]:
    """Items to move, in the order given, until the bank is under WARN_TOKENS; an item whose
    removal would take the bank under FLOOR_TOKENS is passed over."""
    chosen = []
    for item in items:
        if _tokens(chars) <= WARN_TOKENS:
            break
        size = item.end - item.start
        if _tokens(chars - size) >= FLOOR_TOKENS:
            chosen.append(item)
            chars -= size
    return chosen


def _without(text: str, items: list[ListItem]) -> str:
    for item in sorted(items, key=lambda i: i.start, reverse=True):
        text = text[: item.start] + text[item.end :]
    return text


def _archive_block(text: str, heading: str, items: list[ListItem], today: date) -> str:
    moved = "".join(text[i.start : i.end] for i in sorted(items, key=lambda i: i.start))
    return f"## {heading} — archived {today.isoformat()}\n\n{moved.rstrip()}\n"


def optimise(files: Mapping[str, str | None], today: date) -> OptimisePlan:
    """Plan moving items to the archive until the bank is at or under WARN_TOKENS, or no rule
    has anything left to move. A bank already under WARN_TOKENS gets an empty plan."""
    current = {name: text for name, text in files.items() if text is not None}
    before = bank_tokens(current)
    chars = sum(len(text) for text in current.values())
    changed: dict[str, str] = {}
    blocks: dict[str, list[str]] = {}
    for rule in RULES if before > WARN_TOKENS else ():
        text = current.get(rule.file)
        if text is None:
            continue
        chosen = _choose(_candidates(text, rule, today), chars)
        if not chosen:
            continue
        blocks.setdefault(archive_name(rule.file), []).append(
            _archive_block(text, rule.heading, chosen, today)
        )
        current[rule.file] = changed[rule.file] = _without(text, chosen)
        chars -= sum(item.end - item.start for item in chosen)
    after = bank_tokens(current)
    return OptimisePlan(
        new_files=changed,
        archived={name: "\n".join(parts) for name, parts in blocks.items()},
        removed_tokens=before - after,
        tokens_before=before,
        tokens_after=after,
    )


def optimise_ops(files: Mapping[str, str | None], plan: OptimisePlan) -> list[tuple[str, Op]]:
    """``plan`` (made from ``files``) as bank operations, the archive first: a crash, or a file
    edited meanwhile, can leave an item in both places, never in neither."""
    ops: list[tuple[str, Op]] = [
        (name, Append(block, f"# Archive of {name.split('/', 1)[1]}\n"))
        for name, block in plan.archived.items()
    ]
    ops += [(name, Write(text, text_hash(files[name]))) for name, text in plan.new_files.items()]
    return ops
