"""Extraction: transcript messages in, session findings out (design §6).

Pure and deterministic: the same messages and rules always give the same findings, in the same
order, with the same ids (derived from session and fingerprint). Pairing an error with its fix and
counting edits per file need the whole session; disjoint batches would miss them. So a session is
read by one ``Extractor``, fed each message once as it arrives, whose ``findings()`` at any point
are ``extract`` over every message so far (a checkpoint costs the new messages, not the session).

The hot path is prose: a message is lowercased once and tested against the rules' keywords, and
only messages with a live rule are split into sentences. Tool output is never scanned unless the
result is an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from memoryd.core.capture.findings import FindingSink, Origin, SessionFinding, truncate
from memoryd.core.capture.harness import (
    HEDGE,
    dissents,
    is_declined,
    is_interruption,
    user_words,
)
from memoryd.core.capture.rules import (
    DEFAULT_RULES,
    CompiledRule,
    ExtractionRule,
    RoleRules,
    RulePlan,
    When,
    load_user_rules,
    plan_rules,
)
from memoryd.core.capture.tool_outcomes import ToolCallLike, ToolOutcomes, ToolResultLike

__all__ = [
    "DEFAULT_RULES",
    "ExtractionRule",
    "Extractor",
    "MessageLike",
    "SessionFinding",
    "ToolCallLike",
    "ToolResultLike",
    "extract",
    "load_user_rules",
]


class MessageLike(Protocol):
    """A transcript message as the parser models it (core/transcript.py).

    Read-only properties, so frozen structs and plain dataclasses both satisfy it."""

    @property
    def role(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> Sequence[ToolCallLike]: ...
    @property
    def tool_results(self) -> Sequence[ToolResultLike]: ...
    @property
    def files(self) -> Sequence[str]: ...
    @property
    def offset(self) -> int: ...
    @property
    def agent(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def injected(self) -> bool: ...


def extract(
    messages: Sequence[MessageLike],
    rules: Sequence[ExtractionRule] = DEFAULT_RULES,
    *,
    redact: Callable[[str], str] | None = None,
    paths: Callable[[str], str] | None = None,
) -> list[SessionFinding]:
    """Findings of ``messages`` in transcript order, one per fingerprint (the most important).

    Injected messages (our own hook output, injected system context) are skipped. ``redact``,
    when given, runs on every content before it is fingerprinted, so a secret never reaches a
    finding and the fingerprint is that of the text that will be stored. ``paths`` rewrites the
    paths of every content and file list (relative to the project root, no home folder)."""
    extractor = Extractor(rules, redact=redact, paths=paths)
    extractor.feed(messages)
    return extractor.findings()


class Extractor:
    """``extract`` over a session that grows: messages are fed once each, in transcript order,
    and ``findings()`` answers at any point what ``extract`` would answer over every message fed
    so far (the judgements that need the whole session run on a copy, so feeding goes on after
    it). A checkpoint then costs the new messages, not a re-read of the ones before them."""

    def __init__(
        self,
        rules: Sequence[ExtractionRule] = DEFAULT_RULES,
        *,
        redact: Callable[[str], str] | None = None,
        paths: Callable[[str], str] | None = None,
    ) -> None:
        self._plan = plan_rules(tuple(rules))
        self._sink = FindingSink(redact, paths)
        self._tools = ToolOutcomes(self._plan.tool_calls, self._plan.tool_errors, self._sink)
        # The arc around the user's words: a prompt right after a declined or interrupted tool
        # use is a correction; a short reply is read with what the agent had just said; a prompt
        # that goes on without correcting the agent accepts the agent's last words before it.
        self._refused = False
        self._said_last = ""
        self._reply: tuple[MessageLike, Origin] | None = None
        self._accepted: set[int] = set()

    def feed(self, messages: Iterable[MessageLike]) -> None:
        plan, sink, tools = self._plan, self._sink, self._tools
        refused, said_last, reply = self._refused, self._said_last, self._reply
        for message in messages:
            if message.injected:
                refused = refused or (message.role == "user" and is_interruption(message.text))
                continue
            origin = Origin(message.agent, message.session_id, message.offset)
            if message.role == "user" and message.text.strip():
                if reply is not None and not refused and not dissents(message.text):
                    _accepted_findings(*reply, plan.accepted, sink)
                    self._accepted.add(reply[1].offset)
                reply = None
            role = plan.prose.get(message.role)
            if role is not None and message.text:
                when: When = "correction" if refused and message.role == "user" else "any"
                _prose_findings(message.text, message.files, role, origin, sink, when, said_last)
                if message.role == "user":
                    refused = False
                else:
                    said_last = message.text
                    tools.note_prose(message.text)
            if message.role == "assistant" and message.text.strip():
                reply = (message, origin)
            for result in message.tool_results:
                words = user_words(result.text)
                declined = result.is_error and is_declined(result.text)
                if declined:
                    reply = None  # the user stopped what the agent was doing: nothing accepted
                if words is not None and (user := plan.prose.get("user")) is not None:
                    subject = tools.declined_subject(result) if declined else None
                    when = "correction" if declined else "answer"
                    _prose_findings(words, (), user, origin, sink, when, "", subject)
                elif declined:
                    refused = True
            if message.tool_calls or message.tool_results:
                tools.observe(message.tool_calls, message.tool_results, origin)
        self._refused, self._said_last, self._reply = refused, said_last, reply

    def findings(self) -> list[SessionFinding]:
        """What ``extract`` gives over every message fed so far; feeding may go on after."""
        sink = self._sink.copy()
        self._tools.finish_into(sink)
        found = sink.findings()
        diagnoses = any(f.rule_id in _DIAGNOSES for f in found)
        if not diagnoses and not self._accepted:
            return found  # nothing to judge: the findings as they are
        if diagnoses:
            sink.revise(_judge_diagnoses(found, self._tools.edits_at, self._tools.passes_at))
        if self._accepted:
            sink.revise(_mark_accepted(self._accepted, self._plan))
        return sink.findings()


def _accepted_findings(
    reply: MessageLike, origin: Origin, rules: RoleRules, sink: FindingSink
) -> None:
    """The rules that read only what the user accepted, over the agent's accepted words."""
    _prose_findings(reply.text, reply.files, rules, origin, sink, "accepted")


def _mark_accepted(
    offsets: set[int], plan: RulePlan
) -> Callable[[SessionFinding], SessionFinding | None]:
    """Findings of the agent's prose said in a reply the user accepted carry the signal."""
    prose_rules = {rx.rule.id for rx in (*plan.prose["assistant"].rules, *plan.accepted.rules)}

    def mark(finding: SessionFinding) -> SessionFinding:
        if finding.offset in offsets and finding.rule_id in prose_rules:
            return msgspec.structs.replace(finding, accepted=True)
        return finding

    return mark


UNCONFIRMED_FACTOR = 0.7


def _judge_diagnoses(
    found: Sequence[SessionFinding], edits_at: Sequence[int], passes_at: Sequence[int]
) -> Callable[[SessionFinding], SessionFinding | None]:
    """A diagnosis the agent states is confirmed by an edit after it, then a passing command.
    Of several diagnoses before the same edit only the last stands (the earlier ones were the
    guesses it replaced); one never confirmed is kept at reduced importance, never "high"."""
    said = sorted(f.offset for f in found if f.rule_id in _DIAGNOSES)

    def judge(finding: SessionFinding) -> SessionFinding | None:
        if finding.rule_id not in _DIAGNOSES:
            return finding
        edit = next((e for e in edits_at if e > finding.offset), None)
        if edit is not None and any(finding.offset < other < edit for other in said):
            return None
        if edit is not None and any(p > edit for p in passes_at):
            return finding
        lowered = round(finding.importance * UNCONFIRMED_FACTOR, 6)
        return msgspec.structs.replace(finding, importance=lowered)

    return judge


_DIAGNOSES = frozenset({"discovery.root_cause", "discovery.found"})


# --------------------------------------------------------------------------- prose

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?(?:^[ \t]*\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_QUOTES = (("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'), ("\u201d", '"'))
_SPACE_RUNS = re.compile(r"[ \t\xa0]{2,}|[\t\xa0]")
_LIST_MARKER = re.compile(r"^\s*(?:(?:[-*+•>]|\d{1,3}[.)]|#{1,6}|\[[ xX]\])\s+)+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'`(\[*_])")
MIN_SENTENCE_WORDS = 3


def _prose(text: str) -> str:
    """Message text without fenced code, with typographic quotes made plain and runs of spaces
    made one, so that patterns and keywords see "we'll use" however it was typed."""
    if "```" in text or "~~~" in text:
        text = _FENCE.sub("\n", text)
    for curly, plain in _QUOTES:
        if curly in text:
            text = text.replace(curly, plain)
    return _SPACE_RUNS.sub(" ", text)


def sentences(line: str) -> list[str]:
    """The sentences of one line of prose, list markers and heading marks stripped."""
    line = _LIST_MARKER.sub("", line).strip()
    if not line or line.startswith("|"):  # table rows are data, not statements
        return []
    return [piece for piece in map(str.strip, _SENTENCE_END.split(line)) if piece]


REPLY_CHARS = 80  # a user's reply shorter than this is read with the agent's last words
_CONTEXT_CHARS = 240


def _prose_findings(
    text: str,
    files: Sequence[str],
    role: RoleRules,
    origin: Origin,
    sink: FindingSink,
    when: When = "any",
    said_last: str = "",
    declined: str | None = None,
) -> None:
    if not role.rules or not text:
        return
    prose = _prose(text)
    lowered = prose.lower()
    # One pass of fast substring tests per keyword, then only rules and lines that can match.
    present = {k for k in role.keywords if k in lowered}
    # Without a keyword only the rules that have none can match.
    rules = role.rules if present else role.unconditional
    live = [rx for rx in rules if rx.rule.when in ("any", when) and rx.live(present)]
    if not live:
        return
    # A reason given when declining names the alternative; what was declined is the rest of it.
    context = f" (declined: {declined})" if declined else _reply_context(prose, said_last)
    if _whole_message(live, prose, files, origin, sink, context):
        return
    per_sentence = [rx for rx in live if rx.rule.unit == "sentence"]
    if not per_sentence:
        return
    every_line = any(not rx.keywords for rx in per_sentence)
    whole = " ".join(prose.split())
    wants_heading = any("{heading}" in (rx.rule.template or "") for rx in per_sentence)
    heading = under = ""
    # lower() never adds or removes a line break, so the two line lists stay aligned.
    for line, line_lowered in zip(prose.splitlines(), lowered.splitlines(), strict=False):
        if wants_heading:
            title = _heading(line)
            heading, under = (title, "") if title is not None else (heading, heading)
        if not (every_line or any(k in line_lowered for k in present)):
            continue
        for sentence in sentences(line):
            # Questions ask, they do not state; short fragments carry too little to keep.
            if sentence.endswith("?") or sentence.count(" ") < MIN_SENTENCE_WORDS - 1:
                continue
            low = sentence.lower()
            # A guess is not a fact: hedged sentences never stand alone (issue 19).
            if HEDGE.search(low):
                continue
            here = {k for k in present if k in low}
            for rx in per_sentence:
                if rx.live(here) and (match := rx.regex.search(sentence)):
                    own_label = _LABELLED.match(sentence) is not None
                    found = rx.render(match, sentence, whole, "" if own_label else under)
                    if rx.rule.user_intent:
                        found += context
                    sink.add(rx.rule, found, origin, files)


# A heading line: a markdown heading, or a list item that is only a bold title (with an
# optional parenthesis such as the file it is about).
_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s+(?P<h>.+?)|(?:(?:[-*+]|\d{1,3}[.)])\s+)?(?P<b>\*\*[^*]+\*\*\s*"
    r"(?:\((?:[^()]|\([^()]*\))*\))?)\s*:?)\s*$"
)
_LINK = re.compile(r"\[([^\]]*)\]\([^)\s]*\)")
# A sentence with a label of its own ("URL: removed the fallback") needs no heading.
_LABELLED = re.compile(r"^[^:.!?]{1,60}:\s")


def _heading(line: str) -> str | None:
    """The title of a heading line, without its marks, or None for any other line."""
    found = _HEADING.match(line)
    if found is None:
        return None
    title = _LIST_MARKER.sub("", found.group("h") or found.group("b"))
    title = _LINK.sub(r"\1", title).replace("**", "")
    return " ".join(title.split()).rstrip(":") or None


# Headings, bold, check marks and link targets: layout of the agent's reply, not its words.
_MARKDOWN = re.compile(r"^#{1,6}\s+|#{2,6}\s|\*\*|[✅❌✓]|\]\([^)\s]*\)|\[", re.MULTILINE)


def _reply_context(prose: str, said_last: str) -> str:
    """A short reply ("ok, let's do that") says little alone: the start of what the agent said
    just before it, appended to what the user decided."""
    if len(prose.strip()) >= REPLY_CHARS or not said_last.strip():
        return ""
    before = " ".join(_MARKDOWN.sub(" ", _prose(said_last)).split())
    return f" (in reply to: {truncate(before, _CONTEXT_CHARS)})"


def _whole_message(
    live: list[CompiledRule],
    prose: str,
    files: Sequence[str],
    origin: Origin,
    sink: FindingSink,
    context: str = "",
) -> bool:
    """Message-unit rules; True when a user-intent rule took the whole message (an explicit
    remember, a correction, an answer): sentence rules would only add fragments of it."""
    for rx in live:
        if rx.rule.unit == "message" and (match := rx.regex.search(prose)):
            found = rx.render(match, prose)
            if rx.rule.user_intent and rx.rule.when != "any":
                found += context
            added = sink.add(rx.rule, found, origin, files)
            if added and rx.rule.user_intent:
                return True
    return False


class _Prompt(msgspec.Struct, frozen=True, kw_only=True):
    """A user prompt seen by a hook, shaped like a transcript message for the rules."""

    text: str
    agent: str
    role: str = "user"
    offset: int = 0
    session_id: str | None = None
    injected: bool = False
    files: tuple[str, ...] = ()
    tool_calls: tuple[Any, ...] = ()
    tool_results: tuple[Any, ...] = ()


REMEMBER_RULES = "remember."  # the rule ids of an explicit request to keep something


def remembered_text(
    prompt: str,
    agent: str,
    rules: Sequence[ExtractionRule] = DEFAULT_RULES,
    *,
    redact: Callable[[str], str] | None = None,
) -> str | None:
    """What a ``remember:`` in a prompt asks to keep, worded exactly as capture will word the
    same prompt when it reads the transcript: the hook's entry and capture's finding then share
    a fingerprint, so one request never becomes two entries. Only the marker rules
    (``remember.*``) count here: any other statement of the user's ("please …", "I want …") is
    a finding that goes through promotion and review, never a confirmed entry from the hook."""
    intent = [rule for rule in rules if rule.user_intent and rule.id.startswith(REMEMBER_RULES)]
    found = extract([_Prompt(text=prompt, agent=agent)], intent, redact=redact)
    return found[0].content if found else None
