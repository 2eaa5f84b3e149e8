"""Commands on project memory: entries, search, the payload, aliases, learning settings,
episodes, import and export, working memory, the graph and notes."""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Iterable, Iterator
from typing import get_args

import msgspec

from memctl import protocol, render
from memctl.cli import BULK_BUDGET_S, EXIT_USAGE, Failed, Session
from memctl.commands import Commands

IMPORT_CHUNK_BYTES = 3 * 1024 * 1024
# Lines a request carries: the most the daemon takes in one (it holds its owner thread while
# it applies them); a progress bar moves every request.
IMPORT_CHUNK_LINES = protocol.IMPORT_MAX_LINES

_json = msgspec.json.Encoder()


def register(c: Commands) -> None:
    categories = list(get_args(protocol.Category))
    p = c.add("remember", cmd_remember, protocol.Remember)
    p.add_argument("text", help="the text ('-' reads stdin)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--category", choices=categories)
    kind.add_argument("--section")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--pin", action="store_true")
    p = c.add("search", cmd_search, protocol.Search)
    p.add_argument("query", help="the query; '-' reads one query per stdin line")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--archive", action="store_true", help="search archived entries instead")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p = c.add("list", cmd_list, protocol.ListEntries)
    p.add_argument("category", nargs="?", choices=categories)
    p.add_argument("--status", choices=list(get_args(protocol.Status)))
    p.add_argument("--archived", action="store_true")
    p.add_argument("--limit", type=int, default=1000)
    p = c.add("forget", cmd_forget, protocol.Forget)
    p.add_argument("target", metavar="ID|KEYWORD")
    p.add_argument("--yes", action="store_true", help="forget every entry the keyword matches")
    c.add("pin", cmd_pin, protocol.Pin).add_argument("target", metavar="ID|KEYWORD")
    c.add("unpin", cmd_unpin, protocol.Unpin).add_argument("target", metavar="ID|KEYWORD")
    c.add("import", cmd_import, protocol.Import).add_argument("source", metavar="FILE|-")
    p = c.add("export", cmd_export, protocol.Export)
    p.add_argument("target", nargs="?", metavar="FILE|-")
    p.add_argument("--archived", action="store_true", help="include archived entries")
    p.add_argument("--all", action="store_true", help="every entry: candidates and archived too")
    p = c.add("share", cmd_share, protocol.Share)
    p.add_argument("state", nargs="?", choices=["on", "off"], help="without: show the status")
    p = c.add("inject", cmd_inject, protocol.Inject)
    p.add_argument("--format", choices=list(get_args(protocol.Format)), default="plain")
    p.add_argument("--query", help="the prompt to retrieve for")
    p.add_argument("--remaining-context", type=int, metavar="N", help="tokens left in context")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p.add_argument("--session", help="the agent session id")
    c.add("budget", cmd_budget, protocol.Budget).add_argument("tokens", nargs="?", type=int)
    alias = c.group("alias", "search aliases: add TERM SYN…, list, remove TERM")
    p = c.add("add", cmd_alias_add, protocol.AliasAdd, parent=alias)
    p.add_argument("term")
    p.add_argument("synonyms", nargs="+")
    c.add("list", cmd_alias_list, protocol.AliasList, parent=alias)
    c.add("remove", cmd_alias_remove, protocol.AliasRemove, parent=alias).add_argument("term")
    p = c.add("auto", cmd_auto, protocol.Auto)
    p.add_argument("state", nargs="?", choices=["on", "off"])
    p = c.add("config", cmd_config, protocol.Preset)
    p.add_argument("preset", nargs="?", choices=list(get_args(protocol.PresetName)))
    p = c.add("episodes", cmd_episodes, protocol.Episodes)
    p.add_argument("query", nargs="?")
    p.add_argument("--limit", type=int, default=20)
    p = c.add("compact", cmd_compact, protocol.Compact)
    p.add_argument("--dry-run", action="store_true", help="only report what it would do")
    p = c.add("supersede", cmd_supersede, protocol.Supersede)
    p.add_argument("target", metavar="ID|KEYWORD")
    p.add_argument("text", help="the new text ('-' reads stdin)")
    p = c.add("archive", cmd_archive, protocol.Archive)
    p.add_argument("targets", nargs="+", metavar="ID|KEYWORD")
    c.add("unarchive", cmd_unarchive, protocol.Unarchive).add_argument("target", metavar="ID")
    c.add("conflicts", cmd_conflicts, protocol.Conflicts)
    p = c.add("resolve", cmd_resolve, protocol.Resolve)
    p.add_argument("conflict", metavar="CONFLICT", help="its id from memctl conflicts")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--keep", metavar="ID", help="keep this entry; the other is superseded")
    how.add_argument("--both", action="store_true", help="keep both: it is not a conflict")
    _register_seed001(c)


def _register_seed001(c: Commands) -> None:
    """Working memory, the graph and notes (design §9)."""
    session_help = f"the agent session (default: ${SESSION_ENV}, set by Claude Code)"
    p = c.add("focus", cmd_focus, protocol.Focus)
    p.add_argument("targets", nargs="+", metavar="ID|KEYWORD")
    p.add_argument("--session", help=session_help)
    p = c.add("release", cmd_release, protocol.Release)
    p.add_argument("--session", help=session_help + "; with neither, every session's")
    p = c.add("connect", cmd_connect, protocol.Connect)
    p.add_argument("source", metavar="SRC")
    p.add_argument("target", metavar="DST")
    p.add_argument("--relation", required=True, choices=list(get_args(protocol.Relation)))
    c.add("show", cmd_show, protocol.Show).add_argument("target", metavar="ID|KEYWORD")
    p = c.add("graph", cmd_graph, protocol.Graph)
    p.add_argument("target", metavar="ID|KEYWORD")
    p.add_argument("--depth", type=int, default=1, help="edges away from the entry (1-5)")
    c.add("note", cmd_note, protocol.NoteAdd).add_argument(
        "text", help="the note ('-' reads stdin)"
    )
    p = c.add("notes", cmd_notes, protocol.Notes)
    p.add_argument("--done", nargs="+", default=[], metavar="ID", help="mark these notes done")


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


def _count_lines(source: str) -> int | None:
    """The lines of a file (for the progress bar), read a block at a time and checked to be
    UTF-8 before anything is sent; None for stdin, which can be read only once."""
    if source == "-":
        return None
    utf8 = codecs.getincrementaldecoder("utf-8")()
    try:
        with open(source, "rb") as fh:
            count, last = 0, b"\n"
            while block := fh.read(1 << 20):
                utf8.decode(block)
                count, last = count + block.count(b"\n"), block[-1:]
            utf8.decode(b"", final=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise Failed(f"cannot read {source}: {exc}", EXIT_USAGE) from None
    return count + (last != b"\n")


def _read_lines(source: str) -> Iterator[str]:
    """The lines of ``source`` one at a time: a request's worth is held, never the file."""
    try:
        with sys.stdin if source == "-" else open(source, encoding="utf-8") as fh:
            for line in fh:
                yield line.rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        # A file was checked whole first; stdin is read as it comes, so the requests sent
        # before the bad line were applied (importing them again finds them duplicates).
        raise Failed(f"cannot read {source}: {exc}", EXIT_USAGE) from None


def _chunks(lines: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """Split lines into requests under the daemon's message limit; yields (first line no, lines)."""
    start, size = 1, 0
    chunk: list[str] = []
    for number, line in enumerate(lines, start=1):
        full = len(chunk) >= IMPORT_CHUNK_LINES or size + len(line) + 16 > IMPORT_CHUNK_BYTES
        if chunk and full:
            yield start, chunk
            start, size, chunk = number, 0, []
        chunk.append(line)
        size += len(line.encode()) + 16
    if chunk:
        yield start, chunk


def cmd_import(s: Session) -> None:
    from memctl import progress  # tqdm: loaded by this command alone

    total = protocol.ImportResult(imported=0, duplicates=0, rejected=[])
    count = _count_lines(s.args.source)
    with progress.bar(count, "lines", "importing", shown=not s.as_json) as bar:
        for first, chunk in _chunks(_read_lines(s.args.source)):
            result = s.call(protocol.Import(lines=chunk, first_line=first), BULK_BUDGET_S)
            total.imported += result.imported
            total.duplicates += result.duplicates
            total.rejected += result.rejected
            bar.update(len(chunk))
    s.emit(total, render.imported)
    if total.rejected and not total.imported and not total.duplicates:
        raise Failed("nothing imported")


def cmd_export(s: Session) -> None:
    request = protocol.Export(include_archived=s.args.archived, include_all=s.args.all)
    result = s.call(request, BULK_BUDGET_S)
    lines = "".join(_json.encode(e).decode() + "\n" for e in [*result.entries, *result.edges])
    if s.args.target in (None, "-"):
        sys.stdout.write(lines)
        return
    try:
        with open(s.args.target, "w", encoding="utf-8") as fh:
            fh.write(lines)
    except OSError as exc:
        raise Failed(f"cannot write {s.args.target}: {exc}", EXIT_USAGE) from None
    print(f"exported {len(result.entries)} entries to {s.args.target}", file=sys.stderr)


def cmd_share(s: Session) -> None:
    s.emit(s.call(protocol.Share(state=s.args.state)), render.shared)


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
    elif result.text:
        sys.stdout.write(result.text)


def cmd_budget(s: Session) -> None:
    s.emit(s.call(protocol.Budget(tokens=s.args.tokens)), render.budget)


def cmd_alias_add(s: Session) -> None:
    request = protocol.AliasAdd(term=s.args.term, synonyms=s.args.synonyms)
    s.emit(s.call(request), render.alias)


def cmd_alias_list(s: Session) -> None:
    s.emit(s.call(protocol.AliasList()), render.aliases)


def cmd_alias_remove(s: Session) -> None:
    s.emit(s.call(protocol.AliasRemove(term=s.args.term)), render.aliases)


def cmd_auto(s: Session) -> None:
    enabled = None if s.args.state is None else s.args.state == "on"
    s.emit(s.call(protocol.Auto(enabled=enabled)), render.auto)


def cmd_config(s: Session) -> None:
    s.emit(s.call(protocol.Preset(name=s.args.preset)), render.auto)


def cmd_episodes(s: Session) -> None:
    result = s.call(protocol.Episodes(query=s.args.query or "", limit=s.args.limit))
    s.emit(result, render.episodes)


def cmd_compact(s: Session) -> None:
    s.emit(s.call(protocol.Compact(dry_run=s.args.dry_run), BULK_BUDGET_S), render.compacted)


def cmd_supersede(s: Session) -> None:
    text = sys.stdin.read() if s.args.text == "-" else s.args.text
    s.emit(s.call(protocol.Supersede(target=s.args.target, content=text)), render.superseded)


def cmd_archive(s: Session) -> None:
    s.emit(s.call(protocol.Archive(targets=s.args.targets)), render.archived)


def cmd_unarchive(s: Session) -> None:
    s.emit(s.call(protocol.Unarchive(target=s.args.target)), render.archived)


def cmd_conflicts(s: Session) -> None:
    s.emit(s.call(protocol.Conflicts()), render.conflicts)


def cmd_resolve(s: Session) -> None:
    request = protocol.Resolve(conflict=s.args.conflict, keep=s.args.keep)
    s.emit(s.call(request), render.resolved)


# Claude Code gives its Bash tool (and MCP servers) the session id its hooks receive.
SESSION_ENV = "CLAUDE_CODE_SESSION_ID"


def _session(given: str | None) -> str | None:
    return given or os.environ.get(SESSION_ENV) or None


def cmd_focus(s: Session) -> None:
    session = _session(s.args.session)
    if session is None:
        raise Failed(f"focus needs --session (or ${SESSION_ENV})", EXIT_USAGE)
    s.emit(s.call(protocol.Focus(session=session, targets=s.args.targets)), render.focused)


def cmd_release(s: Session) -> None:
    s.emit(s.call(protocol.Release(session=_session(s.args.session))), render.released)


def cmd_connect(s: Session) -> None:
    a = s.args
    request = protocol.Connect(source=a.source, target=a.target, relation=a.relation)
    s.emit(s.call(request), render.connected)


def cmd_show(s: Session) -> None:
    s.emit(s.call(protocol.Show(target=s.args.target)), render.shown)


def cmd_graph(s: Session) -> None:
    s.emit(s.call(protocol.Graph(target=s.args.target, depth=s.args.depth)), render.graph)


def cmd_note(s: Session) -> None:
    text = sys.stdin.read() if s.args.text == "-" else s.args.text
    s.emit(s.call(protocol.NoteAdd(content=text)), render.noted)


def cmd_notes(s: Session) -> None:
    s.emit(s.call(protocol.Notes(done=s.args.done)), render.notes)
