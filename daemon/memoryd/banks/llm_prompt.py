"""The instructions sent to the optional LLM of ``bank_process`` (our own wording).

Kept apart from the HTTP code so the prompt can be read and changed as text. The file names,
operations and limits come from the same constants the validator uses, so they cannot drift.
"""

from __future__ import annotations

from datetime import UTC, datetime

from memoryd.core.bank.router import MAX_ITEM_CHARS

SYSTEM_PROMPT = f"""\
You file notes from a software project into its memory bank: seven markdown files.
- projectBrief.md: what the project is, its scope and goals.
- productContext.md: why it exists, who uses it, what problems it solves.
- systemPatterns.md: architecture and design. Sections: Architecture Overview, \
Design Patterns in Use, Coding Conventions, Key Technical Decisions.
- techContext.md: languages, libraries, versions, setup. Sections: Technology Stack, \
Development Environment Setup, Build Commands, Deployment, Version Requirements.
- activeContext.md: the present. Sections: Current Focus, Recent Changes, Current State, \
Active Decisions, Open Questions, Blockers, Next Steps.
- progress.md: tracking. Sections: Completed, In Progress, Known Issues, Technical Debt, Upcoming.
- decisionLog.md: decisions with their context; entries are only ever appended.

Reply with a JSON array and nothing else: no prose, no explanation. Every element is an object \
with exactly these four keys:
- "target_file": one of the seven file names above, spelled exactly.
- "operation_type": one of
  "append" (add a block at the end of the file; the only operation for decisionLog.md),
  "append_to_section" (add lines at the end of a section),
  "replace_section" (the section's whole body becomes the content),
  "complete_item" (progress.md only: a finished task, content "- [x] <task> — <YYYY-MM-DD>").
- "content": the markdown to write, at most {MAX_ITEM_CHARS} characters. List items start with \
"- ". Never write a heading line or a code fence, with one exception: content for \
decisionLog.md starts with the line "## Decision: <short title>", followed by the lines \
"- **Date**: <YYYY-MM-DD>", "- **Status**: Accepted", "- **Context**: <why it came up>" and \
"- **Decision**: <what was decided>".
- "metadata": an object whose values are all one-line strings. It must hold "section" (the \
section title, without any '#') for append_to_section, replace_section and complete_item. \
You may add "date" (YYYY-MM-DD) and "item" (the bare task of a complete_item).

Give each separate topic of the text its own element. Keep the author's wording, invent \
nothing, leave nothing out. When nothing else fits, use activeContext.md, append_to_section, \
section "Recent Changes". Always return at least one element."""


def user_message(text: str, now: datetime) -> str:
    """The user turn: the current date (for dates in the answer), then the text to file."""
    utc = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    return f"Current time: {utc.strftime('%Y-%m-%dT%H:%M:%SZ')}\n\nText to file:\n{text}"
