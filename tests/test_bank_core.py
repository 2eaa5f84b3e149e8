"""The pure memory bank model (SPEC §10; seed 000 §3, §7, §11): file order, templates,
validation, section editing, the append-only decision log, progress checkboxes, the update merge
and the optimiser."""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.bank import model as bank
from memoryd.core.bank.model import (
    append_to_section,
    bank_tokens,
    check_decision_log,
    complete_progress_item,
    completed_items,
    find_section,
    parse_decisions,
    replace_section,
    sections,
    validate,
)
from memoryd.core.bank.optimise import FLOOR_TOKENS, MAX_TOKENS, WARN_TOKENS, optimise
from memoryd.core.bank.templates import TEMPLATES, CodebaseFacts, render_templates
from memoryd.core.bank.update import merge_update
from memoryd.core.errors import Ambiguous, BadRequest, EntryNotFound

BRIEF = "A REST API for managing todo items"
TODAY = date(2025, 6, 30)


def decision(title: str, status: str = "Accepted", when: str = "2025-01-02") -> str:
    return (
        f"## Decision: {title}\n- **Date**: {when}\n- **Status**: {status}\n"
        f"- **Context**: why {title}\n- **Selected**: {title}\n- **Rationale**: it fits\n\n---\n"
    )


def log(*titles: str) -> str:
    return "# Decision Log\n\n" + "\n".join(decision(t) for t in titles)


PROGRESS = """# Progress

## Completed

- [x] Set up CI — 2025-01-01

## In Progress

- [ ] Feature X — half done
  - blocked on review
- [ ] Feature Y

## Upcoming

- [ ] Feature Z
"""


# -- files and templates --------------------------------------------------------------------


def test_the_seven_files_and_their_orders() -> None:
    assert bank.FILES == (
        "projectBrief.md",
        "productContext.md",
        "systemPatterns.md",
        "techContext.md",
        "activeContext.md",
        "progress.md",
        "decisionLog.md",
    )
    assert bank.READ_ORDER == bank.FILES
    assert bank.FILES[::-1] == bank.UPDATE_ORDER
    assert set(bank.REQUIRED) == {"projectBrief.md", "activeContext.md", "progress.md"}
    assert set(bank.REQUIRED) | set(bank.RECOMMENDED) == set(bank.FILES)


def test_templates_have_headers_placeholders_and_the_seed_structure() -> None:
    files = render_templates(None, CodebaseFacts())
    assert tuple(files) == bank.FILES
    assert validate(files).valid
    for name, text in files.items():
        assert text.startswith("# "), name
        assert "<!--" in text, name  # placeholder content, as comments
        assert not re.search(r"^\s*-?\s*\[[A-Z]", text, re.M), name  # no seed-style [Fill me]
    headings = {s.heading for s in sections(files["activeContext.md"])}
    assert {"Current Focus", "Recent Changes", "Next Steps", "Blockers"} <= headings
    headings = {s.heading for s in sections(files["progress.md"])}
    assert {"Completed", "In Progress", "Known Issues", "Upcoming", "Milestones"} <= headings
    assert parse_decisions(files["decisionLog.md"]) == []  # the format hint is not an entry


def test_a_brief_fills_the_project_brief_and_seeds_the_others() -> None:
    files = render_templates(BRIEF, CodebaseFacts(name="todo"))
    mission = find_section(files["projectBrief.md"], "Mission Statement")
    assert mission and BRIEF in mission.body(files["projectBrief.md"])
    assert "todo" in files["projectBrief.md"]
    for name in ("productContext.md", "activeContext.md"):
        assert BRIEF in files[name], name
    assert files["progress.md"] != TEMPLATES["progress.md"]


def test_a_brief_with_its_own_headings_is_kept_whole() -> None:
    brief = "## Mission Statement\n\nTrack todos.\n\n## Core Requirements\n\n- offline\n"
    text = render_templates(brief, CodebaseFacts())["projectBrief.md"]
    assert text == "# Project Brief\n\n" + brief


def test_detected_facts_fill_tech_context_and_system_patterns() -> None:
    facts = CodebaseFacts(
        manifests=("pyproject.toml",),
        languages=("Python >=3.11",),
        dependencies=("fastapi", "msgspec"),
        commands=(("Install", "pip install -e ."), ("Test", "python -m pytest")),
        layout=("src/", "tests/", "README.md"),
    )
    files = render_templates(None, facts)
    tech = files["techContext.md"]
    assert "- Python >=3.11" in tech and "- fastapi" in tech and "- msgspec" in tech
    assert "1. `pip install -e .`" in tech and "**Test**: `python -m pytest`" in tech
    frameworks = find_section(tech, "Frameworks")
    assert frameworks and "fastapi" in frameworks.body(tech)
    patterns = files["systemPatterns.md"]
    assert "src/\ntests/\nREADME.md" in patterns and "pyproject.toml" in patterns


# -- validation ---------------------------------------------------------------------------


def test_missing_optional_files_are_noted_but_not_blocking() -> None:
    full = render_templates(None, CodebaseFacts())
    report = validate({name: full[name] for name in bank.REQUIRED})
    assert report.valid and not report.empty and report.missing_required == []
    assert report.missing_recommended == list(bank.RECOMMENDED)


def test_an_empty_bank_asks_for_initialisation() -> None:
    report = validate(dict.fromkeys(bank.FILES))
    assert report.empty and not report.valid
    assert report.missing_required == list(bank.REQUIRED)
    assert validate({}).empty


def test_empty_files_and_files_without_header_are_problems() -> None:
    files = render_templates(None, CodebaseFacts())
    files["progress.md"] = "  \n"
    files["techContext.md"] = "just text, no header"
    report = validate(files)
    assert not report.valid
    assert [(p.file, p.kind) for p in report.problems] == [
        ("techContext.md", "no_header"),
        ("progress.md", "empty"),
    ]


def test_bank_tokens_is_ceil_of_chars_over_four() -> None:
    assert bank_tokens({"a.md": "x" * 9, "b.md": None}) == 3
    assert bank_tokens({}) == 0


# -- sections -----------------------------------------------------------------------------


ACTIVE = """# Active Context

## Current Focus

Old focus.

## Recent Changes

- 2025-06-01: first

```sh
# a shell comment, not a heading
```

## Next Steps

1. ship
"""


def test_headings_inside_fenced_code_are_not_sections() -> None:
    assert [s.heading for s in sections(ACTIVE)] == [
        "Active Context",
        "Current Focus",
        "Recent Changes",
        "Next Steps",
    ]


def test_replacing_a_section_replaces_only_that_section() -> None:
    text = replace_section(ACTIVE, "Current Focus", "Wiring the bank into the daemon.")
    focus = find_section(text, "current focus")
    assert focus and focus.body(text).strip() == "Wiring the bank into the daemon."
    assert "Old focus." not in text
    assert text.replace("Wiring the bank into the daemon.", "Old focus.") == ACTIVE


def test_replacing_a_missing_section_adds_it_at_the_end() -> None:
    text = replace_section(ACTIVE, "### Blockers", "- none")
    assert text.endswith("1. ship\n\n### Blockers\n\n- none\n")


def test_append_adds_an_item_and_drops_the_placeholder() -> None:
    template = TEMPLATES["activeContext.md"]
    text = append_to_section(template, "Recent Changes", "2025-06-30: bank core\nwith detail")
    changes = find_section(text, "Recent Changes")
    assert changes and changes.body(text) == "\n- 2025-06-30: bank core\n  with detail\n\n"
    assert text.count("<!--") == template.count("<!--") - 1
    with pytest.raises(BadRequest):
        append_to_section(text, "Recent Changes", "  ")


LINES = st.sampled_from(["text", "- item", "  more", "", "# One", "## Two", "### Three", "```"])


@settings(max_examples=300)
@given(st.lists(LINES, max_size=25), st.sampled_from(["One", "Two", "Three", "Four"]))
def test_editing_a_section_leaves_the_others_alone(lines: list[str], heading: str) -> None:
    text = "\n".join(lines) + "\n"
    target = find_section(text, heading)

    def outline(doc: str, skip: tuple[int, int] | None) -> list[tuple[str, int]]:
        return [
            (s.heading, s.level)
            for s in sections(doc)
            if s.heading != heading and not (skip and skip[0] <= s.start < skip[1])
        ]

    appended = append_to_section(text, heading, "fresh item")
    replaced = replace_section(text, heading, "- fresh body")
    span = (target.start, target.end) if target else None
    for edited, inside in ((appended, None), (replaced, span)):
        found = find_section(edited, heading)
        assert found and "fresh" in found.body(edited)
        assert outline(edited, None) == outline(text, inside)


# -- update merge -------------------------------------------------------------------------


def test_update_replaces_state_sections_and_appends_to_history_sections() -> None:
    update = "## Current Focus\n\nNew focus.\n\n## Recent Changes\n\n- 2025-06-30: second\n"
    text = merge_update("activeContext.md", ACTIVE, update)
    assert "Old focus." not in text and "New focus." in text
    changes = find_section(text, "Recent Changes")
    assert changes and "first" in changes.body(text) and "second" in changes.body(text)
    assert "1. ship" in text


def test_update_with_a_whole_file_replaces_it_and_plain_text_is_refused() -> None:
    whole = "# Active Context\n\n## Current Focus\n\nEverything new.\n"
    assert merge_update("activeContext.md", ACTIVE, whole) == whole
    with pytest.raises(BadRequest):
        merge_update("activeContext.md", ACTIVE, "no heading here")


def test_history_sections_take_items_or_a_paragraph_and_nothing_else() -> None:
    text = merge_update("activeContext.md", ACTIVE, "## Recent Changes\n\nRenamed the module.\n")
    changes = find_section(text, "Recent Changes")
    assert changes and changes.body(text).rstrip().endswith("- Renamed the module.")
    mixed = "## Recent Changes\n\n- one item\n\nand a stray paragraph\n"
    with pytest.raises(BadRequest):
        merge_update("activeContext.md", ACTIVE, mixed)


def test_appending_a_decision_keeps_the_old_entries_before_it() -> None:
    old = log("Use SQLite", "Use msgspec")
    new = merge_update("decisionLog.md", old, decision("Use tantivy"))
    titles = [d.title for d in parse_decisions(new)]
    assert titles == ["Use SQLite", "Use msgspec", "Use tantivy"]
    assert new.startswith(old.rstrip("\n")) and check_decision_log(old, new) is None
    with pytest.raises(BadRequest):
        merge_update("decisionLog.md", old, "## Not a decision\n\ntext\n")
    with pytest.raises(BadRequest):  # the stray section would otherwise be dropped unseen
        merge_update("decisionLog.md", old, decision("C") + "\n## Notes\n\nstray\n")
    wrapped = "# Decision Log\n\n" + decision("C")
    assert [d.title for d in parse_decisions(merge_update("decisionLog.md", old, wrapped))][
        -1
    ] == "C"


# -- decision log -------------------------------------------------------------------------


def test_parse_decisions_reads_title_date_status_and_body() -> None:
    text = log("Use SQLite") + "## Decision: Bare\n\nNo fields at all.\n"
    first, bare = parse_decisions(text)
    assert (first.title, first.date, first.status) == ("Use SQLite", "2025-01-02", "Accepted")
    assert "**Rationale**: it fits" in first.body and not first.body.endswith("---")
    assert (bare.title, bare.date, bare.status, bare.body) == (
        "Bare",
        None,
        "Accepted",
        "No fields at all.",
    )


def test_the_decision_log_is_append_only() -> None:
    old = log("Use SQLite", "Use msgspec")
    assert check_decision_log(None, old) is None
    assert check_decision_log(old, old + "\n" + decision("Use tantivy")) is None
    dropped = log("Use SQLite")
    assert "'Use msgspec' would be removed" in (check_decision_log(old, dropped) or "")
    reordered = log("Use msgspec", "Use SQLite")
    assert check_decision_log(old, reordered)
    inserted = log("Use tantivy", "Use SQLite", "Use msgspec")
    assert check_decision_log(old, inserted)
    altered = old.replace("it fits", "it is fast", 1)
    assert "would be changed" in (check_decision_log(old, altered) or "")


def test_marking_a_decision_superseded_is_the_one_allowed_edit() -> None:
    old = log("Use SQLite", "Use msgspec")
    retired = old.replace("**Status**: Accepted", "**Status**: Superseded by Use tantivy", 1)
    assert check_decision_log(old, retired) is None
    assert check_decision_log(old, old.replace("Accepted", "Deprecated", 1)) is None
    assert check_decision_log(retired, old)  # and it cannot be taken back
    assert check_decision_log(old, old.replace("Accepted", "Maybe", 1))


@settings(max_examples=60)
@given(st.lists(st.text("abcdefgh XYZ", min_size=1, max_size=12).filter(str.strip), max_size=6))
def test_appending_always_passes_and_dropping_always_fails(titles: list[str]) -> None:
    old = log(*titles)
    assert check_decision_log(old, merge_update("decisionLog.md", old, decision("new one"))) is None
    for index in range(len(titles)):
        assert check_decision_log(old, log(*titles[:index], *titles[index + 1 :])) is not None


# -- progress -----------------------------------------------------------------------------


def test_completing_an_item_moves_checks_and_dates_it() -> None:
    text = complete_progress_item(PROGRESS, "Feature X", date(2025, 6, 30))
    done = find_section(text, "Completed")
    assert done and "- [x] Feature X — half done — 2025-06-30\n  - blocked on review" in done.body(
        text
    )
    in_progress = find_section(text, "In Progress")
    assert in_progress and "Feature X" not in in_progress.body(text)
    assert completed_items(text) == ["Set up CI — 2025-01-01", "Feature X — half done — 2025-06-30"]
    text = complete_progress_item(text, "feature z", date(2025, 7, 1))
    assert completed_items(text)[-1] == "Feature Z — 2025-07-01"


def test_completing_an_unknown_or_ambiguous_item_is_refused() -> None:
    with pytest.raises(EntryNotFound):
        complete_progress_item(PROGRESS, "Set up CI", TODAY)  # already done: not open
    with pytest.raises(Ambiguous):
        complete_progress_item(PROGRESS, "Feature", TODAY)


# -- optimiser ----------------------------------------------------------------------------


def big_bank() -> dict[str, str | None]:
    files: dict[str, str | None] = dict(render_templates(BRIEF, CodebaseFacts()))
    progress = TEMPLATES["progress.md"]
    for n in range(400):
        when = date(2024, 1, 1) + timedelta(days=n)
        task = f"[x] Task {n:03}: shipped improvement {n} to the ingestion pipeline — {when}"
        progress = append_to_section(progress, "Completed", task)
    progress = append_to_section(progress, "In Progress", "[ ] Still open")
    files["progress.md"] = progress
    active = TEMPLATES["activeContext.md"]
    for n in range(120):
        when = TODAY - timedelta(days=119 - n)
        change = f"{when}: change {n:03}, reworked the parser of module m{n} and its errors"
        active = append_to_section(active, "Recent Changes", change)
    active = append_to_section(active, "Recent Changes", "2020-01-01: the origin story #keep")
    files["activeContext.md"] = active
    files["decisionLog.md"] = log(*(f"Decision number {n}" for n in range(60)))
    return files


def _item_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("- ")]


def test_the_optimiser_brings_a_big_bank_into_band_and_loses_nothing() -> None:
    files = big_bank()
    assert bank_tokens(files) > 2 * WARN_TOKENS
    plan = optimise(files, TODAY)
    after = {**files, **plan.new_files}
    assert FLOOR_TOKENS <= bank_tokens(after) <= WARN_TOKENS <= MAX_TOKENS
    assert plan.tokens_after == bank_tokens(after)
    assert plan.removed_tokens == plan.tokens_before - plan.tokens_after
    assert "decisionLog.md" not in plan.new_files
    assert set(plan.archived) <= {"archive/progress.md", "archive/activeContext.md"}
    for name in ("progress.md", "activeContext.md"):
        kept = _item_lines(after[name] or "")
        moved = _item_lines(plan.archived.get(f"archive/{name}", ""))
        assert sorted(kept + moved) == sorted(_item_lines(files[name] or "")), name
    assert completed_items(after["progress.md"] or "") == []  # completed work goes first
    assert "- [ ] Still open" in (after["progress.md"] or "")
    assert "#keep" in (after["activeContext.md"] or "")
    fresh = [f"{TODAY - timedelta(days=d)}" for d in range(14)]
    assert all(day in (after["activeContext.md"] or "") for day in fresh)


def test_a_bank_under_the_warning_line_is_left_alone() -> None:
    files = render_templates(BRIEF, CodebaseFacts())
    plan = optimise(files, TODAY)
    assert plan.new_files == {} and plan.archived == {} and plan.removed_tokens == 0
