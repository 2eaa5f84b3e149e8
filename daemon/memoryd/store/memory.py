"""The in-memory store: the same contract as SQLite (``memoryd.store.base.Store``), held in
dictionaries. Nothing survives the process except what ``backup`` writes.

It exists so that the contract is a contract (two backends pass one suite), and for tests and
tools that want project memory without a database file. Every event is checked in full before
anything changes, which is what makes ``apply`` atomic here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from memctl.protocol import (
    ArchivedReason,
    Category,
    Edge,
    Entry,
    EntryCounts,
    Note,
    Relation,
    Status,
)
from memoryd.atomic import write_atomic
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.events import (
    AliasRemoved,
    AliasSet,
    ArchivePurged,
    BankFileSynced,
    BankOptimised,
    CompactionApplied,
    CompactionEvent,
    ConflictDetected,
    ConflictResolved,
    EdgeAdded,
    EntriesAccessed,
    EntriesArchived,
    EntriesForgotten,
    EntriesImported,
    EntryAdded,
    EntryDecayed,
    EntryEvicted,
    EntryExpired,
    EntryReinforced,
    EntryStatusChanged,
    EntrySuperseded,
    EntryUnarchived,
    Episode,
    Event,
    FindingsDropped,
    FindingsRecorded,
    MemoryMerged,
    NoteAdded,
    NotesDone,
    QuarantineReviewed,
    ReviewAccepted,
    ReviewRejected,
    SessionFinalized,
    SessionInfo,
    SettingChanged,
    WorkingMemoryFocused,
    WorkingMemoryReleased,
)
from memoryd.core.share import SHARED_STATUSES, Tombstone
from memoryd.store.base import (
    FINDING_PREFIX,
    ID_PREFIX_LIMIT,
    RequestRecord,
    SessionRecord,
    StoreConflict,
    StoreCorrupt,
    one_per_fingerprint,
)

Setting = int | float | str | None


class _Finding(msgspec.Struct, kw_only=True):
    finding: SessionFinding
    promoted_entry_id: str | None = None


class _Conflict(msgspec.Struct, frozen=True):
    entry_a: str
    entry_b: str
    conflict_type: str
    detected_at: float
    resolved_at: float | None = None


class _Snapshot(msgspec.Struct, kw_only=True):
    """Everything a MemoryStore holds: what ``backup`` writes and ``open_backup`` reads."""

    applied: int
    last_change: int
    changes: list[tuple[int, str]]
    entries: list[Entry]
    forgotten: dict[str, float]
    edges: list[tuple[str, str, Relation, float]]
    tombstones: list[Tombstone] = []
    conflicts: list[_Conflict]
    aliases: dict[str, tuple[str, ...]]
    settings: dict[str, Setting]
    sessions: list[SessionRecord]
    findings: list[_Finding]
    episodes: list[Episode]
    # Absent from copies written before working memory and notes were kept.
    working_memory: list[tuple[str, str, float]] = []
    notes: list[Note] = []


def _ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only: SQLite's LIKE folds exactly these."""
    return text.translate(_ASCII_FOLD)


_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class MemoryStore:
    """Implements ``memoryd.store.base.Store``."""

    def __init__(self) -> None:
        self._applied = 0
        self._last_change = 0  # the change sequence counter; never reused, like AUTOINCREMENT
        self._changes: list[tuple[int, str]] = []
        self._entries: dict[str, Entry] = {}
        self._active_by_fp: dict[str, str] = {}  # fingerprint → id of the active entry
        self._forgotten: dict[str, float] = {}
        self._tombstones: dict[str, Tombstone] = {}
        self._edges: dict[tuple[str, str, Relation], float] = {}
        self._conflicts: dict[tuple[str, str], _Conflict] = {}
        self._aliases: dict[str, tuple[str, ...]] = {}
        self._settings: dict[str, Setting] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._findings: dict[str, _Finding] = {}
        self._finding_by_key: dict[tuple[str, str], str] = {}  # (session, fingerprint) → id
        self._episodes: dict[str, Episode] = {}
        # (session, entry) → focused_at; dicts keep insertion order, sorted where it is read.
        self._focus: dict[tuple[str, str], float] = {}
        self._notes: dict[str, Note] = {}
        self._requests: dict[str, RequestRecord] = {}
        self._request_at: dict[str, float] = {}

    @classmethod
    def open_backup(cls, path: Path) -> MemoryStore:
        """A store holding what ``backup`` wrote to ``path``. Raises ``StoreCorrupt`` when the
        file is not such a copy."""
        try:
            snap = msgspec.json.decode(path.read_bytes(), type=_Snapshot)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StoreCorrupt(f"{path}: {exc}") from exc
        store = cls()
        store._applied, store._last_change = snap.applied, snap.last_change
        store._changes = list(snap.changes)
        for entry in snap.entries:
            store._put(entry)
        store._forgotten = dict(snap.forgotten)
        store._tombstones = {t.id: t for t in snap.tombstones}
        store._edges = {(a, b, rel): t for a, b, rel, t in snap.edges}
        store._conflicts = {(c.entry_a, c.entry_b): c for c in snap.conflicts}
        store._aliases = dict(snap.aliases)
        store._settings = dict(snap.settings)
        store._sessions = {s.id: s for s in snap.sessions}
        for held in snap.findings:
            f = held.finding
            store._findings[f.id] = held
            store._finding_by_key[(f.session_id or "", f.fingerprint)] = f.id
        store._episodes = {e.id: e for e in snap.episodes}
        store._focus = {(session, i): t for session, i, t in snap.working_memory}
        store._notes = {n.id: n for n in snap.notes}
        return store

    # ------------------------------------------------------------------ writing

    def applied_audit_seq(self) -> int:
        return self._applied

    def apply(
        self, event: Event, audit_seq: int, request: tuple[str, str] | None = None
    ) -> list[str]:
        if audit_seq <= self._applied:
            return []
        ids = self._apply_event(event)  # checks before it changes anything, or raises
        for entry_id in ids:
            self._last_change += 1
            self._changes.append((self._last_change, entry_id))
        if request is not None:
            request_id, op = request
            known = self._requests.get(request_id)
            effects = [*known.effects] if known else []
            effects.append((str(event.__struct_config__.tag), ids))
            self._requests[request_id] = RequestRecord(op=op, effects=effects, reply=None)
            self._request_at[request_id] = time.time()
        self._applied = audit_seq
        return ids

    def request_record(self, request_id: str) -> RequestRecord | None:
        return self._requests.get(request_id)

    def record_reply(self, request_id: str, reply: bytes) -> bool:
        known = self._requests.get(request_id)
        if known is None or known.reply is not None:
            return False
        self._requests[request_id] = msgspec.structs.replace(known, reply=reply)
        return True

    def prune_requests(self, before: float, keep: int) -> int:
        newest = sorted(self._request_at, key=self._request_at.__getitem__, reverse=True)
        gone = [i for n, i in enumerate(newest) if n >= keep or self._request_at[i] < before]
        for i in gone:
            del self._requests[i], self._request_at[i]
        return len(gone)

    def _apply_event(self, event: Event) -> list[str]:
        match event:
            case EntryAdded(entry=e):
                self._check_new((e,))
                self._put(e)
                self._forgotten.pop(e.fingerprint, None)  # remembered by hand: lifts the forget
                return [e.id]
            case EntriesImported(entries=batch):
                self._check_new(batch)
                for e in batch:
                    self._put(e)
                return [e.id for e in batch]
            case EntryReinforced(id=i, importance=imp, access_count=n, updated_at=t) as again:
                held = self._entries.get(i)
                last = again.last_accessed_at
                if held is not None and last is None:
                    last = held.last_accessed_at
                self._change(i, importance=imp, access_count=n, updated_at=t, last_accessed_at=last)
                return [i]
            case EntryStatusChanged(id=i, status=s, updated_at=t):
                self._change(i, status=s, updated_at=t)
                return [i]
            case EntriesForgotten(ids=ids, forgotten_at=at):
                self._tombstone(ids, at, "forgotten")
                self._forget(ids)
                return list(ids)
            case MemoryMerged() as merged:
                return self._merge(merged)
            case ConflictDetected(entry_a=a, entry_b=b, conflict_type=kind, detected_at=t):
                self._conflicts.setdefault((a, b), _Conflict(a, b, kind, t))
                self._edges.setdefault((a, b, "contradicts"), t)
                return []
            case EntriesAccessed(accesses=accesses):
                for i, n, t in accesses:
                    self._change(i, access_count=n, last_accessed_at=t)
                return [i for i, _, _ in accesses]
            case AliasSet(term=term, synonyms=synonyms):
                self._aliases[term] = tuple(synonyms)
                return []
            case AliasRemoved(term=term):
                self._aliases.pop(term, None)
                return []
            case FindingsRecorded(session=info, findings=found):
                self._record_findings(info, found)
                return [FINDING_PREFIX + f.id for f in found]
            case FindingsDropped(session_id=session, ids=ids):
                return self._drop_findings(session, ids)
            case SessionFinalized() as done:
                return self._finalize(done)
            case QuarantineReviewed(outcomes=outcomes):
                for o in outcomes:
                    held = self._entries.get(o.entry_id)
                    if held is not None and held.status == "candidate":
                        self._change(
                            o.entry_id,
                            status=o.status,
                            importance=o.importance,
                            updated_at=o.updated_at,
                        )
                return [o.entry_id for o in outcomes]
            case SettingChanged(key=key, value=value):
                # As SQLite keeps it: a boolean comes back as 0 or 1.
                self._settings[key] = int(value) if isinstance(value, bool) else value
                return []
            case BankFileSynced() | BankOptimised():
                return []  # the audit log is its record; the memory itself does not change
            case EntryDecayed() | EntryExpired() | EntryEvicted() | ArchivePurged():
                return self._apply_decisions((event,))
            case CompactionApplied(ran_at=ran_at, decisions=decisions, completed=completed):
                if completed:
                    self._settings["last_compacted_at"] = ran_at
                return self._apply_decisions(decisions)
            case EntrySuperseded(old_id=old, entry=e, superseded_at=t):
                held = self._entries.get(old)
                if held is not None and not held.archived and held.fingerprint == e.fingerprint:
                    raise StoreConflict(f"entry {old} and its replacement are the same text")
                self._check_new((e,))
                self._archive(old, "superseded", t, superseded_by=e.id)
                self._put(e)
                self._edges.setdefault((e.id, old, "replaces"), t)
                return [old, e.id]
            case EntriesArchived(ids=ids, archived_at=t):
                for i in ids:
                    self._archive(i, "user", t)
                return list(ids)
            case ConflictResolved(entry_a=a, entry_b=b, kept=kept, resolved_at=t):
                if (pair := self._conflicts.get((a, b))) is not None:
                    self._conflicts[(a, b)] = msgspec.structs.replace(pair, resolved_at=t)
                if kept is None:
                    return []
                other = b if kept == a else a
                self._archive(other, "superseded", t, superseded_by=kept)
                self._edges.setdefault((kept, other, "replaces"), t)
                return [other]
            case WorkingMemoryFocused(session_id=session, ids=ids, focused_at=t):
                for i in ids:
                    self._focus.setdefault((session, i), t)
                return []
            case WorkingMemoryReleased(session_ids=sessions):
                gone = set(sessions)
                self._focus = {k: t for k, t in self._focus.items() if k[0] not in gone}
                return []
            case EdgeAdded(source_id=a, target_id=b, relation=rel, created_at=t):
                self._edges.setdefault((a, b, rel), t)
                return []
            case NoteAdded(id=i, content=text, created_at=t):
                self._notes.setdefault(i, Note(id=i, content=text, created_at=t))
                return []
            case NotesDone(ids=ids):
                for i in ids:
                    self._notes.pop(i, None)
                return []
            case EntryUnarchived(id=i, updated_at=t):
                held = self._entries.get(i)
                if held is not None and held.archived:
                    if held.fingerprint in self._active_by_fp:
                        raise StoreConflict(f"an active entry has fingerprint {held.fingerprint}")
                    self._put(
                        msgspec.structs.replace(
                            held, archived=False, archived_reason=None, updated_at=t
                        )
                    )
                return [i]
            case ReviewAccepted() as accepted:
                return self._accept(accepted)
            case ReviewRejected(archived=ids, fingerprints=fps, rejected_at=t):
                for i in ids:
                    self._archive(i, "user", t)
                self._forgotten.update(dict.fromkeys(fps, t))
                return [*ids, *self._finding_docs(fps)]

    def _accept(self, done: ReviewAccepted) -> list[str]:
        t = done.accepted_at
        leaving = {
            self._entries[old].fingerprint for old, _ in done.replaced if old in self._entries
        }
        if any(e.fingerprint in leaving for e in done.added):
            raise StoreConflict("an entry is replaced by the same text")
        self._check_new(done.added)
        for old, new in done.replaced:
            self._archive(old, "superseded", t, superseded_by=new)
            self._edges.setdefault((new, old, "replaces"), t)
        for i in done.confirmed:
            held = self._entries.get(i)
            if held is not None and not held.archived and held.status == "candidate":
                self._change(i, status="confirmed", updated_at=t)
        for e in done.added:
            self._put(e)
        for finding_id, entry_id in done.promoted_from:
            if (found := self._findings.get(finding_id)) is not None:
                found.promoted_entry_id = entry_id
        self._forgotten.update(dict.fromkeys(done.settled, t))
        return [
            *(old for old, _ in done.replaced),
            *done.confirmed,
            *(e.id for e in done.added),
            *self._finding_docs(done.settled),
            *(FINDING_PREFIX + f for f, _ in done.promoted_from),
        ]

    def _finding_docs(self, fingerprints: Sequence[str]) -> list[str]:
        wanted = set(fingerprints)
        return [
            FINDING_PREFIX + i
            for i in sorted(self._findings)
            if self._findings[i].finding.fingerprint in wanted
        ]

    def _archive(
        self, entry_id: str, reason: ArchivedReason, at: float, superseded_by: str | None = None
    ) -> None:
        held = self._entries.get(entry_id)
        if held is None or held.archived:
            return
        if self._active_by_fp.get(held.fingerprint) == entry_id:
            del self._active_by_fp[held.fingerprint]
        self._entries[entry_id] = msgspec.structs.replace(
            held,
            archived=True,
            archived_reason=reason,
            superseded_by=superseded_by or held.superseded_by,
            updated_at=at,
        )

    def _apply_decisions(self, decisions: Sequence[CompactionEvent]) -> list[str]:
        touched: list[str] = []
        for decision in decisions:
            match decision:
                case EntryExpired(id=i, archived_at=t):
                    self._archive(i, "stale", t)
                case EntryEvicted(id=i, archived_at=t):
                    self._archive(i, "evicted", t)
                case ArchivePurged(id=i, purged_at=t):
                    self._tombstone([i], t, "purged")
                    self._delete([i])
                case EntryDecayed():
                    continue  # derived importance: nothing stored changes
            touched.append(decision.id)
        return touched

    def _tombstone(
        self, ids: Sequence[str], at: float | None, reason: Literal["forgotten", "purged"]
    ) -> None:
        for entry_id in ids:
            held = self._entries.get(entry_id)
            if held is not None:
                when = max(at if at is not None else held.updated_at, held.updated_at)
                self._tombstones[entry_id] = Tombstone(
                    id=entry_id, fingerprint=held.fingerprint, updated_at=when, reason=reason
                )

    def _merge(self, merged: MemoryMerged) -> list[str]:
        gone = [t.id for t in merged.deleted]
        written = {e.id: e for e in merged.entries}
        # Checked first, as SQLite's unique index would: the end state holds one active entry
        # per text.
        twins = dict(merged.twins)
        final = {i: e for i, e in self._entries.items() if i not in gone and i not in written}
        final.update(written)
        texts = [e.fingerprint for i, e in final.items() if not e.archived and i not in twins]
        if len(texts) != len(set(texts)):
            raise StoreConflict("a merge would leave two active entries with one text")
        for t in merged.deleted:
            held = self._entries.get(t.id)
            if held is not None and t.reason == "forgotten":
                self._forgotten[held.fingerprint] = held.updated_at
            self._tombstones[t.id] = t
        self._delete(gone)
        for loser, kept in merged.twins:
            held = self._entries.get(loser)
            if held is not None and not held.archived:
                self._archive(loser, "superseded", held.updated_at, superseded_by=kept)
        for entry in written.values():
            previous = self._entries.get(entry.id)
            if previous is not None and self._active_by_fp.get(previous.fingerprint) == entry.id:
                del self._active_by_fp[previous.fingerprint]
            self._put(entry)
            self._tombstones.pop(entry.id, None)
        for e in merged.edges:
            if e.source in self._entries and e.target in self._entries:
                key = (e.source, e.target, e.relation)
                self._edges[key] = min(self._edges.get(key, e.created_at), e.created_at)
        return list(dict.fromkeys([*gone, *(loser for loser, _ in merged.twins), *written]))

    def _check_new(self, batch: Sequence[Entry]) -> None:
        """Refuse a batch that would give an id twice, or two active entries one fingerprint."""
        ids: set[str] = set()
        fingerprints: set[str] = set()
        for e in batch:
            if e.id in self._entries or e.id in ids:
                raise StoreConflict(f"entry {e.id} exists already")
            if not e.archived and (
                e.fingerprint in self._active_by_fp or e.fingerprint in fingerprints
            ):
                raise StoreConflict(f"an active entry has fingerprint {e.fingerprint} already")
            ids.add(e.id)
            if not e.archived:
                fingerprints.add(e.fingerprint)

    def _put(self, entry: Entry) -> None:
        self._entries[entry.id] = entry
        if not entry.archived:
            self._active_by_fp[entry.fingerprint] = entry.id

    def _change(self, entry_id: str, **fields: object) -> None:
        """Change fields of an entry; an id the store does not hold is left alone (as an SQL
        UPDATE matching no row)."""
        held = self._entries.get(entry_id)
        if held is not None:
            self._entries[entry_id] = msgspec.structs.replace(held, **fields)

    def _forget(self, ids: Sequence[str]) -> None:
        for entry_id in ids:
            held = self._entries.get(entry_id)
            if held is not None:
                self._forgotten[held.fingerprint] = held.updated_at
        self._delete(ids)

    def _delete(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        for entry_id in ids:
            held = self._entries.pop(entry_id, None)
            if held is None:
                continue
            if self._active_by_fp.get(held.fingerprint) == entry_id:
                del self._active_by_fp[held.fingerprint]
        self._edges = {k: t for k, t in self._edges.items() if not gone & {k[0], k[1]}}
        self._conflicts = {k: c for k, c in self._conflicts.items() if not gone & set(k)}
        self._focus = {k: t for k, t in self._focus.items() if k[1] not in gone}

    def _record_findings(self, info: SessionInfo, found: Sequence[SessionFinding]) -> None:
        # Checked first: a second finding of one fingerprint in a session is refused whole.
        # A finding already held is updated in place (its session and fingerprint stay).
        keys: dict[tuple[str, str], str] = {}
        for f in found:
            if f.id in self._findings:
                continue
            key = (info.id, f.fingerprint)
            owner = keys.get(key) or self._finding_by_key.get(key)
            if owner is not None and owner != f.id:
                raise StoreConflict(f"session {info.id} has a finding of {f.fingerprint}")
            keys[key] = f.id
        old = self._sessions.get(info.id)
        self._sessions[info.id] = SessionRecord(
            id=info.id,
            # A known session keeps its origin; only its transcript cursor moves.
            agent=old.agent if old else info.agent,
            parent_session_id=old.parent_session_id if old else info.parent_session_id,
            created_at=old.created_at if old else info.created_at,
            finalized_at=old.finalized_at if old else None,
            transcript_path=info.transcript_path,
            transcript_inode=info.transcript_inode,
            transcript_offset=info.transcript_offset,
        )
        for f in found:
            held = self._findings.get(f.id)
            if held is None:
                self._findings[f.id] = _Finding(
                    finding=msgspec.structs.replace(f, session_id=info.id)
                )
                self._finding_by_key[(info.id, f.fingerprint)] = f.id
            else:
                # A finding seen again keeps its identity and origin; what extraction refines
                # (text, weight, file paths, a resolved error) is replaced.
                held.finding = msgspec.structs.replace(
                    held.finding,
                    content=f.content,
                    importance=f.importance,
                    confidence=f.confidence,
                    file_paths=f.file_paths,
                    resolved_error=f.resolved_error,
                    accepted=f.accepted,
                )

    def _drop_findings(self, session: str, ids: Sequence[str]) -> list[str]:
        # Only the session's own, and never one promoted: its entry's source points at it.
        gone = sorted(
            i
            for i in set(ids)
            if (held := self._findings.get(i)) is not None
            and held.finding.session_id == session
            and held.promoted_entry_id is None
        )
        for i in gone:
            held = self._findings.pop(i)
            self._finding_by_key.pop((session, held.finding.fingerprint), None)
        return [FINDING_PREFIX + i for i in gone]

    def _finalize(self, done: SessionFinalized) -> list[str]:
        if done.episode is not None:
            self._episodes[done.episode.id] = done.episode
        taken: set[str] = set()
        for e in done.promoted:
            # A replayed event, or an entry remembered by hand meanwhile, is skipped quietly.
            if e.id in self._entries or (
                not e.archived and (e.fingerprint in self._active_by_fp or e.fingerprint in taken)
            ):
                continue
            self._put(e)
            taken.add(e.fingerprint)
        for finding_id, entry_id in done.promoted_from:
            if (held := self._findings.get(finding_id)) is not None:
                held.promoted_entry_id = entry_id
        if (session := self._sessions.get(done.session_id)) is not None:
            self._sessions[done.session_id] = msgspec.structs.replace(
                session, finalized_at=done.finalized_at
            )
        return [e.id for e in done.promoted] + [FINDING_PREFIX + f for f, _ in done.promoted_from]

    # ------------------------------------------------------------------ entries

    def _active(self) -> Iterator[Entry]:
        return (e for e in self._entries.values() if not e.archived)

    def get(self, entry_id: str) -> Entry | None:
        return self._entries.get(entry_id)

    def get_many(self, ids: Sequence[str]) -> dict[str, Entry]:
        return {i: self._entries[i] for i in ids if i in self._entries}

    def find_fingerprint(self, fingerprint: str) -> Entry | None:
        entry_id = self._active_by_fp.get(fingerprint)
        return None if entry_id is None else self._entries[entry_id]

    def find_id_prefix(self, prefix: str) -> list[Entry]:
        folded = _ascii_lower(prefix)
        found = sorted(i for i in self._entries if _ascii_lower(i).startswith(folded))
        return [self._entries[i] for i in found[:ID_PREFIX_LIMIT]]

    def find_keyword(self, keyword: str, limit: int) -> list[Entry]:
        folded = _ascii_lower(keyword)
        found = [e for e in self._active() if folded in _ascii_lower(e.content)]
        return _newest_first(found)[: max(limit, 0)]

    def list_entries(
        self,
        *,
        category: Category | None,
        status: Status | None,
        archived: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Entry], int]:
        found = [
            e
            for e in self._entries.values()
            if e.archived == archived
            and (category is None or e.category == category)
            and (status is None or e.status == status)
        ]
        start = max(offset, 0)
        return _newest_first(found)[start : start + max(limit, 0)], len(found)

    def entries_after(self, after_id: str, limit: int) -> list[Entry]:
        later = sorted(i for i in self._entries if i > after_id)[: max(limit, 0)]
        return [self._entries[i] for i in later]

    def iter_all(self) -> Iterator[Entry]:
        for entry_id in sorted(self._entries):
            yield self._entries[entry_id]

    def counts(self) -> EntryCounts:
        counts = EntryCounts()
        for e in self._entries.values():
            if e.archived:
                counts.archived += 1
            else:
                setattr(counts, e.status, getattr(counts, e.status) + 1)
        return counts

    def pinned(self, limit: int) -> list[Entry]:
        return _newest_first([e for e in self._active() if e.status == "pinned"])[: max(limit, 0)]

    def pinned_fingerprints(self) -> set[str]:
        return {e.fingerprint for e in self._active() if e.status == "pinned"}

    def candidates_created_before(self, cutoff: float) -> list[Entry]:
        found = [e for e in self._active() if e.status == "candidate" and e.created_at <= cutoff]
        return sorted(found, key=lambda e: (e.created_at, e.id))

    def is_forgotten(self, fingerprint: str) -> bool:
        return fingerprint in self._forgotten

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        wanted = set(ids)
        found = [
            c
            for c in self._conflicts.values()
            if c.resolved_at is None and (c.entry_a in wanted or c.entry_b in wanted)
        ]
        found.sort(key=lambda c: (c.detected_at, c.entry_a, c.entry_b))
        return [(c.entry_a, c.entry_b) for c in found]

    def open_conflicts(self) -> list[tuple[str, str, str, float]]:
        def active(entry_id: str) -> bool:
            held = self._entries.get(entry_id)
            return held is not None and not held.archived

        found = [
            c
            for c in self._conflicts.values()
            if c.resolved_at is None and active(c.entry_a) and active(c.entry_b)
        ]
        found.sort(key=lambda c: (c.detected_at, c.entry_a, c.entry_b))
        return [(c.entry_a, c.entry_b, c.conflict_type, c.detected_at) for c in found]

    # ------------------------------------------------------------------ graph, focus, notes

    def edges(self, ids: Sequence[str]) -> list[Edge]:
        wanted = set(ids)
        return [
            Edge(source=a, target=b, relation=rel, created_at=t)
            for (a, b, rel), t in sorted(self._edges.items())
            if a in wanted or b in wanted
        ]

    def working_memory(self, session_id: str) -> list[str]:
        held = [(t, i) for (session, i), t in self._focus.items() if session == session_id]
        return [i for _, i in sorted(held)]

    def working_memory_sessions(self) -> dict[str, float]:
        latest: dict[str, float] = {}
        for (session, _), t in self._focus.items():
            latest[session] = max(t, latest.get(session, t))
        return latest

    def notes(self) -> list[Note]:
        return sorted(self._notes.values(), key=lambda n: (n.created_at, n.id))

    # ------------------------------------------------------------------ change log

    def change_seq(self) -> int:
        return self._changes[-1][0] if self._changes else 0

    def changed_since(self, seq: int, limit: int | None = None) -> tuple[list[str], int]:
        newer = [(s, i) for s, i in self._changes if s > seq][:limit]
        if not newer:
            return [], max(seq, self.change_seq())
        return list(dict.fromkeys(i for _, i in newer)), newer[-1][0]

    def prune_changes(self, upto_seq: int) -> None:
        if self._changes:
            newest = self._changes[-1][0]
            self._changes = [(s, i) for s, i in self._changes if s > upto_seq or s == newest]

    # ------------------------------------------------------------------ project settings

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return dict(self._aliases)

    def setting(self, key: str) -> object:
        return self._settings.get(key)

    # ------------------------------------------------------------------ session memory

    def session(self, session_id: str) -> SessionRecord | None:
        return self._sessions.get(session_id)

    def session_count(self) -> int:
        return len(self._sessions)

    def last_capture_at(self) -> float | None:
        times = [t for s in self._sessions.values() for t in (s.created_at, s.finalized_at)]
        return max((t for t in times if t is not None), default=None)

    def finding_count(self) -> int:
        return len(self._findings)

    def findings(self, session_id: str) -> list[SessionFinding]:
        found = [h.finding for h in self._findings.values() if h.finding.session_id == session_id]
        return sorted(found, key=lambda f: (f.offset, f.id))

    def get_findings(self, ids: Sequence[str]) -> dict[str, SessionFinding]:
        return {i: self._findings[i].finding for i in ids if i in self._findings}

    def iter_findings(self) -> Iterator[SessionFinding]:
        for finding_id in sorted(self._findings):
            yield self._findings[finding_id].finding

    def promoted_findings(self, ids: Sequence[str]) -> set[str]:
        return {
            i
            for i in ids
            if (held := self._findings.get(i)) is not None and held.promoted_entry_id is not None
        }

    def settled_findings(self, ids: Sequence[str]) -> set[str]:
        return {
            i
            for i in ids
            if (held := self._findings.get(i)) is not None
            and (held.promoted_entry_id is not None or held.finding.fingerprint in self._forgotten)
        }

    def awaiting_review(self, limit: int) -> list[SessionFinding]:
        found = [
            h.finding
            for h in self._findings.values()
            if h.promoted_entry_id is None
            and h.finding.fingerprint not in self._forgotten
            and h.finding.fingerprint not in self._active_by_fp
        ]

        def started(f: SessionFinding) -> float:
            session = self._sessions.get(f.session_id or "")
            return session.created_at if session is not None else 0.0

        found.sort(key=lambda f: f.id)
        found.sort(key=lambda f: (started(f), f.offset), reverse=True)  # stable: ids stay in order
        return one_per_fingerprint(found)[: max(limit, 0)]

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        wanted = set(session_ids)
        found = [
            h.finding
            for h in self._findings.values()
            if h.promoted_entry_id is None
            and h.finding.session_id in wanted
            and h.finding.fingerprint not in self._forgotten
        ]
        found.sort(key=lambda f: (-f.importance, f.offset, f.id))
        return found[: max(limit, 0)]

    def spread(
        self, fingerprints: Sequence[str]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        wanted = set(fingerprints)
        sessions: dict[str, set[str]] = {}
        agents: dict[str, set[str]] = {}
        for held in self._findings.values():
            f = held.finding
            if f.fingerprint in wanted:
                sessions.setdefault(f.fingerprint, set()).add(f.session_id or "")
                agents.setdefault(f.fingerprint, set()).add(f.agent)
        return sessions, agents

    def shared_entries(self) -> list[Entry]:
        return sorted(
            (e for e in self._entries.values() if e.status in SHARED_STATUSES), key=lambda e: e.id
        )

    def tombstones(self, ids: Sequence[str] | None = None) -> dict[str, Tombstone]:
        if ids is None:
            return dict(sorted(self._tombstones.items()))
        return {i: self._tombstones[i] for i in ids if i in self._tombstones}

    def all_edges(self) -> list[Edge]:
        return [
            Edge(source=a, target=b, relation=r, created_at=t)
            for (a, b, r), t in sorted(self._edges.items())
        ]

    def episodes(self, limit: int, session_id: str | None = None) -> list[Episode]:
        found = [e for e in self._episodes.values() if not session_id or e.session_id == session_id]
        ended = sorted((e for e in found if e.ended_at is not None), key=lambda e: e.id)
        ended.sort(key=lambda e: e.ended_at or 0.0, reverse=True)  # stable: ids stay in order
        never = sorted((e for e in found if e.ended_at is None), key=lambda e: e.id)
        return [*ended, *never][: max(limit, 0)]

    # ------------------------------------------------------------------ housekeeping

    def integrity(self) -> str:
        return "ok"

    def backup(self, target: Path) -> int:
        snap = _Snapshot(
            applied=self._applied,
            last_change=self._last_change,
            changes=list(self._changes),
            entries=list(self._entries.values()),
            forgotten=dict(self._forgotten),
            tombstones=list(self._tombstones.values()),
            edges=[(a, b, rel, t) for (a, b, rel), t in self._edges.items()],
            conflicts=list(self._conflicts.values()),
            aliases=dict(self._aliases),
            settings=dict(self._settings),
            sessions=list(self._sessions.values()),
            findings=list(self._findings.values()),
            episodes=list(self._episodes.values()),
            working_memory=[(session, i, t) for (session, i), t in self._focus.items()],
            notes=list(self._notes.values()),
        )
        write_atomic(target, msgspec.json.encode(snap), 0o600)
        return self._applied

    def close(self) -> None:
        pass  # nothing is held but memory


def _newest_first(entries: list[Entry]) -> list[Entry]:
    """Most recently updated first, ties by id (the order SQLite's listing gives)."""
    by_id = sorted(entries, key=lambda e: e.id)
    return sorted(by_id, key=lambda e: e.updated_at, reverse=True)
