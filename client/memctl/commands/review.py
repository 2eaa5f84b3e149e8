"""``memctl review``: what memory learned, with why it scored what it scored and where it came
from; ``accept``, ``reject`` and ``edit`` give the user's word on it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile

from memctl import protocol, render
from memctl.cli import EXIT_USAGE, Failed, Session
from memctl.commands import Commands

# Lines of the edited file starting with this are our instructions, not the user's text.
_COMMENT = "#:"


def register(c: Commands) -> None:
    p = c.add(
        "review",
        cmd_review,
        protocol.Review,
        protocol.ReviewAccept,
        protocol.ReviewReject,
        protocol.ReviewEdit,
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["accept", "reject", "edit"],
        help="without one, list what waits for review",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="items (an id or a unique prefix)")
    p.add_argument("--reason", default="", help="why they are rejected (kept in the audit log)")
    p.add_argument("--limit", type=int, default=50, help="items listed at most")
    p = c.add("session", cmd_session, protocol.SessionShow)
    p.add_argument("session_id", metavar="SESSION", help="a captured session's id")


def cmd_session(s: Session) -> None:
    s.emit(s.call(protocol.SessionShow(session_id=s.args.session_id)), render.session)


def cmd_review(s: Session) -> None:
    a = s.args
    if a.action is None:
        if a.ids:
            raise Failed("memctl review takes IDs only after accept, reject or edit", EXIT_USAGE)
        s.emit(s.call(protocol.Review(limit=a.limit)), render.review)
        return
    if not a.ids:
        raise Failed(f"memctl review {a.action} needs at least one ID", EXIT_USAGE)
    if a.action == "accept":
        s.emit(s.call(protocol.ReviewAccept(ids=a.ids)), render.review_decided)
    elif a.action == "reject":
        s.emit(s.call(protocol.ReviewReject(ids=a.ids, reason=a.reason)), render.review_decided)
    else:
        _edit(s, a.ids)


def _edit(s: Session, ids: list[str]) -> None:
    if len(ids) != 1:
        raise Failed("memctl review edit takes one ID", EXIT_USAGE)
    item = _find(s.call(protocol.Review(limit=10_000)).items, ids[0])
    text = _edited(item)
    if text is None:
        print("unchanged: nothing saved", file=sys.stderr)
        return
    s.emit(s.call(protocol.ReviewEdit(target=item.id, content=text)), render.review_decided)


def _find(items: list[protocol.ReviewItem], wanted: str) -> protocol.ReviewItem:
    key = wanted.strip().lower()
    found = [i for i in items if i.id == key] or [i for i in items if i.id.startswith(key)]
    if len(found) != 1:
        problem = "nothing waiting for review is" if not found else f"{len(found)} items are"
        raise Failed(f"{problem} named {wanted!r} (see memctl review)", error="not_found")
    return found[0]


def _edited(item: protocol.ReviewItem) -> str | None:
    """The item's text as the user left it in $EDITOR (VISUAL, then EDITOR, then vi); None when
    unchanged."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    header = (
        f"{_COMMENT} Reword this {item.category} ({item.kind} {item.id[:8]}); it is saved as "
        f"confirmed memory.\n{_COMMENT} Lines starting with '{_COMMENT}' are ignored.\n"
    )
    with tempfile.TemporaryDirectory(prefix="memctl-review-") as folder:
        path = os.path.join(folder, f"{item.id[:8]}.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(header + item.content + "\n")
        try:
            done = subprocess.run([*shlex.split(editor), path], check=False)
        except OSError as exc:
            raise Failed(f"cannot start the editor {editor!r}: {exc}", EXIT_USAGE) from None
        if done.returncode != 0:
            raise Failed(f"the editor exited with {done.returncode}: nothing saved")
        with open(path, encoding="utf-8") as fh:
            kept = [line for line in fh.read().splitlines() if not line.startswith(_COMMENT)]
    text = "\n".join(kept).strip()
    if not text:
        raise Failed("the text is empty: nothing saved (memctl review reject drops an item)")
    return None if text == item.content.strip() else text
