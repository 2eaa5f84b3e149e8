"""Compaction (design §8): importance decay, per-category TTL, eviction past the soft
limit, all to an archive, and purge of old archives. Pure: entries and a clock in, a plan out.

How the numbers are read:

- **Last access** is ``last_accessed_at``, or ``created_at`` for an entry never accessed. Not
  ``updated_at``: it moves on writes that are not uses (a status change, the daily quarantine
  penalty of an unused candidate, a merge from a shared file), and any of those would restart
  the decay and TTL clocks of exactly the entries nobody reads. The same time decides the decay,
  the TTL and the 24 h protection from eviction, so a just-remembered entry is never evicted.
- **Decay is derived, never written back.** The stored ``importance`` is the baseline (what the
  user, promotion, reinforcement and quarantine set); decayed importance is a function of that
  baseline, the clock, the status and the access count. Writing the decayed value back would
  compound: a run a minute after another would apply the status multiplier (0.9) and the access
  resistance (as low as 0.5) a second time, halving an unused entry per run. A function of the
  entry's state cannot compound, so any number of runs at the same time give the same result,
  and nothing reads a stale value between runs. ``EntryDecayed`` therefore records, for the
  audit log, that an entry's decayed importance fell a whole step since the previous run
  (``since``); a run a minute after another reports (almost) nothing.
- **TTL** counts days since last access: an entry is ``stale`` when nobody used it for its
  category's TTL, unless it was accessed at least ``ttl_access_threshold`` times.
- **Archive time** is ``updated_at`` of an archived entry (``Entry`` has no ``archived_at``;
  archiving is the entry's last write, and ``EntryExpired``/``EntryEvicted`` carry it).

**Slices**: ``CompactionPlanner`` accumulates over any number of ``add`` calls and decides the
evictions ``evict(limit)`` at a time, so a run over 300,000 entries never holds the owner thread
for long; ``compaction_steps`` drives it a slice at a time, ``plan_compaction`` in one go. Both
give the same plan. Eviction needs the global rank, but only the entries kept are ever fewer
than ``target``: a bounded heap of the best ``target`` keys is kept while adding, so no slice
sorts more than that.

**Memory**: a run over 30,000 aged entries decides ~45,000 times, and held as events those took
~11 MB of Python objects at once, whose arenas the heap kept after the run (bench/memory.py).
The planner keeps its decisions as columns (ids, and their numbers in arrays: ~60 bytes each
besides the id) and builds the events when asked: ``plan()`` all of them, ``decisions()`` one at
a time as they are applied.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import get_args

import msgspec

from memctl.protocol import Category, Entry
from memoryd.core.entries import CATEGORY_TABLE
from memoryd.core.events import (
    ArchivePurged,
    CompactionEvent,
    EntryDecayed,
    EntryEvicted,
    EntryExpired,
)

DAY = 86_400.0
# Each category's one string: a decision keeps it, not the copy its entry was read with.
_CATEGORIES: dict[str, Category] = {c: c for c in get_args(Category)}
SLICE_SIZE = 2_000  # entries per slice: see bench/compaction.py for what a slice costs


def _default_ttl_days() -> dict[Category, int]:
    return {category: ttl for category, (ttl, _section) in CATEGORY_TABLE.items()}


class CompactionPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The numbers of design §8 (defaults); TTLs come from the design §2 table."""

    soft_limit: int = 3_000  # active entries above this start an eviction...
    target: int = 2_700  # ...down to this
    archive_days: int = 365  # archived entries older than this are deleted
    ttl_days: Mapping[Category, int] = msgspec.field(default_factory=_default_ttl_days)
    ttl_access_threshold: int = 3  # accessed this many times: survives its TTL
    recent_access_hours: float = 24.0  # accessed this recently: never evicted
    decay_base: float = 0.95  # 5% ...
    decay_period_days: float = 7.0  # ... per week since last access
    candidate_multiplier: float = 0.9
    resistance_floor: float = 0.5  # access resistance = min(1, floor + access_count × step)
    resistance_per_access: float = 0.05
    decay_report_step: float = 0.01  # EntryDecayed when decayed importance falls a whole step

    def __post_init__(self) -> None:
        if not 0 <= self.target <= self.soft_limit:
            raise ValueError(f"target {self.target} must be within 0..soft_limit")
        if self.decay_period_days <= 0 or self.decay_report_step <= 0:
            raise ValueError("decay_period_days and decay_report_step must be positive")


DEFAULT_POLICY = CompactionPolicy()


class CompactionCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What ``memctl compact`` reports: decisions taken, then active and archived entries after."""

    decayed: int
    expired: int
    evicted: int
    purged: int
    active: int
    archived: int


class CompactionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Every decision of one run with the numbers that decided it. Expired and evicted entries
    are archived (``stale``/``evicted``), purged ones deleted; decays change no stored value."""

    now: float
    since: float | None
    decayed: tuple[EntryDecayed, ...]
    expired: tuple[EntryExpired, ...]
    evicted: tuple[EntryEvicted, ...]
    purged: tuple[ArchivePurged, ...]
    counts: CompactionCounts


# --------------------------------------------------------------------------- the formula


def last_access(entry: Entry) -> float:
    return entry.created_at if entry.last_accessed_at is None else entry.last_accessed_at


def days_since_access(entry: Entry, at: float) -> float:
    return max(0.0, at - last_access(entry)) / DAY


def status_multiplier(entry: Entry, policy: CompactionPolicy) -> float:
    return policy.candidate_multiplier if entry.status == "candidate" else 1.0


def access_resistance(entry: Entry, policy: CompactionPolicy) -> float:
    return min(1.0, policy.resistance_floor + entry.access_count * policy.resistance_per_access)


def decayed_importance(entry: Entry, at: float, policy: CompactionPolicy = DEFAULT_POLICY) -> float:
    """importance × base^(days since access / period) × status multiplier × access resistance;
    a pinned entry keeps its importance."""
    if entry.status == "pinned":
        return entry.importance
    weeks = days_since_access(entry, at) / policy.decay_period_days
    access_decay = math.pow(policy.decay_base, weeks)
    factors = access_decay * status_multiplier(entry, policy) * access_resistance(entry, policy)
    return round(entry.importance * factors, 6)


def _step(value: float, policy: CompactionPolicy) -> int:
    # The small bias keeps 0.7 / 0.01 = 69.999... on step 70.
    return math.floor(value / policy.decay_report_step + 1e-9)


# --------------------------------------------------------------------------- the planner

_RankKey = tuple[float, float, str]  # (decayed importance, last access, id): higher is kept


class CompactionPlanner:
    """Accumulates one compaction run over slices of entries (each entry exactly once, archived
    ones included), then decides evictions a slice at a time. ``plan()`` finishes any evictions
    left and returns the plan; the planner decides, it changes nothing."""

    def __init__(
        self, now: float, policy: CompactionPolicy = DEFAULT_POLICY, *, since: float | None = None
    ) -> None:
        self._now = now
        self._since = since
        self._policy = policy
        self._recent_cutoff = now - policy.recent_access_hours * 3600.0
        # Decisions as columns, built into events on demand (``_expiry``, ``_decay``, ...).
        self._expired_ids: list[str] = []
        self._expired_categories: list[Category] = []
        self._expired_numbers = array("d")  # days since access, access count: 2 per decision
        self._decayed_ids: list[str] = []
        # importance, decayed from, decayed, days since access, status multiplier, access
        # resistance: 6 per decision
        self._decayed_numbers = array("d")
        self._evicted_ids: list[str] = []
        self._evicted_decayed = array("d")
        self._purged: list[ArchivePurged] = []
        self._active = 0  # after expiry, before eviction
        self._protected = 0  # active and never evictable: pinned or recently accessed
        self._archived = 0  # archived before this run and not purged
        # Evictable entries' rank keys (decayed importance, last access, id) as columns.
        self._evictable_ids: list[str] = []
        self._evictable_numbers = array("d")  # decayed importance, last access: 2 per entry
        self._best: list[_RankKey] = []  # min-heap of the best `target` evictable keys
        self._cutoff: _RankKey | None = None  # the lowest key kept, once evicting began
        self._evicting = False
        self._cursor = 0

    def add(self, entries: Iterable[Entry]) -> None:
        if self._evicting:
            raise RuntimeError("entries added to a compaction after its evictions began")
        for entry in entries:
            if entry.archived:
                self._add_archived(entry)
            elif entry.status == "pinned":
                self._active += 1
                self._protected += 1
            else:
                self._add_active(entry)

    def _add_archived(self, entry: Entry) -> None:
        days = max(0.0, self._now - entry.updated_at) / DAY
        if days <= self._policy.archive_days:
            self._archived += 1
            return
        self._purged.append(
            ArchivePurged(
                id=entry.id,
                archived_reason=entry.archived_reason,
                archived_at=entry.updated_at,
                days_archived=round(days, 3),
                archive_days=self._policy.archive_days,
                purged_at=self._now,
            )
        )

    def _add_active(self, entry: Entry) -> None:
        policy = self._policy
        days = days_since_access(entry, self._now)
        ttl = policy.ttl_days.get(entry.category)
        if ttl is not None and days > ttl and entry.access_count < policy.ttl_access_threshold:
            self._expired_ids.append(entry.id)
            self._expired_categories.append(_CATEGORIES.get(entry.category, entry.category))
            self._expired_numbers.extend((round(days, 3), entry.access_count))
            return
        decayed = decayed_importance(entry, self._now, policy)
        self._note_decay(entry, decayed, days)
        self._active += 1
        touched = last_access(entry)
        if touched > self._recent_cutoff:
            self._protected += 1
            return
        key = (decayed, touched, entry.id)
        self._evictable_ids.append(entry.id)
        self._evictable_numbers.extend((decayed, touched))
        if len(self._best) < policy.target:
            heapq.heappush(self._best, key)
        elif policy.target and key > self._best[0]:
            heapq.heapreplace(self._best, key)

    def _note_decay(self, entry: Entry, decayed: float, days: float) -> None:
        policy = self._policy
        before = (
            entry.importance
            if self._since is None
            else decayed_importance(entry, self._since, policy)
        )
        if _step(decayed, policy) >= _step(before, policy):
            return
        self._decayed_ids.append(entry.id)
        self._decayed_numbers.extend(
            (
                entry.importance,
                before,
                decayed,
                round(days, 3),
                status_multiplier(entry, policy),
                access_resistance(entry, policy),
            )
        )

    def evict(self, limit: int) -> bool:
        """Decide the evictions of at most ``limit`` evictable entries; True once all are
        decided. No entry can be added after the first call."""
        if not self._evicting:
            self._start_evicting()
        if not self._must_evict():
            return True
        ids, numbers = self._evictable_ids, self._evictable_numbers
        end = min(len(ids), self._cursor + max(1, limit))
        cutoff = self._cutoff
        for i in range(self._cursor, end):
            decayed = numbers[2 * i]
            if cutoff is None or (decayed, numbers[2 * i + 1], ids[i]) < cutoff:
                self._evicted_ids.append(ids[i])
                self._evicted_decayed.append(decayed)
        self._cursor = end
        if end == len(ids):  # decided: the keys are done with
            self._evictable_ids, self._evictable_numbers = [], array("d")
            self._cursor = 0
            return True
        return False

    def _must_evict(self) -> bool:
        return self._active > self._policy.soft_limit

    def _start_evicting(self) -> None:
        self._evicting = True
        if not self._must_evict():
            return
        keep = max(0, self._policy.target - self._protected)
        kept = heapq.nlargest(keep, self._best) if keep else []
        self._cutoff = kept[-1] if kept else None

    # The events, built from the columns.

    def _expiry(self, i: int) -> EntryExpired:
        category = self._expired_categories[i]
        return EntryExpired(
            id=self._expired_ids[i],
            category=category,
            ttl_days=self._policy.ttl_days[category],
            days_since_access=self._expired_numbers[2 * i],
            access_count=int(self._expired_numbers[2 * i + 1]),
            archived_at=self._now,
        )

    def _eviction(self, i: int) -> EntryEvicted:
        return EntryEvicted(
            id=self._evicted_ids[i],
            decayed=self._evicted_decayed[i],
            cutoff=None if self._cutoff is None else self._cutoff[0],
            active_before=self._active,
            soft_limit=self._policy.soft_limit,
            target=self._policy.target,
            archived_at=self._now,
        )

    def _decay(self, i: int) -> EntryDecayed:
        n = self._decayed_numbers[6 * i : 6 * i + 6]
        return EntryDecayed(
            id=self._decayed_ids[i],
            importance=n[0],
            decayed_from=n[1],
            decayed=n[2],
            days_since_access=n[3],
            status_multiplier=n[4],
            access_resistance=n[5],
            decayed_at=self._now,
        )

    def _decide(self) -> None:
        while not self.evict(len(self._evictable_ids)):
            pass

    def counts(self) -> CompactionCounts:
        """What the run decided, in numbers (evictions decided first)."""
        self._decide()
        expired, evicted = len(self._expired_ids), len(self._evicted_ids)
        return CompactionCounts(
            decayed=len(self._decayed_ids),
            expired=expired,
            evicted=evicted,
            purged=len(self._purged),
            active=self._active - evicted,
            archived=self._archived + expired + evicted,
        )

    def decisions(self) -> Iterator[CompactionEvent]:
        """Every decision as an event, in the order a run applies them (expired, evicted,
        purged, decayed), each built when taken and its id let go by the planner then: what a
        run holds at once is the columns, not the events. Once only: ``plan`` and ``counts``
        are not for after."""
        self._decide()
        yield from _taken(self._expired_ids, self._expiry)
        yield from _taken(self._evicted_ids, self._eviction)
        yield from self._purged
        yield from _taken(self._decayed_ids, self._decay)

    def plan(self) -> CompactionPlan:
        counts = self.counts()
        return CompactionPlan(
            now=self._now,
            since=self._since,
            decayed=tuple(self._decay(i) for i in range(len(self._decayed_ids))),
            expired=tuple(self._expiry(i) for i in range(len(self._expired_ids))),
            evicted=tuple(self._eviction(i) for i in range(len(self._evicted_ids))),
            purged=tuple(self._purged),
            counts=counts,
        )


def _taken(ids: list[str], build: Callable[[int], CompactionEvent]) -> Iterator[CompactionEvent]:
    for i in range(len(ids)):
        event = build(i)
        ids[i] = ""  # the event holds the id now
        yield event


# --------------------------------------------------------------------------- drivers


def plan_compaction(
    entries: Iterable[Entry],
    now: float,
    policy: CompactionPolicy = DEFAULT_POLICY,
    *,
    since: float | None = None,
) -> CompactionPlan:
    """One compaction run over every entry of a project (archived ones included), in one go.
    ``since`` is when the previous run was planned (None: never), for reporting decays."""
    planner = CompactionPlanner(now, policy, since=since)
    planner.add(entries)
    return planner.plan()


def compaction_steps(
    entries: Iterable[Entry],
    now: float,
    policy: CompactionPolicy = DEFAULT_POLICY,
    *,
    since: float | None = None,
    slice_size: int = SLICE_SIZE,
) -> Iterator[CompactionPlan | None]:
    """The same run a slice at a time: yields None after each slice of at most ``slice_size``
    entries (read from ``entries`` lazily) or evictions, and the plan last. The owner thread
    takes one step per turn and serves requests between two."""
    for step in planning_steps(entries, now, policy, since=since, slice_size=slice_size):
        yield None if step is None else step.plan()


def planning_steps(
    entries: Iterable[Entry],
    now: float,
    policy: CompactionPolicy = DEFAULT_POLICY,
    *,
    since: float | None = None,
    slice_size: int = SLICE_SIZE,
) -> Iterator[CompactionPlanner | None]:
    """``compaction_steps``, but the planner last, every decision taken and none built into an
    event yet (``CompactionPlanner.decisions``, ``counts``)."""
    planner = CompactionPlanner(now, policy, since=since)
    remaining = iter(entries)
    while chunk := list(islice(remaining, slice_size)):
        planner.add(chunk)
        yield None
    while not planner.evict(slice_size):
        yield None
    yield planner


# --------------------------------------------------------------------------- applying


def still_holds(
    decision: EntryDecayed | EntryExpired | EntryEvicted | ArchivePurged,
    entry: Entry | None,
    now: float,
    policy: CompactionPolicy = DEFAULT_POLICY,
) -> bool:
    """Whether a decision taken over slices is still right for the entry as it is now: requests
    are served between two slices, so an entry may have been used, pinned, archived, restored
    or forgotten since it was read. A decision that no longer holds is dropped (the next run
    decides again); one that holds is applied as planned."""
    if entry is None:
        return False
    match decision:
        case ArchivePurged(archived_at=archived_at):
            return entry.archived and entry.updated_at == archived_at
        case EntryDecayed():
            return not entry.archived
        case EntryExpired(ttl_days=ttl):
            return (
                not entry.archived
                and entry.status != "pinned"
                and days_since_access(entry, now) > ttl
                and entry.access_count < policy.ttl_access_threshold
            )
        case EntryEvicted():
            recent = now - policy.recent_access_hours * 3600.0
            return not entry.archived and entry.status != "pinned" and last_access(entry) <= recent
