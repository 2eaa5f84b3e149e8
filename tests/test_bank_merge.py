"""The bank update merge (``merge_update``) is linear in sections and gives the text the
straightforward merge gives: each section applied in turn to the whole re-read text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.bank import model
from memoryd.core.bank.model import (
    ACTIVE_CONTEXT,
    DECISION_LOG,
    PROGRESS,
    Section,
    append_block,
    append_to_section,
    find_section,
    is_decision,
    normalise_heading,
    replace_section,
)
from memoryd.core.bank.update import LOG_SECTIONS, _history_items, _units, merge_update
from memoryd.core.errors import BadRequest


def reference_sections(text: str) -> list[Section]:
    """``sections`` as first written: each heading's end looked up among all later ones."""
    found, _fence = model._headings(text)
    result = []
    for index, (start, level, title, body_start) in enumerate(found):
        later = found[index + 1 :]
        own_end = later[0][0] if later else len(text)
        end = next((h[0] for h in later if h[1] <= level), len(text))
        result.append(Section(title, level, start, body_start, own_end, end))
    return result


def reference_merge(name: str, old: str, content: str) -> str:
    """The merge as first written: every section edits the whole text, which is read again."""
    if name == DECISION_LOG:
        entries = [s for s in reference_sections(content) if is_decision(s)]
        if not entries:
            raise BadRequest("no entry")
        rest = content
        for entry in reversed(entries):
            rest = rest[: entry.start] + rest[entry.end :]
        if any(line.strip() and not line.startswith("# ") for line in rest.splitlines()):
            raise BadRequest("not only entries")
        merged = old
        for entry in entries:
            merged = append_block(merged, content[entry.start : entry.end])
        return merged
    merged = old
    for unit in _units(content):
        body = unit.body(content)
        if normalise_heading(unit.heading) in LOG_SECTIONS.get(name, frozenset()) and (
            find_section(merged, unit.heading)
        ):
            for item in _history_items(content, unit):
                merged = append_to_section(merged, unit.heading, item)
        else:
            merged = replace_section(merged, f"{'#' * unit.level} {unit.heading}", body)
    return merged


# Small pieces that meet the merge's corners: few titles (so sections repeat and nest), fences
# open and closed, CRLF and lone CR, placeholders, list items, headings without a newline.
_TITLES = ["Focus", "Recent Changes", "Completed", "Notes", "notes", "Decision: Use X"]
_LINES = st.one_of(
    st.builds(
        lambda n, t, e: "#" * n + " " + t + e,
        st.integers(1, 3),
        st.sampled_from(_TITLES),
        st.sampled_from(["\n", "\r\n", "\r", ""]),
    ),
    st.sampled_from(
        [
            "\n",
            "text\n",
            "- item\n",
            "  more\n",
            "<!-- placeholder -->\n",
            "```\n",
            "~~~\n",
            "- [ ] open\n",
            "para\r\n",
            "# Title\n",
            "\n\n",
            "  <!-- c -->\n",
            "  ```\n",
        ]
    ),
)
_TEXTS = st.lists(_LINES, max_size=14).map("".join)


def _same(name: str, old: str, content: str) -> None:
    try:
        expected: str | Exception = reference_merge(name, old, content)
    except BadRequest as exc:
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(BadRequest):
            merge_update(name, old, content)
    else:
        assert merge_update(name, old, content) == expected


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from([ACTIVE_CONTEXT, PROGRESS, "techContext.md", DECISION_LOG]),
    old=_TEXTS,
    content=_TEXTS,
)
def test_the_merge_gives_what_the_straightforward_merge_gives(
    name: str, old: str, content: str
) -> None:
    assert model.sections(content) == reference_sections(content)
    _same(name, old, content)


def test_two_thousand_sections_merge_as_each_one_would() -> None:
    old = "# Tech Context\n\n## Stack\n\n- python\n\n## Section 7\n\nold seven\n"
    content = "".join(f"## Section {i}\n\nThe part {i} of the system.\n\n" for i in range(2000))
    merged = merge_update("techContext.md", old, content)
    added = "".join(
        f"\n## Section {i}\n\nThe part {i} of the system.\n" for i in range(2000) if i != 7
    )
    assert merged == old.replace("old seven", "The part 7 of the system.") + added
    # The same sections again replace each one in place: nothing moves, nothing doubles.
    assert merge_update("techContext.md", merged, content) == merged
    small = "".join(f"## Section {i}\n\nagain {i}\n\n" for i in range(0, 2000, 97))
    _same("techContext.md", merged, small)
    history = "## Recent Changes\n\n" + "".join(f"- change {i}\n" for i in range(300))
    _same(ACTIVE_CONTEXT, "# Active Context\n\n## Recent Changes\n\n<!-- none -->\n", history)


@pytest.mark.parametrize(
    ("old", "content"),
    [
        # The last section of an update leaves a code fence open: the sections after the one it
        # replaces are then code, not headings, as when the whole text is read again.
        ("# T\n## A\nold\n## B\nb\n## C\nc\n", "## A\n```\ncode\n## C\nnew c\n"),
        ("# T\n## A\n- x\n## Next\nn\n", "## A\n- a\n  ```\n- b\n"),
        ("# T\n## A\n```\nopen\n", "## A\nclosed\n## B\nb\n"),
        # Each item appended drops the placeholder lines of those before it, not its own.
        ("# T\n## A\n<!-- p -->\n## N\n", "## A\n- a\n  <!-- c -->\n- b\n  <!-- d -->\n"),
        ("# T\n## A", "## A\nbody\n## B\nb\n"),
        ("# T\r\n## A\r\n<!-- x -->\r\n", "## A\n\ntext\n"),
    ],
)
def test_fences_and_line_ends_merge_as_the_straightforward_merge(old: str, content: str) -> None:
    _same("techContext.md", old, content)
    _same(PROGRESS, old.replace("## A", "## Completed"), content.replace("## A", "## Completed"))


# History items holding code fences (issue 10): appended in one edit, the same text as one call
# of ``append_to_section`` per item on the re-read string. An item may leave a fence open, which
# makes the next call's section reach over the headings the fence swallows.
_ITEM_LINES = st.sampled_from(
    ["text", "  ```", "```", "  ~~~", "   ````", "  <!-- c -->", "", "  ## Not a heading", "- b"]
)
_ITEMS = st.lists(
    st.lists(_ITEM_LINES, max_size=4).map(lambda lines: "\n".join(["- item", *lines])),
    min_size=1,
    max_size=8,
)


def _sequential(text: str, heading: str, items: list[str]) -> str:
    for item in items:
        text = append_to_section(text, heading, item)
    return text


@settings(max_examples=400, deadline=None)
@given(old=_TEXTS, heading=st.sampled_from(["Completed", "Notes"]), items=_ITEMS)
def test_items_with_fences_append_as_one_call_each(
    old: str, heading: str, items: list[str]
) -> None:
    outline = model.Outline(old)
    outline.append_items(heading, items)
    assert outline.text() == _sequential(old, heading, items)


def test_many_history_items_with_fences_merge_as_one_call_each() -> None:
    """The shape that stayed quadratic (each item re-read the whole section): hundreds of
    items with fenced code, balanced and left open, into a section followed by others."""
    old = (
        "# Progress\n\n## In Progress\n\n- [ ] a\n\n## Completed\n\n<!-- none -->\n\n"
        "## Upcoming\n\n```\n## Not a heading\n```\n\n## Notes\n\n- n\n"
    )
    balanced = [f"- done {i}\n  ```\n  code {i}\n  ```" for i in range(300)]
    assert _merged(old, balanced) == _sequential(old, "Completed", balanced)
    unbalanced = [f"- done {i}\n  ```\n  code {i}" for i in range(300)]
    assert _merged(old, unbalanced) == _sequential(old, "Completed", unbalanced)
    content = "## Completed\n\n" + "\n".join(balanced) + "\n"
    _same(PROGRESS, old, content)


def _merged(old: str, items: list[str]) -> str:
    outline = model.Outline(old)
    outline.append_items("Completed", items)
    return outline.text()
