"""Benchmark: planning a compaction (core/compaction.py) at 3,000, 30,000 and 300,000 entries.

Pure core only, in this process: no daemon, store or audit log (reading the entries from SQLite
and applying the plan are not measured here). Per size, a seeded synthetic project (all
categories, one in 200 pinned, a quarter candidates, half accessed, a tenth archived, ages up to
two years) is planned ``--repeats`` times a slice at a time, as the owner thread will
(``planning_steps``: the planner last, its decisions built into events only as a run applies
them): the total time of a plan (median, p95) and the time of one slice (p95,
the longest of all repeats), which is how long the owner thread is held at a time. Two runs:
``first`` (no previous run: every decay a step or more below the baseline is reported) and
``again`` (the same entries a minute later, ``since`` the first: decays reported drop to ~0;
expiries and evictions repeat because the bench does not apply the first plan). At 300,000 the
active count stays above 2,700 because more entries than that are protected (pinned, or accessed
or created in the last 24 h).
Progress on stderr, table on stdout; tables, no asserts.

``--apply``: the daemon's whole run instead, on a real project (SQLite, audit log, search index
in a temporary folder) loaded with the same entries: ``memoryd.compactor.CompactionRun`` a step
at a time as the loop takes them (each step reads a keyset page from SQLite, or applies one batch
of decisions: one journal line, one transaction; or, after each batch, hands the index what it
lacks: publishing the last background commit if done, writing documents and starting the next
commit; the run waits for the index when it lags 2,000 changes behind, and at its end), with an
inject between two steps, as a prompt served meanwhile; then the index catching up with what
the run left (what the next search of the archive, or the index commit job, does).
Reported: the run's time, its steps, the longest steps (the longest the owner thread is held by
the run), the index steps, the catch-up, and inject p95 before and during the run.

    .venv/bin/python bench/compaction.py [--sizes 3000,30000,300000]
        [--repeats 5] [--slice-size 2000] [--apply]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from memctl.protocol import Entry, Inject
from memoryd.background import BackgroundErrors
from memoryd.compactor import CompactionRun
from memoryd.config import StorageSettings
from memoryd.core.compaction import DEFAULT_POLICY, SLICE_SIZE, CompactionCounts, planning_steps
from memoryd.core.entries import CATEGORIES, section_of
from memoryd.core.recall.retrieval import RetrievalConfig
from memoryd.core.recall.slo import SloMonitor
from memoryd.project import ProjectMemory
from memoryd.recall import Recall

DAY = 86_400.0
NOW = 1_750_000_000.0


def synthetic(n: int, seed: int = 7) -> list[Entry]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        category = rng.choice(CATEGORIES)
        age = rng.uniform(0, 730) * DAY
        accessed = rng.random() < 0.5
        archived = rng.random() < 0.1
        status = "pinned" if rng.random() < 0.005 else rng.choice(("candidate", "confirmed"))
        out.append(
            Entry(
                id=f"{i:032x}",
                fingerprint=f"{i:016x}",
                content=f"synthetic entry {i}",
                category=category,
                section=section_of(category),
                importance=round(rng.uniform(0.05, 1.0), 4),
                confidence=1.0,
                status=status,
                archived=archived,
                archived_reason="evicted" if archived else None,
                access_count=rng.randrange(1, 20) if accessed else 0,
                last_accessed_at=NOW - rng.uniform(0, age) if accessed else None,
                created_at=NOW - age,
                updated_at=NOW - rng.uniform(0, age),
            )
        )
    return out


def one_run(
    entries: list[Entry], since: float | None, slice_size: int
) -> tuple[float, list[float], CompactionCounts]:
    slices: list[float] = []
    steps = planning_steps(entries, NOW, since=since, slice_size=slice_size)
    while True:
        t0 = time.perf_counter()
        item = next(steps, None)
        slices.append(time.perf_counter() - t0)
        if item is not None:
            break
    return sum(slices), slices, item.counts()


def applied_run(size: int, load_chunk: int = 5_000) -> str:
    """The daemon's run on a real project of ``size`` synthetic entries; one table row."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        project = ProjectMemory(
            root, Path(tmp) / "data", StorageSettings(), BackgroundErrors(), clock=lambda: NOW
        )
        entries = synthetic(size)
        print(f"  loading {size:,} entries", file=sys.stderr)
        for start in range(0, size, load_chunk):
            project.import_entries(entries[start : start + load_chunk])
        project.sync_index()
        queries = [f"synthetic entry {i}" for i in random.Random(3).sample(range(size), 200)]
        del entries
        gc.collect()
        recall = Recall(RetrievalConfig(), SloMonitor())
        before = [_inject_ms(recall, project, q) for q in queries]
        during: list[float] = []
        print("  compacting", file=sys.stderr)
        run = CompactionRun(project, lambda: NOW, DEFAULT_POLICY, dry_run=False)
        steps: list[float] = []  # reading a page, or applying a batch
        syncs: list[float] = []  # the index learning of a batch
        sync = project.commit_index_in_background
        synced = [False]

        def timed_sync() -> None:
            synced[0] = True
            sync()

        project.commit_index_in_background = timed_sync  # type: ignore[method-assign]
        committed = threading.Event()
        project.on_index_committed(committed.set)
        done = False
        while not done:
            synced[0] = False
            committed.clear()
            t0 = time.perf_counter()
            done = run.step()
            (syncs if synced[0] else steps).append(time.perf_counter() - t0)
            # A prompt served between two steps (one that arrives during a step also waits for
            # the rest of it: at most the step's time).
            during.append(_inject_ms(recall, project, queries[len(during) % len(queries)]))
            if run.waiting:  # as the daemon's loop, sleep until the index's commit ends
                committed.wait()
        project.commit_index_in_background = sync  # type: ignore[method-assign]
        t0 = time.perf_counter()
        project.sync_index()
        catch_up = time.perf_counter() - t0
        project.close()
    r = run.result
    assert r is not None
    return (
        f"{size:>8,} {len(steps) + len(syncs):>6} {sum(steps) + sum(syncs):>8.2f}s "
        f"{p95(steps) * 1e3:>8.1f}ms {max(steps) * 1e3:>8.1f}ms "
        f"{p95(syncs or [0.0]) * 1e3:>8.1f}ms {max(syncs or [0.0]) * 1e3:>8.1f}ms "
        f"{catch_up * 1e3:>8.0f}ms {p95(before):>8.1f}ms {p95(during):>8.1f}ms  "
        f"expired={r.expired} "
        f"evicted={r.evicted} purged={r.purged} active={r.active} archived={r.archived}"
    )


def _inject_ms(recall: Recall, project: ProjectMemory, query: str) -> float:
    t0 = time.perf_counter()
    recall.inject(project, Inject(query=query, format="claude"))
    return (time.perf_counter() - t0) * 1e3


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3000,30000,300000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--slice-size", type=int, default=SLICE_SIZE)
    parser.add_argument("--apply", action="store_true", help="the daemon's run, applied")
    args = parser.parse_args()
    if args.apply:
        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            print(f"{size:,} entries", file=sys.stderr)
            rows.append(applied_run(size))
        print(
            f"python {sys.version.split()[0]}; run steps of a project compacted as the daemon does"
        )
        print(
            f"{'entries':>8} {'steps':>6} {'run':>9} {'step p95':>10} {'step max':>10} "
            f"{'sync p95':>10} {'sync max':>10} {'after':>10} {'inj p95':>10} {'during':>10}"
            "  counts"
        )
        print("(step: a page read or a batch applied; sync: the index learning of a batch, its")
        print(" commit in the background; after: the index catch-up left once the run is done;")
        print(" inj p95: inject before the run, during: inject between two steps of it)")
        print("\n".join(rows))
        return 0

    header = (
        f"{'entries':>8} {'run':>6} {'slices':>6} {'plan median':>12} {'plan p95':>9} "
        f"{'slice p95':>10} {'slice max':>10}  counts"
    )
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"building {size:,} entries", file=sys.stderr)
        entries = synthetic(size)
        gc.collect()
        for label, since in (("first", None), ("again", NOW - 60)):
            totals: list[float] = []
            all_slices: list[float] = []
            counts = None
            for r in range(args.repeats):
                print(f"  {label} run {r + 1}/{args.repeats}", file=sys.stderr)
                total, slices, counts = one_run(entries, since, args.slice_size)
                totals.append(total)
                all_slices.extend(slices)
            assert counts is not None
            c = counts
            rows.append(
                f"{size:>8,} {label:>6} {len(all_slices) // args.repeats:>6} "
                f"{statistics.median(totals) * 1e3:>10.1f}ms {p95(totals) * 1e3:>7.1f}ms "
                f"{p95(all_slices) * 1e3:>8.2f}ms {max(all_slices) * 1e3:>8.2f}ms  "
                f"decayed={c.decayed} expired={c.expired} evicted={c.evicted} "
                f"purged={c.purged} active={c.active} archived={c.archived}"
            )
    print(f"slice size {args.slice_size} entries; python {sys.version.split()[0]}")
    print(header)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
