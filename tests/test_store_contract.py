"""The storage contract (``memoryd.store.base.Store``). Every implementation runs this suite:
each test taking ``store`` runs once per backend (SQLite in a temporary folder, and in memory).
The tests at the end, about files and migrations, are SQLite's own."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from memctl.protocol import Source
from memoryd.core.capture.findings import SessionFinding, finding_id
from memoryd.core.capture.promotion import QuarantineOutcome
from memoryd.core.entries import fingerprint, new_entry
from memoryd.core.events import (
    AliasRemoved,
    AliasSet,
    ArchivePurged,
    BankFileSynced,
    BankOptimised,
    CompactionApplied,
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
    FindingsDropped,
    FindingsRecorded,
    NoteAdded,
    NotesDone,
    QuarantineReviewed,
    ReviewAccepted,
    ReviewRejected,
    SessionFinalized,
    SessionInfo,
    SettingChanged,
)
from memoryd.core.events import WorkingMemoryFocused as Focused
from memoryd.core.events import WorkingMemoryReleased as Released
from memoryd.store.base import SessionRecord, Store, StoreConflict, StoreCorrupt
from memoryd.store.memory import MemoryStore
from memoryd.store.migrations import SCHEMA_VERSION, SchemaTooNew
from memoryd.store.sqlite import SqliteStore


@dataclass(frozen=True)
class Backend:
    open: Callable[[Path], Store]  # a new store (SQLite: in this folder)
    open_backup: Callable[[Path], Store]  # what ``backup`` wrote


BACKENDS = {
    "sqlite": Backend(lambda d: SqliteStore(d / "memory.db"), SqliteStore),
    "memory": Backend(lambda d: MemoryStore(), MemoryStore.open_backup),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture
def store(backend: Backend, tmp_path: Path) -> Iterator[Store]:
    s = backend.open(tmp_path)
    yield s
    s.close()


def _e(i: int, content: str | None = None, *, status="confirmed", now_override=None, **kw):
    return new_entry(
        entry_id=f"{i:032x}",
        content=content or f"entry number {i}",
        category="decision",
        status=status,
        now=float(i) if now_override is None else now_override,
        source=Source(kind="user"),
        **kw,
    )


def test_apply_records_audit_seq_and_is_idempotent(store) -> None:
    assert store.applied_audit_seq() == 0
    assert store.apply(EntryAdded(_e(1)), 1) == [_e(1).id]
    assert store.apply(EntryAdded(_e(1)), 1) == []  # replay of an applied event does nothing
    assert store.applied_audit_seq() == 1
    assert store.get(_e(1).id) == _e(1)


def test_a_request_is_recorded_with_its_events_and_its_reply(store) -> None:
    rid = "ab" * 16
    store.apply(EntryAdded(_e(1)), 1, (rid, "remember"))
    store.apply(EntryStatusChanged(id=_e(1).id, status="pinned", updated_at=9.0), 2, (rid, "x"))
    record = store.request_record(rid)
    assert record is not None and record.reply is None
    assert record.effects == [("entry_added", [_e(1).id]), ("entry_status_changed", [_e(1).id])]
    assert store.record_reply(rid, b"reply") and not store.record_reply(rid, b"again")
    assert store.request_record(rid).reply == b"reply"
    assert not store.record_reply("cd" * 16, b"no change, nothing kept")
    assert store.request_record("cd" * 16) is None
    store.apply(EntryAdded(_e(2)), 3, ("ef" * 16, "remember"))
    assert store.prune_requests(before=0.0, keep=1) == 1  # the newest kept
    assert store.request_record(rid) is None and store.request_record("ef" * 16) is not None


def test_every_event_kind(store) -> None:
    store.apply(EntriesImported((_e(1), _e(2), _e(3))), 1)
    store.apply(EntryReinforced(id=_e(1).id, importance=0.9, access_count=4, updated_at=50.0), 2)
    store.apply(EntryStatusChanged(id=_e(2).id, status="pinned", updated_at=60.0), 3)
    store.apply(EntriesForgotten((_e(3).id,)), 4)
    one, two = store.get(_e(1).id), store.get(_e(2).id)
    assert (one.importance, one.access_count, one.updated_at) == (0.9, 4, 50.0)
    assert two.status == "pinned" and store.get(_e(3).id) is None
    counts = store.counts()
    assert (counts.confirmed, counts.pinned, counts.archived) == (1, 1, 0)


def test_lookups(store) -> None:
    store.apply(
        EntriesImported((_e(1, "Use Redis for caching"), _e(2, "50% of_tests are slow"))), 1
    )
    assert store.find_fingerprint(_e(1, "use  redis FOR caching").fingerprint).id == _e(1).id
    assert [e.id for e in store.find_keyword("REDIS", 10)] == [_e(1).id]
    assert [e.id for e in store.find_keyword("50%", 10)] == [_e(2).id]  # LIKE wildcards escaped
    assert store.find_keyword("%", 10) == [] or all(
        "%" in e.content for e in store.find_keyword("%", 10)
    )
    assert [e.id for e in store.find_id_prefix("0000")] == [_e(1).id, _e(2).id]
    assert set(store.get_many([_e(1).id, "missing"])) == {_e(1).id}


def test_lookups_of_many_lengths(store) -> None:
    """Lists of any length find exactly what they name (SQLite pads its IN lists)."""
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 701))), 1)
    for n in (1, 8, 9, 16, 17, 300, 512, 513, 700):
        wanted = [_e(i).id for i in range(1, n + 1)]
        assert sorted(store.get_many([*wanted, "missing"])) == wanted
    assert store.active_conflicts([_e(i).id for i in range(1, 12)]) == []
    assert store.edges([_e(i).id for i in range(1, 12)]) == []


def test_listing_and_paging(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 8))), 1)
    page, total = store.list_entries(category=None, status=None, archived=False, limit=3, offset=0)
    assert total == 7 and [e.created_at for e in page] == [7.0, 6.0, 5.0]
    page, _ = store.list_entries(
        category="decision", status="confirmed", archived=False, limit=3, offset=6
    )
    assert [e.created_at for e in page] == [1.0]
    assert store.list_entries(category="error", status=None, archived=False, limit=5, offset=0) == (
        [],
        0,
    )
    assert [e.id for e in store.iter_all()] == sorted(_e(i).id for i in range(1, 8))


def test_change_sequence(store) -> None:
    assert store.change_seq() == 0
    store.apply(EntryAdded(_e(1)), 1)
    store.apply(EntryAdded(_e(2)), 2)
    seq = store.change_seq()
    store.apply(EntriesForgotten((_e(1).id,)), 3)
    ids, now = store.changed_since(seq)
    assert ids == [_e(1).id] and now > seq
    store.prune_changes(now)
    assert store.change_seq() == now  # pruning never moves the sequence backwards


def test_unique_active_fingerprint(store) -> None:
    store.apply(EntryAdded(_e(1, "same text")), 1)
    with pytest.raises(StoreConflict):
        store.apply(EntryAdded(_e(2, "Same  text")), 2)
    assert store.applied_audit_seq() == 1  # the failed transaction left nothing behind
    assert store.get(_e(2).id) is None and store.change_seq() == 1


def test_backup_is_consistent(store, backend: Backend, tmp_path: Path) -> None:
    store.apply(EntryAdded(_e(1)), 7)
    assert store.backup(tmp_path / "copy.db") == 7
    copy = backend.open_backup(tmp_path / "copy.db")
    assert copy.get(_e(1).id) == _e(1) and copy.applied_audit_seq() == 7
    assert copy.integrity() == "ok"
    copy.close()


def test_conflicting_events_are_refused_whole(store) -> None:
    store.apply(EntryAdded(_e(1)), 1)
    with pytest.raises(StoreConflict):
        store.apply(EntryAdded(_e(1)), 2)  # the id exists
    with pytest.raises(StoreConflict):  # the third clashes with the first: none is imported
        store.apply(EntriesImported((_e(2), _e(3), _e(4, "entry number 2"))), 2)
    assert store.get_many([_e(2).id, _e(3).id]) == {} and store.applied_audit_seq() == 1
    assert store.change_seq() == 1 and store.changed_since(0) == ([_e(1).id], 1)


def test_changes_to_unknown_ids_change_nothing_but_are_logged(store) -> None:
    assert store.apply(EntryStatusChanged(id="nope", status="pinned", updated_at=1.0), 1) == [
        "nope"
    ]
    assert store.get("nope") is None and store.changed_since(0) == (["nope"], 1)


def test_change_log_dedups_in_first_change_order(store) -> None:
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    store.apply(EntryStatusChanged(id=_e(2).id, status="pinned", updated_at=9.0), 2)
    store.apply(EntryStatusChanged(id=_e(1).id, status="pinned", updated_at=9.0), 3)
    store.apply(AliasSet("db", ("database",)), 4)  # not an entry: no change recorded
    ids, seq = store.changed_since(0)
    assert ids == [_e(1).id, _e(2).id] and seq == store.change_seq() == 4
    assert store.changed_since(seq) == ([], seq)
    assert store.changed_since(seq + 5) == ([], seq + 5)  # a reader ahead is not moved back
    # A reader may take the changes a few at a time, each time up to the last one it took.
    assert store.changed_since(0, limit=2) == ([_e(1).id, _e(2).id], 2)
    assert store.changed_since(2, limit=1) == ([_e(2).id], 3)
    store.prune_changes(2)
    assert store.changed_since(0) == ([_e(2).id, _e(1).id], 4)  # seqs 3 and 4 are kept


def test_pinned_and_their_fingerprints(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 5))), 1)
    store.apply(EntryStatusChanged(id=_e(1).id, status="pinned", updated_at=30.0), 2)
    store.apply(EntryStatusChanged(id=_e(3).id, status="pinned", updated_at=40.0), 3)
    assert [e.id for e in store.pinned(10)] == [_e(3).id, _e(1).id]
    assert [e.id for e in store.pinned(1)] == [_e(3).id]
    assert store.pinned_fingerprints() == {_e(1).fingerprint, _e(3).fingerprint}
    counts = store.counts()
    assert (counts.pinned, counts.confirmed, counts.candidate) == (2, 2, 0)


def test_ties_are_broken_by_id(store) -> None:
    same_time = tuple(_e(i, now_override=5.0) for i in (3, 1, 2))
    store.apply(EntriesImported(same_time), 1)
    page, total = store.list_entries(category=None, status=None, archived=False, limit=9, offset=0)
    assert [e.id for e in page] == [_e(1).id, _e(2).id, _e(3).id] and total == 3
    assert [e.id for e in store.find_keyword("entry", 9)] == [_e(1).id, _e(2).id, _e(3).id]
    assert [e.id for e in store.find_keyword("entry", 2)] == [_e(1).id, _e(2).id]


def test_lookups_fold_ascii_case_only(store) -> None:
    store.apply(EntriesImported((_e(1, "Ärger with CACHE"), _e(0xAB, "ärger elsewhere"))), 1)
    assert [e.id for e in store.find_keyword("cache", 9)] == [_e(1).id]
    assert [e.id for e in store.find_keyword("ärger", 9)] == [_e(0xAB).id]  # as SQLite's LIKE
    assert [e.id for e in store.find_id_prefix(_e(0xAB).id.upper())] == [_e(0xAB).id]
    assert store.find_id_prefix("f") == []


def test_find_id_prefix_gives_at_most_ten_in_id_order(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(12, 0, -1))), 1)
    assert [e.id for e in store.find_id_prefix("000")] == [_e(i).id for i in range(1, 11)]


def test_candidates_by_age(store) -> None:
    store.apply(
        EntriesImported(
            (
                _e(3, status="candidate"),
                _e(1, status="candidate"),
                _e(2),  # confirmed: not a candidate
                _e(9, status="candidate"),  # too young
            )
        ),
        1,
    )
    assert [e.id for e in store.candidates_created_before(5.0)] == [_e(1).id, _e(3).id]


def test_quarantine_review_changes_candidates_only(store) -> None:
    store.apply(EntriesImported((_e(1, status="candidate"), _e(2))), 1)
    outcomes = tuple(
        QuarantineOutcome(
            entry_id=e.id, action="confirmed", status="confirmed", importance=0.9, updated_at=70.0
        )
        for e in (_e(1), _e(2))
    )
    assert store.apply(QuarantineReviewed(outcomes), 2) == [_e(1).id, _e(2).id]
    one, two = store.get(_e(1).id), store.get(_e(2).id)
    assert (one.status, one.importance, one.updated_at) == ("confirmed", 0.9, 70.0)
    assert two == _e(2)  # was confirmed already: untouched


def test_accesses_are_absolute(store) -> None:
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    event = EntriesAccessed(((_e(1).id, 3, 50.0), (_e(2).id, 1, 51.0), ("gone", 9, 52.0)))
    assert store.apply(event, 2) == [_e(1).id, _e(2).id, "gone"]
    store.apply(event, 2)  # replayed: nothing moves
    assert (store.get(_e(1).id).access_count, store.get(_e(1).id).last_accessed_at) == (3, 50.0)
    assert store.get(_e(2).id).access_count == 1


def test_forgetting_is_remembered_until_remembered_again(store) -> None:
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    store.apply(ConflictDetected(_e(1).id, _e(2).id, "contradictory", 5.0), 2)
    assert store.active_conflicts([_e(2).id]) == [(_e(1).id, _e(2).id)]
    store.apply(EntriesForgotten((_e(1).id,)), 3)
    assert store.is_forgotten(_e(1).fingerprint) and not store.is_forgotten(_e(2).fingerprint)
    assert store.active_conflicts([_e(2).id]) == []  # a forgotten entry's conflicts go with it
    assert store.find_fingerprint(_e(1).fingerprint) is None
    store.apply(EntriesImported((_e(11, "entry number 1"),)), 4)
    assert store.is_forgotten(_e(1).fingerprint)  # an import does not lift a forget...
    store.apply(EntriesForgotten((_e(11).id,)), 5)
    store.apply(EntryAdded(_e(12, "entry number 1")), 6)
    assert not store.is_forgotten(_e(1).fingerprint)  # ...remembering it by hand does


def test_conflicts(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 5))), 1)
    assert store.apply(ConflictDetected(_e(3).id, _e(4).id, "contradictory", 9.0), 2) == []
    store.apply(ConflictDetected(_e(1).id, _e(2).id, "contradictory", 5.0), 3)
    store.apply(ConflictDetected(_e(1).id, _e(2).id, "superseded", 6.0), 4)  # known pair: kept
    pairs = store.active_conflicts([_e(2).id, _e(4).id])
    assert pairs == [(_e(1).id, _e(2).id), (_e(3).id, _e(4).id)]  # in detection order
    assert store.active_conflicts([]) == [] and store.active_conflicts(["other"]) == []


def test_aliases(store) -> None:
    assert store.aliases() == {}
    store.apply(AliasSet("db", ("database", "sqlite")), 1)
    store.apply(AliasSet("auth", ()), 2)  # switches a default off
    store.apply(AliasSet("db", ("postgres",)), 3)
    assert store.aliases() == {"db": ("postgres",), "auth": ()}
    store.apply(AliasRemoved("db"), 4)
    store.apply(AliasRemoved("never-set"), 5)
    assert store.aliases() == {"auth": ()}


def test_settings(store) -> None:
    assert store.setting("auto_memory") is None
    store.apply(SettingChanged("auto_memory", False), 1)
    store.apply(SettingChanged("preset", "aggressive"), 2)
    store.apply(SettingChanged("budget_ceiling", 1200), 3)
    assert store.setting("auto_memory") == 0 and store.setting("auto_memory") is not None
    assert (store.setting("preset"), store.setting("budget_ceiling")) == ("aggressive", 1200)
    store.apply(SettingChanged("auto_memory", True), 4)
    store.apply(SettingChanged("budget_ceiling", None), 5)
    assert (store.setting("auto_memory"), store.setting("budget_ceiling")) == (1, None)


def test_bank_sync_records_nothing_in_memory(store) -> None:
    event = BankFileSynced(
        file="memory-bank/progress.md", applied=("update",), written=True, sha="x", synced_at=1.0
    )
    assert store.apply(event, 1) == []
    optimised = BankOptimised(
        trigger="schedule",
        budget=5000,
        tokens_before=6000,
        tokens_after=4900,
        changed=("memory-bank/progress.md",),
        archived=("memory-bank/archive/progress.md",),
        optimised_at=2.0,
    )
    assert store.apply(optimised, 2) == []
    assert store.applied_audit_seq() == 2 and store.change_seq() == 0


# ---------------------------------------------------------------------- session memory


def _info(session: str, offset: int = 0, agent: str = "claude", **kw) -> SessionInfo:
    return SessionInfo(
        id=session,
        agent=agent,
        transcript_path=f"/t/{session}.jsonl",
        transcript_inode=7,
        transcript_offset=offset,
        created_at=kw.pop("created_at", 1.0),
        **kw,
    )


def _f(session: str, content: str, offset: int, importance: float = 0.5, **kw) -> SessionFinding:
    fp = fingerprint(content)
    return SessionFinding(
        id=finding_id(session, fp),
        fingerprint=fp,
        content=content,
        category="discovery",
        importance=importance,
        confidence=0.8,
        rule_id="rule",
        agent=kw.pop("agent", "claude"),
        session_id=session,
        offset=offset,
        **kw,
    )


def _episode(session: str, ended_at: float | None, eid: str | None = None) -> Episode:
    return Episode(
        id=eid or f"ep-{session}",
        session_id=session,
        agent="claude",
        title=f"work of {session}",
        goal="",
        decisions=(),
        outcome="done",
        files=(),
        turns=2,
        tool_calls=1,
        errors=0,
        started_at=0.0,
        ended_at=ended_at,
    )


def test_findings_are_recorded_with_their_session(store) -> None:
    a1, a2 = _f("s1", "uses tantivy", 20, 0.4), _f("s1", "tests are slow", 10, 0.9)
    ids = store.apply(FindingsRecorded(_info("s1", offset=30), (a1, a2)), 1)
    assert ids == ["f:" + a1.id, "f:" + a2.id]
    assert store.changed_since(0)[0] == ids  # findings share the change log, prefixed
    assert store.findings("s1") == [a2, a1]  # transcript order
    assert store.get_findings([a1.id, "missing"]) == {a1.id: a1}
    assert list(store.iter_findings()) == sorted([a1, a2], key=lambda f: f.id)
    assert (store.session_count(), store.finding_count()) == (1, 2)
    assert store.session("s1") == SessionRecord(
        id="s1",
        agent="claude",
        parent_session_id=None,
        transcript_path="/t/s1.jsonl",
        transcript_inode=7,
        transcript_offset=30,
        created_at=1.0,
        finalized_at=None,
    )
    assert store.session("other") is None and store.findings("other") == []


def test_a_checkpoint_moves_the_cursor_and_refines_findings(store) -> None:
    first = _f("s1", "uses tantivy", 20, 0.4, tags=("x",))
    store.apply(FindingsRecorded(_info("s1", offset=30, parent_session_id="p"), (first,)), 1)
    refined = _f("s1", "uses tantivy", 99, 0.8, tags=("y",), resolved_error=True, accepted=True)
    later = _info("s1", offset=80, agent="codex", created_at=5.0)
    store.apply(FindingsRecorded(later, (refined,)), 2)
    session = store.session("s1")
    assert (session.transcript_offset, session.agent, session.created_at) == (80, "claude", 1.0)
    assert session.parent_session_id == "p"
    [held] = store.findings("s1")
    assert (held.importance, held.resolved_error, held.accepted) == (0.8, True, True)  # refined
    assert (held.offset, held.tags) == (20, ("x",))  # its origin stays
    assert store.finding_count() == 1


def test_a_second_finding_of_one_fingerprint_in_a_session_is_refused(store) -> None:
    one = _f("s1", "uses tantivy", 20)
    store.apply(FindingsRecorded(_info("s1"), (one,)), 1)
    clash = SessionFinding(**{**_asdict(one), "id": "another-id"})
    with pytest.raises(StoreConflict):
        store.apply(FindingsRecorded(_info("s1", offset=50), (_f("s1", "new", 40), clash)), 2)
    assert store.finding_count() == 1 and store.session("s1").transcript_offset == 0


def test_the_final_pass_drops_what_checkpoints_found(store) -> None:
    """Checkpoint findings the final pass no longer finds are deleted (and leave the change log
    so the index drops them); one already promoted, or of another session, stays."""
    stale, kept, promoted = _f("s1", "stale", 1), _f("s1", "kept", 2), _f("s1", "promoted", 3)
    other = _f("s2", "stale", 1)
    store.apply(FindingsRecorded(_info("s1"), (stale, kept, promoted)), 1)
    store.apply(FindingsRecorded(_info("s2"), (other,)), 2)
    store.apply(
        SessionFinalized(
            session_id="s1",
            reason="idle",
            finalized_at=5.0,
            episode=_episode("s1", 5.0),
            decisions=(),
            promoted=(_e(1, "promoted", status="candidate"),),
            promoted_from=((promoted.id, _e(1).id),),
        ),
        3,
    )
    drop = FindingsDropped(session_id="s1", ids=(stale.id, promoted.id, other.id, "missing"))
    before = store.change_seq()
    assert store.apply(drop, 4) == ["f:" + stale.id]
    assert store.changed_since(before)[0] == ["f:" + stale.id]
    assert store.findings("s1") == [kept, promoted]
    assert store.findings("s2") == [other] and store.get_findings([stale.id]) == {}
    assert store.apply(drop, 5) == [] and store.finding_count() == 3  # replay: nothing more
    # The fingerprint is free again: a later pass may find the same text anew.
    store.apply(FindingsRecorded(_info("s1", offset=9), (stale,)), 6)
    assert store.finding_count() == 4


def test_session_tier_and_spread(store) -> None:
    s1 = (_f("s1", "alpha", 1, 0.3), _f("s1", "beta", 2, 0.9), _f("s1", "gamma", 3, 0.3))
    s2 = (_f("s2", "alpha", 1, 0.5, agent="codex"),)
    store.apply(FindingsRecorded(_info("s1"), s1), 1)
    store.apply(FindingsRecorded(_info("s2", agent="codex"), s2), 2)
    found = store.unpromoted_findings(["s1", "s2"], 10)
    assert [f.content for f in found] == ["beta", "alpha", "alpha", "gamma"]
    assert [f.session_id for f in found][1:3] == ["s2", "s1"]  # importance, then offset
    assert len(store.unpromoted_findings(["s1"], 2)) == 2
    assert store.unpromoted_findings([], 5) == []
    sessions, agents = store.spread([fingerprint("alpha"), fingerprint("beta"), "none"])
    assert sessions == {fingerprint("alpha"): {"s1", "s2"}, fingerprint("beta"): {"s1"}}
    assert agents == {fingerprint("alpha"): {"claude", "codex"}, fingerprint("beta"): {"claude"}}


def test_finalizing_promotes_and_is_safe_to_replay(store) -> None:
    alpha, beta = _f("s1", "alpha", 1), _f("s1", "beta", 2)
    store.apply(FindingsRecorded(_info("s1"), (alpha, beta)), 1)
    store.apply(EntryAdded(_e(5, "beta")), 2)  # remembered by hand meanwhile
    promoted = (_e(1, "alpha", status="candidate"), _e(2, "beta", status="candidate"))
    done = SessionFinalized(
        session_id="s1",
        reason="idle",
        finalized_at=60.0,
        episode=_episode("s1", 60.0),
        decisions=(),
        promoted=promoted,
        promoted_from=((alpha.id, _e(1).id), (beta.id, _e(2).id)),
    )
    ids = store.apply(done, 3)
    assert ids == [_e(1).id, _e(2).id, "f:" + alpha.id, "f:" + beta.id]
    assert store.get(_e(1).id).status == "candidate"
    assert store.get(_e(2).id) is None  # its fingerprint was taken: skipped, not an error
    assert store.find_fingerprint(fingerprint("beta")).id == _e(5).id
    assert store.promoted_findings([alpha.id, beta.id, "x"]) == {alpha.id, beta.id}
    assert store.unpromoted_findings(["s1"], 10) == []
    assert store.session("s1").finalized_at == 60.0
    assert store.episodes(5) == [_episode("s1", 60.0)]
    again = SessionFinalized(**{**_asdict(done), "finalized_at": 61.0})
    store.apply(again, 4)  # a later close of the same session: no failure, one episode
    assert len(store.episodes(5)) == 1 and store.counts().candidate == 1


def test_a_session_finalized_without_an_episode(store) -> None:
    """A sub-agent's warm-up closes with no episode: the session is finalized, nothing else."""
    store.apply(FindingsRecorded(_info("s1/a1"), ()), 1)
    done = SessionFinalized(
        session_id="s1/a1", reason="idle", finalized_at=9.0, episode=None, decisions=(), promoted=()
    )
    assert store.apply(done, 2) == []
    assert store.episodes(5) == [] and store.session("s1/a1").finalized_at == 9.0


def test_episodes_latest_first(store) -> None:
    for seq, (session, ended) in enumerate(
        [("s1", 10.0), ("s2", None), ("s3", 30.0), ("s4", 20.0)], start=1
    ):
        done = SessionFinalized(
            session_id=session,
            reason="idle",
            finalized_at=1.0,
            episode=_episode(session, ended),
            decisions=(),
            promoted=(),
        )
        assert store.apply(done, seq) == []
    assert [e.session_id for e in store.episodes(10)] == ["s3", "s4", "s1", "s2"]
    assert [e.session_id for e in store.episodes(2)] == ["s3", "s4"]
    assert [e.session_id for e in store.episodes(10, session_id="s4")] == ["s4"]


def test_state_survives_backup(store, backend: Backend, tmp_path: Path) -> None:
    """A backup holds all of it, not only entries: the daemon restores from it."""
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    store.apply(AliasSet("db", ("database",)), 2)
    store.apply(SettingChanged("preset", "minimal"), 3)
    found = _f("s1", "alpha", 1)
    store.apply(FindingsRecorded(_info("s1"), (found,)), 4)
    store.apply(ConflictDetected(_e(1).id, _e(2).id, "contradictory", 3.0), 5)
    store.apply(EntriesForgotten((_e(2).id,)), 6)
    store.apply(EntryAdded(_e(3)), 7)
    assert store.backup(tmp_path / "copy") == 7
    copy = backend.open_backup(tmp_path / "copy")
    assert list(copy.iter_all()) == list(store.iter_all())
    assert copy.aliases() == {"db": ("database",)} and copy.setting("preset") == "minimal"
    assert copy.findings("s1") == [found] and copy.is_forgotten(_e(2).fingerprint)
    assert copy.changed_since(0) == store.changed_since(0)
    assert copy.change_seq() == store.change_seq()
    with pytest.raises(StoreConflict):
        copy.apply(EntryAdded(_e(3)), 8)
    copy.close()


def test_integrity(store) -> None:
    store.apply(EntryAdded(_e(1)), 1)
    assert store.integrity() == "ok"


def _asdict(struct) -> dict:
    return msgspec.structs.asdict(struct)


# ---------------------------------------------------------------------- SQLite's own


def test_sqlite_refusal_is_the_contract_error(tmp_path: Path) -> None:
    """The database's own constraint error does not leak past the contract."""
    store = SqliteStore(tmp_path / "memory.db")
    store.apply(EntryAdded(_e(1)), 1)
    with pytest.raises(StoreConflict) as caught:
        store.apply(EntryAdded(_e(1)), 2)
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    store.close()


def test_in_lists_take_few_statement_texts(tmp_path: Path) -> None:
    """sqlite3 keeps each statement text it ran prepared (~200 bytes a placeholder): lookups
    of every length up to 600 share a dozen texts, not one each (issue 12: ~5 MB after a
    compaction's batches)."""
    store = SqliteStore(tmp_path / "memory.db")
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 601))), 1)
    texts: set[str] = set()  # as run, each value shown as "?" again
    store._conn.set_trace_callback(lambda sql: texts.add(re.sub(r"'[^']*'", "?", sql)))
    for n in range(1, 601):
        assert len(store.get_many([_e(i).id for i in range(1, n + 1)])) == n
    store._conn.set_trace_callback(None)
    assert len(texts) <= 16
    store.close()


def test_corrupt_and_too_new_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite" * 500)
    with pytest.raises(StoreCorrupt):
        SqliteStore(bad)
    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaTooNew):
        SqliteStore(newer)


def test_migrations_create_every_table(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "memory.db")
    tables = {
        r[0] for r in store._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert {
        "entries",
        "edges",
        "episodes",
        "sessions",
        "findings",
        "conflicts",
        "aliases",
        "notes",
        "settings",
        "working_memory",
        "changes",
        "meta",
    } <= tables
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


# --------------------------------------------------------------------------- lifecycle


def test_reinforcing_is_an_access(store) -> None:
    store.apply(EntriesImported((_e(1),)), 1)
    store.apply(EntryReinforced(_e(1).id, 0.8, 1, 50.0, last_accessed_at=50.0), 2)
    assert store.get(_e(1).id).last_accessed_at == 50.0
    store.apply(EntryReinforced(_e(1).id, 0.9, 2, 60.0), 3)  # an old event: the time stays
    assert store.get(_e(1).id).last_accessed_at == 50.0


def test_compaction_archives_and_purges(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 6))), 1)
    store.apply(ConflictDetected(_e(4).id, _e(5).id, "contradictory", 5.0), 2)
    store.apply(EntriesArchived(ids=(_e(4).id,), archived_at=10.0), 3)
    decisions = (
        EntryExpired(
            id=_e(1).id,
            category="decision",
            ttl_days=90,
            days_since_access=100.0,
            access_count=0,
            archived_at=70.0,
        ),
        EntryEvicted(
            id=_e(2).id,
            decayed=0.1,
            cutoff=0.2,
            active_before=3001,
            soft_limit=3000,
            target=2700,
            archived_at=70.0,
        ),
        EntryDecayed(
            id=_e(3).id,
            importance=0.7,
            decayed_from=0.7,
            decayed=0.6,
            days_since_access=20.0,
            status_multiplier=1.0,
            access_resistance=0.5,
            decayed_at=70.0,
        ),
        ArchivePurged(
            id=_e(4).id,
            archived_reason="user",
            archived_at=10.0,
            days_archived=400.0,
            archive_days=365,
            purged_at=70.0,
        ),
    )
    event = CompactionApplied(ran_at=70.0, decisions=decisions, completed=True)
    assert store.apply(event, 4) == [_e(i).id for i in (1, 2, 4)]  # a decay changes nothing
    one, two, three = store.get(_e(1).id), store.get(_e(2).id), store.get(_e(3).id)
    assert (one.archived, one.archived_reason, one.updated_at) == (True, "stale", 70.0)
    assert (two.archived, two.archived_reason) == (True, "evicted")
    assert three == _e(3)  # decay is derived: nothing stored changes
    assert store.get(_e(4).id) is None and store.active_conflicts([_e(5).id]) == []
    assert not store.is_forgotten(_e(4).fingerprint)  # purged, not forgotten
    assert store.setting("last_compacted_at") == 70.0
    assert store.find_fingerprint(_e(1).fingerprint) is None
    store.apply(EntryAdded(_e(11, "entry number 1")), 5)  # its text can be remembered again
    counts = store.counts()
    assert (counts.confirmed, counts.archived) == (3, 2)


def test_archive_unarchive_and_supersede(store) -> None:
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    assert store.apply(EntriesArchived(ids=(_e(1).id,), archived_at=20.0), 2) == [_e(1).id]
    store.apply(EntriesArchived(ids=(_e(1).id,), archived_at=30.0), 3)  # again: time kept
    held = store.get(_e(1).id)
    assert (held.archived, held.archived_reason, held.updated_at) == (True, "user", 20.0)
    store.apply(EntryUnarchived(id=_e(1).id, updated_at=40.0), 4)
    held = store.get(_e(1).id)
    assert (held.archived, held.archived_reason, held.updated_at) == (False, None, 40.0)
    assert store.find_fingerprint(_e(1).fingerprint) == held
    new = _e(3, "entry number 2, corrected")
    assert store.apply(EntrySuperseded(old_id=_e(2).id, entry=new, superseded_at=50.0), 5) == [
        _e(2).id,
        new.id,
    ]
    old = store.get(_e(2).id)
    assert (old.archived, old.archived_reason, old.superseded_by) == (True, "superseded", new.id)
    assert store.get(new.id) == new


def test_unarchiving_beside_an_active_twin_is_refused(store) -> None:
    store.apply(EntriesImported((_e(1),)), 1)
    store.apply(EntriesArchived(ids=(_e(1).id,), archived_at=20.0), 2)
    store.apply(EntryAdded(_e(2, "entry number 1")), 3)
    with pytest.raises(StoreConflict):
        store.apply(EntryUnarchived(id=_e(1).id, updated_at=40.0), 4)
    assert store.applied_audit_seq() == 3 and store.get(_e(1).id).archived


def test_keyset_pages(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 8))), 1)
    store.apply(EntriesArchived(ids=(_e(3).id,), archived_at=20.0), 2)
    pages, after = [], ""
    while page := store.entries_after(after, 3):
        pages.append([e.id for e in page])
        after = page[-1].id
    assert pages == [[_e(i).id for i in (1, 2, 3)], [_e(i).id for i in (4, 5, 6)], [_e(7).id]]


def test_open_conflicts_and_resolving_them(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 7))), 1)
    store.apply(ConflictDetected(_e(1).id, _e(2).id, "contradictory", 5.0), 2)
    store.apply(ConflictDetected(_e(3).id, _e(4).id, "contradictory", 6.0), 3)
    store.apply(ConflictDetected(_e(5).id, _e(6).id, "contradictory", 7.0), 4)
    store.apply(EntriesArchived(ids=(_e(6).id,), archived_at=8.0), 5)  # not open: one archived
    assert [c[:2] for c in store.open_conflicts()] == [(_e(1).id, _e(2).id), (_e(3).id, _e(4).id)]
    resolved = ConflictResolved(entry_a=_e(1).id, entry_b=_e(2).id, kept=_e(2).id, resolved_at=9.0)
    assert store.apply(resolved, 6) == [_e(1).id]
    old = store.get(_e(1).id)
    assert (old.archived, old.archived_reason, old.superseded_by) == (True, "superseded", _e(2).id)
    both = ConflictResolved(entry_a=_e(3).id, entry_b=_e(4).id, kept=None, resolved_at=10.0)
    assert store.apply(both, 7) == []
    assert store.open_conflicts() == [] and store.active_conflicts([_e(3).id]) == []
    assert not store.get(_e(3).id).archived and not store.get(_e(4).id).archived


def test_review_waits_newest_first_one_per_text(store) -> None:
    store.apply(FindingsRecorded(_info("s1", created_at=1.0), (_f("s1", "alpha", 1),)), 1)
    later = (_f("s2", "alpha", 1), _f("s2", "beta", 5), _f("s2", "held", 9))
    store.apply(FindingsRecorded(_info("s2", created_at=2.0), later), 2)
    store.apply(EntryAdded(_e(1, "held")), 3)  # in memory in the same words: nothing to review
    waiting = store.awaiting_review(10)
    assert [(f.session_id, f.content) for f in waiting] == [("s2", "beta"), ("s2", "alpha")]
    assert len(store.awaiting_review(1)) == 1


def test_review_accept_confirms_promotes_and_replaces(store) -> None:
    alpha, beta = _f("s1", "alpha", 1), _f("s1", "beta", 2)
    store.apply(FindingsRecorded(_info("s1"), (alpha, beta)), 1)
    candidates = (_e(1, "a candidate", status="candidate"), _e(2, "old words", status="candidate"))
    store.apply(EntriesImported(candidates), 2)
    accepted = ReviewAccepted(
        confirmed=(_e(1).id,),
        added=(_e(3, "alpha"), _e(4, "new words")),
        promoted_from=((alpha.id, _e(3).id),),
        replaced=((_e(2).id, _e(4).id),),
        settled=(fingerprint("old words"),),
        accepted_at=50.0,
    )
    ids = store.apply(accepted, 3)
    assert set(ids) >= {_e(1).id, _e(2).id, _e(3).id, _e(4).id, "f:" + alpha.id}
    assert store.get(_e(1).id).status == "confirmed" and store.get(_e(1).id).updated_at == 50.0
    old = store.get(_e(2).id)
    assert old.archived and old.archived_reason == "superseded" and old.superseded_by == _e(4).id
    assert store.promoted_findings([alpha.id, beta.id]) == {alpha.id}
    assert store.is_forgotten(fingerprint("old words"))
    assert [f.id for f in store.awaiting_review(10)] == [beta.id]
    assert store.apply(accepted, 3) == []  # a replay changes nothing


def test_review_reject_archives_and_settles_the_text_everywhere(store) -> None:
    one, two = _f("s1", "alpha", 1), _f("s2", "alpha", 1)
    store.apply(FindingsRecorded(_info("s1"), (one, _f("s1", "beta", 2))), 1)
    store.apply(FindingsRecorded(_info("s2"), (two,)), 2)
    store.apply(EntryAdded(_e(1, "gamma", status="candidate")), 3)
    rejected = ReviewRejected(
        archived=(_e(1).id,),
        findings=(one.id,),
        fingerprints=(fingerprint("alpha"), fingerprint("gamma")),
        reason="wrong",
        rejected_at=9.0,
    )
    ids = store.apply(rejected, 4)
    assert ids == [_e(1).id, *sorted(["f:" + one.id, "f:" + two.id])]
    assert store.get(_e(1).id).archived_reason == "user"
    assert store.is_forgotten(fingerprint("alpha")) and store.is_forgotten(fingerprint("gamma"))
    assert store.settled_findings([one.id, two.id]) == {one.id, two.id}
    assert [f.content for f in store.awaiting_review(10)] == ["beta"]
    assert [f.content for f in store.unpromoted_findings(["s1", "s2"], 10)] == ["beta"]


# --------------------------------------------------------------------------- graph, focus, notes


def test_edges_by_either_end_each_once_in_order(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 5))), 1)
    a, b, c, d = (_e(i).id for i in range(1, 5))
    assert (
        store.apply(EdgeAdded(source_id=b, target_id=a, relation="enables", created_at=2), 2) == []
    )
    store.apply(EdgeAdded(source_id=a, target_id=c, relation="depends_on", created_at=3), 3)
    store.apply(
        EdgeAdded(source_id=a, target_id=c, relation="depends_on", created_at=9), 4
    )  # again
    store.apply(ConflictDetected(c, d, "contradictory", 5.0), 5)  # a contradicts edge too
    got = [(e.source, e.target, e.relation, e.created_at) for e in store.edges([a])]
    assert got == [(a, c, "depends_on", 3.0), (b, a, "enables", 2.0)]
    assert [(e.source, e.relation) for e in store.edges([a, c])] == [
        (a, "depends_on"),
        (b, "enables"),
        (c, "contradicts"),
    ]
    assert store.edges([]) == [] and store.edges(["nothing"]) == []
    store.apply(EntriesForgotten((c,)), 6)  # an entry's edges go with it
    assert [e.target for e in store.edges([a, d])] == [a]


def test_working_memory_per_session(store) -> None:
    store.apply(EntriesImported(tuple(_e(i) for i in range(1, 5))), 1)
    one, two, three, four = (_e(i).id for i in range(1, 5))
    store.apply(Focused(session_id="s1", ids=(three, one), focused_at=10.0), 2)
    store.apply(Focused(session_id="s1", ids=(two, one), focused_at=20.0), 3)  # one: held already
    store.apply(Focused(session_id="s2", ids=(four,), focused_at=15.0), 4)
    assert store.working_memory("s1") == [one, three, two]  # focus time, then id
    assert store.working_memory("s2") == [four] and store.working_memory("s3") == []
    assert store.working_memory_sessions() == {"s1": 20.0, "s2": 15.0}
    store.apply(EntriesForgotten((three,)), 5)  # a deleted entry leaves every working memory
    assert store.working_memory("s1") == [one, two]
    store.apply(Released(session_ids=("s1",), reason="user", released_at=30.0), 6)
    assert store.working_memory("s1") == [] and store.working_memory("s2") == [four]
    store.apply(Released(session_ids=("s1", "s2"), reason="idle", released_at=40.0), 7)
    assert store.working_memory_sessions() == {}


def test_notes_pending_until_done(store) -> None:
    assert store.notes() == []
    store.apply(NoteAdded(id="n2", content="check the flaky test", created_at=5.0), 1)
    store.apply(NoteAdded(id="n1", content="ask about the cache", created_at=5.0), 2)
    store.apply(NoteAdded(id="n3", content="rename the module", created_at=1.0), 3)
    store.apply(NoteAdded(id="n3", content="rename the module", created_at=1.0), 4)  # replayed
    assert [n.id for n in store.notes()] == ["n3", "n1", "n2"]  # oldest first, then by id
    assert store.notes()[1].content == "ask about the cache"
    store.apply(NotesDone(ids=("n1", "n3"), done_at=9.0), 5)
    assert [n.id for n in store.notes()] == ["n2"]


def test_graph_focus_and_notes_survive_backup(store, backend: Backend, tmp_path: Path) -> None:
    store.apply(EntriesImported((_e(1), _e(2))), 1)
    store.apply(
        EdgeAdded(source_id=_e(1).id, target_id=_e(2).id, relation="enables", created_at=2), 2
    )
    store.apply(Focused(session_id="s1", ids=(_e(2).id,), focused_at=3.0), 3)
    store.apply(NoteAdded(id="n1", content="a note", created_at=4.0), 4)
    store.backup(tmp_path / "copy")
    copy = backend.open_backup(tmp_path / "copy")
    assert copy.edges([_e(1).id]) == store.edges([_e(1).id])
    assert copy.working_memory("s1") == [_e(2).id] and copy.notes() == store.notes()
    copy.close()
