"""Unit tests of the pure core: entries, fingerprints, plans, the audit hash chain."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memctl.protocol import Source
from memoryd.core import audit_chain, entries
from memoryd.core.errors import BadRequest, TooLarge
from memoryd.core.events import (
    EntryAdded,
    EntryReinforced,
    plan_import,
    plan_pin,
    plan_remember,
    plan_unpin,
)
from memoryd.core.projects import find_root, slug


def _entry(content: str = "Use ruff for linting", **kw):
    defaults = dict(
        entry_id="a" * 32,
        content=content,
        category="pattern",
        status="confirmed",
        now=100.0,
        source=Source(kind="user"),
    )
    return entries.new_entry(**(defaults | kw))


def test_fingerprint_normalizes_case_and_whitespace() -> None:
    assert entries.fingerprint("Use  Ruff\tfor linting ") == entries.fingerprint(
        "use ruff for linting"
    )
    assert entries.fingerprint("use ruff") != entries.fingerprint("use black")
    assert len(entries.fingerprint("x")) == 16


def test_fingerprint_is_stable() -> None:
    # Pinned value: a change of the hash would silently break dedup of stored data.
    assert entries.fingerprint("We never commit directly to main; use PRs") == "ecf41d879b8db8bf"


@given(st.text(max_size=200))
def test_fingerprint_total(text: str) -> None:
    fp = entries.fingerprint(text)
    assert len(fp) == 16 and fp == entries.fingerprint(" " + text + "\n ")


def test_sections_map_to_first_category() -> None:
    assert entries.category_for_section("Constraints") == "warning"
    assert entries.category_for_section("specs") == "spec"
    assert entries.category_for_section("Architecture") == "discovery"
    assert entries.category_for_section("Patterns & Conventions") == "pattern"
    with pytest.raises(BadRequest, match="known sections"):
        entries.category_for_section("Misc")
    assert entries.section_of("error") == "Known Issues"


def test_category_and_section_must_agree() -> None:
    assert entries.resolve_category("spec", "Specs", "x") == "spec"
    with pytest.raises(BadRequest, match="renders under"):
        entries.resolve_category("spec", "Constraints", "x")


@pytest.mark.parametrize(
    "text, category",
    [
        ("Never force-push to main", "warning"),
        ("We decided to use Postgres", "decision"),
        ("I prefer tabs", "preference"),
        ("The build fails when NODE_ENV is unset", "error"),
        ("Tests always live next to the code", "pattern"),
        ("The billing module owns invoices", "architecture"),
        ("The repo has 3 packages", "discovery"),
    ],
)
def test_infer_category(text: str, category: str) -> None:
    assert entries.infer_category(text) == category


def test_clean_content_limits() -> None:
    assert entries.clean_content("  hi\x00\x07 there \n") == "hi there"
    assert entries.clean_content("a" * 500) == "a" * 500
    with pytest.raises(TooLarge, match="501 characters; the limit is 500"):
        entries.clean_content("a" * 501)
    with pytest.raises(BadRequest, match="empty"):
        entries.clean_content(" \t\n")


def test_tags_and_paths_are_normalized() -> None:
    assert entries.clean_tags(["Auth", "auth", " two words ", ""]) == ("auth", "two-words")
    assert entries.clean_paths(["a.py", "a.py", " b/c.py "]) == ("a.py", "b/c.py")
    with pytest.raises(BadRequest):
        entries.clean_paths(["a\x00b"])


def test_plan_remember_adds_or_reinforces() -> None:
    new = _entry()
    assert plan_remember(new, None, 5.0) == EntryAdded(new)
    existing = _entry(importance=0.95)
    reinforced = plan_remember(new, existing, 200.0)
    assert reinforced == EntryReinforced(
        id=existing.id, importance=1.0, access_count=1, updated_at=200.0, last_accessed_at=200.0
    )


def test_plan_import_skips_known_and_repeated() -> None:
    a, b, a2 = (
        _entry("one", entry_id="1" * 32),
        _entry("two", entry_id="2" * 32),
        _entry("ONE", entry_id="3" * 32),
    )
    event = plan_import([a, b, a2], known_fingerprints={b.fingerprint})
    assert [e.id for e in event.entries] == [a.id]


def test_pin_plans_are_idempotent() -> None:
    e = _entry()
    assert plan_pin(e, 1.0).status == "pinned"
    pinned = _entry(status="pinned")
    assert plan_pin(pinned, 1.0) is None
    assert plan_unpin(pinned, 1.0).status == "confirmed"
    assert plan_unpin(e, 1.0) is None


def test_slug_and_root_resolution() -> None:
    from pathlib import PurePosixPath as P

    s = slug(P("/home/u/My Project"))
    assert s.startswith("My_Project-") and len(s.split("-")[-1]) == 8
    assert slug(P("/a/x")) != slug(P("/b/x"))
    markers = {P("/repo"): ".git"}
    has = lambda d, m: markers.get(d) == m  # noqa: E731
    assert find_root(P("/repo/src/pkg"), has) == P("/repo")
    assert find_root(P("/elsewhere/dir"), has) is None  # no project there


def _chain(n: int) -> list[bytes]:
    lines, prev = [], audit_chain.GENESIS
    for seq in range(1, n + 1):
        line, prev = audit_chain.seal(f'{{"seq":{seq},"prev":"{prev}","x":1}}'.encode(), prev)
        lines.append(line)
    return lines


def test_chain_verifies_and_detects_tampering() -> None:
    lines = _chain(5)
    report = audit_chain.verify(lines)
    assert report.ok and report.events == 5 and (report.first_seq, report.last_seq) == (1, 5)
    assert audit_chain.verify(lines[2:]).ok  # a trimmed suffix still verifies
    tampered = [*lines[:2], lines[2].replace(b'"x":1', b'"x":2'), *lines[3:]]
    assert not audit_chain.verify(tampered).ok
    assert not audit_chain.verify([lines[0], lines[2]]).ok  # a removed line breaks the chain
    assert "no hash" in audit_chain.verify([b"{}"]).problem
