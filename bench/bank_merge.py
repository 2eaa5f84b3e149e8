"""Benchmark: the bank update merge (``merge_update``) on history items holding fenced code,
against the straightforward merge it must equal (``reference_merge`` of tests/test_bank_merge.py:
each item appended to the whole text, read again) on the same input, in process.

Each row: an activeContext.md update of N ``## Recent Changes`` items, each with a fenced code
block (balanced), or a fence left open (each item's fence swallows what follows it). Linear
means the per-item cost stays flat as N grows; the ratio column is the reference's median over
the merge's. The reference is skipped above ``--reference-max`` items (it is quadratic).

    .venv/bin/python bench/bank_merge.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tests.test_bank_merge import reference_merge

from memoryd.core.bank.model import ACTIVE_CONTEXT
from memoryd.core.bank.update import merge_update

OLD = (
    "# Active Context\n\n## Current Focus\n\nx\n\n## Recent Changes\n\n<!-- none -->\n\n"
    "## Next Steps\n\n- a\n"
)


def _update(n: int, balanced: bool) -> str:
    close = "  ```\n" if balanced else ""
    items = "".join(f"- change {i}\n  ```\n  code {i}\n{close}" for i in range(n))
    return "## Recent Changes\n\n" + items


def _median_ms(runs: int, step: Callable[[], object]) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1000)
    ordered = sorted(samples)
    return statistics.median(samples), ordered[round(0.95 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reference-max", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for balanced in (True, False):
        for n in (250, 500, 1000, 2000, 4000):
            content = _update(n, balanced)
            merged = merge_update(ACTIVE_CONTEXT, OLD, content)
            median, p95 = _median_ms(
                args.runs, lambda c=content: merge_update(ACTIVE_CONTEXT, OLD, c)
            )
            row = {
                "fences": "balanced" if balanced else "left open",
                "items": n,
                "merge_median_ms": round(median, 2),
                "merge_p95_ms": round(p95, 2),
                "us_per_item": round(median * 1000 / n, 1),
                "reference_median_ms": None,
                "ratio": None,
            }
            if n <= args.reference_max:
                assert reference_merge(ACTIVE_CONTEXT, OLD, content) == merged
                ref, _ = _median_ms(1, lambda c=content: reference_merge(ACTIVE_CONTEXT, OLD, c))
                row["reference_median_ms"] = round(ref, 1)
                row["ratio"] = round(ref / median, 1)
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"{'fences':9} | {'items':>5} | {'merge ms':>9} | {'p95 ms':>8} | {'µs/item':>7} | "
        f"{'reference ms':>12} | ratio"
    )
    for r in rows:
        ref = "-" if r["reference_median_ms"] is None else f"{r['reference_median_ms']:.1f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1f}x"
        print(
            f"{r['fences']:9} | {r['items']:>5} | {r['merge_median_ms']:>9.2f} | "
            f"{r['merge_p95_ms']:>8.2f} | {r['us_per_item']:>7.1f} | {ref:>12} | {ratio}"
        )


if __name__ == "__main__":
    main()
