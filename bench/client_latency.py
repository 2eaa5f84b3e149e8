"""Benchmark: wall time of one ``memctl`` invocation against two floors measured in the same run.

``python -c pass`` is the floor of any Python command (the interpreter's start-up, this venv's
site included); the pyzmq floor is a bare ``python -c`` that imports only zmq + stdlib and does
one ``hello`` round trip. The hook is timed as an agent runs it, with a realistic
UserPromptSubmit on stdin, four ways: ``memctl-hook`` (what ``install-hooks`` writes in the
user's settings), the project settings' command (``memctl-hook`` from PATH through ``sh -c``,
which falls back to ``memctl hook``), ``memctl hook`` (pip's console script, which imports
``re``) and the old path (``MEMCTL_HOOK_TRANSPORT=pyzmq``: argparse, msgspec, pyzmq, as before
the wire client). All must print the same bytes (checked before timing). Issue 12's target:
the hook within 2.0x of ``python -c pass``. Runs against a real daemon on a private socket with
private XDG dirs, as tests/conftest.py does.

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
from memctl.install_hooks import PROJECT_COMMAND

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


PASS = "python -c pass"
FLOOR = "pyzmq floor"
HOOKS = ("memctl-hook", "project hook", "memctl hook", "hook, old path")
OLD_PATH = {"MEMCTL_HOOK_TRANSPORT": "pyzmq"}
ON_PATH = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def commands(env: Env) -> dict[str, tuple[list[str], dict[str, str]]]:
    frame = protocol.encode(protocol.Hello(id="x")).hex()  # encoded here so the floor skips memctl
    hook = ["hook", "--agent", "claude"]
    return {
        PASS: ([sys.executable, "-c", "pass"], {}),
        FLOOR: ([sys.executable, "-c", FLOOR_CODE, "ipc://" + str(env.socket), frame], {}),
        "memctl status": ([str(BIN / "memctl"), "status"], {}),
        "memctl search": ([str(BIN / "memctl"), "search", QUERY], {}),
        # What an agent runs on every prompt: the hook answers with the memory payload.
        "memctl-hook": ([str(BIN / "memctl-hook"), *hook[1:]], {}),
        # The command a project's shared settings hold, as an agent's shell runs it: memctl-hook
        # from PATH, through `sh -c` (its fallback to `memctl hook` for an older memoryd).
        "project hook": (["/bin/sh", "-c", PROJECT_COMMAND.format(agent="claude")], ON_PATH),
        "memctl hook": ([str(BIN / "memctl"), *hook], {}),
        "hook, old path": ([str(BIN / "memctl"), *hook], OLD_PATH),
    }


def hook_input(env: Env) -> bytes:
    """What Claude Code sends on a prompt (agent-formats.md §1.4), with a prompt of a usual size."""
    prompt = (
        f"The {QUERY} in the orders module returns stale results after the cache refresh; "
        "find where module 3 reads the topic index and fix it, then run the tests."
    )
    return json.dumps(
        {
            "session_id": "7d3f6a10-2b4c-4e8f-9a1d-0c5e7b9f2a61",
            "transcript_path": str(env.home / ".claude" / "projects" / "p" / "7d3f6a10.jsonl"),
            "cwd": str(env.project),
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()


def run(argv: list[str], extra: dict[str, str], env: Env, stdin: bytes | None) -> bytes:
    # check=True: a failed run must abort the benchmark, not be counted as a fast one.
    return subprocess.run(
        argv,
        env={**env.environ(), **extra},
        cwd=env.project,
        input=stdin,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout


def timed(argv: list[str], env: Env, extra: dict[str, str], stdin: bytes | None) -> float:
    start = time.perf_counter()
    run(argv, extra, env, stdin)
    return (time.perf_counter() - start) * 1000


def check_hooks_agree(env: Env) -> int:
    """The hook paths print the same bytes, and not nothing (a hook that failed fast would
    look fast). Repeated until the answer is steady: the first prompts change what the next ones
    get (access counts), so each path is compared with the answers just before and after it."""
    cmds = commands(env)
    deadline = time.monotonic() + INDEX_DEADLINE_S
    while time.monotonic() < deadline:
        outs = [run(*cmds[name], env, hook_input(env)) for name in (*HOOKS, HOOKS[0])]
        if outs[0] and all(out == outs[0] for out in outs):
            return len(outs[0])
    raise RuntimeError(f"the hook paths never printed the same answer: {outs}")


def measure(env: Env, runs: int) -> dict[str, list[float]]:
    cmds = commands(env)
    names = list(cmds)
    samples: dict[str, list[float]] = {name: [] for name in cmds}
    # Interleaved: one of each per iteration, in a rotating order, so that a noisy moment (other
    # work on the machine's two cores) hits every case alike.
    for i in range(WARMUP + runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            argv, extra = cmds[name]
            ms = timed(argv, env, extra, hook_input(env) if name in HOOKS else None)
            if i >= WARMUP:
                samples[name].append(ms)
    return samples


def p95(values: list[float]) -> float:
    ordered = sorted(values)  # nearest-rank: the ceil(0.95 n)-th smallest value
    return ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]


def summarize(samples: dict[str, list[float]], answer_bytes: int) -> dict:
    bare = statistics.median(samples[PASS])
    floor = statistics.median(samples[FLOOR])
    rows = {
        name: {
            "runs": len(vals),
            "median_ms": round(statistics.median(vals), 2),
            "p95_ms": round(p95(vals), 2),
            "ratio_to_pass": round(statistics.median(vals) / bare, 2),
            "ratio_to_floor": round(statistics.median(vals) / floor, 2),
        }
        for name, vals in samples.items()
    }
    return {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "hook_answer_bytes": answer_bytes,
        "cases": rows,
    }


def print_table(summary: dict) -> None:
    print(f"python {summary['python']}, cpu_count {summary['cpu_count']}")
    print(f"the hook paths printed the same {summary['hook_answer_bytes']} bytes")
    print("note: on this noisy 2-core machine compare ratios, not absolute times\n")
    header = (
        f"{'case':<15} | runs | median ms |   p95 ms | x python -c pass | x pyzmq floor (medians)"
    )
    print(header)
    print("-" * len(header))
    for name, r in summary["cases"].items():
        cells = f"{r['runs']:>4} | {r['median_ms']:>9.2f} | {r['p95_ms']:>8.2f}"
        print(f"{name:<15} | {cells} | {r['ratio_to_pass']:>15.2f}x | {r['ratio_to_floor']:.2f}x")


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
        answer_bytes = check_hooks_agree(env)
        summary = summarize(measure(env, args.runs), answer_bytes)
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
