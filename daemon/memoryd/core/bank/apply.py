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


# Dates and times a rendered item carries (a decision's Date, a done item's date, a timestamp):
# the same item filed again on another day or minute is still the same item.
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?")


def _normal(text: str) -> str:
    return " ".join(_STAMP.sub("", text).lower().split())


def already_filed(text: str, content: str) -> bool:
    """Whether ``content`` (dates aside) is in ``text`` already: running ``bank process
    --apply`` twice on the same input must not file the same lines twice."""
    wanted = _normal(content)
    return bool(wanted) and wanted in _normal(text)


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
