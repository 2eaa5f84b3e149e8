"""Benchmark: wall time of one ``memctl`` invocation against the floor of any Python ZeroMQ client.

The floor is a bare ``python -c`` that imports only zmq + stdlib and does one ``hello`` round trip;
whatever ``memctl status`` costs above it is client overhead (imports, argparse, rendering).
Runs against a real daemon on a private socket with private XDG dirs, as tests/conftest.py does.

    /tmp/venv/bin/python bench/client_latency.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import compileall
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Reuse the test harness rather than re-deriving the env layout and the readiness handshake.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BIN, Daemon, Env, make_env, memctl

from memctl import protocol

WARMUP = 2
SEED_ENTRIES = 200
QUERY = "some query"
INDEX_DEADLINE_S = 30.0

# Only zmq + stdlib: the cheapest a Python client of this daemon can possibly be.
FLOOR_CODE = """
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.RCVTIMEO, 5000)
s.connect(sys.argv[1])
s.send(bytes.fromhex(sys.argv[2]))
s.recv()
"""


def seed(env: Env) -> None:
    # Varied content so search scores real hits; "query" appears in every line on purpose.
    lines = [
        json.dumps({"content": f"entry {i}: some query about module {i % 17} and topic {i % 7}"})
        for i in range(SEED_ENTRIES)
    ]
    result = memctl(env, "--json", "import", "-", stdin="\n".join(lines) + "\n")
    if result.code != 0:
        raise RuntimeError(f"import failed: {result.stderr}")


def wait_indexed(env: Env) -> None:
    # The index commits asynchronously; poll until search sees the seed so every timed search
    # does the same work. Polling under a deadline, never a fixed sleep.
    deadline = time.monotonic() + INDEX_DEADLINE_S
    while time.monotonic() < deadline:
        result = memctl(env, "--json", "search", QUERY)
        if result.code == 0 and result.json().get("results"):
            return
    raise TimeoutError("search never returned the seeded entries")


def commands(env: Env) -> dict[str, list[str]]:
    frame = protocol.encode(protocol.Hello(id="x")).hex()  # encoded here so the floor skips memctl
    return {
        "floor": [sys.executable, "-c", FLOOR_CODE, "ipc://" + str(env.socket), frame],
        "memctl status": [str(BIN / "memctl"), "status"],
        "memctl search": [str(BIN / "memctl"), "search", QUERY],
        # What Claude Code runs on every prompt: the hook answers with the memory payload.
        "memctl hook": [str(BIN / "memctl"), "hook", "--agent", "claude"],
    }


def hook_input(env: Env) -> bytes:
    return json.dumps(
        {
            "session_id": "bench-session",
            "transcript_path": str(env.root / "transcript.jsonl"),
            "cwd": str(env.project),
            "hook_event_name": "UserPromptSubmit",
            "permission_mode": "default",
            "prompt": QUERY,
        }
    ).encode()


def timed(argv: list[str], env: Env, stdin: bytes | None = None) -> float:
    start = time.perf_counter()
    # check=True: a failed run must abort the benchmark, not be counted as a fast one.
    subprocess.run(
        argv,
        env=env.environ(),
        cwd=env.project,
        input=stdin,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return (time.perf_counter() - start) * 1000


def measure(env: Env, runs: int) -> dict[str, list[float]]:
    cmds = commands(env)
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    # Interleaved: one of each per iteration, so a noisy moment hits every case alike.
    for i in range(WARMUP + runs):
        for name, argv in cmds.items():
            ms = timed(argv, env, hook_input(env) if name == "memctl hook" else None)
            if i >= WARMUP:
                samples[name].append(ms)
    return samples


def p95(values: list[float]) -> float:
    ordered = sorted(values)  # nearest-rank: the ceil(0.95 n)-th smallest value
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def summarize(samples: dict[str, list[float]]) -> dict:
    floor = statistics.median(samples["floor"])
    rows = {
        name: {
            "runs": len(vals),
            "median_ms": round(statistics.median(vals), 2),
            "p95_ms": round(p95(vals), 2),
            "ratio_to_floor": round(statistics.median(vals) / floor, 2),
        }
        for name, vals in samples.items()
    }
    return {"python": platform.python_version(), "cpu_count": os.cpu_count(), "cases": rows}


def print_table(summary: dict) -> None:
    print(f"python {summary['python']}, cpu_count {summary['cpu_count']}")
    print("note: on this noisy 2-core machine compare ratios, not absolute times\n")
    header = f"{'case':<14} | runs | median ms |   p95 ms | ratio to floor (median)"
    print(header)
    print("-" * len(header))
    for name, r in summary["cases"].items():
        cells = f"{r['runs']:>4} | {r['median_ms']:>9.2f} | {r['p95_ms']:>8.2f}"
        print(f"{name:<14} | {cells} | {r['ratio_to_floor']:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="counted runs per case (default 40)")
    parser.add_argument("--json", action="store_true", help="one JSON object, not a table")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    # As an installed package has it (pip compiles on install): without cached bytecode, e.g.
    # under PYTHONDONTWRITEBYTECODE, every run would also compile memctl's modules.
    compileall.compile_dir(Path(protocol.__file__).parent, quiet=1)
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-"))
    env = make_env(root)
    daemon = Daemon(env)
    try:
        daemon.start()  # returns once hello answers, under the harness's deadline
        seed(env)
        wait_indexed(env)
        summary = summarize(measure(env, args.runs))
    finally:
        try:
            if daemon.proc is not None:
                daemon.stop()  # SIGTERM, then wait for a clean exit
        finally:  # remove temp dirs even if the daemon would not stop in time
            shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(summary))
    else:
        print_table(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
