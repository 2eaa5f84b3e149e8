"""memctl's commands, one module per domain: ``memory``, ``bank``, ``instructions``, ``admin`` and
``agents`` (the hook and install-hooks).

A command says which request types it sends; its help is the first request's docstring (the same
text the MCP server gives an agent), unless the command says otherwise. ``Commands.sends`` keeps
what every command sends, so a test can prove that every request type has a command.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from memctl import protocol
from memctl.cli import add_global_options

if TYPE_CHECKING:
    from memctl.cli import Session

Run = Callable[["Session"], None]


def help_of(request_type: type[protocol.Request[Any]]) -> tuple[str, str]:
    """(one-line help, description) from a request type's docstring: its first sentence, and
    its first paragraph."""
    doc = (request_type.__doc__ or "").strip()
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = paragraph.split(". ")[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:], paragraph


class Group(NamedTuple):
    """A command with actions (``bank init``, ``files show``). A NamedTuple, not a dataclass:
    ``dataclasses`` imports ``inspect``, some 5 ms of every hook's start."""

    name: str
    actions: Any  # argparse's sub-parsers action; None when the group is not built


class _Unbuilt:
    """Stands for the parser of a command this run does not use: its arguments cost nothing.
    (Each argparse parser costs some 0.25 ms, most of it gettext looking for translations: ~50
    of them were a third of a ``memctl status``.)"""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> _Unbuilt:
        return self


class Commands:
    """Builds the command parsers and records what each command sends. With ``only``, just the
    parser of that command is built (the one this run will parse); ``built`` says whether it
    was found."""

    def __init__(self, sub: Any, only: str | None = None) -> None:
        self._sub = sub
        self._only = only
        self.built = False
        self.sends: dict[str, tuple[type[protocol.Request[Any]], ...]] = {}

    def _wanted(self, name: str) -> bool:
        wanted = self._only is None or name == self._only
        self.built |= wanted
        return wanted

    def add(
        self,
        name: str,
        run: Run,
        *sends: type[protocol.Request[Any]],
        help: str | None = None,
        parent: Group | None = None,
    ) -> argparse.ArgumentParser:
        """Add command ``name`` (under ``parent``'s sub-commands when given) that runs ``run``
        and sends ``sends``."""
        self.sends[name if parent is None else f"{parent.name} {name}"] = sends
        if (parent is None and not self._wanted(name)) or (
            parent is not None and not parent.actions
        ):
            return cast(argparse.ArgumentParser, _Unbuilt())
        short, description = help_of(sends[0]) if sends else ("", "")
        short = help or short
        sub = parent.actions if parent is not None else self._sub
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=short, description=description or short
        )
        add_global_options(parser, top=False)
        parser.set_defaults(func=run)
        return parser

    def group(self, name: str, help: str) -> Group:
        if not self._wanted(name):
            return Group(name, None)
        parser = self._sub.add_parser(name, help=help, description=help)
        add_global_options(parser, top=False)  # `memctl bank --json list` works too
        actions = parser.add_subparsers(dest=f"{name}_action", required=True, metavar="ACTION")
        return Group(name, actions)

    def register_all(self) -> None:
        from memctl.commands import admin, agents, bank, instructions, memory, review

        for domain in (admin, memory, review, bank, instructions, agents):
            domain.register(self)


def lazy(module: str, name: str) -> Run:
    """A command whose module is imported only when it runs, off every other command's path."""

    def command(s: Session) -> None:
        import importlib

        getattr(importlib.import_module(module), name)(s)

    return command
