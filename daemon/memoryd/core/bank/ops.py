"""Changes to one memory-bank file as the bank cache keeps them until they reach the disk
(design §10, "In-memory cache").

The cache journals the operation a client asked for, not the text it produced. While the change
waits for the writer, the user may edit the same file in their editor; the operation is then
applied again on top of the user's version, so neither side's change is lost. An operation that
no longer applies there (the section it merges into is gone, a whole-file write would replace
text the client never saw) is refused and reported, never forced.

Pure: texts and operations in, texts out. ``None`` is a file that does not exist.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import date

import msgspec

from memoryd.core.bank.apply import apply_items
from memoryd.core.bank.model import DECISION_LOG, check_decision_log, complete_progress_item
from memoryd.core.bank.router import ProcessedItem
from memoryd.core.bank.update import merge_update
from memoryd.core.errors import Conflict, EntryNotFound, Forbidden, MemorydError, TooLarge

MAX_FILE_BYTES = 512 * 1024  # far above a healthy bank file (~4 KB); keeps one request bounded


class Write(msgspec.Struct, tag="write", frozen=True):
    """Replace the whole file. ``base`` is the hash of the text it replaced: a write is only
    ever applied over that text, since over anything else it would erase a change."""

    content: str
    base: str


class Update(msgspec.Struct, tag="update", frozen=True):
    """Merge markdown sections into the file (``memoryd.core.bank.update``)."""

    content: str


class Complete(msgspec.Struct, tag="complete", frozen=True):
    """Move an open progress item to Completed, dated ``day``."""

    item: str
    day: date


class Append(msgspec.Struct, tag="append", frozen=True):
    """Add a block at the end of the file; a file that does not exist starts with ``header``
    (the optimiser's archive)."""

    block: str
    header: str


class ApplyItems(msgspec.Struct, tag="items", frozen=True):
    """``bank_process`` items for this file (``memoryd.core.bank.apply``)."""

    items: list[ProcessedItem]
    day: date


Op = Write | Update | Complete | Append | ApplyItems


def text_hash(text: str | None) -> str:
    """A short content hash; the empty string stands for a file that does not exist."""
    if text is None:
        return ""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def op_size(op: Op) -> int:
    """How many bytes of text the operation carries (what makes an update "large")."""
    match op:
        case Write(content=content) | Update(content=content):
            return len(content.encode("utf-8"))
        case Complete(item=item):
            return len(item.encode("utf-8"))
        case Append(block=block):
            return len(block.encode("utf-8"))
        case ApplyItems(items=items):
            return sum(len(i.content.encode("utf-8")) for i in items)


def apply_op(name: str, text: str | None, op: Op) -> str:
    """The file ``name`` after ``op`` over ``text``. Raises a ``MemorydError`` saying why the
    operation cannot apply; every rule a direct write obeys is checked here, so the same
    operation is judged the same way when accepted and when re-applied."""
    match op:
        case Write(content=content, base=base):
            if text_hash(text) != base:
                raise Conflict(
                    f"{name} was changed on disk after this write was made; a whole-file write "
                    "would erase that change"
                )
            new = content
        case Update(content=content):
            new = merge_update(name, _existing(name, text), content)
        case Complete(item=item, day=day):
            new = complete_progress_item(_existing(name, text), item, day)
        case Append(block=block, header=header):
            new = (text if text is not None else header).rstrip("\n") + "\n\n" + block
        case ApplyItems(items=items, day=day):
            new = apply_items({name: text}, items, day)[name]
    check_change(name, text, new)
    return new


def check_size(name: str, text: str) -> None:
    """A bank file's text, or a change's content before any work on it (redaction, a merge),
    is at most ``MAX_FILE_BYTES``."""
    size = len(text.encode("utf-8"))
    if size > MAX_FILE_BYTES:
        raise TooLarge(f"{name}: {size} bytes is more than the {MAX_FILE_BYTES} allowed")


def check_change(name: str, old: str | None, new: str) -> None:
    """The rules every new text of a bank file obeys, however it was made: bounded size, and
    decisionLog.md append-only."""
    check_size(name, new)
    if name == DECISION_LOG:
        reason = check_decision_log(old, new)
        if reason is not None:
            raise Forbidden(reason)


def _existing(name: str, text: str | None) -> str:
    if text is None:
        raise EntryNotFound(f"{name} does not exist; create it with write or init")
    return text


class Failed(msgspec.Struct, frozen=True):
    seq: int
    reason: str


class Replayed(msgspec.Struct, frozen=True):
    text: str | None
    failed: list[Failed]


def replay(name: str, text: str | None, ops: Sequence[tuple[int, Op]]) -> Replayed:
    """Apply the numbered operations in order over ``text``; those that cannot apply are
    skipped and listed with the reason, the others apply on top of what came before."""
    failed = []
    for seq, op in ops:
        try:
            text = apply_op(name, text, op)
        except MemorydError as exc:
            failed.append(Failed(seq, str(exc)))
    return Replayed(text, failed)
