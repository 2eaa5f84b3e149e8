"""The README's quick start runs as written: its block, line by line, in a fresh shell, against
the real daemon, with the programs found the way the README says (the checkout's .venv/bin)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import Daemon, Env

README = Path(__file__).resolve().parents[1] / "README.md"


def _quick_start() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Try it in one minute", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the quick start's sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_runs_as_written(env: Env, daemon: Daemon, tmp_path: Path) -> None:
    lines = _quick_start()
    assert lines[0].startswith("export PATH=") and any("memctl search" in x for x in lines)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the README's venv
    shell_env = {**env.environ(), "PATH": "/usr/bin:/bin"}  # memctl on PATH only by the README
    script = ""
    for number, line in enumerate(lines):
        # One shell for the block (its `export` and `cd` carry over); a marker after each line
        # says which line failed, if one does.
        script += f"{line}\necho '--- line {number} exit' $?\n"
    ran = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=checkout,
        env=shell_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    outputs = re.split(r"--- line \d+ exit 0\n", ran.stdout)
    assert len(outputs) == len(lines) + 1, ran.stdout  # every line ran and exited 0
    by_line = dict(zip(lines, outputs, strict=False))
    search = next(out for line, out in by_line.items() if "memctl search" in line)
    assert "We never commit directly to main" in search
    assert as_seen(search) == as_seen(shown_output("memctl search"))  # the README's table
    pin = next(out for line, out in by_line.items() if "memctl pin" in line)
    assert "is pinned" in pin
    status = json.loads(next(out for line, out in by_line.items() if "status --json" in line))
    assert status["project"]["root"].endswith("/src/demo")
    assert status["project"]["entries"]["pinned"] == 1
    audit = next(out for line, out in by_line.items() if "memctl audit" in line)
    assert len(audit.splitlines()) == 3 and all('"hash"' in x for x in audit.splitlines())


def shown_output(command: str) -> str:
    """What the README shows ``$ <command>`` printing, in a ```text block."""
    text = README.read_text(encoding="utf-8")
    block = re.search(rf"```text\n\$ {re.escape(command)}[^\n]*\n(.*?)```", text, re.S)
    assert block, f"the README's example of {command}"
    return block.group(1)


def as_seen(output: str) -> list[str]:
    """Output lines with what differs from run to run (ids, ages, scores, column widths) made
    the same, so the README's example can be compared with a real run."""
    lines = []
    for line in output.strip().splitlines():
        line = re.sub(r"\b[0-9a-f]{8}\b", "<id>", line)
        line = re.sub(r"\b\d+\.\d{3}\b", "<score>", line)
        line = re.sub(r"(?<=<id> )\s*\d+(?:s|m|h|d|mo|y)\b", " <age>", line)
        lines.append(" ".join(line.split()))
    return lines


def _mcp_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## Connect it through MCP", 1)[1].split("\n## ", 1)[0]


def test_each_agents_mcp_lines_run_and_write_the_file_they_name(env: Env, tmp_path: Path) -> None:
    """Every ``memctl install-mcp …`` the README shows runs as written (here with --dry-run, in
    a private HOME) and changes the file the README names beside it."""
    section = " ".join(_mcp_section().split())
    commands = re.findall(r"`(memctl install-mcp [a-z -]+)` (?:adds|writes)[^`]*`([^`]+)`", section)
    agents = {c.split()[2] for c, _file in commands}
    assert agents == {"claude", "codex", "gemini"} and len(commands) == 6, commands
    home = tmp_path / "mcp-home"
    home.mkdir()
    shell_env = {**env.environ(), "HOME": str(home)}
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        shell_env.pop(var, None)
    bin_dir = Path(sys.executable).parent
    for command, named in commands:
        argv = [str(bin_dir / "memctl"), *command.split()[1:], "--dry-run", "--json"]
        ran = subprocess.run(
            argv, cwd=env.project, env=shell_env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        (changed,) = json.loads(ran.stdout)["files"]
        assert changed["changed"] and changed["path"].endswith(named.lstrip("~/")), named
        assert "memoryd" in changed["diff"]
