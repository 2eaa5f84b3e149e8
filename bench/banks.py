"""Benchmark: what a memory bank change costs the agent waiting on it, with the bank cache.

A change is answered once journaled (one fsync); the markdown file is written later by the writer
thread. Measured per request against a real daemon on a private socket (as tests/conftest.py
starts it), all with the same in-process client so only the daemon's work differs:

- ``hello``: the round-trip floor of this client and socket;
- ``bank_read``: served from the cache;
- ``bank_update`` (small, scheduled): journal + cache, the file written at the next sync;
- ``bank_update`` (> 4 KB, immediate): the same, with the write handed to the writer at once;
- ``atomic replace`` (disk floor): in process, without the socket, what putting a change on
  disk synchronously would cost at the least: atomically replace a file of the same size
  (fsync of file and directory), the step the cache moves off the request.

Then ``update → on disk``: one small update followed by ``bank_sync`` until it is written.
The ratio column compares each row with ``hello``: a cached update should sit close to the
floor, well under ``hello`` plus the disk floor.

    /tmp/venv/bin/python bench/banks.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, make_env

from memctl import protocol
from memctl.transport import Client
from memoryd.atomic import write_atomic

WARMUP = 3


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _timed(runs: int, step: Callable[[int], object]) -> list[float]:
    for n in range(WARMUP):
        step(-1 - n)
    samples = []
    for n in range(runs):
        started = time.perf_counter()
        step(n)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-banks-"))
    env = make_env(root)
    daemon = Daemon(env, {"MEMORYD_BANKS__SYNC_INTERVAL_S": "60"}).start()
    rows: dict[str, list[float]] = {}
    try:
        with Client(endpoint="ipc://" + str(env.socket), budget_s=30) as client:

            def call(request: protocol.Request) -> object:
                request.project = str(env.project)
                reply = client.call(request)
                if not isinstance(reply, protocol.Ok):
                    raise RuntimeError(reply)
                return protocol.result_of(request, reply)

            call(protocol.BankInit())
            big = "## Body\n\n" + "word " * 1200  # ~6 KB: above the 4 KB immediate threshold
            rows["hello (floor)"] = _timed(args.runs, lambda n: call(protocol.Hello()))
            rows["bank_read"] = _timed(
                args.runs, lambda n: call(protocol.BankRead(name="activeContext.md"))
            )
            rows["bank_update small (scheduled)"] = _timed(
                args.runs,
                lambda n: call(
                    protocol.BankUpdate(
                        name="activeContext.md", content=f"## Current Focus\n\nstep {n}\n"
                    )
                ),
            )
            call(protocol.BankWrite(name="notes.md", content="# Notes\n"))
            rows["bank_update >4 KB (immediate)"] = _timed(
                args.runs,
                lambda n: call(protocol.BankUpdate(name="notes.md", content=f"{big}{n}\n")),
            )
            rows["update then bank_sync (on disk)"] = _timed(
                max(1, args.runs // 4),
                lambda n: (
                    call(
                        protocol.BankUpdate(
                            name="activeContext.md", content=f"## Next Steps\n\n- {n}\n"
                        )
                    ),
                    call(protocol.BankSync()),
                ),
            )
        active = env.project / "memory-bank" / "activeContext.md"
        text = active.read_bytes()
        floor_file = root / "floor" / "activeContext.md"
        floor_file.parent.mkdir()
        rows["atomic replace (disk floor)"] = _timed(
            args.runs, lambda n: write_atomic(floor_file, text + str(n).encode(), 0o644)
        )
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)

    floor = statistics.median(rows["hello (floor)"])
    table = [
        {
            "case": name,
            "runs": len(samples),
            "median_ms": round(statistics.median(samples), 3),
            "p95_ms": round(_p95(samples), 3),
            "ratio_to_floor": round(statistics.median(samples) / floor, 2),
        }
        for name, samples in rows.items()
    ]
    if args.json:
        print(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "rows": table}))
        return 0
    print(f"machine: {platform.platform()}, {os.cpu_count()} cpus")
    print(f"{'case':33} | {'runs':>4} | {'median ms':>9} | {'p95 ms':>8} | ratio to floor")
    for row in table:
        print(
            f"{row['case']:33} | {row['runs']:>4} | {row['median_ms']:>9.3f} | "
            f"{row['p95_ms']:>8.3f} | {row['ratio_to_floor']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
