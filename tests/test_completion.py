"""Shell completion comes from memctl's own parser: bash really completes with it."""

from __future__ import annotations

import shlex
import shutil
import subprocess

from conftest import BIN


def _script(shell: str) -> str:
    result = subprocess.run(
        [str(BIN / "memctl"), "completion", shell], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _complete(script: str, words: list[str]) -> list[str]:
    """What bash offers after ``words`` (the last one being completed, "" for a new word)."""
    quoted = " ".join(shlex.quote(word) for word in words)
    probe = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        '_memctl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    ran = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.split()


def test_bash_completes_commands_actions_options_and_values() -> None:
    script = _script("bash")
    offered = set(_complete(script, ["memctl", ""]))
    assert {"remember", "search", "bank", "status", "completion", "--json"} <= offered
    assert _complete(script, ["memctl", "rem"]) == ["remember"]
    assert _complete(script, ["memctl", "bank", "v"]) == ["validate"]
    assert "--brief" in _complete(script, ["memctl", "bank", "init", "--"])
    assert {"on", "off"} <= set(_complete(script, ["memctl", "--json", "auto", ""]))
    assert _complete(script, ["memctl", "--project", "/x", "install-hooks", "g"]) == ["gemini"]


def test_zsh_and_fish_scripts_parse() -> None:
    for shell in ("zsh", "fish"):
        script = _script(shell)
        assert "memctl" in script and "remember" in script
        if shutil.which(shell) is None:
            continue
        checked = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_an_unknown_shell_is_a_usage_error() -> None:
    result = subprocess.run(
        [str(BIN / "memctl"), "completion", "tcsh"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "invalid choice" in result.stderr
