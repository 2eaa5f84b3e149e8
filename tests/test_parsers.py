"""Transcript parsers (SPEC §6): exact counts over every real sample in ``shared/samples`` and over
our own fixtures for the formats no sample shows, plus properties: no input makes a parser raise.

How the expected numbers were obtained: not from the parser. Each file was listed line by line
(record type, content block types, isMeta/isSidechain flags, first characters of the text) and
tallied by hand; the tool numbers were cross-checked with jq over the raw files, e.g.
``jq -c '.message.content? | arrays | .[] | select(.type=="tool_result" and .is_error==true)'``
for Claude errors and ``jq -r '[.type, .payload.type, .payload.role] | join(" ")' | uniq -c``
for Codex. The breakdown of every number is in the comment beside it. ``files`` is the number of
distinct paths touched; ``injected`` the number of messages marked injected (consumers skip them).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.capture.parsers import (
    GeminiState,
    ParserState,
    claude,
    codex,
    detect_agent,
    gemini,
    new_state,
    parse_document,
    parse_line,
)
from memoryd.core.capture.transcript import (
    Agent,
    Message,
    files_touched,
    parse_timestamp,
    split_injected,
)

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"


class Expected(NamedTuple):
    messages: int
    tool_calls: int
    tool_results: int
    errors: int
    files: int
    injected: int
    malformed: int = 0
    unknown: tuple[tuple[str, int], ...] = ()


def parse_file(path: Path, agent: Agent) -> tuple[list[Message], ParserState]:
    """Feed a file to the parser the way the tailer will: whole lines with their byte offsets."""
    state = new_state(agent, path)
    data = path.read_bytes()
    if path.suffix == ".json":
        assert isinstance(state, GeminiState)
        return parse_document(data, state), state
    messages: list[Message] = []
    offset = 0
    for line in data.splitlines(keepends=True):
        messages += parse_line(agent, line, offset, state)
        offset += len(line)
    return messages, state


def assert_counts(messages: list[Message], state: ParserState, want: Expected) -> None:
    stats = state.stats
    got = Expected(
        messages=stats.messages,
        tool_calls=stats.tool_calls,
        tool_results=stats.tool_results,
        errors=stats.errors,
        files=stats.files,
        injected=stats.skipped_injected,
        malformed=stats.malformed,
        unknown=tuple(sorted(stats.unknown_records.items())),
    )
    assert got == want
    # The stats are the sum of what was returned, not a separate guess.
    assert len(messages) == want.messages
    assert sum(len(m.tool_calls) for m in messages) == want.tool_calls
    assert sum(r.is_error for m in messages for r in m.tool_results) == want.errors
    assert sum(m.injected for m in messages) == want.injected
    assert len({f for m in messages for f in m.files}) == want.files


# ---------------------------------------------------------------- real samples (shared/samples)

SAMPLE_COUNTS: dict[str, Expected] = {
    # 54 lines: 4 summary (no message), 20 assistant (6 text + 14 tool_use), 18 user (4 string
    # prompts + 14 tool_result), 12 old-style system records with hook output in `content`.
    # 14 calls, 14 results, 2 is_error (the two `uv run ty check` failures); the only file is
    # test_cache.py (Read x3, MultiEdit, Edit x3). Injected: the isMeta caveat, <bash-input>,
    # <bash-stdout> and the 12 system hook records = 15; "please fix these" is the one prompt.
    "claude/326189cf-5676-4237-8cde-1ce80aae4a9f.jsonl": Expected(50, 14, 14, 2, 1, 15),
    # 46 lines: 28 assistant (11 text + 17 tool_use), 18 user (1 prompt + 17 tool_result).
    # 1 error (Edit before Read); files tokenizer.js and tokenizer.css (Grep paths are not files).
    "claude/b25638d7-b104-4f06-a797-70ac33d069ed.jsonl": Expected(46, 17, 17, 1, 2, 0),
    # The three long sessions of issue 19, tallied with jq (type counts, content blocks, the
    # text blocks of every user line listed and read):
    # 292 lines: 200 assistant (120 with text or tool_use), 82 user (76 tool_result lines, 6 with
    # text), 10 queue-operation. 76 calls, 76 results, 7 is_error. Text lines: 5 with an
    # <ide_selection>/<ide_opened_file> block beside a prompt (2 messages each) and one
    # "[Request interrupted by user for tool use]" = 11 messages, 6 injected. Files: README.md,
    # extract-coderabbit-feedback.py, pyproject.toml (Read and Edit).
    "claude/cb2e607c-c758-415a-8b45-c49e4631906a.jsonl": Expected(207, 76, 76, 7, 3, 6),
    # 316 lines: 177 assistant (all with text or tool_use), 122 user (108 tool_result lines, 14
    # with text), 15 file-history-snapshot, 2 summary. 108 calls, 108 results, 4 is_error. Text
    # lines: 2 isMeta caveats, 2 <command-name>, 2 <local-command-stdout>, 1 "[Request
    # interrupted …]" (7 injected) and 7 prompts. Files: 9 paths of Read/Edit/Write (the plan
    # file under ~/.claude included).
    "claude/a7da6a22-facc-4fcd-8bab-f83c87862004.jsonl": Expected(299, 108, 108, 4, 9, 7),
    # 211 lines: 120 assistant (84 with text or tool_use), 79 user (71 tool_result lines, 8 with
    # text), 12 queue-operation. 71 calls, 71 results, 6 is_error. Text lines: the /init
    # <command-message>, its isMeta prompt, 2 prompts each beside an <ide_*> block (2 messages
    # each), "[Request interrupted …]" and 3 prompts = 10 messages, 5 injected. Files: 16 paths
    # of Read/Edit/Write.
    "claude/7acd37a8-2745-4b58-a8a9-46164b22ad9e.jsonl": Expected(165, 71, 71, 6, 16, 5),
    # 63 lines: 4 developer + 3 user + 6 assistant response_item messages, 5 function_call,
    # 5 function_call_output, 1 event_msg user_message (the prompt); the rest is reasoning,
    # token_count, agent_* mirrors, turn_context. Injected: 4 developer + 3 user response items
    # (two context blocks, redacted by the publisher but without a user_message event, and the
    # mirror of the prompt). Outputs are redacted: no exit code, so no errors; MCP tools, no files.
    "codex/rollout-2026-02-23T20-34-25-019c8bfe-ec25-79e0-97d7-bda6a9c575ff.jsonl": Expected(
        24, 5, 5, 0, 0, 7
    ),
    # 11 lines: session_meta, 3 user response items (AGENTS.md, <environment_context>, mirror of
    # the prompt: all injected), 1 user_message event (the prompt), 6 turn_context.
    "codex/sample_codex_session.jsonl": Expected(4, 0, 0, 0, 0, 3),
    # 5 lines: metadata, user, $set, a gemini turn with one run_shell_command call and its
    # result (assistant + tool message), a gemini text reply. Shell commands name no files.
    "gemini/jsonl_v040.jsonl": Expected(4, 1, 1, 0, 0, 0),
}


@pytest.fixture(scope="module")
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.skip(f"shared samples not found at {SAMPLES} (CI clones shared/ beside the repo)")
    return SAMPLES


def test_every_sample_has_expected_counts(samples: Path) -> None:
    found = {
        p.relative_to(samples).as_posix()
        for p in samples.rglob("*")
        if p.is_file() and p.suffix in {".json", ".jsonl"}
    }
    assert found == set(SAMPLE_COUNTS), "a sample was added or removed: count it by hand here"


@pytest.mark.parametrize("name", sorted(SAMPLE_COUNTS))
def test_sample_counts(samples: Path, name: str) -> None:
    path = samples / name
    agent: Agent = path.parent.name  # type: ignore[assignment]
    messages, state = parse_file(path, agent)
    assert_counts(messages, state, SAMPLE_COUNTS[name])
    data = path.read_bytes()
    for message in messages:
        assert message.agent == agent
        assert message.offset == 0 or data[message.offset - 1 : message.offset] == b"\n"
        assert message.timestamp is not None
        assert message.session_id


def _prompts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "user" and not m.injected]


def test_claude_sample_details(samples: Path) -> None:
    path = samples / "claude" / "326189cf-5676-4237-8cde-1ce80aae4a9f.jsonl"
    messages, _ = parse_file(path, "claude")
    assert _prompts(messages) == ["please fix these"]
    failed = [m for m in messages for r in m.tool_results if r.is_error]
    assert all("ty is pre-release software" in m.tool_results[0].text for m in failed)
    assert {m.cwd for m in messages} == {"/Users/dain/workspace/claude-code-log"}
    assert {m.session_id for m in messages} == {"326189cf-5676-4237-8cde-1ce80aae4a9f"}
    assert all(m.subagent_id is None and m.parent_session_id is None for m in messages)


def test_codex_sample_details(samples: Path) -> None:
    messages, state = parse_file(samples / "codex" / "sample_codex_session.jsonl", "codex")
    assert _prompts(messages) == [
        "can you analyse the MD files in this directory and determine if the info we have is "
        "clear enough to start planning the migration?"
    ]
    assert state.session_id == "019b64e5-57fa-7463-b644-fba7e456f905"
    assert {m.cwd for m in messages} == {"/Users/macmini/Code/homelab-migration"}


def test_gemini_sample_details(samples: Path) -> None:
    messages, _ = parse_file(samples / "gemini" / "jsonl_v040.jsonl", "gemini")
    assert _prompts(messages) == ["Say hello and list files."]
    (call,) = [c for m in messages for c in m.tool_calls]
    (result,) = [r for m in messages for r in m.tool_results]
    assert (call.name, call.input["command"]) == ("run_shell_command", "ls -F")
    assert result.call_id == call.id and "README.md" in result.text


# ------------------------------------------------------- our fixtures (tests/fixtures/transcripts)

CLAUDE_SESSION = "7d3f6a10-2b4c-4e8f-9a1d-0c5e7b9f2a61"
CLAUDE_DIR = f"claude/projects/-home-dev-shop/{CLAUDE_SESSION}"
CODEX_NEW = (
    "codex/sessions/2026/03/01/"
    "rollout-2026-03-01T10-00-00-0199c0de-4a5b-7c6d-8e9f-0a1b2c3d4e5f.jsonl"
)
CODEX_OLD = (
    "codex/sessions/2025/04/20/"
    "rollout-2025-04-20T09-15-00-3f1e2d4c-5b6a-4789-9abc-def012345678.jsonl"
)
GEMINI_HASH = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
GEMINI_LEGACY = f"gemini/tmp/{GEMINI_HASH}/chats/session-2025-11-02T09-30-ab12cd34.json"
GEMINI_JSONL = "gemini/tmp/shop/chats/session-2026-05-01T10-00-c0ffee12.jsonl"
GEMINI_SUB = (
    "gemini/tmp/shop/chats/c0ffee12-aaaa-4bbb-8ccc-dddddddddddd/"
    "5eed0001-1111-4222-8333-444444444444.jsonl"
)

FIXTURE_COUNTS: dict[str, Expected] = {
    # 18 lines: prompt from the parent agent; thinking (nothing); text; Grep/Read/Edit/Write/
    # NotebookEdit calls, each answered (Edit fails); the Write result line also carries a
    # <system-reminder> text block (a second, injected message); progress (nothing); a
    # PostToolUse hook_success attachment (injected); final text; an unknown record type; a
    # truncated line. Files: checkout.py, money.py, rounding.ipynb.
    f"{CLAUDE_DIR}/subagents/agent-a4f91c2.jsonl": Expected(
        15, 5, 5, 1, 3, 2, malformed=1, unknown=(("agent-heartbeat", 1),)
    ),
    # 20 records + 1 blank line: SessionStart hook attachment with our <project_memory> (inj);
    # CLAUDE.md system-reminder + real prompt (1 + 1 inj); /model command and its stdout (2 inj);
    # prompt with our payload appended (1 + 1 inj); Bash call + failed result; Task call +
    # result; compact boundary (inj) + compact summary (inj); API error reply (inj); interrupt
    # (inj); final text; isMeta caveat (inj). No file tools (the Bash sed is not parsed).
    f"claude/projects/-home-dev-shop/{CLAUDE_SESSION}.jsonl": Expected(17, 2, 2, 1, 0, 10),
    # 39 records + 1 blank: developer message, AGENTS.md, <environment_context>, prompt mirror
    # (4 inj); user_message event (the prompt); 7 calls (exec_command, apply_patch, shell argv
    # apply_patch, shell bash, local_shell, MCP, web_search) and 6 outputs (web search has none),
    # errors: exit code 1 header, shell exit_code 1, MCP isError; compacted summary (inj); two
    # assistant texts. Files: src/money.py, src/cents.py, src/currency.py. Three unknown kinds,
    # one truncated line.
    CODEX_NEW: Expected(
        21,
        7,
        6,
        3,
        3,
        5,
        malformed=1,
        unknown=(
            ("event_msg:future_event", 1),
            ("future_record", 1),
            ("response_item:future_item", 1),
        ),
    ),
    # 15 lines: bare meta, 3 state lines, <user_instructions> and <environment_context> (2 inj),
    # the prompt, reasoning, 3 shell calls + 3 outputs (pytest exits 1), one argv apply_patch
    # on src/checkout.py, the assistant's answer.
    CODEX_OLD: Expected(10, 3, 3, 1, 1, 2),
    # One document, 8 messages: info notice (inj); user (displayContent wins); a turn with text +
    # read_file and its result (2); a turn with replace (fails), write_file, run_shell_command and
    # their results (2); text; user parts "## Project memory…" + "thanks" (1 + 1 inj); error
    # notice (inj); an unknown message type. Files: README.md, docs/python.md.
    GEMINI_LEGACY: Expected(10, 4, 4, 1, 2, 3, unknown=(("message:mystery", 1),)),
    # 17 lines: metadata; u1; $set; a1 upserted four times (text + read_file call, then its
    # result, then tokens only, then write_file call + result: 1 + 1 + 0 + 2); u2; a2 (replace
    # fails: 2); $rewindTo u2; u3; a3; $set.messages with one new synthetic id (inj); info (inj);
    # a truncated line; an unrecognised object; an unknown message type.
    # Files: CHANGELOG.md, pyproject.toml (returned before the rewind retracted it).
    GEMINI_JSONL: Expected(
        12,
        3,
        3,
        1,
        2,
        2,
        malformed=1,
        unknown=(("<unrecognised>", 1), ("message:thinking-block", 1)),
    ),
    # 4 lines: metadata (kind subagent), user, a turn with one search call + result, text.
    GEMINI_SUB: Expected(4, 1, 1, 0, 0, 0),
}


def test_every_fixture_has_expected_counts() -> None:
    found = {
        p.relative_to(FIXTURES).as_posix()
        for p in FIXTURES.rglob("*")
        if p.suffix in {".json", ".jsonl"} and not p.name.endswith(".meta.json")
    }
    assert found == set(FIXTURE_COUNTS)


@pytest.mark.parametrize("name", sorted(FIXTURE_COUNTS))
def test_fixture_counts(name: str) -> None:
    path = FIXTURES / name
    agent = detect_agent(path)
    assert agent == name.split("/")[0]
    messages, state = parse_file(path, agent)
    assert_counts(messages, state, FIXTURE_COUNTS[name])


def test_claude_subagent_ids() -> None:
    messages, _ = parse_file(FIXTURES / CLAUDE_DIR / "subagents" / "agent-a4f91c2.jsonl", "claude")
    assert {(m.session_id, m.parent_session_id, m.subagent_id) for m in messages} == {
        (CLAUDE_SESSION, CLAUDE_SESSION, "a4f91c2")
    }
    assert _prompts(messages)[0].startswith("Find where the checkout total")
    edit_result = next(m for m in messages if any(r.is_error for r in m.tool_results))
    assert edit_result.tool_results[0].call_id == "toolu_sub_03"


def test_claude_injected_context_is_split_from_prompts() -> None:
    messages, _ = parse_file(FIXTURES / f"{CLAUDE_DIR}.jsonl", "claude")
    assert _prompts(messages) == [
        "Always use Decimal for money; never float. Please add a test for rounding.",
        "Run the tests please.",
    ]
    injected = [m.text for m in messages if m.injected]
    assert sum("<project_memory>" in text for text in injected) == 2  # hook output and appended
    assert all(m.subagent_id is None for m in messages)


def test_codex_session_details() -> None:
    messages, state = parse_file(FIXTURES / CODEX_NEW, "codex")
    assert state.session_id == "0199c0de-4a5b-7c6d-8e9f-0a1b2c3d4e5f"
    assert state.parent_session_id == "0199bbbb-1111-7222-8333-444455556666"
    assert _prompts(messages) == [
        "Fix the failing rounding test, and remember: we always use Decimal for money."
    ]
    failed = sorted(r.call_id for m in messages for r in m.tool_results if r.is_error)
    assert failed == ["call_1", "call_4", "call_6"]
    calls = {c.id: c for m in messages for c in m.tool_calls}
    assert calls["call_2"].files == ("src/money.py", "src/cents.py")
    assert calls["call_3"].files == ("src/money.py", "src/currency.py")
    assert calls["call_4"].files == ()  # a shell command line is not parsed for files
    assert calls["call_1"].input == {
        "cmd": "pytest -q tests/test_money.py",
        "workdir": "/home/dev/shop",
    }
    assert (messages[0].cwd, messages[-1].cwd) == ("/home/dev/shop", "/home/dev/shop/sub")


def test_codex_legacy_details() -> None:
    messages, state = parse_file(FIXTURES / CODEX_OLD, "codex")
    assert state.session_id == "3f1e2d4c-5b6a-4789-9abc-def012345678"
    assert _prompts(messages) == ["Rename total() to grand_total() everywhere."]
    assert all(m.timestamp is None for m in messages)  # bare items carry no timestamp


def test_gemini_legacy_document_reparsed_as_it_changes() -> None:
    document = json.loads((FIXTURES / GEMINI_LEGACY).read_text())
    state = GeminiState()
    first = parse_document(json.dumps(document).encode(), state)
    assert _prompts(first) == ["Make @README.md mention Python 3.11.", "thanks, that's all"]
    assert [m.offset for m in first][:3] == [0, 1, 2]
    # Rewritten with one more message: only that one comes back.
    document["messages"].append({"id": "m8", "type": "user", "content": "one more thing"})
    assert [m.text for m in parse_document(json.dumps(document).encode(), state)] == [
        "one more thing"
    ]
    # Rewritten without the last four (a rewind): retracted from the first one missing.
    document["messages"] = document["messages"][:5]
    assert parse_document(json.dumps(document).encode(), state) == []
    assert state.retracted_from == [5]


def test_gemini_rewind_and_checkpoint() -> None:
    path = FIXTURES / GEMINI_JSONL
    messages, state = parse_file(path, "gemini")
    assert isinstance(state, GeminiState)
    u2 = next(m for m in messages if m.text.startswith("Actually also bump"))
    assert state.retracted_from == [u2.offset]
    assert list(state.returned) == ["u1", "a1", "u3", "a3", "s1", "i1", "x1"]
    read_results = [r for m in messages for r in m.tool_results if r.call_id == "read_file-1"]
    assert len(read_results) == 1  # the upserts repeat it; it comes back once
    assert {m.cwd for m in messages} == {"/home/dev/shop"}


def test_gemini_subagent_ids() -> None:
    messages, _ = parse_file(FIXTURES / GEMINI_SUB, "gemini")
    sub, parent = "5eed0001-1111-4222-8333-444444444444", "c0ffee12-aaaa-4bbb-8ccc-dddddddddddd"
    assert {(m.session_id, m.parent_session_id, m.subagent_id) for m in messages} == {
        (sub, parent, sub)
    }


# ------------------------------------------------------------------- paths, dispatch, core rules


@pytest.mark.parametrize(
    ("path", "agent"),
    [
        ("/home/u/.claude/projects/-home-u-app/0b1c.jsonl", "claude"),
        ("/home/u/.claude/projects/-home-u-app/0b1c/subagents/agent-a1.jsonl", "claude"),
        (
            "/home/u/.claude/projects/-home-u-app/0b1c/subagents/workflows/r1/agent-a1.jsonl",
            "claude",
        ),
        ("/home/u/.claude/projects/-home-u-app/agent-1a2b3c4d.jsonl", "claude"),
        ("/home/u/.claude/projects/-home-u-app/0b1c/subagents/agent-a1.meta.json", None),
        ("/home/u/.claude/settings.json", None),
        ("/home/u/.codex/sessions/2026/02/23/rollout-2026-02-23T20-34-25-0199.jsonl", "codex"),
        ("/home/u/.codex/archived_sessions/rollout-2025-12-01T10-00-00-0199.jsonl", "codex"),
        ("/home/u/.codex/history.jsonl", None),
        ("/home/u/.gemini/tmp/shop/chats/session-2026-05-01T10-00-c0ffee12.jsonl", "gemini"),
        ("/home/u/.gemini/tmp/9f86d0/chats/session-2025-11-02T09-30-ab12cd34.json", "gemini"),
        ("/home/u/.gemini/tmp/shop/chats/c0ffee12/5eed0001.jsonl", "gemini"),
        ("/home/u/.gemini/tmp/shop/logs.json", None),
        ("/home/u/notes/session-1.jsonl", None),
    ],
)
def test_detect_agent(path: str, agent: str | None) -> None:
    assert detect_agent(path) == agent


def test_parse_line_skips_blank_lines_and_checks_the_state() -> None:
    state = new_state("codex")
    assert parse_line("codex", b"  \n", 0, state) == []
    assert state.stats.records == 0
    with pytest.raises(TypeError):
        parse_line("gemini", b"{}", 0, new_state("claude"))


def test_split_injected() -> None:
    assert split_injected("hello") == ("hello", "")
    assert split_injected("<environment_context>x</environment_context>") == (
        "",
        "<environment_context>x</environment_context>",
    )
    mine, theirs = split_injected("fix it\n<system-reminder>CLAUDE.md</system-reminder>")
    assert (mine, theirs) == ("fix it", "<system-reminder>CLAUDE.md</system-reminder>")
    assert split_injected("see below\n## Project memory\n- x") == (
        "",
        "see below\n## Project memory\n- x",
    )


def test_split_injected_is_linear_on_hostile_text() -> None:
    # CPU time, not wall-clock: on a busy machine this process waits for a core, but what it
    # spends on one is the cost of the scan.
    started = time.process_time()
    for text in ("<INSTRUCTIONS>" * 10_000, "<system-reminder>x" * 10_000):
        assert split_injected(text) == ("", text)
    assert time.process_time() - started < 1.0  # a backtracking regex took seconds here


def test_files_touched() -> None:
    assert files_touched("Edit", {"file_path": "/a.py"}) == ("/a.py",)
    assert files_touched("read_file", {"absolute_path": "/b.md"}) == ("/b.md",)
    assert files_touched("Bash", {"command": "vim /a.py"}) == ()
    patch = "*** Begin Patch\n*** Add File: n.py\n*** Delete File: o.py\n*** Update File: n.py\n"
    assert files_touched("apply_patch", {"input": patch}) == ("n.py", "o.py")


def test_parse_timestamp() -> None:
    assert parse_timestamp("1970-01-01T00:01:00Z") == 60.0
    assert parse_timestamp("1970-01-01T00:01:00") == 60.0
    assert parse_timestamp(1_700_000_000_000) == 1_700_000_000.0
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp(True) is None


# ------------------------------------------------------------------------ never raise, whatever

LINE_PARSERS = {
    "claude": (claude.parse_line, claude.new_state),
    "codex": (codex.parse_line, codex.new_state),
    "gemini": (gemini.parse_line, gemini.new_state),
}
# Keys and values from all three formats, so random records reach deep into the parsers.
KEYS = st.sampled_from(
    "type message content role text tool_use_id is_error id name input payload output arguments"
    " call_id toolCalls args result status functionResponse response $set $rewindTo messages"
    " sessionId cwd timestamp isMeta isSidechain agentId attachment stdout record_type action"
    " command file_path displayContent directories kind metadata exit_code isCompactSummary".split()
)
WORDS = st.sampled_from(
    "user assistant system developer tool_use tool_result text thinking message function_call"
    " function_call_output custom_tool_call custom_tool_call_output local_shell_call"
    " web_search_call response_item event_msg session_meta turn_context compacted user_message"
    " gemini info error success cancelled apply_patch Edit Write read_file replace subagent"
    " hook_success 2026-01-01T00:00:00Z".split()
) | st.sampled_from(["*** Update File: a.py", "<environment_context>x</environment_context>"])
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | WORDS
    | st.text(max_size=12)
)
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(KEYS | st.text(max_size=4), inner, max_size=6)
    ),
    max_leaves=30,
)
RECORDS = st.dictionaries(KEYS, JSON, max_size=8)


def _feed(agent: str, lines: list[bytes]) -> None:
    parse, fresh = LINE_PARSERS[agent]
    state = fresh(None)
    offset = 0
    for line in lines:
        for message in parse(line, offset, state):  # type: ignore[arg-type]
            assert message.offset == offset
        offset += len(line)


@settings(max_examples=150, deadline=None)
@given(
    agent=st.sampled_from(sorted(LINE_PARSERS)), lines=st.lists(st.binary(max_size=200), max_size=5)
)
def test_random_bytes_never_raise(agent: str, lines: list[bytes]) -> None:
    _feed(agent, lines)
    parse_document(b"".join(lines))


@settings(max_examples=150, deadline=None)
@given(agent=st.sampled_from(sorted(LINE_PARSERS)), values=st.lists(JSON, max_size=5))
def test_random_json_values_never_raise(agent: str, values: list[object]) -> None:
    _feed(agent, [json.dumps(v).encode() for v in values])


@settings(max_examples=300, deadline=None)
@given(agent=st.sampled_from(sorted(LINE_PARSERS)), records=st.lists(RECORDS, max_size=6))
def test_random_records_never_raise(agent: str, records: list[dict[str, object]]) -> None:
    _feed(agent, [json.dumps(r).encode() + b"\n" for r in records])
    parse_document(json.dumps({"sessionId": "s", "messages": records}).encode())


def test_deep_nesting_is_malformed_not_a_crash() -> None:
    for agent, (parse, fresh) in LINE_PARSERS.items():
        state = fresh(None)
        assert parse(b"[" * 100_000, 0, state) == [], agent  # type: ignore[arg-type]
        assert parse(b'{"n": 1e999999}', 0, state) == [], agent  # type: ignore[arg-type]
