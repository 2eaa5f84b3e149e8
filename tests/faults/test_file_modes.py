"""File modes (issue 10, hygiene): what the daemon keeps for itself is private; what it writes
in a project's repository is readable like the rest of the repository."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import Daemon, Env, ok_json


def _modes(root: Path) -> dict[str, int]:
    found = {str(root): stat.S_IMODE(os.lstat(root).st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            found[str(path)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


def test_every_file_the_daemon_keeps_is_private(env: Env) -> None:
    """Proves that after a run that touches every store (entries, import, a note, the search
    index, the audit log, the memory bank and its journal, the shared file, the log, the
    cursors and the socket), every file under the data, state and runtime directories is 0600
    and every directory 0700, while the project's memory-bank/ and .memoryd/ are 0755 with
    0644 files, as a repository needs. On main memory.db, its WAL and SHM, the index files and
    the log were 0644 and projects/ and index/ 0755."""
    daemon = Daemon(env).start()
    try:
        entry = ok_json(env, "remember", "Deploys go through the staging cluster first")["id"]
        ok_json(env, "import", "-", stdin='{"content": "The ledger runs on Postgres 15"}\n')
        ok_json(env, "note", "Ask about the release train")
        ok_json(env, "supersede", entry, "Deploys go through the staging cluster, then canary")
        assert ok_json(env, "search", "ledger Postgres")["results"]
        ok_json(env, "bank", "init")
        ok_json(env, "bank", "update", "activeContext.md", stdin="## Current Focus\n\nThe ledger\n")
        ok_json(env, "share", "on")
        ok_json(env, "bank", "sync")
        ok_json(env, "check")
        private = {
            **_modes(env.data),
            **_modes(env.state),
            **_modes(env.socket.parent),
        }
    finally:
        assert daemon.stop() == 0
    private |= _modes(env.data) | _modes(env.state)
    assert any(path.endswith("memory.db-wal") for path in private)
    assert any("/index/" in path for path in private)
    wrong = {
        path: oct(mode)
        for path, mode in private.items()
        if mode != (0o700 if os.path.isdir(path) else 0o600) and os.path.exists(path)
    }
    assert wrong == {}
    repository = _modes(env.project / "memory-bank") | _modes(env.project / ".memoryd")
    assert len(repository) > 4
    assert {
        path: oct(mode)
        for path, mode in repository.items()
        if mode != (0o755 if os.path.isdir(path) else 0o644)
    } == {}
