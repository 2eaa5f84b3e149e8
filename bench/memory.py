"""Benchmark: the daemon's start-up and resident memory at 30,000 entries (issue 12).

A seeded synthetic project (bench/retrieval.py's corpus) is imported with ``memctl import FILE``
into a running daemon (real ``memoryd run``, private XDG dirs and socket, as in
tests/conftest.py), then:

- RSS of the daemon: idle before the import, right after the import, after the first search
  (the index catches up), and after two ticks of the index commit job (the first one lets an
  idle index writer go);
- a restart: the compaction opening the project starts (most of the backdated import expires),
  RSS at its peak and once idle after it;
- restarts: ready times (exec → first ``hello``, → ``status`` of the project, → first search,
  which opens the project) and RSS once serving; then an index rebuild (index/ deleted) and RSS.

Medians over ``--runs`` restarts. Progress on stderr, table on stdout.

    .venv/bin/python bench/memory.py [--entries 30000] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BIN, Env, make_env

from memctl import protocol as p
from memctl.transport import Client
from retrieval import (
    COMMIT_S,
    QUIET,
    SEED,
    WARMUP,
    Corpus,
    call,
    compile_bytecode,
    progress,
    running,
    timed,
)

MAX_RSS_MB, MAX_READY_S = 80.0, 0.5
COMPACTION_MAX_S = 600.0
SETTLE_S = 11.0  # two ticks of the index commit job, and a second for its work


def rss_of(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user + system): on a busy machine, the work of a
    start-up apart from the time spent waiting for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled_rss(pid: int, window_s: float) -> float:
    """RSS at the end of ``window_s`` of idleness: two ticks of the index commit job (5 s),
    the first of which lets an idle index writer go."""
    time.sleep(window_s)  # a bench measuring memory over idle time, not a test awaiting an event
    return rss_of(pid)


def memctl_import(env: Env, corpus: Corpus, entries: int) -> dict[str, float]:
    """``memctl import FILE`` of ``entries`` lines, as a user runs it; its time and max RSS."""
    source = env.root / "import.jsonl"
    now = time.time()
    with source.open("w", encoding="utf-8") as fh:
        fh.writelines(corpus.entry(now) + "\n" for _ in range(entries))
    started = time.perf_counter()
    subprocess.run(
        [str(BIN / "memctl"), "--json", "import", str(source)],
        env=env.environ(), cwd=env.project, check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    took = time.perf_counter() - started
    client_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    progress(f"  imported {entries:,} entries in {took:.1f} s ({source.stat().st_size >> 20} MiB)")
    return {"import_s": took, "memctl_import_maxrss_mb": client_mb}


def compaction_rss(client: Client, status: p.StatusRequest) -> dict[str, float]:
    """The compaction a project's open starts: the most RSS seen while it runs (sampled on each
    ``status`` round trip), its time, and RSS once idle after it."""
    pid, started = call(client, p.Hello())["pid"], time.monotonic()
    before = call(client, status)["project"]["last_compacted_at"]
    peak = rss_of(pid)
    while call(client, status)["project"]["last_compacted_at"] == before:
        if time.monotonic() > started + COMPACTION_MAX_S:
            raise TimeoutError(f"compaction not done within {COMPACTION_MAX_S} s")
        peak = max(peak, rss_of(pid))
    took = time.monotonic() - started
    progress(f"  compaction done in {took:.1f} s, RSS at most {peak:.0f} MB")
    return {
        "compaction_s": took,
        "rss_compaction_peak_mb": peak,
        "rss_compaction_settled_mb": settled_rss(pid, SETTLE_S),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=5, help="restarts timed (median)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compile_bytecode()
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-memory-"))
    env, corpus = make_env(root / "env"), Corpus(SEED)
    queries = corpus.queries(WARMUP + 1)
    search0 = p.Search(project=str(env.project), query=queries[WARMUP][0])
    status = p.StatusRequest(project=str(env.project))
    row: dict = {"entries": args.entries}
    try:
        progress(f"{args.entries:,}: import into a running daemon")
        with running(env, QUIET | COMMIT_S) as (client, _):
            pid = call(client, p.Hello())["pid"]
            call(client, status)  # the project opened, empty
            row["rss_idle_empty_mb"] = rss_of(pid)
            row |= memctl_import(env, corpus, args.entries)
            row["rss_after_import_mb"] = rss_of(pid)
            row["catchup_s"] = timed(client, search0)
            row["rss_after_catchup_mb"] = rss_of(pid)
            row["rss_settled_mb"] = settled_rss(pid, SETTLE_S)
            slug = call(client, status)["project"]["slug"]
        progress("  restart: compaction of what was imported (backdated: most of it expires)")
        with running(env, QUIET | COMMIT_S) as (client, _):
            row |= compaction_rss(client, status)
        hello, stat, search, cpu, rss = [], [], [], [], []
        for run in range(args.runs):
            with running(env, QUIET | COMMIT_S) as (client, hello_s):
                s = timed(client, status)
                hello.append(hello_s)
                stat.append(hello_s + s)
                search.append(hello_s + s + timed(client, search0))
                pid = call(client, p.Hello())["pid"]
                cpu.append(cpu_s(pid))
                rss.append(settled_rss(pid, SETTLE_S))
            progress(f"  restart {run + 1}: ready {search[-1]:.2f} s, RSS {rss[-1]:.0f} MB")
        row["ready_hello_s"], row["ready_status_s"] = map(statistics.median, (hello, stat))
        row["ready_search_s"] = statistics.median(search)
        row["ready_search_cpu_s"] = statistics.median(cpu)
        row["rss_restart_mb"] = max(rss)
        shutil.rmtree(env.data / "projects" / slug / "index")
        with running(env, QUIET | COMMIT_S) as (client, _):
            row["rebuild_s"] = timed(client, search0)
            pid = call(client, p.Hello())["pid"]
            row["rss_after_rebuild_mb"] = rss_of(pid)
            row["rss_rebuild_settled_mb"] = settled_rss(pid, SETTLE_S)
    finally:
        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(row))
        return 0
    print(f"python {platform.python_version()}, {args.entries:,} entries, {args.runs} restarts\n")
    for key, value in row.items():
        unit = "s" if key.endswith("_s") else "MB" if key.endswith("_mb") else ""
        print(f"  {key:<26} {value:>10,.2f} {unit}")
    print("\ntargets (issue 12):")
    settled = max(v for k, v in row.items() if k.startswith("rss_") and "settled" in k)
    for name, value, target in (
        ("RSS MB once idle, any phase", settled, MAX_RSS_MB),
        ("RSS MB restarted, serving", row["rss_restart_mb"], MAX_RSS_MB),
        ("RSS MB right after import", row["rss_after_import_mb"], MAX_RSS_MB),
        ("RSS MB peak of compaction", row["rss_compaction_peak_mb"], MAX_RSS_MB),
        ("ready (status) s", row["ready_status_s"], MAX_READY_S),
        ("ready (search) s", row["ready_search_s"], MAX_READY_S),
    ):
        verdict = "met   " if value <= target else "MISSED"
        print(f"  {name:<30} {value:>8.2f} <= {target:<5g} {verdict} ({value / target:.3g}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
