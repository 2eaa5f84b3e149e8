"""Memory banks on disk (SPEC §10; seed 000 §7–§12): the behavioural tests of seed 000 §11 against
real directories, path security (every refusal leaves the disk exactly as it was), custom rules,
the codebase scan and bank discovery.

Changes go the daemon's one way (``Writes``): the bank service and its cache journal them, and
the writer puts them on disk, as the periodic sync does; the tests read the disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.banks.cache import BankCache
from memoryd.banks.files import Bank
from memoryd.banks.journal import BankJournal
from memoryd.banks.paths import bank_dir_for, real_bank_dir, resolve
from memoryd.banks.scan import find_banks, scan_codebase
from memoryd.banks.service import BankService
from memoryd.banks.writer import FlushJob, flush_file
from memoryd.config import StorageSettings
from memoryd.core.bank import model as bank
from memoryd.core.bank.model import completed_items, find_section, parse_decisions
from memoryd.core.bank.ops import Complete
from memoryd.core.errors import BadRequest, EntryNotFound, Forbidden, TooLarge
from memoryd.instructions.loader import InstructionConfig
from memoryd.registry import ProjectRegistry

BRIEF = "A REST API for managing todo items"
PYPROJECT = """[project]
name = "todo-api"
description = "Todo items over HTTP"
requires-python = ">=3.11"
dependencies = ["fastapi>=0.110", "msgspec"]
[project.optional-dependencies]
test = ["pytest>=8"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "todo"
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the project, with a secret, that no bank operation may touch."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.md").write_text("# Secret\n\nnot yours\n")
    return directory


TODAY = date(2025, 6, 30)


@dataclass
class Writes:
    """Changes to the bank of ``root`` made as the daemon makes them: checked and journaled by
    the bank service and its cache, then put on disk by the writer's flush (what the periodic
    sync does), so each call returns with the disk up to date."""

    service: BankService
    root: Path
    jobs: list[FlushJob] = field(default_factory=list)

    def _on_disk(self) -> None:
        self.service.cache.sync()
        results = [flush_file(job) for job in self.jobs]
        self.jobs.clear()
        self.service.written(results)

    def write(self, name: str, content: str, mode: str | None = None) -> p.BankWriteResult:
        result = self.service.write(str(self.root), name, content, mode)
        self._on_disk()
        return result

    def update(self, name: str, content: str, mode: str | None = None) -> p.BankWriteResult:
        result = self.service.update(str(self.root), name, content, mode)
        self._on_disk()
        return result

    def complete(self, item: str, when: date) -> None:
        self.service.cache.apply(self.root, bank.PROGRESS, Complete(item, when))
        self._on_disk()

    def optimise(self, mode: str | None = None) -> p.BankOptimiseResult:
        result = self.service.optimise(str(self.root), apply=True, mode=mode)
        self._on_disk()
        return result

    def complete_by_text(self, text: str, mode: str | None) -> p.BankProcessResult:
        result = self.service.process(str(self.root), text, apply=True, mode=mode)
        self._on_disk()
        return result


@pytest.fixture
def changes(tmp_path: Path) -> Iterator[Callable[[Path], Writes]]:
    """``changes(root)``: the daemon's write path to that project's bank (its state kept apart
    from every folder the tests snapshot)."""
    state = tmp_path / "daemon-state"
    state.mkdir()
    errors = BackgroundErrors()
    registry = ProjectRegistry(state / "data", StorageSettings(), errors)
    journal = BankJournal(state / "bank-journal.jsonl")
    made: list[Writes] = []

    def open_writes(root: Path) -> Writes:
        jobs: list[FlushJob] = []
        cache = BankCache(journal, jobs.append, errors, conflicts_dir=state / "conflicts")
        noon = datetime(TODAY.year, TODAY.month, TODAY.day, 12).timestamp()
        service = BankService(
            registry,
            InstructionConfig.from_environ({"HOME": str(state)}),
            cache,
            clock=lambda: noon,
        )
        made.append(Writes(service, root, jobs))
        return made[-1]

    yield open_writes
    registry.close()
    journal.close()


def snapshot(*roots: Path) -> dict[str, bytes | str]:
    """Every path under the roots with its bytes (files) or link target (symlinks)."""
    state: dict[str, bytes | str] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                if path.is_symlink():
                    state[str(path)] = "-> " + os.readlink(path)
                elif path.is_file():
                    state[str(path)] = path.read_bytes()
                else:
                    state[str(path)] = "dir"
    return state


def refused(action: Callable[[], object], *roots: Path, error: type[Exception] = Forbidden) -> str:
    """Run an action that must be refused; nothing under the roots may change."""
    before = snapshot(*roots)
    with pytest.raises(error) as caught:
        action()
    assert snapshot(*roots) == before
    return str(caught.value)


# -- seed 000 §11.1: initialisation ---------------------------------------------------------


def test_init_creates_the_seven_files_from_templates_and_the_codebase(project: Path) -> None:
    result = Bank(project).init()
    assert result.created == list(bank.FILES) and result.existing == []
    directory = project / "memory-bank"
    assert sorted(p.name for p in directory.iterdir()) == sorted(bank.FILES)
    for name in bank.FILES:
        text = (directory / name).read_text()
        assert text.startswith("# ") and "<!--" in text, name
        assert oct((directory / name).stat().st_mode & 0o777) == oct(0o644)
    tech = (directory / "techContext.md").read_text()
    assert "Python >=3.11" in tech and "fastapi" in tech and "python -m pytest" in tech
    assert "src/" in (directory / "systemPatterns.md").read_text()
    assert "todo-api" in (directory / "projectBrief.md").read_text()
    assert Bank(project).validate().valid


def test_init_with_a_brief_fills_the_project_brief(project: Path) -> None:
    Bank(project).init(BRIEF)
    brief, _mtime = Bank(project).read("projectBrief.md")
    assert BRIEF in brief
    assert BRIEF in Bank(project).read("activeContext.md")[0]


def test_an_existing_bank_is_never_overwritten(project: Path) -> None:
    directory = project / "memory-bank"
    directory.mkdir()
    (directory / "progress.md").write_text("# Progress\n\nmine, hands off\n")
    (directory / "projectBrief.md").write_text("")  # even an empty file is the user's
    result = Bank(project).init(BRIEF)
    assert result.existing == ["projectBrief.md", "progress.md"]
    assert len(result.created) == 5
    assert (directory / "progress.md").read_text() == "# Progress\n\nmine, hands off\n"
    assert (directory / "projectBrief.md").read_text() == ""
    again = Bank(project).init()
    assert again.created == [] and again.existing == list(bank.FILES)


# -- seed 000 §11.2: reading --------------------------------------------------------------


def test_activate_reads_every_file_in_hierarchical_order(project: Path) -> None:
    Bank(project).init()
    (project / "memory-bank" / "notes.md").write_text("# Notes\n")
    (project / "memory-bank" / "archive").mkdir()
    (project / "memory-bank" / "archive" / "progress.md").write_text("# Archive\n")
    activation = Bank(project).activate("code")
    assert list(activation.content) == [*bank.READ_ORDER, "notes.md"]  # never the archive
    info = activation.bank_info
    assert info.validation.valid and info.mode == "code" and info.tokens > 0
    assert not info.over_budget


def test_missing_optional_files_are_noted_not_blocking(project: Path) -> None:
    Bank(project).init()
    for name in bank.RECOMMENDED:
        (project / "memory-bank" / name).unlink()
    activation = Bank(project).activate(None)
    assert list(activation.content) == list(bank.REQUIRED)
    report = activation.bank_info.validation
    assert report.valid and report.missing_recommended == list(bank.RECOMMENDED)


def test_an_empty_bank_offers_initialisation(project: Path) -> None:
    (project / "memory-bank").mkdir()
    report = Bank(project).validate()
    assert report.empty and not report.valid and report.missing_required == list(bank.REQUIRED)
    assert Bank(project).activate(None).content == {}
    with pytest.raises(EntryNotFound):
        Bank(project).read("progress.md")


# -- seed 000 §11.3: writing --------------------------------------------------------------


def test_writing_active_context_replaces_the_old_content(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    new = "# Active Context\n\n## Current Focus\n\nWiring the bank core.\n"
    writes.write("activeContext.md", new, mode="code")
    assert bank_.read("activeContext.md")[0] == new
    writes.update("activeContext.md", "## Current Focus\n\nTesting it.\n")
    text = bank_.read("activeContext.md")[0]
    assert "Testing it." in text and "Wiring the bank core." not in text


def test_a_new_decision_is_appended_after_the_existing_ones(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    entries = "\n".join(
        f"## Decision: {t}\n- **Date**: 2025-01-0{n}\n- **Status**: Accepted\n- **Context**: {t}\n"
        for n, t in enumerate(("Use SQLite", "Use msgspec"), start=1)
    )
    writes.update("decisionLog.md", entries)
    writes.update("decisionLog.md", "## Decision: Use tantivy\n- **Status**: Accepted\n")
    decisions = parse_decisions(bank_.read("decisionLog.md")[0])
    assert [d.title for d in decisions] == ["Use SQLite", "Use msgspec", "Use tantivy"]


def test_completing_a_progress_item_checks_and_dates_it(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    writes.update("progress.md", "## In Progress\n\n- [ ] Feature X\n- [ ] Feature Y\n")
    writes.complete("Feature X", date(2025, 6, 30))
    text = bank_.read("progress.md")[0]
    assert completed_items(text) == ["Feature X — 2025-06-30"]
    in_progress = find_section(text, "In Progress")
    assert in_progress and in_progress.body(text).strip() == "- [ ] Feature Y"


def test_a_full_session_lifecycle(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    assert Bank(project).validate().empty
    bank_.init(BRIEF)
    start = bank_.activate("plan")  # session start (seed 000 §11.5): everything, in order
    assert list(start.content) == list(bank.READ_ORDER)
    writes.update("progress.md", "## In Progress\n\n- [ ] Build the endpoints\n", mode="code")
    writes.update("activeContext.md", "## Recent Changes\n\n- 2025-06-30: endpoints started\n")
    writes.update("decisionLog.md", "## Decision: REST over GraphQL\n- **Date**: 2025-06-30\n")
    writes.complete("Build the endpoints", date(2025, 6, 30))
    writes.update("activeContext.md", "## Current Focus\n\nPagination.\n", mode="debug")
    report = bank_.validate()
    assert report.valid and report.problems == []
    end = bank_.activate("code").content
    assert (
        "Pagination." in end["activeContext.md"] and "endpoints started" in end["activeContext.md"]
    )
    assert completed_items(end["progress.md"]) == ["Build the endpoints — 2025-06-30"]
    assert [d.title for d in parse_decisions(end["decisionLog.md"])] == ["REST over GraphQL"]
    names = [f.name for f in bank_.list_files()]
    assert names == list(bank.READ_ORDER)


def test_list_files_shows_bank_files_only(project: Path, changes) -> None:
    bank_ = Bank(project)
    bank_.init()
    directory = project / "memory-bank"
    (directory / "script.sh").write_text("echo")
    (directory / ".hidden.md").write_text("# h")
    changes(project).write("archive/old.md", "# Old\n")
    listed = {f.name: f for f in bank_.list_files()}
    assert set(listed) == {*bank.FILES, "archive/old.md"}
    assert listed["archive/old.md"].size == len("# Old\n")


def test_optimising_archives_completed_work_and_keeps_decisions(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    items = "\n".join(
        f"- [x] Task {n:03} with a fairly long description — 2025-01-01" for n in range(500)
    )
    writes.write(
        "progress.md", f"# Progress\n\n## Completed\n\n{items}\n\n## In Progress\n\n- [ ] open\n"
    )
    decisions = "".join(f"## Decision: D{n}\n- **Status**: Accepted\n\n" for n in range(20))
    writes.update("decisionLog.md", decisions)
    log_before = (project / "memory-bank" / "decisionLog.md").read_bytes()
    plan = writes.optimise()  # on TODAY
    assert plan.tokens_before > 5000 >= plan.tokens_after >= 4000
    assert bank.bank_tokens(bank_.contents()[0]) == plan.tokens_after
    archive = bank_.read("archive/progress.md")[0]
    assert archive.startswith("# Archive of progress.md\n\n## Completed — archived 2025-06-30")
    kept = completed_items(bank_.read("progress.md")[0])
    assert len(kept) + archive.count("- [x] ") == 500
    assert (project / "memory-bank" / "decisionLog.md").read_bytes() == log_before
    assert writes.optimise().archived == []  # in band: nothing more to do


# -- custom instructions ------------------------------------------------------------------


def test_activate_collects_rules_for_the_mode_and_the_files(project: Path, outside: Path) -> None:
    Bank(project).init()
    (project / ".clinerules").write_text("# Project Rules\n\n- conventional commits\n")
    (project / ".clinerules-code").write_text("# Code\n\n- tests first\n")
    (project / ".roorules-code").write_text(
        '---\npaths:\n  - "src/api/**/*.ts"\n  - lib/server/*.ts\n---\n\n'
        "# API rules\n- validate input\n"
    )
    (project / ".roorules-ask").write_text("# Ask\n")
    activation = Bank(project).activate("code", ["src/api/users.ts"])
    sources = [(i.source, i.paths) for i in activation.custom_instructions]
    assert sources == [
        (".clinerules", []),
        (".clinerules-code", []),
        (".roorules-code", ["src/api/**/*.ts", "lib/server/*.ts"]),
    ]
    assert activation.custom_instructions[2].content.startswith("# API rules")
    elsewhere = Bank(project).activate("code", [str(project / "README.md")])
    assert [i.source for i in elsewhere.custom_instructions] == [".clinerules", ".clinerules-code"]
    (project / ".clinerules").unlink()
    (project / ".clinerules").symlink_to(outside / "secret.md")
    assert Bank(project).activate(None).custom_instructions == []
    with pytest.raises(BadRequest):
        Bank(project).activate("../etc")


def test_a_clinerules_directory_holds_several_rule_files(project: Path) -> None:
    rules = project / ".clinerules"
    rules.mkdir()
    (rules / "b.md").write_text("---\npaths: [docs/*.md]\n---\n# Docs\n")
    (rules / "a.md").write_text("# General\n")
    found = Bank(project).activate(None, ["docs/intro.md"]).custom_instructions
    assert [(i.source, i.paths) for i in found] == [
        (".clinerules/a.md", []),
        (".clinerules/b.md", ["docs/*.md"]),
    ]


# -- codebase scan and bank discovery -----------------------------------------------------


def test_scan_reads_each_kind_of_manifest(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(
        '{"name": "web", "dependencies": {"react": "18"}, "devDependencies": {"typescript": "5"},'
        ' "scripts": {"test": "vitest", "build": "tsc"}, "engines": {"node": ">=18"}}'
    )
    (tmp_path / "Cargo.toml").write_text(
        '[package]\nname = "core"\nedition = "2021"\n[dependencies]\ntokio = "1"\n'
    )
    (tmp_path / "go.mod").write_text(
        "module example.com/svc\n\ngo 1.22\n\nrequire github.com/gin-gonic/gin v1.9.1\n"
    )
    (tmp_path / "requirements.txt").write_text("# pinned\nrequests==2.31\n-r other.txt\n")
    (tmp_path / "pyproject.toml").write_text("this is [not toml")
    facts = scan_codebase(tmp_path)
    assert facts.name == "web"
    assert facts.manifests == ("package.json", "Cargo.toml", "go.mod", "requirements.txt")
    assert facts.languages == ("TypeScript (Node.js >=18)", "Rust 2021", "Go 1.22", "Python")
    assert {"react", "tokio", "github.com/gin-gonic/gin", "requests"} <= set(facts.dependencies)
    assert ("Test", "npm run test") in facts.commands and ("Build", "cargo build") in facts.commands


def test_scan_never_follows_symlinks(tmp_path: Path, outside: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (outside / "package.json").write_text('{"name": "stolen"}')
    (project / "package.json").symlink_to(outside / "package.json")
    (project / "linked").symlink_to(outside)
    (project / "src").mkdir()
    facts = scan_codebase(project)
    assert facts.manifests == () and facts.name == "p"
    assert facts.layout == ("src/", "linked", "package.json")  # names only, never entered


def test_find_banks_is_bounded_and_skips_build_directories(tmp_path: Path, outside: Path) -> None:
    for path in ("a", "b/c", "node_modules/x", ".git/y", "d/build/z", "e/1/2/3/4/5", "f/.venv/g"):
        (tmp_path / "root" / path / "memory-bank").mkdir(parents=True)
    (outside / "memory-bank").mkdir()
    (tmp_path / "root" / "link").symlink_to(outside)
    (tmp_path / "root" / "a" / "memory-bank" / "inner" / "memory-bank").mkdir(parents=True)
    found = find_banks([tmp_path / "root", tmp_path / "root" / "a"], max_depth=4)
    assert [(name, path.relative_to(tmp_path / "root").as_posix()) for name, path in found] == [
        ("a", "a"),
        ("c", "b/c"),
    ]


# -- security (seed 000 §8.3, §11.4) ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../etc/passwd", "'..'"),
        ("../todo/memory-bank/progress.md", "'..'"),
        ("/etc/passwd.md", "absolute"),
        ("a\x00.md", "control characters"),
        ("script.sh", "only .md"),
        ("progress.md.bak", "only .md"),
        (".hidden.md", "hidden"),
        ("sub/notes.md", "only top-level files and archive/"),
        ("archive/../progress.md", "'..'"),
        ("archive\\x.md", "forward slashes"),
        ("", "required"),
    ],
)
def test_bad_names_are_refused_and_nothing_is_written(
    project: Path, outside: Path, name: str, why: str, changes
) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    assert why in refused(lambda: bank_.read(name), project, outside)
    assert why in refused(lambda: writes.write(name, "# X\n"), project, outside)
    assert why in refused(lambda: writes.update(name, "## X\n"), project, outside)


def test_another_projects_bank_is_out_of_reach(tmp_path: Path, changes) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        root.mkdir()
        Bank(root).init()
    refused(lambda: Bank(a).read("../../b/memory-bank/progress.md"), a, b)
    writes = changes(a)
    refused(lambda: writes.write(str(b / "memory-bank" / "progress.md"), "# P\n"), a, b)


def test_a_symlink_inside_the_bank_cannot_lead_out(project: Path, outside: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    (project / "memory-bank" / "escape.md").symlink_to(outside / "secret.md")
    assert "symlink" in refused(lambda: bank_.read("escape.md"), project, outside)
    refused(lambda: writes.write("escape.md", "# Pwned\n"), project, outside)
    refused(lambda: writes.update("escape.md", "## Pwned\n"), project, outside)
    assert "escape.md" not in [f.name for f in bank_.list_files()]
    report = bank_.validate()
    assert not report.valid and ("escape.md", "unreadable") in [
        (p.file, p.kind) for p in report.problems
    ]
    assert "escape.md" not in bank_.activate(None).content


def test_a_symlinked_parent_cannot_lead_out(project: Path, outside: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    (project / "memory-bank" / "archive").symlink_to(outside)
    refused(lambda: bank_.read("archive/secret.md"), project, outside)
    refused(lambda: writes.write("archive/new.md", "# New\n"), project, outside)


def test_a_bank_directory_linked_outside_the_project_is_refused(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "memory-bank").symlink_to(outside)
    message = refused(lambda: Bank(root).init(), root, outside)
    assert "outside its project" in message
    refused(lambda: Bank(root).read("secret.md"), root, outside)


def test_an_internal_symlink_to_a_bank_file_is_allowed(project: Path) -> None:
    bank_ = Bank(project)
    bank_.init()
    (project / "memory-bank" / "now.md").symlink_to("activeContext.md")
    assert bank_.read("now.md")[0] == bank_.read("activeContext.md")[0]
    (project / "memory-bank" / "run.md").symlink_to("../pyproject.toml")
    refused(lambda: bank_.read("run.md"), project)


@pytest.mark.parametrize("mode", ["ask", "Ask"])
def test_read_only_mode_refuses_every_write(project: Path, mode: str, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    message = refused(lambda: writes.write("notes.md", "# N\n", mode=mode), project)
    assert "read-only" in message
    refused(lambda: writes.update("progress.md", "## Upcoming\n\n- x\n", mode=mode), project)
    refused(lambda: writes.complete_by_text("Completed: x", mode=mode), project)
    refused(lambda: writes.optimise(mode=mode), project)
    assert bank_.read("progress.md")[0]  # reading is what ask mode is for


def test_rewriting_the_decision_log_without_an_entry_is_refused(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    writes.update("decisionLog.md", "## Decision: A\n- **Status**: Accepted\n\n## Decision: B\n")
    message = refused(
        lambda: writes.write("decisionLog.md", "# Decision Log\n\n## Decision: B\n"), project
    )
    assert "append-only" in message and "'A'" in message
    text = bank_.read("decisionLog.md")[0]
    refused(lambda: writes.write("decisionLog.md", text.replace("Accepted", "Rejected")), project)
    writes.write("decisionLog.md", text.replace("Accepted", "Superseded by B"))
    assert parse_decisions(bank_.read("decisionLog.md")[0])[0].status == "Superseded by B"


def test_special_files_and_oversized_content_are_refused(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    os.mkfifo(project / "memory-bank" / "pipe.md")
    refused(lambda: bank_.read("pipe.md"), project, error=BadRequest)  # and no hang
    refused(lambda: writes.write("big.md", "x" * 600_000), project, error=TooLarge)


def test_an_alias_of_the_decision_log_is_still_append_only(project: Path, changes) -> None:
    bank_, writes = Bank(project), changes(project)
    bank_.init()
    writes.update("decisionLog.md", "## Decision: A\n- **Status**: Accepted\n")
    (project / "memory-bank" / "log.md").symlink_to("decisionLog.md")
    refused(lambda: writes.write("log.md", "# Decision Log\n"), project)
    writes.update("log.md", "## Decision: B\n")
    decisions = parse_decisions(bank_.read("decisionLog.md")[0])
    assert [d.title for d in decisions] == ["A", "B"]


@pytest.fixture(scope="module")
def hostile_bank(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "outside").mkdir()
    directory = bank_dir_for(root / "p")
    (directory / "archive").mkdir(parents=True)
    (directory / "escape.md").symlink_to(root / "outside" / "x.md")
    (directory / "loop.md").symlink_to("loop.md")
    (directory / "archive" / "up.md").symlink_to("../../outside.md")
    return directory, real_bank_dir(directory)


PARTS = st.sampled_from(
    ["..", ".", "", "archive", "escape.md", "loop.md", "up.md", "a.md", "md", ".md", "~", "\\"]
)
NAMES = st.one_of(st.text(max_size=30), st.lists(PARTS, max_size=5).map("/".join))


@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_resolve_never_leaves_the_bank(hostile_bank: tuple[Path, Path], name: str) -> None:
    directory, real = hostile_bank
    try:
        path = resolve(directory, name)
    except Forbidden:
        return
    assert path.is_relative_to(real) and path != real and path.suffix == ".md"
