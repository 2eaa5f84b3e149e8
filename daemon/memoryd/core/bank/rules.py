"""Routing rules of ``bank_process`` as data (design §10): the bank files, the
operations, and the default keyword table that ``memoryd.core.bank.router.route`` applies.

A rule is a ``RoutingRule`` (msgspec), so a configuration can supply its own table with the same
schema. Precedence is the order of the table: the first rule that matches a sentence wins.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

BankFile = Literal[
    "projectBrief.md",
    "productContext.md",
    "systemPatterns.md",
    "techContext.md",
    "activeContext.md",
    "progress.md",
    "decisionLog.md",
]
Operation = Literal["append", "append_to_section", "replace_section", "complete_item"]
Render = Literal["decision", "done", "timestamped", "bullet", "paragraph"]
BANK_FILES: tuple[str, ...] = get_args(BankFile)
OPERATIONS: tuple[str, ...] = get_args(Operation)


class RoutingRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A sentence that ``pattern`` matches (case-insensitive) and ``unless`` does not goes to
    ``target_file`` / ``section``. ``render`` makes the markdown: ``decision`` a ``## Decision:``
    block (date, status, context, decision), ``done`` ``- [x] text — date``, ``timestamped``
    ``- <UTC time>: text``, ``bullet`` ``- text``, ``paragraph`` the text itself."""

    id: str
    pattern: str
    target_file: BankFile
    operation_type: Operation
    render: Render
    section: str | None = None
    unless: str | None = None


_DONE = r"(?:done|completed|finished|shipped|merged|released|fixed|resolved|implemented)"
DEFAULT_RULES: tuple[RoutingRule, ...] = (
    RoutingRule(
        id="decision",
        pattern=r"\b(?:decisions?|decided|chose|chosen|opted|settled on|agreed (?:on|to))\b",
        target_file="decisionLog.md",
        operation_type="append",
        render="decision",
    ),
    RoutingRule(
        id="done",
        pattern=rf"\b{_DONE}\b",
        unless=rf"(?:\bnot|\bnever|n't|\byet to|\bto be)\s+(?:\w+\s+){{0,2}}?{_DONE}\b",
        target_file="progress.md",
        operation_type="complete_item",
        render="done",
        section="Completed",
    ),
    RoutingRule(
        id="next_step",
        pattern=r"\b(?:next|todo|to-do|should|plan(?:ning)? to|needs? to)\b",
        target_file="activeContext.md",
        operation_type="append_to_section",
        render="bullet",
        section="Next Steps",
    ),
    RoutingRule(
        id="known_issue",
        pattern=r"\b(?:bugs?|issues?|broken|breaks|fail(?:s|ed|ing|ure)?|crash(?:es|ed|ing)?"
        r"|regression|flaky)\b",
        target_file="progress.md",
        operation_type="append_to_section",
        render="bullet",
        section="Known Issues",
    ),
    RoutingRule(
        id="focus",
        pattern=r"\b(?:current(?:ly)? focus|(?:currently|now) (?:working on|focusing on))\b",
        target_file="activeContext.md",
        operation_type="replace_section",
        render="paragraph",
        section="Current Focus",
    ),
    RoutingRule(
        id="architecture",
        pattern=r"\b(?:architecture|architectural|modules?|components?|layers?)\b",
        target_file="systemPatterns.md",
        operation_type="append_to_section",
        render="bullet",
        section="Architecture Overview",
    ),
    RoutingRule(
        id="pattern",
        pattern=r"\b(?:patterns?|design|conventions?)\b",
        target_file="systemPatterns.md",
        operation_type="append_to_section",
        render="bullet",
        section="Design Patterns in Use",
    ),
    RoutingRule(
        id="tech",
        pattern=r"\b(?:stack|dependency|dependencies|librar(?:y|ies)|versions?|framework"
        r"|packages?|upgrade[ds]?|upgrading)\b",
        target_file="techContext.md",
        operation_type="append_to_section",
        render="bullet",
        section="Technology Stack",
    ),
)
FALLBACK_RULE = RoutingRule(
    id="recent_change",
    pattern=r"$^",
    target_file="activeContext.md",
    operation_type="append_to_section",
    render="timestamped",
    section="Recent Changes",
)
CHECKBOX_RULES = {"x": "done", " ": "next_step"}  # a box in a bullet overrides the keywords
