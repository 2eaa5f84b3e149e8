"""The tantivy search index of one project: derived data, kept in step with SQLite (SPEC §5).

The index stores, in the same commit as the documents, a ``__meta__`` document holding the store
change sequence it has applied, so "what the index knows" is exactly as durable as the index. On
open it catches up from the store's change log, or rebuilds when it is missing, unreadable or
ahead of the store. Callers ``sync`` before searching, which gives read-your-writes while letting
several writes share one commit.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import tantivy

from memctl.protocol import Entry
from memoryd.store.base import Store

META_ID = "__meta__"
FIELD_BOOSTS = {"content": 2.0, "tags": 1.5, "file_paths": 1.2, "category": 1.0}
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "do",
        "does",
        "did",
        "not",
        "no",
        "can",
        "should",
        "would",
        "could",
        "there",
        "their",
        "them",
        "they",
        "these",
        "those",
        "our",
        "us",
        "me",
        "my",
    ]
)


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw")
    sb.add_text_field("content")
    sb.add_text_field("tags")
    sb.add_text_field("file_paths")
    sb.add_text_field("category")
    sb.add_integer_field("archived", indexed=True)
    sb.add_integer_field("seq", stored=True)
    return sb.build()


def query_terms(text: str) -> list[str]:
    """Lowercased word tokens of ``text`` minus stop words, in order, without repeats."""
    words = (w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS and len(w) <= 40)
    return list(dict.fromkeys(words))


@dataclass(frozen=True)
class IndexState:
    applied_seq: int
    documents: int
    rebuilt_at_open: str | None  # why the index was rebuilt when opened, if it was


class SearchIndex:
    def __init__(self, directory: Path, *, heap_bytes: int = 16_000_000) -> None:
        self.directory = directory
        self._heap = heap_bytes
        self._schema = _schema()
        self.rebuild_reason: str | None = None
        self._open()

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            fresh = not tantivy.Index.exists(str(self.directory))
            self._index = tantivy.Index(self._schema, path=str(self.directory), reuse=True)
            self._writer = self._index.writer(self._heap, 1)
            self.applied_seq = -1 if fresh else self._read_meta()
        except (ValueError, OSError) as exc:
            # Derived data: an unreadable index is thrown away and rebuilt, never repaired.
            self.rebuild_reason = f"unreadable index ({exc})"
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory.mkdir(parents=True)
            self._index = tantivy.Index(self._schema, path=str(self.directory), reuse=False)
            self._writer = self._index.writer(self._heap, 1)
            self.applied_seq = -1

    def _read_meta(self) -> int:
        self._index.reload()
        searcher = self._index.searcher()
        hits = searcher.search(tantivy.Query.term_query(self._schema, "id", META_ID), 1).hits
        if not hits:
            return -1
        return int(searcher.doc(hits[0][1])["seq"][0])

    def _document(self, entry: Entry) -> tantivy.Document:
        return tantivy.Document(
            id=entry.id,
            content=entry.content,
            tags=" ".join(entry.tags),
            file_paths=" ".join(entry.file_paths),
            category=entry.category.replace("_", " "),
            archived=int(entry.archived),
        )

    def _commit(self, seq: int) -> None:
        self._writer.delete_documents_by_term("id", META_ID)
        self._writer.add_document(tantivy.Document(id=META_ID, seq=seq))
        self._writer.commit()
        self._index.reload()
        self.applied_seq = seq

    def sync(self, store: Store) -> int:
        """Apply every store change the index has not seen; returns how many entries changed."""
        store_seq = store.change_seq()
        if self.applied_seq < 0 or self.applied_seq > store_seq:
            if self.rebuild_reason is None and store_seq > 0:
                self.rebuild_reason = (
                    "missing index" if self.applied_seq < 0 else "index ahead of store"
                )
            return self.rebuild(store)
        if self.applied_seq == store_seq:
            return 0
        ids, seq = store.changed_since(self.applied_seq)
        entries = store.get_many(ids)
        for entry_id in ids:
            self._writer.delete_documents_by_term("id", entry_id)
            if entry_id in entries:
                self._writer.add_document(self._document(entries[entry_id]))
        self._commit(seq)
        return len(ids)

    def rebuild(self, store: Store) -> int:
        started = time.monotonic()
        self._writer.delete_all_documents()
        count = 0
        for entry in store.iter_all():
            self._writer.add_document(self._document(entry))
            count += 1
        self._commit(store.change_seq())
        self.last_rebuild_s = time.monotonic() - started
        return count

    def search(self, text: str, *, archived: bool, limit: int) -> list[tuple[str, float]]:
        """Plain BM25 with field boosts over the query's terms; (entry id, score), best first."""
        terms = query_terms(text)
        if not terms:
            return []
        Q, Occur = tantivy.Query, tantivy.Occur
        should = [
            (Occur.Should, Q.boost_query(Q.term_query(self._schema, field, term), boost))
            for term in terms
            for field, boost in FIELD_BOOSTS.items()
        ]
        archived_filter = Q.const_score_query(
            Q.term_query(self._schema, "archived", int(archived)), 0.0
        )
        query = Q.boolean_query(
            [(Occur.Must, Q.boolean_query(should)), (Occur.Must, archived_filter)]
        )
        searcher = self._index.searcher()
        hits = searcher.search(query, limit, count=False).hits
        return [(searcher.doc(addr)["id"][0], float(score)) for score, addr in hits]

    def state(self) -> IndexState:
        docs = self._index.searcher().num_docs
        return IndexState(self.applied_seq, max(0, docs - 1), self.rebuild_reason)

    def close(self) -> None:
        # Dropping the writer releases tantivy's directory lock for the next open.
        self._writer.wait_merging_threads()
        del self._writer
