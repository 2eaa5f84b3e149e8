"""Commands on the memory bank (``memory-bank/*.md``, design §10), projects, and the lifecycle
import."""

from __future__ import annotations

import os
import sys

from memctl import protocol, render
from memctl.cli import BULK_BUDGET_S, EXIT_USAGE, Failed, Session
from memctl.commands import Commands

SYNC_WAIT_MS = 20_000


def register(c: Commands) -> None:
    bank = c.group("bank", "the project's memory bank (memory-bank/*.md)")
    c.add("init", cmd_init, protocol.BankInit, parent=bank).add_argument("--brief")
    c.add("validate", cmd_validate, protocol.BankValidate, parent=bank)
    p = c.add("read", cmd_read, protocol.BankRead, parent=bank)
    p.add_argument("name", metavar="NAME")
    for name, run, request_type in (
        ("write", cmd_write, protocol.BankWrite),
        ("update", cmd_update, protocol.BankUpdate),
    ):
        p = c.add(name, run, request_type, parent=bank)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--mode", help="the agent's mode (read-only modes refuse)")
    c.add("list", cmd_list, protocol.BankList, parent=bank)
    p = c.add("activate", cmd_activate, protocol.BankActivate, parent=bank)
    p.add_argument("--mode")
    p.add_argument("--file", action="append", default=[], help="a file you are working on")
    p = c.add("process", cmd_process, protocol.BankProcess, parent=bank)
    p.add_argument("--apply", action="store_true", help="write the updates to the bank")
    p.add_argument("--mode", help="the agent's mode (read-only modes refuse --apply)")
    p = c.add("optimise", cmd_optimise, protocol.BankOptimise, parent=bank)
    p.add_argument("--apply", action="store_true", help="move them (default: show the plan)")
    p.add_argument("--mode", help="the agent's mode (read-only modes refuse --apply)")
    c.add("sync", cmd_sync, protocol.BankSync, parent=bank)
    c.add("ingest", cmd_ingest, protocol.IngestLifecycle, parent=bank)
    p = c.add(
        "projects",
        cmd_projects,
        protocol.Projects,
        protocol.ProjectsRemove,
        help="known projects; `projects remove DIR` forgets one (its memory is kept aside)",
    )
    p.add_argument("action", nargs="?", choices=["remove"])
    p.add_argument("directory", nargs="?", metavar="DIR")
    c.add("ingest", cmd_ingest, protocol.IngestLifecycle)


def cmd_init(s: Session) -> None:
    s.emit(s.call(protocol.BankInit(brief=s.args.brief), BULK_BUDGET_S), render.bank_init)


def cmd_validate(s: Session) -> None:
    result = s.call(protocol.BankValidate())
    s.emit(result, render.bank_validate)
    if not result.valid:  # a script (or CI) can rely on the exit code
        raise Failed("the memory bank has problems")


def cmd_read(s: Session) -> None:
    result = s.call(protocol.BankRead(name=s.args.name))
    if s.as_json:
        s.emit(result, render.bank_read)
    else:
        sys.stdout.write(result.content)


def cmd_write(s: Session) -> None:
    change = protocol.BankWrite(name=s.args.name, content=sys.stdin.read(), mode=s.args.mode)
    s.emit(s.call(change, BULK_BUDGET_S), render.bank_written)


def cmd_update(s: Session) -> None:
    change = protocol.BankUpdate(name=s.args.name, content=sys.stdin.read(), mode=s.args.mode)
    s.emit(s.call(change, BULK_BUDGET_S), render.bank_written)


def cmd_list(s: Session) -> None:
    s.emit(s.call(protocol.BankList()), render.bank_list)


def cmd_activate(s: Session) -> None:
    request = protocol.BankActivate(mode=s.args.mode, files=s.args.file)
    s.emit(s.call(request), render.bank_activate)


def cmd_process(s: Session) -> None:
    a = s.args
    request = protocol.BankProcess(content=sys.stdin.read(), apply=a.apply, mode=a.mode)
    s.emit(s.call(request, BULK_BUDGET_S), render.bank_process)


def cmd_optimise(s: Session) -> None:
    optimise = protocol.BankOptimise(apply=s.args.apply, mode=s.args.mode)
    s.emit(s.call(optimise, BULK_BUDGET_S), render.bank_optimised)


def cmd_sync(s: Session) -> None:
    result = s.call(protocol.BankSync(wait_ms=SYNC_WAIT_MS), SYNC_WAIT_MS / 1000 + 5)
    s.emit(result, render.bank_synced)
    if result.pending or result.writing:
        raise Failed("some memory bank changes are not on disk yet")


def cmd_ingest(s: Session) -> None:
    s.emit(s.call(protocol.IngestLifecycle(), BULK_BUDGET_S), render.ingested)


def cmd_projects(s: Session) -> None:
    if s.args.action is None:
        s.emit(s.call(protocol.Projects(), BULK_BUDGET_S), render.projects)
        return
    if not s.args.directory:
        raise Failed("projects remove needs the project's DIR", EXIT_USAGE)
    request = protocol.ProjectsRemove(path=os.path.abspath(s.args.directory))
    s.emit(s.call(request, BULK_BUDGET_S), render.project_removed)
