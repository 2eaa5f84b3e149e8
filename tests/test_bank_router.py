"""The rule path of ``bank_process`` (SPEC §10, seed 002 §2.3): splitting, routing, rendering and
the markdown safety of every item (``memoryd.core.bank.router``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.bank import model as bank
from memoryd.core.bank.router import (
    MAX_ITEM_CHARS,
    MAX_PIECE_CHARS,
    ProcessedItem,
    route,
    validate_item,
)
from memoryd.core.bank.rules import (
    BANK_FILES,
    DEFAULT_RULES,
    FALLBACK_RULE,
    OPERATIONS,
    RoutingRule,
)

NOW = datetime(2025, 4, 10, 14, 32, 5, tzinfo=UTC)
STAMP = "- 2025-04-10 14:32 UTC:"
HEADING_LINE = re.compile(r"^ {0,3}#", re.MULTILINE)

# (text, rule id, target, operation, section)
AS, RS = "append_to_section", "replace_section"
ROUTES = [
    ("We decided to use SQLite for the cache.", "decision", "decisionLog.md", "append", None),
    ("Shipped the new parser.", "done", "progress.md", "complete_item", "Completed"),
    ("Next we should add retries.", "next_step", "activeContext.md", AS, "Next Steps"),
    ("The importer fails on empty files.", "known_issue", "progress.md", AS, "Known Issues"),
    ("Currently working on the bank router.", "focus", "activeContext.md", RS, "Current Focus"),
    (
        "The server module owns the socket loop.",
        "architecture",
        "systemPatterns.md",
        AS,
        "Architecture Overview",
    ),
    (
        "We use the repository pattern for storage.",
        "pattern",
        "systemPatterns.md",
        AS,
        "Design Patterns in Use",
    ),
    ("Upgraded msgspec to version 0.18.", "tech", "techContext.md", AS, "Technology Stack"),
    ("Renamed the config loader.", "recent_change", "activeContext.md", AS, "Recent Changes"),
]


def only(text: str, now: datetime = NOW) -> ProcessedItem:
    items = route(text, now)
    assert len(items) == 1, items
    return items[0]


@pytest.mark.parametrize(("text", "rule", "target", "op", "section"), ROUTES)
def test_each_rule_routes_to_its_file_section_and_operation(
    text: str, rule: str, target: str, op: str, section: str | None
) -> None:
    item = only(text)
    assert (item.target_file, item.operation_type, item.metadata.get("section")) == (
        target,
        op,
        section,
    )
    assert item.metadata["rule"] == rule
    assert item.metadata["timestamp"] == "2025-04-10T14:32:05Z"
    assert validate_item(item) is None


def test_the_table_covers_every_rule_and_operation() -> None:
    assert {r[1] for r in ROUTES} == {r.id for r in DEFAULT_RULES} | {FALLBACK_RULE.id}
    assert {r[3] for r in ROUTES} == set(OPERATIONS)


def test_bank_files_match_the_bank_model() -> None:
    assert BANK_FILES == bank.FILES


def test_decision_is_a_dated_block_with_context_from_the_paragraph() -> None:
    text = (
        "Login was slow for big tenants. We decided to cache tokens in memory. It needs no server."
    )
    item = only(text)
    assert item.content == (
        "## Decision: We decided to cache tokens in memory\n"
        "- **Date**: 2025-04-10\n"
        "- **Status**: Accepted\n"
        "- **Context**: Login was slow for big tenants.\n"
        "- **Decision**: We decided to cache tokens in memory. It needs no server."
    )
    assert item.metadata["title"] == "We decided to cache tokens in memory"


def test_completed_item_is_checked_and_dated() -> None:
    item = only("Shipped the new parser.")
    assert item.content == "- [x] Shipped the new parser — 2025-04-10"
    assert item.metadata["item"] == "Shipped the new parser"
    assert item.metadata["date"] == "2025-04-10"


def test_recent_change_carries_a_utc_timestamp() -> None:
    paris = timezone(timedelta(hours=2))
    item = only("Renamed the config loader.", datetime(2025, 4, 10, 16, 32, tzinfo=paris))
    assert item.content == "- 2025-04-10 14:32 UTC: Renamed the config loader."
    naive = only("Renamed the config loader.", datetime(2025, 4, 10, 14, 32))
    assert naive.content == item.content


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("- [x] Write the docs", "done"),
        ("- [ ] Write the docs", "next_step"),
        ("* [X] Decided nothing yet", "done"),  # the box beats the keywords
        ("The migration is not done yet.", "recent_change"),
        ("The migration hasn't been finished.", "recent_change"),
        ("This still needs to be done.", "next_step"),
        ("Fixed the crash in the tail reader.", "done"),  # done precedes bug
        ("TODO: document the socket path.", "next_step"),
        ("Decision: keep APScheduler 3.", "decision"),
    ],
)
def test_boxes_negations_and_precedence(text: str, rule: str) -> None:
    assert only(text).metadata["rule"] == rule


def test_free_text_is_split_into_blocks_bullets_and_topics() -> None:
    text = (
        "Refactored the loader. Next we should add tests for it.\n"
        "\n"
        "- Shipped the search index\n"
        "- The watcher fails on symlinks.\n"
        "  It only happens on macOS.\n"
        "1. Upgraded tantivy to the latest version\n"
        "\n"
        "Meetings went long today.\n"
        "It was a slow day overall.\n"
    )
    got = [(i.metadata["rule"], i.content) for i in route(text, NOW)]
    assert got == [
        ("recent_change", "- 2025-04-10 14:32 UTC: Refactored the loader."),
        ("next_step", "- Next we should add tests for it."),
        ("done", "- [x] Shipped the search index — 2025-04-10"),
        ("known_issue", "- The watcher fails on symlinks. It only happens on macOS."),
        ("tech", "- Upgraded tantivy to the latest version"),
        ("recent_change", f"{STAMP} Meetings went long today. It was a slow day overall."),
    ]


@pytest.mark.parametrize("text", ["", "   \n\n\t", "---\n***\n```", "#\n##\n- \n- [ ]"])
def test_blank_or_marker_only_input_gives_no_items(text: str) -> None:
    assert route(text, NOW) == []


def heading_lines(item: ProcessedItem) -> list[str]:
    return HEADING_LINE.findall(item.content)


HOSTILE = (
    "Refactored the loader\n"
    "# Top heading\n"
    "## Decision: injected\n"
    "   ### Indented heading with done\n"
    "Text with ## Decision: inline and\n# a heading on the next line\n"
    "- # heading in a bullet\n"
    "Setext attempt\n===\n\n"
    "```\nfenced code\n```\n"
    "> quoted\n"
    "<script>alert(1)</script>\n"
    "line\u2028# after a unicode line separator\r\n## after CRLF\x00\x1b[31m"
)


def test_hostile_markdown_cannot_open_a_section() -> None:
    items = route(HOSTILE, NOW)
    assert items
    for item in items:
        assert validate_item(item) is None, item
        if item.target_file == "decisionLog.md":
            # only our own heading, on the first line
            assert item.content.startswith("## Decision: ")
            assert heading_lines(item) == ["#"]
        else:
            assert heading_lines(item) == [], item
            assert "\n" not in item.content
        assert not re.search(r"^ {0,3}(```|~~~|=+\s*$|>|<)", item.content, re.MULTILINE)
    decisions = [i for i in items if i.target_file == "decisionLog.md"]
    # a "Decision:" mid-line is a decision like any other; it gets our heading, not its own
    assert [i.metadata["title"] for i in decisions] == [
        "injected",
        "Text with ## Decision: inline and",
    ]
    assert any("Top heading" in i.content for i in items)  # demoted, not lost


def test_a_heading_inside_a_paragraph_is_its_own_demoted_block() -> None:
    items = route("We shipped it.\n## Known Issues\nnothing here", NOW)
    assert [(i.metadata["rule"], i.content) for i in items] == [
        ("done", "- [x] We shipped it — 2025-04-10"),
        ("known_issue", "- Known Issues"),
        ("recent_change", "- 2025-04-10 14:32 UTC: nothing here"),
    ]


def test_huge_input_is_cut_into_bounded_parts_without_loss() -> None:
    words = [f"w{n}" for n in range(60_000)]  # ~400 KB, one sentence
    items = route(" ".join(words), NOW)
    assert len(items) > 1
    assert all(len(i.content) <= MAX_ITEM_CHARS and validate_item(i) is None for i in items)
    prefix = "- 2025-04-10 14:32 UTC: "
    assert " ".join(i.content.removeprefix(prefix) for i in items) == " ".join(words)
    assert items[0].metadata["part"] == f"1/{len(items)}"


def test_a_giant_word_is_hard_split() -> None:
    word = "x" * (MAX_PIECE_CHARS * 3 + 7)
    items = route(word, NOW)
    assert [i.metadata["part"] for i in items] == ["1/4", "2/4", "3/4", "4/4"]
    assert "".join(i.content.removeprefix(f"{STAMP} ") for i in items) == word


def test_a_long_decision_context_continues_in_a_second_block() -> None:
    context = " ".join(["slow"] * 300)  # 1499 chars: two pieces
    items = route(f"{context}. We decided to cache.", NOW)
    assert [i.metadata["title"] for i in items] == [
        "We decided to cache (part 1/2)",
        "We decided to cache (part 2/2)",
    ]
    assert items[1].content.endswith("- **Decision**: (continued)")
    assert all(validate_item(i) is None for i in items)


def test_many_paragraphs_are_routed_in_order() -> None:
    text = "\n\n".join(f"Item {n} is a bug." for n in range(5_000))
    items = route(text, NOW)
    assert len(items) == 5_000
    assert items[4_999].content == "- Item 4999 is a bug."


def test_route_is_deterministic() -> None:
    text = HOSTILE + "\n\n" + "\n\n".join(r[0] for r in ROUTES)
    assert route(text, NOW) == route(text, NOW)


def test_rules_are_data() -> None:
    raw = {
        "id": "meeting",
        "pattern": r"\bmeeting\b",
        "target_file": "productContext.md",
        "operation_type": "append_to_section",
        "render": "bullet",
        "section": "Notes",
    }
    rule = msgspec.convert(raw, RoutingRule)
    item = route("The meeting was useful.", NOW, (rule,))[0]
    assert (item.target_file, item.metadata["section"]) == ("productContext.md", "Notes")
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({**raw, "target_file": "notes.md"}, RoutingRule)


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (ProcessedItem("progress.md", "append_to_section", "- ok", {}), "metadata.section"),
        (ProcessedItem("progress.md", "append_to_section", "# new", {"section": "A"}), "heading"),
        (ProcessedItem("progress.md", "append", "ok\n## Sneaky", {}), "heading"),
        (ProcessedItem("progress.md", "append", "a\n===", {}), "heading"),
        (ProcessedItem("progress.md", "append", "```\nx", {}), "code block"),
        (ProcessedItem("techContext.md", "complete_item", "- [x] a", {"section": "C"}), "progress"),
        (ProcessedItem("decisionLog.md", "append_to_section", "x", {"section": "A"}), "Decision"),
        (ProcessedItem("decisionLog.md", "append", "## Decision: a\n## Decision: b", {}), "head"),
        (ProcessedItem("progress.md", "append", "a\u2028b", {}), "separators"),
        (ProcessedItem("progress.md", "append", "a", {"section": "x\ny"}), "separators"),
        (ProcessedItem("progress.md", "append", "   ", {}), "empty"),
    ],
)
def test_validate_item_refuses_what_could_break_a_bank_file(
    item: ProcessedItem, reason: str
) -> None:
    why = validate_item(item)
    assert why is not None and reason in why


MARKDOWNISH = st.lists(
    st.sampled_from(
        [
            "# ",
            "## Decision: ",
            "### ",
            "\n",
            "\n\n",
            "\r\n",
            "\u2028",
            "- ",
            "- [x] ",
            "- [ ] ",
            "1. ",
            "```",
            "~~~",
            "---",
            "===",
            "> ",
            "<",
            "|",
            "\\",
            "*",
            "_",
            " ",
            ". ",
            "! ",
            "done",
            "bug",
            "next",
            "decided",
            "module",
            "pattern",
            "version",
            "currently working on",
            "not done",
            "word",
            "x" * 1200,
            "\x00",
            "\t",
            "é",
            "😀",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=3000), MARKDOWNISH))
def test_route_never_raises_and_every_item_is_valid(text: str) -> None:
    items = route(text, NOW)
    for item in items:
        assert item.target_file in BANK_FILES
        assert item.operation_type in OPERATIONS
        assert validate_item(item) is None, item
    # every item also passes the wire schema (lengths, metadata keys): the LLM path's check
    encoded = msgspec.json.encode(items)
    assert msgspec.json.decode(encoded, type=list[ProcessedItem]) == items
    if not any(c.isalnum() for c in text):
        assert items == []
