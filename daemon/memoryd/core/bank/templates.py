"""The starting content of a new memory bank (design §10): the seed's section
structure with our own placeholder wording, filled from the user's brief and from what a scan of
the codebase found. Placeholders are HTML comments, so they never show as content."""

from __future__ import annotations

import msgspec

from memoryd.core.bank.model import FILES, append_to_section, replace_section, sections

MAX_LISTED = 25  # longer dependency lists are cut: a bank file should read in two minutes
SUMMARY_CHARS = 300

# Dependencies that shape a project's structure more than a library does.
FRAMEWORKS = frozenset(
    {
        "django", "flask", "fastapi", "starlette", "pyramid", "tornado", "aiohttp", "pydantic",
        "react", "vue", "svelte", "angular", "@angular/core", "next", "nuxt", "express",
        "koa", "fastify", "nestjs", "@nestjs/core", "electron", "actix-web", "axum", "rocket",
        "tokio", "warp", "gin", "echo", "fiber", "spring-boot", "rails",
    }
)  # fmt: skip


class CodebaseFacts(msgspec.Struct, frozen=True):
    """What a scan of the project found; every field may be empty."""

    name: str | None = None
    description: str | None = None
    manifests: tuple[str, ...] = ()  # file names, e.g. "pyproject.toml"
    languages: tuple[str, ...] = ()  # "Python >=3.11"
    dependencies: tuple[str, ...] = ()
    dev_dependencies: tuple[str, ...] = ()
    commands: tuple[tuple[str, str], ...] = ()  # (label, command); "Install" ones are set-up
    layout: tuple[str, ...] = ()  # top-level entries, directories with a trailing "/"


def _c(hint: str) -> str:
    return f"<!-- {hint} -->"


def _doc(title: str, parts: list[tuple[str, str]]) -> str:
    body = "\n\n".join(f"{heading}\n\n{_c(hint)}" if hint else heading for heading, hint in parts)
    return f"# {title}\n\n{body}\n"


TEMPLATES: dict[str, str] = {
    "projectBrief.md": _doc(
        "Project Brief",
        [
            ("## Project Name", "What people call this project."),
            ("## Mission Statement", "A short paragraph: what it is and why it was started."),
            ("## Problem Statement", "The difficulty it removes, and who runs into it."),
            ("## Core Requirements", "Capabilities it must have, one bullet each."),
            ("## Key Constraints", "Limits to respect: platforms, budget, deadlines, licences."),
            ("## Success Criteria", "Observable signs that the project has done its job."),
            ("## Scope Boundaries", ""),
            ("### In Scope", "What this project takes on."),
            ("### Out of Scope", "What it deliberately leaves to others."),
        ],
    ),
    "productContext.md": _doc(
        "Product Context",
        [
            ("## Why This Project Exists", "The need behind it, seen from the people it serves."),
            ("## Target Users", "Who they are and in which situation they reach for it."),
            ("## User Problems", "Pains these users have today, one bullet each."),
            ("## User Experience Goals", "How using it should feel, e.g. fast or zero set-up."),
            ("## How It Should Work", "The main flow, from the user's side, in a few steps."),
            ("## What Makes It Different", "Why someone would pick it over the alternatives."),
        ],
    ),
    "systemPatterns.md": _doc(
        "System Patterns",
        [
            ("## Architecture Overview", "The big picture: components and how they talk."),
            ("## Architecture Diagram", "An ASCII sketch of the components, if it helps."),
            ("## Design Patterns in Use", "One ### heading per pattern: where, why, how."),
            ("## Coding Conventions", "House rules a newcomer would otherwise get wrong."),
            ("## File Organization", "Where things live and what each top directory is for."),
            ("## Key Technical Decisions", "Short pointers; the reasoning is in decisionLog.md."),
        ],
    ),
    "techContext.md": _doc(
        "Tech Context",
        [
            ("## Technology Stack", ""),
            ("### Languages", "Each language with the version in use."),
            ("### Frameworks", "Frameworks, their version and what they are used for."),
            ("### Databases", "Stores and what each one holds."),
            ("### Key Libraries", "Libraries worth knowing about, and why they are here."),
            ("## Development Environment Setup", "Numbered steps from a clean checkout."),
            ("## Build Commands", "Build, test, lint and run commands."),
            ("## Deployment", "Where it runs, how it is shipped, what CI does."),
            ("## Environment Variables", "Variable, purpose, required or not."),
            ("## Version Requirements", "Minimum tool and runtime versions."),
        ],
    ),
    "activeContext.md": _doc(
        "Active Context",
        [
            ("## Current Focus", "What is being worked on right now, in a sentence or two."),
            ("## Recent Changes", "Dated bullets of what changed lately."),
            ("## Current State", "What works and what does not, as of now."),
            ("## Active Decisions", "Choices pending or just made this session."),
            ("## Open Questions", "Things nobody knows the answer to yet."),
            ("## Blockers", "What stops progress, and who or what could unblock it."),
            ("## Next Steps", "The next few tasks, in order."),
        ],
    ),
    "progress.md": _doc(
        "Progress",
        [
            ("## Completed", "Checked items with the date they were finished."),
            ("## In Progress", "Unchecked items with where each one stands."),
            ("## Known Issues", "Bugs and their impact."),
            ("## Technical Debt", "Shortcuts that will need cleaning up."),
            ("## Upcoming", "Unchecked items planned next."),
            ("## Milestones", "One ### heading per phase, with its status."),
        ],
    ),
    "decisionLog.md": "# Decision Log\n\n"
    + _c(
        "Add one entry per decision at the end, never edit or delete an old one: a heading "
        "'## Decision: <title>', then bullets for Date (YYYY-MM-DD), Status (Accepted, "
        "Superseded or Deprecated), Context, Options Considered, Selected, Rationale, "
        "Trade-offs and Consequences, and a '---' line. Retire an entry by changing its Status."
    )
    + "\n",
}
assert tuple(TEMPLATES) == FILES


def _summary(brief: str) -> str:
    """The first paragraph of prose in the brief, cut to a readable length."""
    paragraphs = [p.strip() for p in brief.split("\n\n")]
    prose = next((p for p in paragraphs if p and not p.startswith("#")), brief.strip())
    flat = " ".join(prose.split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1].rstrip() + "…"


def _project_brief(brief: str | None, facts: CodebaseFacts) -> str:
    text = TEMPLATES["projectBrief.md"]
    if brief and sections(brief):
        # A brief with its own headings is a finished document: keep it whole.
        own = brief.strip() + "\n"
        return own if any(s.level == 1 for s in sections(own)) else f"# Project Brief\n\n{own}"
    if facts.name:
        text = replace_section(text, "Project Name", facts.name)
    mission = brief.strip() if brief else facts.description
    return replace_section(text, "Mission Statement", mission) if mission else text


def _bullets(text: str, heading: str, items: tuple[str, ...] | list[str]) -> str:
    shown = list(items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        shown.append(f"… and {len(items) - MAX_LISTED} more (see the manifests)")
    return (
        replace_section(text, heading, "\n".join(f"- {item}" for item in shown)) if shown else text
    )


def _tech_context(facts: CodebaseFacts) -> str:
    text = _bullets(TEMPLATES["techContext.md"], "Languages", facts.languages)
    deps = facts.dependencies + facts.dev_dependencies
    text = _bullets(text, "Frameworks", [d for d in deps if d.casefold() in FRAMEWORKS])
    text = _bullets(text, "Key Libraries", [d for d in deps if d.casefold() not in FRAMEWORKS])
    setup = [cmd for label, cmd in facts.commands if label == "Install"]
    if setup:
        steps = [f"{n}. `{cmd}`" for n, cmd in enumerate(setup, start=1)]
        text = replace_section(text, "Development Environment Setup", "\n".join(steps))
    build = [f"**{label}**: `{cmd}`" for label, cmd in facts.commands if label != "Install"]
    text = _bullets(text, "Build Commands", build)
    versions = [lang for lang in facts.languages if any(ch.isdigit() for ch in lang)]
    return _bullets(text, "Version Requirements", versions)


def _system_patterns(facts: CodebaseFacts) -> str:
    text = TEMPLATES["systemPatterns.md"]
    if facts.manifests:
        found = ", ".join(facts.manifests)
        text = append_to_section(text, "Architecture Overview", f"Manifests found: {found}")
    if facts.layout:
        tree = "\n".join(facts.layout[: MAX_LISTED * 2])
        text = replace_section(text, "File Organization", f"```text\n{tree}\n```")
    return text


def render_templates(brief: str | None, facts: CodebaseFacts) -> dict[str, str]:
    """The seven files of a new bank, in read order."""
    files = dict(TEMPLATES)
    files["projectBrief.md"] = _project_brief(brief, facts)
    files["techContext.md"] = _tech_context(facts)
    files["systemPatterns.md"] = _system_patterns(facts)
    if brief and brief.strip():
        summary = _summary(brief)
        files["productContext.md"] = replace_section(
            files["productContext.md"], "Why This Project Exists", f"From the brief: {summary}"
        )
        files["activeContext.md"] = replace_section(
            files["activeContext.md"], "Current Focus", f"Setting up the project: {summary}"
        )
        files["progress.md"] = replace_section(
            files["progress.md"], "In Progress", "- [ ] Fill in the memory bank from the brief"
        )
    return files
