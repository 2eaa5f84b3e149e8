"""A full disk under the daemon (issue 10, problems 1 and 2)."""

from __future__ import annotations

import json
import shutil
import signal

from conftest import Daemon, Env, memctl, ok_json, until
from faults.conftest import small_disk
from memctl import protocol
from memctl.transport import Client


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

            def logged_again() -> dict[str, object] | None:
                """The last line once it is a whole record written after the disk was freed:
                the file first grows by the newline that ends the line the full disk tore."""
                ok_json(env, "status")
                if log_file.stat().st_size <= size:
                    return None
                try:
                    return json.loads(log_file.read_text().splitlines()[-1])
                except json.JSONDecodeError:
                    return None  # the torn line, now ended: the next record comes after it

            last = until(logged_again, "the log file is written again once there is space")
            assert last["event"] == "request"
            assert daemon.stop() == 0
        finally:
            daemon.stop()
    stderr = daemon.stderr_path.read_text()
    assert "Traceback" not in stderr and "Logging error" not in stderr
    assert stderr.count(f"cannot write the log file {log_file}") >= 1
    assert f"writing the log file {log_file} again" in stderr


def _search(env: Env, query: str) -> tuple[protocol.Reply, list[str]]:
    """A search's reply and the contents found (empty for an error)."""
    request = protocol.Search(query=query, project=str(env.project), k=10)
    with Client(endpoint="ipc://" + str(env.socket)) as client:
        reply = client.call(request, budget_s=20)
    if not isinstance(reply, protocol.Ok):
        return reply, []
    return reply, [r.content for r in protocol.result_of(request, reply).results]


def test_a_full_index_disk_heals_without_a_restart(env: Env) -> None:
    """Proves that the search index survives a full disk under it: while its directory cannot
    be written, searches are still answered from the index as last written and the real cause
    (no space left) is reported; once there is space again, the next search finds what was
    remembered meanwhile, without a restart, and ``check`` is ok. On main the first failed
    commit made the search an internal error (tantivy's ValueError) with nothing reported as
    the cause, and the killed writer was never replaced."""
    daemon = Daemon(env).start()
    try:
        ok_json(env, "remember", "The ledger service runs on Postgres 15")
    finally:
        daemon.stop()
    [index] = list((env.data / "projects").glob("*/index"))
    kept = index.with_name("index-kept")
    shutil.move(index, kept)
    with small_disk(index, "2m") as disk:
        for path in kept.iterdir():
            shutil.copy2(path, index / path.name)
        daemon = Daemon(env).start()
        try:
            assert _search(env, "ledger Postgres")[1] == ["The ledger service runs on Postgres 15"]
            disk.fill()
            ok_json(env, "remember", "The billing queue is drained every night at two")
            reply, found = _search(env, "ledger Postgres")
            assert isinstance(reply, protocol.Ok), reply
            assert found == ["The ledger service runs on Postgres 15"]
            causes = " ".join(e.description for e in reply.previous_errors)
            assert "search index cannot be written" in causes and "No space left" in causes
            disk.free()
            reply, found = _search(env, "billing queue drained")
            assert isinstance(reply, protocol.Ok), reply
            assert found == ["The billing queue is drained every night at two"]
            assert ok_json(env, "check")["ok"] is True
        finally:
            daemon.stop()


def _refused(env: Env, *args: str, stdin: str | None = None) -> str:
    """The error of a command the daemon refuses."""
    result = memctl(env, *args, stdin=stdin)
    assert result.code != 0, f"{args} done on a full disk"
    return result.stderr


def test_a_full_data_disk_names_the_cause_and_heals_without_a_restart(env: Env) -> None:
    """Proves that a full disk under a project's data folder (memory.db, its WAL, the audit log)
    is reported as what it is, reads keep being served, and writes resume by themselves once
    there is space again, nothing lost or doubled; and that a project opened on a full disk is
    refused with that cause, its database left where it is. On main the user read "cannot
    rollback - no transaction is active" (SQLite had rolled back by itself on SQLITE_FULL), and
    opening the project on a full disk moved memory.db aside as "corrupt"."""
    daemon = Daemon(env).start()
    try:
        ok_json(env, "remember", "The ledger service runs on Postgres 15")
    finally:
        daemon.stop()
    [folder] = list((env.data / "projects").glob("*"))
    kept = folder.with_name("kept")
    shutil.move(folder, kept)
    with small_disk(folder, "4m") as disk:
        for path in kept.iterdir():
            (shutil.copytree if path.is_dir() else shutil.copy2)(path, folder / path.name)
        daemon = Daemon(env).start()
        try:
            assert ok_json(env, "search", "ledger Postgres")["results"]  # the project is open
            # The compaction its opening started writes an event when it ends: before the disk
            # is filled, or it is that event the disk refuses (the import is then refused with
            # its cause, not its own).
            until(lambda: ok_json(env, "compact")["done"], "the compaction of the opening")
            disk.fill(leave=4096)  # one page: a short audit line fits, SQLite's commit does not
            # One event longer than what is left: the journal refuses it.
            lines = "".join(
                json.dumps({"content": f"Imported rule {n} keeps the ledger balanced"}) + "\n"
                for n in range(400)
            )
            errors = [_refused(env, "import", "-", stdin=lines)]
            # Short enough for the journal: SQLite refuses it (its WAL needs several pages).
            errors.append(
                _refused(env, "remember", "The billing queue is drained every night at two")
            )
            assert "the audit log" in errors[0] and "nothing was changed" in errors[0], errors
            assert "journaled" in errors[1] and "the database" in errors[1], errors
            for error in errors:
                assert "No space left on the device" in error, error
                assert "no transaction is active" not in error and "Traceback" not in error
            # Reads are served meanwhile, from what the disk holds.
            found = ok_json(env, "search", "ledger Postgres")["results"]
            assert [r["content"] for r in found] == ["The ledger service runs on Postgres 15"]
            assert ok_json(env, "status")["daemon"]["pid"] == daemon.proc.pid

            disk.free()
            # The change the journal took is applied by the daemon itself, without a write.
            until(
                lambda: ok_json(env, "search", "billing queue drained")["results"],
                "the journaled change is applied once there is space",
            )
            ok_json(env, "remember", "The staging cluster deploys first")
            contents = [e["content"] for e in ok_json(env, "list", "--limit", "100")["entries"]]
            assert sorted(contents) == [
                "The billing queue is drained every night at two",
                "The ledger service runs on Postgres 15",
                "The staging cluster deploys first",
            ]
            assert ok_json(env, "check")["ok"] is True
        finally:
            daemon.stop()
        # A project opened on a full disk: refused with the cause, nothing moved aside.
        disk.fill()
        daemon = Daemon(env).start()
        try:
            error = _refused(env, "remember", "The release train leaves on Thursdays")
            assert "No space left on the device" in error and "corrupt" not in error, error
            assert not list(folder.glob("memory.db.corrupt-*"))
            disk.free()
            ok_json(env, "remember", "The release train leaves on Thursdays")
            assert len(ok_json(env, "list", "--limit", "100")["entries"]) == 4
            assert ok_json(env, "check")["ok"] is True
        finally:
            daemon.stop()
