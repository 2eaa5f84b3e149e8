"""What a session gets from the memory bank (seed 000): the session-start summary, the protocol
text, the "update memory bank" / "UMB" trigger, and each mode's file access. Pure core."""

from __future__ import annotations

import pytest

from memoryd.core.bank import model as bank
from memoryd.core.bank.modes import access
from memoryd.core.bank.protocol import is_update_trigger, protocol_text, update_instruction
from memoryd.core.bank.summary import MAX_ITEMS, render_summary, session_summary
from memoryd.core.bank.templates import CodebaseFacts, render_templates
from memoryd.core.errors import Forbidden

ACTIVE = """# Active Context

## Current Focus
<!-- What is being worked on right now. -->
Moving the payments webhook
to the queue worker.

## Recent Changes
- 2026-05-01: a long story nobody needs at session start

## Blockers
- Stripe sandbox keys expired
  (asked ops on Monday)
- None

## Next Steps
1. Rotate the keys
2. [Immediate next task]
"""
PROGRESS = """# Progress

## Completed
- [x] Webhook signature checks — 2026-04-30

## In Progress
- [ ] Retries with backoff — half done
- [x] Finished but not moved yet

## Upcoming
- [ ] Dead-letter queue
"""


def test_summary_takes_focus_blockers_progress_and_next_steps_only() -> None:
    summary = session_summary(ACTIVE, PROGRESS)
    assert summary.focus == "Moving the payments webhook to the queue worker."
    assert summary.blockers == ("Stripe sandbox keys expired (asked ops on Monday)",)
    assert summary.in_progress == ("Retries with backoff — half done",)
    assert summary.next_steps == ("Rotate the keys",)  # the seed's placeholder left out
    text = render_summary(summary)
    assert "long story" not in text and "signature checks" not in text  # not the whole files
    assert text.splitlines() == [
        "Session summary (from memory-bank/activeContext.md and progress.md):",
        "Current focus: Moving the payments webhook to the queue worker.",
        "Blockers:",
        "- Stripe sandbox keys expired (asked ops on Monday)",
        "In progress:",
        "- Retries with backoff — half done",
        "Next steps:",
        "- Rotate the keys",
    ]


def test_next_steps_fall_back_to_upcoming_and_lists_are_short() -> None:
    active = "## Current Focus\n\nx\n\n## Next Steps\n\n<!-- none yet -->\n"
    progress = "## In Progress\n\n" + "".join(f"- [ ] task {i} {'y' * 400}\n" for i in range(9))
    progress += "\n## Upcoming\n\n- [ ] Dead-letter queue\n"
    summary = session_summary(active, progress)
    assert summary.next_steps == ("Dead-letter queue",)
    assert len(summary.in_progress) == MAX_ITEMS
    assert all(len(item) <= 240 and item.endswith("…") for item in summary.in_progress)


def test_a_fresh_bank_has_no_summary() -> None:
    files = render_templates(None, CodebaseFacts())
    summary = session_summary(files[bank.ACTIVE_CONTEXT], files[bank.PROGRESS])
    assert summary.empty and render_summary(summary) == ""
    assert session_summary(None, None).empty


@pytest.mark.parametrize(
    "prompt",
    [
        "UMB",
        "umb please",
        "ok — Update Memory Bank now",
        "please update the memory bank.",
        "update   memory-bank",
        "(UMB)",
        "done for today, umb!",
    ],
)
def test_the_update_trigger(prompt: str) -> None:
    assert is_update_trigger(prompt)


@pytest.mark.parametrize(
    "prompt",
    [
        "take an umbrella",
        "that was dumb",
        "fix the plumbing",
        "UMBRELLA",
        "the umb-rella project",
        "rename umb_count",
        "update the memory usage of the bank",
        "the memory bank is fine",
        "",
    ],
)
def test_not_the_update_trigger(prompt: str) -> None:
    assert not is_update_trigger(prompt)


def test_the_update_instruction_lists_the_files_in_update_order() -> None:
    text = update_instruction()
    positions = [text.index(f"{name}:") for name in bank.UPDATE_ORDER]
    assert positions == sorted(positions) and len(bank.UPDATE_ORDER) == 7
    assert "append" in text and "memctl bank update" in text


def test_the_protocol_text_is_short_and_names_the_read_order() -> None:
    text = protocol_text(list(bank.FILES))
    assert ", ".join(bank.READ_ORDER) in text and '"update memory bank" or "UMB"' in text
    assert len(text) < 1200  # a few lines, not the seed's system prompt
    assert "projectBrief.md, activeContext.md, progress.md." in protocol_text(bank.REQUIRED)


def test_each_mode_reads_and_writes_the_seeds_files() -> None:
    seven = list(bank.FILES)
    table = {
        None: (seven, seven),
        "plan": (seven, []),
        "act": (seven, ["activeContext.md", "progress.md", "decisionLog.md"]),
        "Architect": (["productContext.md", "systemPatterns.md"],) * 2,
        "code": (seven, seven),
        "ask": (seven, []),
        "debug": (seven, ["activeContext.md"]),
        "review": (seven, seven),  # a mode the seed does not name: full access
    }
    for mode, (reads, writes) in table.items():
        rights = access(mode)
        assert rights.readable(seven) == reads and rights.writable(seven) == writes, mode
    assert access("architect").can_write("archive/systemPatterns.md")
    assert not access("code", ["code"]).writable(seven)  # the configuration adds read-only


def test_a_mode_refuses_the_files_it_does_not_write() -> None:
    access("act").check_write(["progress.md"])
    with pytest.raises(Forbidden, match=r"cannot change techContext\.md"):
        access("act").check_write(["progress.md", "techContext.md"])
    with pytest.raises(Forbidden, match="read-only"):
        access("plan").check_write([])
