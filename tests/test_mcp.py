"""``memctl mcp`` (SPEC §12): the real server as a subprocess, driven over stdio by the MCP SDK's
own client, in front of the real daemon."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from conftest import BIN, Env, ok_json

T = TypeVar("T")

SEED_001 = {
    "memory_recall",
    "memory_query",
    "memory_store",
    "memory_search_archive",
    "memory_episodes",
    "memory_ingest_lifecycle",
    "memory_supersede",
    "memory_archive",
    "memory_compact",
    "memory_focus",
    "memory_release",
    "memory_connect",
}
SEED_000 = {
    "initialize_memory_bank",
    "list_projects",
    "memory_bank_read",
    "memory_bank_write",
    "memory_bank_update",
    "list_project_files",
    "validate_project",
}


REVIEW = {"memory_review", "memory_review_accept", "memory_review_reject"}  # issue 17


def with_server(
    env: Env, script: Callable[[Client], Awaitable[T]], *args: str, cwd: Path | None = None
) -> T:
    """Start ``memctl [args] mcp`` in the project directory (or ``cwd``) and run ``script``
    against it through the SDK's stdio client."""
    server = StdioServerParameters(
        command=str(BIN / "memctl"),
        args=[*args, "mcp"],
        env=env.environ(),
        cwd=str(cwd or env.project),
    )

    async def main() -> T:
        async with Client(server, read_timeout_seconds=60) as client:
            return await script(client)

    return asyncio.run(main())


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_lists_the_seed_tools_each_with_a_schema_and_a_description(env: Env) -> None:
    async def script(client: Client) -> dict[str, Any]:
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    tools = with_server(env, script)  # no daemon needed to list them
    assert set(tools) == SEED_001 | SEED_000 | REVIEW | {"save_memory"}
    for name, tool in tools.items():
        assert tool.input_schema["type"] == "object", name
        assert len(tool.description or "") > 20, name
    assert tools["memory_recall"].input_schema["required"] == ["query"]
    assert tools["memory_bank_read"].annotations.read_only_hint
    assert not tools["memory_bank_write"].annotations.read_only_hint


def test_store_then_recall_finds_it_and_an_agent_cannot_pin(env: Env, daemon: object) -> None:
    async def script(client: Client) -> tuple[dict[str, Any], ...]:
        schema = next(t for t in (await client.list_tools()).tools if t.name == "memory_store")
        assert "pin" not in schema.input_schema["properties"]
        stored = await client.call_tool(
            "memory_store",
            {
                "content": "Payments use idempotency keys stored in Redis for 24 hours",
                "category": "decision",
                "tags": ["payments"],
                "pin": True,  # not in the schema: never reaches the daemon
            },
        )
        recalled = await client.call_tool("memory_recall", {"query": "idempotency keys"})
        listed = await client.call_tool("memory_query", {"category": "decision"})
        return structured(stored), structured(recalled), structured(listed)

    stored, recalled, listed = with_server(env, script)
    assert stored["status"] != "pinned"
    assert [r["id"] for r in recalled["results"]] == [stored["id"]]
    assert [e["id"] for e in listed["entries"]] == [stored["id"]]
    assert ok_json(env, "list", "--status", "pinned")["entries"] == []


def test_both_section_and_category_is_a_tool_error(env: Env, daemon: object) -> None:
    async def script(client: Client) -> CallToolResult:
        return await client.call_tool(
            "memory_store", {"content": "x y z", "section": "Decisions", "category": "decision"}
        )

    assert "not both" in error_text(with_server(env, script))


def test_bank_init_write_read_and_a_path_outside_the_bank_is_a_tool_error(
    env: Env, daemon: object
) -> None:
    text = "# Active Context\n\n## Current Focus\n\nThe MCP server.\n"

    async def script(client: Client) -> tuple[Any, ...]:
        init = await client.call_tool("initialize_memory_bank", {"brief": "A payments API"})
        brief = await client.call_tool("memory_bank_read", {"name": "projectBrief.md"})
        written = await client.call_tool(
            "memory_bank_write", {"name": "activeContext.md", "content": text}
        )
        read = await client.call_tool("memory_bank_read", {"name": "activeContext.md"})
        escaped = await client.call_tool(
            "memory_bank_write", {"name": "../x.md", "content": "# X\n"}
        )
        listed = await client.call_tool("list_project_files", {})  # the server lives on
        return (
            structured(init),
            structured(brief),
            structured(written),
            structured(read),
            escaped,
            structured(listed),
        )

    init, brief, written, read, escaped, listed = with_server(env, script)
    assert "projectBrief.md" in init["created"]
    assert "A payments API" in brief["content"]
    assert written["success"]
    assert read["content"] == text
    assert "forbidden: '../x.md'" in error_text(escaped)
    names = [f["name"] for f in listed["files"]]
    assert "activeContext.md" in names and "projectBrief.md" in names
    assert not (env.project / "x.md").exists()


def test_save_memory_without_confirm_shows_the_diff_and_writes_nothing(
    env: Env, daemon: object
) -> None:
    async def script(client: Client) -> dict[str, Any]:
        args = {"content": "Use tabs in Makefiles.", "section": "Code Style"}
        return structured(await client.call_tool("save_memory", args))

    preview = with_server(env, script)
    assert not preview["written"]
    assert "Use tabs in Makefiles." in preview["diff"]
    assert not Path(preview["path"]).exists()


def test_project_option_chooses_the_project(env: Env, daemon: object, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    async def script(client: Client) -> dict[str, Any]:
        args = {"content": "The CLI is built with argparse, not click", "category": "decision"}
        return structured(await client.call_tool("memory_store", args))

    stored = with_server(env, script, "--project", str(env.project), cwd=elsewhere)
    assert [e["id"] for e in ok_json(env, "list")["entries"]] == [stored["id"]]


def test_daemon_down_is_a_tool_error_with_the_start_hint(env: Env) -> None:
    async def script(client: Client) -> tuple[CallToolResult, CallToolResult]:
        first = await client.call_tool("memory_recall", {"query": "anything"})
        second = await client.call_tool("memory_bank_read", {"name": "progress.md"})
        return first, second

    first, second = with_server(env, script)
    assert "memoryd is not running" in error_text(first)
    assert "memoryd run" in error_text(first)
    assert "memoryd is not running" in error_text(second)  # the server is still there


def test_supersede_archive_and_compact_through_the_tools(env: Env, daemon: object) -> None:
    """A changed fact is superseded, not stored beside the old one; the old one is found only in
    the archive; archive and a dry-run compaction answer."""

    async def script(client: Client) -> tuple[dict[str, Any], ...]:
        old = structured(
            await client.call_tool("memory_store", {"content": "Sessions are kept in Memcached"})
        )
        new = structured(
            await client.call_tool(
                "memory_supersede", {"id": old["id"], "content": "Sessions are kept in Redis"}
            )
        )
        recalled = structured(await client.call_tool("memory_recall", {"query": "sessions kept"}))
        archived = structured(
            await client.call_tool("memory_search_archive", {"query": "Memcached"})
        )
        other = structured(await client.call_tool("memory_store", {"content": "Ports are 8080"}))
        gone = structured(await client.call_tool("memory_archive", {"ids": [other["id"]]}))
        compact = structured(await client.call_tool("memory_compact", {"dry_run": True}))
        return old, new, recalled, archived, other, gone, compact

    old, new, recalled, archived, other, gone, compact = with_server(env, script)
    assert new["superseded"] == old["id"]
    assert [r["id"] for r in recalled["results"]] == [new["id"]]
    assert [r["id"] for r in archived["results"]] == [old["id"]]
    assert gone["ids"] == [other["id"]] and gone["archived"] is True
    assert set(compact) >= {"decayed", "expired", "evicted", "purged", "active", "archived"}


def test_invalid_calls_never_quote_the_secret_they_carry(env: Env) -> None:
    """Proves that the server's own validation errors say which argument is wrong and why
    without quoting its value: a key in an over-long text, a wrong type, a value outside a
    choice, or an unknown tool's name never comes back. On main pydantic's message quoted the
    value (``input_value='sk-ant-…'``) to the agent. No daemon: these never reach it."""
    secret = "sk-ant-api03-" + "Q7w8E9r0T1y2U3i4" * 5
    calls = [
        ("memory_store", {"content": secret * 800}, "content: String should have at most"),
        ("memory_store", {"content": "x", "tags": [secret] * 40}, "tags: List should have"),
        ("memory_recall", {"query": "x", "k": secret}, "k: Input should be a valid integer"),
        ("memory_store", {"content": "x", "category": secret}, "category: Input should be"),
        (secret, {}, "unknown tool"),
    ]

    async def script(client: Client) -> list[str]:
        return [error_text(await client.call_tool(name, args)) for name, args, _ in calls]

    for (_, _, why), text in zip(calls, with_server(env, script), strict=True):
        assert why in text and "Q7w8E9r0" not in text, text
