"""What the memory bank and the instruction files add to an agent's payload (design §11, §12;
seeds 000 and 003), as items of the budget's extra tiers (``core.recall.budget.EXTRA_TIERS``):

- at session start, the instruction files the agent does not load itself, each with its
  provenance, and, when the project has a memory bank, its session summary and protocol text;
- on a prompt that says "update memory bank" or "UMB", the instruction to update it.

The daemon does this work, on the owner thread; the hook client only prints the text.
"""

from __future__ import annotations

from memoryd.banks.service import BankService
from memoryd.core import instructions as core_instructions
from memoryd.core.bank import model as core_bank
from memoryd.core.bank.protocol import NO_BANK, is_update_trigger, protocol_text
from memoryd.core.bank.protocol import update_instruction as update_text
from memoryd.core.bank.summary import render_summary, session_summary
from memoryd.core.recall.formatting import Item


def session_start(banks: BankService, cwd: str | None, agent: str) -> dict[str, list[Item]]:
    return {"instructions": instruction_items(banks, cwd, agent), "bank": bank_items(banks, cwd)}


def instruction_items(banks: BankService, cwd: str | None, agent: str) -> list[Item]:
    """The instruction segments in precedence order (weakest first), less those the agent
    reads by itself (Claude's CLAUDE.md, Codex's AGENTS.md, Gemini's GEMINI.md)."""
    return [
        Item(kind="instruction", text=seg.content, origin=core_instructions.provenance_note(seg))
        for seg in banks.instruction_segments(cwd)
        if seg.content.strip() and not core_instructions.loaded_natively(agent, seg.path)
    ]


def bank_items(banks: BankService, cwd: str | None) -> list[Item]:
    """The bank's session summary and protocol, when the project has a bank."""
    texts = banks.bank_texts(cwd)
    present = [name for name in core_bank.FILES if texts.get(name) is not None]
    if not present:
        return []
    summary = render_summary(
        session_summary(texts.get(core_bank.ACTIVE_CONTEXT), texts.get(core_bank.PROGRESS))
    )
    items = [Item(kind="bank_summary", text=summary)] if summary else []
    return [*items, Item(kind="bank_protocol", text=protocol_text(present))]


def prompt(banks: BankService, cwd: str | None, text: str) -> dict[str, list[Item]]:
    """The answer to an "update memory bank" / "UMB" prompt; nothing for any other prompt."""
    if not is_update_trigger(text):
        return {}
    has_bank = any(banks.bank_texts(cwd).get(name) is not None for name in core_bank.FILES)
    return {"bank": [Item(kind="bank_update", text=update_text() if has_bank else NO_BANK)]}
