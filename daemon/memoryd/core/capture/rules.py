"""Extraction rules as data (design §6): the default table, and user rules from the config file.

A rule says which transcript units it looks at (``applies_to``), what it looks for (``pattern``,
always case-insensitive) and what a match is worth (``category``, ``importance``, ``confidence``).
The unit depends on the target:

- ``user`` / ``assistant``: one prose sentence of a message of that role (fenced code removed),
  or the whole prose of the message when ``unit = "message"``;
- ``tool_call``: the call's signature, ``"<tool name> <command or first file>"``;
- ``tool_result_error``: the text of a tool result flagged as an error.

``keywords`` are a cheap prefilter: lowercase literals, one of which must occur in the unit
(lowercased, runs of spaces made one) before the pattern is tried. Rules without keywords run
their pattern on every unit they apply to (correct, only slower). ``collect`` says how matches
become findings: ``match`` (one finding per matching unit, its content the unit or the rendered
``template``), ``file_edits`` (matching calls aggregated per file), ``todo_done`` (completed items
of a todo-list call), ``error_fix`` (a failure paired with a later fix in the same session).
Templates know ``{text}`` (the unit), ``{remainder}`` (the unit without the match), ``{clause}``
(from the match to the end of its sentence or line: what a marker such as ``remember:`` names),
``{message}`` (the whole prose of the unit's message: a user's sentences lean on each other),
``{heading}`` (the heading a list item without a label of its own stands under, with ": ") and
the pattern's named groups. ``when`` narrows a user rule to one moment of the session's arc:
``correction`` is the user's first words after a declined or interrupted tool use (the reason
given when declining, or the next prompt), ``answer`` the user's answers to a question tool;
``accepted`` narrows an assistant rule to the agent's last words before a prompt of the user's
that goes on without correcting them (what the user accepted).
The category ``infer`` reads the category from the captured text
(``memoryd.core.entries.infer_category``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple

import msgspec

from memctl.protocol import Category

Target = Literal["user", "assistant", "tool_call", "tool_result_error"]
Unit = Literal["sentence", "message"]
Collect = Literal["match", "file_edits", "todo_done", "error_fix"]
When = Literal["any", "correction", "answer", "accepted"]

RuleId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
Score = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Keyword = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class ExtractionRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One extraction rule; the config file declares user rules with this same schema."""

    id: RuleId
    # "infer": the category is read from the captured text (memoryd.core.entries.infer_category).
    category: Category | Literal["infer"]
    applies_to: Annotated[tuple[Target, ...], msgspec.Meta(min_length=1)]
    pattern: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
    importance: Score
    confidence: Score
    template: Annotated[str, msgspec.Meta(min_length=1, max_length=500)] | None = None
    keywords: tuple[Keyword, ...] = ()
    unit: Unit = "sentence"
    collect: Collect = "match"
    user_intent: bool = False
    when: When = "any"
    tags: tuple[Annotated[str, msgspec.Meta(min_length=1, max_length=64)], ...] = ()


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_BUILTIN_PLACEHOLDERS = frozenset({"text", "remainder", "message", "heading", "clause"})
# Where a clause ends: a sentence's end (as ``extraction.sentences`` cuts them) or a line's.
_CLAUSE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'`(\[*_])|\n")


def clause(text: str, match: re.Match[str]) -> str:
    """What a marker such as ``remember:`` asks for: from the marker to the end of its sentence
    or line, without the final full stop; after a trailing marker (``… #remember``), the
    sentence before it."""
    after = text[match.end() :]
    end = _CLAUSE_END.search(after)
    said = (after[: end.start()] if end else after).strip().rstrip(".").rstrip()
    if said:
        return said
    before = text[: match.start()]
    starts = [m.end() for m in _CLAUSE_END.finditer(before)]
    return before[starts[-1] if starts else 0 :].strip().rstrip(".").rstrip()


_ROLES = frozenset({"user", "assistant"})


class CompiledRule(NamedTuple):
    rule: ExtractionRule
    regex: re.Pattern[str]
    keywords: frozenset[str]

    def live(self, present: AbstractSet[str]) -> bool:
        """Whether the pattern is worth trying where exactly the keywords ``present`` occur."""
        return not self.keywords or not self.keywords.isdisjoint(present)

    def search(self, text: str, lowered: str) -> re.Match[str] | None:
        """The pattern's first match in ``text``, tried only when a keyword is in ``lowered``."""
        if self.keywords and not any(k in lowered for k in self.keywords):
            return None
        return self.regex.search(text)

    def render(
        self, match: re.Match[str], text: str, message: str | None = None, heading: str = ""
    ) -> str:
        """The rule's template filled from the match, or the unit text itself."""
        template = self.rule.template
        if template is None:
            return text

        def value(placeholder: re.Match[str]) -> str:
            name = placeholder.group(1)
            if name == "text":
                return text
            if name == "message":
                return text if message is None else message
            if name == "heading":
                return f"{heading}: " if heading else ""
            if name == "remainder":
                return f"{text[: match.start()]} {text[match.end() :]}"
            if name == "clause":
                return clause(text, match)
            return match.group(name) or ""

        return _PLACEHOLDER.sub(value, template)


class RoleRules(NamedTuple):
    """The prose rules for one role, with the union of their keywords for a one-pass prefilter."""

    rules: tuple[CompiledRule, ...]
    keywords: tuple[str, ...]
    unconditional: tuple[CompiledRule, ...] = ()  # the rules without keywords


class RulePlan(NamedTuple):
    """A rule set compiled and grouped by what each rule looks at. ``accepted`` holds the
    assistant rules that read only what the user accepted; ``prose`` the others."""

    prose: Mapping[str, RoleRules]
    tool_calls: tuple[CompiledRule, ...]
    tool_errors: tuple[CompiledRule, ...]
    accepted: RoleRules


@lru_cache(maxsize=16)
def plan_rules(rules: tuple[ExtractionRule, ...]) -> RulePlan:
    def having(target: Target) -> tuple[CompiledRule, ...]:
        return tuple(
            CompiledRule(r, compiled(r.pattern), frozenset(r.keywords))
            for r in rules
            if target in r.applies_to
        )

    def for_role(role: Target, accepted: bool = False) -> RoleRules:
        chosen = tuple(rx for rx in having(role) if (rx.rule.when == "accepted") == accepted)
        keywords = sorted({k for rx in chosen for k in rx.keywords})
        return RoleRules(chosen, tuple(keywords), tuple(rx for rx in chosen if not rx.keywords))

    return RulePlan(
        prose={"user": for_role("user"), "assistant": for_role("assistant")},
        tool_calls=having("tool_call"),
        tool_errors=having("tool_result_error"),
        accepted=for_role("assistant", accepted=True),
    )


def placeholders(template: str) -> set[str]:
    return set(_PLACEHOLDER.findall(template))


def rule_problem(rule: ExtractionRule) -> str | None:
    """What is wrong with a schema-valid rule, or None. Each check guards a silent misfire."""
    try:
        regex = compiled(rule.pattern)
    except re.error as exc:
        return f"pattern does not compile: {exc}"
    targets = set(rule.applies_to)
    if rule.collect in ("file_edits", "todo_done") and targets != {"tool_call"}:
        return f"collect {rule.collect!r} needs applies_to ['tool_call']"
    if rule.collect == "error_fix" and targets != {"tool_result_error"}:
        return "collect 'error_fix' needs applies_to ['tool_result_error']"
    if rule.unit == "message" and not targets <= _ROLES:
        return "unit 'message' only applies to the 'user' and 'assistant' roles"
    if rule.user_intent and targets != {"user"}:
        # Only the user can ask to remember; an agent echoing "remember:" must not bypass filters.
        return "user_intent rules must apply to ['user'] only"
    if rule.when == "accepted" and targets != {"assistant"}:
        return "'when' = 'accepted' narrows assistant rules only: applies_to must be ['assistant']"
    if rule.when in ("correction", "answer") and targets != {"user"}:
        return f"'when' = {rule.when!r} narrows user rules only: applies_to must be ['user']"
    if rule.template is not None:
        if rule.collect != "match":
            return f"a template has no effect with collect {rule.collect!r}"
        unknown = placeholders(rule.template) - _BUILTIN_PLACEHOLDERS - set(regex.groupindex)
        if unknown:
            return f"template names unknown placeholders {sorted(unknown)}"
    if any(k != k.lower() for k in rule.keywords):
        return "keywords must be lowercase (they are matched against lowercased text)"
    return None


def load_user_rules(raw: list[dict[str, object]]) -> tuple[ExtractionRule, ...]:
    """Validate user rules from the config file; raise ValueError naming the first bad rule."""
    rules: list[ExtractionRule] = []
    seen = {rule.id for rule in DEFAULT_RULES}
    for index, item in enumerate(raw):
        name = item.get("id") if isinstance(item, dict) else None
        label = f"extraction rule #{index + 1}" + (f" ({name!r})" if isinstance(name, str) else "")
        try:
            rule = msgspec.convert(item, ExtractionRule)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{label}: {exc}") from None
        problem = rule_problem(rule)
        if problem is None and rule.id in seen:
            problem = "id is already used by another rule"
        if problem is not None:
            raise ValueError(f"{label}: {problem}")
        seen.add(rule.id)
        rules.append(rule)
    return tuple(rules)


def _rule(
    rule_id: str,
    category: Category | Literal["infer"],
    applies_to: Sequence[Target],
    pattern: str,
    importance: float,
    confidence: float,
    keywords: Sequence[str] = (),
    **extra: object,
) -> ExtractionRule:
    return msgspec.convert(
        dict(
            id=rule_id,
            category=category,
            applies_to=tuple(applies_to),
            pattern=pattern,
            importance=importance,
            confidence=confidence,
            keywords=tuple(keywords),
            **extra,
        ),
        ExtractionRule,
    )


_BOTH: tuple[Target, ...] = ("user", "assistant")
_EDIT_TOOLS = r"^(?:Edit|MultiEdit|Write|NotebookEdit|apply_patch|write_file|replace|edit_file)\b"

# Order matters only for ties: when two rules give the same text the same importance, the
# earlier rule's finding is kept. Importance reflects how often a family is worth keeping.
# Every match of a pattern contains one of its keywords (a test checks it), or the prefilter
# would hide matches.
# fmt: off
DEFAULT_RULES: tuple[ExtractionRule, ...] = (
    _rule(
        "remember.explicit", "infer", ["user"],
        r"(?:^|(?<=\s))[#/]remember\b:?|\b(?:please\s+)?remember(?:\s+(?:this|that))?\s*:"
        r"|(?:^|(?<=[.!?]\s)|(?<=\n)|\bplease\s+)remember\s+that\b",  # a sentence's start
        1.0, 1.0, ["remember"], template="{clause}", unit="message", user_intent=True,
    ),
    _rule(
        "decision.decided", "decision", _BOTH,
        r"\b(?:(?:we|i)(?:'ve|\s+have)?\s+decided\b|decided\s+to\b|decision\s*(?:is|was)?\s*:"
        r"|(?:we|i)\s+(?:chose|opted\s+(?:to|for))\b|(?:we're|we\s+are|i'm)\s+going\s+with\b"
        r"|^going\s+with\b)",
        0.8, 0.8, ["decided", "decision", "chose", "opted", "going"],
    ),
    _rule(
        "decision.adopt", "decision", _BOTH,
        r"\b(?:we(?:'ll|\s+will|\s+should|'re\s+going\s+to|\s+are\s+going\s+to)|let's)\s+"
        r"(?:use|go\s+with|switch\s+to|adopt|stick\s+with|standardi[sz]e\s+on|move\s+to)\s+\S",
        0.7, 0.7, ["we'll", "we will", "we should", "going to", "let's"],
    ),
    _rule(
        "warning.imperative", "warning", _BOTH,
        r"^(?:(?:note|important|warning|caution|nb)\s*[:!-]\s*)?(?:never|avoid|be\s+careful"
        r"|careful)\b",
        0.75, 0.75, ["never", "avoid", "careful"],
    ),
    _rule(
        "warning.must_not", "warning", _BOTH,
        r"\b(?:must\s+(?:not|never)|mustn't|should\s+never|(?:must|should)\s+avoid"
        r"|(?:is|are)\s+not\s+allowed|never\s+(?:commit|push|merge|deploy|use|run|edit|modify"
        r"|delete|remove|change|call|import|store|log|touch|rename|expose|hard-?code|rely))\b",
        0.7, 0.7, ["must", "never", "avoid", "allowed"],
    ),
    _rule(
        "warning.caution", "warning", _BOTH,
        r"\b(?:be\s+careful|careful\s+(?:with|not|about|when|to)|beware|watch\s+out\s+for"
        r"|pitfall|gotcha)",
        0.6, 0.6, ["careful", "beware", "watch out", "pitfall", "gotcha"],
    ),
    _rule(
        "preference.prefer", "preference", ["user"],
        r"\b(?:i\s+(?:(?:really|strongly|usually|generally|always)\s+)?prefer"
        r"|i'd\s+(?:rather|prefer)|i\s+would\s+(?:rather|prefer)|my\s+preference"
        r"|i\s+like\s+(?:to|it\s+when|using))\b",
        0.7, 0.8, ["prefer", "rather", "like"],
    ),
    _rule(
        "preference.always", "preference", ["user"],
        r"^(?:please\s+)?(?:always|from\s+now\s+on|going\s+forward)\b"
        r"|\b(?:you\s+should|please)\s+always\b",
        0.7, 0.75, ["always", "from now on", "going forward"],
    ),
    _rule(
        "preference.dont", "preference", ["user"],
        r"^(?:(?:please|pls|and|but|also)\s+)?(?:don't|dont|do\s+not|stop)\s+\w+",
        0.65, 0.7, ["don't", "dont", "do not", "stop"],
    ),
    _rule(
        "pattern.convention", "pattern", _BOTH,
        r"\b(?:conventions?\b|the\s+pattern\s+(?:is|here)|we\s+always|naming\s+(?:scheme|rule)"
        r"|style\s+guide|follow(?:s|ing)?\s+the\s+(?:existing\s+)?(?:pattern|style)"
        r"|(?:is|are)\s+always\s+(?:named|placed|stored|kept|written))",
        0.6, 0.6, ["convention", "pattern", "always", "naming", "style"],
    ),
    _rule(
        "architecture.structure", "architecture", _BOTH,
        r"\b(?:architecture|(?:is|are)\s+responsible\s+for|entry\s+point|composition\s+root"
        r"|(?:module|layer|service|component|package)\s+(?:owns|handles|wraps)"
        r"|talks\s+to|communicates\s+(?:with|over|via)|sits\s+(?:between|behind|in\s+front\s+of)"
        r"|data\s+flows?\s+(?:from|through|into))\b",
        0.55, 0.55,
        ["architecture", "responsible for", "entry point", "composition root", "owns", "handles",
         "wraps", "talks to", "communicates", "sits", "data flow"],
    ),
    _rule(
        "discovery.root_cause", "discovery", _BOTH,
        r"\b(?:turns?\s+out|turned\s+out|root\s+cause|the\s+(?:real\s+|actual\s+)?"
        r"(?:issue|problem|bug|culprit|cause)\s+(?:was|is)\b|the\s+reason\s+(?:was|is)\b)",
        0.7, 0.75, ["turns out", "turn out", "turned out", "root cause", "issue", "problem", "bug",
         "culprit", "cause", "reason"],
    ),
    _rule(
        "discovery.found", "discovery", _BOTH,
        r"\b(?:(?:i|we)\s+(?:found|discovered|noticed|realized)\s+(?:that|the)\b"
        r"|caused\s+by\b|it\s+looks\s+like\s+the\b)",
        0.5, 0.55, ["found", "discovered", "noticed", "realized", "caused by", "looks like"],
    ),
    # The user's own voice (issue 19): what a teammate must know is most often said by the user,
    # as a constraint, a direction or a limitation, and is worth its whole message.
    _rule(
        "user.direction", "decision", ["user"],
        r"\blet's\s+(?:also\s+|just\s+|now\s+)?(?:do|make|migrate|keep|target|support|drop"
        r"|stay|replace|standardi[sz]e)\b|\bwe\s+(?:should|need\s+to|must|have\s+to)\s+"
        r"(?!use\b|go\s+with\b|switch\s+to\b|adopt\b|stick\s+with\b|move\s+to\b|avoid\b"
        r"|never\b|not\b)",
        0.8, 0.8, ["let's", "we should", "we need", "we must", "we have"],
        template="{message}", user_intent=True,
    ),
    _rule(
        "user.constraint", "preference", ["user"],
        r"\bi\s+(?:don't|do\s+not)\s+want\b|\bkeep\s+(?:it|them|this|that)\s+(?!in\s+mind)\w"
        r"|\binstead\s+of\b|\bwithout\s+(?:manually|hand-?\w+)",
        0.8, 0.8, ["want", "keep", "instead", "without"], template="{message}", user_intent=True,
    ),
    _rule(
        "user.limitation", "warning", ["user"],
        r"\b(?:is|are)\s+not\s+supported\b|\bnot\s+supported\s+(?:by|in|on)\b"
        r"|\b(?:doesn't|does\s+not|won't|will\s+not)\s+work\s+(?:in|on|with)\b"
        r"|\b(?:has|have)\s+(?:some\s+|known\s+|its\s+)?limitations\b",
        0.8, 0.8, ["supported", "work", "limitations"], template="{message}", user_intent=True,
    ),
    # An imperative with an object ("please create an empty commit with that content"), not a
    # bare "please fix these": at least five words after "please".
    _rule(
        "user.request", "decision", ["user"],
        r"^(?:(?:ok|okay|so|and|also|now|then)[,.]?\s+)*please\s+[a-z]+\b(?:\W+\w+){4,}",
        0.7, 0.7, ["please"], template="{message}", user_intent=True,
    ),
    _rule(
        "user.correction", "preference", ["user"], r"\w+\s+\w+", 0.9, 0.8,
        unit="message", when="correction", user_intent=True,
    ),
    _rule(
        "user.answer", "decision", ["user"], r"→\s*\S", 0.8, 0.8, ["→"],
        unit="message", when="answer", user_intent=True,
    ),
    # What the agent changed, said in the reply the user then accepted (issue 19): "changed
    # from X to Y", "replaced X with Y", "removed the X fallback". A session that migrates or
    # modernises code says its decisions this way, in the summary the user goes on from.
    _rule(
        "decision.accepted_change", "decision", ["assistant"],
        r"\b(?:(?:changed|switched|moved|migrated|upgraded|bumped)\s+(?:\S+\s+){0,6}?from\s+\S"
        r".*?\bto\b|replaced\s+\S.*?\bwith\b|instead\s+of\b|no\s+longer\b"
        r"|(?:^|:\s+)removed\s+\S)",
        0.6, 0.6, ["changed", "switched", "moved", "migrated", "upgraded", "bumped", "replaced",
                   "instead", "no longer", "removed"],
        when="accepted", template="{heading}{text}",
    ),
    _rule(
        "progress.done", "task_progress", ["assistant"],
        r"\b(?:(?:i've|i\s+have|we've|we\s+have)\s+(?:now\s+)?(?:implemented|completed|finished"
        r"|fixed|added)|(?:is|are)\s+now\s+(?:done|complete|implemented|working|passing)"
        r"|all\s+(?:\d+\s+)?tests\s+(?:now\s+)?pass|successfully\s+(?:implemented|added"
        r"|completed|migrated|fixed))\b|^(?:done|completed|implemented|finished|fixed)\s*[:-]\s*\S",
        0.4, 0.6,
        ["implemented", "completed", "finished", "fixed", "added", "done", "complete", "working",
         "passing", "tests", "migrated"],
    ),
    _rule(
        "progress.todo", "task_progress", ["tool_call"],
        r"^(?:TodoWrite|update_plan|write_todos)\b", 0.35, 0.8, collect="todo_done",
    ),
    _rule(
        "file_change.edit", "file_change", ["tool_call"], _EDIT_TOOLS, 0.3, 0.9,
        collect="file_edits",
    ),
    _rule(
        "error.tool_failure", "error", ["tool_result_error"], r"\S", 0.7, 0.7, collect="error_fix",
    ),
)
# fmt: on
