"""Incremental reading of transcript files (design §6): only what was appended since the last read.

Claude Code, Codex and Gemini ``.jsonl`` transcripts are append-only, so a persisted ``Cursor``
(inode, byte offset) is enough to resume: ``read_new`` seeks there and hands back complete lines
only. The legacy Gemini ``session-*.json`` is one JSON document rewritten whole on every change;
``read_document`` returns it again only when it changed.

Limit: a file truncated and rewritten *longer* than the cursor offset between two reads keeps its
inode and size check, so it is not noticed; the append-only writers never do that.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

DEFAULT_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Cursor:
    """Where reading a file resumes; persisted per file by the caller.

    ``offset`` is the byte offset of the next unread line (for a document: its size when read).
    ``mtime_ns`` is used by ``read_document`` only. ``in_long_line`` means ``offset`` is inside a
    line being skipped for exceeding ``max_bytes``: the next read discards up to its newline."""

    path: str
    inode: int
    offset: int
    mtime_ns: int = 0
    in_long_line: bool = False


@dataclass(frozen=True)
class Chunk:
    """The complete lines read by one ``read_new`` call."""

    lines: list[tuple[int, bytes]]  # (byte offset of the line start, line without CR/LF)
    cursor: Cursor  # where the next read starts
    restarted: bool  # the file was truncated or replaced (new inode): read from 0
    skipped_long_lines: int = 0  # lines longer than max_bytes, skipped unread
    more: bool = False  # the read filled its window: more may follow the cursor at once


def read_new(
    path: str,
    cursor: Cursor | None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    slice_bytes: int | None = None,
) -> Chunk:
    """The complete lines appended to ``path`` since ``cursor`` (None: from the start).

    Reads at most ``max_bytes``; when more is waiting (``more``), the returned cursor is short
    of the end and the caller calls again. A partial last line is left for the next read. A line
    that does not fit in ``max_bytes`` (with its newline) is skipped, never returned, and
    counted; skipping it goes on a window per call, each with ``more`` set. With
    ``slice_bytes``, a call reads about that much: the lines that end within it, or, when none
    does, the one line that starts there (still up to ``max_bytes``) and nothing after it.
    Raises FileNotFoundError when ``path`` is missing (the caller decides what that means)."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    window = max_bytes if slice_bytes is None else max(1, min(slice_bytes, max_bytes))
    # Open first, then fstat: the inode checked is the one read, even if the file is replaced
    # in between.
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        restarted = cursor is not None and (
            cursor.inode != stat.st_ino or stat.st_size < cursor.offset
        )
        resume = cursor if cursor is not None and not restarted else None
        start = resume.offset if resume is not None else 0
        handle.seek(start)
        data = handle.read(window)
        in_long_line = resume is not None and resume.in_long_line
        more = len(data) == window
        if more and window < max_bytes and not in_long_line and b"\n" not in data:
            # A line longer than the slice: read on to its end (or to ``max_bytes``), and
            # return that line alone, so one call never reads much more than one long line.
            data += handle.read(max_bytes - window)
            newline = data.find(b"\n")
            if newline >= 0:
                data = data[: newline + 1]
            elif len(data) < max_bytes:
                # The file ends inside that line (still being written, or cut short by a
                # killed writer): nothing to read until it ends. Saying "more" here had the
                # caller read the same bytes again every loop turn.
                more = False
    chunk = _chunk(path, stat.st_ino, start, data, max_bytes, in_long_line, restarted)
    return dataclasses.replace(chunk, more=more)


def _chunk(
    path: str,
    inode: int,
    start: int,
    data: bytes,
    max_bytes: int,
    in_long_line: bool,
    restarted: bool,
) -> Chunk:
    """Cut the bytes read at ``start`` into complete lines and the cursor after the last one."""
    begin = 0  # index in ``data`` where the next line starts
    if in_long_line:
        newline = data.find(b"\n")
        if newline < 0:
            # Still inside the overlong line: drop all of it (the skip was counted earlier).
            cursor = Cursor(path, inode, start + len(data), in_long_line=True)
            return Chunk([], cursor, restarted)
        begin = newline + 1
    end = data.rfind(b"\n") + 1  # just past the last newline; 0 when there is none
    if begin == 0 and end == 0 and len(data) == max_bytes:
        # A full window without a newline, starting at a line start: this line can never be
        # returned whole, so skip it rather than read the same window forever.
        cursor = Cursor(path, inode, start + len(data), in_long_line=True)
        return Chunk([], cursor, restarted, skipped_long_lines=1)
    lines = _split_lines(data, begin, end, start)
    cursor = Cursor(path, inode, start + max(begin, end))
    return Chunk(lines, cursor, restarted)


def _split_lines(data: bytes, begin: int, end: int, base: int) -> list[tuple[int, bytes]]:
    """The lines of ``data[begin:end]`` (which ends with a newline) with their file offsets."""
    if end <= begin:
        return []
    lines: list[tuple[int, bytes]] = []
    position = begin
    for raw in data[begin : end - 1].split(b"\n"):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        lines.append((base + position, line))
        position += len(raw) + 1
    return lines


def read_document(path: str, cursor: Cursor | None) -> tuple[bytes | None, Cursor]:
    """The whole content of a document file when it changed since ``cursor`` (inode, size or
    mtime differ), else None with the cursor unchanged. Raises FileNotFoundError when missing.

    The stat is taken before reading: a document caught mid-rewrite may come back incomplete,
    but the rewrite then changes size or mtime again, so the next call returns the final state
    instead of the change being lost."""
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        seen = Cursor(path, stat.st_ino, stat.st_size, mtime_ns=stat.st_mtime_ns)
        if cursor is not None and _same_version(cursor, seen):
            return None, cursor
        return handle.read(), seen


def _same_version(old: Cursor, new: Cursor) -> bool:
    return (old.inode, old.offset, old.mtime_ns) == (new.inode, new.offset, new.mtime_ns)
