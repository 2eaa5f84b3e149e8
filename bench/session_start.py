"""Benchmark: what the session-start extras (instruction files, the memory bank's summary and
protocol) and the UMB check cost the daemon on the hook's path.

Two projects on one real daemon, the same 200 entries in each: ``plain`` has nothing else,
``full`` has a MEMORY.md with two imports and a memory bank with a current state. Each case is
one ``Hook`` request through the client library (a new DEALER per call, as ``memctl hook``
does), so the times are the round trip and the daemon's work, without Python's start-up.
Interleaved, one of each per iteration; ratios are against the plain session start.

    /tmp/venv/bin/python bench/session_start.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client_latency import p95
from tests.conftest import Daemon, Env, make_env, memctl

from memctl import protocol
from memctl.transport import Client

WARMUP = 5
QUERY = "full entry about module 3"
INDEX_DEADLINE_S = 30.0
ENTRIES = 200
ACTIVE = (
    "## Current Focus\n\nMoving the payments webhook to the queue worker.\n\n"
    "## Blockers\n\n- Stripe sandbox keys expired\n\n## Next Steps\n\n1. Rotate the keys\n"
)


def setup(env: Env, name: str, full: bool) -> Path:
    root = env.root / name
    (root / ".git").mkdir(parents=True)
    lines = [
        json.dumps({"content": f"{name} entry {i} about module {i % 17}"}) for i in range(ENTRIES)
    ]
    run(env, root, "import", "-", stdin="\n".join(lines) + "\n")
    if full:
        (root / "docs").mkdir()
        (root / "MEMORY.md").write_text(
            "# Rules\n\nLint first.\n\n@import docs/a.md\n@import docs/b.md\n"
        )
        (root / "docs" / "a.md").write_text("## Style\n\n" + "- keep functions short\n" * 20)
        (root / "docs" / "b.md").write_text("## Tests\n\n" + "- run pytest -q\n" * 20)
        run(env, root, "bank", "init")
        run(env, root, "bank", "update", "activeContext.md", stdin=ACTIVE)
    return root


def run(env: Env, cwd: Path, *args: str, stdin: str | None = None) -> None:
    result = memctl(env, "--json", *args, stdin=stdin, cwd=cwd)
    if result.code != 0:
        raise RuntimeError(f"memctl {args}: {result.stderr}")


def cases(plain: Path, full: Path) -> dict[str, protocol.Hook]:
    def hook(root: Path, event: protocol.HookKind, prompt: str = "") -> protocol.Hook:
        return protocol.Hook(agent="codex", event=event, project=str(root), prompt=prompt)

    return {
        "start, plain": hook(plain, "session_start"),
        "start, full": hook(full, "session_start"),
        "prompt, plain": hook(plain, "prompt", QUERY.replace("full", "plain")),
        "prompt, full": hook(full, "prompt", QUERY),
        "prompt UMB, full": hook(full, "prompt", "done for today, UMB"),
    }


def wait_indexed(env: Env, full: Path) -> None:
    # The index commits asynchronously: poll (a real round trip each time, never a sleep) until
    # the prompt finds its entries, so every timed prompt does the same work.
    deadline = time.monotonic() + INDEX_DEADLINE_S
    while time.monotonic() < deadline:
        result = memctl(env, "--json", "search", QUERY, cwd=full)
        if result.code == 0 and result.json().get("results"):  # type: ignore[union-attr]
            return
    raise TimeoutError("search never returned the seeded entries")


def measure(env: Env, requests: dict[str, protocol.Hook], runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in requests}
    endpoint = "ipc://" + str(env.socket)
    for i in range(WARMUP + runs):
        for name, request in requests.items():
            started = time.perf_counter()
            with Client(endpoint=endpoint, budget_s=10) as client:
                reply = client.call(request)
            elapsed = (time.perf_counter() - started) * 1000
            if not isinstance(reply, protocol.Ok) or not protocol.result_of(request, reply).text:
                raise RuntimeError(f"{name}: no payload: {reply}")
            if i >= WARMUP:
                samples[name].append(elapsed)
    return samples


def summarize(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    base = statistics.median(samples["start, plain"])
    return {
        name: {
            "runs": len(vals),
            "median_ms": round(statistics.median(vals), 2),
            "p95_ms": round(p95(vals), 2),
            "ratio": round(statistics.median(vals) / base, 2),
        }
        for name, vals in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-"))
    env = make_env(root)
    daemon = Daemon(env)
    try:
        daemon.start()
        plain, full = setup(env, "plain", False), setup(env, "full", True)
        wait_indexed(env, full)
        requests = cases(plain, full)
        summary = summarize(measure(env, requests, args.runs))
    finally:
        try:
            if daemon.proc is not None:
                daemon.stop()
        finally:
            shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(summary))
        return 0
    print("case             | runs | median ms |   p95 ms | ratio to plain start (median)")
    print("-" * 80)
    for name, r in summary.items():
        cells = f"{r['runs']:>4} | {r['median_ms']:>9.2f} | {r['p95_ms']:>8.2f}"
        print(f"{name:<16} | {cells} | {r['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
