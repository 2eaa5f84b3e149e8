"""The service files memoryd writes parse as systemd and launchd read them, whatever the home
folder's name (a space, `&`, `%`, quotes for launchd); a path systemd cannot start is refused
with the reason."""

from __future__ import annotations

import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BIN
from memoryd.service_install import plan, systemd_quote

# What systemd accepts in an executable's path: spaces, `&`, `%`, parentheses, non-ASCII.
AWKWARD = "My Home & Co (100%) é"


@pytest.fixture
def exe(tmp_path: Path) -> str:
    """The real memoryd, reachable through a folder with an awkward name."""
    folder = tmp_path / AWKWARD / "bin"
    folder.mkdir(parents=True)
    (folder / "memoryd").symlink_to(BIN / "memoryd")
    return str(folder / "memoryd")


def test_systemd_unit_names_the_executable_as_one_argument(tmp_path: Path, exe: str) -> None:
    unit = plan("linux", tmp_path / AWKWARD, exe=exe).content
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert line == f"ExecStart={systemd_quote(exe, executable=True)} run"
    assert "LimitNOFILE=" in unit  # one descriptor per client: the default 1,024 is too few
    settings = [x for x in unit.splitlines() if not x.startswith("#")]
    assert not [x for x in settings if x.startswith(("PrivateTmp", "ProtectHome"))]  # user's files
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed: the quoting is checked against the rule only")
    path = tmp_path / "memoryd.service"
    path.write_text(unit)
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr
    # The check can fail: the same unit without the quoting is refused.
    path.write_text(unit.replace(systemd_quote(exe, executable=True), exe))
    unquoted = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert unquoted.returncode != 0


def test_systemd_quote_escapes_what_systemd_expands() -> None:
    assert systemd_quote('a "b" \\c %i $HOME') == '"a \\"b\\" \\\\c %%i $$HOME"'
    for refused in ("/home/$me/bin/memoryd", "/home/O'Neil/bin/memoryd", '/a"b/memoryd'):
        with pytest.raises(ValueError, match="systemd cannot start an executable"):
            systemd_quote(refused, executable=True)


def test_launchd_plist_parses_with_the_paths_intact(tmp_path: Path, exe: str) -> None:
    home = tmp_path / AWKWARD
    content = plan("darwin", home, exe=exe).content
    parsed = plistlib.loads(content.encode())
    assert parsed["ProgramArguments"] == [exe, "run"]
    assert parsed["StandardErrorPath"] == f"{home}/Library/Logs/memoryd.err.log"
