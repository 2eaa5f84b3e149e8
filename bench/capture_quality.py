"""Benchmark: is what capture keeps worth keeping? Scored against the labelled samples (issue 19).

For each preset (balanced, the default, and aggressive) a real daemon runs on private HOME and XDG
dirs (as tests/conftest.py). Every labelled Claude session from shared/samples/claude/ is placed
in the daemon's watched ~/.claude/projects as the agent would have written it, with its working
directory moved to a fresh project folder under that private home (the original checkout path and
the original user's home are rewritten to the new ones, so any absolute home path that shows up
in memory is ours to find). Each session is then finalized through the SessionEnd hook, and a new
session of the project asks for its SessionStart payload through ``memctl hook``, exactly as
Claude Code would. Read back: the project's entries (``memctl list``), the payload, and, after
the daemon stopped, the session's findings from the project's store.

Per session and overall:
  msgs       messages the parser yields (injected context excluded)
  finds      findings stored for the session (what checkpoints and the final pass left)
  junk/50    findings matching a junk pattern (tests/fixtures/capture_labels/junk.toml) per 50
             messages
  promoted   entries promoted from the transcript
  precision  promoted entries that hold a label item of the session / promoted
  recall     label items found in the entries or the SessionStart payload / label items
  core       the same over the items weighted ``core``
  later      recall with the payload of a SessionStart after a daemon restart, when the finished
             session is no longer live (what a next-day session gets)
  in-find    label items found among the findings at all (what promotion had to choose from)
  pl-junk    payload items (entries, findings, episodes of the claude format) matching a junk
             pattern / payload items; later-junk: the same after the restart
  home       stored texts (findings, entries, payload items) naming a path in a home folder

A payload item or an entry holds a label item when one of the item's rules matches that one text
(tests/fixtures/capture_labels/README.md). Overall: ratios of the pooled counts, and the median
of the per-session ratios. No timing is asserted; a run takes well under a minute.

Then the relevance floor of ``inject --query`` on the labelled queries (bench/capture_queries.py).

    /tmp/venv/bin/python bench/capture_quality.py [--preset P …] [--details] [--json]
        [--samples DIR] [--no-queries]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.capture_labels import (
    JunkPattern,
    Query,
    SessionLabels,
    junk_kind,
    load_all,
    load_junk,
    load_queries,
    payload_units,
)
from bench.capture_queries import FLOORS, FloorScore, measure
from bench.capture_queries import table as floor_table
from tests.conftest import Daemon, Env, make_env, memctl

from memctl import protocol as p
from memctl.transport import Client
from memoryd.capture import parsers
from memoryd.core.recall.retrieval import RetrievalConfig

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
PRESETS = ("balanced", "aggressive")
# Any home folder of the machines the samples were recorded on (macOS and Linux).
HOME_PATH = re.compile(r"(?<![\w.])(?:/Users|/home)/[A-Za-z0-9._-]+")
ENTRY_LIMIT = 1000


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- placing sessions


@dataclass
class Placed:
    labels: SessionLabels
    transcript: Path
    project: Path
    messages: int


def _cwd(raw: bytes) -> str:
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("cwd"):
            return str(record["cwd"])
    raise ValueError("no record names a working directory")


def _relocate(raw: bytes, old_cwd: str, new_cwd: Path, home: Path) -> bytes:
    """The transcript as if recorded in ``new_cwd`` by a user whose home is ``home``."""
    text = raw.decode("utf-8")
    text = text.replace(old_cwd, "\x00CWD\x00")
    text = HOME_PATH.sub("\x00HOME\x00", text)
    return text.replace("\x00CWD\x00", str(new_cwd)).replace("\x00HOME\x00", str(home)).encode()


def _count_messages(path: Path) -> int:
    state = parsers.new_state("claude", path)
    count, offset = 0, 0
    for line in path.read_bytes().splitlines(keepends=True):
        count += sum(not m.injected for m in parsers.parse_line("claude", line, offset, state))
        offset += len(line)
    return count


def place(env: Env, labels: SessionLabels, samples: Path) -> Placed:
    raw = (samples / labels.sample).read_bytes()
    old_cwd = _cwd(raw)
    project = env.home / "work" / Path(old_cwd).name
    (project / ".git").mkdir(parents=True, exist_ok=True)
    folder = env.home / ".claude" / "projects" / str(project).replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    transcript = folder / f"{labels.session}.jsonl"
    transcript.write_bytes(_relocate(raw, old_cwd, project, env.home))
    return Placed(labels, transcript, project, _count_messages(transcript))


# --------------------------------------------------------------------------- running a preset


@dataclass
class Captured:
    placed: Placed
    finalized: bool
    entries: list[dict[str, Any]]
    payload: str  # SessionStart right after SessionEnd, same daemon
    payload_later: str = ""  # SessionStart after a restart: the session is no longer live
    findings: list[dict[str, Any]] = field(default_factory=list)
    home_hits: int = 0  # stored texts naming a path in a home folder


def _finalize(env: Env, placed: Placed) -> bool:
    request = p.Hook(
        agent="claude",
        event="session_end",
        session_id=placed.labels.session,
        transcript_path=str(placed.transcript),
        project=str(placed.project),
    )
    with Client(endpoint="ipc://" + str(env.socket), budget_s=120) as client:
        reply = client.call(request)
    if not isinstance(reply, p.Ok):
        raise RuntimeError(f"SessionEnd for {placed.labels.session}: {reply}")
    return p.result_of(request, reply).finalized


def _session_start(env: Env, placed: Placed) -> str:
    """The payload Claude Code would add to a new session's context in this project."""
    session = str(uuid.uuid4())
    hook = {
        "session_id": session,
        "transcript_path": str(placed.transcript.with_name(f"{session}.jsonl")),
        "cwd": str(placed.project),
        "hook_event_name": "SessionStart",
        "source": "startup",
    }
    result = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(hook), cwd=placed.project)
    if result.code != 0:
        raise RuntimeError(f"SessionStart hook exited {result.code}: {result.stderr}")
    if not result.stdout.strip():
        return ""
    try:
        output = json.loads(result.stdout)
    except ValueError:
        return result.stdout
    return str(output.get("hookSpecificOutput", {}).get("additionalContext", ""))


def _check_preset(env: Env, placed: Placed, preset: str) -> None:
    result = memctl(env, "--json", "auto", cwd=placed.project)
    if result.code != 0 or json.loads(result.stdout).get("preset") != preset:
        raise RuntimeError(f"the project does not run the {preset} preset: {result.stdout}")


def _entries(env: Env, placed: Placed) -> list[dict[str, Any]]:
    result = memctl(env, "--json", "list", "--limit", str(ENTRY_LIMIT), cwd=placed.project)
    if result.code != 0:
        raise RuntimeError(f"memctl list exited {result.code}: {result.stderr}")
    return list(json.loads(result.stdout)["entries"])


def _findings(env: Env, session: str) -> list[dict[str, Any]]:
    """The session's findings, read from the stores of a stopped daemon."""
    rows: list[dict[str, Any]] = []
    for db in env.data.rglob("memory.db"):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            conn.row_factory = sqlite3.Row
            rows += [
                dict(r)
                for r in conn.execute(
                    "SELECT content, category, rule_id, importance, session_id FROM findings"
                    " WHERE session_id = ? OR session_id LIKE ? ORDER BY transcript_offset",
                    (session, session + "/%"),
                )
            ]
    return rows


def run_preset(
    preset: str, sessions: list[SessionLabels], samples: Path, queries: list[Query] | None = None
) -> tuple[list[Captured], list[FloorScore]]:
    """What the preset captured, and the relevance floor measured on ``queries``."""
    root = Path(tempfile.mkdtemp(prefix=f"capq-{preset}-"))
    env = make_env(root)
    extra = {"MEMORYD_CAPTURE__PRESET": preset}
    try:
        placed = [place(env, labels, samples) for labels in sessions]
        captured: list[Captured] = []
        daemon = Daemon(env, extra).start()
        try:
            for one in placed:
                _check_preset(env, one, preset)
                progress(f"{preset}: finalizing {one.labels.project} ({one.messages} messages)")
                finalized = _finalize(env, one)
                payload = _session_start(env, one)
                captured.append(Captured(one, finalized, _entries(env, one), payload))
        finally:
            daemon.stop()
        daemon = Daemon(env, extra).start()
        try:
            for one in captured:
                one.payload_later = _session_start(env, one.placed)
        finally:
            daemon.stop()
        for one in captured:
            one.findings = _findings(env, one.placed.labels.session)
            texts = [f["content"] for f in one.findings] + [e["content"] for e in one.entries]
            texts += payload_units(one.payload) + payload_units(one.payload_later)
            one.home_hits = sum(str(env.home) in t or bool(HOME_PATH.search(t)) for t in texts)
        floors: list[FloorScore] = []
        if queries:
            progress(f"{preset}: {len(queries)} labelled queries at floors {FLOORS}")
            projects = {c.placed.labels.project: (c.placed.project, c.placed.labels, c.entries)
                        for c in captured}  # fmt: skip
            floors = measure(env, extra, queries, projects)
        return captured, floors
    finally:
        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- scoring


@dataclass
class Score:
    session: str
    project: str
    finalized: bool
    messages: int
    findings: int
    junk: int
    promoted: int
    precise: int
    items: int
    found: int
    core_items: int
    core_found: int
    found_later: int
    in_findings: int
    payload_items: int
    payload_junk: int
    later_items: int
    later_junk: int
    home: int
    missed: list[str] = field(default_factory=list)
    found_in: dict[str, str] = field(default_factory=dict)  # item id → the text that holds it
    promoted_detail: list[tuple[str, str, str]] = field(default_factory=list)  # mark, rule, text
    junk_detail: dict[str, int] = field(default_factory=dict)  # "rule_id → pattern": count


def _where(labels: SessionLabels, texts: list[str]) -> dict[str, str]:
    """Each label item found, with the first text that holds it."""
    found = {}
    for item in labels.items:
        text = next((t for t in texts if item.matches(t)), None)
        if text is not None:
            found[item.id] = text
    return found


def _promoted(one: Captured, junk: list[JunkPattern]) -> tuple[int, list[tuple[str, str, str]]]:
    """How many promoted entries hold a label item, and each one's mark, rule and text."""
    precise, detail = 0, []
    for entry in one.entries:
        source = entry.get("source", {})
        if source.get("kind") != "transcript":
            continue
        hits = [i.id for i in one.placed.labels.items if i.matches(entry["content"])]
        precise += bool(hits)
        mark = ",".join(hits) if hits else (junk_kind(entry["content"], junk) or "-")
        detail.append((mark, str(source.get("rule_id") or "?"), entry["content"]))
    return precise, detail


def score(one: Captured, junk: list[JunkPattern]) -> Score:
    labels = one.placed.labels
    entries = [e["content"] for e in one.entries]
    now, later = payload_units(one.payload), payload_units(one.payload_later)
    found = _where(labels, entries + now)
    precise, detail = _promoted(one, junk)
    junk_counts: dict[str, int] = {}
    for finding in one.findings:
        if kind := junk_kind(finding["content"], junk):
            key = f"{finding['rule_id']} → {kind}"
            junk_counts[key] = junk_counts.get(key, 0) + 1
    core = {i.id for i in labels.items if i.weight == "core"}
    return Score(
        session=labels.session,
        project=labels.project,
        finalized=one.finalized,
        messages=one.placed.messages,
        findings=len(one.findings),
        junk=sum(junk_counts.values()),
        promoted=len(detail),
        precise=precise,
        items=len(labels.items),
        found=len(found),
        core_items=len(core),
        core_found=len(core & set(found)),
        found_later=len(_where(labels, entries + later)),
        in_findings=len(_where(labels, [f["content"] for f in one.findings])),
        payload_items=len(now),
        payload_junk=sum(junk_kind(u, junk, payload=True) is not None for u in now),
        later_items=len(later),
        later_junk=sum(junk_kind(u, junk, payload=True) is not None for u in later),
        home=one.home_hits,
        missed=[i.id for i in labels.items if i.id not in found],
        found_in=found,
        promoted_detail=detail,
        junk_detail=junk_counts,
    )


# --------------------------------------------------------------------------- report

COLUMNS = (
    f"{'session':<24} {'msgs':>5} {'finds':>5} {'junk/50':>7} {'promoted':>8} "
    f"{'precision':>10} {'recall':>10} {'core':>10} {'later':>10} {'in-find':>10} "
    f"{'pl-junk':>11} {'later-junk':>11} {'home':>4}"
)


def _frac(n: int, d: int) -> str:
    value = "   -" if d == 0 else f"{n / d:4.2f}"
    return f"{value} {n:>2}/{d:<2}"


def _row(name: str, c: dict[str, int]) -> str:
    junk50 = 50 * c["junk"] / c["messages"] if c["messages"] else 0.0
    return (
        f"{name[:24]:<24} {c['messages']:>5} {c['findings']:>5} {junk50:>7.2f} "
        f"{c['promoted']:>8} {_frac(c['precise'], c['promoted']):>10} "
        f"{_frac(c['found'], c['items']):>10} {_frac(c['core_found'], c['core_items']):>10} "
        f"{_frac(c['found_later'], c['items']):>10} {_frac(c['in_findings'], c['items']):>10} "
        f"{_frac(c['payload_junk'], c['payload_items']):>11} "
        f"{_frac(c['later_junk'], c['later_items']):>11} {c['home']:>4}"
    )


_COUNTS = ("messages", "findings", "junk", "promoted", "precise", "items", "found", "core_items",
           "core_found", "found_later", "in_findings", "payload_items", "payload_junk",
           "later_items", "later_junk", "home")  # fmt: skip


def _median(pairs: list[tuple[int, int]]) -> str:
    ratios = [n / d for n, d in pairs if d]
    return f"{statistics.median(ratios):4.2f}" if ratios else "   -"


def table(preset: str, scores: list[Score]) -> str:
    rows = [f"preset: {preset}", COLUMNS, "-" * len(COLUMNS)]
    rows += [_row(s.project, {k: getattr(s, k) for k in _COUNTS}) for s in scores]
    rows.append("-" * len(COLUMNS))
    rows.append(_row("overall (pooled)", {k: sum(getattr(s, k) for s in scores) for k in _COUNTS}))
    junk50 = statistics.median(50 * s.junk / s.messages for s in scores if s.messages)
    rows.append(
        f"{'overall (median)':<24} {'':>5} {'':>5} {junk50:>7.2f} {'':>8} "
        f"{_median([(s.precise, s.promoted) for s in scores]):>10} "
        f"{_median([(s.found, s.items) for s in scores]):>10} "
        f"{_median([(s.core_found, s.core_items) for s in scores]):>10} "
        f"{_median([(s.found_later, s.items) for s in scores]):>10}"
    )
    if not_final := [s.project for s in scores if not s.finalized]:
        rows.append(f"NOT FINALIZED: {', '.join(not_final)}")
    return "\n".join(rows)


def details(scores: list[Score]) -> str:
    out: list[str] = []
    for s in scores:
        out.append(f"\n== {s.project} ({s.session})")
        out.append(f"  missed: {', '.join(s.missed) or '-'}")
        out.append("  found (item: where):")
        for item, text in s.found_in.items():
            out.append(f"    {item}: {' '.join(text.split())[:150]}")
        out.append("  promoted entries ([label ids | junk pattern | -] (rule) text):")
        for mark, rule, text in s.promoted_detail:
            out.append(f"    [{mark}] ({rule}) {' '.join(text.split())[:160]}")
        out.append("  junk findings (rule → pattern):")
        for key, n in sorted(s.junk_detail.items(), key=lambda kv: -kv[1]):
            out.append(f"    {n:>3}  {key}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", action="append", choices=PRESETS, help="default: both")
    parser.add_argument("--details", action="store_true", help="matches, misses, entries, junk")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--samples", type=Path, default=SAMPLES)
    parser.add_argument("--no-queries", action="store_true", help="skip the relevance floor")
    args = parser.parse_args()
    sessions = load_all()
    missing = [s.sample for s in sessions if not (args.samples / s.sample).is_file()]
    if missing:
        sys.exit(f"samples not found under {args.samples}: {', '.join(missing)}")
    junk = load_junk()
    queries = None if args.no_queries else load_queries(sessions=sessions)
    report: dict[str, list[Score]] = {}
    floors: dict[str, list[FloorScore]] = {}
    for preset in args.preset or PRESETS:
        captured, floors[preset] = run_preset(preset, sessions, args.samples, queries)
        report[preset] = [score(c, junk) for c in captured]
    if args.json:
        out = {k: [asdict(s) for s in v] for k, v in report.items()}
        out |= {f"{k}.floors": [asdict(f) for f in v] for k, v in floors.items()}
        print(json.dumps(out, indent=1))
        return
    current = RetrievalConfig().inject_min_shared
    for preset, scores in report.items():
        print(table(preset, scores))
        if floors[preset]:
            print("\n" + floor_table(preset, floors[preset], current))
        if args.details:
            print(details(scores))
        print()


if __name__ == "__main__":
    main()
