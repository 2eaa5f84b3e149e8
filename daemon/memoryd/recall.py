"""Search and inject (design §5): the retrieval pipeline run against one project.

The index finds candidates, the pure core scores and cuts them, the store supplies the text, and
the injection builder packs the payload into its budget. Latencies feed the SLO monitor, which
switches to a cheaper scan when retrieval gets slow.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar

from memctl import protocol as p
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.events import Episode
from memoryd.core.recall import budget, conflicts, injection, retrieval
from memoryd.core.recall.cache import ResultCache
from memoryd.core.recall.formatting import Item
from memoryd.core.recall.slo import SloMonitor
from memoryd.index import SearchScope
from memoryd.project import ProjectMemory, ProjectReader

# Who a read asks: the project itself on the owner thread, or what the owner took of it for a
# reader thread (``ProjectMemory.reader``), which leaves accesses and latency for the owner to
# apply (``Recall.settle_read``).
Source = ProjectMemory | ProjectReader

SESSION_FINDINGS = 20
SUMMARY_EPISODES = 3
CANDIDATE_SCAN = 200  # candidates looked at for a session start's payload
CANDIDATE_FLOOR = 0.5  # a candidate penalised below this has not earned its place
DEGRADED_TOP_K = 5
DEGRADED_SCAN = 100
_T = TypeVar("_T")
RESULT_CACHE_SIZE = 256
RESULT_CACHE_AGE_S = 60.0  # recency scores move with the clock: a result is not kept longer
# What every prompt reads of a project besides the search (its pinned entries, latest
# episodes, budget ceiling) and the entries behind recent hits: SQLite reads of ~0.1 ms a prompt
# together, the same until memory changes.
KEPT_READS = 512


class Recall:
    def __init__(
        self,
        config: retrieval.RetrievalConfig,
        slo: SloMonitor,
        *,
        default_ceiling: int = budget.DEFAULT_CEILING,
        instructions_share: float = budget.SHARES["instructions"],
        reranker: retrieval.Reranker | None = None,
        clock: Callable[[], float] = time.time,
        log: Any = None,
    ) -> None:
        self.config = config
        self.slo = slo
        # The newest switches to the cheaper mode and back, for ``memctl health``.
        self.slo_events: deque[p.DegradeEvent] = deque(maxlen=100)
        self.default_ceiling = default_ceiling
        self.extra_shares = {"instructions": instructions_share}
        self.reranker = reranker or retrieval.NoOpReranker()
        self._clock = clock
        self._log = log
        # Ranked hits of recent searches, per project and request, for one generation of
        # memory (``ProjectMemory.generation``): a prompt sent again is not searched again.
        self._results: ResultCache[tuple[tuple[p.Entry | SessionFinding, float], ...]]
        self._results = ResultCache(RESULT_CACHE_SIZE, RESULT_CACHE_AGE_S)
        # Reads of a project kept for one generation of its memory, by (slug, what, argument).
        self._reads: ResultCache[Any] = ResultCache(KEPT_READS, RESULT_CACHE_AGE_S)

    def configure(
        self, config: retrieval.RetrievalConfig, default_ceiling: int, slo: SloMonitor | None
    ) -> None:
        """New settings, from the next search on (SIGHUP). ``slo``: a monitor with new
        thresholds (its window starts empty), or None to keep the current one."""
        self.config = config
        self.default_ceiling = default_ceiling
        self._results.clear()
        self._reads.clear()
        if slo is not None:
            self.slo = slo

    # ------------------------------------------------------------------ pipeline

    def _ranked(
        self,
        project: Source,
        query: str,
        *,
        scope: SearchScope,
        files: Sequence[str],
        limit: int,
        threshold: float | None = None,
        floor: int | None = None,
    ) -> list[tuple[p.Entry | SessionFinding, float]]:
        """The ranked hits of ``query``; with a ``floor``, only the entries among them that
        clear it (``clears_floor``): kept so in the result cache, a prompt sent again does not
        read every hit's words again."""
        config = self.config
        top_k, scan = config.top_k, config.max_candidate_scan
        if self.slo.degraded:
            top_k, scan = min(top_k, DEGRADED_TOP_K), min(scan, DEGRADED_SCAN)
        # Taken before the search: a change meanwhile leaves the result under the older one.
        generation, now = project.generation, self._clock()
        key = (
            project.slug,
            query,
            scope,
            tuple(files),
            limit,
            threshold,
            top_k,
            scan,
            project.index_lags,
            floor,
        )
        cached = self._results.get(key, generation, now)
        if cached is not None:
            return list(cached)
        ranked = self._search(project, query, scope, files, limit, threshold, top_k, scan, now)
        if floor is not None:
            wanted = retrieval.query_terms(query)
            ranked = [
                (e, score)
                for e, score in ranked
                if isinstance(e, p.Entry) and clears_floor(e, wanted, floor)
            ]
        self._results.put(key, generation, now, tuple(ranked))
        return ranked

    def _search(
        self,
        project: Source,
        query: str,
        scope: SearchScope,
        files: Sequence[str],
        limit: int,
        threshold: float | None,
        top_k: int,
        scan: int,
        now: float,
    ) -> list[tuple[p.Entry | SessionFinding, float]]:
        config = self.config
        terms = retrieval.expand(
            retrieval.query_terms(query), project.aliases(), config.alias_weight
        )
        # An index that has not published compaction's last archives yet still holds them as
        # active: a few more hits make up for those dropped below.
        wanted = limit + (limit if project.index_lags else 0)
        keeping = retrieval.Keeping(now, max(top_k, wanted), files=bool(files))
        hits = project.search_candidates(
            terms, scope=scope, active_files=files, config=config, scan=scan, keeping=keeping
        )
        ranked = retrieval.rank(
            query,
            hits.columns,
            now=now,
            config=config,
            reranker=self.reranker,
            top_k=keeping.top_k,
            limit=wanted,
            threshold=threshold,
        )
        ids = hits.ids([s.candidate.ref for s in ranked])
        found = self._lookup(project, ids)
        archive = scope == "archived"
        # What the store holds decides: a hit gone, or archived since the index learned of it,
        # is left out; an id the index holds twice (until it heals: ``ProjectMemory.
        # _verify_index``) is kept once, at its best rank.
        kept: list[tuple[p.Entry | SessionFinding, float]] = []
        seen: set[str] = set()
        for i, s in zip(ids, ranked, strict=True):
            if i in found and i not in seen:
                seen.add(i)
                kept.append((found[i], s.score))
        return [(e, score) for e, score in kept if _in_scope(e, archive)][:limit]

    def _timed(self, started: float, project: Source) -> None:
        ms = (time.perf_counter() - started) * 1000
        if isinstance(project, ProjectReader):
            project.ms = ms  # the SLO window is the owner's: it records it (settle_read)
        else:
            self._record(ms)

    def settle_read(self, project: ProjectMemory, reader: ProjectReader) -> None:
        """On the owner thread, once a reader thread served a read: its accesses and sessions
        seen go to the project, its latency to the SLO monitor."""
        reader.apply_to(project)
        if reader.ms is not None:
            self._record(reader.ms)

    def _record(self, ms: float) -> None:
        change = self.slo.record(ms)
        if change is not None:
            self.slo_events.append(
                p.DegradeEvent(at=self._clock(), degraded=change.degraded, p95_ms=change.p95_ms)
            )
        if change is not None and self._log is not None:
            event = "slo_degraded" if change.degraded else "slo_recovered"
            self._log.warning(event, p95_ms=round(change.p95_ms, 3))

    # ------------------------------------------------------------------ operations

    def search(self, project: Source, req: p.Search) -> list[p.ScoredEntry]:
        started = time.perf_counter()
        ranked = self._ranked(
            project,
            req.query,
            scope="archived" if req.archive else "active_and_findings",
            files=req.files,
            limit=req.k,
            threshold=self.config.search_relative_threshold,
        )
        self._timed(started, project)
        return [_scored(item, score) for item, score in ranked]

    def inject(
        self,
        project: Source,
        req: p.Inject,
        *,
        session_ids: Sequence[str] = (),
        always_only: bool = False,
        leave_out: AbstractSet[str] = frozenset(),
        extra: Mapping[str, Sequence[Item]] | None = None,
    ) -> p.InjectResult:
        """The payload for ``req``. ``session_ids`` are the sessions whose unpromoted findings
        make the session bridge tier; ``req.session``'s working memory joins the always-inject
        tier; ``always_only`` keeps just that tier (what must survive a compaction);
        ``leave_out``: entries the payload must not carry (what the prompt itself just asked to
        remember: the agent has it in front of it); ``extra`` the items of the extra tiers
        (instruction files, the memory bank: ``budget.EXTRA_TIERS``), budgeted with the rest."""
        started = time.perf_counter()
        always = [e for e in self._always(project, req.session) if e.id not in leave_out]
        always_ids = {e.id for e in always}
        items: dict[str, list[Item]] = {"always": [_item(e) for e in always]}
        if not always_only:
            relevant = self._relevant(project, req, exclude=always_ids | leave_out)
            items["retrieval"] = [_item(e) for e in relevant]
            items["session"] = self._session_items(
                project, [*session_ids, *([req.session] if req.session else [])]
            )
            episodes = self._kept(project, "episodes", SUMMARY_EPISODES, project.episodes)
            items["summaries"] = [_episode_item(ep) for ep in episodes]
            self._attach_conflicts(project, always, relevant, items)
            items.update({tier: list(found) for tier, found in (extra or {}).items() if found})
        ceiling = self._kept(project, "ceiling", self.default_ceiling, project.budget_ceiling)
        total = budget.total_budget(ceiling, req.remaining_context)
        payload = injection.build(req.format, total, items, shares=self.extra_shares)
        project.record_access(payload.ids, self._clock())
        self._timed(started, project)
        return p.InjectResult(
            text=payload.text,
            tokens=p.TokenInfo(total=payload.tokens, budget=payload.budget, tiers=payload.tiers),
            entries=payload.ids,
        )

    def _kept(self, project: Source, what: str, arg: int, read: Callable[[int], _T]) -> _T:
        """``read(arg)``, kept while the project's memory stays the same (its generation).
        Callers do not change what it gives."""
        key, generation, now = (project.slug, what, arg), project.generation, self._clock()
        found: _T | None = self._reads.get(key, generation, now)
        if found is None:
            found = read(arg)
            self._reads.put(key, generation, now, found)
        return found

    def _lookup(self, project: Source, ids: Sequence[str]) -> dict[str, p.Entry | SessionFinding]:
        """``project.lookup(ids)``, each entry kept while the project's memory stays the same:
        the same entries come up prompt after prompt."""
        generation, now = project.generation, self._clock()
        found: dict[str, p.Entry | SessionFinding] = {}
        for i in ids:
            if (kept := self._reads.get((project.slug, "item", i), generation, now)) is not None:
                found[i] = kept
        missing = [i for i in ids if i not in found]
        if missing:
            for i, item in project.lookup(missing).items():
                self._reads.put((project.slug, "item", i), generation, now, item)
                found[i] = item
        return found

    def _always(self, project: Source, session: str | None) -> list[p.Entry]:
        """The always-inject tier: the session's working memory (what its agent asked to keep in
        view: small, and for this session only), then the project's pinned entries."""
        focused = project.working_memory(session) if session else []
        shown = {e.id for e in focused}
        pinned = self._kept(project, "pinned", self.config.max_pinned, project.pinned)
        return [*focused, *(e for e in pinned if e.id not in shown)]

    def _session_items(self, project: Source, session_ids: list[str]) -> list[Item]:
        found = project.unpromoted_findings(list(dict.fromkeys(session_ids)), SESSION_FINDINGS)
        return [Item(kind="finding", text=f.content, id=f.id, category=f.category) for f in found]

    def _relevant(self, project: Source, req: p.Inject, exclude: set[str]) -> list[p.Entry]:
        limit = self.config.inject_top_n
        if req.query.strip():
            ranked = self._ranked(
                project,
                req.query,
                scope="active",
                files=req.files,
                limit=limit + len(exclude),
                floor=self.config.inject_min_shared,
            )
            return [e for e, _ in ranked if isinstance(e, p.Entry) and e.id not in exclude][:limit]
        # No prompt yet (session start): what the project has learnt, confirmed entries first,
        # then the candidates promotion let in (shown with status="candidate"): a restart must
        # not leave the next session with nothing but episodes (issue 19).
        confirmed = project.recent_confirmed(limit)
        candidates, _total = project.list_entries(
            category=None, status="candidate", archived=False, limit=CANDIDATE_SCAN, offset=0
        )
        earned = sorted(
            (e for e in candidates if e.importance >= CANDIDATE_FLOOR and e.id not in exclude),
            key=lambda e: (-e.importance, -e.updated_at),
        )
        return [*confirmed, *earned][:limit]

    def _attach_conflicts(
        self,
        project: Source,
        pinned: list[p.Entry],
        relevant: list[p.Entry],
        items: dict[str, list[Item]],
    ) -> None:
        """Both sides of an active conflict are shown, with the marker (fail loud, design §5)."""
        shown = {e.id: e for e in (*pinned, *relevant)}
        pairs = project.active_conflicts(list(shown))
        if not pairs:
            return
        missing = [i for pair in pairs for i in pair if i not in shown]
        shown.update(project.entries(missing))
        for a, b in pairs:
            if a in shown and b in shown:
                for entry_id in (a, b):
                    if entry_id in missing:
                        items["retrieval"].append(_item(shown[entry_id]))
                        missing.remove(entry_id)
                marker = conflicts.marker(shown[a], shown[b])
                items["retrieval"].append(Item(kind="conflict", text=marker))


def _in_scope(item: p.Entry | SessionFinding, archive: bool) -> bool:
    return not isinstance(item, p.Entry) or item.archived == archive


def clears_floor(entry: p.Entry, wanted: Sequence[str], floor: int) -> bool:
    """Whether ``entry`` clears the relevance floor of a query: shares ``floor`` of the query's
    keywords ``wanted``, or all of them when there are fewer (a word counts when one starts with
    the other: "build" and "builds"). Without it, whatever ranks first is injected, however
    unrelated (issue 19: four "File has not been read yet" entries for an MDX question)."""
    if not wanted:
        return True
    heads = _heads(" ".join((entry.content, *entry.tags, *entry.file_paths)))
    needed, shared = min(floor, len(wanted)), 0
    for w in wanted:
        shared += _matches(w, heads)
        if shared >= needed:
            return True
    return False


# The first five letters of the words of the texts the relevance floor met last: the same
# entries come up prompt after prompt, and finding a text's words took most of the floor's
# time. Kept as one string, each between NULs (~1 KB with its key, a set of them took ~5).
@functools.lru_cache(maxsize=1024)
def _heads(text: str) -> str:
    return "\0" + "\0".join(dict.fromkeys(x[:5] for x in retrieval.keywords(text))) + "\0"


def _matches(w: str, heads: str) -> bool:
    """Whether an entry whose words start with ``heads`` (``_heads``) has one that starts with
    ``w[:5]`` or that ``w`` starts with."""
    if any(f"\0{w[:n]}\0" in heads for n in range(2, min(len(w), 5) + 1)):
        return True  # a head starts w, or is w[:5]
    return len(w) < 5 and f"\0{w}" in heads  # a head starts with w


def _episode_item(ep: Episode) -> Item:
    text = f"{ep.title}: {ep.outcome}" if ep.outcome else ep.title
    return Item(kind="episode", text=text, id=ep.id, category=ep.agent)


def _item(entry: p.Entry) -> Item:
    return Item(
        kind="entry",
        text=entry.content,
        id=entry.id,
        category=entry.category,
        status=entry.status,
    )


def _scored(e: p.Entry | SessionFinding, score: float) -> p.ScoredEntry:
    if isinstance(e, SessionFinding):
        return p.ScoredEntry(
            id=e.id,
            content=e.content,
            category=e.category,
            status="candidate",
            score=round(score, 4),
            importance=e.importance,
            tags=e.tags,
            file_paths=e.file_paths,
            kind="finding",
            session_id=e.session_id,
        )
    return p.ScoredEntry(
        id=e.id,
        content=e.content,
        category=e.category,
        status=e.status,
        score=round(score, 4),
        importance=e.importance,
        tags=e.tags,
        file_paths=e.file_paths,
        archived=e.archived,
    )
