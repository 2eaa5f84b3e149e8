"""Benchmark: what working memory costs a prompt, and what a graph walk costs.

A real daemon (private socket and XDG dirs, as tests/conftest.py does) holds N imported entries.
Each run sends the hook's prompt request through the client library and times the round trip:
without a session, with a session that focused nothing, and with a session focusing 5 and 20
entries (the most a session holds). Then ``graph`` at depth 1-3 from the middle of a chain of
1,000 ``depends_on`` edges with a branch at every node. Prints median and p95, and each prompt
variant's ratio to the no-session baseline measured in the same run (the cases take turns, so a
busy machine slows them alike).

    /work/venv/bin/python bench/focus.py [--entries 1000 3000] [--runs 200]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import Daemon, Env, make_env, memctl, ok_json

from memctl import protocol
from memctl.transport import Client

WARMUP = 10
PROMPT = "How do the deploy scripts pick the cluster for the payments service?"
WORDS = "deploy cluster payments cache token vault build parser schema queue worker".split()


def _seed(env: Env, n: int) -> list[str]:
    lines = [
        json.dumps({"content": f"Fact {i}: the {WORDS[i % 11]} of module m{i} uses {WORDS[i % 7]}"})
        for i in range(n)
    ]
    memctl(env, "import", "-", stdin="\n".join(lines), timeout=600)
    return [e["id"] for e in ok_json(env, "list", "--limit", "2000")["entries"]]


def _timed(calls: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Samples per case, the cases taking turns: a busy machine slows every case alike."""
    for call in calls.values():
        for _ in range(WARMUP):
            call()
    samples: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(runs):
        for label, call in calls.items():
            started = time.perf_counter()
            call()
            samples[label].append((time.perf_counter() - started) * 1000)
    return samples


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


def _prompt_runs(
    env: Env, client: Client, ids: list[str], runs: int
) -> list[tuple[str, float, float]]:
    def hook(session: str | None) -> Callable[[], object]:
        request = protocol.Hook(
            agent="claude",
            event="prompt",
            session_id=session,
            prompt=PROMPT,
            project=str(env.project),
        )
        return lambda: client.call(request, budget_s=10)

    ok_json(env, "focus", *ids[:5], "--session", "five")
    ok_json(env, "focus", *ids[5:25], "--session", "twenty")
    cases = {
        "no session": None,
        "session, nothing focused": "none",
        "session, 5 focused": "five",
        "session, 20 focused": "twenty",
    }
    samples = _timed({label: hook(session) for label, session in cases.items()}, runs)
    return [(label, *_stats(times)) for label, times in samples.items()]


def _graph_runs(
    env: Env, client: Client, ids: list[str], runs: int
) -> list[tuple[str, float, float]]:
    chain = ids[:1000]
    edges = [(a, b, "depends_on") for a, b in itertools.pairwise(chain)]
    edges += [(b, a, "enables") for a, b in zip(chain[::2], ids[1000:1500], strict=False)]
    for a, b, relation in edges:
        request = protocol.Connect(source=a, target=b, relation=relation, project=str(env.project))
        assert isinstance(client.call(request, budget_s=10), protocol.Ok)

    def walk(depth: int) -> Callable[[], object]:
        request = protocol.Graph(target=chain[500], depth=depth, project=str(env.project))
        return lambda: client.call(request, budget_s=10)

    calls = {f"graph depth {depth}": walk(depth) for depth in (1, 2, 3)}
    return [(label, *_stats(times)) for label, times in _timed(calls, runs).items()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"{'entries':>8}  {'case':<26} {'median ms':>9} {'p95 ms':>8} {'x base':>7}")
    for n in args.entries:
        with tempfile.TemporaryDirectory() as tmp:
            env = make_env(Path(tmp))
            daemon = Daemon(env).start()
            try:
                ids = _seed(env, n)
                with Client(endpoint="ipc://" + str(env.socket)) as client:
                    rows = _prompt_runs(env, client, ids, args.runs)
                    base = rows[0][1]
                    for label, median, p95 in rows:
                        print(
                            f"{n:>8}  {label:<26} {median:>9.2f} {p95:>8.2f} {median / base:>7.2f}"
                        )
                    for label, median, p95 in _graph_runs(env, client, ids, args.runs):
                        print(f"{n:>8}  {label:<26} {median:>9.2f} {p95:>8.2f} {'':>7}")
            finally:
                daemon.stop()


if __name__ == "__main__":
    main()
