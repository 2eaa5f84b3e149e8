"""Commands for the agents: ``hook`` (run by an agent on every prompt: kept off every other
command's imports), ``install-hooks`` and ``mcp`` (the MCP server: its SDK stays off every other
command's imports too)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, get_args

from memctl import protocol
from memctl.commands import Commands, lazy

if TYPE_CHECKING:
    from memctl.cli import Session


def register_hook(c: Commands) -> None:
    p = c.add("hook", lazy("memctl.hook", "run"), protocol.Hook, help="answer an agent hook")
    p.add_argument("--agent", choices=list(get_args(protocol.Agent)), help="default: guessed")
    p.add_argument("--event", help="the event (default: the JSON's hook_event_name)")


def register(c: Commands) -> None:
    register_hook(c)
    p = c.add("install-hooks", lazy("memctl.install_hooks", "run"), help="add memctl to an agent")
    p.add_argument("agent", choices=list(get_args(protocol.Agent)))
    p.add_argument("--scope", choices=["user", "project"], default="user")
    p.add_argument("--uninstall", action="store_true", help="remove memctl's hooks instead")
    p.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    register_install_mcp(c)
    p = c.add("completion", lazy("memctl.completion", "run"), help="shell completion script")
    p.add_argument("shell", choices=["bash", "zsh", "fish"])
    c.add("mcp", cmd_mcp, help="serve memory to an agent as MCP tools on stdin/stdout")


def register_install_mcp(c: Commands) -> None:
    p = c.add(
        "install-mcp",
        lazy("memctl.install_mcp", "run"),
        help="add memctl mcp to an agent's MCP servers",
    )
    p.add_argument("agent", choices=list(get_args(protocol.Agent)))
    p.add_argument("--scope", choices=["user", "project"], default="user")
    p.add_argument("--uninstall", action="store_true", help="remove the memoryd server instead")
    p.add_argument("--dry-run", action="store_true", help="show the change, write nothing")


def cmd_mcp(s: Session) -> None:
    # memctl.launch marks typing_extensions absent for the hook's start-up; the MCP SDK and
    # pydantic need it, so the mark goes before they are imported.
    if "typing_extensions" in sys.modules and sys.modules["typing_extensions"] is None:
        del sys.modules["typing_extensions"]
    from memctl.mcp_server import run

    run(s)
