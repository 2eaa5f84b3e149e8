"""The tantivy search index of one project: derived data, kept in step with SQLite (design §5).

The index stores, in the same commit as the documents, a ``__meta__`` document holding the store
change sequence it has applied, so "what the index knows" is exactly as durable as the index. On
open it catches up from the store's change log, or rebuilds when it is missing, unreadable or
ahead of the store. Callers ``sync`` before searching, which gives read-your-writes while letting
several writes share one commit.

A rebuild at open goes a page per ``rebuild_step`` (the loop's idle work), so that the daemon
answers meanwhile and ``status`` can report how far it is; whatever needs the index before it
ends (a search, a sync) finishes it first.

A commit costs ~100 ms whatever its size (tantivy fsyncs each file it writes; ``bench/
compaction.py``), the reload after it up to ~150 ms while merges run, and tantivy releases the
GIL while it waits. So background upkeep (compaction's batches, the index commit job) uses
``commit_in_background``: the owner thread writes the documents, and the committer thread (one
for every project, a ``memoryd.worker.Worker``) commits them and reloads the searcher, one
commit at a time per index; the owner publishes it (``settle``) when it is done. Searching goes
on meanwhile; ``sync`` waits for a running commit first.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import hashlib
import math
import posixpath
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal, assert_never

import tantivy

from memctl.protocol import Category, Entry, Status
from memoryd import memtrim
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.errors import Unavailable
from memoryd.core.recall.retrieval import (
    Candidate,
    Columns,
    Keeping,
    RetrievalConfig,
    pruned,
    rank_code,
    unpack,
)
from memoryd.disk import write_failure_cause
from memoryd.store.base import FINDING_PREFIX, Store
from memoryd.worker import Worker

META_ID = "__meta__"
# Bump when the schema or what is indexed changes: an index of another version is rebuilt.
SCHEMA_VERSION = 9


# What a search looks through: the active entries; those and the session findings not promoted
# yet (a promoted finding is represented by its entry); or the archived entries.
SearchScope = Literal["active", "active_and_findings", "archived"]


def _scope_fields(scope: SearchScope) -> tuple[str, bool]:
    """(the prefix of the scope's text fields, whether the findings among them are kept) for a
    scope."""
    match scope:
        case "active":
            return "", False
        case "active_and_findings":
            return "", True
        case "archived":
            return ARCHIVED, True  # no finding is searchable there (``_doc``)
        case _:
            assert_never(scope)


def split_ids(doc_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Index document ids → (entry ids, finding ids without their ``f:`` prefix)."""
    entries = [i for i in doc_ids if not i.startswith(FINDING_PREFIX)]
    findings = [i[len(FINDING_PREFIX) :] for i in doc_ids if i.startswith(FINDING_PREFIX)]
    return entries, findings


FIELD_BOOSTS = {"content": 2.0, "tags": 1.5, "file_paths": 1.2, "category": 1.0}
# Content and tags are stemmed ("deploys" finds "deploy"); the same analyzer runs on queries.
STEMMED_FIELDS = frozenset({"content", "tags"})
ANALYZER = "memoryd_en"
# Prefix and typo matches run on the unstemmed words and tantivy scores them flat: a boost in
# the range of an ordinary BM25 match lets a typo query still reach its entry.
LOOSE_MATCH_BOOST = 2.0
REBUILD_ABOVE = 20_000
# Entries a rebuild step writes: some 40 ms of the owner thread (30,000 entries rebuild in ~2.3 s).
REBUILD_PAGE = 500
KIND_CODES = {"entry": 0, "finding": 1}
# A 32-hex-digit id's two halves, as fast fields (``_id_halves``).
ID_HALVES = ("id_hi", "id_lo")
_HEX = "0123456789abcdef"
# A document's words go in the text fields of its scope: the active ones (active entries and
# findings not promoted yet) or those named with this prefix (archived entries). A search reads
# its scope's fields only, so it never scores another scope's matches: a filter clause instead
# made tantivy score every match of the query (no block-max pruning), and an aged project holds
# mostly archived entries (3.4 of 5.9 ms a search at 300,000 entries, 97 % archived).
ARCHIVED = "archived_"
# The other scope's fields get as many of this token as the document's own fields hold words:
# BM25 divides a field's length by its average over every document of the index, so each
# document still counts its length in both scopes, as when both shared one set of fields. A
# query never holds it (``retrieval.keywords`` drops one-letter words).
PAD = "0"
# The ``kind`` term of a document in no scope (a promoted finding): the findings a search of
# the active fields meets are counted by theirs (``_depth``).
HIDDEN = "hidden"
# A search for active entries only asks the index for this share more hits than they are of
# the active fields' documents, so that the findings can be dropped after it without a filter in
# the query (the depth costs: ~1.5× the time at 1.5× the hits on 300,000 entries).
SCOPE_SLACK = 0.1
# Entries under this share of the active documents are searched with the filter at once: reading
# 4× as many hits to keep a quarter of them costs more than scoring their few matches.
MIN_SCOPE_SHARE = 0.25
# Active documents this few are searched with the filter at once too: scoring every match costs
# less there than reading the deeper hits' kind (3,000 entries: 0.28 vs 0.41 ms; 30,000: even;
# 300,000: 5.3 vs 2.6 ms, where pruning pays).
FILTERED_UP_TO = 50_000
NO_CANDIDATES = Columns([], [], [], [], [], [], [], [], [])
# Where a document's files lie (``place_key``), one column each: a candidate's file affinity is
# read from them (a fast field read per column), not from a search of the whole index for the
# active files' folders (1.5 ms at 30,000 entries, most of it making its hits Python objects).
PLACE_FIELDS = ("place_0", "place_1", "place_2", "place_3")
MANY_PLACES = -1  # a document naming more places than the columns hold: its paths are read


def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


_STEMMER = _analyzer()


def stem(word: str) -> str:
    tokens = _STEMMER.analyze(word)
    return tokens[0] if tokens else word


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    # The id again, as two fast fields, when it is 32 hex digits (``_id_halves``: every id the
    # daemon makes): the ids of ranked hits are read by column, not from stored documents (a
    # block of them decompressed, and kept in tantivy's cache of 100 blocks a segment).
    for half in ID_HALVES:
        sb.add_unsigned_field(half, fast=True)
    # entry | finding | hidden (a promoted finding, in no scope)
    sb.add_text_field("kind", tokenizer_name="raw", index_option="basic")
    for scope in ("", ARCHIVED):  # the text fields, once for each scope
        sb.add_text_field(scope + "content", tokenizer_name=ANALYZER, index_option="freq")
        # unstemmed words, for loose matches
        sb.add_text_field(scope + "content_raw", index_option="basic")
        sb.add_text_field(scope + "tags", tokenizer_name=ANALYZER, index_option="freq")
        sb.add_text_field(scope + "file_paths", index_option="freq")
        sb.add_text_field(scope + "category", index_option="freq")
        sb.add_text_field(scope + "when", index_option="freq")  # the day it was said
    # A document's files, stored: file affinity reads them for one naming more places than
    # its place columns hold (``_file_match``).
    sb.add_text_field("paths_exact", stored=True, tokenizer_name="raw", index_option="basic")
    # Scoring metadata as fast (columnar) fields: read for hundreds of hits without loading
    # stored documents.
    sb.add_integer_field("archived", indexed=True, fast=True)
    sb.add_integer_field("kind_code", fast=True)  # KIND_CODES: read to filter hits by scope
    # Category, status and accesses in one (``retrieval.rank_code``): read for every hit, it
    # bounds what the other factors can give, and only the hits that can rank are read further.
    sb.add_integer_field("rank_code", fast=True)
    sb.add_float_field("updated_at", fast=True)
    sb.add_float_field("created_at", fast=True)
    sb.add_integer_field("session_key", fast=True)
    for field in PLACE_FIELDS:  # place_key of its files: file affinity read by fast field
        sb.add_integer_field(field, fast=True)
    sb.add_integer_field("seq", stored=True)
    sb.add_integer_field("schema_version", stored=True)
    return sb.build()


def session_key(session_id: str | None) -> int:
    """A stable 62-bit number for a session id (0 for none), for the diversity cap."""
    if not session_id:
        return 0
    digest = hashlib.blake2b(session_id.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 2) or 1


def when_words(created_at: float) -> str:
    """The day an item was written, in the words a question names a day by: year, month by name,
    short name and number, day and weekday ("2025 march mar 03 05 wednesday"), local time. A
    question "what did we decide in March 2025" or "on 2025-03-05" then matches it."""
    if created_at <= 0:
        return ""
    return _day_words(datetime.fromtimestamp(created_at).date())


@functools.lru_cache(maxsize=1024)
def _day_words(day: date) -> str:
    """``when_words`` of a day (the calendar's names cost three ``strftime`` calls: a tenth of
    indexing an entry, and a project's entries share few days)."""
    return (
        f"{day.year} {calendar.month_name[day.month]} {calendar.month_abbr[day.month]} "
        f"{day.month:02d} {day.day:02d} {calendar.day_name[day.weekday()]}"
    ).lower()


def directories(path: str) -> list[str]:
    parent = posixpath.dirname(path.replace("\\", "/").rstrip("/"))
    return [parent] if parent else []


def place_key(path: str) -> int:
    """A stable 62-bit number for where a file lies: its folder (``directories``), or the file
    itself at the top of the tree. Two files share a place when one is the other or they
    share a folder: what file affinity asks of a candidate and an active file."""
    folders = directories(path)
    place = "d:" + folders[0] if folders else "p:" + path.replace("\\", "/").rstrip("/")
    digest = hashlib.blake2b(place.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 2) or 1


def _places(file_paths: Sequence[str]) -> list[int]:
    """The ``PLACE_FIELDS`` columns of a document: its first distinct places, 0 for none, and
    ``MANY_PLACES`` last when it names more than they hold."""
    keys = list(dict.fromkeys(place_key(path) for path in file_paths))
    if len(keys) > len(PLACE_FIELDS):
        return [*keys[: len(PLACE_FIELDS) - 1], MANY_PLACES]
    return keys + [0] * (len(PLACE_FIELDS) - len(keys))


def _doc(
    doc_id: str,
    kind: str,
    content: str,
    tags: Sequence[str],
    file_paths: Sequence[str],
    category: Category,
    *,
    archived: bool,
    status: Status,
    updated_at: float,
    access_count: int,
    session_id: str | None,
    created_at: float = 0.0,
    searchable: bool = True,
) -> tantivy.Document:
    """One document: its words in its scope's text fields (``ARCHIVED``), or in none when it is
    not ``searchable``, and the metadata columns scoring reads."""
    doc = tantivy.Document(
        id=doc_id,
        kind=kind if searchable else HIDDEN,
        kind_code=KIND_CODES[kind],
        created_at=float(created_at),
        archived=int(archived),
        rank_code=rank_code(category, status, access_count),
        updated_at=float(updated_at),
        session_key=session_key(session_id),
    )
    texts = {
        "content": content,
        "tags": " ".join(tags),
        "file_paths": " ".join(file_paths),
        "category": category.replace("_", " "),
        "when": when_words(created_at),
    }
    own, other = (ARCHIVED, "") if archived else ("", ARCHIVED)
    padded = (other,) if searchable else (own, other)
    for field, text in texts.items():
        if searchable:
            doc.add_text(own + field, text)
        if length := (_repeated_length if field in _FEW_TEXTS else _length)(text):
            for scope in padded:
                doc.add_text(scope + field, " ".join([PAD] * length))
    if searchable:  # loose matches score flat: no length to keep
        doc.add_text(own + "content_raw", content)
    for field, key in zip(PLACE_FIELDS, _places(file_paths), strict=True):
        doc.add_integer(field, key)
    for path in file_paths:
        doc.add_text("paths_exact", path)
    if (halves := _id_halves(doc_id)) is not None:
        for half, value in zip(ID_HALVES, halves, strict=True):
            doc.add_unsigned(half, value)
    return doc


def _id_halves(doc_id: str) -> tuple[int, int] | None:
    """An id of 32 lowercase hex digits as two 64-bit numbers, or None for any other id (a
    finding's, the meta document's, one an import brought): those are read from the store."""
    if len(doc_id) != 32 or doc_id.strip(_HEX):  # int() takes "-", "0x", "_", spaces, capitals
        return None
    number = int(doc_id, 16)
    return number >> 64, number & (1 << 64) - 1


def _hex_ids(searcher: tantivy.Searcher, refs: list[tantivy.DocAddress]) -> list[str]:
    """The ids of ``refs``: from their id columns, or, for an id that has none, stored."""
    his, los = (searcher.fast_field_values(half, refs) for half in ID_HALVES)
    return [
        f"{hi:016x}{lo:016x}" if hi is not None else searcher.doc(ref)["id"][0]
        for ref, hi, lo in zip(refs, his, los, strict=True)
    ]


# Fields whose texts repeat across documents (a category, a day): their lengths are kept.
_FEW_TEXTS = frozenset({"category", "when"})


def _length(text: str) -> int:
    """The words tantivy indexes of ``text`` (its analyzers split and drop alike: the stemmer
    changes words, not their count)."""
    return len(_STEMMER.analyze(text)) if text else 0


_repeated_length = functools.lru_cache(maxsize=4096)(_length)


@dataclass
class Hits:
    """Candidates from one searcher, as columns (``Columns``); ``ids`` resolves chosen ones to
    entry ids."""

    searcher: tantivy.Searcher
    columns: Columns

    @property
    def candidates(self) -> list[Candidate]:
        return self.columns.candidates()

    def ids(self, refs: Sequence[object]) -> list[str]:
        return _hex_ids(self.searcher, list(refs))  # type: ignore[arg-type]


@dataclass(frozen=True)
class IndexState:
    applied_seq: int
    documents: int
    rebuilt_at_open: str | None  # why the index was rebuilt when opened, if it was
    rebuilding: tuple[int, int] | None = None  # (documents written, to write) of one under way


@dataclass
class _Rebuild:
    """A rebuild under way: the store change sequence it will stand for once committed (later
    changes are caught up by the next ``sync``, which deletes each changed id before adding it
    again), the last entry id written, and documents written of those counted at its start."""

    store: Store
    seq: int
    total: int
    started: float
    after: str = ""
    done: int = 0
    findings: list[SessionFinding] | None = None  # read once every entry is written
    promoted: frozenset[str] = frozenset()
    next_finding: int = 0


# One thread commits for every project's index, one commit at a time (a thread started per
# commit waits to be scheduled, tens of ms on a busy machine).
_COMMITTER = Worker("memoryd-index")


@dataclass
class _Commit:
    """A commit running on the committer thread, and the store sequence it brings the index
    to."""

    seq: int
    done: Future[None]


class IndexWriteFailed(Unavailable):
    """The index could not take a change (its cause in the message); searches read what it
    last committed meanwhile."""


def _let_go(writer: tantivy.IndexWriter) -> None:
    """On the committer thread: wait for the writer's merges (its end drops it, its lock on the
    directory and its memory, whoever still refers to it), then give the heap that frees back
    to the system."""
    try:
        writer.wait_merging_threads()
    finally:
        memtrim.give_back()


def _depth(searcher: tantivy.Searcher, scan: int) -> int | None:
    """How many hits of the text alone hold ``scan`` active entries: ``scan`` over their share of
    the active fields' documents (the findings not promoted yet left out), plus
    ``SCOPE_SLACK``. None when the share is under ``MIN_SCOPE_SHARE``, or the active fields
    hold at most ``FILTERED_UP_TO`` documents. Deleted documents not merged away yet count
    among the findings (a little deeper than needed); promoted ones are in no scope
    (``HIDDEN``)."""
    active = searcher.num_docs - searcher.doc_freq("archived", 1)
    if active <= FILTERED_UP_TO:
        return None
    share = 1.0 - min(searcher.doc_freq("kind", "finding"), active) / active
    if share < MIN_SCOPE_SHARE:
        return None
    return math.ceil(scan * (1.0 + SCOPE_SLACK) / share)


def _column(
    searcher: tantivy.Searcher, field: str, addrs: list[tantivy.DocAddress], missing: Any
) -> list[Any]:
    """A fast field's values for ``addrs``. Every document is written with all of them; one
    missing all the same (None) reads as ``missing``."""
    values: list[Any] = searcher.fast_field_values(field, addrs)
    return [missing if v is None else v for v in values] if None in values else values


class SearchIndex:
    _writer: tantivy.IndexWriter | None

    def __init__(self, directory: Path, *, heap_bytes: int = 16_000_000) -> None:
        self.directory = directory
        self._heap = heap_bytes
        self._schema = _schema()
        self.rebuild_reason: str | None = None
        self._rebuild: _Rebuild | None = None
        self._running: _Commit | None = None  # a commit in the background, until settled
        self._releasing: Future[None] | None = None  # a writer let go, until its merges end
        self.published = 0  # commits published since open (a heal's too: it keeps the seq)
        # Called on the committer thread when a background commit ends (wakes the owner).
        self.on_committed: Callable[[], None] = lambda: None
        self._open()

    def _open(self) -> None:
        self._released()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            fresh = not tantivy.Index.exists(str(self.directory))
            self._index = tantivy.Index(self._schema, path=str(self.directory), reuse=True)
            self._index.register_tokenizer(ANALYZER, _analyzer())
            self._writer = self._index.writer(self._heap, 1)
            # A kill during a commit can leave files no meta.json refers to (e.g. a `.del`
            # file); a later commit at the same opstamp would then fail on them.
            self._writer.garbage_collect_files()
            self.applied_seq = -1 if fresh else self._read_meta()
        except (ValueError, OSError) as exc:
            # Derived data: an unreadable index is thrown away and rebuilt, never repaired. One
            # of another schema (fields added or gone) is refused by tantivy before its meta
            # document can say so.
            changed = "schema" in str(exc).lower()
            self.rebuild_reason = "index schema changed" if changed else f"unreadable index ({exc})"
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory.mkdir(parents=True)
            self._index = tantivy.Index(self._schema, path=str(self.directory), reuse=False)
            self._index.register_tokenizer(ANALYZER, _analyzer())
            self._writer = self._index.writer(self._heap, 1)
            self.applied_seq = -1

    def _read_meta(self) -> int:
        self._index.reload()
        searcher = self._index.searcher()
        hits = searcher.search(tantivy.Query.term_query(self._schema, "id", META_ID), 1).hits
        if not hits:
            return -1
        meta = searcher.doc(hits[0][1])
        if meta.get_first("schema_version") != SCHEMA_VERSION:
            self.rebuild_reason = "index schema changed"
            return -1
        return int(meta["seq"][0])

    def _finding_document(self, f: SessionFinding, promoted: bool) -> tantivy.Document:
        """A finding of session memory, searchable before promotion; once promoted, its entry
        stands for it and the finding drops out of searches (indexed as archived, its words in
        no scope)."""
        return _doc(
            FINDING_PREFIX + f.id,
            "finding",
            f.content,
            f.tags,
            f.file_paths,
            f.category,
            archived=promoted,
            status="candidate",
            updated_at=0.0,
            access_count=0,
            session_id=f.session_id,
            searchable=not promoted,
        )

    def _document(self, entry: Entry) -> tantivy.Document:
        return _doc(
            entry.id,
            "entry",
            entry.content,
            entry.tags,
            entry.file_paths,
            entry.category,
            archived=entry.archived,
            status=entry.status,
            updated_at=entry.updated_at,
            access_count=entry.access_count,
            session_id=entry.source.session_id,
            created_at=entry.created_at,
        )

    @property
    def _w(self) -> tantivy.IndexWriter:
        """The writer, taken anew after a failed write or an idle spell let the last one go
        (``sync``, ``release_writer``)."""
        if self._writer is None:
            self._released()  # the last writer's lock on the directory goes with it
            self._writer = self._index.writer(self._heap, 1)
            self._writer.garbage_collect_files()  # what the failed commit left behind
        return self._writer

    def _commit(self, seq: int) -> None:
        self._write_meta(seq)
        self._w.commit()
        self._index.reload()
        self.applied_seq = seq
        self.published += 1

    def _write_meta(self, seq: int) -> None:
        self._w.delete_documents_by_term("id", META_ID)
        meta = tantivy.Document(id=META_ID, seq=seq, schema_version=SCHEMA_VERSION)
        self._w.add_document(meta)

    def release_writer(self) -> bool:
        """Let the writer go while the index is idle: tantivy keeps the writer's indexing
        memory (up to the heap it was given, and a thread) for as long as it lives, ~30 MB after
        a big import. Only with nothing uncommitted (no commit running, no rebuild under way);
        the next write takes a fresh writer (a few ms). Its merges end on the committer thread,
        which then gives the freed heap back to the system. Returns whether one was let go."""
        if self._writer is None or self._running is not None or self._rebuild is not None:
            return False
        writer, self._writer = self._writer, None
        self._releasing = _COMMITTER.submit(lambda: _let_go(writer))
        return True

    def _released(self) -> None:
        """Wait until a writer let go is gone (its merges waited for: they end in the index)."""
        releasing, self._releasing = self._releasing, None
        if releasing is not None:
            releasing.exception()  # a merge that failed changes nothing committed

    @property
    def committing(self) -> bool:
        """A commit was started in the background and is not settled yet."""
        return self._running is not None

    def settle(self, *, wait: bool) -> bool:
        """Publish the background commit once it is done (waiting for it with ``wait``):
        ``applied_seq`` moves. False while it is still running. A commit that failed raises
        ``IndexWriteFailed`` here, as ``sync`` would, and leaves the index as last committed."""
        running = self._running
        if running is None:
            return True
        if not running.done.done() and not wait:
            return False
        self._running = None
        try:
            running.done.result()
        except (ValueError, OSError) as exc:
            raise self._failed(exc) from exc
        self.applied_seq = running.seq  # the committer reloaded the searcher already
        self.published += 1
        return True

    def commit_in_background(self, store: Store, *, limit: int) -> bool:
        """Write the documents of the first ``limit`` store changes the index has not seen and
        start their commit on the committer thread; ``settle`` publishes it. Only while no
        commit is running (``settle`` said so) and no rebuild is under way. Returns whether
        that took every change the store holds (nothing to commit is every change too); an
        index that must be rebuilt begins a rebuild instead, which its steps carry on."""
        assert self._running is None and self._rebuild is None, "one writer's work at a time"
        store_seq = store.change_seq()
        if self.applied_seq == store_seq:
            return True
        try:
            if self.applied_seq < 0 or self.applied_seq > store_seq:
                self._rebuild_from(store, stepwise=True)
                return False
            ids, seq = store.changed_since(self.applied_seq, limit)
            self._write(store, ids)
            self._write_meta(seq)
        except (ValueError, OSError) as exc:
            raise self._failed(exc) from exc
        writer = self._w  # taken here: the committer thread must not take a fresh one
        done = _COMMITTER.submit(lambda: self._commit_and_reload(writer))
        self._running = _Commit(seq, done)
        done.add_done_callback(lambda _done: self.on_committed())
        return seq >= store_seq

    def _commit_and_reload(self, writer: tantivy.IndexWriter) -> None:
        """On the committer thread: tantivy's commit and the searcher's reload, the GIL
        released while they wait (on fsyncs; on the segments a reload opens, up to ~150 ms
        while merges run). The owner thread does not touch the writer until it is settled.

        Then the heap the commit freed goes back to the system (``memtrim.give_back``, ~1-2 ms,
        the GIL released too): the documents the owner wrote and what serializing them took
        leave free pages all over the heap, and during a compaction's run (a commit every few
        hundred decisions) they were ~5 MB more resident at its peak (bench/memory.py)."""
        writer.commit()
        self._index.reload()
        memtrim.give_back()

    def merges_ended(self) -> bool:
        """Whether a writer let go (``release_writer``) has ended its merges since this was
        last asked: once true, its merged segments are what a reload reads."""
        releasing = self._releasing
        if releasing is None or not releasing.done():
            return False
        self._released()
        return True

    def documents(self) -> int:
        """The documents the index holds as last committed, reloaded first (a merge that
        ended since the last commit shows), its meta document left out: a count, cheap."""
        self._index.reload()
        return max(0, self._index.searcher().num_docs - 1)

    def rewrite_twice_indexed(self, store: Store) -> list[str]:
        """The ids the index holds more than once, each deleted by its id and written again
        as the store holds it, in a commit on the committer thread (``settle`` publishes it;
        ``applied_seq`` stays). Only with every store change applied, no commit running and
        no rebuild under way. Returns those ids (none: nothing written).

        A tantivy merge of segments a kill left behind can end with a version alive that a
        commit deleted while the merge ran, the old version of an id beside its new one. The
        ids are read whole (~0.25 s for 100,000 documents), so only when the count differs."""
        assert self._running is None and self._rebuild is None, "one writer's work at a time"
        twice = sorted(i for i, n in Counter(self.ids()).items() if n > 1)
        if not twice:
            return []
        try:
            self._write(store, twice)
            self._write_meta(self.applied_seq)
        except (ValueError, OSError) as exc:
            raise self._failed(exc) from exc
        writer = self._w
        done = _COMMITTER.submit(lambda: self._commit_and_reload(writer))
        self._running = _Commit(self.applied_seq, done)
        done.add_done_callback(lambda _done: self.on_committed())
        return twice

    def open_synced(self, store: Store) -> None:
        """Catch up with the store at start-up; an index that cannot is rebuilt from scratch, a
        page per ``rebuild_step``."""
        try:
            self.sync(store, stepwise=True)
        except IndexWriteFailed as exc:
            self.rebuild_reason = f"catch-up failed ({exc.__cause__})"
            shutil.rmtree(self.directory, ignore_errors=True)
            self._open()
            self.begin_rebuild(store)

    def sync(self, store: Store, *, stepwise: bool = False) -> int:
        """Apply every store change the index has not seen; returns how many entries changed.
        A rebuild under way is finished first; one that this sync needs is done at once, or
        with ``stepwise`` only begun.

        A write that fails (disk full, no permission: tantivy kills its writer then) raises
        ``IndexWriteFailed`` with the cause, and leaves the index as last committed, still
        searchable; the next ``sync`` takes a fresh writer and applies the same changes again,
        so the index heals by itself once the cause is gone."""
        self.settle(wait=True)
        try:
            return self._sync(store, stepwise)
        except (ValueError, OSError) as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: BaseException) -> IndexWriteFailed:
        """A write that failed: the writer goes, and the error says why."""
        self._drop_writer()
        cause = write_failure_cause(self.directory, exc)
        return IndexWriteFailed(f"the search index cannot be written: {cause}")

    def _drop_writer(self) -> None:
        """Let a failed writer go (and its lock on the directory) with what it had not
        committed; ``applied_seq`` still says what the index holds.

        Its end is not left to the last reference to it: a failed commit's traceback (the
        committer's frame) can hold it until the garbage collector runs, and the next writer
        would meet its lock (``LockBusy``: the index stayed unwritable after the disk had space
        again). It is ended as a writer let go is, its merges waited for on the committer
        thread (``wait_merging_threads`` consumes it), and the next writer waits for that."""
        self._rebuild = None
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.rollback()
            self._released()  # one let go before (idle) ends first
            self._releasing = _COMMITTER.submit(lambda: _let_go(writer))

    def _sync(self, store: Store, stepwise: bool) -> int:
        if self._rebuild is not None:
            self.finish_rebuild()
        store_seq = store.change_seq()
        if self.applied_seq < 0 or self.applied_seq > store_seq:
            if self.rebuild_reason is None and store_seq > 0:
                self.rebuild_reason = (
                    "missing index" if self.applied_seq < 0 else "index ahead of store"
                )
            return self._rebuild_from(store, stepwise)
        if self.applied_seq == store_seq:
            return 0
        ids, seq = store.changed_since(self.applied_seq)
        if len(ids) > REBUILD_ABOVE:
            # Past this, deleting and re-adding one by one is slower than starting over.
            return self._rebuild_from(store, stepwise)
        self._write(store, ids)
        self._commit(seq)
        return len(ids)

    def _write(self, store: Store, ids: Sequence[str]) -> None:
        """Replace the documents of ``ids`` by what the store holds now (none: deleted)."""
        ids = list(dict.fromkeys(ids))  # one delete before all the adds: each id added once
        entry_ids, finding_ids = split_ids(ids)
        entries = store.get_many(entry_ids)
        findings = store.get_findings(finding_ids) if finding_ids else {}
        promoted = store.settled_findings(finding_ids) if finding_ids else set()
        if ids:
            # One delete for them all: a delete by term holds a scorer's weight (~1 KB) per id
            # until the commit, ~2.4 MB at the peak of a 30k compaction (heaptrack).
            self._w.delete_documents_by_query(tantivy.Query.term_set_query(self._schema, "id", ids))
        for doc_id in ids:
            if doc_id in entries:
                self._w.add_document(self._document(entries[doc_id]))
            elif (f := findings.get(doc_id[len(FINDING_PREFIX) :])) is not None:
                self._w.add_document(self._finding_document(f, f.id in promoted))

    def _rebuild_from(self, store: Store, stepwise: bool) -> int:
        if stepwise:
            self.begin_rebuild(store)
            return 0
        return self.rebuild(store)

    def rebuild(self, store: Store) -> int:
        """Rebuild from the store now; returns the documents written."""
        self.begin_rebuild(store)
        return self.finish_rebuild()

    def begin_rebuild(self, store: Store) -> None:
        """Start a rebuild that ``rebuild_step`` carries on. Until it is committed, searches
        would see the index as it was: ``sync`` and ``retrieve`` finish it first."""
        self.settle(wait=True)  # the writer is a running commit's until it ends
        self._w.delete_all_documents()
        c = store.counts()
        total = c.candidate + c.confirmed + c.pinned + c.archived + store.finding_count()
        self._rebuild = _Rebuild(store, store.change_seq(), total, time.monotonic())

    def finish_rebuild(self) -> int:
        """Carry a rebuild under way to its end; returns the documents it wrote."""
        r = self._rebuild
        while self.rebuild_step():
            pass
        return r.done if r is not None else 0

    def rebuild_step(self) -> bool:
        """Write the next page of a rebuild under way (its last step commits it); returns
        whether more remains. A step that fails abandons the rebuild: the index stays as it
        was committed, and the next sync rebuilds it."""
        r = self._rebuild
        if r is None:
            return False
        try:
            more = self._step(r)
            if not more:
                self._commit(r.seq)
        except BaseException:
            self._abandon_rebuild()
            raise
        if not more:
            self.last_rebuild_s = time.monotonic() - r.started
            self._rebuild = None
        return more

    def _step(self, r: _Rebuild) -> bool:
        if r.findings is None:
            page = r.store.entries_after(r.after, REBUILD_PAGE)
            for entry in page:
                self._w.add_document(self._document(entry))
            r.done += len(page)
            if page:
                r.after = page[-1].id
                return True
            r.findings = list(r.store.iter_findings())
            if r.findings:
                r.promoted = frozenset(r.store.settled_findings([f.id for f in r.findings]))
        batch = r.findings[r.next_finding : r.next_finding + REBUILD_PAGE]
        for finding in batch:
            self._w.add_document(self._finding_document(finding, finding.id in r.promoted))
        r.done += len(batch)
        r.next_finding += len(batch)
        return r.next_finding < len(r.findings)

    def _abandon_rebuild(self) -> None:
        """Drop a rebuild under way: what it wrote is rolled back, and the index is as it was
        last committed, which the next open (or sync) rebuilds again."""
        if self._rebuild is not None:
            self._drop_writer()  # rolled back; a fresh writer is taken when next needed

    @property
    def rebuilding(self) -> bool:
        return self._rebuild is not None

    def searcher(self) -> tantivy.Searcher:
        """The index as last committed and reloaded: a snapshot a reader thread searches (and
        resolves its hits in) while the owner goes on writing and committing. Owner thread
        only; a rebuild under way is finished first, as ``retrieve`` does."""
        if self._rebuild is not None:
            self.finish_rebuild()
        return self._index.searcher()

    def retrieve(
        self,
        terms: Mapping[str, float],
        *,
        scope: SearchScope,
        active_files: Sequence[str],
        config: RetrievalConfig,
        scan: int,
        searcher: tantivy.Searcher | None = None,
        keeping: Keeping | None = None,
    ) -> Hits:
        """BM25 with field boosts over weighted terms, limited to ``scan`` candidates of
        ``scope``, each with the metadata the pipeline scores on: with ``keeping``, only those
        the ranking can keep (``retrieval.pruned``: each column read costs per hit).

        Exact terms first: prefix and typo matches (a Levenshtein automaton each, and a union
        of the postings of every word it accepts: on a large index more than the rest of the
        query) only for the terms that find fewer documents by themselves than the ranking
        keeps (``top_k``).

        ``searcher``: the index as ``searcher()`` took it on the owner thread, for a reader
        thread (which must not finish a rebuild: the owner did before handing the read over)."""
        if searcher is None:
            if self._rebuild is not None:
                self.finish_rebuild()
            searcher = self._index.searcher()
        if not terms:
            return Hits(searcher, NO_CANDIDATES)
        fields, findings = _scope_fields(scope)
        loose = self._loose_terms(searcher, terms, config, config.top_k, fields)
        text = self._query(terms, loose, config, fields)
        hits = self._scoped(searcher, text, findings, scan)
        if not hits:
            return Hits(searcher, NO_CANDIDATES)
        addrs = [addr for _, addr in hits]
        bm25 = [score for score, _ in hits]
        codes = _column(searcher, "rank_code", addrs, 0)
        created = _column(searcher, "created_at", addrs, 0.0)

        def read(picked: Sequence[int]) -> Columns:
            """The columns of the hits at ``picked``: what ``codes`` and ``created`` hold, and
            the rest read for those only."""
            at, unpacked = [addrs[i] for i in picked], [unpack(codes[i]) for i in picked]
            return Columns(
                refs=at,
                bm25=[bm25[i] for i in picked],
                category=[u[0] for u in unpacked],
                status=[u[1] for u in unpacked],
                updated_at=_column(searcher, "updated_at", at, 0.0),
                created_at=[created[i] for i in picked],
                access_count=[u[2] for u in unpacked],
                session=_column(searcher, "session_key", at, 0),
                file_match=self._file_match(searcher, at, active_files),
            )

        if keeping is None:
            return Hits(searcher, read(range(len(hits))))
        return Hits(searcher, pruned(bm25, codes, created, read, keeping=keeping, config=config))

    def _loose_terms(
        self,
        searcher: tantivy.Searcher,
        terms: Mapping[str, float],
        config: RetrievalConfig,
        enough: int,
        fields: str = "",
    ) -> set[str]:
        """The terms that get prefix and typo matches: long enough, and found as a word in
        fewer than ``enough`` documents (a typo, the start of a word, a rare word). A term
        found more often fills the ranking by itself. (On the labelled set of
        tests/test_retrieval_quality.py, recall@5 and MRR are the same for any ``enough``
        from 10 to 500; with 2, MRR drops 0.01: a rare word's variants count.)"""
        return {
            t
            for t in terms
            if len(t) >= config.prefix_min_length
            and searcher.doc_freq(fields + "content_raw", t) < enough
        }

    def _scoped(
        self,
        searcher: tantivy.Searcher,
        text: tantivy.Query,
        findings: bool,
        scan: int,
    ) -> list[tuple[float, tantivy.DocAddress]]:
        """The best ``scan`` hits of ``text`` in the scope, best first.

        The scope's text fields hold its documents only (``ARCHIVED``), the active ones the
        findings too: a search for entries alone drops these. A filter clause in the query makes
        tantivy score every match (no block-max pruning): ~6× the time of the text alone on
        300,000 entries. So on a large index the text is searched alone, as much deeper than
        ``scan`` as findings are of its documents (``_depth``), and they are dropped after, by
        their fast field; the filtered query (the same scores) runs only when that left too
        few, on a small index, or where findings are most of it."""
        if findings or not searcher.doc_freq("kind", "finding"):
            return searcher.search(text, scan, count=False).hits
        deeper = _depth(searcher, scan)
        if deeper is not None:
            hits = searcher.search(text, deeper, count=False).hits
            kinds = searcher.fast_field_values("kind_code", [addr for _, addr in hits])
            entry = KIND_CODES["entry"]
            kept = [hit for hit, kind in zip(hits, kinds, strict=True) if kind == entry]
            if len(kept) >= scan or len(hits) < deeper:  # enough, or every match seen
                return kept[:scan]
        Q, Occur = tantivy.Query, tantivy.Occur
        entries = Q.const_score_query(self._term("kind", "entry"), 0.0)
        query = Q.boolean_query([(Occur.Must, text), (Occur.Must, entries)])
        return searcher.search(query, scan, count=False).hits

    def _term(self, field: str, value: str | int) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value)

    def _query(
        self,
        terms: Mapping[str, float],
        loose: AbstractSet[str],
        config: RetrievalConfig,
        fields: str = "",
    ) -> tantivy.Query:
        """The text query: each term in every text field of a scope (``fields``: the prefix of
        its names), boosted, and prefix and typo matches of the ``loose`` ones."""
        Q, Occur = tantivy.Query, tantivy.Occur
        should = []
        for term, weight in terms.items():
            stemmed = stem(term)
            for field, boost in FIELD_BOOSTS.items():
                if field == "category" and weight < 1.0:
                    continue  # an alias ("test" → "spec") must not match a whole category
                value = stemmed if field in STEMMED_FIELDS else term
                if value == PAD:
                    continue  # every document of the other scope holds it
                exact = Q.term_query(self._schema, fields + field, value)
                should.append((Occur.Should, Q.boost_query(exact, boost * weight)))
            if term in loose:
                distance = 1 if len(term) >= config.fuzzy_min_length else 0
                raw = fields + "content_raw"
                found = Q.fuzzy_term_query(self._schema, raw, term, distance, True, True)
                should.append((Occur.Should, Q.boost_query(found, LOOSE_MATCH_BOOST * weight)))
            if (date := self._date_clause(term, weight, config, fields)) is not None:
                should.append((Occur.Should, date))
        return Q.boolean_query(should)

    def _date_clause(
        self, term: str, weight: float, config: RetrievalConfig, fields: str
    ) -> tantivy.Query | None:
        """A query word against the day an item was written (``when_words``): "march", "2025".
        Aliases stay out, as from the category."""
        if config.date_boost <= 0 or weight < 1.0:
            return None
        exact = tantivy.Query.term_query(self._schema, fields + "when", term)
        return tantivy.Query.boost_query(exact, config.date_boost * weight)

    def _file_match(
        self, searcher: tantivy.Searcher, addrs: list[tantivy.DocAddress], files: Sequence[str]
    ) -> list[bool]:
        """Whether each of ``addrs`` names a file at the place of an active one (the same file,
        or one in its folder): read from its place columns, or, for the few naming more places
        than they hold, from its stored paths."""
        found = [False] * len(addrs)
        if not files:
            return found
        active = {place_key(path) for path in files}
        columns = [_column(searcher, field, addrs, 0) for field in PLACE_FIELDS]
        for column in columns:
            if not active.isdisjoint(column):  # most columns hold none of them: no pass at all
                found = [hit or key in active for hit, key in zip(found, column, strict=True)]
        last = columns[-1]
        if MANY_PLACES in last:
            for i, many in enumerate(last):
                if many == MANY_PLACES and not found[i]:
                    paths = searcher.doc(addrs[i]).get_all("paths_exact")
                    found[i] = any(place_key(str(path)) in active for path in paths)
        return found

    def ids(self) -> list[str]:
        """The id of every document the index holds as last committed (its meta document left
        out), once per document: ``check`` compares them with the store's."""
        searcher = self._index.searcher()
        if not searcher.num_docs:
            return []
        hits = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False).hits
        found = _hex_ids(searcher, [address for _score, address in hits])
        return [doc_id for doc_id in found if doc_id != META_ID]

    def state(self) -> IndexState:
        docs = self._index.searcher().num_docs
        r = self._rebuild
        rebuilding = None if r is None else (r.done, max(r.done, r.total))
        return IndexState(self.applied_seq, max(0, docs - 1), self.rebuild_reason, rebuilding)

    def close(self) -> None:
        if self._running is not None:
            self._running.done.exception()  # waits: the writer is the commit's until it ends
            self._running = None
        # A rebuild still under way is done again at the next open rather than held up here.
        self._abandon_rebuild()
        # Dropping the writer releases tantivy's directory lock for the next open.
        if self._writer is not None:
            self._writer.wait_merging_threads()
        self._writer = None
        self._released()
