"""What a session starts with, through the real ``memctl hook`` and the real daemon (issue 14,
Payload): the instruction files the agent does not load itself (MEMORY.md and its imports, with
provenance), the memory bank's session summary and protocol, and the project's entries, each
tier within its share of the budget; and the "update memory bank" / "UMB" trigger on a prompt.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import cast

import pytest

from conftest import Daemon, Env, ok_json
from memctl import protocol
from memctl.transport import Client
from memoryd.core.recall import formatting
from memoryd.core.recall.budget import EXTRA_TIERS, allocate, count_tokens, in_play
from test_hook_contract import EVENTS, injected, payload, run_hook

AGENTS = list(EVENTS)
PINNED = "Never push directly to the main branch"
FOCUS = "Moving the payments webhook to the queue worker."
BLOCKER = "Stripe sandbox keys expired"
IN_PROGRESS = "Retries with backoff, half done"
NEXT = "Rotate the sandbox keys"
NOT_IN_SUMMARY = "a long story of what changed last month"
RULE = "Lint with ruff before every commit."
STYLE = "Functions stay under thirty lines; a < b & c is fine."
CLAUDE_ONLY = "Claude reads this file itself: run the tests with pytest -q."


def _project(env: Env, *, style_padding: int = 0) -> None:
    """A project with MEMORY.md importing two files (one of them CLAUDE.md, which Claude loads
    natively), a memory bank with a current state, and entries."""
    root = env.project
    (root / "docs").mkdir()
    (root / "MEMORY.md").write_text(f"# Project rules\n\n{RULE}\n\n@import docs/style.md\n")
    (root / "MEMORY.md").write_text((root / "MEMORY.md").read_text() + "@import CLAUDE.md\n")
    padding = "".join(f"- Style detail {i}: keep it tidy.\n" for i in range(style_padding))
    (root / "docs" / "style.md").write_text(f"## Style\n\n- {STYLE}\n{padding}")
    (root / "CLAUDE.md").write_text(f"{CLAUDE_ONLY}\n")
    ok_json(env, "bank", "init")
    active = (
        f"## Current Focus\n\n{FOCUS}\n\n## Recent Changes\n\n- 2026-05-01: {NOT_IN_SUMMARY}\n\n"
        f"## Blockers\n\n- {BLOCKER}\n\n## Next Steps\n\n1. {NEXT}\n"
    )
    ok_json(env, "bank", "update", "activeContext.md", stdin=active)
    ok_json(env, "bank", "update", "progress.md", stdin=f"## In Progress\n\n- [ ] {IN_PROGRESS}\n")
    ok_json(env, "remember", PINNED, "--pin")
    facts = [
        json.dumps({"content": f"Fact {i}: the orders service caches product {i} for an hour"})
        for i in range(12)
    ]
    assert ok_json(env, "import", "-", stdin="\n".join(facts) + "\n")["imported"] == 12


@pytest.mark.parametrize("agent", AGENTS)
def test_session_start_carries_instructions_bank_and_memory(
    env: Env, daemon: Daemon, agent: str
) -> None:
    _project(env)
    run = run_hook(env, payload(agent, "SessionStart", env.project), "--agent", agent)
    text = injected(run, "SessionStart")
    # The instruction files, each under a comment naming its source (and what imported it).
    memory_md, style_md = env.project / "MEMORY.md", env.project / "docs" / "style.md"
    assert f'<!-- memoryd: tier=project path="{memory_md.resolve()}"' in text
    assert f'path="{style_md.resolve()}" imported_from="{memory_md.resolve()}"' in text
    assert RULE in text and ("## Style" in text)
    # What the agent loads natively is left out of its payload, and only of its payload.
    assert (CLAUDE_ONLY in text) == (agent != "claude")
    # The bank's summary: its current state, not the whole files; and the protocol.
    for part in (FOCUS, BLOCKER, IN_PROGRESS, NEXT):
        assert part in text, part
    assert NOT_IN_SUMMARY not in text
    assert '"update memory bank" or "UMB"' in text and "projectBrief.md, productContext.md" in text
    assert PINNED in text
    order = [text.index(RULE), text.index(FOCUS), text.index(PINNED)]
    assert order == sorted(order)
    if agent == "claude":
        root = ET.fromstring(f"<payload>{text}</payload>")
        assert [e.tag for e in root] == ["instruction_files", "memory_bank", "project_memory"]
        assert "a &lt; b &amp; c" in text  # escaped like every text in the claude format


def _hook(env: Env, agent: str, event: protocol.HookKind, prompt: str = "") -> protocol.HookResult:
    """The Hook request ``memctl hook`` sends, through the client library: its reply carries
    the token counts per tier that the hook does not print."""
    request = protocol.Hook(agent=agent, event=event, project=str(env.project), prompt=prompt)
    with Client(endpoint="ipc://" + str(env.socket), budget_s=20) as client:
        reply = client.call(request)
    assert isinstance(reply, protocol.Ok), reply
    return protocol.result_of(request, reply)


@pytest.mark.parametrize("agent", AGENTS)
def test_each_tier_within_its_share_and_never_over_budget(
    env: Env, daemon: Daemon, agent: str
) -> None:
    _project(env, style_padding=120)  # docs/style.md alone is larger than the whole budget
    ok_json(env, "budget", "1500")
    result = _hook(env, agent, "session_start")
    assert result.tokens is not None and result.tokens.budget == 1500
    assert count_tokens(result.text) == result.tokens.total <= 1500
    used = result.tokens.tiers
    assert tuple(used) == in_play(EXTRA_TIERS)
    fmt = cast(formatting.Format, agent)  # each agent reads its own format
    overhead = sum(count_tokens(p) for p in formatting.frame_text(fmt, EXTRA_TIERS))
    quotas = allocate(1500 - overhead, tuple(used))
    spent = allowed = 0
    for tier in used:  # each tier: its quota and what the tiers above left unused
        spent, allowed = spent + used[tier], allowed + quotas[tier]
        assert spent <= allowed, (tier, used, quotas)
    assert all(used[tier] > 0 for tier in ("always", "instructions", "bank", "retrieval"))
    # The instruction file too big for its share is left out whole; the others stay.
    assert "Style detail" not in result.text and RULE in result.text
    # The real hook prints the same kind of payload, within the same budget.
    run = run_hook(env, payload(agent, "SessionStart", env.project), "--agent", agent)
    text = injected(run, "SessionStart")
    assert count_tokens(text) <= 1500 and RULE in text and FOCUS in text


def test_a_prompt_payload_has_no_session_start_tiers(env: Env, daemon: Daemon) -> None:
    _project(env)
    result = _hook(env, "codex", "prompt", "how long does the orders service cache a product?")
    assert result.tokens is not None and tuple(result.tokens.tiers) == in_play()
    assert RULE not in result.text and FOCUS not in result.text and not result.bank_update


@pytest.mark.parametrize("agent", AGENTS)
def test_update_memory_bank_trigger(env: Env, daemon: Daemon, agent: str) -> None:
    _project(env)
    event = next(e for e, spec in EVENTS[agent].items() if spec[1] == "prompt")
    for prompt in ("UMB", "ok, please update the memory bank now"):
        run = run_hook(env, payload(agent, event, env.project, prompt=prompt), "--agent", agent)
        text = injected(run, event)
        assert "The user asked to update the memory bank" in text
        steps = ["decisionLog.md:", "progress.md:", "activeContext.md:", "projectBrief.md:"]
        assert [text.index(s) for s in steps] == sorted(text.index(s) for s in steps)
        assert PINNED in text  # the memory payload is still there
    for prompt in ("bring an umbrella to the orders service meeting", "that was dumb"):
        run = run_hook(env, payload(agent, event, env.project, prompt=prompt), "--agent", agent)
        assert "update the memory bank" not in (run.stdout.decode() if run.stdout else "")


def test_update_trigger_without_a_bank_says_how_to_make_one(env: Env, daemon: Daemon) -> None:
    result = _hook(env, "claude", "prompt", "UMB")
    assert result.bank_update and "has none yet" in result.text and "bank init" in result.text
    start = _hook(env, "claude", "session_start")
    assert start.text == "" and start.tokens is None  # no bank, no files, no entries: nothing


def test_each_session_starts_with_the_files_as_they_are_now(env: Env, daemon: Daemon) -> None:
    _project(env)
    assert RULE in _hook(env, "gemini", "session_start").text
    (env.project / "MEMORY.md").write_text("# Project rules\n\nFormat with black.\n")
    (env.project / "MEMORY.local.md").write_text("My own note: use the staging database.\n")
    run = run_hook(env, payload("gemini", "SessionStart", env.project), "--agent", "gemini")
    text = injected(run, "SessionStart")
    assert "Format with black." in text and RULE not in text and STYLE not in text
    assert "staging database" in text and text.index("black") < text.index("staging")
