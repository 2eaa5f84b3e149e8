"""What the lifecycle import (design §9 ``memory_ingest_lifecycle``) takes from a memory bank: each
``## Decision:`` entry of decisionLog.md as a decision, each checked item under Completed in
progress.md as task progress. Pure: texts in, entry texts out.

A decision's text leaves out its status and date lines, so retiring a decision (Superseded)
does not make it a new one; the caller redacts, cuts to the entry size and deduplicates by
fingerprint."""

from __future__ import annotations

from typing import Literal

import msgspec

from memoryd.core.bank import model as bank


class LifecycleItem(msgspec.Struct, frozen=True):
    category: Literal["decision", "task_progress"]
    content: str
    file: str


def lifecycle_items(decision_log: str | None, progress: str | None) -> list[LifecycleItem]:
    found = []
    for decision in bank.parse_decisions(decision_log or ""):
        lines = [line for line in decision.body.splitlines() if not _is_dated_field(line)]
        body = " ".join(" ".join(lines).split())
        text = f"Decision: {decision.title}" + (f" — {body}" if body else "")
        found.append(LifecycleItem("decision", text, bank.DECISION_LOG))
    for item in bank.completed_items(progress or ""):
        text = f"Completed: {' '.join(item.split())}"
        found.append(LifecycleItem("task_progress", text, bank.PROGRESS))
    return found


def _is_dated_field(line: str) -> bool:
    # Status and date say when and whether, not what: a retired decision stays the same entry.
    words = line.strip().lstrip("-*+ ").replace("*", "").strip().casefold()
    return words.startswith(("status", "date"))
