"""Unit tests of extraction: every rule family on transcript-like messages, error/fix pairing,
file-change aggregation, dedup, truncation, user rules, and totality on arbitrary text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.capture.extraction import (
    DEFAULT_RULES,
    MessageLike,
    SessionFinding,
    extract,
    load_user_rules,
)
from memoryd.core.capture.findings import finding_id
from memoryd.core.capture.rules import compiled, rule_problem
from memoryd.core.capture.tool_outcomes import error_detail
from memoryd.core.entries import MAX_CONTENT_CHARS, fingerprint


@dataclass(frozen=True)
class Call:
    name: str
    input: dict[str, Any]
    files: tuple[str, ...] = ()
    id: str | None = None


@dataclass(frozen=True)
class Result:
    call_id: str | None
    is_error: bool
    text: str


@dataclass(frozen=True)
class Msg:
    role: str
    text: str = ""
    tool_calls: tuple[Call, ...] = ()
    tool_results: tuple[Result, ...] = ()
    files: tuple[str, ...] = ()
    offset: int = 0
    agent: str = "claude-code"
    session_id: str | None = "sess-1"
    injected: bool = False


def _session(*messages: Msg) -> list[Msg]:
    """Messages with increasing transcript offsets, as a parser would produce them."""
    return [
        Msg(**{**m.__dict__, "offset": m.offset or (i + 1) * 100}) for i, m in enumerate(messages)
    ]


def user(text: str = "", **kw: Any) -> Msg:
    return Msg("user", text, **kw)


def assistant(text: str = "", **kw: Any) -> Msg:
    return Msg("assistant", text, **kw)


def run(text: str, *, role: str = "assistant") -> Msg:
    return Msg(role, tool_calls=(Call("Bash", {"command": text}, id=f"c-{text}"),))


def outcome(text: str, *, error: bool, output: str = "") -> Msg:
    return Msg("user", tool_results=(Result(f"c-{text}", error, output),))


def edit(path: str, call_id: str, **kw: Any) -> Msg:
    return assistant(tool_calls=(Call("Edit", {"file_path": path, **kw}, (path,), call_id),))


def rule_ids(findings: list[SessionFinding]) -> dict[str, str]:
    return {f.content: f.rule_id for f in findings}


def only(findings: list[SessionFinding], rule_id: str) -> SessionFinding:
    matching = [f for f in findings if f.rule_id == rule_id]
    assert len(matching) == 1, findings
    return matching[0]


def test_the_test_message_satisfies_the_protocol() -> None:
    message: MessageLike = Msg("user", "hello")  # checked by mypy when tests are type-checked
    assert extract([message]) == []


# --------------------------------------------------------------------------- rule families


def test_decisions() -> None:
    found = rule_ids(
        extract(
            _session(
                assistant(
                    "I looked at both options. We decided to use msgspec for the wire schema. "
                    "Let's go with SQLite in WAL mode for the store."
                ),
                user("OK. We're going with the ROUTER socket for the daemon side."),
                assistant("We’ll use uv for dependency management from here on."),  # curly quote
            )
        )
    )
    assert found == {
        "We decided to use msgspec for the wire schema.": "decision.decided",
        "Let's go with SQLite in WAL mode for the store.": "decision.adopt",
        "We're going with the ROUTER socket for the daemon side.": "decision.decided",
        "We'll use uv for dependency management from here on.": "decision.adopt",
    }


def test_questions_and_plain_narration_are_not_findings() -> None:
    assert (
        extract(
            _session(
                user("Should we use Redis for the cache?"),
                assistant("I don't see the config file in the repository yet."),
                assistant("Let me read the file first."),
            )
        )
        == []
    )


def test_warnings_and_constraints() -> None:
    found = rule_ids(
        extract(
            _session(
                user("Never commit directly to main."),
                assistant(
                    "The watcher thread must not call the store directly.\n"
                    "- Be careful with cursor offsets when a file is truncated.\n"
                    "Important: avoid blocking calls inside hook handlers."
                ),
            )
        )
    )
    assert found == {
        "Never commit directly to main.": "warning.imperative",
        "The watcher thread must not call the store directly.": "warning.must_not",
        "Be careful with cursor offsets when a file is truncated.": "warning.imperative",
        "Important: avoid blocking calls inside hook handlers.": "warning.imperative",
    }
    caution = extract([assistant("One gotcha: the socket path must stay under 100 bytes long.")])
    assert {f.category for f in caution} == {"warning"}


def test_user_preferences_only_from_the_user() -> None:
    said = (
        "I prefer pytest fixtures over setUp methods. Always run ruff before committing.\n"
        "Don't add comments that restate the code."
    )
    found = extract([user(said)])
    assert rule_ids(found) == {
        "I prefer pytest fixtures over setUp methods.": "preference.prefer",
        "Always run ruff before committing.": "preference.always",
        "Don't add comments that restate the code.": "preference.dont",
    }
    assert {f.category for f in found} == {"preference"}
    assert extract([assistant(said)]) == []


def test_explicit_remember_is_user_intent() -> None:
    (finding,) = extract(
        [user("remember: the staging database is read-only on Fridays. Never deploy then.")]
    )
    # The marker's clause (to the end of its sentence), not the rest of the prompt (issue 17).
    assert finding.content == "the staging database is read-only on Fridays"
    assert finding.user_intent and finding.importance == 1.0
    assert finding.rule_id == "remember.explicit"
    (warned,) = extract([user("Deploy later. remember: never deploy on Fridays. Thanks!")])
    assert warned.content == "never deploy on Fridays"
    assert warned.category == "warning"  # read from the text: "never …"

    (tagged,) = extract([user("We squash-merge feature branches into main #remember")])
    assert tagged.content == "We squash-merge feature branches into main"
    assert tagged.user_intent


def test_remember_edge_cases() -> None:
    assert extract([user("#remember")]) == []  # nothing to remember, never an empty finding
    echoed = extract([assistant("remember: the build uses uv")])
    assert not any(f.user_intent for f in echoed)  # only the user can ask


def test_conventions_architecture_and_confirmed_discoveries() -> None:
    # The discoveries are confirmed: an edit follows them, then a passing run (issue 19).
    confirmed = (
        edit("src/cursor.py", "e1"),
        user(tool_results=(Result("e1", False, "ok"),)),
        run("pytest -q"),
        outcome("pytest -q", error=False, output="3 passed"),
    )
    found = rule_ids(
        extract(
            _session(
                assistant(
                    "By convention, every handler module is named after its request type.\n"
                    "Test files are always named test_<module>.py here.\n"
                    "The registry is responsible for mapping a cwd to its project root.\n"
                    "Turns out the watcher fires twice for every atomic rename.\n"
                    "The root cause was a stale inode in the cursor table.\n"
                    "I found that the index is rebuilt on every start."
                ),
                *confirmed,
            )
        )
    )
    found = {text: rule for text, rule in found.items() if not rule.startswith("file_change")}
    assert found == {
        "By convention, every handler module is named after its request type.": (
            "pattern.convention"
        ),
        "Test files are always named test_<module>.py here.": "pattern.convention",
        "The registry is responsible for mapping a cwd to its project root.": (
            "architecture.structure"
        ),
        "Turns out the watcher fires twice for every atomic rename.": "discovery.root_cause",
        "The root cause was a stale inode in the cursor table.": "discovery.root_cause",
        "I found that the index is rebuilt on every start.": "discovery.found",
    }


def test_task_progress_from_prose_and_todo_lists() -> None:
    todos = [
        {"content": "Fix the unbound variable warning", "status": "completed"},
        {"content": "Add a test for the cache", "status": "in_progress"},
    ]
    plan = [{"step": "Migrate the config loader", "status": "completed"}]
    found = extract(
        _session(
            assistant("I've implemented the retry logic for the fetcher."),
            assistant(tool_calls=(Call("TodoWrite", {"todos": todos}, id="t1"),)),
            assistant(tool_calls=(Call("TodoWrite", {"todos": todos}, id="t2"),)),  # re-sent
            assistant(tool_calls=(Call("update_plan", {"plan": plan}, id="t3"),)),
        )
    )
    assert [(f.rule_id, f.content, f.category) for f in found] == [
        ("progress.done", "I've implemented the retry logic for the fetcher.", "task_progress"),
        ("progress.todo", "Completed: Fix the unbound variable warning", "task_progress"),
        ("progress.todo", "Completed: Migrate the config loader", "task_progress"),
    ]


def test_file_changes_are_aggregated_per_file() -> None:
    found = extract(
        _session(
            edit("src/app.py", "e1"),
            edit("src/app.py", "e2"),
            assistant(
                tool_calls=(
                    Call("MultiEdit", {"edits": [{}, {}, {}]}, ("src/app.py",), "e3"),
                    Call("Write", {"file_path": "README.md"}, (), "e4"),
                    Call("apply_patch", {}, ("a.py", "b.py"), "e5"),
                    Call("Bash", {"command": "ls"}, (), "e6"),
                )
            ),
            edit("src/broken.py", "e7"),
            user(tool_results=(Result("e7", True, "String to replace not found in file."),)),
        )
    )
    changes = {f.content: f.file_paths for f in found if f.category == "file_change"}
    assert changes == {
        "Edited src/app.py (5 edits)": ("src/app.py",),
        "Edited README.md (1 edit)": ("README.md",),
        "Edited a.py (1 edit)": ("a.py",),
        "Edited b.py (1 edit)": ("b.py",),
    }  # the failed edit of src/broken.py changed nothing


# --------------------------------------------------------------------------- errors


def test_error_resolved_by_a_later_successful_run() -> None:
    found = extract(
        _session(
            run("pytest -q"),
            outcome(
                "pytest -q",
                error=True,
                output="Exit code 1\ntests/test_calc.py:3: in test_add\nE   AssertionError: "
                "assert 2 == 3\n=== 1 failed in 0.12s ===",
            ),
            edit("/repo/src/calc.py", "e1"),
            user(tool_results=(Result("e1", False, "ok"),)),
            run("pytest   -q"),  # same command, other spacing
            outcome("pytest   -q", error=False, output="1 passed"),
        )
    )
    error = only(found, "error.tool_failure")
    assert error.content == (
        "`pytest -q` failed: AssertionError: assert 2 == 3 — fixed by editing /repo/src/calc.py, "
        "then `pytest -q` succeeded."
    )
    assert error.resolved_error and error.category == "error" and error.importance == 0.7
    assert error.offset == 200  # where the failure was seen


def test_error_resolved_by_editing_the_file_it_names() -> None:
    found = extract(
        _session(
            run("python -m app"),
            outcome(
                "python -m app",
                error=True,
                output='  File "/repo/app/settings.py", line 4\nSyntaxError: invalid syntax',
            ),
            edit("app/settings.py", "e1"),
            user(tool_results=(Result("e1", False, "ok"),)),
        )
    )
    error = only(found, "error.tool_failure")
    assert error.resolved_error
    assert error.content.endswith("fixed by editing app/settings.py.")


def test_unresolved_error_stays_unresolved() -> None:
    found = extract(
        _session(
            run("npm run build"),
            outcome("npm run build", error=True, output="sh: npm: command not found"),
            edit("src/unrelated.py", "e1"),  # edits a file the error does not involve
        )
    )
    error = only(found, "error.tool_failure")
    assert error.content == "`npm run build` failed: sh: npm: command not found"
    assert not error.resolved_error
    assert error.importance < 0.7


def test_an_edit_followed_by_the_same_failure_is_not_a_fix() -> None:
    found = extract(
        _session(
            run("make"),
            outcome("make", error=True, output="main.c:3: error: expected ';'"),
            edit("main.c", "e1"),
            user(tool_results=(Result("e1", False, "ok"),)),
            run("make"),
            outcome("make", error=True, output="main.c:3: error: expected ';'"),
        )
    )
    (error,) = [f for f in found if f.category == "error"]
    assert not error.resolved_error


def test_a_failed_edit_is_tool_mechanics_not_a_finding() -> None:
    found = extract(
        _session(
            edit("src/x.py", "e1"),
            user(
                tool_results=(Result("e1", True, "<tool_use_error>File not read</tool_use_error>"),)
            ),
            edit("src/x.py", "e2"),
            user(tool_results=(Result("e2", False, "ok"),)),
        )
    )
    assert not [f for f in found if f.category == "error"]


# Real lines of the Claude Code samples (shared/samples/claude/): the harness's refusals.
HARNESS_ERRORS = [
    "<tool_use_error>File has not been read yet. Read it first before writing to it."
    "</tool_use_error>",
    "<tool_use_error>String to replace not found in file.\nString: **Audio Routing**: Web Audio"
    " API nodes chained together:</tool_use_error>",
    "<tool_use_error>Error: No such tool available: AskUserQuestion</tool_use_error>",
    "Shell dce0af is not running, so cannot be killed (status: killed)",
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it"
    " was a file edit, the new_string was NOT written to the file). STOP what you are doing and"
    " wait for the user to tell you how to proceed.",
    "The user doesn't want to take this action right now. STOP what you are doing and wait for"
    " the user to tell you how to proceed.",
]


@pytest.mark.parametrize("output", HARNESS_ERRORS)
def test_harness_errors_and_declined_tool_uses_never_become_findings(output: str) -> None:
    for call in (run("npm install"), edit("CLAUDE.md", "c1")):
        call_id = call.tool_calls[0].id
        found = extract(
            _session(
                call,
                user(tool_results=(Result(call_id, True, output),)),
                run("npm install"),
                outcome("npm install", error=False, output="added 1 package"),
            )
        )
        assert not [f for f in found if f.category == "error"], output


def test_results_pair_in_order_when_calls_have_no_id() -> None:
    found = extract(
        _session(
            assistant(tool_calls=(Call("Bash", {"command": ["bash", "-lc", "cargo test"]}),)),
            user(tool_results=(Result(None, True, "error[E0425]: cannot find value `x`"),)),
            assistant(tool_calls=(Call("Bash", {"command": "cargo test"}),)),
            user(tool_results=(Result(None, False, "test result: ok"),)),
        )
    )
    error = only(found, "error.tool_failure")
    assert error.resolved_error
    assert error.content.startswith("`cargo test` failed: error[E0425]: cannot find value `x`")


def test_an_error_without_its_call_is_kept() -> None:
    (error,) = extract([user(tool_results=(Result("unknown", True, "Permission denied"),))])
    assert error.content == "A tool call failed: Permission denied"
    assert not error.resolved_error


@pytest.mark.parametrize(
    ("output", "detail"),
    [
        (
            'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\n'
            '    raise ValueError("bad port")\nValueError: bad port',
            "ValueError: bad port",
        ),
        (
            "WARN ty is pre-release software\n\nerror[call-non-callable]: Object is not callable\n"
            "427 |             except PermissionError:\n",
            "error[call-non-callable]: Object is not callable",
        ),
        (
            "main.c:3:5: error: expected ';' before '}' token\n1 error generated.",
            "main.c:3:5: error:",
        ),
        ("<tool_use_error>File has not been read yet.</tool_use_error>", "File has not been read"),
        ("Exit code 2\nusage: tool [-h]", "usage: tool [-h]"),
    ],
)
def test_error_detail_picks_the_telling_line(output: str, detail: str) -> None:
    assert error_detail(output).startswith(detail)


# --------------------------------------------------------------------------- general behaviour


def test_injected_messages_are_skipped() -> None:
    injected = [
        user("remember: never use tabs", injected=True),
        assistant("We decided to use tabs.", injected=True),
        assistant(tool_calls=(Call("Edit", {}, ("a.py",), "e1"),), injected=True),
    ]
    assert extract(_session(*injected)) == []


def test_code_blocks_are_not_prose() -> None:
    found = extract(
        [
            assistant(
                "Here is the fix:\n```python\n# Never commit secrets to the repository\n"
                "x = 1\n```\nWe decided to keep the retry count at three."
            )
        ]
    )
    assert [f.content for f in found] == ["We decided to keep the retry count at three."]


def test_long_sentences_are_cut_at_a_word_boundary() -> None:
    sentence = "We decided to use " + " ".join(f"word{i}" for i in range(200)) + "."
    (finding,) = extract([assistant(sentence)])
    assert len(finding.content) <= MAX_CONTENT_CHARS
    assert finding.content.endswith("…")
    kept = finding.content[:-1]
    assert sentence.startswith(kept) and sentence[len(kept)] == " "


def test_a_single_huge_token_is_still_cut() -> None:
    (finding,) = extract([user("remember: " + "x" * 2000)])
    assert len(finding.content) == MAX_CONTENT_CHARS


def test_dedup_keeps_the_most_important() -> None:
    sentence = "I prefer that we always run ruff before every commit."
    found = extract(_session(assistant(sentence), user(sentence), assistant(sentence)))
    (finding,) = found
    assert finding.rule_id == "preference.prefer"  # 0.7, the user's; beats pattern.convention 0.6
    assert finding.offset == 200

    twice = extract([assistant("Never commit directly to main, we must not break the build.")])
    assert [f.rule_id for f in twice] == ["warning.imperative"]  # 0.75 over warning.must_not


def test_ids_are_deterministic_per_session() -> None:
    messages = [assistant("We decided to use msgspec for the wire schema.")]
    first, again = extract(messages), extract(messages)
    assert first == again
    (finding,) = first
    assert finding.fingerprint == fingerprint(finding.content)
    assert finding.id == finding_id("sess-1", finding.fingerprint)
    (other,) = extract([Msg(**{**messages[0].__dict__, "session_id": "sess-2"})])
    assert other.id != finding.id and other.fingerprint == finding.fingerprint


def test_findings_carry_their_origin() -> None:
    (finding,) = extract(
        [
            Msg(
                "assistant",
                "The root cause was a missing await in store.py.",
                files=("/repo/daemon/store.py", "/repo/other.py"),
                offset=4242,
                agent="codex",
                session_id="s-9",
            )
        ]
    )
    assert (finding.agent, finding.session_id, finding.offset) == ("codex", "s-9", 4242)
    assert finding.file_paths == ("/repo/daemon/store.py",)  # only the files it mentions


def test_redact_runs_before_fingerprinting() -> None:
    (finding,) = extract(
        [user("remember: the API key is sk-live-1234")],
        redact=lambda text: text.replace("sk-live-1234", "[REDACTED:key]"),
    )
    assert finding.content == "the API key is [REDACTED:key]"
    assert finding.fingerprint == fingerprint("the API key is [REDACTED:key]")


# --------------------------------------------------------------------------- user rules


def test_default_rules_are_valid_and_unique() -> None:
    assert all(rule_problem(rule) is None for rule in DEFAULT_RULES)
    assert len({rule.id for rule in DEFAULT_RULES}) == len(DEFAULT_RULES)


def test_user_rules_load_and_apply() -> None:
    rules = load_user_rules(
        [
            {
                "id": "team.ticket",
                "category": "task_progress",
                "applies_to": ["user", "assistant"],
                "pattern": r"\bclosed\s+(?P<ticket>[A-Z]+-\d+)",
                "importance": 0.5,
                "confidence": 0.9,
                "template": "Closed ticket {ticket}",
                "keywords": ["closed"],
            },
            {
                "id": "team.migrations",
                "category": "task_progress",
                "applies_to": ["tool_call"],
                "pattern": r"^Bash .*alembic upgrade",
                "importance": 1,
                "confidence": 1,
                "template": "Ran database migrations: {text}",
            },
            {
                "id": "team.denied",
                "category": "warning",
                "applies_to": ["tool_result_error"],
                "pattern": "permission denied",
                "importance": 0.6,
                "confidence": 0.6,
            },
        ]
    )
    found = extract(
        _session(
            assistant("Good news: I closed PROJ-123 after the review."),
            run("alembic upgrade head"),
            outcome("alembic upgrade head", error=True, output="ls: /root: Permission denied"),
        ),
        DEFAULT_RULES + rules,
    )
    assert {f.content: f.rule_id for f in found if f.rule_id.startswith("team.")} == {
        "Closed ticket PROJ-123": "team.ticket",
        "Ran database migrations: Bash alembic upgrade head": "team.migrations",
        "ls: /root: Permission denied": "team.denied",
    }


_VALID = {
    "id": "mine",
    "category": "decision",
    "applies_to": ["user"],
    "pattern": "we picked",
    "importance": 0.5,
    "confidence": 0.5,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pattern": "(unclosed"}, "pattern does not compile"),
        ({"importance": 1.5}, r"<= 1.0 - at `\$.importance`"),
        ({"category": "gossip"}, "Invalid enum value 'gossip'"),
        ({"applies_to": ["robot"]}, "Invalid enum value 'robot'"),
        ({"applies_to": []}, "length >= 1"),
        ({"colour": "red"}, "unknown field `colour`"),
        ({"template": "{missing}"}, "unknown placeholders"),
        ({"keywords": ["Picked"]}, "keywords must be lowercase"),
        ({"user_intent": True, "applies_to": ["assistant"]}, "user_intent rules must apply"),
        ({"collect": "file_edits"}, "needs applies_to \\['tool_call'\\]"),
        ({"unit": "message", "applies_to": ["tool_call"]}, "unit 'message' only applies"),
        ({"id": "decision.decided"}, "id is already used"),
        ({"id": "Not An Id"}, "id"),
    ],
)
def test_invalid_user_rules_name_the_rule(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        load_user_rules([_VALID | {"id": "fine"}, _VALID | change])
    assert "extraction rule #2" in str(caught.value)


def test_duplicate_user_rule_ids_and_non_objects_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"#2 \('mine'\): id is already used"):
        load_user_rules([_VALID, _VALID])
    with pytest.raises(ValueError, match="#1: Expected `object`"):
        load_user_rules(["not a rule"])  # type: ignore[list-item]


# --------------------------------------------------------------------------- totality

_PHRASES = st.sampled_from(
    [
        "remember:",
        "#remember",
        "We decided to",
        "never",
        "Don't",
        "I prefer",
        "turns out",
        "\n```\n",
        ". ",
        "?",
        "\n- ",
        "we'll use",
        "the root cause was",
        " ",
        "x" * 600,
    ]
)
_TRIGGERS = st.sampled_from(
    [
        "we will use",
        "we are going to adopt",
        "let's switch to",
        "we have decided",
        "decision:",
        "I opted for",
        "going with",
        "must not",
        "mustn't",
        "should avoid",
        "is not allowed",
        "never push",
        "watch out for",
        "pitfalls",
        "I'd rather",
        "my preference",
        "I like using",
        "from now on",
        "going forward",
        "do not",
        "stop",
        "by convention",
        "the pattern is",
        "naming scheme",
        "style guide",
        "following the existing style",
        "are always named",
        "is responsible for",
        "entry point",
        "composition root",
        "layer owns",
        "talks to",
        "communicates via",
        "sits behind",
        "data flows through",
        "turned out",
        "the actual culprit was",
        "the reason is",
        "we noticed that",
        "caused by",
        "it looks like the",
        "we've now fixed",
        "is now passing",
        "all 12 tests now pass",
        "successfully migrated",
        "Done: ",
        "Note: never",
    ]
)
_TEXT = st.lists(st.one_of(st.text(max_size=80), _PHRASES), max_size=12).map("".join)


_PROSE_RULES = [r for r in DEFAULT_RULES if r.keywords]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=20), _PHRASES, _TRIGGERS), max_size=10).map(" ".join))
def test_every_default_match_contains_a_keyword(text: str) -> None:
    # Otherwise the keyword prefilter would hide matches the pattern finds.
    for rule in _PROSE_RULES:
        match = compiled(rule.pattern).search(text)
        if match is not None:
            matched = " ".join(match.group(0).lower().split())
            assert any(k in matched for k in rule.keywords), (rule.id, matched)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), _TEXT), max_size=6))
def test_extract_is_total_and_contents_fit(parts: list[tuple[str, str]]) -> None:
    messages = [
        Msg(
            role,
            text,
            tool_calls=(Call("Bash", {"command": text[:40]}, id=f"c{i}"),),
            tool_results=(Result(f"c{i}", i % 2 == 0, text),),
            offset=i,
        )
        for i, (role, text) in enumerate(parts)
    ]
    for finding in extract(messages):
        assert 0 < len(finding.content) <= MAX_CONTENT_CHARS
        assert finding.content.strip() == finding.content


def test_remembered_text_matches_what_capture_extracts() -> None:
    from memoryd.core.capture.extraction import remembered_text
    from memoryd.core.capture.transcript import Message
    from memoryd.core.entries import fingerprint

    prompt = "The checkout tests are flaky again. remember: always run make lint before pushing"
    hook_text = remembered_text(prompt, "claude")
    captured = extract([Message(role="user", agent="claude", offset=0, text=prompt)])
    intent = [f for f in captured if f.user_intent]
    assert hook_text is not None and len(intent) == 1
    assert fingerprint(hook_text) == intent[0].fingerprint
    assert remembered_text("nothing to keep here", "claude") is None
    # Other statements of the user's are findings for promotion and review, not entries now.
    for prompt in (
        "Please fix the login bug by adding a retry loop around the call",
        "I want the tests to stay dependency free, keep it that way",
        "Don't use bcrypt in this project, we use argon2 instead",
    ):
        assert remembered_text(prompt, "claude") is None, prompt


# --------------------------------------------------------------------------- the user's voice
# Real lines of the Claude Code samples (shared/samples/claude/), shortened.

DECLINED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it"
    " was a file edit, the new_string was NOT written to the file). STOP what you are doing and"
    " wait for the user to tell you how to proceed."
)


def test_a_declined_tool_use_with_a_reason_is_the_users_correction() -> None:
    reason = (
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it"
        " was a file edit, the new_string was NOT written to the file). The user provided the"
        " following reason for the rejection:  use pnpm"
    )
    found = extract(_session(run("npm install"), outcome("npm install", error=True, output=reason)))
    (finding,) = found
    assert (finding.rule_id, finding.content, finding.category) == (
        "user.correction",
        "use pnpm (declined: `npm install`)",
        "preference",
    )
    assert finding.user_intent


def test_the_users_next_words_after_an_interrupted_tool_use_are_a_correction() -> None:
    prompt = (
        "OK, so first commit the changes related to the previous task, adding support for tar,"
        " then proceed with this new plan (reporting archive errors)."
    )
    found = extract(
        _session(
            assistant(tool_calls=(Call("ExitPlanMode", {"plan": "…"}, id="p1"),)),
            user(tool_results=(Result("p1", True, DECLINED),)),
            user("[Request interrupted by user for tool use]", injected=True),
            user(prompt),
            user("Excellent work, thank you!"),  # not a correction: nothing was refused before it
        )
    )
    (finding,) = found
    assert (finding.rule_id, finding.content) == ("user.correction", prompt)
    assert finding.user_intent and finding.category == "preference"


def test_answers_to_a_question_tool_are_the_users_decision() -> None:
    answer = (
        'User has answered your questions: "How should corrupted archives be reported in the'
        ' manifest?"="Option C: Extra field". You can now continue with the user\'s answers in'
        " mind."
    )
    (finding,) = extract(_session(user(tool_results=(Result("q1", False, answer),))))
    assert finding.content == (
        "How should corrupted archives be reported in the manifest? → Option C: Extra field"
    )
    assert finding.user_intent and finding.category == "decision"


def test_user_directions_constraints_and_limitations_keep_their_whole_message() -> None:
    said = {
        "user.constraint": (
            "I have both Node and Python, but I don't want to make it only work for me or make"
            " assumptions about people's env. Would there be a cross-platform solution?"
        ),
        "user.direction": (
            "New feature: we support .zip, but I've seen an archive that contains embedded"
            " tar.gz. We should support those (.tar, .tar.gz) as well."
        ),
        "user.limitation": "Oh, I just found out that this is not supported by Chrome :(",
    }
    for rule_id, text in said.items():
        (finding,) = extract([user(text)])
        assert (finding.rule_id, finding.content) == (rule_id, text)
        assert finding.user_intent
    # Asking to explore is not a decision; the agent saying the same is not the user's voice.
    assert extract([user("As a first step let's figure out the simplest way to serve it.")]) == []
    assert extract([assistant(said["user.direction"])]) == []


def test_a_short_reply_is_kept_with_what_the_agent_had_just_said() -> None:
    (finding,) = extract(
        _session(
            assistant("The most cross-platform approach is a package.json with a dev server."),
            user("ok, fine, let's do vite"),
        )
    )
    assert finding.content == (
        "ok, fine, let's do vite (in reply to: The most cross-platform approach is a package.json"
        " with a dev server.)"
    )


def test_hedged_sentences_never_stand_alone() -> None:
    assert (
        extract(
            [
                assistant(
                    "The issue is likely that the route is cached.\n"
                    "I think the root cause is the tokenizer path.\n"
                    "It looks like the bug is in the renderer."
                )
            ]
        )
        == []
    )


# --------------------------------------------------------------------------- errors as an arc


def test_a_confirmed_diagnosis_replaces_the_guesses_before_it() -> None:
    found = extract(
        _session(
            run("uv tool install ."),
            outcome(
                "uv tool install .",
                error=True,
                output="Exit code 1\n  × Failed to build\nValueError: Unable to determine which"
                " files to ship inside the wheel",
            ),
            assistant("The issue is likely that the README is missing from the sdist."),
            assistant(
                "I see the issue - Hatchling needs to be told explicitly which file to include."
                " Let me add the necessary configuration:"
            ),
            edit(
                "pyproject.toml",
                "e1",
                old_string="[project.scripts]",
                new_string="[project.scripts]\n[tool.hatch.build.targets.wheel]\nx = 1",
            ),
            user(tool_results=(Result("e1", False, "ok"),)),
            run("uv tool install ."),
            outcome("uv tool install .", error=False, output="Installed 1 executable"),
        )
    )
    assert {f.category for f in found} == {"error", "file_change"}  # no guess among them
    (error,) = [f for f in found if f.category == "error"]
    assert error.content == (
        "`uv tool install .` failed: ValueError: Unable to determine which files to ship inside"
        " the wheel. Cause: I see the issue - Hatchling needs to be told explicitly which file to"
        " include. — fixed by editing pyproject.toml (`[tool.hatch.build.targets.wheel]`), then"
        " `uv tool install .` succeeded."
    )
    assert "likely" not in error.content


def test_the_same_failure_twice_is_one_finding_with_the_fix_that_held() -> None:
    failure = "error[call-non-callable]: Object of type `Skipped` is not callable"
    found = extract(
        _session(
            run("uv run ty check"),
            outcome("uv run ty check", error=True, output=failure),
            edit("test/test_cache.py", "e1", old_string="a", new_string="import pytest"),
            user(tool_results=(Result("e1", False, "ok"),)),
            run("uv run ty check"),
            outcome("uv run ty check", error=True, output=failure),
            edit(
                "test/test_cache.py", "e2", old_string="b", new_string="x()  # type: ignore[misc]"
            ),
            user(tool_results=(Result("e2", False, "ok"),)),
            run("uv run ty check"),
            outcome("uv run ty check", error=False, output="All checks passed!"),
        )
    )
    (error,) = [f for f in found if f.category == "error"]
    assert error.resolved_error and "# type: ignore[misc]" in error.content


def test_a_linters_rule_line_says_more_than_its_error_count() -> None:
    output = (
        "Exit code 1\nSIM115 Use a context manager for opening files\n"
        "   --> deep_manifest/deep_manifest.py:191:25\nFound 1 error."
    )
    assert error_detail(output) == "SIM115 Use a context manager for opening files"


def test_a_command_that_passes_after_a_setup_step_resolves_its_failure() -> None:
    found = extract(
        _session(
            run("pytest"),
            outcome(
                "pytest",
                error=True,
                output="Exit code 127\n/bin/bash: line 1: pytest: command not found",
            ),
            assistant("Need to activate the virtual environment."),
            run("(source .venv/bin/activate && pytest)"),
            outcome("(source .venv/bin/activate && pytest)", error=False, output="40 passed"),
            run("cd /tmp && tool"),
            outcome("cd /tmp && tool", error=True, output="No PR found"),
            run("cd /tmp && tool --help"),  # another use of the tool, not the same command
            outcome("cd /tmp && tool --help", error=False, output="usage"),
        )
    )
    venv, other = [f for f in found if f.category == "error"]
    assert venv.resolved_error and venv.content == (
        "`pytest` failed: /bin/bash: line 1: pytest: command not found. Cause: Need to activate"
        " the virtual environment. — then `(source .venv/bin/activate && pytest)` succeeded."
    )
    assert not other.resolved_error


def test_a_users_limitation_is_a_warning() -> None:
    said = "Let's serve it on localhost (as I believe running off file:// has some limitations)"
    (finding,) = extract([user(said)])
    assert (finding.rule_id, finding.category, finding.user_intent) == (
        "user.limitation",
        "warning",
        True,
    )


def test_a_diagnosis_stands_only_when_confirmed_and_the_last_guess_wins() -> None:
    wrong = "The issue is the route cache in the tokenizer page."
    right = "The root cause was the URL in angle brackets, which MDX parses as a tag."
    (unconfirmed,) = extract([assistant(wrong)])
    assert unconfirmed.importance < 0.7  # no edit and passing run after it: never "high"
    found = extract(
        _session(
            assistant(wrong),
            assistant(right),
            edit("docs/page.mdx", "e1"),
            user(tool_results=(Result("e1", False, "ok"),)),
            run("npm run build"),
            outcome("npm run build", error=False, output="built"),
        )
    )
    assert [f.content for f in found if f.category == "discovery"] == [right]


def test_a_users_request_with_an_object_is_kept_a_bare_one_is_not() -> None:
    said = (
        'The above "status report" is very interesting and good to keep as milestone information.'
        " Please create an empty commit with that content."
    )
    (finding,) = extract([user(said)])
    assert (finding.rule_id, finding.content, finding.user_intent) == ("user.request", said, True)
    assert extract([user("please fix these")]) == []


# --------------------------------------------------------------------------- what the user accepted

# The agent's summary of a turn and the user's next prompt (JSSoundRecorder sample, abridged).
SUMMARY = (
    "Perfect! I've successfully modernized the Web Audio APIs for cross-browser compatibility."
    " Here's what I updated:\n## ✅ Changes Made\n"
    "### 1. **Modern getUserMedia API** ([recordLive.js:108-124](js/recordLive.js#L108-L124))\n"
    "- Changed from callback-based `navigator.getUserMedia` to Promise-based"
    " `navigator.mediaDevices.getUserMedia`\n"
    "- Made init function `async` for cleaner error handling\n"
    "### 3. **Modern Filter API** ([drone.js:23](js/drone.js#L23))\n"
    "- Changed from deprecated `filter.BANDPASS` constant to modern `'bandpass'` string\n"
    "Would you like me to tackle that next?"
)


def test_what_the_agent_changed_is_kept_when_the_user_goes_on_from_it() -> None:
    found = extract(_session(assistant(SUMMARY), user("Let's also Migrate to AudioWorklet")))
    changes = [f for f in found if f.rule_id == "decision.accepted_change"]
    assert [f.content for f in changes] == [
        "Modern getUserMedia API (recordLive.js:108-124): Changed from callback-based"
        " `navigator.getUserMedia` to Promise-based `navigator.mediaDevices.getUserMedia`",
        "Modern Filter API (drone.js:23): Changed from deprecated `filter.BANDPASS` constant to"
        " modern `'bandpass'` string",
    ]
    assert all(f.accepted and f.category == "decision" and f.offset == 100 for f in changes)
    assert not any(f.accepted for f in found if f.user_intent)  # the user's own words: intent


@pytest.mark.parametrize(
    "after",
    [
        [],  # the session ended on it: nobody accepted anything
        [user("No, that's wrong: keep the callback API for old Safari")],
        [user("It still doesn't work in Firefox")],
        [user("[Request interrupted by user]", injected=True), user("Let's do the drone first")],
    ],
)
def test_what_the_user_did_not_accept_is_not_kept(after: list[Msg]) -> None:
    found = extract(_session(assistant(SUMMARY), *after))
    assert not [f for f in found if f.rule_id == "decision.accepted_change" or f.accepted]


def test_a_declined_tool_use_after_the_reply_accepts_nothing() -> None:
    found = extract(
        _session(
            assistant(SUMMARY),
            run("npm install"),
            outcome("npm install", error=True, output=DECLINED),
            user("use pnpm"),
        )
    )
    assert not [f for f in found if f.accepted]


def test_an_accepted_reply_marks_the_agents_other_findings_too() -> None:
    said = (
        "**Project Nature**: Pure client-side web audio app.\n- The pricing service is"
        " responsible for currency conversion."
    )
    (finding,) = extract(_session(assistant(said), user("OK, let's fix the broken APIs first")))
    assert finding.rule_id == "architecture.structure" and finding.accepted
    (alone,) = extract([assistant(said)])
    assert not alone.accepted


def test_near_duplicates_merge_into_the_latest_wording() -> None:
    # deep-manifest: the plan and the closing summary say the same convention.
    plan = "- Same `//` path separator convention for consistency"
    summary = "- Same `//` path separator convention for consistency with ZIP handling"
    found = extract(_session(assistant(plan), assistant("Now let me run the tests:"),
                             assistant(summary)))  # fmt: skip
    (finding,) = found
    assert finding.content == summary.lstrip("- ") and finding.offset == 300
    # A user's statement outranks the agent's near copy of it, whichever came first.
    said = "We should keep the same path separator convention for nested archives"
    echo = "You should keep the same path separator convention for nested archives, noted."
    (kept,) = extract(_session(user(said), assistant(echo)))
    assert kept.user_intent and kept.content == said
    # Two statements sharing a few words are two facts.
    other = "Same `//` path separator in the manifest of every archive entry"
    assert len(extract(_session(assistant(plan), assistant(other + " convention")))) == 2
