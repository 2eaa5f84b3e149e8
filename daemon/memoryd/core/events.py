"""Events: every change to project memory, as a past-tense fact.

An event is journaled to the audit log before it is applied to the store, and it carries absolute
values (never "+1"), so applying it again after a crash gives the same state (replay is
idempotent). The ``plan_*`` functions decide which event a request produces; they are pure.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from memctl.protocol import ArchivedReason, Category, Edge, Entry, Relation, Status
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.capture.promotion import PromotionDecision, QuarantineOutcome
from memoryd.core.share import Malformed, Tombstone


class EntryAdded(msgspec.Struct, tag="entry_added", frozen=True):
    entry: Entry


class EntryReinforced(msgspec.Struct, tag="entry_reinforced", frozen=True):
    """A duplicate was remembered: the existing entry gains importance and an access (and its
    last access time: remembering it again is a use, so its decay and TTL clocks restart)."""

    id: str
    importance: float
    access_count: int
    updated_at: float
    last_accessed_at: float | None = None  # None in events journaled before it was recorded


class EntryStatusChanged(msgspec.Struct, tag="entry_status_changed", frozen=True):
    id: str
    status: Status
    updated_at: float


class EntriesForgotten(msgspec.Struct, tag="entries_forgotten", frozen=True):
    ids: tuple[str, ...]
    # When: each id keeps a tombstone of this time (or its entry's last update, if later), so
    # that the forget travels through the shared file. None in events journaled before.
    forgotten_at: float | None = None


class EntriesImported(msgspec.Struct, tag="entries_imported", frozen=True):
    entries: tuple[Entry, ...]


class ConflictDetected(msgspec.Struct, tag="conflict_detected", frozen=True):
    """Two entries contradict each other; stored with a ``contradicts`` edge."""

    entry_a: str
    entry_b: str
    conflict_type: Literal["contradictory", "superseded", "ambiguous"]
    detected_at: float


class EntriesAccessed(msgspec.Struct, tag="entries_accessed", frozen=True):
    """Entries were injected: their new access counts (absolute) and last access time. Flushed
    in batches, so a crash can lose a few seconds of counts but never an acknowledged write."""

    accesses: tuple[tuple[str, int, float], ...]


class AliasSet(msgspec.Struct, tag="alias_set", frozen=True):
    """A term's project synonyms; an empty tuple switches a default term off."""

    term: str
    synonyms: tuple[str, ...]


class AliasRemoved(msgspec.Struct, tag="alias_removed", frozen=True):
    term: str


class SettingChanged(msgspec.Struct, tag="setting_changed", frozen=True):
    key: str
    value: int | str | bool | None


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A captured session: one transcript file, and where reading it has got to."""

    id: str
    agent: str
    transcript_path: str
    transcript_inode: int
    transcript_offset: int
    parent_session_id: str | None = None
    created_at: float


class FindingsRecorded(msgspec.Struct, tag="findings_recorded", frozen=True):
    """A checkpoint of session memory: new or changed findings and the transcript cursor."""

    session: SessionInfo
    findings: tuple[SessionFinding, ...]


class FindingsDropped(msgspec.Struct, tag="findings_dropped", frozen=True, kw_only=True):
    """The final pass over a session no longer finds these checkpoint findings: a checkpoint
    saw only a window of the session (an error before its fix, a guess before the diagnosis
    that replaced it, an edit count since grown), and the final pass replaces what the windows
    found. Deleted; a finding already promoted is kept (its entry names it)."""

    session_id: str
    ids: tuple[str, ...]


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    session_id: str
    agent: str
    title: str
    goal: str
    decisions: tuple[str, ...]
    outcome: str
    files: tuple[str, ...]
    turns: int
    tool_calls: int
    errors: int
    started_at: float | None
    ended_at: float | None
    tags: tuple[str, ...] = ("auto",)


class SessionFinalized(msgspec.Struct, tag="session_finalized", frozen=True):
    """A session ended: its episode, every promotion decision with its signals and points, and
    the candidate entries promoted (design §6, §7). Applied in one transaction."""

    session_id: str
    reason: str
    finalized_at: float
    episode: Episode | None  # None: a session with nothing to tell (a sub-agent's warm-up)
    decisions: tuple[PromotionDecision, ...]
    promoted: tuple[Entry, ...]
    promoted_from: tuple[tuple[str, str], ...] = ()  # (finding id, entry id)


class QuarantineReviewed(msgspec.Struct, tag="quarantine_reviewed", frozen=True):
    """Candidates past their 24 h quarantine: confirmed, or penalised (absolute values)."""

    outcomes: tuple[QuarantineOutcome, ...]


class BankFileSynced(msgspec.Struct, tag="bank_file_synced", frozen=True, kw_only=True):
    """The daemon brought a memory-bank file up to date with the changes clients made: which it
    wrote, and which it left out because they no longer applied (saved aside). Not memory:
    recorded so that every change the daemon makes to a user's files is in the audit log."""

    file: str  # memory-bank/<name>
    applied: tuple[str, ...]  # the kinds of the changes written, in order ("update", "write")
    left_out: tuple[str, ...] = ()  # where each change left out was saved
    written: bool  # False: nothing reached the file (every change was left out)
    sha: str  # the content hash of the file as written ("" when not written)
    synced_at: float


class BankOptimised(msgspec.Struct, tag="bank_optimised", frozen=True, kw_only=True):
    """The memory bank was above its budget and the optimiser (design §10) moved list items out
    of its volatile sections into ``memory-bank/archive/`` (the archive written first), by a
    client's ``bank optimise --apply`` or on the schedule. Not memory: recorded with the numbers
    that decided it, as every change the daemon makes to a user's files is."""

    trigger: Literal["request", "schedule"]
    budget: int  # the tokens above which the bank is optimised
    tokens_before: int
    tokens_after: int
    changed: tuple[str, ...]  # memory-bank/<name>, the files items left
    archived: tuple[str, ...]  # memory-bank/archive/<name>, where they went
    optimised_at: float


class EntryDecayed(msgspec.Struct, tag="entry_decayed", frozen=True, kw_only=True, gc=False):
    """An entry's decayed importance fell a step (design §8) since the last compaction.

    For the audit log only: decayed importance is derived from the stored ``importance`` (the
    baseline, left unchanged) and the clock, so applying this changes no stored value."""

    id: str
    importance: float  # the stored baseline
    decayed_from: float  # the decayed importance at the previous compaction (or the baseline)
    decayed: float
    days_since_access: float
    status_multiplier: float
    access_resistance: float
    decayed_at: float


class EntryExpired(msgspec.Struct, tag="entry_expired", frozen=True, kw_only=True, gc=False):
    """Unused longer than its category's TTL and accessed fewer times than the threshold:
    archived as ``stale`` (design §8), never deleted."""

    id: str
    category: Category
    ttl_days: int
    days_since_access: float
    access_count: int
    archived_at: float


class EntryEvicted(msgspec.Struct, tag="entry_evicted", frozen=True, kw_only=True, gc=False):
    """Active memory passed the soft limit and this entry ranked below the ones kept: archived
    as ``evicted`` (design §8), never deleted."""

    id: str
    decayed: float  # its decayed importance, the rank key
    cutoff: float | None  # the lowest decayed importance kept (None: none of the evictable kept)
    active_before: int  # active entries after expiry, before eviction
    soft_limit: int
    target: int
    archived_at: float


class ArchivePurged(msgspec.Struct, tag="archive_purged", frozen=True, kw_only=True, gc=False):
    """An archived entry older than ``archive_days`` was deleted for good (design §8)."""

    id: str
    archived_reason: ArchivedReason | None
    archived_at: float  # the entry's ``updated_at``: archiving is its last write
    days_archived: float
    archive_days: int
    purged_at: float


# What compaction decides (core/compaction.py), one event per decision. Scalars only, so never
# in a reference cycle: ``gc=False`` lets the cyclic GC skip a run's 400,000 of them (and the
# tuples holding them) instead of walking them at every full collection (~30 ms at 300,000).
CompactionEvent = EntryDecayed | EntryExpired | EntryEvicted | ArchivePurged


class CompactionApplied(msgspec.Struct, tag="compaction_applied", frozen=True, kw_only=True):
    """A batch of one compaction run's decisions, each with the numbers that decided it, applied
    in one transaction: one audit line per batch (one per decision would overflow the audit
    log's cap). The run's last batch is ``completed``: the store records ``ran_at`` as the time
    of the last compaction (what the next run reports decays since)."""

    ran_at: float
    decisions: tuple[CompactionEvent, ...]
    completed: bool = False


class EntrySuperseded(msgspec.Struct, tag="entry_superseded", frozen=True, kw_only=True):
    """``entry`` replaces ``old_id`` (design §9): the new entry is added, the old one archived as
    ``superseded`` with ``superseded_by``, and a ``replaces`` edge links them, atomically."""

    old_id: str
    entry: Entry
    superseded_at: float


class EntriesArchived(msgspec.Struct, tag="entries_archived", frozen=True, kw_only=True):
    """A user archived these entries (reason ``user``): kept and searchable, never injected."""

    ids: tuple[str, ...]
    archived_at: float


class EntryUnarchived(msgspec.Struct, tag="entry_unarchived", frozen=True, kw_only=True):
    id: str
    updated_at: float


class ConflictResolved(msgspec.Struct, tag="conflict_resolved", frozen=True, kw_only=True):
    """A user resolved a conflict: with ``kept``, the other entry is archived as superseded by
    it (with a ``replaces`` edge); without, both stay (it was not a conflict)."""

    entry_a: str
    entry_b: str
    kept: str | None
    resolved_at: float


class ReviewAccepted(msgspec.Struct, tag="review_accepted", frozen=True, kw_only=True):
    """A user accepted what ``memctl review`` showed (accept, or edit): candidates become
    confirmed, findings become confirmed entries (``added``, each with its finding in
    ``promoted_from``), an edited candidate is replaced by its new words (``replaced``: old id,
    new id; the old one archived as superseded). ``settled``: the fingerprints of texts the user
    reworded, so that capture never promotes them again in their old words."""

    confirmed: tuple[str, ...] = ()
    added: tuple[Entry, ...] = ()
    promoted_from: tuple[tuple[str, str], ...] = ()  # (finding id, entry id)
    replaced: tuple[tuple[str, str], ...] = ()  # (old entry id, new entry id)
    settled: tuple[str, ...] = ()
    accepted_at: float


class ReviewRejected(msgspec.Struct, tag="review_rejected", frozen=True, kw_only=True):
    """A user rejected candidates or findings, for ``reason``: the candidates are archived
    (reason ``user``), and each fingerprint is remembered, so the same text is never promoted
    again, never waits for review again and never reaches a payload."""

    archived: tuple[str, ...]
    findings: tuple[str, ...]  # the finding ids the user named (the record of what was shown)
    fingerprints: tuple[str, ...]
    reason: str
    rejected_at: float


class WorkingMemoryFocused(msgspec.Struct, tag="working_memory_focused", frozen=True, kw_only=True):
    """Entries joined a session's working memory (design §9), after those already in it."""

    session_id: str
    ids: tuple[str, ...]
    focused_at: float


ReleaseReason = Literal["user", "session_end", "idle"]


class WorkingMemoryReleased(
    msgspec.Struct, tag="working_memory_released", frozen=True, kw_only=True
):
    """These sessions' working memory was cleared: by a user or agent (``user``), because the
    agent ended the session (``session_end``), or because it went quiet (``idle``)."""

    session_ids: tuple[str, ...]
    reason: ReleaseReason
    released_at: float
    released: int = 0  # entries let go (what the reply said; 0 in events journaled before)


class EdgeAdded(msgspec.Struct, tag="edge_added", frozen=True, kw_only=True):
    """A typed link between two entries, made by hand (``memctl connect``, ``memory_connect``)."""

    source_id: str
    target_id: str
    relation: Relation
    created_at: float


class NoteAdded(msgspec.Struct, tag="note_added", frozen=True, kw_only=True):
    id: str
    content: str
    created_at: float


class NotesDone(msgspec.Struct, tag="notes_done", frozen=True, kw_only=True):
    """Notes marked done: they leave the pending list (their text stays in this log)."""

    ids: tuple[str, ...]
    done_at: float


class MemoryMerged(msgspec.Struct, tag="memory_merged", frozen=True, kw_only=True):
    """Shared memory merged into the store (design §3, ``core.share``): from the project's shared
    file after a ``git pull``, or from an import of lines with ids. Applied in one transaction:
    the tombstoned entries deleted, the local twins of a shared text archived, the newer
    versions written whole, the edges added. ``skipped`` names the lines that could not be
    read (kept here, so nothing of them is lost)."""

    origin: str  # the file merged, or "import"
    entries: tuple[Entry, ...] = ()
    deleted: tuple[Tombstone, ...] = ()
    twins: tuple[tuple[str, str], ...] = ()  # (archived id, kept id)
    edges: tuple[Edge, ...] = ()
    skipped: tuple[Malformed, ...] = ()
    merged_at: float


Event = (
    EntryAdded
    | EntryReinforced
    | EntryStatusChanged
    | EntriesForgotten
    | EntriesImported
    | ConflictDetected
    | EntriesAccessed
    | AliasSet
    | AliasRemoved
    | SettingChanged
    | FindingsRecorded
    | FindingsDropped
    | SessionFinalized
    | QuarantineReviewed
    | BankFileSynced
    | BankOptimised
    | EntryDecayed
    | EntryExpired
    | EntryEvicted
    | ArchivePurged
    | CompactionApplied
    | EntrySuperseded
    | EntriesArchived
    | EntryUnarchived
    | ConflictResolved
    | ReviewAccepted
    | ReviewRejected
    | WorkingMemoryFocused
    | WorkingMemoryReleased
    | EdgeAdded
    | NoteAdded
    | NotesDone
    | MemoryMerged
)

DUPLICATE_IMPORTANCE_BOOST = 0.1


def plan_remember(candidate: Entry, existing: Entry | None, now: float) -> Event:
    """Same fingerprint → reinforce the existing entry (design §5); otherwise add."""
    if existing is None:
        return EntryAdded(candidate)
    return EntryReinforced(
        id=existing.id,
        importance=min(1.0, round(existing.importance + DUPLICATE_IMPORTANCE_BOOST, 6)),
        access_count=existing.access_count + 1,
        updated_at=now,
        last_accessed_at=now,
    )


def plan_import(batch: list[Entry], known_fingerprints: set[str]) -> EntriesImported:
    """Keep the first of each fingerprint, skipping those already in memory. Unlike remember,
    an import never reinforces: importing the same file twice must not inflate importance."""
    seen = set(known_fingerprints)
    fresh = []
    for entry in batch:
        if entry.fingerprint not in seen:
            seen.add(entry.fingerprint)
            fresh.append(entry)
    return EntriesImported(tuple(fresh))


def plan_pin(entry: Entry, now: float) -> EntryStatusChanged | None:
    return None if entry.status == "pinned" else EntryStatusChanged(entry.id, "pinned", now)


def plan_unpin(entry: Entry, now: float) -> EntryStatusChanged | None:
    # An unpinned entry was chosen by a user, so it stays trusted: confirmed, not candidate.
    return None if entry.status != "pinned" else EntryStatusChanged(entry.id, "confirmed", now)
