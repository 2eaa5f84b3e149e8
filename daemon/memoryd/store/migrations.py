"""Schema migrations, keyed by ``PRAGMA user_version`` and applied in order at open.

Append a new step to ``MIGRATIONS`` to change the schema; never edit a released step.
"""

from __future__ import annotations

import sqlite3

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
INSERT INTO meta VALUES ('audit_seq', 0);
CREATE TABLE entries (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    content TEXT NOT NULL,
    category TEXT NOT NULL,
    importance REAL NOT NULL,
    confidence REAL NOT NULL,
    status TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    archived_reason TEXT,
    superseded_by TEXT,
    source TEXT NOT NULL,
    file_paths TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed_at REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX entries_active_fingerprint ON entries(fingerprint) WHERE archived = 0;
CREATE INDEX entries_listing ON entries(archived, updated_at);
CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry_id TEXT NOT NULL);
CREATE TABLE edges (
    source_id TEXT NOT NULL,
    target_id TEXT NOT NULL,
    relation TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (source_id, target_id, relation)
) WITHOUT ROWID;
CREATE TABLE episodes (
    id TEXT PRIMARY KEY,
    session_id TEXT,
    agent TEXT,
    title TEXT NOT NULL,
    goal TEXT,
    decisions TEXT NOT NULL DEFAULT '[]',
    outcome TEXT,
    files TEXT NOT NULL DEFAULT '[]',
    turns INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    ended_at REAL,
    tags TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    parent_session_id TEXT,
    transcript_path TEXT,
    transcript_inode INTEGER,
    transcript_offset INTEGER NOT NULL DEFAULT 0,
    summary TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    finalized_at REAL
);
CREATE TABLE findings (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    fingerprint TEXT NOT NULL,
    content TEXT NOT NULL,
    category TEXT NOT NULL,
    importance REAL NOT NULL,
    confidence REAL NOT NULL,
    file_paths TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    rule_id TEXT,
    transcript_offset INTEGER,
    promoted_entry_id TEXT,
    UNIQUE (session_id, fingerprint)
);
CREATE TABLE conflicts (
    entry_a TEXT NOT NULL,
    entry_b TEXT NOT NULL,
    conflict_type TEXT NOT NULL,
    detected_at REAL NOT NULL,
    resolved_at REAL,
    PRIMARY KEY (entry_a, entry_b)
) WITHOUT ROWID;
CREATE TABLE aliases (term TEXT PRIMARY KEY, synonyms TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE notes (id TEXT PRIMARY KEY, content TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE settings (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
"""

# Pinned entries are read on every injection: without this, finding "no pinned entries" walks
# every active row (8 ms of a 12 ms inject at 30,000 entries).
_V2 = """
CREATE INDEX entries_pinned ON entries(updated_at) WHERE status = 'pinned' AND archived = 0;
CREATE INDEX entries_status ON entries(status, archived, updated_at);
"""

_V3 = """
ALTER TABLE findings ADD COLUMN agent TEXT NOT NULL DEFAULT '';
ALTER TABLE findings ADD COLUMN user_intent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE findings ADD COLUMN resolved_error INTEGER NOT NULL DEFAULT 0;
CREATE INDEX findings_fingerprint ON findings(fingerprint);
CREATE INDEX candidates_by_age ON entries(created_at) WHERE status = 'candidate' AND archived = 0;
"""

# Fingerprints a user forgot: captured text with one of them is not promoted again.
_V4 = """
CREATE TABLE forgotten (fingerprint TEXT PRIMARY KEY, forgotten_at REAL NOT NULL) WITHOUT ROWID;
"""

# A finding the user accepted: the agent said it and the user's next words went on without
# correcting it (issue 19); a promotion signal.
_V5 = """
ALTER TABLE findings ADD COLUMN accepted INTEGER NOT NULL DEFAULT 0;
"""

# Working memory: each session's focused entries (design §9). A graph walk reads edges by either
# end; the primary key serves only the source.
_V6 = """
CREATE TABLE working_memory (
    session_id TEXT NOT NULL,
    entry_id TEXT NOT NULL,
    focused_at REAL NOT NULL,
    PRIMARY KEY (session_id, entry_id)
) WITHOUT ROWID;
CREATE INDEX working_memory_entry ON working_memory(entry_id);
CREATE INDEX edges_target ON edges(target_id);
"""

# Entries deleted on purpose (forgotten, purged), by id: the tombstones of the shared file.
_V7 = """
CREATE TABLE tombstones (
    id TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    deleted_at REAL NOT NULL,
    reason TEXT NOT NULL
) WITHOUT ROWID;
"""

# The request ids of changes (issue 10): a retry after a restart gets the first attempt's reply
# and changes nothing. ``effects`` (the events' tags and ids, written in the transaction of each
# event) tells what the request did when the daemon died before ``reply`` was written.
_V8 = """
CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    effects TEXT NOT NULL DEFAULT '[]',
    reply BLOB,
    at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX requests_at ON requests(at);
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)
SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNew(RuntimeError):
    """The database was written by a newer memoryd."""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to ``SCHEMA_VERSION``, one step per transaction. Returns the version."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database schema {version} is newer than this memoryd supports ({SCHEMA_VERSION})"
        )
    for step in range(version, SCHEMA_VERSION):
        # executescript commits on its own; the BEGIN makes each step atomic with its version bump.
        conn.executescript(
            f"BEGIN IMMEDIATE;\n{MIGRATIONS[step]}\nPRAGMA user_version = {step + 1};\nCOMMIT;"
        )
    return SCHEMA_VERSION
