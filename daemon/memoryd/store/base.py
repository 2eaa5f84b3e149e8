"""The storage contract. Every implementation passes ``tests/test_store_contract.py``.

A store holds one project's memory. It is used by the owner thread only. Mutations arrive only as
events (``memoryd.core.events``) through ``apply``, each in one transaction together with the
audit sequence number that journaled it, so after a crash the daemon knows which journaled events
still need applying. Every mutation also advances the store's change sequence, from which the
search index catches up.

Orderings are part of the contract (both backends give the same answer to the same question), so
ties are broken by id wherever a caller could see the order.

Implementations: ``memoryd.store.sqlite.SqliteStore`` (the daemon's), ``memoryd.store.memory.
MemoryStore`` (in process, for tests and tools that need no durability).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import msgspec

from memctl.protocol import Category, Edge, Entry, EntryCounts, Note, Status
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.errors import Unavailable
from memoryd.core.events import Episode, Event
from memoryd.core.share import Tombstone

# A finding's id in the change log (and the search index): entries and findings share one log.
FINDING_PREFIX = "f:"
ID_PREFIX_LIMIT = 10  # entries an id prefix may name at most (enough to show an ambiguity)


def one_per_fingerprint(found: Sequence[SessionFinding]) -> list[SessionFinding]:
    """The first finding of each fingerprint, in the given order."""
    seen: set[str] = set()
    kept = []
    for f in found:
        if f.fingerprint not in seen:
            seen.add(f.fingerprint)
            kept.append(f)
    return kept


class StoreCorrupt(RuntimeError):
    """The database file is unreadable or fails its integrity check."""


class StoreUnavailable(Unavailable):
    """The disk under the database cannot take a read or write now (full, read-only, no
    permission, an I/O error, another process's lock): its cause in the message. Nothing of the
    change was applied, and the file is not damaged: it must not be moved aside."""


class StoreConflict(ValueError):
    """An event contradicts what the store holds (an entry id that exists already, a second
    active entry with one fingerprint, a second finding of one fingerprint in a session).
    Nothing of the event was applied."""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A captured session as stored: its transcript cursor and whether it was finalized."""

    id: str
    agent: str
    parent_session_id: str | None
    transcript_path: str
    transcript_inode: int
    transcript_offset: int
    created_at: float
    finalized_at: float | None


class RequestRecord(msgspec.Struct, frozen=True):
    """A client's change as the store remembers it: its op, what each of its events did (the
    event's tag and the ids it touched) and the encoded reply, once sent."""

    op: str
    effects: list[tuple[str, list[str]]]
    reply: bytes | None


class Store(Protocol):
    # ------------------------------------------------------------------ writing

    def applied_audit_seq(self) -> int:
        """The audit sequence number of the last event applied (0 for a new store)."""
        ...

    def apply(
        self, event: Event, audit_seq: int, request: tuple[str, str] | None = None
    ) -> list[str]:
        """Apply ``event`` and record ``audit_seq``, atomically; with ``request`` (a client's
        request id and op) also what it did, in the same transaction (``request_record``).
        Returns the ids it touched (findings as ``f:<id>``), each also appended to the change
        log.

        Applying an event whose ``audit_seq`` is not above ``applied_audit_seq()`` does nothing
        and returns []. Raises ``StoreConflict`` (nothing applied, ``applied_audit_seq``
        unchanged) when the event contradicts the store; a change to an id the store does not
        hold changes nothing but is still logged. Replayed events must give the same state."""
        ...

    def request_record(self, request_id: str) -> RequestRecord | None:
        """What the request ``request_id`` did (its effects) and the reply it got, if any."""
        ...

    def record_reply(self, request_id: str, reply: bytes) -> bool:
        """Keep the encoded reply of a request that changed something; False if it did not."""
        ...

    def prune_requests(self, before: float, keep: int) -> int:
        """Forget requests older than ``before`` and all but the newest ``keep``."""
        ...

    # ------------------------------------------------------------------ entries

    def get(self, entry_id: str) -> Entry | None:
        """The entry with this exact id, archived or not; None when there is none."""
        ...

    def get_many(self, ids: Sequence[str]) -> dict[str, Entry]:
        """id → entry for those of ``ids`` the store holds (missing ids are left out)."""
        ...

    def find_fingerprint(self, fingerprint: str) -> Entry | None:
        """The active (not archived) entry with this fingerprint, if any."""
        ...

    def find_id_prefix(self, prefix: str) -> list[Entry]:
        """At most ``ID_PREFIX_LIMIT`` entries whose id starts with ``prefix`` (ASCII
        case-insensitive), in id order."""
        ...

    def find_keyword(self, keyword: str, limit: int) -> list[Entry]:
        """Active entries whose content contains ``keyword`` literally (ASCII
        case-insensitive; ``%`` and ``_`` are plain characters), most recently updated first."""
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
        """A page of entries (archived ones, or active ones) newest update first then by id,
        and the total that match. None for category or status matches any."""
        ...

    def entries_after(self, after_id: str, limit: int) -> list[Entry]:
        """At most ``limit`` entries (archived included) with ids above ``after_id``, in id
        order: a keyset page, so reading every entry a page at a time costs one page a read."""
        ...

    def iter_all(self) -> Iterator[Entry]:
        """Every entry, archived included, in id order."""
        ...

    def counts(self) -> EntryCounts:
        """Active entries by status, and the archived ones."""
        ...

    def pinned(self, limit: int) -> list[Entry]:
        """Active pinned entries, most recently updated first."""
        ...

    def pinned_fingerprints(self) -> set[str]:
        """The fingerprints of the active pinned entries."""
        ...

    def candidates_created_before(self, cutoff: float) -> list[Entry]:
        """Active candidates created at or before ``cutoff``, oldest first."""
        ...

    def is_forgotten(self, fingerprint: str) -> bool:
        """Whether a user forgot an entry with this fingerprint (and did not remember it again)."""
        ...

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """Unresolved conflict pairs (entry_a, entry_b) that involve any of ``ids``, in the
        order they were detected."""
        ...

    def open_conflicts(self) -> list[tuple[str, str, str, float]]:
        """Unresolved conflicts between two active entries, as (entry_a, entry_b,
        conflict_type, detected_at), in the order they were detected."""
        ...

    # ------------------------------------------------------------------ graph, focus, notes

    def edges(self, ids: Sequence[str]) -> list[Edge]:
        """The edges with either end in ``ids``, each once, ordered by (source, target,
        relation). Edges go with their entries: deleting an entry deletes its edges."""
        ...

    def working_memory(self, session_id: str) -> list[str]:
        """The ids in a session's working memory, in the order they were focused (then by id).
        Deleting an entry takes it out of every session's working memory."""
        ...

    def working_memory_sessions(self) -> dict[str, float]:
        """Every session with working memory → when an entry last joined it."""
        ...

    def notes(self) -> list[Note]:
        """The pending notes (not marked done), oldest first, then by id."""
        ...

    # ------------------------------------------------------------------ change log

    def change_seq(self) -> int:
        """The store's current change sequence number (0 before the first change). It never
        goes backwards, pruning included."""
        ...

    def changed_since(self, seq: int, limit: int | None = None) -> tuple[list[str], int]:
        """Ids changed (added, updated or deleted) after ``seq``, each once in the order of
        its first change, and the sequence they bring the reader to (at least ``seq``); with
        ``limit``, only the first ``limit`` changes after ``seq`` (the rest come next time)."""
        ...

    def prune_changes(self, upto_seq: int) -> None:
        """Forget change records at or below ``upto_seq`` (the index has applied them). The
        newest record is kept, so ``change_seq`` never moves backwards."""
        ...

    # ------------------------------------------------------------------ project settings

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """The project's own alias table (an empty tuple switches a default term off)."""
        ...

    def setting(self, key: str) -> object:
        """A project setting's value, or None when unset. Booleans come back as 0 or 1 (as
        SQLite keeps them): compare with ``!= 0``, not ``is False``."""
        ...

    # ------------------------------------------------------------------ sharing (core.share)

    def shared_entries(self) -> list[Entry]:
        """The entries the shared file holds (confirmed and pinned, archived included), in id
        order."""
        ...

    def tombstones(self, ids: Sequence[str] | None = None) -> dict[str, Tombstone]:
        """id → tombstone of the entries deleted on purpose (of ``ids``, or all)."""
        ...

    def all_edges(self) -> list[Edge]:
        """Every edge, ordered by source, target, relation."""
        ...

    # ------------------------------------------------------------------ session memory (design §6)

    def session(self, session_id: str) -> SessionRecord | None:
        """The session's transcript cursor and state, or None."""
        ...

    def session_count(self) -> int: ...

    def last_capture_at(self) -> float | None:
        """When a session was last recorded, begun or ended (epoch seconds), or None."""
        ...

    def finding_count(self) -> int: ...

    def findings(self, session_id: str) -> list[SessionFinding]:
        """A session's findings in transcript order (then by id)."""
        ...

    def get_findings(self, ids: Sequence[str]) -> dict[str, SessionFinding]:
        """id → finding for those of ``ids`` the store holds."""
        ...

    def iter_findings(self) -> Iterator[SessionFinding]:
        """Every finding, in id order."""
        ...

    def promoted_findings(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` have been promoted to entries."""
        ...

    def settled_findings(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are settled: promoted to an entry, or of a text the user forgot,
        rejected or reworded. A settled finding drops out of searches."""
        ...

    def awaiting_review(self, limit: int) -> list[SessionFinding]:
        """At most ``limit`` findings waiting for a user's review: not promoted, not settled,
        their text not held by an active entry; one per fingerprint (the first in this order),
        newest session first, then latest in its transcript, then by id."""
        ...

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        """Findings of these sessions neither promoted yet nor settled (see
        ``settled_findings``), most important first, then in transcript order (the session
        tier)."""
        ...

    def spread(
        self, fingerprints: Sequence[str]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """For each fingerprint, the sessions and the agents whose findings carry it (a
        fingerprint no finding carries is left out)."""
        ...

    def episodes(self, limit: int, session_id: str | None = None) -> list[Episode]:
        """At most ``limit`` episodes (of one session, or all), latest end first; episodes
        that never ended last."""
        ...

    # ------------------------------------------------------------------ housekeeping

    def integrity(self) -> str:
        """'ok', or the first problems the storage reports."""
        ...

    def backup(self, target: Path) -> int:
        """Write a consistent copy to ``target`` atomically; returns the audit seq it holds.
        The copy opens with the same backend's ``open_backup`` / constructor."""
        ...

    def close(self) -> None:
        """Release the storage. The store is not used afterwards."""
        ...
