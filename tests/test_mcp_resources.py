"""``memctl mcp``'s resources and the agent's identity (SPEC §9, §12): the real server over stdio,
driven by the MCP SDK's own client, in front of the real daemon."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation, TextResourceContents

from conftest import BIN, Env, ok_json
from test_mcp import error_text, structured

T = TypeVar("T")
AGENT = "claude-code"


def as_agent(env: Env, script: Callable[[Client], Awaitable[T]], name: str = AGENT) -> T:
    """Run ``script`` against ``memctl mcp`` in the project, the client naming itself ``name``."""
    server = StdioServerParameters(
        command=str(BIN / "memctl"), args=["mcp"], env=env.environ(), cwd=str(env.project)
    )

    async def main() -> T:
        info = Implementation(name=name, version="1.0")
        async with Client(server, read_timeout_seconds=60, client_info=info) as client:
            return await script(client)

    return asyncio.run(main())


async def text_of(client: Client, uri: str) -> str:
    contents = (await client.read_resource(uri)).contents
    assert len(contents) == 1 and isinstance(contents[0], TextResourceContents)
    return contents[0].text


def test_a_stored_entry_names_the_agent_and_an_agent_cannot_replace_a_pin(
    env: Env, daemon: object
) -> None:
    pinned = ok_json(env, "remember", "Releases are cut on Tuesdays", "--pin")["id"]

    async def script(client: Client) -> tuple[Any, ...]:
        stored = await client.call_tool(
            "memory_store", {"content": "The billing service retries webhooks five times"}
        )
        replaced = await client.call_tool(
            "memory_supersede",
            {"id": structured(stored)["id"], "content": "The billing service retries webhooks 7x"},
        )
        refused = await client.call_tool(
            "memory_supersede", {"id": pinned, "content": "Releases are cut on Fridays"}
        )
        return structured(stored), structured(replaced), refused

    stored, replaced, refused = as_agent(env, script)
    entries = {e["id"]: e for e in ok_json(env, "list")["entries"]}
    assert entries[replaced["id"]]["source"] == {"kind": "agent", "agent": AGENT}
    assert entries[replaced["id"]]["status"] == "confirmed"
    assert stored["id"] not in entries  # superseded: archived
    assert "pinned by the user" in error_text(refused)
    assert entries[pinned]["content"] == "Releases are cut on Tuesdays"  # untouched
    assert ok_json(env, "remember", "x y z", "--pin")["status"] == "pinned"  # a user still pins


def test_the_daemon_refuses_a_pin_from_an_agent(env: Env, daemon: object) -> None:
    from memctl import protocol
    from memctl.transport import Client as DaemonClient

    request = protocol.Remember(
        content="Agents may not pin this", pin=True, agent="codex", project=str(env.project)
    )
    with DaemonClient(endpoint="ipc://" + str(env.socket), budget_s=20) as client:
        reply = client.call(request)
    assert isinstance(reply, protocol.Error) and reply.code == "forbidden"
    assert "only a user pins" in reply.message
    assert ok_json(env, "list")["entries"] == []


def test_resources_list_the_summary_instructions_and_each_bank_file(
    env: Env, daemon: object
) -> None:
    ok_json(env, "remember", "Deploys go through the CD pipeline only", "--pin")
    ok_json(env, "remember", "The API is versioned in the URL path", "--category", "decision")
    (env.project / "MEMORY.md").write_text("# Rules\n\nUse tabs in Makefiles.\n")

    async def script(client: Client) -> tuple[Any, ...]:
        before = await client.list_resources(cache_mode="bypass")
        await client.call_tool("initialize_memory_bank", {"brief": "A payments API"})
        after = await client.list_resources(cache_mode="bypass")
        summary = await text_of(client, "memory://project/summary")
        memory = await text_of(client, "memory://project/instructions")
        brief = await text_of(client, "memory://bank/projectBrief.md")
        return before, after, summary, memory, brief

    before, after, summary, memory, brief = as_agent(env, script)
    fixed = {"memory://project/summary", "memory://project/instructions"}
    assert {str(r.uri) for r in before.resources} == fixed
    bank = {str(r.uri) for r in after.resources} - fixed
    assert "memory://bank/projectBrief.md" in bank and "memory://bank/progress.md" in bank
    assert all(r.mime_type == "text/markdown" for r in after.resources)
    assert "1 confirmed, 1 pinned" in summary
    assert "Deploys go through the CD pipeline only" in summary.split("## Latest confirmed")[0]
    assert "The API is versioned in the URL path" in summary.split("## Latest confirmed")[1]
    assert "files, complete." in summary and "memory://bank/activeContext.md" in summary
    assert "MEMORY.md" in summary.split("## Instruction files")[1]
    assert "Use tabs in Makefiles." in memory and "<!-- memoryd: tier=project" in memory
    assert "A payments API" in brief


def test_a_bank_file_outside_the_bank_and_the_daemon_down_are_resource_errors(
    env: Env, tmp_path: Path
) -> None:
    async def script(client: Client) -> tuple[list[str], str]:
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        with pytest.raises(MCPError) as down:
            await client.read_resource("memory://project/summary")
        return listed, str(down.value)

    listed, message = as_agent(env, script)  # no daemon
    assert listed == ["memory://project/summary", "memory://project/instructions"]
    assert "memoryd is not running" in message


def test_reading_a_bank_name_that_escapes_is_refused(env: Env, daemon: object) -> None:
    ok_json(env, "bank", "init")
    (env.project / "secret.txt").write_text("not for agents")

    async def script(client: Client) -> list[str]:
        refused = []
        for uri in ("memory://bank/..%2Fsecret.txt", "memory://bank/notes.txt"):
            with pytest.raises(MCPError) as error:
                await client.read_resource(uri)
            refused.append(str(error.value))
        return refused

    escaped, not_markdown = as_agent(env, script)
    assert escaped.startswith("Unknown resource")  # the SDK's path check: never sent
    assert "forbidden" in not_markdown and "not for agents" not in not_markdown
