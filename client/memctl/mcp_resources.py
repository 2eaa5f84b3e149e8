"""``memctl mcp``'s resources (the memory bank's files, design §10; the instruction files,
design §11; a summary of the project), for MCP clients that attach context by resource rather
than by tool.

Like the tools, every read is one or more requests to the daemon for the server's project:

  ``memory://project/summary``       what the project holds: entry counts, pinned entries, the
                                     latest confirmed ones, the memory bank's state, the
                                     instruction files (markdown)
  ``memory://project/instructions``  ``MEMORY.md`` with its imports and provenance comments
  ``memory://bank/{name}``           one file of ``memory-bank/`` (listed one by one)

The bank's files are listed as they are when the client asks (``list_resources``), so a bank
created or grown during the session shows up; with the daemon down only the two fixed resources
are listed, and reading any of them is an error saying how to start it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio.to_thread
import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import Resource as MCPResource

from memctl import protocol
from memctl.cli import Failed, Session

SUMMARY_URI = "memory://project/summary"
INSTRUCTIONS_URI = "memory://project/instructions"
BANK_URI = "memory://bank/{name}"
MARKDOWN = "text/markdown"
HIGHLIGHTS = 10  # pinned and confirmed entries shown in the summary, each
R = TypeVar("R", bound=msgspec.Struct)


class MemoryServer(MCPServer):
    """An MCP server whose resource list also holds the memory bank's files as they are now."""

    session: Session | None = None

    async def list_resources(self) -> list[MCPResource]:
        fixed = await super().list_resources()
        if self.session is None:
            return fixed
        try:
            listed = await _call(self.session, protocol.BankList())
        except ResourceError:
            return fixed  # the daemon is down or there is no project: reading says so
        return [*fixed, *(_bank_resource(f) for f in listed.files)]


def _bank_resource(file: protocol.BankFileInfo) -> MCPResource:
    return MCPResource(
        uri=BANK_URI.format(name=file.name),
        name=file.name,
        title=f"memory-bank/{file.name}",
        description=f"The memory bank's {file.name} ({file.size} bytes)",
        mime_type=MARKDOWN,
    )


async def _call(session: Session, request: protocol.Request[R]) -> R:
    try:
        return await anyio.to_thread.run_sync(session.call, request, None)
    except Failed as exc:
        raise ResourceError(str(exc)) from None


def register(server: MemoryServer, session: Session) -> None:
    """Add the resources to ``server``, each reading through ``session``."""
    server.session = session

    @server.resource(
        SUMMARY_URI, name="summary", title="Project memory summary", mime_type=MARKDOWN
    )
    async def summary() -> str:
        """What this project's memory holds: entry counts, pinned entries, the latest confirmed
        ones, the memory bank's state and the instruction files. Read it first."""
        return await project_summary(session)

    @server.resource(
        INSTRUCTIONS_URI, name="MEMORY.md", title="Instruction files", mime_type=MARKDOWN
    )
    async def instructions() -> str:
        """The project's instruction files (MEMORY.md, its @imports, the local and global ones)
        merged in precedence order, each part with a provenance comment."""
        shown = await _call(session, protocol.FilesShow())
        return shown.text

    @server.resource(BANK_URI, name="memory-bank", title="Memory bank file", mime_type=MARKDOWN)
    async def bank_file(name: str) -> str:
        """One file of the project's memory bank (memory-bank/<name>)."""
        read = await _call(session, protocol.BankRead(name=name))
        return read.content


async def project_summary(session: Session) -> str:
    status = await _call(session, protocol.StatusRequest())
    if status.project is None:
        raise ResourceError(f"{session.project} is not in a project")
    page = protocol.ListEntries(status="pinned", limit=HIGHLIGHTS)
    pinned = await _call(session, page)
    confirmed = await _call(session, protocol.ListEntries(status="confirmed", limit=HIGHLIGHTS))
    bank = await _call(session, protocol.BankValidate())
    files = None if bank.empty else await _call(session, protocol.BankList())
    instructions = await _call(session, protocol.FilesList())
    return render_summary(status.project, pinned, confirmed, bank, files, instructions)


def render_summary(
    project: protocol.ProjectInfo,
    pinned: protocol.ListResult,
    confirmed: protocol.ListResult,
    bank: protocol.BankValidateResult,
    files: protocol.BankListResult | None,
    instructions: protocol.FilesListResult,
) -> str:
    counts = project.entries
    lines = [
        f"# Project memory: {project.root}",
        "",
        f"{counts.confirmed} confirmed, {counts.pinned} pinned, {counts.candidate} candidate "
        f"and {counts.archived} archived entries; {project.sessions} sessions captured"
        + (f"; {project.open_conflicts} open conflicts" if project.open_conflicts else "")
        + ".",
    ]
    lines += _entries("Pinned (always in context)", pinned, _line)
    lines += _entries("Latest confirmed", confirmed, _line)
    lines += ["", "## Memory bank", "", *_bank_state(bank, files)]
    lines += ["", "## Instruction files", "", *_instruction_state(instructions)]
    return "\n".join(lines) + "\n"


def _entries(
    title: str, page: protocol.ListResult, line: Callable[[protocol.Entry], str]
) -> list[str]:
    if not page.entries:
        return []
    more = page.total - len(page.entries)
    tail = [f"- … and {more} more (memory_query)"] if more > 0 else []
    return ["", f"## {title}", "", *map(line, page.entries), *tail]


def _line(entry: protocol.Entry) -> str:
    text = " ".join(entry.content.split())
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"- `{entry.id[:8]}` ({entry.category}) {text}"


def _bank_state(
    bank: protocol.BankValidateResult, files: protocol.BankListResult | None
) -> list[str]:
    if bank.empty or files is None:
        return ["No memory bank (initialize_memory_bank creates one)."]
    state = "complete" if bank.valid else "incomplete"
    lines = [f"{len(files.files)} files, {state}."]
    lines += _listed("missing (required)", bank.missing_required)
    lines += _listed("missing (recommended)", bank.missing_recommended)
    lines += [f"- {p.file}: {p.message}" for p in bank.problems]
    lines += [f"- `{BANK_URI.format(name=f.name)}` ({f.size} bytes)" for f in files.files]
    return lines


def _listed(label: str, names: Sequence[str]) -> list[str]:
    return [f"- {label}: {', '.join(names)}"] if names else []


def _instruction_state(result: protocol.FilesListResult) -> list[str]:
    if not result.files:
        return ["None (save_memory writes MEMORY.md)."]
    lines = [f"{len(result.files)} files, {result.tokens} tokens (`{INSTRUCTIONS_URI}`):"]
    lines += [f"- {f.tier}: {f.path}" for f in result.files]
    lines += [f"- problem: {p.path}: {p.message}" for p in result.problems]
    return lines
