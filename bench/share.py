"""Benchmark: the shared file (issue 9, design §9) on the owner thread, at 3,000 and 30,000 shared
entries.

On a real project (SQLite, audit log, search index in a temporary folder) loaded with confirmed
entries, the owner-thread pieces of sharing are timed ``--repeats`` times each (median, p95):

- ``first render``: ``ProjectMemory.shared_text`` the first time — reading every shared entry,
  tombstone and edge and encoding the file (once per project open);
- ``render``: the same after one change (a pin, timed with it): the lines are kept, so only the
  changed ids are read again, then the file is joined (done after each change that moves the
  file, at most one a project at a time while the writer writes the previous one);
- ``own merge``: parsing the file the daemon wrote itself and planning its merge (what the
  watcher's report of our own write would cost if the hash check did not stop it first; the
  plan is empty);
- ``pull merge``: a teammate's file with 1 % of the entries newer and 1 % new merged in, one
  event and one transaction (what a ``git pull`` costs);
- ``write``: the writer thread's atomic write (off the owner thread; for scale).

Progress on stderr, table on stdout; tables, no asserts.

    /work/venv-share/bin/python bench/share.py [--sizes 3000,30000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from memctl.protocol import Entry, Source
from memoryd.background import BackgroundErrors
from memoryd.config import StorageSettings
from memoryd.core import share
from memoryd.core.entries import new_entry
from memoryd.project import ProjectMemory
from memoryd.share import ShareJob, write_share_file

NOW = 1_750_000_000.0


def synthetic(n: int, prefix: str = "") -> list[Entry]:
    return [
        new_entry(
            entry_id=f"{prefix}{i:032x}",
            content=f"synthetic shared fact {prefix}{i} about module {i % 311} and its tests",
            category="decision",
            status="pinned" if i % 50 == 0 else "confirmed",
            now=NOW - i,
            source=Source(kind="user"),
            tags=("bench",),
        )
        for i in range(n)
    ]


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def row(size: int, repeats: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        project = ProjectMemory(
            root, Path(tmp) / "data", StorageSettings(), BackgroundErrors(), clock=lambda: NOW
        )
        print(f"  loading {size:,} entries", file=sys.stderr)
        entries = synthetic(size)
        for start in range(0, size, 5_000):
            project.import_entries(entries[start : start + 5_000])
        first = timed(project.shared_text, 1)  # reads every shared entry once
        text = project.shared_text()

        def after_a_change() -> None:
            project.pin(entries[len(writes_seen)].id)
            writes_seen.append(1)
            project.shared_text()

        writes_seen: list[int] = []
        render = timed(after_a_change, repeats)

        def own() -> None:
            parsed = share.parse(text, project.known_shared_lines())
            plan = project.merge_shared(parsed.records, parsed.malformed, origin="bench")
            assert plan.empty()

        own_merge = timed(own, repeats)
        pulls: list[float] = []
        for r in range(repeats):
            step = max(1, size // 100)
            newer = [
                msgspec.structs.replace(e, status="pinned", updated_at=NOW + 10 + r)
                for e in entries[r::100][:step]
            ]
            fresh = synthetic(step, prefix=f"r{r}x")
            theirs = share.render([*entries, *newer, *fresh], [], [])  # union: both versions
            started = time.perf_counter()
            parsed = share.parse(theirs, project.known_shared_lines())
            project.merge_shared(parsed.records, parsed.malformed, origin="bench")
            pulls.append((time.perf_counter() - started) * 1000)
        job = ShareJob(root=str(root), text=text, base_hash="", revision=0)
        writes: list[float] = []
        for _ in range(repeats):
            (root / ".memoryd" / "memory.jsonl").unlink(missing_ok=True)
            started = time.perf_counter()
            assert write_share_file(job).error is None
            writes.append((time.perf_counter() - started) * 1000)
        project.close()
    cells = [f"{size:,}", f"{len(text) / 1e6:.1f} MB"]
    for values in (first, render, own_merge, pulls, writes):
        cells += [f"{statistics.median(values):.1f}", f"{p95(values):.1f}"]
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3000,30000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    header = ["entries", "file"]
    for name in ("first render", "render", "own merge", "pull merge", "write"):
        header += [f"{name} ms", "p95"]
    rows = [row(int(s), args.repeats) for s in args.sizes.split(",")]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()
