"""Compaction as daemon work (design §8): when it runs, and how it shares the owner thread.

The core (``memoryd.core.compaction``) decides; this service feeds it a keyset page of entries
per step and applies its plan a batch per step, each batch one event (``CompactionApplied``) in
one transaction, as many decisions as fit in ``APPLY_BUDGET_S`` (the cost of the last batch
tells). The loop takes one step per turn between messages (``Server`` ``idle_work``), so a run
over 300,000 entries never holds the owner thread for long (``bench/compaction.py``). The index
learns of each batch through a commit in the background (``commit_index_in_background``):
meanwhile searches drop what the store holds as archived, and ``search --archive`` waits.

A run is started when a project opens, after every ``every_accesses`` injected entries, by the
scheduler's ``compaction`` tick, and by ``memctl compact``. Requests are served between two
steps, so each decision is checked against the entry as it is when applied
(``core.compaction.still_holds``).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from itertools import islice

from memctl import protocol as p
from memoryd import memtrim
from memoryd.core.compaction import (
    DEFAULT_POLICY,
    CompactionPlanner,
    CompactionPolicy,
    planning_steps,
)
from memoryd.core.events import (
    ArchivePurged,
    CompactionEvent,
    EntryDecayed,
    EntryEvicted,
    EntryExpired,
)
from memoryd.project import ProjectMemory

# Decisions per event and transaction: the first batch's, then as many as the last batch says
# fit in the budget (its fsyncs, ~10-20 ms, are most of it), within the bounds.
APPLY_BATCH = 200
APPLY_BUDGET_S = 0.020
MIN_BATCH, MAX_BATCH = 50, 1_000
PAGE_SIZE = 1_000  # entries read and planned per step (at 2,000: p95 ~30 ms at 300,000)
# Store changes the index may lag behind a run before the run waits for its commits: what a
# search of the archive (which waits for the index) may have to commit itself.
INDEX_BACKLOG = 2_000
EVERY_ACCESSES = 50  # design §8: a run after this many entries were injected
# A run the accesses ask for waits until the project's last one has been over for this many
# times its own work: under a flood of prompts (8 clients, ~1,000 injects/s) a run every 10
# injects took a third of the owner thread and voided the result cache each time; so bounded,
# what use asks of compaction is a fiftieth of the owner thread at most.
ACCESS_RUN_SHARE = 50.0
MAX_WAITING = 64  # client requests waiting for a run


class CompactionRun:
    """One run over one project: planned a page per step, then applied a batch per step.
    ``result`` is set when it is done."""

    def __init__(
        self,
        project: ProjectMemory,
        clock: Callable[[], float],
        policy: CompactionPolicy,
        *,
        dry_run: bool,
        monotonic: Callable[[], float] = time.monotonic,
        slice_size: int = PAGE_SIZE,
        batch_size: int = APPLY_BATCH,
    ) -> None:
        self.project = project
        self.dry_run = dry_run
        self.result: p.CompactResult | None = None
        self.waiting = False  # on a commit of the index: nothing to do until it ends
        self.worked_s = 0.0  # time its steps took (the loop serves clients between them)
        self.ended_at: float | None = None  # ``monotonic()`` when it was done
        self._clock = clock
        self._monotonic = monotonic
        self._policy = policy
        self._slice_size = slice_size
        self._batch_size = batch_size
        self._steps = self._run()

    def done(self) -> bool:
        return self.result is not None

    def step(self) -> bool:
        """Take one step; True once the run is done. ``waiting`` says whether the next one has
        work to do before the index's commit in the background ends."""
        if self.result is None:
            started = self._monotonic()
            self.waiting = next(self._steps, False)
            self.worked_s += self._monotonic() - started
            if self.result is not None:
                self.ended_at = self._monotonic()
        return self.result is not None

    def _pages(self) -> Iterator[p.Entry]:
        after = ""
        while page := self.project.entries_after(after, self._slice_size):
            yield from page
            after = page[-1].id

    def _index_keeps_up(self, backlog: int) -> Iterator[bool]:
        """Wait while the index lags more than ``backlog`` store changes behind, each step
        starting its next commit once the last one ended (True: the loop may sleep until a
        commit wakes it)."""
        project = self.project
        while project.index_backlog() > backlog:
            project.commit_index_in_background()
            if not project.index_committing:
                return
            yield True

    def _run(self) -> Iterator[bool]:
        project = self.project
        now = self._clock()  # when it starts, not when it was asked for
        project.accesses_since_compaction = 0
        project.flush_accesses()  # the access counts the plan reads are current
        since = project.last_compacted_at()
        planning = planning_steps(
            self._pages(), now, self._policy, since=since, slice_size=self._slice_size
        )
        planner: CompactionPlanner | None = None
        while planner is None:  # a slice a step, every decision taken last
            planner = next(planning)
            yield False
        del planning
        c = planner.counts()
        if self.dry_run:
            self.result = p.CompactResult(
                decayed=c.decayed,
                expired=c.expired,
                evicted=c.evicted,
                purged=c.purged,
                active=c.active,
                archived=c.archived,
                dry_run=True,
            )
            return
        # The planner holds its decisions as columns; each is built into an event when its
        # batch is applied and let go after (core.compaction: "Memory").
        left = c.decayed + c.expired + c.evicted + c.purged
        decisions = planner.decisions()
        del planner
        applied: Counter[type[CompactionEvent]] = Counter()
        size = self._batch_size
        while left:
            yield from self._index_keeps_up(INDEX_BACKLOG)
            yield False
            batch = list(islice(decisions, min(size, left)))
            left -= len(batch)
            began = time.perf_counter()
            kept = project.apply_compaction(
                batch, ran_at=now, completed=not left, policy=self._policy
            )
            size = next_batch_size(size, time.perf_counter() - began)
            applied.update(type(d) for d in kept)
            # The index learns of each batch in a step of its own, committed in the background:
            # left to the next search, a whole run's archives would hold the owner thread for
            # seconds at 300,000, and a commit takes ~100 ms however small.
            yield False
            project.commit_index_in_background()
        # Answered once the index holds what the run archived: a search of the archive then
        # finds it without committing the run's last batches itself.
        yield from self._index_keeps_up(0)
        project.compacted_at = now
        yield False  # counting the entries reads them all
        counts = project.entry_counts()
        self.result = p.CompactResult(
            decayed=applied[EntryDecayed],
            expired=applied[EntryExpired],
            evicted=applied[EntryEvicted],
            purged=applied[ArchivePurged],
            active=counts.candidate + counts.confirmed + counts.pinned,
            archived=counts.archived,
        )


def next_batch_size(size: int, took_s: float) -> int:
    """The batch that should take ``APPLY_BUDGET_S`` if the last one, of ``size`` decisions,
    took ``took_s``: at most twice or half the last, within the bounds."""
    wanted = size * APPLY_BUDGET_S / max(took_s, 1e-6)
    return int(min(MAX_BATCH, 2 * size, max(MIN_BATCH, size // 2, wanted)))


class Compactor:
    """The queue of compaction runs, one step of the head run per loop turn. Owner thread only."""

    def __init__(
        self,
        opened: Callable[[], list[ProjectMemory]],
        *,
        policy: CompactionPolicy = DEFAULT_POLICY,
        every_accesses: int = EVERY_ACCESSES,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._opened = opened
        self.policy = policy
        self.every_accesses = every_accesses
        self._clock = clock
        self._monotonic = monotonic
        self._runs: deque[CompactionRun] = deque()
        self._last: dict[str, CompactionRun] = {}  # each project's last real run, by slug
        # The run of each client request waiting for one (keyed by the request object, held so
        # that its id is not reused while it waits).
        self._for_request: dict[int, tuple[object, CompactionRun]] = {}

    def request(self, project: ProjectMemory, *, dry_run: bool = False) -> CompactionRun:
        """Queue a run (a real one joins a real one already queued for the project)."""
        if not dry_run:
            for run in self._runs:
                if run.project is project and not run.dry_run:
                    return run
        run = CompactionRun(
            project, self._clock, self.policy, dry_run=dry_run, monotonic=self._monotonic
        )
        self._runs.append(run)
        if not dry_run:
            self._last[project.slug] = run
        return run

    def _accesses_due(self, project: ProjectMemory) -> bool:
        """Whether the accesses ask for a run now (``ACCESS_RUN_SHARE``)."""
        if project.accesses_since_compaction < self.every_accesses:
            return False
        last = self._last.get(project.slug)
        if last is None or last.project is not project:
            return True
        if last.ended_at is None:  # queued or under way: it counts these accesses already
            return False
        return self._monotonic() - last.ended_at >= last.worked_s * ACCESS_RUN_SHARE

    def on_open(self, project: ProjectMemory) -> None:
        """A project opened: compact it (design §8, on load), unless it holds nothing yet (what
        the opening request adds is not "loaded": the next run sees it)."""
        c = project.entry_counts()
        if c.candidate + c.confirmed + c.pinned + c.archived:
            self.request(project)

    def request_all(self) -> None:
        for project in self._opened():
            self.request(project)

    def for_request(self, request: object, project: ProjectMemory, dry_run: bool) -> CompactionRun:
        """The run answering one client request (its parked handler runs again until the run is
        done); forgotten once done."""
        held = self._for_request.get(id(request))
        if held is None or held[0] is not request:
            held = (request, self.request(project, dry_run=dry_run))
            self._for_request[id(request)] = held
            while len(self._for_request) > MAX_WAITING:  # answered at their deadline meanwhile
                del self._for_request[next(iter(self._for_request))]
        run = held[1]
        if run.done():
            self._for_request.pop(id(request), None)
        return run

    def pending(self) -> bool:
        return bool(self._runs)

    def step(self) -> bool:
        """One step of the head run (the loop's idle work); True while more work is queued."""
        opened = self._opened()
        for project in opened:
            if self._accesses_due(project):
                self.request(project)
        if not self._runs:
            return False
        run = self._runs[0]
        if run.project not in opened:  # closed meanwhile: it runs again when it opens
            self._runs.popleft()
            run.result = p.CompactResult(
                decayed=0, expired=0, evicted=0, purged=0, active=0, archived=0, done=False
            )
        elif run.step():
            self._runs.popleft()
            memtrim.give_back()  # a run reads every entry: what it freed goes back
        # A run waiting on the index's commit is woken by it (``on_index_committed``).
        return bool(self._runs) and not self._runs[0].waiting
