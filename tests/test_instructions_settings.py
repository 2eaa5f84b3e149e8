"""The ``[instructions]`` settings reaching the instruction files, ``MEMORY.local.md`` kept out of
git, ``memctl files edit``, and instruction files reloaded when they change on disk (SPEC §11;
seed 003). The real daemon and memctl; waits are replies under a deadline, never sleeps."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from conftest import Daemon, Env, memctl, ok_json, until
from memoryd import config
from memoryd.core.instructions import plan_gitignore


def _show(env: Env) -> dict:
    return ok_json(env, "files", "show")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[instructions]\nfile_nam = 'X.md'\n", "did you mean 'file_name'"),
        ("[instructions]\nfile_name = 'notes.txt'\n", "file_name"),
        ("[instructions]\nfile_name = 'a/MEMORY.md'\n", "plain"),
        ("[instructions]\nbudget_percent = 39\n", "budget_percent"),
        ("[instructions]\ntrusted_folders = ['relative/docs']\n", "not absolute"),
    ],
)
def test_bad_instructions_settings_are_clear(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=fragment):
        config.load(path)


def test_settings_choose_the_name_depth_plugins_and_trusted_folders(
    env: Env, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-docs"
    shared.mkdir()
    (shared / "style.md").write_text("Shared style: tabs.\n")
    plugins = tmp_path / "plugins"
    (plugins / "lint" / "memory").mkdir(parents=True)
    (plugins / "lint" / "memory" / "AGENTS_MEMORY.md").write_text("Plugin rule: run ruff.\n")
    main = f"# Project\n\n@import {shared}/style.md\n@import a.md\n"
    (env.project / "AGENTS_MEMORY.md").write_text(main)
    (env.project / "a.md").write_text("A level one.\n\n@import b.md\n")
    (env.project / "b.md").write_text("B level two.\n")
    (env.project / "MEMORY.md").write_text("The default name: not read.\n")
    settings = {
        "MEMORYD_INSTRUCTIONS__FILE_NAME": "AGENTS_MEMORY.md",
        "MEMORYD_INSTRUCTIONS__MAX_DEPTH": "1",
        "MEMORYD_INSTRUCTIONS__PLUGINS_DIR": str(plugins),
        "MEMORYD_INSTRUCTIONS__TRUSTED_FOLDERS": json.dumps([str(shared)]),
    }
    daemon = Daemon(env, settings).start()
    try:
        shown = _show(env)
    finally:
        daemon.stop()
    text = shown["text"]
    assert "Shared style: tabs." in text and "A level one." in text
    assert "Plugin rule: run ruff." in text and "tier=plugin" in text
    assert "B level two." not in text and "not read" not in text
    assert {p["kind"] for p in shown["problems"]} == {"depth"}
    assert shown["targets"]["local"] == str(env.project / "AGENTS_MEMORY.local.md")


def test_without_the_trusted_folder_an_outside_import_is_refused(
    env: Env, daemon: Daemon, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("Outside text.\n")
    (env.project / "MEMORY.md").write_text(f"@import {outside}\n")
    shown = _show(env)
    assert "Outside text." not in shown["text"]
    assert [p["kind"] for p in shown["problems"]] == ["untrusted"]


@pytest.mark.parametrize(
    "existing, expected",
    [
        (None, "MEMORY.local.md\n"),
        ("node_modules/\n", "node_modules/\nMEMORY.local.md\n"),
        ("dist", "dist\nMEMORY.local.md\n"),
        ("/MEMORY.local.md\n", None),
        ("*.local.md\n", None),
        ("# MEMORY.local.md\n", "# MEMORY.local.md\nMEMORY.local.md\n"),
    ],
)
def test_plan_gitignore(existing: str | None, expected: str | None) -> None:
    assert plan_gitignore(existing, "MEMORY.local.md") == expected


def test_a_local_file_created_by_save_memory_is_ignored_once(env: Env, daemon: Daemon) -> None:
    (env.project / ".gitignore").write_text("build/\n")
    ok_json(env, "save-memory", "My token lives in ~/.netrc", "--target", "local", "--yes")
    assert (env.project / ".gitignore").read_text() == "build/\nMEMORY.local.md\n"
    mode = stat.S_IMODE((env.project / "MEMORY.local.md").stat().st_mode)
    assert mode == 0o600
    ok_json(env, "save-memory", "And a second note", "--target", "local", "--yes")
    ok_json(env, "files", "refresh")
    assert (env.project / ".gitignore").read_text() == "build/\nMEMORY.local.md\n"


def _editor(env: Env, tmp_path: Path, line: str, code: int = 0) -> dict[str, str]:
    """An $EDITOR that appends ``line`` to the file it is given, then exits with ``code``."""
    script = tmp_path / "fake-editor"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "{line}" >> "$1"\nexit {code}\n')
    script.chmod(0o755)
    return {"EDITOR": f"{script}"}


def _memctl_with(env: Env, extra: dict[str, str], *args: str) -> tuple[int, str, str]:
    saved = dict(env.vars)
    env.vars.update(extra)
    try:
        result = memctl(env, *args)
    finally:
        env.vars.clear()
        env.vars.update(saved)
    return result.code, result.stdout, result.stderr


def test_files_edit_opens_the_editor_then_reloads(env: Env, daemon: Daemon, tmp_path: Path) -> None:
    editor = _editor(env, tmp_path, "Always run make check.")
    code, out, err = _memctl_with(env, editor, "files", "edit")
    assert code == 0, err
    assert (env.project / "MEMORY.md").read_text() == "Always run make check.\n"
    assert str(env.project / "MEMORY.md") in out
    assert "Always run make check." in _show(env)["text"]
    code, _out, err = _memctl_with(env, editor, "files", "edit", "--target", "local")
    assert code == 0, err
    assert "MEMORY.local.md" in (env.project / ".gitignore").read_text()


def test_files_edit_reports_a_failing_editor(env: Env, daemon: Daemon, tmp_path: Path) -> None:
    code, _out, err = _memctl_with(env, _editor(env, tmp_path, "x", code=3), "files", "edit")
    assert code == 1 and "exited with status 3" in err
    code, _out, err = _memctl_with(env, {"EDITOR": "/no/such/editor"}, "files", "edit")
    assert code == 1 and "cannot run the editor" in err


def test_instruction_files_are_reloaded_when_they_change(env: Env, daemon: Daemon) -> None:
    imports = "@import docs/style.md\n@import docs/later.md\n"
    (env.project / "MEMORY.md").write_text(f"# Rules\n\n{imports}")
    (env.project / "docs").mkdir()
    style = env.project / "docs" / "style.md"
    style.write_text("Indent with four spaces.\n")
    first = _show(env)  # loaded, and from now on watched
    assert "Indent with four spaces." in first["text"]
    assert [p["kind"] for p in first["problems"]] == ["missing"]

    style.write_text("Indent with tabs.\n")
    until(lambda: "Indent with tabs." in _show(env)["text"], "an edited import reloaded")
    (env.project / "docs" / "later.md").write_text("A file imported before it existed.\n")
    until(lambda: "before it existed" in _show(env)["text"], "a created import loaded")
    (env.project / "MEMORY.md").write_text("# Rules\n\nOnly this now.\n")
    shown = until(lambda: _show_if(env, "Only this now."), "the main file reloaded")
    assert "Indent with tabs." not in shown["text"] and shown["problems"] == []


def _show_if(env: Env, needle: str) -> dict | None:
    shown = _show(env)
    return shown if needle in shown["text"] else None
