"""What the agent did with its tools: file edits, completed todos, and errors paired with fixes.

An error result stays open until one of these, later in the same extraction:

- a successful call with the same key (the same shell command, or the same tool on the same
  file), or the same command run after a setup step: resolved, and the files edited in between
  are named as the fix, each with the first line the edit added; the agent's last plain
  (unhedged) explanation before the first edit is kept as the cause, confirmed by the passing
  run;
- a successful edit of a file the error involves (a file of the failing call, or a file whose name
  appears in the error text): remembered as a fix, which counts at the end unless the same key
  failed again after it (the edit did not help).

Errors still open at the end are kept unresolved, at reduced importance: a failure with no known
fix is worth less than one whose fix is known.

Only the project's own commands fail in a way worth remembering. The harness's refusals (a read
before an edit, a replace string not found, a declined tool use) and the failures of the agent's
file tools are tool mechanics: they never become findings, though a failed edit still counts as
an edit that changed nothing.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from memoryd.core.capture.findings import FindingSink, Origin, truncate
from memoryd.core.capture.harness import HEDGE, is_harness_error, is_harness_file
from memoryd.core.capture.rules import CompiledRule, ExtractionRule

UNRESOLVED_ERROR_FACTOR = 0.7
_DETAIL_CHARS = 240
_ERROR_SAMPLE_CHARS = 8192
_ADDED_CHARS = 100
_CAUSE_CHARS = 200


class ToolCallLike(Protocol):
    """A tool call as the transcript parser models it. Read-only, so frozen structs fit.

    Results pair with calls through an ``id`` or ``call_id`` attribute when calls have one, and
    otherwise in order."""

    @property
    def name(self) -> str: ...
    @property
    def input(self) -> Mapping[str, object]: ...
    @property
    def files(self) -> Sequence[str]: ...


class ToolResultLike(Protocol):
    @property
    def call_id(self) -> str | None: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def text(self) -> str: ...


@dataclass(eq=False)
class _Call:
    name: str
    tool_input: Mapping[str, object]
    command: str | None
    files: tuple[str, ...]
    origin: Origin
    edit_rules: list[ExtractionRule] = field(default_factory=list)
    failed: bool | None = None  # None until its result is seen

    @cached_property
    def key(self) -> str:
        """What makes two calls "the same" for pairing a failure with its fix. Lazy: only
        calls that fail, or succeed while a failure is open, need it."""
        if self.command is not None:
            return f"$ {self.command}"
        if self.files:
            return f"{self.name} {self.files[0]}"
        return f"{self.name} {json.dumps(self.tool_input, sort_keys=True, default=str)}"

    @cached_property
    def added_line(self) -> str | None:
        """The first line an edit added: what changed, in the edit's own words."""
        new, old = self.tool_input.get("new_string"), self.tool_input.get("old_string")
        edits = self.tool_input.get("edits")
        if new is None and isinstance(edits, list) and edits and isinstance(edits[0], Mapping):
            new, old = edits[0].get("new_string"), edits[0].get("old_string")
        if not isinstance(new, str):
            return None
        before = set(old.splitlines()) if isinstance(old, str) else set()
        for line in new.splitlines():
            if line not in before and len(line.strip()) >= 4:
                return truncate(" ".join(line.split()), _ADDED_CHARS)
        return None

    @property
    def edits(self) -> int:
        edits = self.tool_input.get("edits")  # MultiEdit makes several edits in one call
        return len(edits) if isinstance(edits, list) and edits else 1


@dataclass(eq=False)
class _OpenError:
    rule: ExtractionRule
    call: _Call | None
    detail: str
    sample: str
    origin: Origin
    edited: list[str] = field(default_factory=list)  # every file edited since the failure
    fixes: list[str] = field(default_factory=list)  # those the error involves
    added: dict[str, str] = field(default_factory=dict)  # file → first line an edit added
    cause: str | None = None  # the agent's explanation before its first edit


class ToolOutcomes:
    """Consumes tool calls and results in transcript order; emits findings into a sink."""

    def __init__(
        self,
        call_rules: tuple[CompiledRule, ...],
        error_rules: tuple[CompiledRule, ...],
        sink: FindingSink,
    ) -> None:
        self._call_rules = call_rules
        self._error_rules = error_rules
        self._sink = sink
        self._by_id: dict[str, _Call] = {}
        self._anonymous: deque[_Call] = deque()
        # Edit calls in order; those before ``_edit_calls`` whose outcome is known are summed
        # in ``_edits_known`` already, so a snapshot re-counts only the calls still waiting.
        self._edit_calls: deque[_Call] = deque()
        self._edits_known: dict[tuple[str, str], tuple[ExtractionRule, int, Origin]] = {}
        self._open: list[_OpenError] = []
        # Offsets of successful edits and of successful shell commands: what confirms a diagnosis.
        self.edits_at: list[int] = []
        self.passes_at: list[int] = []

    def observe(
        self, calls: Sequence[ToolCallLike], results: Sequence[ToolResultLike], origin: Origin
    ) -> None:
        for call in calls:
            self._on_call(call, origin)
        for result in results:
            self._on_result(result, origin)

    def note_prose(self, text: str) -> None:
        """The agent speaking: for an error not yet worked on, its explanation so far."""
        for error in self._open:
            if not error.edited and (cause := _cause(text)) is not None:
                error.cause = cause

    def finish_into(self, sink: FindingSink) -> None:
        """The findings that wait for the session's end (errors still open, edits per file),
        added to ``sink`` as if the session ended here; this state is left as it is, so more
        calls can still be observed."""
        for error in self._open:
            fix = f"fixed by editing {_names(error.fixes, error.added)}" if error.fixes else None
            self._emit_error(error, fix, sink)
        self._emit_edits(sink)

    # ------------------------------------------------------------------ calls

    def _on_call(self, call: ToolCallLike, origin: Origin) -> None:
        record = _record(call, origin)
        signature = f"{record.name} {record.command or (record.files or ('',))[0]}".strip()
        lowered = signature.lower()
        for rx in self._call_rules:
            match = rx.search(signature, lowered)
            if match is None:
                continue
            if rx.rule.collect == "file_edits":
                record.edit_rules.append(rx.rule)
            elif rx.rule.collect == "todo_done":
                for item in _done_todos(record.tool_input):
                    self._sink.add(rx.rule, f"Completed: {item}", origin)
            else:
                self._sink.add(rx.rule, rx.render(match, signature), origin, record.files)
        if record.edit_rules:
            self._edit_calls.append(record)
        call_id = _call_id(call)
        if call_id is not None:
            self._by_id[call_id] = record
        else:
            self._anonymous.append(record)

    def declined_subject(self, result: ToolResultLike) -> str | None:
        """What the user declined, for a result about to be observed: the command or the file
        tool's target, or None when the call is unknown or names neither."""
        call = self._by_id.get(result.call_id) if result.call_id is not None else None
        if call is None or (call.command is None and not call.files):
            return None
        return _subject(call)

    def _paired(self, result: ToolResultLike) -> _Call | None:
        if result.call_id is not None and result.call_id in self._by_id:
            return self._by_id.pop(result.call_id)
        # A result whose call never appeared (a transcript read from the middle) pairs with none.
        if result.call_id is None and self._anonymous:
            return self._anonymous.popleft()
        return None

    # ------------------------------------------------------------------ results

    def _on_result(self, result: ToolResultLike, origin: Origin) -> None:
        call = self._paired(result)
        if result.is_error:
            self._on_error(result.text, call, origin)
        elif call is not None:
            call.failed = False
            self._resolve_same_key(call)
            if call.edit_rules:
                self._note_fix(call)
                self.edits_at.append(origin.offset)
            elif call.command is not None:
                self.passes_at.append(origin.offset)

    def _on_error(self, text: str, call: _Call | None, origin: Origin) -> None:
        if call is not None:
            call.failed = True
            for error in self._open:  # edits since an earlier failure of this key did not help
                if error.call is not None and error.call.key == call.key:
                    error.edited.clear()
                    error.fixes.clear()
        if is_harness_error(text) or (call is not None and call.command is None):
            return
        lowered = text.lower() if any(rx.rule.keywords for rx in self._error_rules) else ""
        for rx in self._error_rules:
            match = rx.search(text, lowered)
            if match is None:
                continue
            if rx.rule.collect == "error_fix":
                sample = text[:_ERROR_SAMPLE_CHARS] + text[-_ERROR_SAMPLE_CHARS:]
                self._open.append(_OpenError(rx.rule, call, error_detail(text), sample, origin))
            else:
                line = _line_at(text, match)
                self._sink.add(rx.rule, rx.render(match, line), origin, call.files if call else ())

    def _resolve_same_key(self, call: _Call) -> None:
        still_open: list[_OpenError] = []
        for error in self._open:
            if error.call is None or error.call is call or not _same_or_prepared(error.call, call):
                still_open.append(error)
                continue
            then = f"then {_subject(call)} succeeded"
            edited = _names(error.edited, error.added)
            fix = f"fixed by editing {edited}, {then}" if error.edited else then
            self._emit_error(error, fix)
        self._open = still_open

    def _note_fix(self, edit: _Call) -> None:
        for error in self._open:
            for path in edit.files:
                if is_harness_file(path):
                    continue
                if path not in error.edited:
                    error.edited.append(path)
                if edit.added_line is not None:
                    error.added.setdefault(path, edit.added_line)
                if _involves(error, path) and path not in error.fixes:
                    error.fixes.append(path)

    # ------------------------------------------------------------------ findings

    def _emit_error(
        self, error: _OpenError, fix: str | None, sink: FindingSink | None = None
    ) -> None:
        sink = sink or self._sink
        text = f"{_subject(error.call)} failed: {error.detail}"
        if fix is not None and error.cause is not None:
            text = f"{text.rstrip('.')}. Cause: {error.cause}"
        key = f"error {_subject(error.call)} {error.detail}"
        files = error.call.files if error.call is not None else ()
        if fix is None:
            importance = round(error.rule.importance * UNRESOLVED_ERROR_FACTOR, 6)
            sink.add(error.rule, text, error.origin, files, importance=importance, key=key)
        else:
            fixed = f"{text} — {fix}."
            sink.add(error.rule, fixed, error.origin, files, resolved=True, key=key)

    def _emit_edits(self, sink: FindingSink) -> None:
        while self._edit_calls and self._edit_calls[0].failed is not None:
            _count_edit(self._edits_known, self._edit_calls.popleft())
        tally = dict(self._edits_known)
        for call in self._edit_calls:
            _count_edit(tally, call)
        for (_rule_id, path), (rule, count, origin) in tally.items():
            noun = "edit" if count == 1 else "edits"
            sink.add(rule, f"Edited {path} ({count} {noun})", origin, (path,))


# --------------------------------------------------------------------------- helpers


def _count_edit(
    tally: dict[tuple[str, str], tuple[ExtractionRule, int, Origin]], call: _Call
) -> None:
    if call.failed:
        return  # a failed edit changed nothing; an unanswered one probably did
    for rule in call.edit_rules:
        for path in call.files:
            _rule, count, first = tally.get((rule.id, path), (rule, 0, call.origin))
            tally[(rule.id, path)] = (rule, count + call.edits, first)


def _record(call: ToolCallLike, origin: Origin) -> _Call:
    tool_input: Mapping[str, object] = call.input if isinstance(call.input, Mapping) else {}
    files = tuple(call.files) or _input_files(tool_input)
    return _Call(call.name, tool_input, _command(tool_input), files, origin)


def _call_id(call: ToolCallLike) -> str | None:
    for attribute in ("call_id", "id"):
        value = getattr(call, attribute, None)
        if isinstance(value, str) and value:
            return value
    return None


def _command(tool_input: Mapping[str, object]) -> str | None:
    raw = tool_input.get("command", tool_input.get("cmd"))
    if isinstance(raw, list) and raw and all(isinstance(part, str) for part in raw):
        # Codex runs ["bash", "-lc", "<script>"]: the script is the command that matters.
        parts = raw[2:] if len(raw) >= 3 and raw[1] in ("-c", "-lc") else raw
        raw = " ".join(str(part) for part in parts)
    if isinstance(raw, str) and raw.strip():
        return " ".join(raw.split())
    return None


def _input_files(tool_input: Mapping[str, object]) -> tuple[str, ...]:
    for key in ("file_path", "path", "notebook_path", "absolute_path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return (value.strip(),)
    return ()


def _done_todos(tool_input: Mapping[str, object]) -> list[str]:
    """Completed items of Claude's TodoWrite, Codex's update_plan or Gemini's write_todos."""
    items = tool_input.get("todos", tool_input.get("plan"))
    done: list[str] = []
    if not isinstance(items, list):
        return done
    for item in items:
        if isinstance(item, dict) and item.get("status") in ("completed", "done"):
            for key in ("content", "step", "description", "task"):
                text = item.get(key)
                if isinstance(text, str) and text.strip():
                    done.append(text)
                    break
    return done


def _subject(call: _Call | None) -> str:
    if call is None:
        return "A tool call"
    if call.command is not None:
        return f"`{truncate(call.command, 120)}`"
    return f"{call.name} on {call.files[0]}" if call.files else call.name


def _names(paths: Sequence[str], added: Mapping[str, str] | None = None) -> str:
    added = added or {}
    shown = ", ".join(f"{p} (`{added[p]}`)" if p in added else p for p in paths[:3])
    return shown if len(paths) <= 3 else f"{shown} and {len(paths) - 3} more"


_SENTENCE = re.compile(r"(?<=[.!?:])\s+")
_CHATTER = re.compile(r"(?i)^(?:let me|let's|now|perfect|great|good|ok|okay|i'll|i will)\b")


def _cause(text: str) -> str | None:
    """The agent's first plain statement in ``text``: no hedge, no "let me", five words or more."""
    for sentence in _SENTENCE.split(" ".join(text.split())[:2000]):
        if len(sentence.split()) >= 5 and not _CHATTER.match(sentence):
            if HEDGE.search(sentence) or sentence.endswith("?"):
                return None
            return truncate(sentence.rstrip(":"), _CAUSE_CHARS)
    return None


def _same_or_prepared(failed: _Call, ok: _Call) -> bool:
    """Whether ``ok`` runs what ``failed`` ran: the same call, or the same command after a setup
    step ("pytest" failing, then "source .venv/bin/activate && pytest -x" passing)."""
    if failed.key == ok.key:
        return True
    if failed.command is None or ok.command is None:
        return False
    after_setup = rf"(?:&&|;|\(|\|\|)\s*{re.escape(failed.command)}(?![\w./-])"
    return re.search(after_setup, ok.command) is not None


def _same_path(a: str, b: str) -> bool:
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def _involves(error: _OpenError, path: str) -> bool:
    if error.call is not None and any(_same_path(path, own) for own in error.call.files):
        return True
    name = path.rsplit("/", 1)[-1]
    # Very short names ("a", "x.c") would match error text by accident; a name must stand alone
    # (calc.py is not mentioned by test_calc.py).
    if len(name) < 4 or name not in error.sample:
        return False
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", error.sample) is not None


def _line_at(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end != -1 else len(text)]


# A line that starts like a diagnostic says the most: "ValueError: …" (the last line of a
# traceback), pytest's "E   AssertionError: …", "error[E0425]: …", "fatal: …". The last one wins
# because tracebacks end with the exception. Failing that, the first line naming a failure.
_STRONG = re.compile(
    r"(?m)^[ \t]*(?:E[ \t]+)?(?:[A-Z][\w.]*(?:Error|Exception|Failure)|[Ee]rror|[Ff]atal)"
    r"(?:\[[^\]\n]*\])?:.*$"
    # A linter's rule code and message: "SIM115 Use a context manager for opening files".
    r"|^[ \t]*[A-Z]{1,5}\d{2,4} [A-Z][a-z].*$"
)
# A count of errors ("Found 1 error.") says that it failed, not what failed.
_WEAK = re.compile(
    r"(?im)^(?![ \t]*found \d+ (?:errors?|diagnostics?)\b)"
    r".*\b(?:failed|failure|error|not\s+found|no\s+such|denied|cannot|can't|unable\s+to"
    r"|invalid|refused|timed\s+out)\b.*$"
)
_EXIT_CODE = re.compile(r"(?i)^\s*(?:exit\s+code|exited\s+with)\b.*$")
_NOISE = re.compile(r"^\s*E\s+|</?[a-z_]+>")  # pytest's "E" gutter, <tool_use_error> tags


def error_detail(text: str) -> str:
    """The most informative line of an error output, cut to a readable length."""
    tail = text[-_ERROR_SAMPLE_CHARS:]
    strong = [m.group(0) for m in _STRONG.finditer(tail)]
    if strong:
        line = strong[-1]
    elif weak := _WEAK.search(text[:_ERROR_SAMPLE_CHARS]):
        line = weak.group(0)
    else:
        head = text[:_ERROR_SAMPLE_CHARS].splitlines()
        lines = [ln for ln in head if ln.strip() and not _EXIT_CODE.match(ln)]
        line = lines[0] if lines else (text.strip() or "error")
    return truncate(" ".join(_NOISE.sub(" ", line).split()) or "error", _DETAIL_CHARS)
