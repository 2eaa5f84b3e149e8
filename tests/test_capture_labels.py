"""The labelled capture set (issue 19) and the matcher bench/capture_quality.py scores with: the
label files follow their schema, each item's rule recognises its fact in other words and not in
unrelated or noisy text, and the junk patterns catch the noise seen in real sessions."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.capture_labels import (
    CATEGORIES,
    LABELS,
    Item,
    LabelError,
    junk_kind,
    load_all,
    load_junk,
    load_queries,
    load_session,
    normalize,
    parse_rules,
    payload_units,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"
SESSIONS = load_all()
ITEMS = {item.id: item for s in SESSIONS for item in s.items}
JUNK = load_junk()


# ------------------------------------------------------------------ the label files


def test_every_claude_sample_session_is_labelled() -> None:
    labelled = {s.sample for s in SESSIONS}
    assert len(labelled) == len(SESSIONS) == 5
    if SAMPLES.is_dir():
        on_disk = {f"claude/{p.name}" for p in (SAMPLES / "claude").glob("*.jsonl")}
        assert labelled == on_disk
        sources = (SAMPLES / "SOURCES.md").read_text()
        assert all(sample in sources for sample in labelled)


def test_each_session_has_core_items_and_valid_fields() -> None:
    for session in SESSIONS:
        assert session.sample == f"claude/{session.session}.jsonl"
        assert any(item.weight == "core" for item in session.items), session.session
        for item in session.items:
            assert item.category in CATEGORIES
            assert len(item.statement) <= 500  # an entry's maximum content length (SPEC §2)
            assert item.rules and all(rule.all for rule in item.rules)


def test_the_three_long_sessions_carry_most_items() -> None:
    counts = {s.project: len(s.items) for s in SESSIONS}
    for project in ("JSSoundRecorder", "coderabbit-review-helper", "deep-manifest"):
        assert counts[project] >= 10


def test_each_statement_satisfies_its_own_rule_and_no_other_projects() -> None:
    for session in SESSIONS:
        own = {item.id for item in session.items}
        for item in session.items:
            assert item.matches(item.statement), item.id
            strangers = [
                o.id for o in ITEMS.values() if o.id not in own and o.matches(item.statement)
            ]
            assert strangers == [], (item.id, strangers)


def test_no_statement_is_junk() -> None:
    for item in ITEMS.values():
        assert junk_kind(item.statement, JUNK, payload=True) is None, item.id


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('session = "x"\nsample = "claude/x.jsonl"\nproject = "p"\n', "missing 'item'"),
        (
            'session = "x"\nsample = "s"\nproject = "p"\n[[item]]\nid = "a"\ncategory = "wish"\n'
            'weight = "core"\nstatement = "s"\nevidence = "e"\nrule = [{ all = [["t"]] }]\n',
            "unknown category",
        ),
        (
            'session = "x"\nsample = "s"\nproject = "p"\n[[item]]\nid = "a"\ncategory = "spec"\n'
            'weight = "core"\nstatement = "s"\nevidence = "e"\nrule = [{ all = [] }]\n',
            "non-empty list",
        ),
        (
            'session = "x"\nsample = "s"\nproject = "p"\n[[item]]\nid = "a"\ncategory = "spec"\n'
            'weight = "core"\nstatement = "s"\nevidence = "e"\nrule = [{ all = [["a*b"]] }]\n',
            "may only end",
        ),
        (
            'session = "y"\nsample = "s"\nproject = "p"\n[[item]]\nid = "a"\ncategory = "spec"\n'
            'weight = "core"\nstatement = "s"\nevidence = "e"\nrule = [{ all = [["t"]] }]\n',
            "file name and session id differ",
        ),
    ],
)
def test_a_malformed_label_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(LabelError, match=problem):
        load_session(path)


def test_the_label_folder_documents_its_format() -> None:
    readme = (LABELS / "README.md").read_text()
    assert "## Matching rules" in readme and "junk.toml" in readme


# ------------------------------------------------------------------ the matcher


@pytest.mark.parametrize(
    ("item", "paraphrase"),
    [
        ("rec-pnpm", "The user prefers pnpm to npm for this repo."),
        ("rec-pnpm", "Package manager: use pnpm (npm install was rejected)."),
        (
            "crh-keep-filename",
            "Don't rename extract-coderabbit-feedback.py; the entry point "
            "references the file as it is.",
        ),
        (
            "crh-reinstall",
            "uv tool install reuses a cached build: run `uv tool upgrade "
            "--reinstall coderabbit-review-extractor` after changing the code.",
        ),
        ("dm-commit-per-task", "Commit each finished task separately before moving to the next."),
        ("dm-corrupted", "Corrupted nested archives are marked !CORRUPTED in the manifest."),
        ("dm-venv", "pytest is not on PATH: activate .venv first."),
        ("tok-ruby-css-chrome", "display: ruby-base is not supported in Chrome."),
        (
            "ccl-ty-pytest-skip",
            "ty flags pytest.skip() as not callable, a false positive; "
            "silence it with # type: ignore[misc].",
        ),
    ],
)
def test_an_item_matches_a_paraphrase_holding_its_key_terms(item: str, paraphrase: str) -> None:
    assert ITEMS[item].matches(paraphrase)


@pytest.mark.parametrize(
    ("item", "unrelated"),
    [
        ("rec-pnpm", "Ran pnpm install: 11 packages added."),  # names the tool, not the choice
        ("dm-venv", "`(source .venv/bin/activate && pytest -x)` failed: AssertionError"),
        ("dm-branch-coverage", "All 40 tests pass with 100% branch coverage."),
        ("dm-tar-support", "Target the nested zip handling next."),  # 'tar' is a whole word
        (
            "crh-auto-detect-pr",
            "`cd /tmp && coderabbit-extract` failed: No PR found for the current branch.",
        ),
        ("crh-keep-filename", "Rename the main script to coderabbit_review_extractor.py."),
        ("rec-audioworklet", "The dev server is running at http://localhost:5173."),
        ("tok-ruby-html", "File has not been read yet. Read it first before writing to it."),
    ],
)
def test_an_item_does_not_match_unrelated_or_incidental_text(item: str, unrelated: str) -> None:
    assert not ITEMS[item].matches(unrelated)


def test_normalization_folds_case_separators_and_html_entities() -> None:
    assert normalize("Use  --cov-branch &amp;&amp; KEEP_IT") == "use cov branch && keep it"
    assert ITEMS["dm-branch-coverage"].matches("Run `pytest --cov=deep_manifest --cov-branch`.")
    assert ITEMS["crh-force-include"].matches("[tool.hatch.build.targets.wheel.force_include]")


def test_a_trailing_star_is_a_prefix_and_none_excludes() -> None:
    rule = 'rule = [{ all = [["corrupt*"], ["archive"]], none = ["test*"] }]'
    item = Item(
        "x",
        "decision",
        "core",
        "s",
        parse_rules(tomllib.loads(rule)["rule"]),
    )
    assert item.matches("A corrupted archive is reported.")
    assert not item.matches("A corrupt archived file")  # 'archive' is a whole word
    assert not item.matches("The corrupted archive test passes.")


def test_payload_items_are_matched_one_by_one() -> None:
    payload = (
        "<project_memory>\n<relevant>\n"
        '<entry id="a1" category="pattern">pnpm dev serves the app</entry>\n'
        '<entry id="b2" category="error">npm audit failed</entry>\n'
        "</relevant>\n</project_memory>"
    )
    units = payload_units(payload)
    assert units == ["pnpm dev serves the app", "npm audit failed"]
    assert ITEMS["rec-pnpm"].matches(" ".join(units))  # the two lines together would match…
    assert not any(ITEMS["rec-pnpm"].matches(u) for u in units)  # …but neither item does
    assert payload_units("line one\n\nline two") == ["line one", "line two"]


# ------------------------------------------------------------------ junk


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        # Lines as they appear in the sample transcripts.
        (
            "<tool_use_error>File has not been read yet. Read it first before writing to it."
            "</tool_use_error>",
            "harness.read_before_edit",
        ),
        (
            "Edit on x/CLAUDE.md failed: <tool_use_error>String to replace not found in file.",
            "harness.replace_not_found",
        ),
        (
            "<tool_use_error>Error: No such tool available: AskUserQuestion</tool_use_error>",
            "harness.no_such_tool",
        ),
        (
            "`npm install` failed: The user doesn't want to proceed with this tool use. The tool "
            "use was rejected",
            "declined.tool_use",
        ),
        ("[Request interrupted by user for tool use]", "interrupted.request"),
        ("The issue is likely that Next.js treats /tokenizer/ as a route.", "hedge.guess"),
        ("All tests are now passing.", "boilerplate.tests_pass"),
        ("It looks like the old code is still being used.", "hedge.guess"),
        ("Here's what I've added:", "boilerplate.lead_in"),
        ("Edited /w/renderer.py (1 edit)", "edit.count"),
        ("Traceback (most recent call last):", "tool_output.bare_traceback"),
        ("Found 1 error.", "tool_output.found_n"),
        ("Warmup", "subagent.warmup"),
        (
            "Shell dce0af is not running, so cannot be killed (status: killed)",
            "harness.shell_not_running",
        ),
    ],
)
def test_junk_patterns_catch_the_noise_of_real_sessions(line: str, kind: str) -> None:
    assert junk_kind(line, JUNK) == kind


def test_payload_scoped_patterns_count_only_in_the_payload() -> None:
    echo = "Completed: Update recorder.js to use AudioWorklet instead of ScriptProcessor"
    assert junk_kind(echo, JUNK) is None
    assert junk_kind(echo, JUNK, payload=True) == "payload.todo_echo"


def test_useful_findings_are_not_junk() -> None:
    useful = [
        "`uv tool install .` failed: ValueError: Unable to determine which files to ship",
        "Chrome does not support display: ruby-base; use <ruby>/<rt> elements.",
        "We decided to keep the file name and point the entry point at it.",
    ]
    assert [junk_kind(u, JUNK, payload=True) for u in useful] == [None, None, None]


def test_the_labelled_queries_name_labelled_items() -> None:
    """bench/capture_queries.py measures inject's relevance floor on these."""
    queries = load_queries(sessions=SESSIONS)
    assert len(queries) >= 20
    assert {q.project for q in queries} == {s.project for s in SESSIONS}
    assert sum(not q.want for q in queries) >= 2  # questions nothing in memory answers
