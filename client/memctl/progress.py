"""Progress bars on stderr for long work, drawn by tqdm: the lines of ``memctl import``, and the
daemon's index rebuild and transcript backlog while ``memctl status --wait`` watches them.

A bar shows only on a terminal, never under ``--json``, and only once its work has run for a
second (tqdm's ``delay``). Imported by those two commands when they run, so that the agent's
hook and every other command never load tqdm (``tests/test_imports.py``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm

from memctl import protocol

DELAY_S = 1.0
# Tests set this (to 0) to see a bar without running for a second; it is not a user setting.
DELAY_ENV = "MEMCTL_PROGRESS_DELAY_S"


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get(DELAY_ENV, DELAY_S)))
    except ValueError:
        return DELAY_S


def bar(total: int | None, unit: str, desc: str, *, shown: bool, unit_scale: bool = False) -> Any:
    """A tqdm bar of ``total`` ``unit``\\s; ``shown`` False (``--json``) draws nothing, and
    neither does tqdm when stderr is not a terminal (``disable=None``)."""
    return tqdm(
        total=total,
        unit=unit,
        desc=desc,
        file=sys.stderr,
        delay=_delay(),
        disable=None if shown else True,
        unit_scale=unit_scale,
        dynamic_ncols=True,
    )


def advance(b: Any, done: int, total: int) -> None:
    """Move ``b`` to ``done`` of ``total`` (counts the daemon reports, not increments)."""
    if total != b.total:
        b.total = total
    if done < b.n:  # a new round of work (a backlog queued again): start over
        b.reset(total)
    b.update(done - b.n)


class DaemonWork:
    """One bar per kind of long work a ``status`` reply reports under way: the index rebuild
    (documents) and the transcript backlog (bytes, with its files in the label). A bar whose
    work the next reply no longer reports is moved to its end and closed."""

    def __init__(self, *, shown: bool) -> None:
        self._shown = shown
        self._bars: dict[str, Any] = {}

    def show(self, status: protocol.StatusResult) -> None:
        rebuilding = status.project.index.rebuilding if status.project is not None else None
        if rebuilding is not None:
            self._move("index", "rebuilding index", "docs", rebuilding, scale=False)
        else:
            self._end("index")
        backlog = status.capture.backlog
        if backlog is not None and "backlog" not in self._bars and not _pending(backlog):
            return  # done before it was first seen: nothing to draw
        if backlog is not None:
            label = f"reading transcripts {backlog.files.done}/{backlog.files.total} files"
            self._move("backlog", label, "B", backlog.bytes, scale=True)
            if not _pending(backlog):
                self._end("backlog")
        else:
            self._end("backlog")

    def _move(self, name: str, label: str, unit: str, at: protocol.Progress, scale: bool) -> None:
        b = self._bars.get(name)
        if b is None:
            b = self._bars[name] = bar(at.total, unit, label, shown=self._shown, unit_scale=scale)
        b.set_description_str(label, refresh=False)
        advance(b, at.done, at.total)

    def _end(self, name: str) -> None:
        b = self._bars.pop(name, None)
        if b is not None:
            advance(b, b.total, b.total)
            b.close()

    def close(self) -> None:
        """Stop drawing (the work ended, or the wait gave up): bars stay where they are."""
        for b in self._bars.values():
            b.close()
        self._bars.clear()


def _pending(backlog: protocol.Backlog) -> bool:
    return backlog.files.done < backlog.files.total
