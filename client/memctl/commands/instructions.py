"""Commands on the instruction files (``MEMORY.md`` and its imports, design §11)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from memctl import protocol, render
from memctl.cli import Failed, Session
from memctl.commands import Commands

TARGETS = ["project", "local", "global"]


def register(c: Commands) -> None:
    files = c.group("files", "instruction files (MEMORY.md and imports): show, list, refresh, edit")
    c.add("show", cmd_show, protocol.FilesShow, parent=files)
    c.add("list", cmd_list, protocol.FilesList, parent=files)
    c.add("refresh", cmd_refresh, protocol.FilesRefresh, parent=files)
    p = c.add(
        "edit",
        cmd_edit,
        protocol.FilesList,
        protocol.FilesRefresh,
        parent=files,
        help="open an instruction file in $EDITOR, then reload the files",
    )
    p.add_argument("--target", choices=TARGETS, default="project", help="default: MEMORY.md")
    p = c.add("save-memory", cmd_save_memory, protocol.SaveMemory)
    p.add_argument("text", help="the text ('-' reads stdin)")
    p.add_argument("--section", help="the ## section to append to (default: Saved memories)")
    p.add_argument("--target", choices=TARGETS, default="project")
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


def cmd_edit(s: Session) -> None:
    """The daemon names the file (its configured name and folders); the editor runs here, on
    this terminal; then the daemon loads the files again (a new local file is kept out of git)."""
    target = s.args.target
    path = s.call(protocol.FilesList()).targets.get(target)
    if path is None:
        raise Failed(f"memoryd does not let the {target} instruction file be edited")
    if target == "global":
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    editor = shlex.split(os.environ.get("EDITOR", "")) or ["vi"]
    try:
        code = subprocess.run([*editor, path], check=False).returncode
    except OSError as exc:
        raise Failed(f"cannot run the editor {editor[0]!r} ($EDITOR): {exc}") from None
    if code != 0:
        raise Failed(f"{editor[0]} exited with status {code}; {path} is as it left it")
    s.emit(s.call(protocol.FilesRefresh()), render.files_list)
