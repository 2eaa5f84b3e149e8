"""Benchmark: transcript capture MB/s (parse, extract, redact) and line written → searchable.

Throughput, in process: per agent, the real transcripts in shared/samples/ are repeated into one
large transcript (a third of ``--size-mb`` each; ids rewritten per copy, so every copy is a
distinct session with distinct messages and tool calls). Median of 3 runs of: the floor
(``msgspec.json.decode`` of every line, as the parsers do; ``json.loads`` beside it), parse only
(``parse_line``), the pipeline as the daemon runs it (``CaptureService.file_changed`` on the file,
then ``work_backlog`` until it is read: a 256 KB slice per step, parse, and every 10 messages a
checkpoint that feeds the new messages to the session's extractor, redacting what it finds; the
journal and SQLite commit are stubbed out), the same with one checkpoint at the end, and
redaction alone over the message texts; and the steps: how many, and the longest (what one loop
turn of the owner thread spends on the file, commit excluded).

Latency, against a real daemon (private HOME and XDG dirs, as tests/conftest.py): a Claude
transcript in the watched ~/.claude/projects gets N assistant lines, one at a time, each with a
unique decision; timed from the write until a search for its unique word returns it (search
round trips, no sleeps). Once with the default watcher debounce (0.25 s), once with 0.05 s.

    /tmp/venv/bin/python bench/capture.py [--size-mb 50] [--quick] [--json] [--samples DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

# Reuse the test harness (env layout, daemon start) and the nearest-rank p95 of client_latency.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client_latency import p95
from tests.conftest import Daemon, make_env

from memctl import protocol as p
from memctl.transport import Client
from memoryd.background import BackgroundErrors
from memoryd.capture import parsers
from memoryd.capture.service import CaptureService
from memoryd.config import CaptureSettings
from memoryd.core import redaction
from memoryd.core.capture.findings import SessionFinding
from memoryd.core.capture.rules import DEFAULT_RULES
from memoryd.core.capture.transcript import Agent, Message

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
AGENTS: tuple[Agent, ...] = ("claude", "codex", "gemini")
RUNS, WARMUP, DEADLINE_S = 3, 2, 30.0
ONCE_EVERY = 10**9  # a checkpoint only at the end: each message extracted exactly once
SERVICE_EVERY = CaptureSettings.model_fields["checkpoint_every"].default  # 10 messages
COMMIT_S = {"MEMORYD_JOBS__INDEX_COMMIT_S": "5"}  # the product default (conftest uses 1 s)
DEBOUNCES = (None, 0.05)  # None: the product default, 0.25 s
MIN_MBPS, MAX_P95_S = 20.0, 1.0
MB = 1e6
SESSION = "7c1e9a52-3b4d-4e6f-8a9b-0c1d2e3f4a5b"
# A UUID (rewritten in place, same length) or the value of an id key (suffixed with the copy).
_IDS = re.compile(
    rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-([0-9a-f]{12})"
    rb'|("(?:id|sessionId|call_id|tool_use_id)":")([^"]+)"'
)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- throughput


def _rewrite(line: bytes, copy: int) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        if m.group(1):
            tail = (int(m.group(1), 16) + copy * 0x9E3779B1) % 16**12
            return m.group(0)[:24] + b"%012x" % tail
        return m.group(2) + m.group(3) + b"-%x" % copy + b'"'

    return _IDS.sub(sub, line)


def build(samples: Path, agent: Agent, target: int, out: Path) -> list[tuple[int, bytes]]:
    """The agent's sample lines, copy after copy, until ``target`` bytes; written to ``out``."""
    originals = [f.read_bytes().splitlines() for f in sorted((samples / agent).glob("*.jsonl"))]
    if not originals:
        raise SystemExit(f"no {agent} samples in {samples}")
    lines: list[tuple[int, bytes]] = []
    offset, copy = 0, 0
    with out.open("wb") as fh:
        while offset < target:
            for line in (_rewrite(x, copy) for sample in originals for x in sample if x.strip()):
                lines.append((offset, line))
                fh.write(line + b"\n")
                offset += len(line) + 1
            copy += 1
    return lines


def pipeline(agent: Agent, path: Path, every: int, steps: list[float] | None = None) -> int:
    """The daemon's capture of one changed file, minus the commit (journal + SQLite, not
    measured); returns the findings recorded. ``steps`` gets the seconds of each step (what one
    loop turn of the owner thread spends on the file: a slice)."""
    found: list[SessionFinding] = []
    project = SimpleNamespace(
        root=path.parent,
        auto_memory_enabled=lambda: True,
        session_findings=lambda session: [],
        commit=lambda event: found.extend(event.findings),
    )
    # The service finds projects by root through the registry: one that always has this one.
    registry = SimpleNamespace(get=lambda cwd: project)
    service = CaptureService(registry, BackgroundErrors(), cursor_file=path.with_suffix(".cur"),  # type: ignore[arg-type]
                             rules=DEFAULT_RULES, checkpoint_every=every)  # fmt: skip
    # Attached up front, as a hook does when the records name no cwd (Gemini's do not).
    service._open(str(path), agent).project_root = str(project.root)
    started = time.perf_counter()
    more = service.file_changed(str(path), agent) is not None and service.backlog_pending()
    while more:  # the rest, a slice per loop turn as the daemon reads it
        if steps is not None:
            steps.append(time.perf_counter() - started)
        started = time.perf_counter()
        more = service.work_backlog()
    if steps is not None:
        steps.append(time.perf_counter() - started)
    return len(found)


def parse(agent: Agent, path: Path, lines: list[tuple[int, bytes]]) -> list[Message]:
    state = parsers.new_state(agent, path)
    return [m for off, line in lines for m in parsers.parse_line(agent, line, off, state)]


def each(fn: Callable[[Any], object], items: list[Any]) -> None:
    for item in items:
        fn(item)


def timed(fn: Callable[..., object], *args: object) -> float:
    runs = []
    for _ in range(RUNS):
        started = time.perf_counter()
        fn(*args)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def throughput(samples: Path, root: Path, size_mb: float) -> list[dict]:
    rows: list[dict] = []
    for agent in AGENTS:
        path = root / f"{agent}.jsonl"
        lines = build(samples, agent, int(size_mb * MB / len(AGENTS)), path)
        kept = [m for m in parse(agent, path, lines) if not m.injected]  # what the service keeps
        raw, texts = [line for _, line in lines], [m.text for m in kept if m.text]
        progress(f"{agent}: {path.stat().st_size / MB:.1f} MB, {len(lines):,} lines; timing")
        secs = {
            "msgspec": timed(each, msgspec.json.decode, raw),
            "json.loads": timed(each, json.loads, raw),
            "parse": timed(parse, agent, path, lines),
            "pipeline": timed(pipeline, agent, path, SERVICE_EVERY),
            "once": timed(pipeline, agent, path, ONCE_EVERY),
            "redact": timed(each, redaction.redact, texts),
        }
        steps: list[float] = []
        findings = pipeline(agent, path, SERVICE_EVERY, steps)
        rows.append(dict(agent=agent, bytes=path.stat().st_size, lines=len(lines),
                         messages=len(kept), text_bytes=sum(len(t.encode()) for t in texts),
                         findings=findings, seconds=secs, steps=len(steps),
                         step_p50_ms=statistics.median(steps) * 1000,
                         step_max_ms=max(steps) * 1000))  # fmt: skip
    total = {k: sum(r[k] for r in rows) for k in ("bytes", "lines", "messages", "text_bytes")}
    secs = {k: sum(r["seconds"][k] for r in rows) for k in rows[0]["seconds"]}
    longest = {
        "steps": sum(r["steps"] for r in rows),
        "step_max_ms": max(r["step_max_ms"] for r in rows),
        "step_p50_ms": max(r["step_p50_ms"] for r in rows),
    }
    overall = dict(agent="overall", findings=sum(r["findings"] for r in rows), seconds=secs)
    rows.append(overall | total | longest)
    for r in rows:
        r["mbps"] = {k: r["bytes"] / MB / s for k, s in r["seconds"].items()}
        r["text_mbps"] = {k: r["text_bytes"] / MB / s for k, s in r["seconds"].items()}
        r["x_floor"] = {k: s / r["seconds"]["msgspec"] for k, s in r["seconds"].items()}
    return rows


# --------------------------------------------------------------------------- latency


def _word(i: int) -> str:
    """quokkaaaaa, quokkaabab, …: in no other line, 2 edits from each other (search matches
    within 1 edit); ``k`` = 50 leaves the exact match no way to be crowded out anyway."""
    pair = chr(97 + i // 26 % 26) + chr(97 + i % 26)
    return "quokka" + pair * 2


def _line(project: Path, n: int, text: str, role: str = "assistant") -> str:
    content: object = text if role == "user" else [{"type": "text", "text": text}]
    record = {"type": role, "sessionId": SESSION, "cwd": str(project), "uuid": f"u{n}",
              "timestamp": f"2026-11-21T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
              "message": {"role": role, "content": content}}  # fmt: skip
    return json.dumps(record) + "\n"


def _searchable(client: Client, project: Path, word: str) -> bool:
    search = p.Search(project=str(project), query=word, k=50)
    reply = client.call(search, budget_s=10)
    if not isinstance(reply, p.Ok):
        raise RuntimeError(f"search: {reply.code}: {reply.message}")
    return any(word in r.content for r in p.result_of(search, reply).results)


def latency(root: Path, debounce: float | None, n: int) -> list[float]:
    """Seconds from a line's write (flushed) to a search returning it, for ``n`` lines."""
    env = make_env(root)
    extra = COMMIT_S | ({"MEMORYD_CAPTURE__DEBOUNCE_S": str(debounce)} if debounce else {})
    daemon, samples = Daemon(env, extra), []
    folder = env.home / ".claude" / "projects" / str(env.project).replace("/", "-")
    try:
        daemon.start()
        folder.mkdir(parents=True)
        endpoint = f"ipc://{env.socket}"
        with Client(endpoint=endpoint) as client, (folder / f"{SESSION}.jsonl").open("a") as fh:
            fh.write(_line(env.project, 0, "Which backend should the session cache use?", "user"))
            for i in range(WARMUP + n):  # the first ones also open the project and the session
                word = _word(i)
                text = f"We decided to use {word} for the session cache: restarts stay cheap."
                started = time.perf_counter()
                fh.write(_line(env.project, i + 1, text))
                fh.flush()
                while not _searchable(client, env.project, word):  # a round trip per poll
                    if time.perf_counter() - started > DEADLINE_S:
                        raise TimeoutError(f"{word}: not found in {DEADLINE_S}s\n{daemon.log()}")
                if i >= WARMUP:
                    samples.append(time.perf_counter() - started)
    finally:
        try:
            if daemon.proc is not None:
                daemon.stop()  # SIGTERM, then wait for a clean exit
        finally:  # a daemon that would not stop is killed; temp dirs go either way
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.proc.kill()
            shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
    return samples


# --------------------------------------------------------------------------- report


def _cell(key: str, text: bool = False) -> Callable[[dict], str]:
    def cell(r: dict) -> str:
        extra = f"{r['text_mbps'][key]:.1f} text" if text else f"{r['x_floor'][key]:.1f}×"
        return f"{r['mbps'][key]:.1f} ({extra})"

    return cell


COLUMNS = (
    ("agent", lambda r: r["agent"]),
    ("MB", lambda r: f"{r['bytes'] / MB:.1f}"),
    ("lines", lambda r: f"{r['lines']:,}"),
    ("msgs", lambda r: f"{r['messages']:,}"),
    ("text MB", lambda r: f"{r['text_bytes'] / MB:.2f}"),
    ("floor", lambda r: f"{r['mbps']['msgspec']:.0f}"),
    ("json.loads", _cell("json.loads")),
    ("parse", _cell("parse")),
    ("parse+extract+redact", _cell("pipeline")),
    ("each msg once", _cell("once")),
    ("redact only", _cell("redact", text=True)),
    ("findings", lambda r: f"{r['findings']:,}"),
    ("steps", lambda r: f"{r['steps']:,}"),
    ("step p50/max ms", lambda r: f"{r['step_p50_ms']:.0f}/{r['step_max_ms']:.0f}"),
)


def print_table(summary: dict) -> None:
    print(f"python {summary['python']}, cpu_count {summary['cpu_count']}; {summary['size_mb']:g}"
          f" MB of transcripts (a third per agent); MB/s of transcript bytes, median of {RUNS};"
          " (n×) = time over the floor (msgspec.json.decode per line)\n")  # fmt: skip
    rows = [[cell(r) for _, cell in COLUMNS] for r in summary["throughput"]]
    widths = [max(len(name), *(len(row[i]) for row in rows)) for i, (name, _) in enumerate(COLUMNS)]
    header = " | ".join(name.rjust(w) for (name, _), w in zip(COLUMNS, widths, strict=True))
    print(f"{header}\n{'-' * len(header)}")
    for row in rows:
        print(" | ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    print("\nline written → searchable, seconds (nearest-rank p95)")
    header = "debounce s     | samples | median |    p95 |    max"
    print(f"{header}\n{'-' * len(header)}")
    for s in summary["latency"]:
        times = " | ".join(f"{s[k]:6.3f}" for k in ("median_s", "p95_s", "max_s"))
        print(f"{s['debounce']:<14} | {s['samples']:>7} | {times}")
    print("\ntargets (design §13):")
    for c in summary["targets"]:
        verdict = f"{'met   ' if c['met'] else 'MISSED'} ({c['value'] / c['target']:.3g}x target)"
        print(f"  {c['metric']:<48} {c['value']:>7.3f} {c['op']} {c['target']:<3g} {verdict}")


def _target(metric: str, value: float, op: str, target: float) -> dict:
    met = value >= target if op == ">=" else value <= target
    return dict(metric=metric, value=value, op=op, target=target, met=met)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, help="transcript MB (default 50, --quick 10)")
    parser.add_argument("--quick", action="store_true", help="10 MB and 10 latency samples")
    parser.add_argument("--samples", type=Path, default=SAMPLES, help=f"default {SAMPLES}")
    parser.add_argument("--json", action="store_true", help="one JSON object, not a table")
    args = parser.parse_args()
    size_mb, n = args.size_mb or (10.0 if args.quick else 50.0), 10 if args.quick else 30
    if not all((args.samples / agent).is_dir() for agent in AGENTS):
        where = "the spec's shared/samples/, beside the repo in a CI checkout"
        parser.error(f"no claude/, codex/, gemini/ in {args.samples} ({where}): --samples DIR")
    root = Path(tempfile.mkdtemp(prefix="memoryd-bench-capture-"))
    try:
        rows, series = throughput(args.samples, root, size_mb), list[dict]()
        for debounce in DEBOUNCES:
            label = f"{debounce:g}" if debounce else "0.25 default"
            progress(f"latency, debounce {label}: {n} lines")
            s = latency(root / f"latency-{debounce or 'default'}", debounce, n)
            series.append(dict(debounce=label, samples=len(s), median_s=statistics.median(s),
                               p95_s=p95(s), max_s=max(s)))  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    targets = [_target("parse+extract+redact MB/s, overall", rows[-1]["mbps"]["pipeline"], ">=",
                       MIN_MBPS)]  # fmt: skip
    targets += [_target(f"line → searchable p95 s, debounce {s['debounce']}", s["p95_s"], "<=",
                        MAX_P95_S) for s in series]  # fmt: skip
    summary = dict(python=platform.python_version(), cpu_count=os.cpu_count(), size_mb=size_mb,
                   throughput=rows, latency=series, targets=targets)  # fmt: skip
    if args.json:
        print(json.dumps(summary))
    else:
        print_table(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
