"""Commands on the instruction files (``MEMORY.md`` and its imports, design §11)."""

from __future__ import annotations

import sys

from memctl import protocol, render
from memctl.cli import Session
from memctl.commands import Commands


def register(c: Commands) -> None:
    files = c.group("files", "instruction files (MEMORY.md and imports): show, list, refresh")
    c.add("show", cmd_show, protocol.FilesShow, parent=files)
    c.add("list", cmd_list, protocol.FilesList, parent=files)
    c.add("refresh", cmd_refresh, protocol.FilesRefresh, parent=files)
    p = c.add("save-memory", cmd_save_memory, protocol.SaveMemory)
    p.add_argument("text", help="the text ('-' reads stdin)")
    p.add_argument("--section", help="the ## section to append to (default: Saved memories)")
    p.add_argument("--target", choices=["project", "local", "global"], default="project")
    p.add_argument("--yes", action="store_true", help="write it (without: only show the diff)")


def cmd_show(s: Session) -> None:
    s.emit(s.call(protocol.FilesShow()), render.files_show)


def cmd_list(s: Session) -> None:
    s.emit(s.call(protocol.FilesList()), render.files_list)


def cmd_refresh(s: Session) -> None:
    s.emit(s.call(protocol.FilesRefresh()), render.files_list)


def cmd_save_memory(s: Session) -> None:
    a = s.args
    text = sys.stdin.read() if a.text == "-" else a.text
    request = protocol.SaveMemory(content=text, section=a.section, target=a.target, confirm=a.yes)
    s.emit(s.call(request), render.saved_memory)
