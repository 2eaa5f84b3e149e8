"""Seed 001's working memory, graph and notes (SPEC §9; issue 9 acceptance 2), end to end through
``memctl`` on the real daemon: a focused entry reaches its own session's payloads (every prompt,
after a compaction) and no other session's, until it is released or the session ends; edges are
made and read back as a neighbourhood; notes are kept until done. Each change is in the audit log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from mcp import Client as McpClient

from conftest import Daemon, Env, memctl, ok_json, until
from memctl import protocol
from memctl.transport import Client
from memoryd.core.errors import Conflict, TooLarge
from memoryd.core.graph import plan_focus, walk
from test_mcp import error_text, structured, with_server

DEPLOY = "The deploy script lives in tools/deploy.sh and needs the VPN"
LOGGING = "Structured logs go through structlog with key=value fields"
UNRELATED_PROMPT = "How is the helper in the parser tests named?"


def _without_session_env(env: Env) -> Env:
    """The test's environment as it is, but never a session id inherited from the machine."""
    env.vars["CLAUDE_CODE_SESSION_ID"] = ""
    return env


def _hook(env: Env, event: str, session: str, **fields: Any) -> str:
    """Run the real ``memctl hook`` as Claude Code would; the payload text it prints (or "")."""
    payload = {
        "session_id": session,
        "transcript_path": str(env.home / ".claude" / "projects" / "p" / f"{session}.jsonl"),
        "cwd": str(env.project),
        "hook_event_name": event,
        **fields,
    }
    run = memctl(env, "hook", "--agent", "claude", stdin=json.dumps(payload))
    assert run.code == 0, run.stderr
    if not run.stdout.strip():
        return ""
    return str(json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"])


def _prompt(env: Env, session: str, prompt: str = UNRELATED_PROMPT) -> str:
    return _hook(env, "UserPromptSubmit", session, prompt=prompt)


def _audit(env: Env, kind: str) -> list[dict[str, Any]]:
    lines = memctl(env, "audit", "-n", "200").stdout.splitlines()
    return [e["event"] for e in map(json.loads, lines) if e["event"]["type"] == kind]


def _daemon_hook(env: Env, **fields: Any) -> protocol.HookResult:
    """A hook request the real daemon answers, for events whose answer ``memctl hook`` does not
    print (PreCompact: Claude shows its stdout only in verbose mode)."""
    request = protocol.Hook(agent="claude", project=str(env.project), **fields)
    with Client(endpoint="ipc://" + str(env.socket)) as client:
        reply = client.call(request, budget_s=10)
    assert isinstance(reply, protocol.Ok), reply
    return protocol.result_of(request, reply)


def _error(env: Env, *args: str) -> dict[str, Any]:
    run = memctl(env, "--json", *args)
    assert run.code != 0, run.stdout
    answer: dict[str, Any] = json.loads(run.stdout or run.stderr)
    return answer


# --------------------------------------------------------------------------- working memory


def test_a_focused_entry_is_injected_for_its_session_only_until_released(
    env: Env, daemon: Daemon
) -> None:
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    ok_json(env, "remember", LOGGING, "--pin")  # so that every payload has something
    assert DEPLOY not in _prompt(env, "s1")  # not relevant to the prompt: not injected

    focused = ok_json(env, "focus", deploy[:8], "--session", "s1")
    assert focused == {"session": "s1", "ids": [deploy], "added": [deploy]}
    again = ok_json(env, "focus", deploy, "--session", "s1")  # already there: nothing new
    assert again["ids"] == [deploy] and again["added"] == []

    mine = _prompt(env, "s1")
    pinned = mine[mine.index("<pinned>") : mine.index("</pinned>")]  # the always-inject tier
    assert DEPLOY in pinned
    assert DEPLOY in _prompt(env, "s1", "And now the next prompt")  # every prompt
    theirs = _prompt(env, "s2")
    assert LOGGING in theirs and DEPLOY not in theirs  # another session's does not carry it
    assert (
        deploy in ok_json(env, "inject", "--query", UNRELATED_PROMPT, "--session", "s1")["entries"]
    )
    other = ok_json(env, "inject", "--query", UNRELATED_PROMPT, "--session", "s2")
    assert deploy not in other["entries"]

    released = ok_json(env, "release", "--session", "s1")
    assert released == {"sessions": ["s1"], "released": 1}
    after = _prompt(env, "s1")
    assert LOGGING in after and DEPLOY not in after
    assert ok_json(env, "release", "--session", "s1") == {"sessions": [], "released": 0}

    [joined] = _audit(env, "working_memory_focused")  # the second focus changed nothing
    assert (joined["session_id"], joined["ids"]) == ("s1", [deploy])
    [left] = _audit(env, "working_memory_released")
    assert (left["session_ids"], left["reason"]) == (["s1"], "user")


def test_working_memory_survives_a_compaction(env: Env, daemon: Daemon) -> None:
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    ok_json(env, "focus", deploy, "--session", "s1")
    before = _daemon_hook(env, event="pre_compact", session_id="s1")
    assert DEPLOY in before.text and before.entries == [deploy]
    assert _daemon_hook(env, event="pre_compact", session_id="s2").text == ""
    after = _hook(env, "SessionStart", "s1", source="compact")  # the context was compacted
    assert DEPLOY in after[after.index("<pinned>") : after.index("</pinned>")]


def test_working_memory_survives_a_daemon_restart(env: Env, daemon: Daemon) -> None:
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    ok_json(env, "focus", deploy, "--session", "s1")
    daemon.stop()
    again = Daemon(env).start()
    try:
        assert DEPLOY in _prompt(env, "s1")
    finally:
        again.stop()


def test_it_ends_with_the_session_not_with_a_turn(env: Env, daemon: Daemon) -> None:
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    ok_json(env, "focus", deploy, "--session", "s1")
    ok_json(env, "focus", deploy, "--session", "s2")
    _hook(env, "Stop", "s1", stop_hook_active=False)  # Claude's Stop ends a turn only
    assert DEPLOY in _prompt(env, "s1")
    _hook(env, "SessionEnd", "s1", reason="prompt_input_exit")
    assert DEPLOY not in _prompt(env, "s1")
    assert DEPLOY in _prompt(env, "s2")  # another session's working memory stays
    [ended] = _audit(env, "working_memory_released")
    assert (ended["session_ids"], ended["reason"]) == (["s1"], "session_end")


def test_a_quiet_session_lets_its_working_memory_go(env: Env) -> None:
    quick = {"MEMORYD_CAPTURE__IDLE_MINUTES": "0.02", "MEMORYD_JOBS__CAPTURE_IDLE_CHECK_S": "0.2"}
    daemon = Daemon(env, quick).start()
    try:
        deploy = ok_json(env, "remember", DEPLOY)["id"]
        ok_json(env, "focus", deploy, "--session", "s1")
        idle = until(lambda: _audit(env, "working_memory_released"), "an idle release")
        assert (idle[0]["session_ids"], idle[0]["reason"]) == (["s1"], "idle")
        assert deploy not in ok_json(env, "inject", "--session", "s1", "--query", "x")["entries"]
    finally:
        daemon.stop()


def test_release_without_a_session_clears_every_session(env: Env, daemon: Daemon) -> None:
    _without_session_env(env)
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    logging = ok_json(env, "remember", LOGGING)["id"]
    ok_json(env, "focus", deploy, logging, "--session", "s1")
    ok_json(env, "focus", deploy, "--session", "s2")
    assert ok_json(env, "release") == {"sessions": ["s1", "s2"], "released": 3}
    assert DEPLOY not in _prompt(env, "s1") and DEPLOY not in _prompt(env, "s2")


def test_the_session_comes_from_claude_codes_environment(env: Env, daemon: Daemon) -> None:
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    env.vars["CLAUDE_CODE_SESSION_ID"] = "from-env"  # as Claude Code's Bash tool has it
    assert ok_json(env, "focus", deploy)["session"] == "from-env"
    assert DEPLOY in _prompt(env, "from-env")
    assert ok_json(env, "release")["sessions"] == ["from-env"]


def test_focus_refuses_what_it_cannot_keep(env: Env, daemon: Daemon) -> None:
    _without_session_env(env)
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    gone = ok_json(env, "remember", "The old build used make")["id"]
    ok_json(env, "archive", gone)

    missing = _error(env, "focus", "0123456789abcdef", "--session", "s1")
    assert missing["error"] == "not_found" and "no entry matches" in missing["message"]
    archived = _error(env, "focus", deploy, gone, "--session", "s1")
    assert archived["error"] == "conflict" and "archived" in archived["message"]
    nosession = _error(env, "focus", deploy)
    assert nosession["error"] == "usage" and "--session" in nosession["message"]
    # Refused whole: the entry named with the archived one did not get in either.
    assert ok_json(env, "inject", "--session", "s1", "--query", "x")["entries"] == []
    many = [ok_json(env, "remember", f"Fact number {i} about module m{i}")["id"] for i in range(21)]
    too_many = _error(env, "focus", *many, "--session", "s1")
    assert too_many["error"] == "too_large" and "at most 20" in too_many["message"]
    assert _audit(env, "working_memory_focused") == []


# --------------------------------------------------------------------------- graph


def test_connect_and_read_the_graph_back(env: Env, daemon: Daemon) -> None:
    a = ok_json(env, "remember", "The API gateway validates JWT tokens")["id"]
    b = ok_json(env, "remember", "Token signing keys rotate weekly in Vault")["id"]
    c = ok_json(env, "remember", "Vault runs in the ops cluster")["id"]
    edge = ok_json(env, "connect", a[:8], b, "--relation", "depends_on")
    assert (edge["source"], edge["target"], edge["relation"]) == (a, b, "depends_on")
    ok_json(env, "connect", c, b, "--relation", "enables")

    near = ok_json(env, "graph", a)
    assert [(n["id"], n["depth"]) for n in near["nodes"]] == [(a, 0), (b, 1)]
    assert [(e["source"], e["relation"], e["target"]) for e in near["edges"]] == [
        (a, "depends_on", b)
    ]
    far = ok_json(env, "graph", a, "--depth", "2")  # edges are followed either way
    assert sorted((n["id"], n["depth"]) for n in far["nodes"]) == sorted([(a, 0), (b, 1), (c, 2)])
    assert {(e["source"], e["target"]) for e in far["edges"]} == {(a, b), (c, b)}
    assert far["truncated"] is False

    # A supersede's replaces edge is part of the graph; the old entry shows as archived.
    new_c = ok_json(env, "supersede", c, "Vault runs in the platform cluster")["id"]
    around = ok_json(env, "graph", new_c)
    assert {(n["id"], n["archived"]) for n in around["nodes"]} == {(new_c, False), (c, True)}
    assert [(e["source"], e["relation"], e["target"]) for e in around["edges"]] == [
        (new_c, "replaces", c)
    ]
    added = _audit(env, "edge_added")
    assert [(x["source_id"], x["relation"], x["target_id"]) for x in added] == [
        (a, "depends_on", b),
        (c, "enables", b),
    ]
    assert "depends_on" in memctl(env, "graph", a).stdout  # the human rendering


def test_connect_refuses_bad_edges(env: Env, daemon: Daemon) -> None:
    a = ok_json(env, "remember", "The API gateway validates JWT tokens")["id"]
    b = ok_json(env, "remember", "Token signing keys rotate weekly in Vault")["id"]
    ok_json(env, "connect", a, b, "--relation", "enables")

    loop = _error(env, "connect", a, a, "--relation", "enables")
    assert loop["error"] == "bad_request" and "itself" in loop["message"]
    twice = _error(env, "connect", a, b, "--relation", "enables")
    assert twice["error"] == "conflict" and "exists already" in twice["message"]
    missing = _error(env, "connect", a, "0123456789abcdef", "--relation", "enables")
    assert missing["error"] == "not_found"
    unknown = _error(env, "connect", a, b, "--relation", "likes")
    assert unknown["error"] == "usage" and "depends_on" in unknown["message"]
    assert ok_json(env, "connect", b, a, "--relation", "enables")["source"] == b  # other way
    assert len(_audit(env, "edge_added")) == 2
    assert _error(env, "graph", "0123456789abcdef")["error"] == "not_found"
    assert _error(env, "graph", a, "--depth", "9")["error"] == "usage"


# --------------------------------------------------------------------------- notes


def test_notes_are_kept_until_done(env: Env, daemon: Daemon) -> None:
    assert ok_json(env, "notes") == {"notes": [], "done": []}
    first = ok_json(env, "note", "Check why the parser test is flaky")
    second = ok_json(env, "note", "-", stdin="Ask about api_key=sk-live-0123456789abcdef0123\n")
    assert "sk-live-0123456789abcdef0123" not in second["content"]  # redacted before it is kept
    pending = ok_json(env, "notes")["notes"]
    assert [n["id"] for n in pending] == [first["id"], second["id"]]
    assert pending[0]["content"] == "Check why the parser test is flaky"
    assert "parser test is flaky" in memctl(env, "notes").stdout

    done = ok_json(env, "notes", "--done", first["id"][:6])
    assert done["done"] == [first["id"]] and [n["id"] for n in done["notes"]] == [second["id"]]
    assert _error(env, "notes", "--done", first["id"])["error"] == "not_found"
    assert _error(env, "notes", "--done", second["id"][:1])["error"] == "bad_request"  # too short
    assert _error(env, "note", "   ")["error"] == "bad_request"
    assert [e["id"] for e in _audit(env, "note_added")] == [first["id"], second["id"]]
    assert _audit(env, "notes_done")[0]["ids"] == [first["id"]]
    # Notes are not memory: never injected, never searched.
    assert ok_json(env, "search", "parser flaky")["results"] == []


def test_notes_and_edges_survive_a_restart(env: Env, daemon: Daemon) -> None:
    a = ok_json(env, "remember", "The API gateway validates JWT tokens")["id"]
    b = ok_json(env, "remember", "Token signing keys rotate weekly in Vault")["id"]
    ok_json(env, "connect", a, b, "--relation", "motivated_by")
    note = ok_json(env, "note", "Remember to write the runbook")["id"]
    daemon.stop()
    again = Daemon(env).start()
    try:
        assert [n["id"] for n in ok_json(env, "notes")["notes"]] == [note]
        assert [e["relation"] for e in ok_json(env, "graph", a)["edges"]] == ["motivated_by"]
    finally:
        again.stop()


# --------------------------------------------------------------------------- MCP tools


def test_focus_release_and_connect_through_the_mcp_tools(env: Env, daemon: Daemon) -> None:
    """An agent on MCP pins facts for the session it runs in (Claude Code names it in the
    server's environment), links facts, and clears its working memory."""
    deploy = ok_json(env, "remember", DEPLOY)["id"]
    logging = ok_json(env, "remember", LOGGING)["id"]
    env.vars["CLAUDE_CODE_SESSION_ID"] = "mcp-session"

    async def focus(client: McpClient) -> tuple[Any, ...]:
        focused = structured(await client.call_tool("memory_focus", {"ids": [deploy]}))
        edge = structured(
            await client.call_tool(
                "memory_connect", {"source": deploy, "target": logging, "relation": "enables"}
            )
        )
        loop = await client.call_tool(
            "memory_connect", {"source": deploy, "target": deploy, "relation": "enables"}
        )
        archived_id = structured(await client.call_tool("memory_store", {"content": "Old fact"}))
        await client.call_tool("memory_archive", {"ids": [archived_id["id"]]})
        refused = await client.call_tool("memory_focus", {"ids": [archived_id["id"]]})
        return focused, edge, loop, refused

    focused, edge, loop, refused = with_server(env, focus)
    assert focused == {"session": "mcp-session", "ids": [deploy], "added": [deploy]}
    assert (edge["source"], edge["relation"], edge["target"]) == (deploy, "enables", logging)
    assert "itself" in error_text(loop)
    assert "archived" in error_text(refused)
    assert DEPLOY in _prompt(env, "mcp-session") and DEPLOY not in _prompt(env, "other")

    async def release(client: McpClient) -> dict[str, Any]:
        return structured(await client.call_tool("memory_release", {}))

    assert with_server(env, release) == {"sessions": ["mcp-session"], "released": 1}
    assert DEPLOY not in _prompt(env, "mcp-session")


def test_mcp_focus_without_a_known_session_is_a_tool_error(env: Env, daemon: Daemon) -> None:
    _without_session_env(env)
    deploy = ok_json(env, "remember", DEPLOY)["id"]

    async def script(client: McpClient) -> tuple[Any, ...]:
        unknown = await client.call_tool("memory_focus", {"ids": [deploy]})
        release = await client.call_tool("memory_release", {})
        named = await client.call_tool("memory_focus", {"ids": [deploy], "session": "named"})
        return unknown, release, structured(named)

    unknown, release, named = with_server(env, script)
    assert "needs the session" in error_text(unknown)
    assert "needs the session" in error_text(release)  # never every session's by accident
    assert named["session"] == "named" and DEPLOY in _prompt(env, "named")


# --------------------------------------------------------------------------- the pure rules


def _edges(pairs: list[tuple[str, str]]) -> Callable[[list[str]], list[protocol.Edge]]:
    edges = [protocol.Edge(source=a, target=b, relation="enables", created_at=0) for a, b in pairs]
    return lambda ids: [e for e in edges if e.source in ids or e.target in ids]


def test_the_walk_goes_both_ways_by_depth_and_stops_at_the_node_cap() -> None:
    chain = _edges([("a", "b"), ("c", "b"), ("c", "d"), ("x", "y")])
    distance, edges, cut = walk("a", 2, chain)
    assert distance == {"a": 0, "b": 1, "c": 2} and not cut
    assert [(e.source, e.target) for e in edges] == [("a", "b"), ("c", "b")]
    assert walk("a", 5, chain)[0] == {"a": 0, "b": 1, "c": 2, "d": 3}  # never into x-y
    star = _edges([("hub", f"n{i}") for i in range(10)])
    distance, edges, cut = walk("hub", 1, star, max_nodes=4)
    assert len(distance) == 4 and cut and len(edges) == 3  # only edges among the nodes shown


def test_focus_rules() -> None:
    from memoryd.core.entries import new_entry

    def entry(i: int, archived: bool = False) -> protocol.Entry:
        made = new_entry(
            entry_id=f"{i:032x}",
            content=f"fact {i}",
            category="decision",
            status="confirmed",
            now=1.0,
            source=protocol.Source(kind="user"),
        )
        return msgspec.structs.replace(made, archived=archived, archived_reason="user")

    planned = plan_focus("s", [entry(1).id], [entry(2), entry(1), entry(2)], 5.0)
    assert planned is not None and planned.ids == (entry(2).id,)  # once, held ones left out
    assert plan_focus("s", [entry(1).id], [entry(1)], 5.0) is None
    with pytest.raises(Conflict, match="archived"):
        plan_focus("s", [], [entry(3, archived=True)], 5.0)
    with pytest.raises(TooLarge, match="at most 20"):
        plan_focus("s", [entry(i).id for i in range(20)], [entry(99)], 5.0)
