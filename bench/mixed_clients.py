"""Benchmark: round trips of 16 client processes sending a mixed load to one daemon (issue 10,
problem 5: "16 mixed clients see p99 1.2 s, max 1.6 s — over the hook's 1.5 s budget").

Each process opens a fresh connection per request, as memctl and the hook do, and sends in a
seeded random order: prompt hooks (the hook's payload), searches, remembers, 500-line imports,
statuses and bank updates, for a fixed time. A quiet row (one process sending statuses alone)
is the baseline measured in the same run. Printed per kind: count, p50, p99 and max round trip.
No asserts: it prints.

    .venv/bin/python bench/mixed_clients.py [--clients 16] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, Env, make_env, ok_json

from memctl import protocol
from memctl.transport import Client

KINDS = ("hook", "search", "remember", "import", "status", "bank")
WEIGHTS = (30, 20, 20, 5, 20, 5)
WORDS = "queue cache deploy billing schema migration token worker index retry gateway".split()


def _request(kind: str, project: str, rnd: random.Random) -> protocol.Request[Any]:
    words = " ".join(rnd.choice(WORDS) for _ in range(6))
    if kind == "hook":
        return protocol.Hook(
            agent="claude", event="prompt", session_id=str(uuid.uuid4()), prompt=words
        )
    if kind == "search":
        return protocol.Search(query=words)
    if kind == "remember":
        return protocol.Remember(content=f"The {words} note {rnd.getrandbits(64):x}")
    if kind == "import":
        lines = [
            json.dumps({"content": f"Imported {words} fact {rnd.getrandbits(64):x}"})
            for _ in range(protocol.IMPORT_MAX_LINES)
        ]
        return protocol.Import(lines=lines)
    if kind == "bank":
        return protocol.BankUpdate(
            id=uuid.uuid4().hex,
            name="activeContext.md",
            content=f"## Current focus\n\n- {words}\n",
        )
    return protocol.StatusRequest()


def _client(args: tuple[str, str, float, int, bool]) -> list[tuple[str, float]]:
    endpoint, project, seconds, seed, quiet = args
    rnd = random.Random(seed)
    out: list[tuple[str, float]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        kind = "status" if quiet else rnd.choices(KINDS, WEIGHTS)[0]
        request = _request(kind, project, rnd)
        request.project = project
        started = time.perf_counter()
        with Client(endpoint=endpoint) as client:
            reply = client.call(request, budget_s=60)
        if not isinstance(reply, protocol.Ok):
            raise RuntimeError(f"{kind}: {reply}")
        out.append((kind, time.perf_counter() - started))
    return out


def _p99(times: list[float]) -> float:
    if len(times) < 2:
        return max(times, default=0.0)
    return statistics.quantiles(times, n=100, method="inclusive")[98]


def _rows(label: str, samples: list[tuple[str, float]]) -> list[str]:
    rows = []
    for kind in ("all", *KINDS):
        times = [t for k, t in samples if kind in ("all", k)]
        if not times:
            continue
        rows.append(
            f"{label:<10} {kind:<9} {len(times):>6} {statistics.median(times) * 1000:>8.1f} "
            f"{_p99(times) * 1000:>8.1f} {max(times) * 1000:>8.1f}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env: Env = make_env(Path(tmp))
        daemon = Daemon(env).start()
        try:
            for i in range(200):
                ok_json(env, "remember", f"Service {i} deploys through the {WORDS[i % 11]} cluster")
            ok_json(env, "bank", "init")
            endpoint, project = "ipc://" + str(env.socket), str(env.project)
            quiet = _client((endpoint, project, min(args.seconds, 5.0), 0, True))
            jobs = [(endpoint, project, args.seconds, seed, False) for seed in range(args.clients)]
            with multiprocessing.get_context("spawn").Pool(args.clients) as pool:
                mixed = [s for one in pool.map(_client, jobs) for s in one]
        finally:
            daemon.stop()
    print(f"{args.clients} client processes, {args.seconds:.0f} s, a fresh connection a request")
    print(f"{'load':<10} {'kind':<9} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for row in [*_rows("quiet", quiet), *_rows("mixed", mixed)]:
        print(row)


if __name__ == "__main__":
    main()
