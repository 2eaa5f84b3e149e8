"""The SQLite store: one WAL-mode database per project (design §3)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from memctl.protocol import Category, Edge, Entry, EntryCounts, Note, Source, Status
from memoryd.atomic import fsync_dir
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.entries import section_of
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
    SettingChanged,
    WorkingMemoryFocused,
    WorkingMemoryReleased,
)
from memoryd.core.share import SHARED_STATUSES, Tombstone
from memoryd.disk import write_failure_cause
from memoryd.store.base import (
    FINDING_PREFIX,
    ID_PREFIX_LIMIT,
    RequestRecord,
    SessionRecord,
    StoreConflict,
    StoreCorrupt,
    StoreUnavailable,
    one_per_fingerprint,
)
from memoryd.store.migrations import SCHEMA_VERSION, migrate

_COLUMNS = (
    "id, fingerprint, content, category, importance, confidence, status, archived, "
    "archived_reason, superseded_by, source, file_paths, tags, access_count, last_accessed_at, "
    "created_at, updated_at"
)
_INSERT = f"INSERT INTO entries ({_COLUMNS}) VALUES ({', '.join('?' * 17)})"
_UPSERT = (
    _INSERT
    + " ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in _COLUMNS.split(",")[1:])
)
_FINDING_COLUMNS = (
    "id, fingerprint, content, category, importance, confidence, rule_id, agent, session_id,"
    " transcript_offset, file_paths, tags, user_intent, resolved_error, accepted"
)
# A finding whose text the user forgot, rejected or reworded is settled: never shown again.
_UNSETTLED = "fingerprint NOT IN (SELECT fingerprint FROM forgotten)"
_json_list = msgspec.json.Decoder(tuple[str, ...])
_json_source = msgspec.json.Decoder(Source)
_effects_decoder = msgspec.json.Decoder(list[tuple[str, list[str]]])
_encode = msgspec.json.encode

# SQLite's error names (extended ones start with these) for a disk that cannot serve now: full,
# an I/O error, not openable, read-only, no permission, locked by another process, no memory.
# None of them says the file is damaged.
_DISK_ERRORS = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_PERM",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_NOMEM",
)


def _unavailable(path: Path, exc: sqlite3.Error) -> StoreUnavailable | None:
    """``exc`` as the disk's refusal, its cause named from the disk itself, or None when it is
    not one (the file itself is bad)."""
    if not (getattr(exc, "sqlite_errorname", None) or "").startswith(_DISK_ERRORS):
        return None
    return StoreUnavailable(
        f"the database {path} cannot be written: {write_failure_cause(path.parent, exc)}"
    )


# Values an ``IN (...)`` list takes per statement, and the lengths its lists are padded to.
# sqlite3 keeps every statement text it ran prepared (128 per connection), and a statement
# costs ~200 bytes per placeholder: lists of every length up to 500 (a compaction's batches,
# the index's pages) kept ~5 MB of prepared statements (bench/memory.py). Padded to a power
# of two (the last value repeated: an IN list is a set), a query has at most a dozen texts.
IN_CHUNK = 512
_EXACT_UP_TO = 8


def _in_list(values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The placeholders of an ``IN (...)`` list of ``values`` (at least one) and its
    parameters, padded to one of few lengths."""
    n = len(values)
    size = n if n <= _EXACT_UP_TO else 1 << (n - 1).bit_length()
    return ",".join("?" * size), [*values, *[values[-1]] * (size - n)]


def _in_chunks(values: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
    """``_in_list`` of each chunk of at most ``IN_CHUNK`` values."""
    for start in range(0, len(values), IN_CHUNK):
        yield _in_list(values[start : start + IN_CHUNK])


def _row_to_entry(row: tuple[Any, ...]) -> Entry:
    category: Category = row[3]
    return Entry(
        id=row[0],
        fingerprint=row[1],
        content=row[2],
        category=category,
        section=section_of(category),
        importance=row[4],
        confidence=row[5],
        status=row[6],
        archived=bool(row[7]),
        archived_reason=row[8],
        superseded_by=row[9],
        source=_json_source.decode(row[10]),
        file_paths=_json_list.decode(row[11]),
        tags=_json_list.decode(row[12]),
        access_count=row[13],
        last_accessed_at=row[14],
        created_at=row[15],
        updated_at=row[16],
    )


def _entry_to_row(e: Entry) -> tuple[Any, ...]:
    return (
        e.id,
        e.fingerprint,
        e.content,
        e.category,
        e.importance,
        e.confidence,
        e.status,
        int(e.archived),
        e.archived_reason,
        e.superseded_by,
        _encode(e.source).decode(),
        _encode(e.file_paths).decode(),
        _encode(e.tags).decode(),
        e.access_count,
        e.last_accessed_at,
        e.created_at,
        e.updated_at,
    )


class SqliteStore:
    """Implements ``memoryd.store.base.Store``."""

    def __init__(self, path: Path, *, synchronous: str = "FULL") -> None:
        self.path = path
        try:
            self._conn = sqlite3.connect(path, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before the client hears "ok", even across power loss.
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self._synchronous = synchronous
            self._conn.execute("PRAGMA foreign_keys=ON")
            # Wait at most a second for another process's lock: the owner thread must not
            # stall for sqlite's default of five.
            self._conn.execute("PRAGMA busy_timeout=1000")
            migrate(self._conn)
            self._applied = int(self._scalar("SELECT value FROM meta WHERE key='audit_seq'"))
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                self._conn.close()
            # A full or unwritable disk is not a corrupt file: say so, and leave it where it is.
            raise _unavailable(path, exc) or StoreCorrupt(f"{path}: {exc}") from exc

    @classmethod
    def read_only(cls, path: Path, *, any_thread: bool = False) -> SqliteStore:
        """The database at ``path`` for reading only (``memctl projects`` on a project that is
        not open, a reader thread's connection): no migration, no write, a short lock wait.
        ``any_thread``: usable from a thread other than the one that opened it, one thread at a
        time (``ReadConnections``). Raises ``StoreCorrupt`` when it cannot be read or its schema
        is not this memoryd's."""
        store = cls.__new__(cls)
        store.path = path
        try:
            store._conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=not any_thread,
            )
        except sqlite3.Error as exc:
            raise StoreCorrupt(f"{path}: {exc}") from exc
        try:
            store._conn.execute("PRAGMA busy_timeout=200")
            version = store._conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise StoreCorrupt(f"{path}: schema {version}, not {SCHEMA_VERSION}")
            store._applied = int(store._scalar("SELECT value FROM meta WHERE key='audit_seq'"))
        except sqlite3.Error as exc:
            store._conn.close()
            raise StoreCorrupt(f"{path}: {exc}") from exc
        except StoreCorrupt:
            store._conn.close()
            raise
        return store

    # ------------------------------------------------------------------ helpers

    def _rollback(self) -> None:
        """Undo the open transaction, if there still is one: on a full disk or an I/O error
        SQLite rolls back by itself, and a ROLLBACK then would raise "no transaction is active",
        hiding the cause."""
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _select(self, where: str, params: Sequence[Any] = (), tail: str = "") -> list[Entry]:
        sql = f"SELECT {_COLUMNS} FROM entries WHERE {where} {tail}"
        return [_row_to_entry(r) for r in self._conn.execute(sql, params)]

    # ------------------------------------------------------------------ contract

    def applied_audit_seq(self) -> int:
        return self._applied

    def apply(
        self, event: Event, audit_seq: int, request: tuple[str, str] | None = None
    ) -> list[str]:
        if audit_seq <= self._applied:
            return []
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            ids = self._apply_event(event)
            conn.executemany("INSERT INTO changes(entry_id) VALUES (?)", [(i,) for i in ids])
            if request is not None:
                self._record_effect(request, str(event.__struct_config__.tag), ids)
            conn.execute("UPDATE meta SET value=? WHERE key='audit_seq'", (audit_seq,))
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            self._rollback()
            raise StoreConflict(f"{type(event).__name__} conflicts with the store: {exc}") from exc
        except sqlite3.OperationalError as exc:
            self._rollback()
            refused = _unavailable(self.path, exc)
            if refused is None:
                raise
            raise refused from exc
        except BaseException:
            self._rollback()
            raise
        self._applied = audit_seq
        return ids

    def _record_effect(self, request: tuple[str, str], tag: str, ids: list[str]) -> None:
        request_id, op = request
        row = self._conn.execute(
            "SELECT effects FROM requests WHERE id=?", (request_id,)
        ).fetchone()
        effects = _effects_decoder.decode(row[0]) if row else []
        effects.append((tag, ids))
        self._conn.execute(
            "INSERT OR REPLACE INTO requests(id, op, effects, reply, at) VALUES (?, ?, ?, NULL, ?)",
            (request_id, op, msgspec.json.encode(effects).decode(), time.time()),
        )

    def request_record(self, request_id: str) -> RequestRecord | None:
        row = self._conn.execute(
            "SELECT op, effects, reply FROM requests WHERE id=?", (request_id,)
        ).fetchone()
        if row is None:
            return None
        return RequestRecord(op=row[0], effects=_effects_decoder.decode(row[1]), reply=row[2])

    def record_reply(self, request_id: str, reply: bytes) -> bool:
        # Without an fsync of its own: the change it answers is on disk already; a power loss
        # that takes the reply leaves the effects to answer from. A process's death does not.
        try:
            self._conn.execute("PRAGMA synchronous=NORMAL")
            try:
                cur = self._conn.execute(
                    "UPDATE requests SET reply=? WHERE id=? AND reply IS NULL", (reply, request_id)
                )
            finally:
                self._conn.execute(f"PRAGMA synchronous={self._synchronous}")
        except sqlite3.OperationalError as exc:
            refused = _unavailable(self.path, exc)
            if refused is None:
                raise
            raise refused from exc
        return cur.rowcount > 0

    def prune_requests(self, before: float, keep: int) -> int:
        cur = self._conn.execute(
            "DELETE FROM requests WHERE at < ? OR id IN"
            " (SELECT id FROM requests ORDER BY at DESC LIMIT -1 OFFSET ?)",
            (before, keep),
        )
        return cur.rowcount

    def _apply_event(self, event: Event) -> list[str]:
        conn = self._conn
        match event:
            case EntryAdded(entry=e):
                conn.execute(_INSERT, _entry_to_row(e))
                # Remembering it again by hand lifts the forget.
                conn.execute("DELETE FROM forgotten WHERE fingerprint=?", (e.fingerprint,))
                return [e.id]
            case EntriesImported(entries=batch):
                conn.executemany(_INSERT, [_entry_to_row(e) for e in batch])
                return [e.id for e in batch]
            case EntryReinforced(id=i, importance=imp, access_count=n, updated_at=t) as again:
                conn.execute(
                    "UPDATE entries SET importance=?, access_count=?, updated_at=?,"
                    " last_accessed_at=coalesce(?, last_accessed_at) WHERE id=?",
                    (imp, n, t, again.last_accessed_at, i),
                )
                return [i]
            case EntryStatusChanged(id=i, status=s, updated_at=t):
                conn.execute("UPDATE entries SET status=?, updated_at=? WHERE id=?", (s, t, i))
                return [i]
            case EntriesForgotten(ids=ids, forgotten_at=at):
                conn.executemany(
                    "INSERT OR REPLACE INTO forgotten SELECT fingerprint, updated_at FROM entries"
                    " WHERE id=?",
                    [(i,) for i in ids],
                )
                self._tombstone(ids, at, "forgotten")
                self._delete(ids)
                return list(ids)
            case MemoryMerged() as merged:
                return self._merge(merged)
            case EntryDecayed() | EntryExpired() | EntryEvicted() | ArchivePurged():
                return self._apply_decisions((event,))
            case CompactionApplied(ran_at=ran_at, decisions=decisions, completed=completed):
                if completed:
                    conn.execute(
                        "INSERT OR REPLACE INTO settings VALUES ('last_compacted_at', ?)", (ran_at,)
                    )
                return self._apply_decisions(decisions)
            case EntrySuperseded(old_id=old, entry=e, superseded_at=t):
                self._archive([old], "superseded", t, superseded_by=e.id)
                conn.execute(_INSERT, _entry_to_row(e))
                conn.execute(
                    "INSERT OR IGNORE INTO edges VALUES (?, ?, 'replaces', ?)", (e.id, old, t)
                )
                return [old, e.id]
            case EntriesArchived(ids=ids, archived_at=t):
                self._archive(ids, "user", t)
                return list(ids)
            case ConflictResolved(entry_a=a, entry_b=b, kept=kept, resolved_at=t):
                conn.execute(
                    "UPDATE conflicts SET resolved_at=? WHERE entry_a=? AND entry_b=?", (t, a, b)
                )
                if kept is None:
                    return []
                other = b if kept == a else a
                self._archive([other], "superseded", t, superseded_by=kept)
                conn.execute(
                    "INSERT OR IGNORE INTO edges VALUES (?, ?, 'replaces', ?)", (kept, other, t)
                )
                return [other]
            case EntryUnarchived(id=i, updated_at=t):
                conn.execute(
                    "UPDATE entries SET archived=0, archived_reason=NULL, updated_at=?"
                    " WHERE id=? AND archived=1",
                    (t, i),
                )
                return [i]
            case ConflictDetected(entry_a=a, entry_b=b, conflict_type=kind, detected_at=t):
                conn.execute(
                    "INSERT OR IGNORE INTO conflicts (entry_a, entry_b, conflict_type, detected_at)"
                    " VALUES (?, ?, ?, ?)",
                    (a, b, kind, t),
                )
                conn.execute(
                    "INSERT OR IGNORE INTO edges VALUES (?, ?, 'contradicts', ?)", (a, b, t)
                )
                return []
            case EntriesAccessed(accesses=accesses):
                conn.executemany(
                    "UPDATE entries SET access_count=?, last_accessed_at=? WHERE id=?",
                    [(n, t, i) for i, n, t in accesses],
                )
                return [i for i, _, _ in accesses]
            case AliasSet(term=term, synonyms=synonyms):
                conn.execute(
                    "INSERT OR REPLACE INTO aliases VALUES (?, ?)",
                    (term, _encode(synonyms).decode()),
                )
                return []
            case AliasRemoved(term=term):
                conn.execute("DELETE FROM aliases WHERE term=?", (term,))
                return []
            case FindingsRecorded(session=info, findings=found):
                self._record_findings(info, found)
                return [FINDING_PREFIX + f.id for f in found]
            case FindingsDropped(session_id=session, ids=ids):
                return self._drop_findings(session, ids)
            case SessionFinalized() as done:
                return self._finalize(done)
            case QuarantineReviewed(outcomes=outcomes):
                conn.executemany(
                    "UPDATE entries SET status=?, importance=?, updated_at=?"
                    " WHERE id=? AND status='candidate'",
                    [(o.status, o.importance, o.updated_at, o.entry_id) for o in outcomes],
                )
                return [o.entry_id for o in outcomes]
            case SettingChanged(key=key, value=value):
                conn.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", (key, value))
                return []
            case BankFileSynced() | BankOptimised():
                return []  # the audit log is its record; the memory itself does not change
            case ReviewAccepted() as accepted:
                return self._accept(accepted)
            case ReviewRejected(archived=ids, fingerprints=fps, rejected_at=t):
                self._archive(ids, "user", t)
                self._settle(fps, t)
                return [*ids, *self._finding_docs(fps)]
            case (
                WorkingMemoryFocused()
                | WorkingMemoryReleased()
                | EdgeAdded()
                | NoteAdded()
                | NotesDone()
            ):
                self._apply_seed001(event)
                return []  # none of them changes what the search index holds

    def _accept(self, done: ReviewAccepted) -> list[str]:
        conn, t = self._conn, done.accepted_at
        for old, new in done.replaced:
            self._archive([old], "superseded", t, superseded_by=new)
        conn.executemany(
            "UPDATE entries SET status='confirmed', updated_at=? WHERE id=? AND archived=0"
            " AND status='candidate'",
            [(t, i) for i in done.confirmed],
        )
        conn.executemany(_INSERT, [_entry_to_row(e) for e in done.added])
        conn.executemany(
            "INSERT OR IGNORE INTO edges VALUES (?, ?, 'replaces', ?)",
            [(new, old, t) for old, new in done.replaced],
        )
        conn.executemany(
            "UPDATE findings SET promoted_entry_id=? WHERE id=?",
            [(entry_id, finding_id) for finding_id, entry_id in done.promoted_from],
        )
        self._settle(done.settled, t)
        return [
            *(old for old, _ in done.replaced),
            *done.confirmed,
            *(e.id for e in done.added),
            *self._finding_docs(done.settled),
            *(FINDING_PREFIX + f for f, _ in done.promoted_from),
        ]

    def _settle(self, fingerprints: Sequence[str], at: float) -> None:
        """Texts the user decided on: never promoted, never waiting for review again."""
        self._conn.executemany(
            "INSERT OR REPLACE INTO forgotten VALUES (?, ?)", [(fp, at) for fp in fingerprints]
        )

    def _finding_docs(self, fingerprints: Sequence[str]) -> list[str]:
        """The change-log ids of every finding with one of these fingerprints."""
        found: list[str] = []
        for marks, chunk in _in_chunks(fingerprints):
            rows = self._conn.execute(
                f"SELECT id FROM findings WHERE fingerprint IN ({marks}) ORDER BY id", chunk
            )
            found += [FINDING_PREFIX + r[0] for r in rows]
        return found

    def _apply_seed001(
        self,
        event: WorkingMemoryFocused | WorkingMemoryReleased | EdgeAdded | NoteAdded | NotesDone,
    ) -> None:
        """Working memory, edges and notes (design §9)."""
        conn = self._conn
        match event:
            case WorkingMemoryFocused(session_id=session, ids=ids, focused_at=t):
                conn.executemany(
                    "INSERT OR IGNORE INTO working_memory VALUES (?, ?, ?)",
                    [(session, i, t) for i in ids],
                )
            case WorkingMemoryReleased(session_ids=sessions):
                conn.executemany(
                    "DELETE FROM working_memory WHERE session_id=?", [(s,) for s in sessions]
                )
            case EdgeAdded(source_id=a, target_id=b, relation=rel, created_at=t):
                conn.execute("INSERT OR IGNORE INTO edges VALUES (?, ?, ?, ?)", (a, b, rel, t))
            case NoteAdded(id=i, content=text, created_at=t):
                conn.execute("INSERT OR IGNORE INTO notes VALUES (?, ?, ?)", (i, text, t))
            case NotesDone(ids=ids):
                conn.executemany("DELETE FROM notes WHERE id=?", [(i,) for i in ids])

    def _delete(self, ids: Sequence[str]) -> None:
        """Delete entries with their edges and conflicts."""
        conn, pairs = self._conn, [(i, i) for i in ids]
        conn.executemany("DELETE FROM entries WHERE id=?", [(i,) for i in ids])
        conn.executemany("DELETE FROM edges WHERE source_id=? OR target_id=?", pairs)
        conn.executemany("DELETE FROM conflicts WHERE entry_a=? OR entry_b=?", pairs)
        conn.executemany("DELETE FROM working_memory WHERE entry_id=?", [(i,) for i in ids])

    def _tombstone(self, ids: Sequence[str], at: float | None, reason: str) -> None:
        """Record that these entries were deleted on purpose, at ``at`` or their last update
        if later (a tombstone must beat the version it deletes)."""
        self._conn.executemany(
            "INSERT OR REPLACE INTO tombstones SELECT id, fingerprint,"
            " max(coalesce(?, updated_at), updated_at), ? FROM entries WHERE id=?",
            [(at, reason, i) for i in ids],
        )

    def _merge(self, merged: MemoryMerged) -> list[str]:
        """Apply a merge (``core.share.plan_merge``): deletions and twins first, then the
        versions written whole, so that no two active entries ever hold one text."""
        conn = self._conn
        gone = [t.id for t in merged.deleted]
        conn.executemany(
            "INSERT OR REPLACE INTO forgotten SELECT fingerprint, updated_at FROM entries"
            " WHERE id=?",
            [(t.id,) for t in merged.deleted if t.reason == "forgotten"],
        )
        conn.executemany(
            "INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?, ?)",
            [(t.id, t.fingerprint, t.updated_at, t.reason) for t in merged.deleted],
        )
        self._delete(gone)
        for loser, kept in merged.twins:
            conn.execute(
                "UPDATE entries SET archived=1, archived_reason='superseded', superseded_by=?"
                " WHERE id=? AND archived=0",
                (kept, loser),
            )
        written = [e.id for e in merged.entries]
        # Out of the active-text index while the new versions go in: one may take the text
        # another one leaves.
        conn.executemany("UPDATE entries SET archived=1 WHERE id=?", [(i,) for i in written])
        conn.executemany(_UPSERT, [_entry_to_row(e) for e in merged.entries])
        conn.executemany("DELETE FROM tombstones WHERE id=?", [(i,) for i in written])
        conn.executemany(
            "INSERT INTO edges SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM entries WHERE id=?)"
            " AND EXISTS (SELECT 1 FROM entries WHERE id=?) ON CONFLICT DO UPDATE"
            " SET created_at=min(created_at, excluded.created_at)",
            [
                (e.source, e.target, e.relation, e.created_at, e.source, e.target)
                for e in merged.edges
            ],
        )
        return list(dict.fromkeys([*gone, *(loser for loser, _ in merged.twins), *written]))

    def _archive(
        self, ids: Sequence[str], reason: str, at: float, superseded_by: str | None = None
    ) -> None:
        # Only active entries: replaying an archive must not move a later archive's time.
        self._conn.executemany(
            "UPDATE entries SET archived=1, archived_reason=?, superseded_by=coalesce(?,"
            " superseded_by), updated_at=? WHERE id=? AND archived=0",
            [(reason, superseded_by, at, i) for i in ids],
        )

    def _apply_decisions(self, decisions: Sequence[CompactionEvent]) -> list[str]:
        touched: list[str] = []
        for decision in decisions:
            match decision:
                case EntryExpired(id=i, archived_at=t):
                    self._archive([i], "stale", t)
                case EntryEvicted(id=i, archived_at=t):
                    self._archive([i], "evicted", t)
                case ArchivePurged(id=i, purged_at=t):
                    self._tombstone([i], t, "purged")
                    self._delete([i])
                case EntryDecayed():
                    continue  # derived importance: nothing stored changes
            touched.append(decision.id)
        return touched

    def _record_findings(self, info: Any, found: tuple[SessionFinding, ...]) -> None:
        conn = self._conn
        conn.execute(
            "INSERT INTO sessions (id, agent, parent_session_id, transcript_path, transcript_inode,"
            " transcript_offset, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE"
            " SET transcript_path=excluded.transcript_path,"
            " transcript_inode=excluded.transcript_inode,"
            " transcript_offset=excluded.transcript_offset",
            (
                info.id,
                info.agent,
                info.parent_session_id,
                info.transcript_path,
                info.transcript_inode,
                info.transcript_offset,
                info.created_at,
            ),
        )
        conn.executemany(
            f"INSERT INTO findings ({_FINDING_COLUMNS}) VALUES ({', '.join('?' * 15)})"
            " ON CONFLICT(id) DO UPDATE SET content=excluded.content,"
            " importance=excluded.importance, confidence=excluded.confidence,"
            " file_paths=excluded.file_paths, resolved_error=excluded.resolved_error,"
            " accepted=excluded.accepted",
            [
                (
                    f.id,
                    f.fingerprint,
                    f.content,
                    f.category,
                    f.importance,
                    f.confidence,
                    f.rule_id,
                    f.agent,
                    info.id,
                    f.offset,
                    _encode(f.file_paths).decode(),
                    _encode(f.tags).decode(),
                    int(f.user_intent),
                    int(f.resolved_error),
                    int(f.accepted),
                )
                for f in found
            ],
        )

    def _drop_findings(self, session: str, ids: Sequence[str]) -> list[str]:
        # Only the session's own, and never one promoted: its entry's source points at it.
        gone: list[str] = []
        for marks, chunk in _in_chunks(ids):
            gone += (
                i
                for (i,) in self._conn.execute(
                    "SELECT id FROM findings WHERE session_id=? AND promoted_entry_id IS NULL"
                    f" AND id IN ({marks})",
                    (session, *chunk),
                )
            )
        self._conn.executemany("DELETE FROM findings WHERE id=?", [(i,) for i in gone])
        return [FINDING_PREFIX + i for i in sorted(set(gone))]

    def _put_episode(self, ep: Episode) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ep.id,
                ep.session_id,
                ep.agent,
                ep.title,
                ep.goal,
                _encode(ep.decisions).decode(),
                ep.outcome,
                _encode(ep.files).decode(),
                ep.turns,
                ep.tool_calls,
                ep.errors,
                ep.started_at,
                ep.ended_at,
                _encode(ep.tags).decode(),
            ),
        )

    def _finalize(self, done: SessionFinalized) -> list[str]:
        conn = self._conn
        if done.episode is not None:
            self._put_episode(done.episode)
        # OR IGNORE: a replayed event, or an entry remembered by hand meanwhile, must not fail.
        conn.executemany(
            _INSERT.replace("INSERT", "INSERT OR IGNORE", 1),
            [_entry_to_row(e) for e in done.promoted],
        )
        conn.executemany(
            "UPDATE findings SET promoted_entry_id=? WHERE id=?",
            [(entry_id, finding_id) for finding_id, entry_id in done.promoted_from],
        )
        conn.execute(
            "UPDATE sessions SET finalized_at=? WHERE id=?", (done.finalized_at, done.session_id)
        )
        return [e.id for e in done.promoted] + [FINDING_PREFIX + f for f, _ in done.promoted_from]

    # ------------------------------------------------------------------ session memory

    def session(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(
            "SELECT id, agent, parent_session_id, transcript_path, transcript_inode,"
            " transcript_offset, created_at, finalized_at FROM sessions WHERE id=?",
            (session_id,),
        ).fetchone()
        if row is None:
            return None
        return SessionRecord(
            id=row[0],
            agent=row[1],
            parent_session_id=row[2],
            transcript_path=row[3] or "",
            transcript_inode=row[4] or 0,
            transcript_offset=row[5],
            created_at=row[6],
            finalized_at=row[7],
        )

    def finding_count(self) -> int:
        return int(self._scalar("SELECT count(*) FROM findings"))

    def session_count(self) -> int:
        return int(self._scalar("SELECT count(*) FROM sessions"))

    def last_capture_at(self) -> float | None:
        newest = self._scalar(
            "SELECT max(max(created_at, coalesce(finalized_at, created_at))) FROM sessions"
        )
        return None if newest is None else float(newest)

    def _findings(
        self, where: str, params: Sequence[Any] = (), tail: str = ""
    ) -> list[SessionFinding]:
        rows = self._conn.execute(
            f"SELECT {_FINDING_COLUMNS} FROM findings WHERE {where} {tail}", params
        )
        return [
            SessionFinding(
                id=r[0],
                fingerprint=r[1],
                content=r[2],
                category=r[3],
                importance=r[4],
                confidence=r[5],
                rule_id=r[6] or "",
                agent=r[7],
                session_id=r[8],
                offset=r[9] or 0,
                file_paths=_json_list.decode(r[10]),
                tags=_json_list.decode(r[11]),
                user_intent=bool(r[12]),
                resolved_error=bool(r[13]),
                accepted=bool(r[14]),
            )
            for r in rows
        ]

    def findings(self, session_id: str) -> list[SessionFinding]:
        return self._findings("session_id=?", (session_id,), "ORDER BY transcript_offset, id")

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        if not session_ids:
            return []
        marks, sessions = _in_list(session_ids)
        return self._findings(
            f"session_id IN ({marks}) AND promoted_entry_id IS NULL AND {_UNSETTLED}",
            sessions,
            f"ORDER BY importance DESC, transcript_offset, id LIMIT {int(limit)}",
        )

    def get_findings(self, ids: Sequence[str]) -> dict[str, SessionFinding]:
        found: dict[str, SessionFinding] = {}
        for marks, chunk in _in_chunks(ids):
            found.update((f.id, f) for f in self._findings(f"id IN ({marks})", chunk))
        return found

    def awaiting_review(self, limit: int) -> list[SessionFinding]:
        found = self._findings(
            f"promoted_entry_id IS NULL AND {_UNSETTLED} AND fingerprint NOT IN"
            " (SELECT fingerprint FROM entries WHERE archived=0)",
            (),
            "ORDER BY (SELECT created_at FROM sessions WHERE sessions.id=findings.session_id)"
            " DESC, transcript_offset DESC, id",
        )
        return one_per_fingerprint(found)[: max(limit, 0)]

    def settled_findings(self, ids: Sequence[str]) -> set[str]:
        settled: set[str] = set()
        for marks, chunk in _in_chunks(ids):
            rows = self._conn.execute(
                f"SELECT id FROM findings WHERE id IN ({marks})"
                f" AND (promoted_entry_id IS NOT NULL OR NOT {_UNSETTLED})",
                chunk,
            )
            settled.update(r[0] for r in rows)
        return settled

    def promoted_findings(self, ids: Sequence[str]) -> set[str]:
        promoted: set[str] = set()
        for marks, chunk in _in_chunks(ids):
            rows = self._conn.execute(
                f"SELECT id FROM findings WHERE id IN ({marks}) AND promoted_entry_id IS NOT NULL",
                chunk,
            )
            promoted.update(r[0] for r in rows)
        return promoted

    def spread(
        self, fingerprints: Sequence[str]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        sessions: dict[str, set[str]] = {}
        agents: dict[str, set[str]] = {}
        for marks, chunk in _in_chunks(fingerprints):
            rows = self._conn.execute(
                "SELECT fingerprint, session_id, agent FROM findings"
                f" WHERE fingerprint IN ({marks})",
                chunk,
            )
            for fp, session_id, agent in rows:
                sessions.setdefault(fp, set()).add(session_id)
                agents.setdefault(fp, set()).add(agent)
        return sessions, agents

    def is_forgotten(self, fingerprint: str) -> bool:
        return (
            self._scalar("SELECT 1 FROM forgotten WHERE fingerprint=?", (fingerprint,)) is not None
        )

    def pinned_fingerprints(self) -> set[str]:
        rows = self._conn.execute(
            "SELECT fingerprint FROM entries WHERE status='pinned' AND archived=0"
        )
        return {r[0] for r in rows}

    def candidates_created_before(self, cutoff: float) -> list[Entry]:
        return self._select(
            "status='candidate' AND archived=0 AND created_at <= ?",
            (cutoff,),
            "ORDER BY created_at, id",
        )

    def episodes(self, limit: int, session_id: str | None = None) -> list[Episode]:
        where, params = ("session_id=?", (session_id,)) if session_id else ("1=1", ())
        rows = self._conn.execute(
            f"SELECT * FROM episodes WHERE {where} ORDER BY ended_at IS NULL, ended_at DESC, id"
            f" LIMIT {int(limit)}",
            params,
        )
        return [
            Episode(
                id=r[0],
                session_id=r[1],
                agent=r[2],
                title=r[3],
                goal=r[4] or "",
                decisions=_json_list.decode(r[5]),
                outcome=r[6] or "",
                files=_json_list.decode(r[7]),
                turns=r[8],
                tool_calls=r[9],
                errors=r[10],
                started_at=r[11],
                ended_at=r[12],
                tags=_json_list.decode(r[13]),
            )
            for r in rows
        ]

    def get(self, entry_id: str) -> Entry | None:
        found = self._select("id=?", (entry_id,))
        return found[0] if found else None

    def get_many(self, ids: Sequence[str]) -> dict[str, Entry]:
        result: dict[str, Entry] = {}
        for marks, chunk in _in_chunks(ids):
            result.update((e.id, e) for e in self._select(f"id IN ({marks})", chunk))
        return result

    def find_fingerprint(self, fingerprint: str) -> Entry | None:
        found = self._select("fingerprint=? AND archived=0", (fingerprint,))
        return found[0] if found else None

    def find_id_prefix(self, prefix: str) -> list[Entry]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return self._select(
            "id LIKE ? ESCAPE '\\'", (escaped + "%",), f"ORDER BY id LIMIT {ID_PREFIX_LIMIT}"
        )

    def find_keyword(self, keyword: str, limit: int) -> list[Entry]:
        escaped = keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return self._select(
            "archived=0 AND content LIKE ? ESCAPE '\\'",
            (f"%{escaped}%",),
            f"ORDER BY updated_at DESC, id LIMIT {int(limit)}",
        )

    def list_entries(
        self,
        *,
        category: Category | None,
        status: Status | None,
        archived: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Entry], int]:
        clauses: list[str] = ["archived=?"]
        params: list[object] = [int(archived)]
        if category is not None:
            clauses.append("category=?")
            params.append(category)
        if status is not None:
            clauses.append("status=?")
            params.append(status)
        where = " AND ".join(clauses)
        total = int(self._scalar(f"SELECT count(*) FROM entries WHERE {where}", params))
        page = self._select(
            where, params, f"ORDER BY updated_at DESC, id LIMIT {int(limit)} OFFSET {int(offset)}"
        )
        return page, total

    def iter_findings(self) -> Iterator[SessionFinding]:
        yield from self._findings("1=1", (), "ORDER BY id")

    def entries_after(self, after_id: str, limit: int) -> list[Entry]:
        return self._select("id > ?", (after_id,), f"ORDER BY id LIMIT {int(limit)}")

    def iter_all(self) -> Iterator[Entry]:
        cursor = self._conn.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY id")
        for row in cursor:
            yield _row_to_entry(row)

    def counts(self) -> EntryCounts:
        counts = EntryCounts()
        for status, archived, n in self._conn.execute(
            "SELECT status, archived, count(*) FROM entries GROUP BY status, archived"
        ):
            if archived:
                counts.archived += n
            else:
                setattr(counts, status, getattr(counts, status) + n)
        return counts

    def change_seq(self) -> int:
        return int(self._scalar("SELECT coalesce(max(seq), 0) FROM changes"))

    def changed_since(self, seq: int, limit: int | None = None) -> tuple[list[str], int]:
        rows = self._conn.execute(
            "SELECT entry_id, seq FROM changes WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, -1 if limit is None else limit),
        ).fetchall()
        if not rows:
            return [], max(seq, self.change_seq())
        return list(dict.fromkeys(r[0] for r in rows)), rows[-1][1]

    def prune_changes(self, upto_seq: int) -> None:
        self._conn.execute(
            "DELETE FROM changes WHERE seq <= ? AND seq < (SELECT max(seq) FROM changes)",
            (upto_seq,),
        )

    def pinned(self, limit: int) -> list[Entry]:
        return self._select(
            "status='pinned' AND archived=0", (), f"ORDER BY updated_at DESC, id LIMIT {int(limit)}"
        )

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        if not ids:
            return []
        marks, padded = _in_list(ids)
        rows = self._conn.execute(
            f"SELECT entry_a, entry_b FROM conflicts WHERE resolved_at IS NULL"
            f" AND (entry_a IN ({marks}) OR entry_b IN ({marks}))"
            " ORDER BY detected_at, entry_a, entry_b",
            [*padded, *padded],
        )
        return [(a, b) for a, b in rows]

    def open_conflicts(self) -> list[tuple[str, str, str, float]]:
        # CROSS JOIN keeps the conflicts the outer loop: SQLite's planner would scan every
        # entry otherwise (~16 ms at 30k, for usually no conflict at all; `status` asks).
        rows = self._conn.execute(
            "SELECT c.entry_a, c.entry_b, c.conflict_type, c.detected_at FROM conflicts c"
            " CROSS JOIN entries a ON a.id = c.entry_a AND a.archived = 0"
            " CROSS JOIN entries b ON b.id = c.entry_b AND b.archived = 0"
            " WHERE c.resolved_at IS NULL ORDER BY c.detected_at, c.entry_a, c.entry_b"
        )
        return [(a, b, kind, t) for a, b, kind, t in rows]

    def edges(self, ids: Sequence[str]) -> list[Edge]:
        found: dict[tuple[str, str, str], Edge] = {}
        for marks, chunk in _in_chunks(ids):
            rows = self._conn.execute(
                f"SELECT source_id, target_id, relation, created_at FROM edges"
                f" WHERE source_id IN ({marks}) UNION SELECT source_id, target_id, relation,"
                f" created_at FROM edges WHERE target_id IN ({marks})",
                [*chunk, *chunk],
            )
            for a, b, rel, t in rows:
                found[(a, b, rel)] = Edge(source=a, target=b, relation=rel, created_at=t)
        return [found[k] for k in sorted(found)]

    def working_memory(self, session_id: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT entry_id FROM working_memory WHERE session_id=? ORDER BY focused_at, entry_id",
            (session_id,),
        )
        return [r[0] for r in rows]

    def working_memory_sessions(self) -> dict[str, float]:
        rows = self._conn.execute(
            "SELECT session_id, max(focused_at) FROM working_memory GROUP BY session_id"
        )
        return {session: t for session, t in rows}

    def notes(self) -> list[Note]:
        rows = self._conn.execute(
            "SELECT id, content, created_at FROM notes ORDER BY created_at, id"
        )
        return [Note(id=i, content=text, created_at=t) for i, text, t in rows]

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return {
            term: _json_list.decode(syn)
            for term, syn in self._conn.execute("SELECT * FROM aliases")
        }

    def setting(self, key: str) -> object:
        return self._scalar("SELECT value FROM settings WHERE key=?", (key,))

    # ------------------------------------------------------------------ sharing (core.share)

    def shared_entries(self) -> list[Entry]:
        marks = ",".join("?" * len(SHARED_STATUSES))
        return self._select(f"status IN ({marks})", SHARED_STATUSES, "ORDER BY id")

    def tombstones(self, ids: Sequence[str] | None = None) -> dict[str, Tombstone]:
        sql = "SELECT id, fingerprint, deleted_at, reason FROM tombstones"
        if ids is None:
            rows = self._conn.execute(sql + " ORDER BY id").fetchall()
        else:
            rows = []
            for marks, chunk in _in_chunks(ids):
                rows += self._conn.execute(f"{sql} WHERE id IN ({marks})", chunk).fetchall()
        return {i: Tombstone(id=i, fingerprint=f, updated_at=t, reason=r) for i, f, t, r in rows}

    def all_edges(self) -> list[Edge]:
        rows = self._conn.execute(
            "SELECT source_id, target_id, relation, created_at FROM edges"
            " ORDER BY source_id, target_id, relation"
        )
        return [Edge(source=a, target=b, relation=r, created_at=t) for a, b, r, t in rows]

    def integrity(self) -> str:
        rows = self._conn.execute("PRAGMA integrity_check").fetchall()
        return "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:5])

    def backup(self, target: Path) -> int:
        tmp = target.with_name(target.name + ".tmp")
        tmp.unlink(missing_ok=True)
        dest = sqlite3.connect(tmp)
        try:
            self._conn.backup(dest)
            dest.execute("PRAGMA journal_mode=DELETE")
        finally:
            dest.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        fsync_dir(target.parent)
        return self._applied

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA optimize")
        self._conn.close()


class ReadConnections:
    """Read-only connections to one database for the reader threads (``server/readers.py``),
    each lent to one thread at a time and kept for the next read. WAL lets them read while the
    owner thread writes; each statement reads the last commit, so a reader sees every change
    the owner acknowledged before it handed the read over. Closing closes the idle ones now
    and those lent out when they come back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._idle: list[SqliteStore] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def borrow(self) -> Iterator[SqliteStore]:
        with self._lock:
            store = self._idle.pop() if self._idle else None
        if store is None:
            store = SqliteStore.read_only(self.path, any_thread=True)
        try:
            yield store
        finally:
            with self._lock:
                keep = not self._closed
                if keep:
                    self._idle.append(store)
            if not keep:
                store._conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for store in idle:
            store._conn.close()
