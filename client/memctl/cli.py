"""memctl: the command line of memoryd (SPEC §12 CLI contract).

Exit codes: 0 ok, 1 the daemon answered with an error, 2 usage, 3 the daemon is unavailable.
``--json`` prints the reply's result as one JSON object on stdout; errors go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, get_args

import msgspec

from memctl import paths, protocol, render
from memctl.transport import Client, DaemonUnavailable, MessageTooLarge

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
QUICK_BUDGET_S = 1.5
BULK_BUDGET_S = 30.0
IMPORT_CHUNK_BYTES = 3 * 1024 * 1024
FOLLOW_WAIT_MS = 25_000
SYNC_WAIT_MS = 20_000

_json = msgspec.json.Encoder()


class Failed(Exception):
    """A command failed with a message for stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Session:
    """What one invocation needs: the client, the project, output mode."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.as_json: bool = args.json
        self.project = os.path.abspath(args.project or os.getcwd())
        self.client = Client(budget_s=args.timeout or QUICK_BUDGET_S)

    def call(self, request: protocol.Request, budget_s: float | None = None) -> Any:
        """Send, report background errors, return the result or raise ``Failed``."""
        request.project = self.project
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
            raise Failed(f"{reply.code.value}: {reply.message}")
        return reply.result

    def emit(self, result: Any, human: Callable[[Any], str]) -> None:
        if self.as_json:
            sys.stdout.write(_json.encode(result).decode() + "\n")
        else:
            text = human(result)
            if text:
                print(text)


def _unavailable_hint(exc: DaemonUnavailable) -> str:
    where = paths.ipc_path(exc.endpoint) or exc.endpoint
    return (
        f"memoryd is not running ({exc.reason}: {where}). "
        "Start it with `memoryd run &` or `systemctl --user start memoryd`."
    )


# ----------------------------------------------------------------------------- commands


def cmd_status(s: Session) -> None:
    s.emit(s.call(protocol.StatusRequest()), render.status)


def cmd_remember(s: Session) -> None:
    a = s.args
    text = sys.stdin.read() if a.text == "-" else a.text
    request = protocol.Remember(
        content=text,
        category=a.category,
        section=a.section,
        tags=a.tag,
        file_paths=a.file,
        pin=a.pin,
    )
    s.emit(s.call(request), render.remembered)


def cmd_search(s: Session) -> None:
    a = s.args
    if a.query != "-":
        request = protocol.Search(query=a.query, k=a.k, archive=a.archive, files=a.file)
        s.emit(s.call(request), render.search)
        return
    # Batch mode: one query per stdin line, one JSON object per output line, one connection.
    for line in sys.stdin:
        query = line.rstrip("\n")
        if query.strip():
            result = s.call(protocol.Search(query=query, k=a.k, archive=a.archive, files=a.file))
            sys.stdout.write(
                _json.encode({"query": query, **msgspec.to_builtins(result)}).decode() + "\n"
            )
            sys.stdout.flush()


def cmd_inject(s: Session) -> None:
    a = s.args
    request = protocol.Inject(
        format=a.format,
        query=a.query or "",
        files=a.file,
        remaining_context=a.remaining_context,
        session=a.session,
    )
    result = s.call(request)
    if s.as_json:
        s.emit(result, render.injected)
    elif result["text"]:
        sys.stdout.write(result["text"])


def cmd_budget(s: Session) -> None:
    s.emit(s.call(protocol.Budget(tokens=s.args.tokens)), render.budget)


def cmd_alias(s: Session) -> None:
    a = s.args
    if a.action == "add":
        if not a.synonyms:
            raise Failed("alias add needs a term and at least one synonym", EXIT_USAGE)
        s.emit(s.call(protocol.AliasAdd(term=a.term, synonyms=a.synonyms)), render.alias)
    elif a.action == "remove":
        s.emit(s.call(protocol.AliasRemove(term=a.term)), render.aliases)
    else:
        s.emit(s.call(protocol.AliasList()), render.aliases)


def cmd_auto(s: Session) -> None:
    enabled = None if s.args.state is None else s.args.state == "on"
    s.emit(s.call(protocol.Auto(enabled=enabled)), render.auto)


def cmd_config(s: Session) -> None:
    s.emit(s.call(protocol.Preset(name=s.args.preset)), render.auto)


def cmd_episodes(s: Session) -> None:
    result = s.call(protocol.Episodes(query=s.args.query or "", limit=s.args.limit))
    s.emit(result, render.episodes)


def cmd_list(s: Session) -> None:
    a = s.args
    request = protocol.ListEntries(
        category=a.category, status=a.status, archived=a.archived, limit=a.limit
    )
    s.emit(s.call(request), render.listing)


def cmd_forget(s: Session) -> None:
    s.emit(s.call(protocol.Forget(target=s.args.target, confirm=s.args.yes)), render.forgotten)


def cmd_pin(s: Session) -> None:
    s.emit(s.call(protocol.Pin(target=s.args.target)), render.pinned)


def cmd_unpin(s: Session) -> None:
    s.emit(s.call(protocol.Unpin(target=s.args.target)), render.pinned)


def _read_lines(source: str) -> list[str]:
    if source == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(source, encoding="utf-8") as fh:
            return fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise Failed(f"cannot read {source}: {exc}", EXIT_USAGE) from None


def _chunks(lines: list[str]) -> Iterator[tuple[int, list[str]]]:
    """Split lines into requests under the daemon's message limit; yields (first line no, lines)."""
    start, size = 1, 0
    chunk: list[str] = []
    for number, line in enumerate(lines, start=1):
        if chunk and size + len(line) + 16 > IMPORT_CHUNK_BYTES:
            yield start, chunk
            start, size, chunk = number, 0, []
        chunk.append(line)
        size += len(line.encode()) + 16
    if chunk:
        yield start, chunk


def cmd_import(s: Session) -> None:
    total = {"imported": 0, "duplicates": 0, "rejected": []}
    for first, chunk in _chunks(_read_lines(s.args.source)):
        result = s.call(protocol.Import(lines=chunk, first_line=first), BULK_BUDGET_S)
        total["imported"] += result["imported"]
        total["duplicates"] += result["duplicates"]
        total["rejected"] += result["rejected"]
    s.emit(total, render.imported)
    if total["rejected"] and not total["imported"] and not total["duplicates"]:
        raise Failed("nothing imported")


def cmd_export(s: Session) -> None:
    result = s.call(protocol.Export(include_archived=s.args.archived), BULK_BUDGET_S)
    lines = "".join(_json.encode(e).decode() + "\n" for e in result["entries"])
    if s.args.target in (None, "-"):
        sys.stdout.write(lines)
        return
    try:
        with open(s.args.target, "w", encoding="utf-8") as fh:
            fh.write(lines)
    except OSError as exc:
        raise Failed(f"cannot write {s.args.target}: {exc}", EXIT_USAGE) from None
    print(f"exported {len(result['entries'])} entries to {s.args.target}", file=sys.stderr)


def cmd_audit(s: Session) -> None:
    result = s.call(protocol.AuditTail(n=s.args.n))
    _print_events(result["events"])
    last = result["last_seq"]
    while s.args.follow:
        request = protocol.AuditTail(n=10_000, after_seq=last, wait_ms=FOLLOW_WAIT_MS)
        result = s.call(request, FOLLOW_WAIT_MS / 1000 + 5)
        _print_events(result["events"])
        last = max([last, result["last_seq"], *(e["seq"] for e in result["events"])])


def _print_events(events: list[dict[str, Any]]) -> None:
    for event in events:
        sys.stdout.write(_json.encode(event).decode() + "\n")
    sys.stdout.flush()


def cmd_check(s: Session) -> None:
    result = s.call(protocol.Check(), BULK_BUDGET_S)
    s.emit(result, render.checked)
    if not result["ok"]:
        raise Failed("check found problems")


def cmd_bank(s: Session) -> None:
    a = s.args
    match a.bank_command:
        case "init":
            s.emit(s.call(protocol.BankInit(brief=a.brief), BULK_BUDGET_S), render.bank_init)
        case "validate":
            s.emit(s.call(protocol.BankValidate()), render.bank_validate)
        case "read":
            result = s.call(protocol.BankRead(name=a.name))
            if s.as_json:
                s.emit(result, render.bank_read)
            else:
                sys.stdout.write(result["content"])
        case "write" | "update":
            kind = protocol.BankWrite if a.bank_command == "write" else protocol.BankUpdate
            change = kind(name=a.name, content=sys.stdin.read(), mode=a.mode)
            s.emit(s.call(change, BULK_BUDGET_S), render.bank_written)
        case "list":
            s.emit(s.call(protocol.BankList()), render.bank_list)
        case "activate":
            s.emit(s.call(protocol.BankActivate(mode=a.mode, files=a.file)), render.bank_activate)
        case "process":
            request = protocol.BankProcess(content=sys.stdin.read(), apply=a.apply, mode=a.mode)
            s.emit(s.call(request, BULK_BUDGET_S), render.bank_process)
        case "optimise":
            optimise = protocol.BankOptimise(apply=a.apply, mode=a.mode)
            s.emit(s.call(optimise, BULK_BUDGET_S), render.bank_optimised)
        case "sync":
            result = s.call(protocol.BankSync(wait_ms=SYNC_WAIT_MS), SYNC_WAIT_MS / 1000 + 5)
            s.emit(result, render.bank_synced)
            if result["pending"] or result["writing"]:
                raise Failed("some memory bank changes are not on disk yet")
        case _:  # ingest
            cmd_ingest(s)


def cmd_ingest(s: Session) -> None:
    s.emit(s.call(protocol.IngestLifecycle(), BULK_BUDGET_S), render.ingested)


def cmd_projects(s: Session) -> None:
    s.emit(s.call(protocol.Projects(), BULK_BUDGET_S), render.projects)


def cmd_files(s: Session) -> None:
    match s.args.action:
        case "show":
            s.emit(s.call(protocol.FilesShow()), render.files_show)
        case "refresh":
            s.emit(s.call(protocol.FilesRefresh()), render.files_list)
        case _:
            s.emit(s.call(protocol.FilesList()), render.files_list)


def cmd_save_memory(s: Session) -> None:
    a = s.args
    text = sys.stdin.read() if a.text == "-" else a.text
    request = protocol.SaveMemory(content=text, section=a.section, target=a.target, confirm=a.yes)
    s.emit(s.call(request), render.saved_memory)


# ----------------------------------------------------------------------------- parser


GLOBAL_OPTIONS_WITH_VALUE = frozenset({"--project", "--timeout"})


def _command_of(argv: list[str]) -> str | None:
    """The command word of ``argv`` (the first argument that is not a global option)."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _parser(only_hook: bool = False) -> argparse.ArgumentParser:
    """The command line. ``only_hook``: just the global options and ``hook``, which an agent runs
    on every prompt and tool call: building every other command's parser would add to each."""
    parser = argparse.ArgumentParser(prog="memctl", description="Talk to the memoryd daemon.")
    parser.add_argument("--json", action="store_true", help="machine output: one JSON object")
    parser.add_argument("--project", metavar="DIR", help="act on the project of DIR (default: cwd)")
    parser.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[Session], None], help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.set_defaults(func=func)
        return cmd

    agents = list(get_args(protocol.Agent))
    p = add("hook", _lazy("memctl.hook", "run"), "answer an agent hook: its JSON on stdin")
    p.add_argument("--agent", choices=agents, help="the agent (default: guessed from the JSON)")
    p.add_argument("--event", help="the event (default: the JSON's hook_event_name)")
    if only_hook:
        return parser
    categories = list(get_args(protocol.Category))
    statuses = list(get_args(protocol.Status))
    add("status", cmd_status, "daemon and project status")
    p = add("remember", cmd_remember, "store TEXT in project memory ('-' reads stdin)")
    p.add_argument("text")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--category", choices=categories)
    kind.add_argument("--section")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--pin", action="store_true")
    p = add("search", cmd_search, "search memory; '-' reads one query per stdin line")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--archive", action="store_true", help="search archived entries instead")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p = add("inject", cmd_inject, "print the memory payload for an agent's context")
    p.add_argument("--format", choices=["claude", "gemini", "codex", "plain"], default="plain")
    p.add_argument("--query", help="the prompt to retrieve for")
    p.add_argument("--remaining-context", type=int, metavar="N", help="tokens left in context")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p.add_argument("--session", help="the agent session id")
    p = add("budget", cmd_budget, "show or set the payload token ceiling (0 = default)")
    p.add_argument("tokens", nargs="?", type=int)
    p = add("alias", cmd_alias, "manage search aliases: add TERM SYN…, list, remove TERM")
    p.add_argument("action", choices=["add", "list", "remove"])
    p.add_argument("term", nargs="?")
    p.add_argument("synonyms", nargs="*")
    p = add("auto", cmd_auto, "show, or turn on/off, learning from this project's transcripts")
    p.add_argument("state", nargs="?", choices=["on", "off"])
    p = add("config", cmd_config, "show or set the promotion preset")
    p.add_argument("preset", nargs="?", choices=["conservative", "balanced", "aggressive"])
    p = add("episodes", cmd_episodes, "recent session episodes")
    p.add_argument("query", nargs="?")
    p.add_argument("--limit", type=int, default=20)
    p = add("list", cmd_list, "list entries")
    p.add_argument("category", nargs="?", choices=categories)
    p.add_argument("--status", choices=statuses)
    p.add_argument("--archived", action="store_true")
    p.add_argument("--limit", type=int, default=1000)
    p = add("forget", cmd_forget, "delete entries by id or keyword")
    p.add_argument("target", metavar="ID|KEYWORD")
    p.add_argument("--yes", action="store_true", help="forget every entry the keyword matches")
    for name, func in (("pin", cmd_pin), ("unpin", cmd_unpin)):
        p = add(name, func, f"{name} an entry (always injected when pinned)")
        p.add_argument("target", metavar="ID|KEYWORD")
    p = add("import", cmd_import, "import JSONL entries from FILE or '-'")
    p.add_argument("source", metavar="FILE|-")
    p = add("export", cmd_export, "export entries as JSONL to FILE or stdout")
    p.add_argument("target", nargs="?", metavar="FILE|-")
    p.add_argument("--archived", action="store_true", help="include archived entries")
    p = add("audit", cmd_audit, "show the audit log, one JSON object a line")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    add("check", cmd_check, "verify database, audit chain and index")
    _bank_parser(sub)
    add("projects", cmd_projects, "known projects and those holding memory-bank/")
    p = add("files", cmd_files, "instruction files (MEMORY.md and imports): show, list, refresh")
    p.add_argument("action", choices=["show", "list", "refresh"])
    p = add("save-memory", cmd_save_memory, "append TEXT to an instruction file ('-': stdin)")
    p.add_argument("text")
    p.add_argument("--section", help="the ## section to append to (default: Saved memories)")
    p.add_argument("--target", choices=["project", "local", "global"], default="project")
    p.add_argument("--yes", action="store_true", help="write it (without: only show the diff)")
    add("ingest", cmd_ingest, "import bank decisions and completed progress items as entries")
    p = add("install-hooks", _lazy("memctl.install_hooks", "run"), "add memctl hooks to an agent")
    p.add_argument("agent", choices=agents)
    p.add_argument("--scope", choices=["user", "project"], default="user")
    p.add_argument("--uninstall", action="store_true", help="remove memctl's hooks instead")
    p.add_argument("--dry-run", action="store_true", help="show the change, write nothing")
    return parser


def _bank_parser(sub: Any) -> None:
    bank = sub.add_parser("bank", help="the project's memory bank (memory-bank/*.md)")
    bank.set_defaults(func=cmd_bank)
    actions = bank.add_subparsers(dest="bank_command", required=True, metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name, help=help_text, description=help_text
        )
        return parser

    action("init", "create the seven bank files (never overwrites)").add_argument("--brief")
    action("validate", "report missing, empty and headerless files")
    action("read", "print a bank file").add_argument("name", metavar="NAME")
    for name, help_text in (
        ("write", "replace NAME with the text on stdin"),
        ("update", "merge the sections on stdin into NAME"),
    ):
        p = action(name, help_text)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--mode", help="the agent's mode (read-only modes refuse)")
    action("list", "list the bank's files")
    p = action("activate", "the bank, custom instructions and state a session starts with")
    p.add_argument("--mode")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p = action("process", "route free text on stdin to bank updates")
    p.add_argument("--apply", action="store_true", help="write the updates to the bank")
    p.add_argument("--mode", help="the agent's mode (read-only modes refuse --apply)")
    p = action("optimise", "move completed and old items to archive/ when over 5,000 tokens")
    p.add_argument("--apply", action="store_true", help="move them (default: show the plan)")
    p.add_argument("--mode", help="the agent's mode (read-only modes refuse --apply)")
    action("sync", "write pending bank changes to disk now, and wait for them")
    action("ingest", "import decisions and completed items as entries")


def _lazy(module: str, name: str) -> Callable[[Session], None]:
    """A command whose module is imported only when it runs, off every other command's path."""

    def command(s: Session) -> None:
        import importlib

        getattr(importlib.import_module(module), name)(s)

    return command


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = _parser(only_hook=_command_of(words) == "hook").parse_args(words)
    if args.command == "alias" and args.action != "list" and not args.term:
        print(f"memctl: alias {args.action} needs a TERM", file=sys.stderr)
        return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        print("memctl: --timeout must be positive", file=sys.stderr)
        return EXIT_USAGE
    session = Session(args)
    try:
        args.func(session)
        return EXIT_OK
    except Failed as exc:
        print(f"memctl: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    finally:
        session.client.close()
