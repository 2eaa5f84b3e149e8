"""The daemon's logs: JSON lines in a file rotated by size, nothing written there under systemd
(its journal keeps stderr), human-readable lines on a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd import logs


@pytest.fixture
def closed() -> Iterator[None]:
    yield
    logs.close()


def test_file_is_json_lines_rotated_by_size(
    tmp_path: Path, closed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    path = tmp_path / "state" / "memoryd.log"
    logs.configure("info", path, max_bytes=4096, backups=2)
    log = logs.get()
    for n in range(200):
        log.info("request", op="search", n=n, ms=0.5)
    log.debug("not_written")
    logs.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["memoryd.log", "memoryd.log.1", "memoryd.log.2"]  # older ones dropped
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in path.parent.iterdir())
    lines = [json.loads(x) for p in path.parent.iterdir() for x in p.read_text().splitlines()]
    assert all(x["event"] == "request" and x["level"] == "info" for x in lines)
    assert max(x["n"] for x in lines) == 199 and all("timestamp" in x for x in lines)


def test_under_systemd_the_journal_keeps_the_log(
    tmp_path: Path, closed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    path = tmp_path / "memoryd.log"
    logs.configure("info", path)
    logs.get().info("started")
    assert not path.exists()


def test_a_terminal_gets_readable_lines(tmp_path: Path) -> None:
    """stderr on a pseudo-terminal (``script`` gives the child one): no JSON there."""
    code = (
        "from memoryd import logs; logs.configure('info', None); "
        "logs.get().info('started', socket='ipc:///run/x')"
    )
    ran = subprocess.run(
        ["script", "-qec", f'{sys.executable} -c "{code}"', "/dev/null"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ran.returncode != 0 and "script" in ran.stderr:
        pytest.skip("util-linux script is not available")
    line = ran.stdout.strip().splitlines()[-1]
    assert "started" in line and "socket=ipc:///run/x" in line and not line.startswith("{")
