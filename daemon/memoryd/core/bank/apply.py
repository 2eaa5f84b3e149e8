"""Applying ``bank_process`` items to bank texts (the operations ``memoryd.core.bank.router``
documents). Pure: the current texts and the items in, the new texts out; the bank service reads
and writes the files."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import date

from memoryd.core.bank import model as bank
from memoryd.core.bank.router import ProcessedItem, validate_item
from memoryd.core.errors import Ambiguous, BadRequest, EntryNotFound


def apply_items(
    texts: Mapping[str, str | None], items: Sequence[ProcessedItem], today: date
) -> dict[str, str]:
    """The new text of every file the items change, in the order first touched. Raises
    ``BadRequest`` for an item the validator refuses and ``EntryNotFound`` for a target file
    that does not exist (the bank is initialised first), before anything is planned."""
    for item in items:
        reason = validate_item(item)
        if reason is not None:
            raise BadRequest(f"item for {item.target_file} cannot be applied: {reason}")
        if texts.get(item.target_file) is None:
            raise EntryNotFound(
                f"{item.target_file} does not exist; create the bank with `memctl bank init`"
            )
    changed: dict[str, str] = {}
    for item in items:
        current = changed.get(item.target_file, texts[item.target_file] or "")
        changed[item.target_file] = _apply(current, item, today)
    return changed


# The stamps the router renders into an item (a decision's Date line, a done item's trailing
# date, a timestamped line's prefix): the same item filed again on another day or minute is still
# the same item. Dates in the item's own words are kept: they tell items apart.
_DATE_LINE = re.compile(r"^- \*\*date\*\*: \S+$")
_DONE_DATE = re.compile(r" — \d{4}-\d{2}-\d{2}$")
_STAMP_PREFIX = re.compile(r"^- \d{4}-\d{2}-\d{2} \d{2}:\d{2} utc: ")


def _lines(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = " ".join(raw.lower().split())
        if line and not _DATE_LINE.match(line):
            lines.append(_STAMP_PREFIX.sub("- ", _DONE_DATE.sub("", line)))
    return lines


def already_filed(text: str, content: str) -> bool:
    """Whether every line of ``content`` is a whole line of ``text`` already (the router's
    stamps aside): running ``bank process --apply`` twice on the same input must not file the
    same lines twice, and a new item that is only part of an existing line is still new."""
    wanted = _lines(content)
    present = set(_lines(text))
    return bool(wanted) and all(line in present for line in wanted)


def _apply(text: str, item: ProcessedItem, today: date) -> str:
    section = item.metadata.get("section", "")
    if item.operation_type in ("append", "append_to_section") and already_filed(text, item.content):
        return text
    match item.operation_type:
        case "append":
            return bank.append_block(text, item.content)
        case "append_to_section":
            return bank.append_to_section(text, section, item.content)
        case "replace_section":
            return bank.replace_section(text, section, item.content)
        case "complete_item":
            wanted = item.metadata.get("item", "")
            if wanted:
                try:
                    return bank.complete_progress_item(text, wanted, today)
                except (EntryNotFound, Ambiguous):
                    pass  # no single open item to move: record it as done all the same
            if already_filed(text, item.content):
                return text  # done already (this same input, applied before)
            return bank.append_to_section(text, section, item.content)
