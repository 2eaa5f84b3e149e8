"""Commands for the agents: ``hook`` (run by an agent on every prompt: kept off every other
command's imports) and ``install-hooks``."""

from __future__ import annotations

from typing import get_args

from memctl import protocol
from memctl.commands import Commands, lazy


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
    p = c.add("completion", lazy("memctl.completion", "run"), help="shell completion script")
    p.add_argument("shell", choices=["bash", "zsh", "fish"])
