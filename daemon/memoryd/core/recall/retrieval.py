"""The retrieval pipeline of design §5, after BM25: metadata scoring, reranking, cut-offs.

The index adapter finds candidates and hands them here with their BM25 score and the metadata
the score needs; this module decides the order. Every factor is a small function of its own so
a test can state what each one does.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import msgspec

from memctl.protocol import Category, Status

SECONDS_PER_DAY = 86_400.0


class RetrievalConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of the pipeline, with the design §5 defaults."""

    category_weights: dict[str, float] = msgspec.field(
        default_factory=lambda: {
            "warning": 1.3,
            "decision": 1.25,
            "architecture": 1.2,
            "error": 1.15,
            "pattern": 1.1,
            "preference": 1.1,
            "spec": 1.1,
            "discovery": 1.0,
            "task_progress": 0.8,
            "file_change": 0.8,
        }
    )
    recency_amplitude: float = 0.25
    recency_half_life_days: float = 14.0
    access_boost_per_access: float = 0.05
    access_boost_max_count: int = 10
    file_affinity: float = 1.3
    status_boosts: dict[str, float] = msgspec.field(
        default_factory=lambda: {"pinned": 1.5, "confirmed": 1.1, "candidate": 0.9}
    )
    max_candidate_scan: int = 500
    top_k: int = 15
    relative_threshold: float = 0.3
    # The same cut for ``search``, whose reader asked for k results and picks among them: the
    # inject cut dropped answers a person wanted (bench/retrieval_quality.py).
    search_relative_threshold: float = 0.1
    # Neighbours of a strong hit: an entry written within this many seconds of one of the
    # first ``neighbour_anchors`` results (in the same session, when both name one) ranks at
    # least ``neighbour_share`` of that result's score (``lift_neighbours``); 0 s: off.
    neighbour_window_s: float = 120.0
    neighbour_anchors: int = 2
    neighbour_share: float = 0.5
    max_per_session: int = 2
    inject_top_n: int = 5
    # The relevance floor of ``inject --query``: an entry shares at least this many of the
    # query's keywords (all of them when the query has fewer). Chosen on the labelled query set
    # of bench/capture_quality.py.
    inject_min_shared: int = 2
    max_pinned: int = 5
    fuzzy_min_length: int = 5
    prefix_min_length: int = 3
    alias_weight: float = 0.6
    # Weight of a query word found in the day an item was written ("march", "2025"); 0: off.
    date_boost: float = 1.0


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """One BM25 hit with what the metadata score needs. ``ref`` is opaque to the core."""

    ref: object
    bm25: float
    category: Category
    status: Status
    updated_at: float
    access_count: int
    session: str | None
    file_match: bool
    created_at: float = 0.0


class Scored(msgspec.Struct, frozen=True, kw_only=True):
    candidate: Candidate
    score: float


class Reranker(Protocol):
    """A hook between scoring and the cut-offs (design §5). It may reorder or rescore, and must
    return a subset of what it was given."""

    def rerank(self, query: str, scored: Sequence[Scored]) -> Sequence[Scored]: ...


class NoOpReranker:
    def rerank(self, query: str, scored: Sequence[Scored]) -> Sequence[Scored]:
        return scored


# --------------------------------------------------------------------------- query terms

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
STOP_WORDS = frozenset(
    """a about all also an and any are as at be been before but by can could did do does doing
    for from get got had has have how i if in into is it its just let me my need no not now of
    on or our please should so some tell than that the their them then there these they this
    those to us use using want was way we were what when where which who why will with would
    you your""".split()
)


def keywords(text: str) -> list[str]:
    """Lowercased word tokens minus stop words, in first-seen order, without repeats."""
    # One-letter words are noise (the "s" of "customer's" would match every possessive).
    words = (w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS and 1 < len(w) <= 40)
    return list(dict.fromkeys(words))


# A query's first this many keywords are searched: each becomes term queries and a fuzzy query
# (a Levenshtein automaton apiece) in the index, and a 256 KB prompt holds tens of thousands of
# them (issue 10: 2.3 GB of memory and 5 s on the owner thread for one hook).
MAX_QUERY_TERMS = 64


def query_terms(text: str) -> list[str]:
    """The keywords of a query (``keywords``), at most the first ``MAX_QUERY_TERMS``."""
    return keywords(text)[:MAX_QUERY_TERMS]


DEFAULT_ALIASES: dict[str, tuple[str, ...]] = {
    "auth": ("authentication", "authorization", "login", "oauth", "jwt"),
    "db": ("database", "sql", "postgres", "sqlite", "mysql"),
    "api": ("endpoint", "rest", "http", "route"),
    "config": ("configuration", "settings", "env", "environment"),
    "test": ("tests", "testing", "pytest", "spec", "unittest"),
    "ui": ("frontend", "interface", "component", "view"),
    "deploy": ("deployment", "release", "ci", "pipeline"),
    "perf": ("performance", "latency", "slow", "speed"),
    "deps": ("dependencies", "dependency", "package", "packages"),
    "docs": ("documentation", "readme"),
    "err": ("error", "exception", "failure", "bug"),
    "repo": ("repository", "git"),
}


def expand(
    words: Sequence[str], aliases: Mapping[str, Sequence[str]], weight: float
) -> dict[str, float]:
    """Query terms with their weights: the words at 1.0, their aliases at ``weight``. Aliases
    work both ways: a synonym in the query also brings in its head term."""
    terms: dict[str, float] = {w: 1.0 for w in words}
    reverse: dict[str, list[str]] = {}
    for head, synonyms in aliases.items():
        for synonym in synonyms:
            reverse.setdefault(synonym, []).append(head)
    for word in words:
        forms = _forms(word)
        related = [t for f in forms for t in (*aliases.get(f, ()), *reverse.get(f, ()))]
        for head in (h for f in forms for h in reverse.get(f, ())):
            related.extend(aliases.get(head, ()))
        for term in related:
            for part in keywords(term):
                terms.setdefault(part, weight)
    return terms


def _forms(word: str) -> tuple[str, ...]:
    """The word and its plain singular, so "deploys" finds the alias of "deploy"."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return (word, word[:-1])
    return (word,)


# --------------------------------------------------------------------------- factors


def category_weight(category: str, config: RetrievalConfig) -> float:
    return config.category_weights.get(category, 1.0)


def recency(updated_at: float, now: float, config: RetrievalConfig) -> float:
    days = max(0.0, now - updated_at) / SECONDS_PER_DAY
    return 1.0 + config.recency_amplitude * math.pow(2.0, -days / config.recency_half_life_days)


def access_boost(access_count: int, config: RetrievalConfig) -> float:
    return 1.0 + config.access_boost_per_access * min(access_count, config.access_boost_max_count)


def file_affinity(file_match: bool, config: RetrievalConfig) -> float:
    return config.file_affinity if file_match else 1.0


def status_boost(status: str, config: RetrievalConfig) -> float:
    return config.status_boosts.get(status, 1.0)


def score(c: Candidate, now: float, config: RetrievalConfig) -> float:
    return (
        c.bm25
        * category_weight(c.category, config)
        * recency(c.updated_at, now, config)
        * access_boost(c.access_count, config)
        * file_affinity(c.file_match, config)
        * status_boost(c.status, config)
    )


def scorer(now: float, config: RetrievalConfig) -> Callable[[Candidate], float]:
    """``score`` with the config read once: the same arithmetic, in one call per candidate
    instead of seven (the pipeline scores hundreds per query)."""
    weights, boosts = config.category_weights, config.status_boosts
    amplitude, half_life = config.recency_amplitude, config.recency_half_life_days
    per_access, most = config.access_boost_per_access, config.access_boost_max_count
    affinity, pow_ = config.file_affinity, math.pow

    def one(c: Candidate) -> float:
        days = max(0.0, now - c.updated_at) / SECONDS_PER_DAY
        return (
            c.bm25
            * weights.get(c.category, 1.0)
            * (1.0 + amplitude * pow_(2.0, -days / half_life))
            * (1.0 + per_access * min(c.access_count, most))
            * (affinity if c.file_match else 1.0)
            * boosts.get(c.status, 1.0)
        )

    return one


# --------------------------------------------------------------------------- pipeline


def rank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    now: float,
    config: RetrievalConfig,
    reranker: Reranker | None = None,
    top_k: int | None = None,
    limit: int | None = None,
    threshold: float | None = None,
) -> list[Scored]:
    """Score → rerank → top-k → relative threshold → per-session cap → first ``limit``.

    ``top_k``, ``limit`` and ``threshold`` default to the config's ``top_k``, ``inject_top_n``
    and ``relative_threshold``.
    """
    scored = sorted(
        _score_best(candidates, now, config, top_k or config.top_k),
        key=lambda s: s.score,
        reverse=True,
    )
    scored = lift_neighbours(scored, candidates, config)
    if reranker is not None:
        scored = list(reranker.rerank(query, scored))
    scored = scored[: top_k or config.top_k]
    if not scored:
        return []
    floor = scored[0].score * (config.relative_threshold if threshold is None else threshold)
    kept = [s for s in scored if s.score >= floor]
    return diversify(kept, config.max_per_session)[: limit or config.inject_top_n]


def _near(a: Candidate, b: Candidate, window: float) -> bool:
    """Written within ``window`` seconds of each other, not at the same instant (one import or
    one promotion writes many unrelated entries at once), in the same session if both say."""
    if a.session is not None and b.session is not None and a.session != b.session:
        return False
    return 0.0 < abs(a.created_at - b.created_at) <= window and a.created_at > 0 < b.created_at


def lift_neighbours(
    scored: list[Scored], candidates: Sequence[Candidate], config: RetrievalConfig
) -> list[Scored]:
    """Neighbours of a strong hit: what was written just before or after one of the first
    results (the question before its answer, the cause before its fix) is its context. A
    candidate near an anchor (``_near``) scores at least ``neighbour_share`` of the anchor's
    score. Anchors are the first ``neighbour_anchors`` results scoring at least half the
    best; only candidates the search found (sharing a query word) are lifted."""
    window = config.neighbour_window_s
    if window <= 0 or not scored:
        return scored
    best = scored[0].score
    anchors = [
        s
        for s in scored[: config.neighbour_anchors]
        if s.score >= best / 2 and s.candidate.created_at > 0
    ]
    if not anchors:
        return scored
    # One pass of plain comparisons over the candidates (up to the scan, 500), then the
    # few inside a window are looked at closely.
    near: dict[int, Candidate] = {}
    for a in anchors:
        at = a.candidate.created_at
        lo, hi = at - window, at + window
        near.update(
            (id(c), c) for c in candidates if lo <= c.created_at <= hi and c.created_at != at
        )
    if not near:
        return scored
    own = {id(s.candidate): s.score for s in scored}
    lifted: dict[int, Scored] = {}
    for c in near.values():
        lift = max(
            (a.score * config.neighbour_share for a in anchors if _near(a.candidate, c, window)),
            default=0.0,
        )
        if lift > own.get(id(c), 0.0):
            lifted[id(c)] = Scored(candidate=c, score=lift)
    if not lifted:
        return scored
    merged = [lifted.pop(id(s.candidate), s) for s in scored] + list(lifted.values())
    return sorted(merged, key=lambda s: s.score, reverse=True)


def max_multiplier(config: RetrievalConfig) -> float:
    """The largest factor metadata can multiply a BM25 score by."""
    return (
        max(config.category_weights.values(), default=1.0)
        * (1.0 + config.recency_amplitude)
        * access_boost(config.access_boost_max_count, config)
        * max(config.file_affinity, 1.0)
        * max(config.status_boosts.values(), default=1.0)
    )


def _score_best(
    candidates: Iterable[Candidate], now: float, config: RetrievalConfig, k: int
) -> list[Scored]:
    """Score candidates in falling BM25 order, stopping once none left can enter the top ``k``
    (its BM25 times the largest possible multiplier is below the k-th score): the result is
    exactly what scoring them all would keep, at a fraction of the cost."""
    bound = max_multiplier(config)
    best: list[float] = []  # min-heap of the k best scores so far
    scored = []
    score_of = scorer(now, config)
    for c in sorted(candidates, key=lambda c: c.bm25, reverse=True):
        if len(best) >= k and c.bm25 * bound < best[0]:
            break
        s = score_of(c)
        scored.append(Scored(candidate=c, score=s))
        if len(best) < k:
            heapq.heappush(best, s)
        elif s > best[0]:
            heapq.heapreplace(best, s)
    return scored


def diversify(scored: Sequence[Scored], max_per_session: int) -> list[Scored]:
    """At most ``max_per_session`` results from any one source session (entries with no
    session, such as the user's own, are not capped)."""
    seen: dict[str, int] = {}
    kept = []
    for s in scored:
        session = s.candidate.session
        if session is not None:
            seen[session] = seen.get(session, 0) + 1
            if seen[session] > max_per_session:
                continue
        kept.append(s)
    return kept
