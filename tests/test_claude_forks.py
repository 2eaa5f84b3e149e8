"""Claude Code sessions started from another one (``--fork-session`` / ``/branch``, whose copied
lines carry ``forkedFrom``; ``--resume`` into a new file, whose copied lines keep the parent's
``sessionId``): recognised by the parser, their parent recorded, and the parent's findings copied
to them as for a Codex ``forked_from_id`` (copy-on-fork, seed 004 §14). The forks are built from
a real sample's lines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conftest import Daemon, Env, ok_json, until
from test_parsers import SAMPLES, parse_file

SAMPLE = SAMPLES / "claude" / "b25638d7-b104-4f06-a797-70ac33d069ed.jsonl"
PARENT = "b25638d7-b104-4f06-a797-70ac33d069ed"
CHILD = "0c0ffee0-1111-4222-8333-444455556666"


def sample_records(count: int) -> list[dict[str, Any]]:
    """The first ``count`` conversational lines of a real session (Claude Code 1.0.128)."""
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    return [r for r in lines if r.get("type") in ("user", "assistant")][:count]


def fork(records: list[dict[str, Any]], style: str) -> list[dict[str, Any]]:
    """The parent's lines as the child's file starts with them: re-stamped with the child's id
    and ``forkedFrom`` (a fork), or copied as they were (a resumed session)."""
    if style == "resumed":
        return [dict(r) for r in records]
    return [
        {
            **r,
            "sessionId": CHILD,
            "forkedFrom": {"sessionId": r["sessionId"], "messageUuid": r["uuid"]},
        }
        for r in records
    ]


def own_line(template: dict[str, Any], text: str, n: int) -> dict:
    return {
        **{k: template[k] for k in ("userType", "cwd", "version", "gitBranch")},
        "parentUuid": f"own-{n - 1}" if n else template["uuid"],
        "isSidechain": False,
        "type": "assistant",
        "sessionId": CHILD,
        "uuid": f"own-{n}",
        "timestamp": f"2026-11-21T10:{n:02d}:00.000Z",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
    }


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return path


@pytest.mark.parametrize("style", ["forked", "resumed"])
def test_a_session_started_from_another_names_its_parent(tmp_path: Path, style: str) -> None:
    parent = sample_records(8)
    child = [*fork(parent, style), own_line(parent[-1], "Now the ruby fallback works.", 0)]
    path = write(tmp_path / "projects" / "-x" / f"{CHILD}.jsonl", child)
    messages, state = parse_file(path, "claude")
    assert state.session_id == CHILD and state.parent_session_id == PARENT
    assert {(m.session_id, m.parent_session_id) for m in messages} == {(CHILD, PARENT)}
    assert messages[-1].text == "Now the ruby fallback works."


def test_the_sample_itself_has_no_parent() -> None:
    messages, state = parse_file(SAMPLE, "claude")
    assert state.parent_session_id is None
    assert {(m.session_id, m.parent_session_id) for m in messages} == {(PARENT, None)}


def _sessions(env: Env) -> dict[str, str | None]:
    (db,) = env.data.glob("projects/*/memory.db")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT id, parent_session_id FROM sessions").fetchall())


def _finding_sessions(env: Env, query: str, needle: str) -> set[str]:
    results = ok_json(env, "search", query, "-k", "10")["results"]
    return {r["session_id"] for r in results if needle in r["content"]}


@pytest.mark.parametrize("style", ["forked", "resumed"])
def test_a_claude_fork_starts_with_its_parents_findings(env: Env, style: str) -> None:
    folder = env.home / ".claude" / "projects" / "-fork-test"
    cwd = str(env.project)
    parent = [{**r, "cwd": cwd} for r in sample_records(6)]
    decision = "We decided to render model names with ruby annotations."
    parent.append({**own_line(parent[-1], decision, 0), "sessionId": PARENT, "uuid": "p-last"})
    daemon = Daemon(env).start()
    try:
        write(folder / f"{PARENT}.jsonl", parent)
        until(lambda: _finding_sessions(env, "ruby annotations", "ruby annotations"), "parent")
        # Branched before the decision: its lines are not in the child's file, so the child
        # holds it only as a copy of the parent's findings.
        child = fork(parent[:3], style)
        child.append(own_line(parent[2], "Turns out the root cause was a stale font cache.", 1))
        write(folder / f"{CHILD}.jsonl", child)
        until(lambda: _finding_sessions(env, "stale font cache", "font cache"), "the child's own")
        found = _finding_sessions(env, "ruby annotations", "ruby annotations")
        assert found == {PARENT, CHILD}
    finally:
        daemon.stop()
    assert _sessions(env) == {PARENT: None, CHILD: PARENT}
