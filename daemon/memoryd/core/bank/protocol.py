"""The memory bank protocol an agent is given (design §10): the read order, when to
update, and the "update memory bank" / "UMB" trigger with the instruction it answers. Pure:
text only, short, from the one spelling of the file order in ``model``."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memoryd.core.bank import model as bank

# Word-bounded, case-insensitive: "UMB" or "update (the) memory bank", never "umbrella" or
# "dumb"; a hyphen or underscore around it makes it part of a name, not the trigger.
_TRIGGER = re.compile(
    r"(?<![\w-])(?:umb|update\s+(?:the\s+|my\s+|your\s+|our\s+)?memory[\s-]?banks?)(?![\w-])",
    re.IGNORECASE,
)

# What each file gets in an update (design §10), in update order.
_WHAT: dict[str, str] = {
    "decisionLog.md": "append a '## Decision: <title>' entry per new decision "
    "(date, status, context, options, rationale); never edit or remove an old one",
    "progress.md": "move finished items to Completed (checked, dated), add new work to "
    "In Progress, update Known Issues and Upcoming",
    "activeContext.md": "rewrite Current Focus, Recent Changes, Current State, Blockers and "
    "Next Steps for someone with no context",
    "techContext.md": "only if the stack, setup or commands changed",
    "systemPatterns.md": "only if the architecture or a pattern changed",
    "productContext.md": "only if the scope or the users changed",
    "projectBrief.md": "only if the project's direction changed",
}
HOW = (
    "Edit the files in memory-bank/ directly, or use `memctl bank update NAME` "
    "(the memory_bank_update tool over MCP)."
)


def is_update_trigger(prompt: str) -> bool:
    """Whether the user asks for the memory bank to be updated ("update memory bank", "UMB")."""
    return _TRIGGER.search(prompt) is not None


def protocol_text(present: Sequence[str]) -> str:
    """The short protocol given at session start when a bank exists: the files to read, in
    order (those present), when to update them, and in which order."""
    reads = [name for name in bank.READ_ORDER if name in present] or list(bank.READ_ORDER)
    return "\n".join(
        [
            "Memory bank protocol (memory-bank/):",
            f"- At the start of a task read, in order: {', '.join(reads)}.",
            "- Update it when a significant task is done, a decision is made, a new pattern "
            "appears, a blocker appears or is resolved, before the session ends, and when the "
            'user says "update memory bank" or "UMB".',
            f"- Update order: {', '.join(bank.UPDATE_ORDER)} (the stable files only when they "
            "changed; decisionLog.md is append-only).",
        ]
    )


def update_instruction() -> str:
    """What the "update memory bank" trigger answers: the files to update, in update order, what
    each gets, and how."""
    steps = [f"{i}. {name}: {_WHAT[name]}." for i, name in enumerate(bank.UPDATE_ORDER, start=1)]
    return "\n".join(
        [
            "The user asked to update the memory bank. Review what changed in this session, "
            "then update memory-bank/ in this order:",
            *steps,
            "Write for a reader with no context: name files, functions and errors; date "
            "progress and decision entries. " + HOW,
        ]
    )


NO_BANK = (
    "The user asked to update the memory bank, but this project has none yet: "
    "`memctl bank init` (the initialize_memory_bank tool over MCP) creates memory-bank/ with "
    "its seven files; then fill them in."
)
