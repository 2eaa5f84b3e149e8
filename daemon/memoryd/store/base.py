"""The storage contract. Every implementation passes ``tests/test_store_contract.py``.

A store holds one project's memory. It is used by the owner thread only. Mutations arrive only as
events (``memoryd.core.events``) through ``apply``, each in one transaction together with the
audit sequence number that journaled it, so after a crash the daemon knows which journaled events
still need applying. Every mutation also advances the store's change sequence, from which the
search index catches up.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from memctl.protocol import Category, Entry, EntryCounts, Status
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.events import Episode, Event


class StoreCorrupt(RuntimeError):
    """The database file is unreadable or fails its integrity check."""


class Store(Protocol):
    def applied_audit_seq(self) -> int:
        """The audit sequence number of the last event applied (0 for a new store)."""
        ...

    def apply(self, event: Event, audit_seq: int) -> list[str]:
        """Apply ``event`` and record ``audit_seq``, atomically. Returns the ids it touched.
        Applying an event whose ``audit_seq`` is not above ``applied_audit_seq()`` does nothing."""
        ...

    def get(self, entry_id: str) -> Entry | None: ...

    def get_many(self, ids: Sequence[str]) -> dict[str, Entry]: ...

    def find_fingerprint(self, fingerprint: str) -> Entry | None:
        """The active (not archived) entry with this fingerprint, if any."""
        ...

    def find_id_prefix(self, prefix: str) -> list[Entry]: ...

    def find_keyword(self, keyword: str, limit: int) -> list[Entry]:
        """Active entries whose content contains ``keyword`` (case-insensitive)."""
        ...

    def list_entries(
        self,
        *,
        category: Category | None,
        status: Status | None,
        archived: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Entry], int]:
        """A page of entries newest first, and the total that match."""
        ...

    def iter_all(self) -> Iterator[Entry]:
        """Every entry, archived included, in id order."""
        ...

    def counts(self) -> EntryCounts: ...

    def change_seq(self) -> int:
        """The store's current change sequence number."""
        ...

    def changed_since(self, seq: int) -> tuple[list[str], int]:
        """Ids changed (added, updated or deleted) after ``seq``, and the current sequence."""
        ...

    def pinned(self, limit: int) -> list[Entry]:
        """Active pinned entries, most recently updated first."""
        ...

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """Unresolved conflict pairs (entry_a, entry_b) that involve any of ``ids``."""
        ...

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """The project's own alias table (an empty tuple switches a default term off)."""
        ...

    def setting(self, key: str) -> object:
        """A project setting's value, or None when unset."""
        ...

    # Session memory (SPEC §6): sessions, their findings, episodes.

    def session(self, session_id: str) -> dict[str, Any] | None:
        """The session's transcript cursor and state, or None."""
        ...

    def session_count(self) -> int: ...

    def finding_count(self) -> int: ...

    def findings(self, session_id: str) -> list[SessionFinding]:
        """A session's findings in transcript order."""
        ...

    def get_findings(self, ids: Sequence[str]) -> dict[str, SessionFinding]: ...

    def iter_findings(self) -> Iterator[SessionFinding]: ...

    def promoted_findings(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have been promoted to entries."""
        ...

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        """Findings of these sessions not promoted yet, most important first (session tier)."""
        ...

    def spread(
        self, fingerprints: Sequence[str]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """For each fingerprint, the sessions and the agents whose findings carry it."""
        ...

    def pinned_fingerprints(self) -> set[str]: ...

    def is_forgotten(self, fingerprint: str) -> bool:
        """Whether a user forgot an entry with this fingerprint (and did not remember it again)."""
        ...

    def candidates_created_before(self, cutoff: float) -> list[Entry]: ...

    def episodes(self, limit: int, session_id: str | None = None) -> list[Episode]:
        """Most recent first."""
        ...

    def integrity(self) -> str:
        """'ok', or the first problem the database reports."""
        ...

    def backup(self, target: Path) -> int:
        """Write a consistent copy to ``target`` atomically; returns the audit seq it holds."""
        ...

    def close(self) -> None: ...
