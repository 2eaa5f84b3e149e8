"""Incremental transcript reading (SPEC §6): complete lines only, restarts, bounded reads."""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.capture.tail import Chunk, Cursor, read_document, read_new


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def read_all(path: Path, cursor: Cursor | None, max_bytes: int) -> tuple[list[Chunk], Cursor]:
    """Call read_new until it makes no more progress, as the capture loop does."""
    chunks: list[Chunk] = []
    while True:
        chunk = read_new(str(path), cursor, max_bytes=max_bytes)
        chunks.append(chunk)
        if chunk.cursor == cursor:
            return chunks, chunk.cursor
        cursor = chunk.cursor


def test_only_complete_lines_and_the_partial_one_is_completed_later(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    first = read_new(str(path), None)
    assert first.lines == [(0, b'{"a":1}'), (8, b'{"b":2}')]
    assert first.cursor.offset == 16
    assert first.cursor.inode == path.stat().st_ino
    assert not first.restarted

    again = read_new(str(path), first.cursor)
    assert again.lines == [] and again.cursor == first.cursor

    append(path, b"3}\n")
    second = read_new(str(path), first.cursor)
    assert second.lines == [(16, b'{"c":3}')]
    assert second.cursor.offset == path.stat().st_size


def test_empty_file_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    assert read_new(str(path), None).lines == []
    path.write_bytes(b"\n\nx\n")
    assert read_new(str(path), None).lines == [(0, b""), (1, b""), (2, b"x")]


def test_crlf_is_stripped_and_offsets_count_the_cr(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"one\r\ntwo\r\nthr")
    chunk = read_new(str(path), None)
    assert chunk.lines == [(0, b"one"), (5, b"two")]
    assert chunk.cursor.offset == 10


def test_truncation_restarts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"first line\nsecond line\n")
    cursor = read_new(str(path), None).cursor
    with path.open("r+b") as handle:
        handle.truncate(0)
    append(path, b"new\n")
    chunk = read_new(str(path), cursor)
    assert chunk.restarted
    assert chunk.lines == [(0, b"new")]
    assert chunk.cursor.offset == 4


def test_replacement_with_a_new_inode_restarts(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"a\n")
    cursor = read_new(str(path), None).cursor
    replacement = tmp_path / "t.jsonl.tmp"
    # Longer than before, so only the inode tells the files apart.
    replacement.write_bytes(b"b\nc\nd\n")
    os.replace(replacement, path)
    chunk = read_new(str(path), cursor)
    assert chunk.restarted
    assert chunk.lines == [(0, b"b"), (2, b"c"), (4, b"d")]
    assert chunk.cursor.inode == path.stat().st_ino != cursor.inode


def test_max_bytes_reads_in_bounded_steps(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"aaaa\nbbbb\ncccc\n")
    chunk = read_new(str(path), None, max_bytes=12)
    assert chunk.lines == [(0, b"aaaa"), (5, b"bbbb")]
    assert chunk.cursor.offset == 10
    chunk = read_new(str(path), chunk.cursor, max_bytes=12)
    assert chunk.lines == [(10, b"cccc")]


def test_an_overlong_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"ok\n" + b"x" * 50 + b"\nafter\n")
    chunks, cursor = read_all(path, None, max_bytes=8)
    lines = [line for chunk in chunks for line in chunk.lines]
    assert lines == [(0, b"ok"), (54, b"after")]
    assert sum(chunk.skipped_long_lines for chunk in chunks) == 1
    assert cursor.offset == path.stat().st_size and not cursor.in_long_line


def test_an_overlong_line_still_being_written_is_skipped_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"y" * 20)
    chunks, cursor = read_all(path, None, max_bytes=8)
    assert sum(c.skipped_long_lines for c in chunks) == 1 and cursor.in_long_line
    append(path, b"y" * 5 + b"\nnext\n")
    chunks, cursor = read_all(path, cursor, max_bytes=8)
    assert [line for c in chunks for line in c.lines] == [(26, b"next")]
    assert sum(c.skipped_long_lines for c in chunks) == 0  # counted once, when first seen


def test_slices_read_a_long_line_alone_and_go_on_past_an_overlong_one(tmp_path: Path) -> None:
    """Proves that reading in slices returns every line once, in order: lines ending inside a
    slice, a line longer than the slice alone (read on to its end), and, after a line longer
    than ``max_bytes`` (skipped and counted), the lines behind it on the calls that follow,
    each of which says ``more`` until the end: no file change is needed to reach them (on main
    a skipped line ended the read, and each further window waited for the next change)."""
    path = tmp_path / "t.jsonl"
    short = [b"a" * 10, b"b" * 10]
    path.write_bytes(b"\n".join([*short, b"L" * 100, b"X" * 500, b"c" * 10, b"d" * 10]) + b"\n")
    calls, lines, skipped, cursor = 0, [], 0, None
    while True:
        chunk = read_new(str(path), cursor, max_bytes=200, slice_bytes=32)
        calls += 1
        lines += [line for _offset, line in chunk.lines]
        skipped += chunk.skipped_long_lines
        cursor = chunk.cursor
        assert chunk.more == (cursor.offset < path.stat().st_size), (calls, chunk)
        if not chunk.more:
            break
    assert lines == [*short, b"L" * 100, b"c" * 10, b"d" * 10]
    assert skipped == 1 and cursor.offset == path.stat().st_size
    first = read_new(str(path), None, max_bytes=200, slice_bytes=32)
    assert first.lines == [(0, short[0]), (11, short[1])] and first.more


def test_slices_stop_at_a_last_line_still_being_written(tmp_path: Path) -> None:
    """A file ending inside a line longer than the slice (an agent mid-write, or killed): the
    slices return the complete lines, then nothing with ``more`` unset and the cursor at that
    line's start, however often asked; once the line ends, it is read. Saying ``more`` there
    had the daemon read the same bytes again every loop turn, and a stop wait forever."""
    path = tmp_path / "t.jsonl"
    complete = [b"a" * 10, b"b" * 10]
    path.write_bytes(b"\n".join(complete) + b"\n" + b"P" * 100)  # no newline: still written
    lines, cursor = [], None
    for _ in range(5):
        chunk = read_new(str(path), cursor, max_bytes=200, slice_bytes=32)
        lines += [line for _offset, line in chunk.lines]
        cursor = chunk.cursor
        if not chunk.more:
            break
    assert not chunk.more and lines == complete and cursor.offset == 22
    again = read_new(str(path), cursor, max_bytes=200, slice_bytes=32)
    assert (again.lines, again.more, again.cursor) == ([], False, cursor)
    with open(path, "ab") as fh:
        fh.write(b"P" * 20 + b"\n")
    ended = read_new(str(path), cursor, max_bytes=200, slice_bytes=32)
    assert ended.lines == [(22, b"P" * 120)]


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_new(str(tmp_path / "gone.jsonl"), None)
    with pytest.raises(FileNotFoundError):
        read_document(str(tmp_path / "gone.json"), None)


def test_bad_max_bytes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"a\n")
    with pytest.raises(ValueError):
        read_new(str(path), None, max_bytes=0)


line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(line_bytes, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=15),
    max_bytes=st.integers(min_value=1, max_value=64),
)
def test_any_appends_and_any_max_bytes_yield_the_lines_written(
    lines: list[bytes], cuts: list[int], max_bytes: int
) -> None:
    """Lines appended at random split points and read with a random max_bytes come back in
    order with their offsets, except those too long for max_bytes, which are counted instead."""
    data = b"".join(line + b"\n" for line in lines)
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    written = list(zip(_offsets(lines), lines, strict=True))
    expected = [(offset, line) for offset, line in written if len(line) + 1 <= max_bytes]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_bytes(b"")
        got: list[tuple[int, bytes]] = []
        skipped, cursor = 0, None
        for start, end in itertools.pairwise(points):
            append(path, data[start:end])
            chunks, cursor = read_all(path, cursor, max_bytes)
            got += [line for chunk in chunks for line in chunk.lines]
            skipped += sum(chunk.skipped_long_lines for chunk in chunks)
            assert not any(chunk.restarted for chunk in chunks)
        assert got == expected
        assert skipped == len(lines) - len(expected)
        if cursor is not None:
            assert cursor.offset == len(data)
        whole = read_new(str(path), None, max_bytes=len(data) + 1)
        assert whole.lines == written


def _offsets(lines: list[bytes]) -> list[int]:
    offsets, offset = [], 0
    for line in lines:
        offsets.append(offset)
        offset += len(line) + 1
    return offsets


def test_read_document_returns_content_only_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "session-2026-01-01T10-00-abcd1234.json"
    path.write_bytes(b'{"messages": []}')
    content, cursor = read_document(str(path), None)
    assert content == b'{"messages": []}'
    assert (cursor.inode, cursor.offset) == (path.stat().st_ino, path.stat().st_size)
    assert read_document(str(path), cursor) == (None, cursor)

    path.write_bytes(b'{"messages": [1]}')  # rewritten in place, same inode
    content, cursor = read_document(str(path), cursor)
    assert content == b'{"messages": [1]}'

    replacement = tmp_path / "new.json"
    replacement.write_bytes(b'{"messages": [2]}')  # same size, new inode
    os.replace(replacement, path)
    content, cursor = read_document(str(path), cursor)
    assert content == b'{"messages": [2]}'
    assert read_document(str(path), cursor)[0] is None
