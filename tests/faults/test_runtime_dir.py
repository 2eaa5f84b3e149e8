"""Faults of the runtime directory (issue 10, problem 7): logind removes
``/run/user/UID/memoryd`` at logout, under a daemon that goes on running."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

from conftest import BIN, START_DEADLINE_S, Daemon, Env, memctl, ok_json, until


def test_removed_runtime_dir_lets_no_second_daemon_start(env: Env, daemon: Daemon) -> None:
    """Proves that the single-instance lock guards the data, not the runtime directory: with
    the runtime directory (socket and all) removed, a second ``memoryd run`` on the same data
    refuses to start, and the first daemon binds its socket again by itself (private, 0600 in
    a 0700 directory) and keeps serving the data it had. On main the lock file went with the
    directory, so the second daemon started on the same data."""
    entry = ok_json(env, "remember", "Deploys go through the staging cluster first")["id"]
    shutil.rmtree(env.socket.parent)
    second = subprocess.Popen(
        [str(BIN / "memoryd"), "run"],
        env=env.environ(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = second.communicate(timeout=START_DEADLINE_S)
    except subprocess.TimeoutExpired:
        second.kill()
        second.communicate()
        raise AssertionError("a second daemon started on the same data") from None
    assert second.returncode == 1, stderr
    assert "already running" in stderr and str(daemon.proc.pid) in stderr
    assert str(env.data / "lock") in stderr

    def served() -> dict | None:
        result = memctl(env, "--json", "status")
        return result.json() if result.code == 0 else None  # type: ignore[return-value]

    status = until(served, "the first daemon serves its socket again")
    assert status["daemon"]["pid"] == daemon.proc.pid
    assert stat.S_IMODE(os.stat(env.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(env.socket).st_mode) == 0o600
    assert [e["id"] for e in ok_json(env, "list")["entries"]] == [entry]
    assert daemon.stop() == 0
    assert not env.socket.exists()
