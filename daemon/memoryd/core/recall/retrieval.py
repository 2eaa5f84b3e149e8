"""The retrieval pipeline of design §5, after BM25: metadata scoring, reranking, cut-offs.

The index adapter finds candidates and hands them here with their BM25 score and the metadata
the score needs; this module decides the order. Every factor is a small function of its own so
a test can state what each one does.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol

import msgspec

from memctl.protocol import Category, Status
from memoryd.core.entries import CATEGORIES, STATUSES

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


# The codes a category and a status have in ``Columns`` (and in the index's ``rank_code``).
CATEGORY_CODES = {c: i for i, c in enumerate(CATEGORIES)}
STATUS_CODES = {s: i for i, s in enumerate(STATUSES)}
# Accesses a ``rank_code`` counts at most (``access_boost_max_count`` stays below).
ACCESS_CAP = 1 << 20


def rank_code(category: Category, status: Status, access_count: int) -> int:
    """A candidate's category, status and accesses in one number, as the index keeps them: the
    most the factors besides BM25 can give it is known from this one column (``pruned``)."""
    accesses = min(max(access_count, 0), ACCESS_CAP - 1)
    return CATEGORY_CODES[category] | STATUS_CODES[status] << 4 | accesses << 8


def unpack(code: int) -> tuple[int, int, int]:
    """(category code, status code, accesses) of a ``rank_code``."""
    return code & 15, code >> 4 & 15, code >> 8


@dataclass(frozen=True, slots=True)
class Columns:
    """Candidates as parallel columns, best BM25 first, as the index reads them (its fast
    fields): scored in one pass over lists, and a ``Candidate`` made only of those that make
    the ranking. An object per hit (500 of them) cost more than the search (issue 12)."""

    refs: Sequence[object]
    bm25: Sequence[float]
    category: Sequence[int]  # indexes into CATEGORIES
    status: Sequence[int]  # indexes into STATUSES
    updated_at: Sequence[float]
    created_at: Sequence[float]
    access_count: Sequence[int]
    session: Sequence[object]  # what tells sessions apart; falsy: none
    file_match: Sequence[bool]

    def __len__(self) -> int:
        return len(self.refs)

    def candidate(self, i: int) -> Candidate:
        session = self.session[i]
        return Candidate(
            ref=self.refs[i],
            bm25=self.bm25[i],
            category=CATEGORIES[self.category[i]],
            status=STATUSES[self.status[i]],
            updated_at=self.updated_at[i],
            created_at=self.created_at[i],
            access_count=self.access_count[i],
            session=str(session) if session else None,
            file_match=bool(self.file_match[i]),
        )

    @classmethod
    def of(cls, candidates: Iterable[Candidate]) -> Columns:
        """``candidates`` as columns, best BM25 first (equal ones in their order)."""
        ordered = sorted(candidates, key=lambda c: c.bm25, reverse=True)
        return cls(
            refs=[c.ref for c in ordered],
            bm25=[c.bm25 for c in ordered],
            category=[CATEGORY_CODES[c.category] for c in ordered],
            status=[STATUS_CODES[c.status] for c in ordered],
            updated_at=[c.updated_at for c in ordered],
            created_at=[c.created_at for c in ordered],
            access_count=[c.access_count for c in ordered],
            session=[c.session for c in ordered],
            file_match=[c.file_match for c in ordered],
        )

    def candidates(self) -> list[Candidate]:
        return [self.candidate(i) for i in range(len(self))]

    def take(self, positions: Sequence[int]) -> Columns:
        """The candidates at ``positions``, in that order."""
        return Columns(*([getattr(self, f.name)[i] for i in positions] for f in fields(self)))

    def joined(self, after: Columns) -> Columns:
        """These candidates, then those ``after``."""
        return Columns(*([*getattr(self, f.name), *getattr(after, f.name)] for f in fields(self)))


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


def scores(columns: Columns, now: float, config: RetrievalConfig) -> list[float]:
    """Each candidate's ``score``: the same factors multiplied in the same order (so the same
    floats), in one comprehension over the columns instead of a call per candidate (500 of
    them in ~0.1 ms)."""
    weights = [config.category_weights.get(c, 1.0) for c in CATEGORIES]
    boosts = [config.status_boosts.get(s, 1.0) for s in STATUSES]
    amplitude, half_life = config.recency_amplitude, config.recency_half_life_days
    per_access, most = config.access_boost_per_access, config.access_boost_max_count
    affinity, pow_, day = config.file_affinity, math.pow, SECONDS_PER_DAY
    return [
        b
        * weights[c]
        * (1.0 + amplitude * pow_(2.0, -((now - u if u < now else 0.0) / day) / half_life))
        * (1.0 + per_access * (n if n < most else most))
        * (affinity if f else 1.0)
        * boosts[s]
        for b, c, s, u, n, f in zip(
            columns.bm25,
            columns.category,
            columns.status,
            columns.updated_at,
            columns.access_count,
            columns.file_match,
            strict=True,
        )
    ]


# --------------------------------------------------------------------------- pruning

# Candidates read first, times the k kept: those the bound ranks highest (~6 % of 500 at
# 3,000 entries are ever needed).
FIRST_READ = 2
# Room for the rounding of a product of six floats (a few ulps each).
ROUNDING = 1e-9


class Keeping(NamedTuple):
    """What a ranking keeps: its ``top_k`` best at ``now``, and whether active files were given
    (file affinity can lift a candidate). Given to retrieval, the candidates it cannot keep are
    left unread (``pruned``)."""

    now: float
    top_k: int
    files: bool


class Bounds(dict[int, float]):
    """The most the factors besides BM25 multiply a candidate's score by, by ``rank_code``
    (recency and file affinity at their best, with room for rounding), worked out the first
    time a code is met."""

    def __init__(self, config: RetrievalConfig, files: bool) -> None:
        super().__init__()
        self._weights = [config.category_weights.get(c, 1.0) for c in CATEGORIES]
        self._boosts = [config.status_boosts.get(s, 1.0) for s in STATUSES]
        self._per_access = config.access_boost_per_access
        self._most = config.access_boost_max_count
        self._affinity, self._amplitude = config.file_affinity, config.recency_amplitude
        affinity = max(config.file_affinity, 1.0) if files else 1.0
        self._best = (1.0 + max(config.recency_amplitude, 0.0)) * affinity * (1.0 + ROUNDING)

    def __missing__(self, code: int) -> float:
        category, status, accesses = unpack(code)
        access = 1.0 + self._per_access * min(accesses, self._most)  # ``valid``: ≥ 0
        self[code] = found = self._weights[category] * self._boosts[status] * access * self._best
        return found

    @property
    def valid(self) -> bool:
        """Whether it bounds at all: every factor finite and never below 0 (settings ensure it;
        a config built in code may not)."""
        factors = [*self._weights, *self._boosts, self._per_access, self._affinity]
        return (
            all(math.isfinite(f) and f >= 0 for f in factors)
            and math.isfinite(self._amplitude)
            and self._amplitude >= -1
        )


# The bounds of the last config seen, with and without active files: kept across searches
# (working out every code a search meets took longer than reading the columns it spares).
_BOUNDS: dict[bool, tuple[RetrievalConfig, Bounds]] = {}


def bounds(config: RetrievalConfig, files: bool) -> Bounds | None:
    """``Bounds`` for ``config``, or None when a weight set below 0 leaves no such bound."""
    kept = _BOUNDS.get(files)
    if kept is None or kept[0] is not config:
        kept = _BOUNDS[files] = (config, Bounds(config, files))
    return kept[1] if kept[1].valid else None


def pruned(
    bm25: Sequence[float],
    codes: Sequence[int],
    created: Sequence[float],
    read: Callable[[Sequence[int]], Columns],
    *,
    keeping: Keeping,
    config: RetrievalConfig,
) -> Columns:
    """The candidates (best BM25 first, with their ``rank_code`` and creation time) ``rank``
    can need to keep its ``keeping.top_k`` best: it ranks these exactly as all of them.
    ``read(positions)`` gives the columns of candidates by position.

    A candidate scores at most its BM25 times the bound of its code. Those the bound ranks
    first are read and scored; then every one whose bound reaches the k-th best score so far,
    and every one written inside the window of an anchor of ``lift_neighbours`` (a neighbour
    rises whatever its own score), until none is left: the rest can neither be among the k
    best nor be lifted. Returned in their order (equal scores keep the earlier)."""
    n, k = len(bm25), keeping.top_k
    most = bounds(config, keeping.files)
    if most is None or n <= k * FIRST_READ:
        return read(range(n))
    ceiling = list(map(operator.mul, bm25, map(most.__getitem__, codes)))
    # Positions by bound, highest first, and the bounds negated in that order (ascending): the
    # candidates whose bound reaches a score are a prefix, found by bisection.
    by_ceiling = sorted(range(n), key=ceiling.__getitem__, reverse=True)
    lowest_first = [-ceiling[i] for i in by_ceiling]

    def reaching(score: float) -> list[int]:
        return by_ceiling[: bisect.bisect_right(lowest_first, -score)]

    taken = sorted(reaching(ceiling[by_ceiling[k * FIRST_READ - 1]]))  # the first read
    columns, window, anchored = read(taken), config.neighbour_window_s, set()
    by_time: list[int] = []  # positions by creation time, sorted when an anchor first needs it
    times: list[float] = []
    while True:
        own = scores(columns, keeping.now, config)
        best = heapq.nlargest(k, range(len(own)), key=own.__getitem__)
        more = set(reaching(own[best[-1]]))
        for at in (columns.created_at[a] for a in _anchors(own, best, config)):
            if window > 0 and at > 0 and at not in anchored:  # its neighbours: read once
                anchored.add(at)
                if not by_time:
                    by_time = sorted(range(n), key=created.__getitem__)
                    times = [created[i] for i in by_time]
                lo, hi = at - window, at + window
                more.update(by_time[bisect.bisect_left(times, lo) : bisect.bisect_right(times, hi)])
        more.difference_update(taken)
        if not more:
            return columns
        added = sorted(more)
        joined = columns.joined(read(added))
        order = sorted(range(len(joined)), key=[*taken, *added].__getitem__)
        taken, columns = sorted([*taken, *added]), joined.take(order)


def _anchors(own: Sequence[float], best: Sequence[int], config: RetrievalConfig) -> list[int]:
    """The candidates whose neighbours ``lift_neighbours`` lifts: the first
    ``neighbour_anchors`` of ``best`` scoring at least half the best."""
    if not best:
        return []
    top = own[best[0]]
    return [a for a in best[: config.neighbour_anchors] if own[a] >= top / 2]


# --------------------------------------------------------------------------- pipeline


def rank(
    query: str,
    candidates: Sequence[Candidate] | Columns,
    *,
    now: float,
    config: RetrievalConfig,
    reranker: Reranker | None = None,
    top_k: int | None = None,
    limit: int | None = None,
    threshold: float | None = None,
) -> list[Scored]:
    """Score → lift neighbours → rerank → top-k → relative threshold → per-session cap → first
    ``limit``.

    ``top_k``, ``limit`` and ``threshold`` default to the config's ``top_k``, ``inject_top_n``
    and ``relative_threshold``. Only the ``top_k`` best (and the neighbours lifted among them)
    become ``Scored`` objects: nothing further down can be kept.
    """
    columns = candidates if isinstance(candidates, Columns) else Columns.of(candidates)
    k = top_k or config.top_k
    own = scores(columns, now, config)
    # The k best, best first; equal scores in BM25 order, as a stable sort would leave them.
    best = heapq.nlargest(k, range(len(own)), key=own.__getitem__)
    lifted = lift_neighbours(columns, own, best, config)
    pool = sorted({*best, *lifted}, key=lambda i: (-lifted.get(i, own[i]), -own[i], i))
    scored = [Scored(candidate=columns.candidate(i), score=lifted.get(i, own[i])) for i in pool]
    if reranker is not None:
        scored = list(reranker.rerank(query, scored))
    scored = scored[:k]
    if not scored:
        return []
    floor = scored[0].score * (config.relative_threshold if threshold is None else threshold)
    kept = [s for s in scored if s.score >= floor]
    return diversify(kept, config.max_per_session)[: limit or config.inject_top_n]


def _near(
    created_a: float, session_a: object, created_b: float, session_b: object, window: float
) -> bool:
    """Written within ``window`` seconds of each other, not at the same instant (one import or
    one promotion writes many unrelated entries at once), in the same session if both say."""
    if session_a and session_b and session_a != session_b:
        return False
    return 0.0 < abs(created_a - created_b) <= window and created_a > 0 < created_b


def lift_neighbours(
    columns: Columns, own: Sequence[float], best: Sequence[int], config: RetrievalConfig
) -> dict[int, float]:
    """Neighbours of a strong hit: what was written just before or after one of the first
    results (the question before its answer, the cause before its fix) is its context. A
    candidate near an anchor (``_near``) scores at least ``neighbour_share`` of the anchor's
    score. Anchors are the first ``neighbour_anchors`` of ``best`` (candidates' indexes, best
    first) scoring at least half the best; only candidates the search found (sharing a query
    word) are lifted. Returns the lifted ones' new scores by index."""
    window = config.neighbour_window_s
    if window <= 0 or not best:
        return {}
    created, session = columns.created_at, columns.session
    lifts: dict[int, float] = {}
    for a in _anchors(own, best, config):
        at = created[a]
        if at <= 0:
            continue
        lift, lo, hi = own[a] * config.neighbour_share, at - window, at + window
        # One pass of plain comparisons over the candidates, then the few inside the window
        # are looked at closely.
        for j in [j for j, c in enumerate(created) if lo <= c <= hi and c != at]:
            if lift > max(own[j], lifts.get(j, 0.0)) and _near(
                at, session[a], created[j], session[j], window
            ):
                lifts[j] = lift
    return lifts


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
