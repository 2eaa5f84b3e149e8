"""Benchmark: retrieval quality (recall@5, recall@10, MRR) on our labelled sets, per part.

Every item is stored through the real daemon (``memctl import -`` in the part's project folder,
private XDG dirs and socket as in tests/conftest.py) and every question asked through
``memctl search`` (top 10), as a person or an agent would. Parts:

  shop      tests/fixtures/retrieval/: one project's memory (288 entries, 83 questions), the set
            of tests/test_retrieval_quality.py
  samples   the user, assistant and short tool-result messages of the five real Claude Code
            sessions in shared/samples/claude/ (read there, not copied: provenance in
            shared/samples/SOURCES.md), one project each, with the message's time; the questions
            of tests/fixtures/capture_labels/queries.toml and tests/fixtures/retrieval_samples/
            queries.toml, judged by the label items' rules (a result answers an item when it
            matches one of its rules)
  history   tests/fixtures/retrieval_history/: a synthetic project history of our own, twelve
            dated sessions of a developer and an agent (one entry per turn, dated, tagged with
            its speaker), and 42 questions, some anchored on a date or a speaker
  locomo    optional (--locomo PATH): the LoCoMo conversations (snap-research/locomo,
            data/locomo10.json) if you have a copy; its licence does not let us commit it. One
            entry per turn ("Speaker: text", dated by its session), the questions with evidence
            except the adversarial category 5

A question's targets are its labelled entries (or label items); recall@k is the share of its
targets found in the top k, averaged over questions; MRR the mean of 1/rank of the first result
that hits a target (0 when none is in the top 10). "all" averages over every question.

    .venv/bin/python bench/retrieval_quality.py [--locomo PATH] [--variant NAME:KEY=VAL,...]
        [--misses PART] [--json]

A variant restarts the daemon over the same stores with settings changed through the
environment (``MEMORYD_RETRIEVAL__...``), so rows compare like with like in one run.
"""

from __future__ import annotations

import argparse
import calendar
import json
import re
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.capture_labels import LABELS, Item, load_all, load_queries
from tests.conftest import Daemon, Env, make_env, memctl

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = ROOT.parent / "shared" / "samples"
K = 10
TOOL_RESULT_MAX = 2_000  # longer tool results are file dumps and listings, not memory
ENTRY_MAX = 500  # the daemon's limit on an imported entry's content
QUIET = {"MEMORYD_LOGGING__FILE": "false", "MEMORYD_LOGGING__LEVEL": "warning"}

Target = Callable[[str, str], bool]  # (fixture key, content) → hit


@dataclass
class Question:
    text: str
    targets: list[Target]
    files: list[str] = field(default_factory=list)


@dataclass
class Project:
    """One project folder: the import lines, their fixture keys, the questions asked in it."""

    part: str
    name: str
    lines: list[dict[str, Any]]
    keys: list[str]
    questions: list[Question]
    folder: Path | None = None
    key_of: dict[str, str] = field(default_factory=dict)  # entry id → fixture key
    content_of: dict[str, str] = field(default_factory=dict)  # entry id → stored content


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _is(key: str) -> Target:
    return lambda k, _content: k == key


def _answers(item: Item) -> Target:
    return lambda _k, content: item.matches(content)


# --------------------------------------------------------------------------- parts


def shop() -> list[Project]:
    entries = _jsonl(FIXTURES / "retrieval" / "entries.jsonl")
    questions = [
        Question(q["query"], [_is(k) for k in q["relevant"]], q.get("files", []))
        for q in _jsonl(FIXTURES / "retrieval" / "queries.jsonl")
    ]
    lines = [{k: v for k, v in e.items() if k != "key"} for e in entries]
    return [Project("shop", "shop", lines, [e["key"] for e in entries], questions)]


def _messages(path: Path) -> list[tuple[str, str, float | None]]:
    """(speaker, text, time) of a Claude transcript's conversation, through the daemon's own
    parser: user and assistant text (what the harness injected left out), and tool results
    short enough to be a fact rather than a file."""
    from memoryd.capture.parsers import claude

    state, offset, found = claude.new_state(str(path)), 0, []
    for line in path.read_bytes().splitlines(keepends=True):
        for m in claude.parse_line(line, offset, state):
            if m.injected:
                continue
            if m.role in ("user", "assistant") and m.text.strip():
                found.append((m.role, m.text, m.timestamp))
            for r in m.tool_results:
                if r.text.strip() and len(r.text) <= TOOL_RESULT_MAX:
                    found.append(("tool", r.text, m.timestamp))
        offset += len(line)
    return found


def chunks(text: str, limit: int = ENTRY_MAX) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut at paragraphs, then lines, then
    words: a long message becomes several entries, as memory holds short facts."""
    pieces: list[str] = []
    for part in re.split(r"\n\s*\n|\n", text.strip()):
        words = part.split()
        while words:
            piece = ""
            while words and len(piece) + len(words[0]) + 1 <= limit:
                piece = f"{piece} {words.pop(0)}" if piece else words.pop(0)
            if not piece:  # one word longer than the limit
                piece, words[0] = words[0][:limit], words[0][limit:]
            if pieces and len(pieces[-1]) + len(piece) + 1 <= limit:
                pieces[-1] = f"{pieces[-1]}\n{piece}"
            else:
                pieces.append(piece)
    return [p for p in pieces if p.strip()]


def samples() -> list[Project]:
    sessions = load_all()
    extra = tomllib.loads(
        (FIXTURES / "retrieval_samples" / "queries.toml").read_text(encoding="utf-8")
    )["query"]
    asked = [(q.project, q.text, q.want) for q in load_queries(LABELS, sessions) if q.want]
    asked += [(q["project"], q["text"], tuple(q["want"])) for q in extra]
    projects = []
    for labels in sessions:
        items = {i.id: i for i in labels.items}
        lines, keys, seen = [], [], set()
        messages = _messages(SAMPLES / labels.sample)
        for n, (speaker, text, at) in enumerate(messages):
            for piece in chunks(text):
                if piece in seen:
                    continue
                seen.add(piece)
                line: dict[str, Any] = {"content": piece, "tags": [speaker]}
                if at is not None:
                    line["created_at"] = at
                lines.append(line)
                keys.append(f"{labels.project}:{n}:{len(keys)}")
        questions = [
            Question(text, [_answers(items[w]) for w in want])
            for project, text, want in asked
            if project == labels.project
        ]
        projects.append(Project("samples", labels.project, lines, keys, questions))
    return projects


def _day(date: str) -> float:
    return datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()


def history() -> list[Project]:
    folder = FIXTURES / "retrieval_history"
    lines, keys = [], []
    for session in _jsonl(folder / "sessions.jsonl"):
        start = _day(session["date"]) + 10 * 3600
        for n, (speaker, text) in enumerate(session["turns"], start=1):
            lines.append({"content": text, "tags": [speaker], "created_at": start + 60 * n})
            keys.append(f"{session['session']}:{n}")
    questions = [
        Question(q["query"], [_is(k) for k in q["relevant"]])
        for q in _jsonl(folder / "queries.jsonl")
    ]
    return [Project("history", "history", lines, keys, questions)]


_LOCOMO_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m) on (\d{1,2}) (\w+),? (\d{4})", re.I)
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}


def _locomo_time(text: str) -> float | None:
    m = _LOCOMO_DATE.search(text)
    if m is None:
        return None
    hour, minute, half, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    when = datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=UTC)
    return when.timestamp()


def locomo(path: Path) -> list[Project]:
    projects = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv, lines, keys = sample["conversation"], [], []
        sessions = sorted(
            (int(k.split("_")[1]), v)
            for k, v in conv.items()
            if re.fullmatch(r"session_\d+", k) and isinstance(v, list)
        )
        for number, turns in sessions:
            at = _locomo_time(conv.get(f"session_{number}_date_time", ""))
            for n, turn in enumerate(turns):
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                line: dict[str, Any] = {"content": text[:ENTRY_MAX]}
                if at is not None:
                    line["created_at"] = at + n
                lines.append(line)
                keys.append(turn["dia_id"])
        questions = [
            Question(str(q["question"]), [_is(e.strip()) for e in q["evidence"]])
            for q in sample["qa"]
            if q.get("evidence") and q.get("category") != 5
        ]
        projects.append(Project("locomo", str(sample.get("sample_id")), lines, keys, questions))
    return projects


# --------------------------------------------------------------------------- running


def _ok(env: Env, folder: Path, *args: str, stdin: str | None = None) -> Any:
    result = memctl(env, "--json", *args, stdin=stdin, cwd=folder, timeout=600)
    if result.code != 0:
        raise RuntimeError(f"memctl {' '.join(args[:2])} exited {result.code}: {result.stderr}")
    return json.loads(result.stdout)


def store(env: Env, project: Project) -> None:
    """Import the project's lines in its own folder; map entry ids back to fixture keys by the
    content the store holds (imports may redact; a line whose content changed keeps no key)."""
    project.folder = env.home / "work" / project.part / re.sub(r"\W+", "-", project.name)
    (project.folder / ".git").mkdir(parents=True, exist_ok=True)
    # Dated items keep their date, but count as used just now: compaction (on load) would
    # otherwise expire what is months old, and the bench measures retrieval, not ageing.
    used = time.time() - 60
    lines = [line | {"last_accessed_at": used} if "created_at" in line else line
             for line in project.lines]  # fmt: skip
    text = "\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n"
    imported = _ok(env, project.folder, "import", "-", stdin=text)
    if imported["rejected"]:
        raise RuntimeError(f"{project.name}: lines rejected: {imported['rejected'][:3]}")
    listed = _ok(env, project.folder, "list", "--limit", "10000")["entries"]
    key_by_content: dict[str, str] = {}
    for line, key in zip(project.lines, project.keys, strict=True):
        key_by_content.setdefault(line["content"], key)
    project.content_of = {e["id"]: e["content"] for e in listed}
    project.key_of = {i: key_by_content.get(c, "") for i, c in project.content_of.items()}


def ask(env: Env, project: Project) -> list[list[tuple[str, str]]]:
    """The top ``K`` (key, content) of every question, in order."""
    assert project.folder is not None
    plain = [q.text for q in project.questions if not q.files]
    answers: dict[str, list[dict[str, Any]]] = {}
    if plain:
        out = memctl(env, "--json", "search", "-", "-k", str(K), stdin="\n".join(plain),
                     cwd=project.folder, timeout=600)  # fmt: skip
        if out.code != 0:
            raise RuntimeError(out.stderr)
        for line in out.stdout.splitlines():
            one = json.loads(line)
            answers[one["query"]] = one["results"]
    tops = []
    for q in project.questions:
        if q.files:
            args = [a for f in q.files for a in ("--file", f)]
            results = _ok(env, project.folder, "search", q.text, "-k", str(K), *args)["results"]
        else:
            results = answers[q.text]
        tops.append([(project.key_of.get(r["id"], ""), r["content"]) for r in results])
    return tops


@dataclass
class Score:
    questions: int = 0
    targets: int = 0
    recall5: float = 0.0
    recall10: float = 0.0
    rr: float = 0.0
    misses: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        self.questions += other.questions
        self.targets += other.targets
        self.recall5 += other.recall5
        self.recall10 += other.recall10
        self.rr += other.rr

    def row(self, name: str) -> str:
        n = max(self.questions, 1)
        return (
            f"{name:<9} {self.questions:>9} {self.targets:>7} {self.recall5 / n:>8.3f} "
            f"{self.recall10 / n:>9.3f} {self.rr / n:>6.3f}"
        )

    def metrics(self) -> dict[str, float]:
        n = max(self.questions, 1)
        return {
            "questions": self.questions,
            "recall@5": round(self.recall5 / n, 4),
            "recall@10": round(self.recall10 / n, 4),
            "mrr": round(self.rr / n, 4),
        }


def score(project: Project, tops: list[list[tuple[str, str]]]) -> Score:
    """Targets no stored entry can hit (a sample's fact that is in no stored message) are left
    out, and so is a question left with none."""
    s = Score()
    stored = [(k, c) for i, c in project.content_of.items() for k in [project.key_of[i]]]
    for q, top in zip(project.questions, tops, strict=True):
        targets = [t for t in q.targets if any(t(k, c) for k, c in stored)]
        if not targets:
            continue
        s.questions += 1
        s.targets += len(targets)
        s.recall5 += sum(any(t(k, c) for k, c in top[:5]) for t in targets) / len(targets)
        s.recall10 += sum(any(t(k, c) for k, c in top[:K]) for t in targets) / len(targets)
        first = next((r for r, (k, c) in enumerate(top, 1) if any(t(k, c) for t in targets)), 0)
        s.rr += 1 / first if first else 0.0
        if sum(any(t(k, c) for k, c in top[:K]) for t in targets) < len(targets):
            got = " | ".join(c[:60].replace("\n", " ") for _k, c in top[:3])
            s.misses.append(f"  {project.name}: {q.text!r} (first hit {first or '-'}): {got}")
    return s


def measure(env: Env, projects: list[Project]) -> dict[str, Score]:
    parts: dict[str, Score] = {}
    for project in projects:
        one = score(project, ask(env, project))
        parts.setdefault(project.part, Score()).add(one)
        parts[project.part].misses += one.misses
    return parts


def table(variant: str, parts: dict[str, Score]) -> str:
    rows = [f"variant: {variant}",
            f"{'part':<9} {'questions':>9} {'targets':>7} {'recall@5':>8} {'recall@10':>9} "
            f"{'MRR':>6}"]  # fmt: skip
    total = Score()
    for name, s in parts.items():
        rows.append(s.row(name))
        total.add(s)
    rows.append(total.row("all"))
    return "\n".join(rows)


def _variants(specs: list[str]) -> list[tuple[str, dict[str, str]]]:
    out = [("default", {})]
    for spec in specs:
        name, _, settings = spec.partition(":")
        pairs = (kv.split("=", 1) for kv in settings.split(",") if kv)
        out.append((name, {k: v for k, v in pairs}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, help="a copy of LoCoMo's data/locomo10.json")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:KEY=VAL,... daemon settings of one more row")  # fmt: skip
    parser.add_argument("--misses", help="print the questions of this part that missed targets")
    parser.add_argument("--json", action="store_true", help="one JSON object, not tables")
    args = parser.parse_args()
    projects = [*shop(), *samples(), *history(), *(locomo(args.locomo) if args.locomo else [])]
    root = Path(tempfile.mkdtemp(prefix="mdq-"))
    env = make_env(root)
    results: dict[str, dict[str, Any]] = {}
    try:
        started = time.monotonic()
        daemon = Daemon(env, QUIET).start()
        try:
            for project in projects:
                store(env, project)
        finally:
            daemon.stop()
        print(f"stored {sum(len(p.lines) for p in projects)} items in {len(projects)} projects "
              f"({time.monotonic() - started:.1f} s)", file=sys.stderr)  # fmt: skip
        for name, settings in _variants(args.variant):
            daemon = Daemon(env, QUIET | settings).start()
            try:
                parts = measure(env, projects)
            finally:
                daemon.stop()
            results[name] = {p: s.metrics() for p, s in parts.items()}
            if not args.json:
                print(table(name if not settings else f"{name} {settings}", parts))
                if args.misses in parts:
                    print("\n".join(parts[args.misses].misses))
                print()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(env.vars["XDG_RUNTIME_DIR"], ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
