"""Issue 19, acceptance 2, on the real sessions of shared/samples/claude/: what the whole
pipeline core (parser → extraction → finalization) makes of their actual lines."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

from memoryd.capture import parsers
from memoryd.core.capture.extraction import extract
from memoryd.core.capture.finalization import SessionClose, plan_finalization
from memoryd.core.capture.findings import session_memory_keeps
from memoryd.core.capture.transcript import Message

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.capture_labels import load_all, load_junk

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
SESSIONS = load_all()


def _messages(sample: str) -> list[Message]:
    path = SAMPLES / sample
    if not path.is_file():
        pytest.skip(f"shared samples not found at {SAMPLES}")
    state = parsers.new_state("claude", path)
    messages, offset = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        messages += parsers.parse_line("claude", line, offset, state)
        offset += len(line)
    return messages


@pytest.mark.parametrize("labels", SESSIONS, ids=lambda s: s.project)
def test_no_finding_of_a_real_session_is_noise(labels) -> None:  # type: ignore[no-untyped-def]
    """Harness errors, declined tool uses, interrupted requests, hedged guesses, boilerplate:
    none of the junk patterns (tests/fixtures/capture_labels/junk.toml) in any finding that
    session memory keeps (edits and progress only feed the episode)."""
    junk = [p for p in load_junk() if p.scope == "all"]
    found = [f for f in extract(_messages(labels.sample)) if session_memory_keeps(f, final=True)]
    assert found
    noisy = [(p.id, f.content) for f in found for p in junk if p.regex.search(f.content)]
    assert noisy == []


def test_a_correction_after_an_interrupted_tool_use_becomes_a_preference_entry() -> None:
    """deep-manifest: the user interrupts ExitPlanMode and says what to do first; that prompt
    is promoted (balanced) as a candidate preference entry."""
    (labels,) = [s for s in SESSIONS if s.project == "deep-manifest"]
    messages = _messages(labels.sample)
    found = extract(messages)
    close = SessionClose(
        session_id=labels.session,
        agent="claude",
        reason="session_end",
        transcript_path="/t.jsonl",
        messages=messages,
        findings=found,
        preset="balanced",
        sessions_by_fingerprint={},
        agents_by_fingerprint={},
        pinned_fingerprints=frozenset(),
        not_promotable=frozenset(),
    )
    ids = (f"e{n}" for n in itertools.count())
    event = plan_finalization(close, now=1.0, new_id=lambda: next(ids), redact=str)
    (entry,) = [e for e in event.promoted if e.content.startswith("OK, so first commit")]
    assert entry.content == (
        "OK, so first commit the changes related to the previous task, adding support for tar,"
        " then proceed with this new plan (reporting archive errors)."
    )
    assert (entry.category, entry.status, entry.source.rule_id) == (
        "preference",
        "candidate",
        "user.correction",
    )
    # The interrupted ExitPlanMode itself left nothing.
    assert not [f for f in found if "interrupted" in f.content.lower()]
