"""The storage contract (``memoryd.store.base.Store``). Every implementation runs this suite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memctl.protocol import Source
from memoryd.core.entries import new_entry
from memoryd.core.events import (
    EntriesForgotten,
    EntriesImported,
    EntryAdded,
    EntryReinforced,
    EntryStatusChanged,
)
from memoryd.store.base import StoreCorrupt
from memoryd.store.migrations import SCHEMA_VERSION, SchemaTooNew
from memoryd.store.sqlite import SqliteStore


@pytest.fixture(params=["sqlite"])
def store(request, tmp_path: Path):
    s = SqliteStore(tmp_path / "memory.db")
    yield s
    s.close()


def _e(i: int, content: str | None = None, **kw):
    return new_entry(
        entry_id=f"{i:032x}",
        content=content or f"entry number {i}",
        category="decision",
        status="confirmed",
        now=float(i),
        source=Source(kind="user"),
        **kw,
    )


def test_apply_records_audit_seq_and_is_idempotent(store) -> None:
    assert store.applied_audit_seq() == 0
    assert store.apply(EntryAdded(_e(1)), 1) == [_e(1).id]
    assert store.apply(EntryAdded(_e(1)), 1) == []  # replay of an applied event does nothing
    assert store.applied_audit_seq() == 1
    assert store.get(_e(1).id) == _e(1)


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
    with pytest.raises(sqlite3.IntegrityError):
        store.apply(EntryAdded(_e(2, "Same  text")), 2)
    assert store.applied_audit_seq() == 1  # the failed transaction left nothing behind


def test_backup_is_consistent(store, tmp_path: Path) -> None:
    store.apply(EntryAdded(_e(1)), 7)
    assert store.backup(tmp_path / "copy.db") == 7
    copy = SqliteStore(tmp_path / "copy.db")
    assert copy.get(_e(1).id) == _e(1) and copy.applied_audit_seq() == 7
    assert copy.integrity() == "ok"
    copy.close()


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


def test_migrations_create_every_table(store) -> None:
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
        "changes",
        "meta",
    } <= tables
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
