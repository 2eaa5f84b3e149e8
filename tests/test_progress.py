"""Progress of long work (issue 17): ``memctl import`` draws a bar on a terminal (not under
``--json``, not into a pipe); the daemon reports an index rebuild and the transcript backlog in
``status``, and ``status --wait`` waits for them to end, with a bar on a terminal.

The bars wait a second before they show (tqdm's ``delay``); these tests set
``MEMCTL_PROGRESS_DELAY_S=0`` so that a short piece of work draws one at once."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from conftest import BIN, Daemon, Env, memctl, ok_json
from memctl import protocol, render
from memctl.commands.memory import IMPORT_CHUNK_LINES, _chunks
from memoryd import index as index_module
from memoryd.core.entries import new_entry
from memoryd.core.events import EntriesForgotten, EntriesImported
from memoryd.core.recall.retrieval import RetrievalConfig
from memoryd.index import SearchIndex
from memoryd.store.sqlite import SqliteStore

NO_DELAY = {"MEMCTL_PROGRESS_DELAY_S": "0"}


def _on_a_terminal(env: Env, *args: str) -> tuple[int, str, str]:
    """Run ``memctl`` with its stderr on a pseudo-terminal of 100 columns and stdout piped, as
    in a shell; returns (exit code, stdout, what the terminal showed)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [str(BIN / "memctl"), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env.environ() | NO_DELAY,
        cwd=env.project,
    )
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not data:
            break
        shown += data
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=60), out, shown.decode(errors="replace")


def _entries(tmp_path: Path, n: int) -> Path:
    source = tmp_path / "in.jsonl"
    lines = (json.dumps({"content": f"Service {i} deploys on Fridays"}) for i in range(n))
    source.write_text("\n".join(lines) + "\n")
    return source


def test_import_bar_on_a_terminal_only(env: Env, daemon: Daemon, tmp_path: Path) -> None:
    source = _entries(tmp_path, 40)
    code, out, shown = _on_a_terminal(env, "import", str(source))
    assert code == 0 and out == "imported 40, duplicates 0, rejected 0\n"
    assert "importing: 100%" in shown and "40/40" in shown and "lines/s" in shown, shown

    again = _entries(tmp_path, 41)  # one new line, 40 duplicates
    code, out, shown = _on_a_terminal(env, "--json", "import", str(again))
    assert code == 0 and json.loads(out)["imported"] == 1
    assert shown == ""  # --json: no bar, even on a terminal

    piped = subprocess.run(
        [str(BIN / "memctl"), "import", str(again)],
        capture_output=True,
        text=True,
        env=env.environ() | NO_DELAY,
        cwd=env.project,
        timeout=60,
    )
    assert piped.returncode == 0 and piped.stderr == ""  # stderr a pipe: no bar
    assert piped.stdout == "imported 0, duplicates 41, rejected 0\n"


def test_import_requests_carry_a_bounded_number_of_lines() -> None:
    """The bar moves once a request: a file of more lines than a request carries is sent in
    several, numbered from the line each starts at."""
    lines = [f'{{"content": "entry {i}"}}' for i in range(2 * IMPORT_CHUNK_LINES + 1)]
    chunks = list(_chunks(lines))
    assert [(first, len(chunk)) for first, chunk in chunks] == [
        (1, IMPORT_CHUNK_LINES),
        (IMPORT_CHUNK_LINES + 1, IMPORT_CHUNK_LINES),
        (2 * IMPORT_CHUNK_LINES + 1, 1),
    ]
    assert [line for _, chunk in chunks for line in chunk] == lines


def _transcript(env: Env, session: str, topic: str) -> Path:
    folder = (
        env.home / ".claude" / "projects" / ("-" + str(env.project).strip("/").replace("/", "-"))
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    said = [
        ("user", f"The {topic} tests are flaky again."),
        ("assistant", f"We decided to use a lock around the {topic} refresh."),
        ("assistant", f"Never call the {topic} refresh from a request handler."),
    ]
    with open(path, "w", encoding="utf-8") as fh:
        for n, (role, text) in enumerate(said):
            content = text if role == "user" else [{"type": "text", "text": text}]
            record = {
                "type": role,
                "sessionId": session,
                "cwd": str(env.project),
                "uuid": f"{session[:8]}-{n}",
                "timestamp": f"2026-11-21T10:{n:02d}:00Z",
                "message": {"role": role, "content": content},
            }
            fh.write(json.dumps(record) + "\n")
    return path


def test_status_reports_the_transcript_backlog_and_wait_ends_with_it(env: Env) -> None:
    """Transcripts written while the daemon was down are its start-up backlog: ``status``
    counts them (files and bytes) from its first reply, and ``status --wait`` exits 0 once every
    one is read."""
    topics = ("cart cache", "pricing", "checkout", "search index")
    paths = [
        _transcript(env, f"{i:08x}-1d2b-4c3d-8e4f-a1b2c3d4e5f6", t) for i, t in enumerate(topics)
    ]
    size = sum(p.stat().st_size for p in paths)
    daemon = Daemon(env).start()
    try:
        first = ok_json(env, "status")["capture"]["backlog"]
        assert first["files"]["total"] == 4 and first["bytes"]["total"] == size

        waited = memctl(env, "--json", "status", "--wait")
        assert waited.code == 0, waited.stderr
        backlog = json.loads(waited.stdout)["capture"]["backlog"]
        assert backlog == {"files": {"done": 4, "total": 4}, "bytes": {"done": size, "total": size}}
        assert ok_json(env, "status")["capture"]["files"] == 4  # each one was read

        plain = memctl(env, "status", "--wait")  # nothing under way: it answers at once
        assert plain.code == 0 and "reading transcripts" not in plain.stdout + plain.stderr
    finally:
        daemon.stop()


def test_status_wait_shows_an_index_rebuild_until_it_ends(env: Env, daemon: Daemon) -> None:
    """A missing index is rebuilt a page per loop turn after the project opens: the reply that
    opens it reports the rebuild under way, and ``status --wait`` draws it to its end."""
    for text in ("Auth tokens expire after an hour", "Payments use Stripe", "Deploys on Fridays"):
        ok_json(env, "remember", text)
    daemon.stop()
    shutil.rmtree(next((env.data / "projects").iterdir()) / "index")
    again = Daemon(env).start()
    try:
        code, out, shown = _on_a_terminal(env, "status", "--wait")
        assert code == 0, shown
        assert "rebuilding index: 100%" in shown and "3/3" in shown, shown
        assert out.startswith("memoryd ") and "rebuilding" not in out
        index = ok_json(env, "status")["project"]["index"]
        assert index["rebuilding"] is None and index["documents"] == 3
        assert index["rebuilt_at_open"] == "missing index"
        assert ok_json(env, "search", "stripe payments")["results"][0]["content"] == (
            "Payments use Stripe"
        )
    finally:
        again.stop()


def test_status_names_long_work_under_way() -> None:
    """What ``memctl status`` prints while a rebuild and a backlog go on."""
    status = protocol.StatusResult(
        daemon=protocol.DaemonInfo(version="1", protocol=2, pid=1, uptime_s=3.0, socket="s"),
        project=protocol.ProjectInfo(
            root="/p",
            slug="p",
            entries=protocol.EntryCounts(),
            sessions=0,
            index=protocol.IndexInfo(
                documents=0,
                applied_seq=-1,
                rebuilt_at_open="missing index",
                rebuilding=protocol.Progress(done=1500, total=30000),
            ),
        ),
        slo=protocol.SloInfo(),
        errors=[],
        capture=protocol.CaptureInfo(
            enabled=True,
            backlog=protocol.Backlog(
                files=protocol.Progress(done=2, total=7),
                bytes=protocol.Progress(done=1_200_000, total=5_000_000),
            ),
        ),
    )
    assert status.work_under_way()
    text = render.status(status)
    assert "index: rebuilding (missing index), 1,500 of 30,000 documents" in text
    assert "capture: reading transcripts, 2 of 7 files, 1.2 of 5.0 MB" in text


def _indexed_ids(index: SearchIndex) -> set[str]:
    hits = index.retrieve(
        {"shared": 1.0}, scope="active", active_files=(), config=RetrievalConfig(), scan=100
    )
    return set(hits.ids([c.ref for c in hits.candidates]))


def test_changes_made_while_a_rebuild_goes_on_are_in_the_index_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild a page per step, with the store changing between steps: an entry forgotten
    after its page was written, one forgotten before, one added: once it has ended and caught
    up, the index holds what the store holds."""
    monkeypatch.setattr(index_module, "REBUILD_PAGE", 2)
    store = SqliteStore(tmp_path / "memory.db")
    ids = [f"{i:032x}" for i in range(6)]
    entries = tuple(
        new_entry(
            entry_id=entry_id,
            content=f"Shared fact number {n}",
            category="discovery",
            status="confirmed",
            now=1_800_000_000.0,
            source=protocol.Source(kind="user"),
        )
        for n, entry_id in enumerate(ids)
    )
    store.apply(EntriesImported(entries), 1)
    index = SearchIndex(tmp_path / "index")
    try:
        index.open_synced(store)  # missing: begun, not done
        assert index.state().rebuilding == (0, 6) and index.rebuild_reason == "missing index"
        assert index.rebuild_step() and index.state().rebuilding == (2, 6)
        store.apply(EntriesForgotten((ids[0], ids[5])), 2)
        added = new_entry(
            entry_id="f" * 32,
            content="Shared fact added meanwhile",
            category="discovery",
            status="confirmed",
            now=1_800_000_001.0,
            source=protocol.Source(kind="user"),
        )
        store.apply(EntriesImported((added,)), 3)
        while index.rebuild_step():
            pass
        assert not index.rebuilding and index.applied_seq < store.change_seq()
        index.sync(store)
        assert _indexed_ids(index) == {*ids[1:5], "f" * 32}
        assert index.applied_seq == store.change_seq()
    finally:
        index.close()
        store.close()
