"""One project's memory: the service layer over its journal, store and index.

Every change goes the same way: the pure core plans an event, the journal makes it durable, the
store applies it in one transaction, and the index learns of it before the next search that
needs it (``INDEX_MAY_LAG``). Only the owner thread calls into this class; a reader thread gets a
``ProjectReader`` (``ProjectMemory.reader``) instead.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sqlite3
import time
import types
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import tantivy

from memctl import protocol as p
from memoryd import request_ids
from memoryd.atomic import write_atomic
from memoryd.audit import AuditJournal
from memoryd.background import BackgroundErrors
from memoryd.banks.paths import BANK_DIRNAME
from memoryd.config import StorageSettings
from memoryd.core import entries as core_entries
from memoryd.core import review as core_review
from memoryd.core import share as core_share
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.capture.promotion import review_quarantine
from memoryd.core.compaction import CompactionPolicy, still_holds
from memoryd.core.errors import (
    Ambiguous,
    BadRequest,
    Conflict,
    EntryNotFound,
    Forbidden,
    TooLarge,
    Unavailable,
)
from memoryd.core.events import (
    AliasRemoved,
    AliasSet,
    CompactionApplied,
    CompactionEvent,
    ConflictDetected,
    ConflictResolved,
    EdgeAdded,
    EntriesAccessed,
    EntriesArchived,
    EntriesForgotten,
    EntryAdded,
    EntrySuperseded,
    EntryUnarchived,
    Episode,
    Event,
    MemoryMerged,
    NoteAdded,
    NotesDone,
    QuarantineReviewed,
    ReleaseReason,
    ReviewAccepted,
    ReviewRejected,
    SettingChanged,
    WorkingMemoryFocused,
    WorkingMemoryReleased,
    plan_import,
    plan_pin,
    plan_remember,
    plan_unpin,
)
from memoryd.core.graph import plan_connect, plan_focus, walk
from memoryd.core.projects import slug as project_slug
from memoryd.core.recall import conflicts, retrieval
from memoryd.core.redaction import redact
from memoryd.index import Hits, IndexWriteFailed, SearchIndex, SearchScope, split_ids
from memoryd.store.base import FINDING_PREFIX, SessionRecord, Store, StoreCorrupt
from memoryd.store.sqlite import ReadConnections, SqliteStore

ID_PREFIX_MIN = 4
# The changes a retry is answered from the one event they journaled (``answered``).
_ONE_EVENT_CHANGES = (
    p.NoteAdd, p.Notes, p.Connect, p.Focus, p.Release, p.Resolve, p.AliasAdd, p.AliasRemove,
    p.ReviewAccept, p.ReviewReject, p.ReviewEdit,
)  # fmt: skip
# At open the index's ids are compared with the store's up to this many documents (~15 ms);
# above it only their numbers (memctl check compares the ids at any size).
OPEN_ID_CHECK_MAX = 2_000
# Events a search can do without the index knowing of yet: an entry compaction archived (or
# purged) is still in the active part of the index until the next commit, and ``Recall`` drops
# it, reading every hit from the store; ``search --archive`` waits for the index. An access
# count only nudges scores. Compaction's batches and the index commit job commit these in the
# background (``commit_index_in_background``) instead of holding the owner thread ~100 ms a
# commit; any other change makes the next search wait for the index (read-your-writes).
INDEX_MAY_LAG = frozenset({"compaction_applied", "entries_accessed"})
_OPENED = itertools.count()  # numbers each ProjectMemory opened: a generation is its own
INDEX_SLICE = 500  # store changes a background index commit takes at most
PRUNE_EVERY = 5_000  # index changes published between two prunes of the store's change log


class ImportLine(msgspec.Struct, kw_only=True):
    content: str
    category: p.Category | None = None
    section: str | None = None
    tags: list[str] = []
    file_paths: list[str] = []
    created_at: float | None = None
    last_accessed_at: float | None = None
    access_count: int = msgspec.field(default=0)
    importance: float | None = None


_import_decoder = msgspec.json.Decoder(ImportLine)


class ProjectMemory:
    """The facade over one project's journal, store and index: callers ask it for what they
    need by its name in the domain, and never reach the three parts themselves (a test holds
    everyone to that)."""

    def __init__(
        self,
        root: Path,
        data_root: Path,
        settings: StorageSettings,
        errors: BackgroundErrors,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.root = root
        self.slug = project_slug(root)
        self.dir = data_root / "projects" / self.slug
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            _record_root(self.dir, root)
        except OSError as exc:  # only `projects` after a restart needs it: never fail the open
            errors.record(f"{self.slug}: could not record the project's root: {exc}", "warning")
        self._settings = settings
        self._errors = errors
        self._clock = clock
        self._new_id = new_id
        self.journal = AuditJournal(
            self.dir / "audit.jsonl",
            max_events=settings.audit_max_events,
            trim_to=settings.audit_trim_to,
            clock=clock,
        )
        if self.journal.torn_bytes:
            errors.record(
                f"{self.slug}: cut a torn audit line ({self.journal.torn_bytes} bytes)", "warning"
            )
        self._behind = False  # journaled events the database has not applied yet
        try:
            self.store: Store = self._open_store()
        except Unavailable:  # the disk cannot serve now: the next request tries again
            self.journal.close()
            raise
        self.replayed = self._replay()
        self.index = SearchIndex(self.dir / "index", heap_bytes=settings.index_heap_mb * 1_000_000)
        self.index.open_synced(self.store)
        self._reconcile_index()
        # The reader threads' connections to the database (``ProjectReader``).
        self._reads = ReadConnections(self.dir / "memory.db")
        self.closed = False
        # What the index has not published yet, counted in commits (of events) since open.
        self._changes = 0
        self._opened = next(_OPENED)
        self._exact = 0  # the last commit of an event outside INDEX_MAY_LAG
        self._indexed = 0  # the commits the published index holds
        # A commit running in the background: the commits it holds (None: only some) and how
        # many of ``_unindexed`` it holds.
        self._indexing: tuple[int | None, int] | None = None
        self._pruned = 0  # the change log is pruned up to here
        self._aliases: dict[str, tuple[str, ...]] | None = None
        self._unindexed: list[str] = []  # entries added since the index last published
        self._index_failure: str | None = None  # why the index cannot be written, if it cannot
        self._verify_due = False  # a heal of the index failed: the next index tick tries again
        self._twice_rewritten = False  # ids held twice were written again; verified next
        self._accesses: dict[str, tuple[int, float]] = {}
        self.accesses_since_compaction = 0  # entries injected since the last run began
        self.compacted_at = self.last_compacted_at()  # when the last run ended (status)
        # When each session last showed a sign of life (a prompt, a compaction, a focus): its
        # working memory expires after a quiet spell. Not kept across restarts: a restart
        # counts as a sign of life of every session, so it never expires one early.
        self._session_seen: dict[str, float] = {}
        self._opened_at = clock()
        # Counts the changes that can change the shared file (core.share.touches_shared): the
        # share service writes the file again when it moved.
        self.share_revision = 0
        # The shared file's lines (id → line) kept up to date a changed id at a time, so that a
        # change re-reads what it touched, not the whole store: built on first use.
        self._share_lines: dict[str, bytes] | None = None
        self._share_entries: set[str] = set()  # ids of the shared entries among those lines
        self._share_dirty: set[str] = set()
        self._replies_kept = 0  # since open: every PRUNE_EVERY the old requests go

    # ------------------------------------------------------------------ recovery

    def _open_store(self) -> Store:
        db = self.dir / "memory.db"
        try:
            return SqliteStore(db, synchronous=self._settings.synchronous)
        except StoreCorrupt as exc:
            # Never delete a user's data: move the bad file aside, restore the last backup, and
            # let the journal replay bring it forward.
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
            for suffix in ("", "-wal", "-shm"):
                part = db.with_name(db.name + suffix)
                if part.exists():
                    os.replace(part, db.with_name(f"{db.name}.corrupt-{stamp}{suffix}"))
            backup = self.dir / "memory.db.bak"
            if backup.exists():
                shutil.copyfile(backup, db)
            self._errors.record(
                f"{self.slug}: database was corrupt ({exc}); moved aside and rebuilt", "error"
            )
            return SqliteStore(db, synchronous=self._settings.synchronous)

    def catch_up(self) -> None:
        """Apply journaled events the database refused earlier; raises ``Unavailable`` while it
        still refuses them."""
        if not self._behind:
            return
        try:
            self._replay()
        except Exception as exc:
            raise Unavailable(f"the database still refuses journaled changes ({exc})") from exc
        self._behind = False
        self._changes += 1
        self._exact = self._changes
        self._share_lines = None  # changed outside commit: read whole again when next asked
        self.share_revision += 1

    def _replay(self) -> int:
        applied = self.store.applied_audit_seq()
        if self.journal.last_seq < applied:
            # The journal lost its tail (deleted or restored by hand): continue numbering after
            # what the store holds so new events are never mistaken for applied ones.
            self._errors.record(
                f"{self.slug}: audit log is behind the database; continuing after seq {applied}",
                "warning",
            )
            self.journal.last_seq = applied
            return 0
        count = 0
        for seq, event, request in self.journal.events_after(applied):
            self.store.apply(event, seq, request)
            count += 1
        return count

    def _reconcile_index(self) -> None:
        """At open, once the index has caught up: one that holds other documents than the
        store (a kill can leave an id SQLite no longer has) is rebuilt from the store, a page
        per loop turn, and the difference reported. The counts are compared always (cheap);
        the ids too while the index is small enough to read whole in a few ms (``check``
        compares them at any size)."""
        if self.index.rebuilding:
            return
        stored = self._stored_documents()
        documents = self.index.state().documents
        if documents != stored:
            problem: str | None = f"{documents} documents for {stored} entries and findings"
        elif documents <= OPEN_ID_CHECK_MAX:
            problem = self._index_difference()
        else:
            problem = None
        if problem is not None:
            self._rebuild_index(problem)

    def _rebuild_index(self, problem: str) -> None:
        """An index that differs from the store is rebuilt from it, a page per loop turn."""
        self.index.rebuild_reason = f"index and store differed ({problem})"
        self.index.begin_rebuild(self.store)
        self._errors.record(
            f"{self.slug}: the search index differed from the store ({problem}); "
            "it is rebuilt from the store",
            "warning",
        )

    def _stored_documents(self) -> int:
        """The documents the index must hold: every entry and every finding (two counts)."""
        c = self.store.counts()
        return c.candidate + c.confirmed + c.pinned + c.archived + self.store.finding_count()

    def _verify_index(self) -> None:
        """After the index published a commit, or a writer's merges ended: when it holds every
        store change, its document count is compared with the store's (cheap). One that
        differs heals here, no restart: ids it holds twice (a tantivy merge of the segments a
        kill left can keep alive a version a commit deleted while the merge ran) are deleted
        and written again from the store in a commit on the committer thread, whose
        publication verifies again; any other difference, or one that outlived that, is
        rebuilt from the store a page per loop turn, as at open."""
        self._verify_due = False
        if self.index.rebuilding or self.index.committing or self._behind:
            return
        if self.index.applied_seq != self.store.change_seq():
            return  # the commit that catches up verifies
        stored, documents = self._stored_documents(), self.index.documents()
        if documents == stored:
            self._twice_rewritten = False
            return
        problem = f"{documents} documents for {stored} entries and findings"
        if not self._twice_rewritten:
            try:
                twice = self.index.rewrite_twice_indexed(self.store)
            except IndexWriteFailed as exc:
                self._index_failed(exc)
                self._verify_due = True  # tried again at the next index tick
                return
            if twice:
                self._twice_rewritten = True
                self._indexing = (self._indexed, 0)
                more = f" and {len(twice) - 5} more" if len(twice) > 5 else ""
                self._errors.record(
                    f"{self.slug}: the search index held {len(twice)} ids twice "
                    f"({', '.join(twice[:5])}{more}; {problem}); each is written again "
                    "from the store",
                    "warning",
                )
                return
        self._twice_rewritten = False
        self._rebuild_index(problem)

    # ------------------------------------------------------------------ writing

    def commit(self, event: Event) -> list[str]:
        """Journal, then apply. The caller answers its client only after this returns.

        If the database refuses an event already journaled (locked by another process, disk
        full), the event is not lost: the client hears ``unavailable`` saying so, and the event
        is applied before any later one (``catch_up``), never skipped."""
        self.catch_up()
        request = request_ids.SERVING.current
        seq = self.journal.append(event, request)
        try:
            ids = self.store.apply(event, seq, request)
        except Exception as exc:
            self._behind = True
            raise Unavailable(
                f"the change is journaled (audit seq {seq}) but the database refused it ({exc}); "
                "it will be applied as soon as the database accepts writes again"
            ) from exc
        if request is not None:
            request_ids.SERVING.changed(self)
        self._changes += 1
        if event.__struct_config__.tag not in INDEX_MAY_LAG:
            self._exact = self._changes
        if core_share.touches_shared(event.__struct_config__.tag):
            self.share_revision += 1
            if self._share_lines is not None:  # else the lines are built whole when first asked
                self._share_dirty.update(i for i in ids if not i.startswith(FINDING_PREFIX))
        if self.journal.needs_trim:
            checkpoint = self.store.backup(self.dir / "memory.db.bak")
            self.journal.trim(checkpoint)
        return ids

    # ------------------------------------------------------------------ request ids

    def answered(self, req: p.Request[Any]) -> bytes | msgspec.Struct | None:
        """What a change already applied here answered (its encoded reply), or, when the
        daemon died before it replied, the result its first attempt would have given, rebuilt
        from what it did (remember, import, forget, pin, unpin, supersede, archive, unarchive)
        or from the one event it journaled (note, notes done, connect, focus, release, resolve,
        alias add and remove, review decisions); another is run again. None for a request not
        applied here. One of the latter whose event the journal no longer holds (trimmed since)
        is answered an error saying so: run again, it would be applied twice (a second note)."""
        assert isinstance(req.id, str)
        if self._behind:  # the change the database refused may be this request's: apply it
            with contextlib.suppress(Unavailable):
                self.catch_up()
        record = self.store.request_record(req.id)
        if record is None:
            return None
        if record.reply is not None:
            return record.reply
        if not isinstance(req, _ONE_EVENT_CHANGES):
            return self._rebuilt_result(req, record.effects)
        rebuilt = self._rebuilt_from_journal(req)
        if rebuilt is None:
            return p.encode(
                p.Error(
                    id=req.id,
                    code=p.ErrorCode.CONFLICT,
                    message=f"this {record.op} was applied already; its reply was lost and the "
                    "audit log no longer holds its change (trimmed since): it is not applied "
                    "again (see memctl audit, or list what it changed)",
                )
            )
        return rebuilt

    def keep_reply(self, request_id: str, encoded: bytes) -> None:
        """Keep the reply of a change this request made (before it is sent); bounded."""
        if not self.store.record_reply(request_id, encoded):
            return
        self._replies_kept += 1
        if self._replies_kept % request_ids.PRUNE_EVERY == 0:
            self.store.prune_requests(
                self._clock() - request_ids.KEEP_REQUESTS_S, request_ids.KEEP_REQUESTS
            )

    def _rebuilt_result(
        self, req: p.Request[Any], effects: list[tuple[str, list[str]]]
    ) -> msgspec.Struct | None:
        touched = [i for _tag, ids in effects for i in ids]
        first_tag, first_ids = effects[0] if effects else ("", [])
        match req:
            case p.Remember() if first_ids:
                entry = self.store.get(first_ids[0])
                status: p.Status = entry.status if entry else ("pinned" if req.pin else "confirmed")
                duplicate = first_tag != EntryAdded.__struct_config__.tag
                return p.RememberResult(id=first_ids[0], duplicate=duplicate, status=status)
            case p.Forget():
                forgotten = EntriesForgotten.__struct_config__.tag
                return p.ForgetResult(
                    forgotten=[i for t, ids in effects if t == forgotten for i in ids]
                )
            case p.Pin() | p.Unpin() if touched:
                entry = self.store.get(touched[0])
                fallback: p.Status = "pinned" if isinstance(req, p.Pin) else "confirmed"
                return p.PinResult(id=touched[0], status=entry.status if entry else fallback)
            case p.Supersede() if first_tag == EntrySuperseded.__struct_config__.tag:
                return p.SupersedeResult(id=first_ids[1], superseded=first_ids[0])
            case p.Archive():
                return p.ArchiveResult(ids=touched, archived=True)
            case p.Unarchive():
                return p.ArchiveResult(ids=touched, archived=False)
            case p.Import():
                rejected = self._import_rejected(req.lines, req.first_line)
                imported = len([i for i in touched if not i.startswith(FINDING_PREFIX)])
                lines = sum(1 for raw in req.lines if raw.strip())
                return p.ImportResult(
                    imported=imported,
                    duplicates=max(0, lines - imported - len(rejected)),
                    rejected=rejected,
                )
        return None

    def _rebuilt_from_journal(self, req: p.Request[Any]) -> msgspec.Struct | None:
        """The result of a change that journaled one event and says no more in its effects
        (a note, a link, a focus, a release, a resolve, an alias, a review decision), rebuilt
        from that event; lists (notes pending, the session's focus, aliases) as they are now.
        None when the journal no longer holds it (trimmed since)."""
        assert isinstance(req.id, str)
        events = self.journal.events_of(req.id)
        match req, events[-1] if events else None:
            case p.NoteAdd(), NoteAdded() as e:
                return p.Note(id=e.id, content=e.content, created_at=e.created_at)
            case p.Notes(), NotesDone() as e:
                return p.NotesResult(notes=self.store.notes(), done=list(e.ids))
            case p.Connect(), EdgeAdded() as e:
                return p.Edge(
                    source=e.source_id, target=e.target_id, relation=e.relation,
                    created_at=e.created_at,
                )  # fmt: skip
            case p.Focus(), WorkingMemoryFocused() as e:
                held = self.store.working_memory(e.session_id)
                return p.FocusResult(session=e.session_id, ids=held, added=list(e.ids))
            case p.Release(), WorkingMemoryReleased() as e:
                return p.ReleaseResult(sessions=list(e.session_ids), released=e.released)
            case p.Resolve(), ConflictResolved() as e:
                other = None if e.kept is None else ({e.entry_a, e.entry_b} - {e.kept}).pop()
                return p.ResolveResult(
                    id=conflict_id(e.entry_a, e.entry_b), kept=e.kept, superseded=other
                )
            case p.AliasAdd(), AliasSet() as e:
                return p.Alias(term=e.term, synonyms=list(e.synonyms), source="project")
            case p.AliasRemove(), AliasSet() | AliasRemoved():
                return p.AliasListResult(aliases=self.alias_list())
            case p.ReviewAccept(), ReviewAccepted() as e:
                return core_review.decision_of("accepted", req.ids, e)
            case p.ReviewEdit(), ReviewAccepted() as e:
                return core_review.decision_of("edited", [req.target], e)
            case p.ReviewReject(), ReviewRejected() as e:
                return core_review.decision_of("rejected", req.ids, e)
        return None

    def _import_rejected(self, lines: list[str], first_line: int) -> list[p.RejectedLine]:
        now = self._clock()
        rejected = []
        for number, raw in enumerate(lines, start=first_line):
            if not raw.strip():
                continue
            try:
                if core_share.decode_import(raw) is None:
                    self._import_candidate(raw, now)
            except (msgspec.DecodeError, msgspec.ValidationError, BadRequest, TooLarge) as exc:
                rejected.append(p.RejectedLine(line=number, reason=str(exc)))
        return rejected

    def remember(self, req: p.Remember) -> p.RememberResult:
        if req.agent is not None and req.pin:
            raise Forbidden(f"{req.agent} is an agent: only a user pins (memctl pin)")
        now = self._clock()
        # Redaction before anything is stored (design §6): a pasted key never reaches the disk.
        content = _kept_text(req.content)
        category = core_entries.resolve_category(req.category, req.section, content)
        candidate = core_entries.new_entry(
            entry_id=self._new_id(),
            content=content,
            category=category,
            status="pinned" if req.pin else "confirmed",
            now=now,
            source=_source(req.agent),
            tags=core_entries.clean_tags(redact(t).text for t in req.tags),
            file_paths=core_entries.clean_paths(redact(f).text for f in req.file_paths),
        )
        existing = self.store.find_fingerprint(candidate.fingerprint)
        self.commit(plan_remember(candidate, existing, now))
        if existing is None:
            self._detect_conflicts(candidate, now)
            return p.RememberResult(id=candidate.id, duplicate=False, status=candidate.status)
        if req.pin and (pin := plan_pin(existing, now)) is not None:
            self.commit(pin)
        status = self.store.get(existing.id).status  # type: ignore[union-attr]
        return p.RememberResult(id=existing.id, duplicate=True, status=status)

    def _detect_conflicts(self, entry: p.Entry, now: float) -> None:
        """Look for contradictions among the entries most similar to a new one: the index as
        last committed (no forced commit on every write) plus the entries added since."""
        terms = dict.fromkeys(retrieval.keywords(entry.content), 1.0)
        hits = self.index.retrieve(
            terms, scope="active", active_files=(), config=_CONFLICT_SCAN, scan=20
        )
        ids = dict.fromkeys([*hits.ids(hits.columns.refs), *self._unindexed])
        ids.pop(entry.id, None)
        self._unindexed.append(entry.id)
        # The index may not have published an archive yet (INDEX_MAY_LAG).
        others = [e for e in self.store.get_many(list(ids)).values() if not e.archived]
        for other_id in conflicts.detect(entry, others):
            self.commit(ConflictDetected(other_id, entry.id, "contradictory", now))

    def resolve_targets(self, target: str) -> list[p.Entry]:
        """An id, a unique id prefix (≥ 4 chars), or a keyword in the content."""
        target = target.strip()
        exact = self.store.get(target)
        if exact is not None:
            return [exact]
        if len(target) >= ID_PREFIX_MIN and all(c in "0123456789abcdef" for c in target):
            by_prefix = self.store.find_id_prefix(target)
            if by_prefix:
                return by_prefix
        return self.store.find_keyword(target, limit=50)

    def _one_target(self, target: str) -> p.Entry:
        found = self.resolve_targets(target)
        if not found:
            raise EntryNotFound(f"no entry matches {target!r}")
        if len(found) > 1:
            raise Ambiguous(_ambiguity(target, found))
        return found[0]

    def forget(self, target: str, confirm: bool) -> list[str]:
        found = self.resolve_targets(target)
        if not found:
            raise EntryNotFound(f"no entry matches {target!r}")
        if len(found) > 1 and not confirm:
            raise Ambiguous(_ambiguity(target, found) + "; pass --yes to forget them all")
        ids = tuple(e.id for e in found)
        self.commit(EntriesForgotten(ids, forgotten_at=self._clock()))
        return list(ids)

    def pin(self, target: str) -> p.PinResult:
        """Pin one entry (an id, a unique prefix or a keyword matching one entry)."""
        entry = self._one_target(target)
        if (event := plan_pin(entry, self._clock())) is not None:
            self.commit(event)
        return p.PinResult(id=entry.id, status="pinned")

    def unpin(self, target: str) -> p.PinResult:
        """Unpin one entry; an entry that was not pinned keeps its status."""
        entry = self._one_target(target)
        if (event := plan_unpin(entry, self._clock())) is not None:
            self.commit(event)
        return p.PinResult(id=entry.id, status=event.status if event else entry.status)

    def import_lines(self, lines: list[str], first_line: int) -> p.ImportResult:
        """Plain lines (content and optional fields) become new entries; lines with an id (of
        ``export`` or the shared file) and edge lines are merged as the shared file is: per id
        the newest ``updated_at`` wins, so ids, status and times round-trip."""
        now = self._clock()
        rejected: list[p.RejectedLine] = []
        candidates: list[p.Entry] = []
        records: list[core_share.Record] = []
        for number, raw in enumerate(lines, start=first_line):
            if not raw.strip():
                continue
            try:
                record = core_share.decode_import(raw)
                if record is None:
                    candidates.append(self._import_candidate(raw, now))
                else:
                    records.append(record)
            except (msgspec.DecodeError, msgspec.ValidationError, BadRequest, TooLarge) as exc:
                rejected.append(p.RejectedLine(line=number, reason=str(exc)))
        imported = len(self.import_entries(candidates))
        versions = sum(not isinstance(r, p.Edge) for r in records)
        merged = self.merge_shared(records, (), origin="import")
        changed = len(merged.entries) + len(merged.deleted)
        return p.ImportResult(
            imported=imported + changed,
            duplicates=len(candidates) - imported + versions - changed,
            rejected=rejected,
        )

    def import_entries(self, candidates: Sequence[p.Entry]) -> tuple[p.Entry, ...]:
        """Add the candidates whose content is not in memory yet (the first of each fingerprint),
        never reinforcing; returns those added. One event per call: an import is applied whole or
        not at all, even across a crash."""
        known = {e.fingerprint for e in candidates if self.store.find_fingerprint(e.fingerprint)}
        event = plan_import(list(candidates), known)
        if event.entries:
            self.commit(event)
        return event.entries

    def _import_candidate(self, raw: str, now: float) -> p.Entry:
        line = _import_decoder.decode(raw)
        content = _kept_text(line.content)
        category = core_entries.resolve_category(line.category, line.section, content)
        created = _past(line.created_at, now)
        accessed = _past(line.last_accessed_at, now)
        if line.access_count < 0 or not 0 <= (line.importance or 0.0) <= 1:
            raise BadRequest("access_count must be ≥ 0 and importance within 0..1")
        entry = core_entries.new_entry(
            entry_id=self._new_id(),
            content=content,
            category=category,
            status="confirmed",
            now=now,
            created_at=created,
            source=p.Source(kind="import"),
            tags=core_entries.clean_tags(redact(t).text for t in line.tags),
            file_paths=core_entries.clean_paths(redact(f).text for f in line.file_paths),
        )
        # Backdated times and uses are kept, so imported memory ages as it had (design §8).
        return msgspec.structs.replace(
            entry,
            last_accessed_at=accessed,
            access_count=line.access_count,
            importance=entry.importance if line.importance is None else line.importance,
        )

    # ------------------------------------------------------------------ supersede, archive

    def supersede(self, target: str, content: str, agent: str | None = None) -> p.SupersedeResult:
        """Replace an entry's text (design §9): a new entry with the old one's category, tags,
        files, importance and status; the old one archived as ``superseded``; a ``replaces``
        edge; one event, one transaction. An agent's text never becomes pinned, so an agent
        cannot replace a pinned entry: the user does."""
        old = self._one_target(target)
        if old.archived:
            raise Conflict(f"{old.id[:8]} is archived ({old.archived_reason}): unarchive it first")
        if agent is not None and old.status == "pinned":
            raise Forbidden(
                f"{old.id[:8]} is pinned by the user: {agent} cannot replace it "
                "(only a user pins; ask the user to run memctl supersede)"
            )
        now = self._clock()
        new = core_entries.new_entry(
            entry_id=self._new_id(),
            content=_kept_text(content),
            category=old.category,
            status="pinned" if old.status == "pinned" else "confirmed",
            now=now,
            source=_source(agent),
            tags=old.tags,
            file_paths=old.file_paths,
            importance=old.importance,
        )
        twin = self.store.find_fingerprint(new.fingerprint)
        if twin is not None:
            raise Conflict(f"{twin.id[:8]} holds this text already")
        self.commit(EntrySuperseded(old_id=old.id, entry=new, superseded_at=now))
        return p.SupersedeResult(id=new.id, superseded=old.id)

    def archive(self, targets: Sequence[str]) -> p.ArchiveResult:
        """Archive entries by hand (reason ``user``): kept, searchable, never injected."""
        found = [self._one_target(t) for t in targets]
        ids = tuple(dict.fromkeys(e.id for e in found if not e.archived))
        if ids:
            self.commit(EntriesArchived(ids=ids, archived_at=self._clock()))
        return p.ArchiveResult(ids=list(ids), archived=True)

    def unarchive(self, target: str) -> p.ArchiveResult:
        """Bring an archived entry back to active memory."""
        entry = self._one_target(target)
        if not entry.archived:
            return p.ArchiveResult(ids=[], archived=False)
        twin = self.store.find_fingerprint(entry.fingerprint)
        if twin is not None:
            raise Conflict(f"{twin.id[:8]}, an active entry, holds this text")
        self.commit(EntryUnarchived(id=entry.id, updated_at=self._clock()))
        return p.ArchiveResult(ids=[entry.id], archived=False)

    # ------------------------------------------------------------------ conflicts

    def conflicts(self) -> list[p.ConflictInfo]:
        """Open conflicts between active entries, oldest first, with both entries."""
        found = self.store.open_conflicts()
        held = self.store.get_many([i for a, b, _, _ in found for i in (a, b)])
        return [
            p.ConflictInfo(
                id=conflict_id(a, b), conflict_type=kind, detected_at=t, a=held[a], b=held[b]
            )
            for a, b, kind, t in found
            if a in held and b in held
        ]

    def resolve(self, conflict: str, keep: str | None) -> p.ResolveResult:
        """Keep one entry of a conflict (the other is superseded by it), or both."""
        wanted = conflict.strip().lower()
        found = [c for c in self.conflicts() if c.id.startswith(wanted)]
        if not found:
            raise EntryNotFound(f"no open conflict {conflict!r} (see memctl conflicts)")
        if len(found) > 1:
            raise Ambiguous(f"{len(found)} open conflicts start with {conflict!r}")
        c = found[0]
        kept: str | None = None
        if keep is not None:
            kept = self._one_target(keep).id
            if kept not in (c.a.id, c.b.id):
                raise BadRequest(f"{keep!r} is neither entry of conflict {c.id}")
        self.commit(
            ConflictResolved(entry_a=c.a.id, entry_b=c.b.id, kept=kept, resolved_at=self._clock())
        )
        other = None if kept is None else (c.b.id if kept == c.a.id else c.a.id)
        return p.ResolveResult(id=c.id, kept=kept, superseded=other)

    # ------------------------------------------------------------------ working memory (design §9)

    def focus(self, session_id: str, targets: Sequence[str]) -> p.FocusResult:
        """Add entries (ids or keywords, each naming one active entry) to a session's working
        memory."""
        entries = [self._one_target(t) for t in targets]
        now = self._clock()
        event = plan_focus(session_id, self.store.working_memory(session_id), entries, now)
        if event is not None:
            self.commit(event)
        self._session_seen[session_id] = now
        added = list(event.ids) if event else []
        return p.FocusResult(
            session=session_id, ids=self.store.working_memory(session_id), added=added
        )

    def release(self, session_id: str | None, reason: ReleaseReason = "user") -> p.ReleaseResult:
        """Clear one session's working memory, or every session's (``session_id`` None)."""
        held = self.store.working_memory_sessions()
        sessions = tuple(sorted(held if session_id is None else {session_id} & held.keys()))
        released = sum(len(self.store.working_memory(s)) for s in sessions)
        if sessions:
            self.commit(
                WorkingMemoryReleased(
                    session_ids=sessions,
                    reason=reason,
                    released_at=self._clock(),
                    released=released,
                )
            )
        for session in sessions:
            self._session_seen.pop(session, None)
        return p.ReleaseResult(sessions=list(sessions), released=released)

    def working_memory(self, session_id: str) -> list[p.Entry]:
        """The session's focused entries that are still active, in focus order. Asked on every
        prompt of the session, so asking is the session's sign of life."""
        ids = self.store.working_memory(session_id)
        if not ids:
            return []
        self._session_seen[session_id] = self._clock()  # kept for sessions with focus only
        held = self.store.get_many(ids)
        return [held[i] for i in ids if i in held and not held[i].archived]

    def expire_working_memory(self, idle_s: float) -> list[str]:
        """Release the working memory of sessions quiet for ``idle_s`` (design §9: it expires with
        the session; a session is over when it goes quiet, as capture finalizes it)."""
        now = self._clock()
        quiet = [
            session
            for session, focused_at in self.store.working_memory_sessions().items()
            if now - max(focused_at, self._opened_at, self._session_seen.get(session, 0.0))
            >= idle_s
        ]
        for session in quiet:
            self.release(session, "idle")
        return quiet

    # ------------------------------------------------------------------ graph and notes (design §9)

    def connect(self, source: str, target: str, relation: p.Relation) -> p.Edge:
        """A typed edge between two entries (ids or keywords, each naming one entry)."""
        a, b = self._one_target(source), self._one_target(target)
        event = plan_connect(a, b, relation, self.store.edges([a.id]), self._clock())
        self.commit(event)
        return p.Edge(source=a.id, target=b.id, relation=relation, created_at=event.created_at)

    def graph(self, target: str, depth: int) -> p.GraphResult:
        """The entries within ``depth`` edges of one entry, and the edges among them."""
        start = self._one_target(target)
        distance, edges, truncated = walk(start.id, depth, self.store.edges)
        held = self.store.get_many(list(distance))
        nodes = [
            p.GraphNode(
                id=e.id,
                content=e.content,
                category=e.category,
                status=e.status,
                archived=e.archived,
                depth=distance[e.id],
            )
            for e in sorted(held.values(), key=lambda e: (distance[e.id], e.id))
        ]
        return p.GraphResult(nodes=nodes, edges=edges, truncated=truncated)

    def add_note(self, content: str) -> p.Note:
        """Keep a quick note (redacted, like everything memory keeps)."""
        note = p.Note(
            id=self._new_id(),
            content=_kept_text(content),
            created_at=self._clock(),
        )
        self.commit(NoteAdded(id=note.id, content=note.content, created_at=note.created_at))
        return note

    def notes(self, done: Sequence[str] = ()) -> p.NotesResult:
        """The pending notes, after marking those ``done`` names (ids or unique id prefixes)."""
        pending = self.store.notes()
        finished: list[str] = []
        for wanted in done:
            key = wanted.strip().lower()
            if len(key) < ID_PREFIX_MIN:  # as for entries: a short prefix names too much
                raise BadRequest(f"a note id needs at least {ID_PREFIX_MIN} characters: {wanted!r}")
            found = [n.id for n in pending if n.id == key or n.id.startswith(key)]
            if not found:
                raise EntryNotFound(f"no pending note {wanted!r} (see memctl notes)")
            if len(found) > 1:
                raise Ambiguous(f"{len(found)} pending notes start with {wanted!r}")
            finished.append(found[0])
        ids = tuple(dict.fromkeys(finished))
        if ids:
            self.commit(NotesDone(ids=ids, done_at=self._clock()))
            pending = self.store.notes()
        return p.NotesResult(notes=pending, done=list(ids))

    # ------------------------------------------------------------------ compaction (design §8)

    def entries_after(self, after_id: str, limit: int) -> list[p.Entry]:
        """A keyset page of every entry, archived included, in id order."""
        return self.store.entries_after(after_id, limit)

    def last_compacted_at(self) -> float | None:
        """When the last compaction that decided anything was planned (None: never)."""
        value = self.store.setting("last_compacted_at")
        return float(value) if isinstance(value, int | float) else None

    def apply_compaction(
        self,
        decisions: Sequence[CompactionEvent],
        *,
        ran_at: float,
        completed: bool,
        policy: CompactionPolicy,
    ) -> list[CompactionEvent]:
        """Apply the decisions that still hold for the entries as they are now, as one event
        in one transaction; returns those applied. An entry injected since the run read it was
        used now: its decision is dropped (the next run decides again), read from the accesses
        held in memory rather than flushed, which would cost a journal line and a transaction
        of their own each batch."""
        used = self._accesses.keys()
        current = self.store.get_many([d.id for d in decisions if d.id not in used])
        kept = tuple(d for d in decisions if still_holds(d, current.get(d.id), ran_at, policy))
        if kept or completed:
            self.commit(CompactionApplied(ran_at=ran_at, decisions=kept, completed=completed))
        return list(kept)

    def entry_counts(self) -> p.EntryCounts:
        return self.store.counts()

    # ------------------------------------------------------------------ accesses, aliases, budget

    def record_access(self, ids: list[str], now: float) -> None:
        """Count an injection as an access. Held in memory and journaled in batches by
        ``flush_accesses``: one event per few seconds instead of a write per prompt."""
        unknown = [i for i in ids if i not in self._accesses]
        current = self.store.get_many(unknown) if unknown else {}
        for entry_id in ids:
            if entry_id in self._accesses:
                count = self._accesses[entry_id][0]
            elif entry_id in current:
                count = current[entry_id].access_count
            else:
                continue
            self._accesses[entry_id] = (count + 1, now)
            self.accesses_since_compaction += 1

    def flush_accesses(self) -> None:
        if not self._accesses:
            return
        live = self.store.get_many(list(self._accesses))
        batch = tuple((i, n, t) for i, (n, t) in sorted(self._accesses.items()) if i in live)
        self._accesses.clear()
        if batch:
            self.commit(EntriesAccessed(batch))

    def aliases(self) -> dict[str, tuple[str, ...]]:
        """Default aliases overlaid with the project's own (empty synonyms switch one off)."""
        if self._aliases is None:
            merged = dict(retrieval.DEFAULT_ALIASES)
            for term, synonyms in self.store.aliases().items():
                if synonyms:
                    merged[term] = synonyms
                else:
                    merged.pop(term, None)
            self._aliases = merged
        return self._aliases

    def alias_add(self, term: str, synonyms: list[str]) -> p.Alias:
        key = _alias_term(term)
        words = [_alias_term(s) for s in synonyms]
        merged = tuple(dict.fromkeys([*self.aliases().get(key, ()), *words]))
        self.commit(AliasSet(key, merged))
        self._aliases = None
        return p.Alias(term=key, synonyms=list(merged), source="project")

    def alias_remove(self, term: str) -> None:
        key = _alias_term(term)
        if key not in self.aliases():
            raise EntryNotFound(f"no alias for {term!r}")
        if key in retrieval.DEFAULT_ALIASES:
            self.commit(AliasSet(key, ()))
        else:
            self.commit(AliasRemoved(key))
        self._aliases = None

    def alias_list(self) -> list[p.Alias]:
        own = self.store.aliases()
        return [
            p.Alias(term=t, synonyms=list(s), source="project" if t in own else "default")
            for t, s in sorted(self.aliases().items())
        ]

    def budget_ceiling(self, default: int) -> int:
        value = self.store.setting("budget_ceiling")
        return int(value) if isinstance(value, int) and value > 0 else default

    def set_budget_ceiling(self, tokens: int) -> None:
        self.commit(SettingChanged("budget_ceiling", tokens or None))

    def set_setting(self, key: str, value: int | str | bool | None) -> None:
        if self.store.setting(key) != value:
            self.commit(SettingChanged(key, value))

    def auto_memory_enabled(self) -> bool:
        """Whether capture learns from this project's transcripts (unset means on)."""
        return self.store.setting("auto_memory") != 0

    def set_auto_memory(self, enabled: bool) -> None:
        self.set_setting("auto_memory", enabled)

    def preset(self) -> p.PresetName | None:
        """The promotion preset chosen for this project; None: the daemon's default applies."""
        value = self.store.setting("preset")
        # Stored only by set_preset, from a validated request.
        return msgspec.convert(value, p.PresetName) if value else None

    def set_preset(self, name: p.PresetName) -> None:
        self.set_setting("preset", name)

    def review_quarantine(self, now: float) -> int:
        """Candidates past 24 h: confirmed if accessed, otherwise importance × 0.8 (design §7)."""
        self.flush_accesses()
        outcomes = review_quarantine(self.store.candidates_created_before(now - QUARANTINE_S), now)
        if outcomes:
            self.commit(QuarantineReviewed(tuple(outcomes)))
        return len(outcomes)

    # ------------------------------------------------------------------ reading

    def search_candidates(
        self,
        terms: dict[str, float],
        *,
        scope: SearchScope,
        active_files: Sequence[str],
        config: retrieval.RetrievalConfig,
        scan: int,
        keeping: retrieval.Keeping | None = None,
    ) -> Hits:
        """Retrieval candidates for weighted terms, read after every change so far that the
        scope cannot do without (read-your-writes): for the active entries, all but those of
        ``INDEX_MAY_LAG`` (the caller drops a hit the store holds as archived); for the
        archive, every one. A rebuild under way is finished first (``SearchIndex.retrieve``)."""
        self._index_for(scope)
        return self.index.retrieve(
            terms,
            scope=scope,
            active_files=active_files,
            config=config,
            scan=scan,
            keeping=keeping,
        )

    def _index_for(self, scope: SearchScope) -> None:
        """Bring the index up to every change a search of ``scope`` cannot do without."""
        wanted = self._changes if scope == "archived" else self._exact
        if wanted > self._indexed:
            self._settle_index(wait=True)  # the commit running may be the one that holds it
            if wanted > self._indexed:
                self.sync_index()

    def reader(self, scope: SearchScope | None) -> ProjectReader:
        """What a reader thread needs to serve one read of this project (``search``,
        ``inject``) off the owner thread. Taken on the owner thread, after every change it
        acknowledged: the index is brought up to what a search of ``scope`` cannot do without
        (None: the read does not search), as ``search_candidates`` would, and its searcher
        taken then; the reader's own database connection reads the last commit."""
        searcher = None
        if scope is not None:
            self._index_for(scope)
            searcher = self.index.searcher()
        return ProjectReader(
            self.index,
            searcher,
            self._reads,
            self.aliases(),
            index_lags=self.index_lags,
            clock=self._clock,
            slug=self.slug,
            generation=self.generation,
        )

    def saw_session(self, session_id: str, at: float) -> None:
        """A session showed a sign of life (a reader served its working memory)."""
        self._session_seen[session_id] = at

    def lookup(self, doc_ids: Sequence[str]) -> dict[str, p.Entry | SessionFinding]:
        """The entries and findings behind search hits, by document id (a finding's as
        ``f:<id>``); ones gone meanwhile are left out."""
        entry_ids, finding_ids = split_ids(doc_ids)
        found: dict[str, p.Entry | SessionFinding] = dict(self.store.get_many(entry_ids))
        if finding_ids:
            by_id = self.store.get_findings(finding_ids)
            found.update((FINDING_PREFIX + k, v) for k, v in by_id.items())
        return found

    def entries(self, ids: Sequence[str]) -> dict[str, p.Entry]:
        """id → entry for the ids memory holds."""
        return self.store.get_many(ids)

    def list_entries(
        self,
        *,
        category: p.Category | None,
        status: p.Status | None,
        archived: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[p.Entry], int]:
        """A page of entries, newest update first, and how many match. Access counts include
        the latest injections."""
        self.flush_accesses()
        return self.store.list_entries(
            category=category, status=status, archived=archived, limit=limit, offset=offset
        )

    def recent_confirmed(self, limit: int) -> list[p.Entry]:
        """The most recently updated confirmed entries (what a session starts with before it
        has a prompt)."""
        found, _total = self.store.list_entries(
            category=None, status="confirmed", archived=False, limit=limit, offset=0
        )
        return found

    def export(self, include_archived: bool, include_all: bool = False) -> list[p.Entry]:
        """Confirmed and pinned entries in id order (archived ones only when asked; with
        ``include_all`` every entry, candidates too), access counts current."""
        self.flush_accesses()
        return [
            e
            for e in self.store.iter_all()
            if include_all
            or ((include_archived or not e.archived) and e.status in core_share.SHARED_STATUSES)
        ]

    def edges_among(self, ids: set[str]) -> list[p.Edge]:
        """The edges whose two ends are among ``ids``."""
        return [e for e in self.store.all_edges() if e.source in ids and e.target in ids]

    # ------------------------------------------------------------------ sharing (core.share)

    def shared_text(self) -> bytes:
        """The shared file as this store would write it."""
        lines = self._shared_lines()
        return core_share.join(lines, self.store.all_edges(), self._share_entries)

    def known_shared_lines(self) -> set[bytes]:
        """The lines this store's shared file holds (edges too): a file's line among them
        needs no reading."""
        found = set(self._shared_lines().values())
        found.update(core_share.line(e) for e in self.store.all_edges())
        return found

    def _shared_lines(self) -> dict[str, bytes]:
        if self._share_lines is None:
            entries = self.store.shared_entries()
            self._share_lines = core_share.lines_of(entries, self.store.tombstones().values())
            self._share_entries = {e.id for e in entries if core_share.is_shared(e)}
            self._share_dirty.clear()
        if self._share_dirty:
            ids = sorted(self._share_dirty)
            self._share_dirty.clear()
            fresh = core_share.lines_of(self.store.get_many(ids).values(), ())
            fresh = core_share.lines_of((), self.store.tombstones(ids).values()) | fresh
            for entry_id in ids:
                if entry_id in fresh:
                    self._share_lines[entry_id] = fresh[entry_id]
                else:
                    self._share_lines.pop(entry_id, None)
            self._share_entries.difference_update(ids)
            self._share_entries.update(
                i for i in ids if fresh.get(i, b"").startswith(b'{"type":"entry"')
            )
        return self._share_lines

    def merge_shared(
        self,
        records: Sequence[core_share.Record],
        malformed: Sequence[core_share.Malformed],
        *,
        origin: str,
        arrival_is_use: bool = False,
    ) -> core_share.MergePlan:
        """Merge shared versions (a shared file's lines, an import's) into memory: what is newer
        than the store's own, as one audited event (``MemoryMerged``). A file with bad lines is
        recorded too, even when nothing else changes, so that the lines are not lost.
        ``arrival_is_use``: an entry new here counts as used when it arrived (the shared file
        carries no use; an export does, and an import keeps what it says)."""
        collapsed = core_share.collapse(records)
        if not collapsed.versions and not collapsed.edges and not malformed:
            return core_share.MergePlan()
        ids = list(collapsed.versions)
        local = self.store.get_many(ids)
        winners = core_share.newer(collapsed, local, self.store.tombstones(ids))
        owners: dict[str, p.Entry] = {}
        for version in winners:
            if isinstance(version, core_share.SharedEntry) and not version.archived:
                text = core_entries.fingerprint(version.content)
                if (owner := self.store.find_fingerprint(text)) is not None:
                    owners[text] = owner
        ends = list({i for key in collapsed.edges for i in key[:2]})
        present = set(self.store.get_many(ends))
        local_edges = {
            (e.source, e.target, e.relation): e.created_at
            for e in self.store.all_edges()
            if (e.source, e.target, e.relation) in collapsed.edges
        }
        plan = core_share.plan_merge(
            winners,
            collapsed.edges.values(),
            local=local,
            owners=owners,
            present=present,
            local_edges=local_edges,
            total=len(collapsed.versions),
            now=self._clock() if arrival_is_use else None,
        )
        if not plan.empty() or malformed:
            self.commit(
                MemoryMerged(
                    origin=origin,
                    entries=plan.entries,
                    deleted=plan.deleted,
                    twins=plan.twins,
                    edges=plan.edges,
                    skipped=tuple(malformed),
                    merged_at=self._clock(),
                )
            )
        return plan

    def share_setting(self) -> bool | None:
        """Whether the user turned sharing on or off here (None: never said)."""
        value = self.store.setting("share")
        return None if value is None else value != 0

    def set_share(self, enabled: bool) -> None:
        self.set_setting("share", enabled)

    def pinned(self, limit: int) -> list[p.Entry]:
        """Active pinned entries, most recently updated first."""
        return self.store.pinned(limit)

    def pinned_fingerprints(self) -> set[str]:
        return self.store.pinned_fingerprints()

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """Unresolved contradictions (entry_a, entry_b) involving any of ``ids``."""
        return self.store.active_conflicts(ids)

    def episodes(self, limit: int, query: str = "") -> list[Episode]:
        """The latest session episodes; with ``query``, those whose title, goal, outcome or
        decisions contain it (case-insensitive)."""
        needle = query.lower()
        if not needle:
            return self.store.episodes(limit)
        return [
            e
            for e in self.store.episodes(EPISODE_SEARCH_SCAN)
            if needle in f"{e.title} {e.goal} {e.outcome} {' '.join(e.decisions)}".lower()
        ][:limit]

    def session_findings(self, session_id: str) -> list[SessionFinding]:
        """A session's findings in transcript order."""
        return self.store.findings(session_id)

    def promoted_findings(self, finding_ids: Sequence[str]) -> set[str]:
        """Which of these findings an entry was promoted from."""
        return set(self.store.promoted_findings(list(finding_ids)))

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        """Findings of these sessions not promoted yet, most important first (session tier)."""
        return self.store.unpromoted_findings(session_ids, limit)

    def awaiting_review(self, limit: int) -> list[SessionFinding]:
        """Findings waiting for a user's review (not promoted, not settled, not in memory in
        the same words), one per text, newest session first."""
        return self.store.awaiting_review(limit)

    def review_count(self) -> int:
        """Candidates and findings waiting for review."""
        return self.store.counts().candidate + len(self.store.awaiting_review(REVIEW_COUNT_CAP))

    def findings_by_id(self, ids: Sequence[str]) -> dict[str, SessionFinding]:
        return self.store.get_findings(ids)

    def session(self, session_id: str) -> SessionRecord | None:
        """A captured session's transcript, cursor and state."""
        return self.store.session(session_id)

    def holds(self, fingerprint: str) -> bool:
        """Whether an active entry holds this text."""
        return self.store.find_fingerprint(fingerprint) is not None

    def now(self) -> float:
        return self._clock()

    def new_id(self) -> str:
        return self._new_id()

    def finding_spread(
        self, fingerprints: Sequence[str]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """For each fingerprint, the sessions and the agents whose findings carry it."""
        return self.store.spread(fingerprints)

    def promotable(self, finding: SessionFinding) -> bool:
        """Not already in memory, not promoted before, not something the user forgot."""
        return not (
            self.store.find_fingerprint(finding.fingerprint)
            or self.store.promoted_findings([finding.id])
            or self.store.is_forgotten(finding.fingerprint)
        )

    def audit_events(self, n: int, after_seq: int | None = None) -> list[p.AuditEvent]:
        """The newest ``n`` audit events (those after ``after_seq`` when given), oldest first."""
        return self.journal.tail(n, after_seq)

    def show(self, target: str) -> p.ShowResult:
        """One entry (by id, unique prefix or keyword), the audit events that name it and its
        edges (the memory browser's entry page)."""
        entry = self._one_target(target)
        named = [e for e in self.journal.tail(SHOW_HISTORY_SCAN) if entry.id in e.line]
        return p.ShowResult(
            entry=entry, history=named[-SHOW_HISTORY_MAX:], edges=self.store.edges([entry.id])
        )

    def audit_last_seq(self) -> int:
        """The sequence number of the newest audit event."""
        return self.journal.last_seq

    # ------------------------------------------------------------------ upkeep

    def sync_index(self, *, finish_rebuild: bool = True) -> None:
        """Bring the index up to the store now, waiting for a commit running in the background.
        A rebuild under way is finished first, unless ``finish_rebuild`` is False (closing),
        which leaves it to its steps: it catches up with every change when it ends. One that
        cannot be written (disk full, no permission) keeps serving what it last committed: the
        cause is reported once, and every later sync (a search, the ``index_commit`` job) tries
        again, so the index catches up by itself once the cause is gone; the store is the
        truth, nothing is lost meanwhile."""
        if self.index.rebuilding and not finish_rebuild:
            return
        if not (self.index.rebuilding or self.index.committing or self._changes > self._indexed):
            return
        changes = self._changes
        self._indexing = None
        try:
            self.index.sync(self.store)
        except IndexWriteFailed as exc:
            self._index_failed(exc)
            return
        self._index_written()
        self._indexed = changes
        self._unindexed.clear()
        self._prune_changes()
        self._verify_due = True  # on the next index tick: not on the search that waits here

    def commit_index_in_background(self) -> None:
        """Hand what the index lacks to a commit on the committer thread (``INDEX_SLICE``
        changes at most, one commit at a time), publishing the last one first if it is done;
        never waits on the disk. Compaction's batches and the index commit job keep the index
        up to date so; a search that cannot do without a change waits (``search_candidates``).
        Not while a rebuild goes on: it catches up with every change when it ends."""
        if self.index.rebuilding or not self._settle_index(wait=False) or self.index.committing:
            return  # (committing: a heal's commit, which ``_settle_index`` began)
        if self._changes == self._indexed:
            if self.index.merges_ended() or self._verify_due:
                self._verify_index()  # what the last writer's merges left
                if self.index.rebuilding or self.index.committing:
                    return
            # Idle since the last tick: the writer's memory goes back until the next write.
            self.index.release_writer()
            return
        changes, unindexed = self._changes, len(self._unindexed)
        try:
            took_all = self.index.commit_in_background(self.store, limit=INDEX_SLICE)
        except IndexWriteFailed as exc:
            self._index_failed(exc)
            return
        if self.index.committing:
            self._indexing = (changes, unindexed) if took_all else (None, 0)
        elif took_all:  # nothing was left to write
            self._indexed = changes
            del self._unindexed[:unindexed]
        # else a rebuild began (the index went missing): its steps, then a sync, catch up

    def _settle_index(self, *, wait: bool) -> bool:
        """Publish the background commit once done; False while it still runs. One that
        failed is reported (``sync_index``) and its changes are written again later."""
        indexing, self._indexing = self._indexing, None
        if indexing is None:
            return True
        try:
            if not self.index.settle(wait=wait):
                self._indexing = indexing
                return False
        except IndexWriteFailed as exc:
            self._index_failed(exc)
            return True
        self._index_written()
        holds, unindexed = indexing
        if holds is not None:
            self._indexed = max(self._indexed, holds)
        del self._unindexed[:unindexed]
        if self.index.applied_seq - self._pruned >= PRUNE_EVERY:  # a transaction (an fsync)
            self._prune_changes()
        self._verify_due = True  # by the index tick once idle: not on a search's path
        return True

    def _prune_changes(self) -> None:
        self.store.prune_changes(self.index.applied_seq)
        self._pruned = self.index.applied_seq

    def _index_failed(self, exc: IndexWriteFailed) -> None:
        if self._index_failure != str(exc):
            self._index_failure = str(exc)
            self._errors.record(
                f"{self.slug}: {exc}; searches read the index as last written until it "
                "can be written again (it catches up by itself)"
            )

    def _index_written(self) -> None:
        if self._index_failure is not None:
            self._index_failure = None
            self._errors.record(f"{self.slug}: the search index is written again", "warning")

    def index_backlog(self) -> int:
        """Store changes the index has not published."""
        return self.store.change_seq() - self.index.applied_seq

    @property
    def index_committing(self) -> bool:
        """A commit runs in the background (``commit_index_in_background``)."""
        return self.index.committing

    def on_index_committed(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (on the committer thread) whenever a background commit ends."""
        self.index.on_committed = wake

    @property
    def generation(self) -> tuple[int, int, int, int]:
        """Moves with every commit and every change of what the index publishes (a heal's
        commit too: ``SearchIndex.published``), and differs between two openings of the
        project (commits are counted from open): a search's result holds while this stays
        (``Recall``'s result cache)."""
        return self._opened, self._changes, self.index.applied_seq, self.index.published

    @property
    def index_lags(self) -> bool:
        """The index has not published every change (only ``INDEX_MAY_LAG`` ones, unless a
        search is about to wait for it)."""
        return self._changes > self._indexed

    @property
    def index_rebuilding(self) -> bool:
        """Whether an index rebuild is under way (a page per loop turn)."""
        return self.index.rebuilding

    def index_documents(self) -> int:
        """The documents the search index holds (entries and findings)."""
        return self.index.state().documents

    def index_rebuild_step(self) -> bool:
        """A page of an index rebuild under way (idle work); returns whether more remains."""
        return self.index.rebuild_step()

    def info(self) -> p.ProjectInfo:
        state = self.index.state()
        return p.ProjectInfo(
            root=str(self.root),
            slug=self.slug,
            entries=self.store.counts(),
            sessions=self.store.session_count(),
            last_compacted_at=self.compacted_at,
            open_conflicts=len(self.store.open_conflicts()),
            awaiting_review=self.review_count(),
            last_capture_at=self.store.last_capture_at(),
            bank=has_bank(self.root),
            size_bytes=data_size(self.dir),
            index=p.IndexInfo(
                documents=state.documents,
                applied_seq=state.applied_seq,
                rebuilt_at_open=state.rebuilt_at_open,
                rebuilding=None
                if state.rebuilding is None
                else p.Progress(done=state.rebuilding[0], total=state.rebuilding[1]),
            ),
        )

    def check(self, *, repair: bool = False) -> p.CheckResult:
        """The store's integrity, the audit chain, and the index holding the store's ids, each
        once (after the heal the daemon does by itself: ``_verify_index``); with ``repair`` an
        index that differs is rebuilt from the store (it is derived)."""
        db = self.store.integrity()
        chain = self.journal.verify()
        audit = "ok" if chain.ok else f"broken: {chain.problem}"
        self.sync_index()
        # What the daemon heals by itself after its next commit (a merge that ended since the
        # last one can have left an id twice), healed first: a difference found after is one
        # the heal did not mend.
        self._verify_index()
        self._settle_index(wait=True)
        if self.index.rebuilding:
            self.sync_index()
        found = problem = self._index_difference()
        if found is not None and repair:
            self.index.rebuild(self.store)
            problem = self._index_difference()
        index = problem or "ok"
        if found is not None and repair:
            done = "repaired" if problem is None else f"still {problem}"
            index = f"{done}: rebuilt from the store (it had {found})"
        return p.CheckResult(
            ok=db == "ok" and chain.ok and problem is None, database=db, audit=audit, index=index
        )

    def _index_difference(self) -> str | None:
        """How the index's documents differ from the store's entries and findings, or None."""
        indexed = self.index.ids()
        stored = {entry.id for entry in self.store.iter_all()}
        stored.update(FINDING_PREFIX + finding.id for finding in self.store.iter_findings())
        held = set(indexed)
        problems = []
        for what, ids in (
            ("in the index only", held - stored),
            ("in the store only", stored - held),
        ):
            if ids:
                named = sorted(ids)
                more = f" and {len(named) - 5} more" if len(named) > 5 else ""
                problems.append(f"{len(named)} {what}: {', '.join(named[:5])}{more}")
        if len(indexed) > len(held):
            twice = sorted(i for i, n in Counter(indexed).items() if n > 1)
            problems.append(f"{len(twice)} indexed twice: {', '.join(twice[:5])}")
        return "; ".join(problems) or None

    def close(self) -> None:
        self.closed = True  # a read still running on a reader thread leaves nothing to apply
        self._reads.close()
        self.flush_accesses()
        self.sync_index(finish_rebuild=False)
        self.index.close()
        self.store.close()
        self.journal.close()


class ProjectReader:
    """One read of a project on a reader thread (``server/readers.py``): the searcher and the
    aliases the owner took for it (``ProjectMemory.reader``), a database connection of its own
    while open (``with reader:``), and what the read leaves for the owner to apply: accesses,
    sessions seen, its latency (``Recall.settle_read``). It changes nothing itself. The
    methods are ``ProjectMemory``'s of the same names, as ``Recall`` uses them."""

    def __init__(
        self,
        index: SearchIndex,
        searcher: tantivy.Searcher | None,
        reads: ReadConnections,
        aliases: dict[str, tuple[str, ...]],
        *,
        index_lags: bool,
        clock: Callable[[], float],
        slug: str,
        generation: tuple[int, int, int, int],
    ) -> None:
        self._clock = clock
        self._index = index
        # Taken with the searcher on the owner thread: the result cache's key and generation.
        self.slug = slug
        self.generation = generation
        self._searcher = searcher
        self._reads = reads
        self._aliases = aliases
        self.index_lags = index_lags
        self._borrowed: contextlib.ExitStack | None = None
        self._conn: Store | None = None
        # For the owner: (ids, when) of each injection, (session, when) of each session seen,
        # and the read's time in ms.
        self.accessed: list[tuple[list[str], float]] = []
        self.sessions_seen: list[tuple[str, float]] = []
        self.ms: float | None = None

    def __enter__(self) -> ProjectReader:
        stack = contextlib.ExitStack()
        self._conn = stack.enter_context(self._reads.borrow())
        self._borrowed = stack
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        borrowed, self._borrowed, self._conn = self._borrowed, None, None
        if borrowed is not None:
            borrowed.close()

    @property
    def _store(self) -> Store:
        assert self._conn is not None, "read only inside `with reader:`"
        return self._conn

    def apply_to(self, project: ProjectMemory) -> None:
        """On the owner thread: what the read leaves for it (accesses, sessions seen); none
        when the project was closed meanwhile (``ProjectRegistry`` keeps a few open)."""
        if project.closed:
            return
        for ids, at in self.accessed:
            project.record_access(ids, at)
        for session, at in self.sessions_seen:
            project.saw_session(session, at)

    def aliases(self) -> dict[str, tuple[str, ...]]:
        return self._aliases

    def search_candidates(
        self,
        terms: dict[str, float],
        *,
        scope: SearchScope,
        active_files: Sequence[str],
        config: retrieval.RetrievalConfig,
        scan: int,
        keeping: retrieval.Keeping | None = None,
    ) -> Hits:
        assert self._searcher is not None, "the owner took no searcher for this read"
        return self._index.retrieve(
            terms,
            scope=scope,
            active_files=active_files,
            config=config,
            scan=scan,
            searcher=self._searcher,
            keeping=keeping,
        )

    def lookup(self, doc_ids: Sequence[str]) -> dict[str, p.Entry | SessionFinding]:
        entry_ids, finding_ids = split_ids(doc_ids)
        found: dict[str, p.Entry | SessionFinding] = dict(self._store.get_many(entry_ids))
        if finding_ids:
            by_id = self._store.get_findings(finding_ids)
            found.update((FINDING_PREFIX + k, v) for k, v in by_id.items())
        return found

    def entries(self, ids: Sequence[str]) -> dict[str, p.Entry]:
        return self._store.get_many(ids)

    def working_memory(self, session_id: str) -> list[p.Entry]:
        ids = self._store.working_memory(session_id)
        if not ids:
            return []
        self.sessions_seen.append((session_id, self._clock()))
        held = self._store.get_many(ids)
        return [held[i] for i in ids if i in held and not held[i].archived]

    def pinned(self, limit: int) -> list[p.Entry]:
        return self._store.pinned(limit)

    def unpromoted_findings(self, session_ids: Sequence[str], limit: int) -> list[SessionFinding]:
        return self._store.unpromoted_findings(session_ids, limit)

    def episodes(self, limit: int) -> list[Episode]:
        return self._store.episodes(limit)

    def active_conflicts(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        return self._store.active_conflicts(ids)

    def budget_ceiling(self, default: int) -> int:
        value = self._store.setting("budget_ceiling")
        return int(value) if isinstance(value, int) and value > 0 else default

    def recent_confirmed(self, limit: int) -> list[p.Entry]:
        found, _total = self._store.list_entries(
            category=None, status="confirmed", archived=False, limit=limit, offset=0
        )
        return found

    def list_entries(
        self,
        *,
        category: p.Category | None,
        status: p.Status | None,
        archived: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[p.Entry], int]:
        """As ``ProjectMemory.list_entries``, without the latest injections' access counts
        (those are the owner's until it flushes them)."""
        return self._store.list_entries(
            category=category, status=status, archived=archived, limit=limit, offset=offset
        )

    def record_access(self, ids: list[str], now: float) -> None:
        self.accessed.append((list(ids), now))


QUARANTINE_S = 24 * 3600
REVIEW_COUNT_CAP = 10_000  # findings counted for status at most
EPISODE_SEARCH_SCAN = 10_000  # episodes a text query looks through
SHOW_HISTORY_SCAN = 20_000  # audit events an entry page looks through for its history


def _kept_text(raw: str) -> str:
    """An entry's or a note's text as memory keeps it: cleaned and its size checked first, before
    redaction, whose cost grows with the text (a 256 KB import line must be refused, not
    redacted); then redacted and checked again (a marker can be longer than what it hides)."""
    return core_entries.clean_content(redact(core_entries.clean_content(raw)).text)


SHOW_HISTORY_MAX = 200
_CONFLICT_SCAN = retrieval.RetrievalConfig(prefix_min_length=1000)  # exact words only


def conflict_id(entry_a: str, entry_b: str) -> str:
    """A conflict's name for ``resolve``: both entries' short ids."""
    return f"{entry_a[:8]}-{entry_b[:8]}"


def _past(at: float | None, now: float) -> float | None:
    """A time from an import line, if it is a time in the past."""
    return at if at is not None and 0 < at <= now else None


def _alias_term(text: str) -> str:
    words = retrieval.keywords(text) or [text.strip().lower()]
    if len(words) != 1 or not words[0]:
        raise BadRequest(f"an alias term must be a single word, got {text!r}")
    return words[0]


def _ambiguity(target: str, found: list[p.Entry]) -> str:
    shown = "; ".join(f"{e.id[:8]} {e.content[:40]!r}" for e in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return f"{len(found)} entries match {target!r}: {shown}{more}"


PROJECT_FILE = "project.json"  # the project's root, so that the daemon knows it after a restart


class ProjectRecord(msgspec.Struct, frozen=True):
    root: str


def _record_root(directory: Path, root: Path) -> None:
    path = directory / PROJECT_FILE
    record = msgspec.json.encode(ProjectRecord(str(root)))
    try:
        if path.read_bytes() == record:
            return
    except OSError:
        pass
    write_atomic(path, record)


def data_size(directory: Path) -> int:
    """Bytes on disk under a project's data folder: database and WAL, index, audit log,
    backup."""
    total = 0
    for base, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def has_bank(root: Path) -> bool:
    return (root / BANK_DIRNAME).is_dir()


def describe_closed(known: p.KnownProject, data_root: Path) -> p.KnownProject:
    """``known`` with what its data folder says, read without opening the project: its
    database read-only (no migration, no index, no watcher), its size from the folder."""
    root = Path(known.path)
    folder = data_root / "projects" / project_slug(root)
    described = msgspec.structs.replace(known, bank=has_bank(root))
    if not (folder / "memory.db").exists():
        return described  # a memory-bank/ the daemon holds no memory for
    size = data_size(folder)
    try:
        store = SqliteStore.read_only(folder / "memory.db")
    except StoreCorrupt:
        return msgspec.structs.replace(described, held=True, size_bytes=size)
    try:
        counts = store.counts()
        return msgspec.structs.replace(
            described,
            held=True,
            entries=counts,
            awaiting_review=counts.candidate + len(store.awaiting_review(REVIEW_COUNT_CAP)),
            sessions=store.session_count(),
            last_capture_at=store.last_capture_at(),
            size_bytes=size,
        )
    except sqlite3.Error:
        return msgspec.structs.replace(described, held=True, size_bytes=size)
    finally:
        store.close()


def recorded_root(directory: Path) -> Path | None:
    """The root a project data folder belongs to, or None when it does not say (made before the
    record existed, or unreadable)."""
    try:
        return Path(
            msgspec.json.decode((directory / PROJECT_FILE).read_bytes(), type=ProjectRecord).root
        )
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _source(agent: str | None) -> p.Source:
    """Who wrote an entry by hand: the user (memctl), or the agent an MCP client names."""
    return p.Source(kind="user") if agent is None else p.Source(kind="agent", agent=agent)
