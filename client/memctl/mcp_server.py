"""``memctl mcp``: the daemon's memory as MCP tools over stdio (design §12), for agents that reach
memoryd through MCP rather than hooks.

A thin client like every other command: each tool builds one request of ``memctl.protocol``,
sends it to the daemon for the project of the server's working directory (or ``--project``) and
returns the result as structured JSON. The tools are named as the seeds name them (design §9's
``memory_*``, design §10's memory bank tools, design §11's ``save_memory``); operations the daemon
does not have yet get no tool. An error reply, or a daemon that is down, becomes a tool error the
agent can read; the server itself keeps running.

This module imports the ``mcp`` SDK (and with it pydantic, anyio, starlette): only ``memctl mcp``
loads it, never the hook or another command.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

import anyio.to_thread
import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from memctl import __version__, mcp_resources, protocol
from memctl.cli import BULK_BUDGET_S, Failed, Session
from memctl.commands import help_of
from memctl.commands.memory import SESSION_ENV

INSTRUCTIONS = """\
memoryd keeps this project's memory across sessions and agents. Before changing code, call \
memory_recall with what you are about to work on; when you learn something the next session \
needs (a decision and its reason, a pitfall, a convention), store it with memory_store. The \
memory bank (memory-bank/*.md) holds the project's narrative: read it with memory_bank_read, \
keep activeContext.md and progress.md current with memory_bank_update."""

Query = Annotated[str, Field(min_length=1, max_length=8192, description="what to look for")]
Files = Annotated[
    list[str],
    Field(max_length=64, description="files you are working on: their entries rank higher"),
]
BankName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=255,
        description="a file of memory-bank/, e.g. activeContext.md (a .md name inside the bank)",
    ),
]
BankText = Annotated[str, Field(max_length=512 * 1024, description="markdown text")]
ReviewIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=64)]],
    Field(min_length=1, max_length=1000, description="ids (or unique prefixes) from memory_review"),
]

SessionArg = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=256,
        description=f"the agent session; default: the one this server runs in (${SESSION_ENV})",
    ),
]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
REPLACING = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def described(request_type: type[protocol.Request[Any]]) -> str:
    """A tool's description from its request's docstring (the CLI's help too)."""
    return help_of(request_type)[1]


class MemoryTools:
    """The tools, each forwarding one request to the daemon for the session's project."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def _send(
        self, request: protocol.Request[Any], budget_s: float | None = None
    ) -> dict[str, Any]:
        """The request's result as JSON, or a ``ToolError`` with the daemon's message (or how
        to start the daemon)."""
        try:
            result = await anyio.to_thread.run_sync(self._session.call, request, budget_s)
        except Failed as exc:
            raise ToolError(str(exc)) from None
        built: dict[str, Any] = msgspec.to_builtins(result)
        return built

    # ---------------------------------------------------------------- design §9: project memory

    async def memory_recall(
        self,
        query: Query,
        k: Annotated[int, Field(ge=1, le=50, description="how many results")] = 5,
        files: Files = [],  # noqa: B006 - pydantic copies defaults
    ) -> dict[str, Any]:
        """Search this project's memory (decisions, pitfalls, conventions, progress) and return
        the entries ranked by relevance and confidence. Call it before working on something."""
        return await self._send(protocol.Search(query=query, k=k, files=files))

    async def memory_query(
        self,
        category: protocol.Category | None = None,
        status: protocol.Status | None = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> dict[str, Any]:
        """List this project's active entries, optionally of one category or status, a page at
        a time (``total`` says how many there are; prefer memory_recall for a question)."""
        request = protocol.ListEntries(category=category, status=status, limit=limit, offset=offset)
        return await self._send(request, BULK_BUDGET_S)

    async def memory_store(
        self,
        content: Annotated[str, Field(min_length=1, max_length=65_536)],
        section: Annotated[
            str | None,
            Field(max_length=64, description="a section name, e.g. Decisions; or give category"),
        ] = None,
        category: protocol.Category | None = None,
        tags: Annotated[list[str], Field(max_length=32)] = [],  # noqa: B006
        files: Files = [],  # noqa: B006
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Store one fact in this project's memory: a decision and its reason, a pitfall, a
        convention, progress. Give a section or a category (not both). A fact already stored
        comes back as a duplicate."""
        if section is not None and category is not None:
            raise ToolError("give a section or a category, not both")
        # Never pinned: only a user pins (design §9); the daemon refuses it from an agent too.
        request = protocol.Remember(
            content=content,
            section=section,
            category=category,
            tags=tags,
            file_paths=files,
            agent=client_name(ctx),
        )
        return await self._send(request)

    async def memory_search_archive(
        self, query: Query, k: Annotated[int, Field(ge=1, le=50)] = 5
    ) -> dict[str, Any]:
        """Search archived entries (superseded or stale: no longer injected into context, still
        queryable)."""
        return await self._send(protocol.Search(query=query, k=k, archive=True))

    async def memory_supersede(
        self,
        id: Annotated[str, Field(min_length=1, max_length=512, description="the entry to replace")],
        content: Annotated[str, Field(min_length=1, max_length=65_536)],
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Replace a fact that changed: a new entry with the content, the old one archived as
        superseded and linked to it, in one step. Use this instead of storing a contradicting
        fact beside the old one. A pinned entry is the user's: it cannot be replaced here."""
        request = protocol.Supersede(target=id, content=content, agent=client_name(ctx))
        return await self._send(request)

    async def memory_archive(
        self,
        ids: Annotated[list[str], Field(min_length=1, max_length=1000)],
    ) -> dict[str, Any]:
        """Archive entries that no longer hold: they stop being injected and stay findable with
        memory_search_archive."""
        return await self._send(protocol.Archive(targets=ids))

    async def memory_compact(self, dry_run: bool = False) -> dict[str, Any]:
        """Run compaction now (decay, expiry of stale entries, eviction past the size limit to
        the archive) and report the counts; dry_run only reports what it would do."""
        return await self._send(protocol.Compact(dry_run=dry_run), BULK_BUDGET_S)

    async def memory_episodes(
        self,
        query: Annotated[str, Field(max_length=1024)] = "",
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> dict[str, Any]:
        """List recent session episodes (goal, decisions, outcome, files), optionally those whose
        text contains the query: what earlier sessions did."""
        return await self._send(protocol.Episodes(query=query, limit=limit))

    async def memory_focus(
        self,
        ids: Annotated[
            list[str],
            Field(min_length=1, max_length=50, description="the facts' ids (or a keyword each)"),
        ],
        session: SessionArg = None,
    ) -> dict[str, Any]:
        """Pin facts to this session's working memory: they are injected on every prompt of the
        session and again after the context is compacted, until memory_release or the end of
        the session. For the few facts the current task hinges on (at most 20)."""
        request = protocol.Focus(session=_session(session, "memory_focus"), targets=ids)
        return await self._send(request)

    async def memory_release(self, session: SessionArg = None) -> dict[str, Any]:
        """Clear this session's working memory (the facts memory_focus pinned); the facts stay
        in memory."""
        return await self._send(protocol.Release(session=_session(session, "memory_release")))

    async def memory_connect(
        self,
        source: Annotated[str, Field(min_length=1, max_length=512, description="a fact's id")],
        target: Annotated[str, Field(min_length=1, max_length=512, description="a fact's id")],
        relation: protocol.Relation,
    ) -> dict[str, Any]:
        """Record how two facts relate, as a typed edge of the knowledge graph: source
        depends_on, enables, replaces, motivated_by or contradicts target. Both must exist; an
        edge is recorded once."""
        request = protocol.Connect(source=source, target=target, relation=relation)
        return await self._send(request)

    async def memory_ingest_lifecycle(self) -> dict[str, Any]:
        return await self._send(protocol.IngestLifecycle(), BULK_BUDGET_S)

    # ---------------------------------------------------------------- design §10: memory bank

    async def initialize_memory_bank(
        self,
        brief: Annotated[
            str | None, Field(max_length=65_536, description="what the project is for")
        ] = None,
    ) -> dict[str, Any]:
        return await self._send(protocol.BankInit(brief=brief), BULK_BUDGET_S)

    async def list_projects(self) -> dict[str, Any]:
        return await self._send(protocol.Projects())

    async def memory_bank_read(self, name: BankName) -> dict[str, Any]:
        return await self._send(protocol.BankRead(name=name))

    async def memory_bank_write(self, name: BankName, content: BankText) -> dict[str, Any]:
        """Create or replace a memory bank file with the content (decisionLog.md stays
        append-only)."""
        return await self._send(protocol.BankWrite(name=name, content=content))

    async def memory_bank_update(self, name: BankName, content: BankText) -> dict[str, Any]:
        """Merge markdown sections (e.g. '## Current Focus') into an existing memory bank file:
        send only what changed. A section replaces the file's section of that name or is added;
        history sections (activeContext.md Recent Changes, progress.md Completed) get the items
        appended; decisionLog.md entries ('## Decision: ...') are appended."""
        return await self._send(protocol.BankUpdate(name=name, content=content))

    async def list_project_files(self) -> dict[str, Any]:
        return await self._send(protocol.BankList())

    async def validate_project(self) -> dict[str, Any]:
        return await self._send(protocol.BankValidate())

    # ---------------------------------------------------------------- design §11: instruction files

    async def save_memory(
        self,
        content: Annotated[str, Field(min_length=1, max_length=65_536, description="markdown")],
        section: Annotated[
            str | None, Field(max_length=128, description='a section header, e.g. "Code Style"')
        ] = None,
        target: Literal["project", "local", "global"] = "project",
        confirm: Annotated[
            bool, Field(description="false: only show the diff; true: write it")
        ] = False,
    ) -> dict[str, Any]:
        """Save a convention or instruction to the instruction file (MEMORY.md of the project,
        MEMORY.local.md, or the global one) under a section. Without confirm it returns the diff
        and writes nothing: show it to the user, then call again with confirm true."""
        request = protocol.SaveMemory(
            content=content, section=section, target=target, confirm=confirm
        )
        return await self._send(request)

    # ---------------------------------------------------------------- review (issue 17)

    async def memory_review(
        self, limit: Annotated[int, Field(ge=1, le=1000)] = 50
    ) -> dict[str, Any]:
        """List what memory learned and waits for the user's review (candidates and findings
        not promoted), newest first, each with its signals, points and the transcript line it
        came from. Show them to the user; accept or reject only what the user decided."""
        return await self._send(protocol.Review(limit=limit))

    async def memory_review_accept(self, ids: ReviewIds) -> dict[str, Any]:
        """Accept items the user approved (ids from memory_review): they become confirmed
        memory."""
        return await self._send(protocol.ReviewAccept(ids=ids))

    async def memory_review_reject(
        self,
        ids: ReviewIds,
        reason: Annotated[str, Field(max_length=1024, description="the user's reason")] = "",
    ) -> dict[str, Any]:
        """Reject items the user turned down (ids from memory_review): archived with the
        reason, and the same text is never promoted again."""
        return await self._send(protocol.ReviewReject(ids=ids, reason=reason))


def _session(given: str | None, tool: str) -> str:
    """The session a working-memory tool acts on: the one named, or the one Claude Code says
    this server runs in. Other clients say neither, and a guess would fill another session's
    working memory."""
    session = given or os.environ.get(SESSION_ENV)
    if not session:
        raise ToolError(f"{tool} needs the session: pass `session` (${SESSION_ENV} is not set)")
    return session


# name → (the request type whose docstring describes it when the tool has none, its hints)
TOOLS: dict[str, tuple[type[protocol.Request[Any]], ToolAnnotations]] = {
    "memory_recall": (protocol.Search, READ_ONLY),
    "memory_query": (protocol.ListEntries, READ_ONLY),
    "memory_store": (protocol.Remember, ADDITIVE),
    "memory_search_archive": (protocol.Search, READ_ONLY),
    "memory_supersede": (protocol.Supersede, REPLACING),
    "memory_archive": (protocol.Archive, REPLACING),
    "memory_compact": (protocol.Compact, REPLACING),
    "memory_episodes": (protocol.Episodes, READ_ONLY),
    "memory_ingest_lifecycle": (protocol.IngestLifecycle, ADDITIVE),
    "memory_focus": (protocol.Focus, ADDITIVE),
    "memory_release": (protocol.Release, REPLACING),
    "memory_connect": (protocol.Connect, ADDITIVE),
    "initialize_memory_bank": (protocol.BankInit, ADDITIVE),
    "list_projects": (protocol.Projects, READ_ONLY),
    "memory_bank_read": (protocol.BankRead, READ_ONLY),
    "memory_bank_write": (protocol.BankWrite, REPLACING),
    "memory_bank_update": (protocol.BankUpdate, REPLACING),
    "list_project_files": (protocol.BankList, READ_ONLY),
    "validate_project": (protocol.BankValidate, READ_ONLY),
    "save_memory": (protocol.SaveMemory, ADDITIVE),
    "memory_review": (protocol.Review, READ_ONLY),
    "memory_review_accept": (protocol.ReviewAccept, ADDITIVE),
    "memory_review_reject": (protocol.ReviewReject, REPLACING),
}


# ---------------------------------------------------------------- the agent's identity


def client_name(context: Context | None) -> str:
    """The MCP client's name from its ``initialize`` (``clientInfo.name``, its invisible and
    control characters dropped): each write's provenance (the entry's source agent);
    ``mcp-client`` when it gave none."""
    try:
        params = context.session.client_params if context is not None else None
    except ValueError:  # no request in progress
        params = None
    name = params.client_info.name if params is not None else None
    if isinstance(name, str):  # no control, bidi or other invisible character: it is shown
        name = "".join(ch for ch in name if ch.isprintable()).strip()
    return name[:128] if isinstance(name, str) and name else "mcp-client"


# ---------------------------------------------------------------- errors that quote nothing


ERRORS_SHOWN = 10  # of one call's invalid arguments


class ToolServer(mcp_resources.MemoryServer):
    """The SDK's server, whose own errors quote none of the caller's values: pydantic's message
    for an invalid argument shows the value (``input_value='sk-…'``), and an unknown tool's
    error its name. The daemon's errors are redacted where it sends them; these never reach it,
    and memctl cannot import the daemon's redaction, so they say where and what, not the
    value."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        if name not in TOOLS:
            raise ToolError("unknown tool: list the tools with tools/list")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            problems = [
                f"{'.'.join(str(part) for part in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.__cause__.errors(include_url=False, include_input=False)
            ]
            more = len(problems) - ERRORS_SHOWN
            shown = "; ".join(problems[:ERRORS_SHOWN]) + (f"; {more} more" if more > 0 else "")
            raise ToolError(f"Error executing tool {name}: invalid arguments: {shown}") from None


def build_server(session: Session) -> MCPServer:
    server = ToolServer("memoryd", version=__version__, instructions=INSTRUCTIONS)
    mcp_resources.register(server, session)
    tools = MemoryTools(session)
    for name, (request_type, hints) in TOOLS.items():
        fn = getattr(tools, name)
        description = " ".join((fn.__doc__ or described(request_type)).split())
        server.add_tool(
            fn, name=name, description=description, annotations=hints, structured_output=True
        )
    return server


def run(s: Session) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    build_server(s).run("stdio")
