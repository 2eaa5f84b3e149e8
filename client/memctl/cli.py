"""memctl: the command line of memoryd (design §12 CLI contract).

Exit codes: 0 ok, 1 the daemon answered with an error, 2 usage, 3 the daemon is unavailable.
``--json`` prints the reply's result as one JSON object on stdout; errors go to stderr. The global
options may stand before or after the command.

The commands live in ``memctl.commands``, one module per domain; this module holds what every
command shares (the session, the global options, exit codes) and stays small, because the agent
hook, which runs on every prompt, imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import msgspec

from memctl import __version__, paths, protocol
from memctl.launch import command_of
from memctl.transport import Client, DaemonUnavailable, MessageTooLarge

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
QUICK_BUDGET_S = 1.5
BULK_BUDGET_S = 30.0

_json = msgspec.json.Encoder()
R = TypeVar("R", bound=msgspec.Struct)
T = TypeVar("T")


class Failed(Exception):
    """A command failed with a message for stderr and an exit code; ``error`` is the daemon's
    error code when the daemon refused (what ``--json`` reports)."""

    def __init__(self, message: str, code: int = EXIT_ERROR, error: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.error = error or {EXIT_USAGE: "usage", EXIT_UNAVAILABLE: "unavailable"}.get(
            code, "failed"
        )


class Session:
    """What one invocation needs: the client, the project, output mode."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.as_json: bool = args.json
        self.project = os.path.abspath(args.project or paths.cwd())
        self.client = Client(budget_s=args.timeout or QUICK_BUDGET_S)
        self.emitted = False  # a result is out: a failure after it adds no JSON object

    def call(self, request: protocol.Request[R], budget_s: float | None = None) -> R:
        """Send, report background errors, return the typed result or raise ``Failed``."""
        request.project = self.project
        request.project_explicit = bool(self.args.project)
        _check_limits(request)
        budget = self.args.timeout or budget_s
        try:
            reply = self.client.call(request, budget)
        except DaemonUnavailable as exc:
            raise Failed(_unavailable_hint(exc), EXIT_UNAVAILABLE) from None
        except MessageTooLarge as exc:
            raise Failed(str(exc)) from None
        for error in reply.previous_errors:
            print(f"memoryd {error.severity}: {error.description}", file=sys.stderr)
        if isinstance(reply, protocol.Error):
            raise Failed(f"{reply.code.value}: {reply.message}", error=reply.code.value)
        try:
            return protocol.result_of(request, reply)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Failed(
                f"the daemon's reply does not match this memctl {__version__} ({exc}); "
                "restart the daemon after an upgrade"
            ) from None

    def emit(self, result: T, human: Callable[[T], str]) -> None:
        self.emitted = True
        if self.as_json:
            sys.stdout.write(_json.encode(result).decode() + "\n")
        else:
            text = human(result)
            if text:
                print(text)


def _check_limits(request: protocol.Request[Any]) -> None:
    """The schema's limits (``msgspec.Meta`` on each field), checked before sending: the client
    and the daemon refuse the same values, declared once, and the user hears which option."""
    try:
        msgspec.convert(msgspec.to_builtins(request), type(request))
    except msgspec.ValidationError as exc:
        raise Failed(f"invalid value: {protocol.explain(exc)}", EXIT_USAGE) from None


def _unavailable_hint(exc: DaemonUnavailable) -> str:
    where = paths.ipc_path(exc.endpoint) or exc.endpoint
    return (
        f"memoryd is not running ({exc.reason}: {where}). "
        "Start it with `memoryd run &` or `systemctl --user start memoryd`."
    )


# ----------------------------------------------------------------------------- parser


def _command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (the first argument that is not a global option)."""
    return command_of(argv)


def add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The global options, on the top parser and again on every command (there with no default,
    so that one given before the command is not reset by the command's parser)."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--json", action="store_true", default=False if top else default, help="machine output"
    )
    parser.add_argument("--project", metavar="DIR", default=default, help="act on DIR's project")
    parser.add_argument(
        "--timeout", type=float, metavar="S", default=default, help="give up after S s"
    )


class UsageError(Exception):
    """The command line is wrong (argparse's complaint, already printed to stderr)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised, not exited on: ``main`` reports it the way the
    user asked (one JSON object with ``--json``; nothing at all for the agent's hook)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _parser(only_hook: bool = False, command: str | None = None) -> argparse.ArgumentParser:
    """The command line. ``only_hook``: just the global options and ``hook``, which an agent runs
    on every prompt and tool call: building (and importing) every other command would add to
    each. ``command``: build only that command's parser (the whole line when it is unknown, so
    that argparse can list the choices)."""
    from memctl.commands import Commands

    parser = _Parser(prog="memctl", description="Talk to the memoryd daemon.")
    add_global_options(parser, top=True)
    parser.add_argument("--version", action="store_true", help="memctl's and the daemon's version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = Commands(sub, only=command)
    if only_hook:
        from memctl.commands import agents

        agents.register_hook(commands)
        return parser
    commands.register_all()
    if command is not None and not commands.built:
        return _parser()
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if _command_of(words) == "hook":
        return _hook(words)
    help_wanted = "-h" in words or "--help" in words
    parser = _parser(command=None if help_wanted else _command_of(words))
    try:
        args = _checked(parser, words)
    except UsageError as exc:
        return _usage_failure(str(exc), as_json="--json" in words, parser=parser)
    if args.version:
        from memctl.commands.admin import print_version

        return print_version(args)
    return _run(args)


def _checked(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    args = parser.parse_args(words)
    if args.command is None and not args.version:
        raise UsageError("memctl: a COMMAND is required (memctl --help lists them)")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("memctl: --timeout must be positive")
    return args


def _usage_failure(message: str, *, as_json: bool, parser: argparse.ArgumentParser) -> int:
    parser.print_usage(sys.stderr)
    print(message, file=sys.stderr)
    if as_json:
        error = {"error": "usage", "message": message, "exit_code": EXIT_USAGE}
        sys.stdout.write(_json.encode(error).decode() + "\n")
    return EXIT_USAGE


def _hook(words: list[str]) -> int:
    """The agent's hook always exits 0 and prints nothing but its answer: a wrong option, a
    working directory that is gone, anything, and the agent carries on without memory."""
    try:
        args = _checked(_parser(only_hook=True), words)
        return _run(args)
    except BaseException:
        return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    session = Session(args)
    try:
        args.func(session)
        return EXIT_OK
    except Failed as exc:
        if args.json and not session.emitted:  # scripts read one JSON object, an error too
            error = {"error": exc.error, "message": str(exc), "exit_code": exc.code}
            sys.stdout.write(_json.encode(error).decode() + "\n")
        print(f"memctl: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    finally:
        session.client.close()
