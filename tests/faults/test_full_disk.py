"""A full disk under the daemon (issue 10, problems 1 and 2)."""

from __future__ import annotations

import json
import signal

from conftest import Daemon, Env, ok_json, until
from faults.conftest import small_disk


def test_a_full_log_disk_never_stops_the_daemon(env: Env) -> None:
    """Proves that logging cannot take the daemon down: with the log file's disk full, every
    request is still answered, a SIGHUP (which closes and reopens the log file) is applied, the
    log file resumes by itself once there is space again, and SIGTERM still stops the daemon
    cleanly (exit 0, no traceback on stderr). On main the reload failed in the log file's
    ``close`` (ENOSPC) before it applied anything, and the stop exited 1 with a traceback."""
    log_file = env.state / "memoryd.log"
    with small_disk(env.state.parent, "256k") as disk:  # XDG_STATE_HOME
        daemon = Daemon(env).start()
        try:
            ok_json(env, "remember", "The staging cluster deploys first")
            disk.fill()
            for n in range(20):  # each one logs a line the file cannot take
                ok_json(env, "remember", f"Release step {n} is checked by the release lead")
            assert ok_json(env, "status")["daemon"]["pid"] == daemon.proc.pid
            daemon.proc.send_signal(signal.SIGHUP)
            until(lambda: '"reloaded"' in daemon.log(), "the reload is applied on a full disk")
            assert ok_json(env, "status")["daemon"]["pid"] == daemon.proc.pid

            disk.free()
            size = log_file.stat().st_size

            def logged_again() -> bool:
                ok_json(env, "status")
                return log_file.stat().st_size > size

            until(logged_again, "the log file is written again once there is space")
            last = json.loads(log_file.read_text().splitlines()[-1])
            assert last["event"] == "request"
            assert daemon.stop() == 0
        finally:
            daemon.stop()
    stderr = daemon.stderr_path.read_text()
    assert "Traceback" not in stderr and "Logging error" not in stderr
    assert stderr.count(f"cannot write the log file {log_file}") >= 1
    assert f"writing the log file {log_file} again" in stderr
