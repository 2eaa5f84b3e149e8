"""Instruction files (SPEC §11; seed 003): discovery and precedence, frontmatter, ``@import`` and
every one of its limits, trust and symlinks, provenance, and ``save_memory`` with its preview."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from memoryd.core import instructions as core
from memoryd.core.errors import BadRequest, Forbidden, TooLarge
from memoryd.core.recall.budget import count_tokens
from memoryd.instructions.loader import (
    InstructionConfig,
    InstructionFiles,
    LoadResult,
    load,
    save_memory,
)


class Layout:
    """A home, a global dir, a plugins dir and a project, all under one temporary directory."""

    def __init__(self, base: Path) -> None:
        self.base = base.resolve()
        self.home = self.base / "home"
        self.global_dir = self.base / "xdg" / "memoryd"
        self.plugins = self.base / "plugins"
        self.project = self.base / "project"
        self.outside = self.base / "outside"
        for d in (self.home, self.global_dir, self.plugins, self.project, self.outside):
            d.mkdir(parents=True)

    def config(self, **overrides: object) -> InstructionConfig:
        fields: dict[str, object] = {
            "global_dir": self.global_dir,
            "plugins_dir": self.plugins,
            "home": self.home,
        }
        return InstructionConfig(**(fields | overrides))  # type: ignore[arg-type]

    def load(self, **overrides: object) -> LoadResult:
        return load(self.project, self.config(**overrides))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def paths(result: LoadResult) -> list[str]:
    return [s.path for s in result.segments]


def kinds(result: LoadResult) -> list[str]:
    return [p.kind for p in result.problems]


def text_of(result: LoadResult) -> str:
    return core.render(result.segments)


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


# --- discovery and precedence ------------------------------------------------------------------


def test_every_tier_is_found_in_precedence_order(lay: Layout) -> None:
    files = [
        write(lay.global_dir / "MEMORY.md", "global"),
        write(lay.global_dir / "MEMORY.local.md", "global local"),
        write(lay.plugins / "alpha" / "memory" / "MEMORY.md", "alpha"),
        write(lay.plugins / "beta" / "memory" / "MEMORY.md", "beta"),
        # Every .local.md outranks every shared file of its tier, across plugins too.
        write(lay.plugins / "alpha" / "memory" / "MEMORY.local.md", "alpha local"),
        write(lay.project / ".memoryd" / "MEMORY.md", "hidden"),
        write(lay.project / "MEMORY.md", "project"),
        write(lay.project / ".memoryd" / "MEMORY.local.md", "hidden local"),
        write(lay.project / "MEMORY.local.md", "project local"),
    ]
    result = lay.load()
    assert paths(result) == [str(f) for f in files]
    assert [s.tier for s in result.segments] == ["global"] * 2 + ["plugin"] * 3 + ["project"] * 4
    assert [s.priority for s in result.segments] == [100, 120, 200, 200, 220, 300, 310, 320, 330]
    assert result.problems == []


def test_local_files_outrank_shared_ones_and_can_be_turned_off(lay: Layout) -> None:
    write(lay.project / "MEMORY.local.md", "private")
    write(lay.project / "MEMORY.md", "shared")
    write(lay.global_dir / "MEMORY.local.md", "global private")
    assert [s.content for s in lay.load().segments] == ["global private", "shared", "private"]
    assert [s.content for s in lay.load(load_local_files=False).segments] == ["shared"]


def test_file_name_is_configurable(lay: Layout) -> None:
    write(lay.project / "MEMORY.md", "not me")
    write(lay.project / "AGENTS.md", "me")
    write(lay.project / "AGENTS.local.md", "me too")
    result = lay.load(file_name="AGENTS.md")
    assert [s.content for s in result.segments] == ["me", "me too"]
    with pytest.raises(BadRequest):
        lay.load(file_name="notes.txt")


def test_nothing_to_load_is_empty_not_an_error(lay: Layout) -> None:
    assert lay.load() == LoadResult(segments=[], problems=[])


# --- frontmatter -------------------------------------------------------------------------------


def test_frontmatter_priority_replaces_the_default(lay: Layout) -> None:
    write(lay.global_dir / "MEMORY.md", "---\nversion: 1\npriority: 999\n---\nglobal wins")
    write(lay.project / "MEMORY.md", "project")
    result = lay.load()
    assert [s.content for s in result.segments] == ["project", "global wins"]
    assert result.segments[1].priority == 999


def test_disabled_file_is_skipped(lay: Layout) -> None:
    off = write(lay.project / "MEMORY.md", "---\nenabled: false\n---\n@import ./a.md\nsecret")
    write(lay.project / "a.md", "imported")
    write(lay.project / "MEMORY.local.md", "---\nenabled: true\n---\nkept")
    result = lay.load()
    assert [s.content for s in result.segments] == ["kept"]
    assert result.disabled == [str(off)]
    assert "imported" not in text_of(result)


def test_invalid_frontmatter_is_reported_and_defaults_kept(lay: Layout) -> None:
    front = "---\npriority: high\nenabled: maybe\nowner: me\ntags:\n  - a\n---\nbody\n"
    write(lay.project / "MEMORY.md", front)
    result = lay.load()
    assert [s.content for s in result.segments] == ["body\n"]
    assert result.segments[0].priority == 310
    notes = [p.message for p in result.problems]
    assert set(kinds(result)) == {"frontmatter"} and len(notes) == 5, notes
    assert any("priority must be an integer" in n for n in notes)
    assert any("enabled must be true or false" in n for n in notes)
    assert any("unknown key 'owner'" in n for n in notes)
    assert any("line 6: not a 'key: value' line" in n for n in notes)  # nesting


def test_frontmatter_parser_subset() -> None:
    parsed = core.parse_frontmatter("---\n# c\nversion: 2\npriority: -5 # low\nenabled: No\n---\nx")
    assert parsed.front == core.Frontmatter(version=2, priority=-5, enabled=False)
    assert parsed.body == "x" and parsed.notes == ()
    unterminated = core.parse_frontmatter("---\nenabled: false\nbody")
    assert unterminated.front.enabled and unterminated.notes == ("unterminated frontmatter",)
    assert core.parse_frontmatter("no front\n---\n").body == "no front\n---\n"
    quoted = core.parse_frontmatter('---\npriority: "3"\n---\n')
    assert quoted.front.priority is None and len(quoted.notes) == 1


# --- imports -----------------------------------------------------------------------------------


def test_imports_relative_home_and_absolute(lay: Layout) -> None:
    snippets = lay.home / "snippets"
    write(lay.project / "docs" / "rel.md", "relative one")
    write(lay.project / "docs" / "up.md", "@import ../top.md\nfrom docs")
    write(lay.project / "top.md", "dotdot one")
    write(snippets / "tilde.md", "tilde one")
    absolute = write(lay.project / "abs" / "abs.md", "absolute one")
    write(
        lay.project / "MEMORY.md",
        f"main\n@import ./docs/rel.md\n  @import docs/up.md\n@import ~/snippets/tilde.md\n"
        f"@import {absolute}\nnot @import inline.md\n",
    )
    result = lay.load(trusted_folders=(snippets,))
    assert result.problems == []
    assert [s.content.strip() for s in result.segments] == [
        "main\nnot @import inline.md",
        "relative one",
        "from docs",
        "dotdot one",
        "tilde one",
        "absolute one",
    ]


def test_directives_in_code_fences_are_text(lay: Layout) -> None:
    write(lay.project / "a.md", "imported")
    write(lay.project / "MEMORY.md", "```\n@import a.md\n```\n")
    result = lay.load()
    assert paths(result) == [str(lay.project / "MEMORY.md")]
    assert "@import a.md" in result.segments[0].content


def test_depth_bomb_stops_at_five(lay: Layout) -> None:
    for i in range(1, 8):
        write(lay.project / f"c{i}.md", f"chain {i}\n@import c{i + 1}.md\n")
    write(lay.project / "MEMORY.md", "top\n@import c1.md\n")
    result = lay.load()
    loaded = [s.content.strip() for s in result.segments]
    assert loaded == ["top"] + [f"chain {i}" for i in range(1, 6)]
    assert kinds(result) == ["depth"]
    assert result.problems[0].path == str(lay.project / "c5.md")


def test_fan_out_bomb_follows_twenty(lay: Layout) -> None:
    lines = []
    for i in range(25):
        write(lay.project / "many" / f"f{i:02}.md", f"fan {i:02}")
        lines.append(f"@import many/f{i:02}.md")
    write(lay.project / "MEMORY.md", "\n".join(lines))
    result = lay.load()
    assert len(result.segments) == 1 + 20
    assert "fan 19" in text_of(result) and "fan 20" not in text_of(result)
    assert kinds(result) == ["fan_out"]


def test_size_bomb_is_refused(lay: Layout) -> None:
    write(lay.project / "big.md", "B" * 200 * 1024)
    write(lay.project / "MEMORY.md", "small\n@import big.md\n")
    result = lay.load()
    assert [s.content.strip() for s in result.segments] == ["small"]
    assert kinds(result) == ["too_large"]
    write(lay.project / "MEMORY.md", "C" * 200 * 1024)  # a top-level file too
    assert lay.load().segments == [] and kinds(lay.load()) == ["too_large"]


def test_non_markdown_is_refused_even_behind_a_md_link(lay: Layout) -> None:
    write(lay.project / "notes.txt", "TXT CONTENT")
    (lay.project / "disguised.md").symlink_to(lay.project / "notes.txt")
    write(lay.project / "MEMORY.md", "@import notes.txt\n@import disguised.md\n")
    result = lay.load()
    assert "TXT CONTENT" not in text_of(result)
    assert kinds(result) == ["extension", "extension"]


def test_import_cycle_is_reported_not_followed(lay: Layout) -> None:
    write(lay.project / "a.md", "A\n@import b.md\n")
    write(lay.project / "b.md", "B\n@import a.md\n@import b.md\n")
    write(lay.project / "MEMORY.md", "@import a.md\n@import b.md\n")
    result = lay.load()
    assert [s.content.strip() for s in result.segments] == ["", "A", "B"]
    assert kinds(result) == ["cycle", "cycle", "duplicate"]
    assert result.segments[2].imported_from == str(lay.project / "a.md")


def test_import_outside_trusted_folders_is_not_read(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = write(lay.outside / "secret.md", "OUTSIDE SECRET")
    write(lay.project / "MEMORY.md", f"@import {secret}\n@import ../outside/secret.md\n")
    opened: list[str] = []
    real_open = os.open

    def spy(path: str | os.PathLike[str], flags: int, *args: int, **kw: object) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    result = lay.load()
    monkeypatch.undo()
    assert "OUTSIDE SECRET" not in text_of(result)
    assert kinds(result) == ["untrusted", "untrusted"]
    assert str(secret) not in opened
    # Trusting the folder explicitly lets it in.
    assert "OUTSIDE SECRET" in text_of(lay.load(trusted_folders=(lay.outside,)))


def test_symlink_out_of_the_trusted_folder_is_refused(lay: Layout) -> None:
    write(lay.outside / "target.md", "LINKED SECRET")
    (lay.project / "inside.md").symlink_to(lay.outside / "target.md")
    write(lay.project / "MEMORY.md", "@import inside.md\n")
    (lay.project / ".memoryd").mkdir()
    (lay.project / ".memoryd" / "MEMORY.md").symlink_to(lay.outside / "target.md")
    result = lay.load()
    assert "LINKED SECRET" not in text_of(result)
    assert kinds(result) == ["untrusted", "untrusted"]
    assert {p.path for p in result.problems} == {str(lay.outside / "target.md")}


def test_missing_fifo_loop_and_bad_imports_are_problems(lay: Layout) -> None:
    os.mkfifo(lay.project / "pipe.md")
    (lay.project / "loop1.md").symlink_to(lay.project / "loop2.md")
    (lay.project / "loop2.md").symlink_to(lay.project / "loop1.md")
    imports = ["gone.md", "pipe.md", "~bob/x.md", "loop1.md"]
    write(lay.project / "MEMORY.md", "".join(f"@import {i}\n" for i in imports))
    assert kinds(lay.load()) == ["missing", "not_a_file", "bad_import", "unreadable"]


# --- provenance and rendering -------------------------------------------------------------------


def test_provenance_fields(lay: Layout) -> None:
    main = write(lay.project / "MEMORY.md", "# Rules\n@import docs/style.md\nuse tabs\n")
    style = write(lay.project / "docs" / "style.md", "two spaces, really")
    top, imported = lay.load().segments
    assert (top.tier, top.path, top.imported_from) == ("project", str(main), None)
    assert (imported.tier, imported.path, imported.imported_from) == (
        "project",
        str(style),
        str(main),
    )
    for seg in (top, imported):
        assert seg.tokens == count_tokens(seg.content) > 0
        assert seg.hash == hashlib.sha256(seg.content.encode()).hexdigest()
    assert "@import" not in top.content and top.priority == imported.priority == 310


def test_render_names_each_source_safely() -> None:
    seg = core.make_segment("project", "/p/x-->\n# evil.md", "body", 310)
    out = core.render([seg, core.make_segment("global", "/g/MEMORY.md", "g", 100, "/p/x.md")])
    first = out.split("\n")[0]
    assert first.startswith("<!-- memoryd: tier=project") and first.endswith("-->")
    assert first.count("-->") == 1 and "# evil" not in out.split("\n")[1]
    assert 'imported_from="/p/x.md"' in out and f"sha256={seg.hash[:12]}" in out


def test_each_agent_leaves_out_what_it_loads_itself() -> None:
    assert core.loaded_natively("claude", "/p/CLAUDE.md")
    assert core.loaded_natively("claude", "/p/CLAUDE.local.md")
    assert core.loaded_natively("claude", "/p/.claude/rules/api.md")
    assert not core.loaded_natively("claude", "/p/MEMORY.md")
    assert not core.loaded_natively("claude", "/p/AGENTS.md")
    assert core.loaded_natively("codex", "/p/AGENTS.md")
    assert core.loaded_natively("gemini", "/GEMINI.md")
    assert not core.loaded_natively("codex", "/p/docs/claude.md")


def test_cache_until_refresh_or_save(lay: Layout) -> None:
    write(lay.project / "MEMORY.md", "one")
    files = InstructionFiles(lay.project, lay.config())
    assert files.result().segments[0].content == "one"
    write(lay.project / "MEMORY.md", "two")
    assert files.result().segments[0].content == "one"
    assert files.refresh().segments[0].content == "two"
    files.save_memory("three", "S", "project", confirm=True)
    shown = files.files_show()
    assert "three" in str(shown["text"]) and "<!-- memoryd: tier=project" in str(shown["text"])
    listed = files.files_list()
    assert listed["files"] == [core.provenance(files.result().segments[0])]
    assert "content" not in listed["files"][0]


# --- save_memory -------------------------------------------------------------------------------


def test_save_without_confirm_only_previews(lay: Layout) -> None:
    target = lay.project / "MEMORY.md"
    result = save_memory(lay.project, lay.config(), "- use ruff", "Code Style", "project")
    assert not result.written and not target.exists()
    assert result.path == str(target)
    assert "+## Code Style" in result.diff and "+- use ruff" in result.diff
    write(target, "# Project\n")
    before = target.read_bytes()
    assert "+- x" in save_memory(lay.project, lay.config(), "- x", None, "project").diff
    assert target.read_bytes() == before


def test_save_with_confirm_writes_atomically_to_each_target(lay: Layout) -> None:
    write(lay.project / "MEMORY.md", "# P\n\n## Code Style\n- tabs\n\n## Other\nx\n")
    cfg = lay.config()
    saved = save_memory(lay.project, cfg, "- ruff", "code style", "project", confirm=True)
    assert saved.written
    assert (lay.project / "MEMORY.md").read_text() == (
        "# P\n\n## Code Style\n- tabs\n- ruff\n\n## Other\nx\n"
    )
    save_memory(lay.project, cfg, "token lives in vault", "Private", "local", confirm=True)
    local = lay.project / "MEMORY.local.md"
    assert local.read_text() == "## Private\n\ntoken lives in vault\n"
    assert local.stat().st_mode & 0o777 == 0o600
    fresh = lay.base / "fresh" / "memoryd"
    save_memory(lay.project, lay.config(global_dir=fresh), "hi", None, "global", confirm=True)
    assert (fresh / "MEMORY.md").read_text() == "## Saved memories\n\nhi\n"
    assert not list(lay.project.glob(".*.tmp"))


@pytest.mark.parametrize("target", ["plugin", "../evil", "/etc/passwd.md", "", "PROJECT"])
def test_forbidden_targets_write_nothing(lay: Layout, target: str) -> None:
    before = sorted(lay.base.rglob("*"))
    with pytest.raises(Forbidden):
        save_memory(lay.project, lay.config(), "x", None, target, confirm=True)
    assert sorted(lay.base.rglob("*")) == before


def test_save_refuses_disallowed_target_and_links_out(lay: Layout) -> None:
    with pytest.raises(Forbidden):
        cfg = lay.config(save_targets=frozenset({"project"}))
        save_memory(lay.project, cfg, "x", None, "global", confirm=True)
    victim = write(lay.outside / "victim.md", "untouched")
    (lay.project / "MEMORY.md").symlink_to(victim)
    with pytest.raises(Forbidden):
        save_memory(lay.project, lay.config(), "x", None, "project", confirm=True)
    assert victim.read_text() == "untouched"


def test_hostile_content_is_stored_as_text_and_refused_on_load(lay: Layout) -> None:
    write(lay.outside / "evil.md", "EVIL OUTSIDE")
    hostile = f"@import /etc/passwd\n@import {lay.outside / 'evil.md'}\n---\nenabled: false\n---"
    save_memory(lay.project, lay.config(), hostile, "Notes", "project", confirm=True)
    stored = (lay.project / "MEMORY.md").read_text()
    assert "@import /etc/passwd" in stored and stored.startswith("## Notes")
    result = lay.load()
    assert [p.kind for p in result.problems] == ["untrusted", "untrusted"]
    assert "root:" not in text_of(result) and "EVIL OUTSIDE" not in text_of(result)
    assert result.disabled == [] and len(result.segments) == 1


def test_plan_save_rules() -> None:
    assert core.plan_save(None, " a \n", "S") == "## S\n\na\n"
    assert core.plan_save("## S\n## T\nt", "a", "S") == "## S\n\na\n\n## T\nt\n"
    assert core.plan_save("# Top\n", "a", "New") == "# Top\n\n## New\n\na\n"
    assert core.plan_save("```\n## S\n```\n", "a", "S").endswith("```\n\n## S\n\na\n")
    for content, section in (("  ", "S"), ("a", "two\nlines"), ("a", "###")):
        with pytest.raises(BadRequest):
            core.plan_save(None, content, section)
    with pytest.raises(TooLarge):
        core.plan_save("x" * 100, "y", "S", max_bytes=100)


def test_from_environ_uses_xdg_config_home(tmp_path: Path) -> None:
    cfg = InstructionConfig.from_environ({"HOME": str(tmp_path), "XDG_CONFIG_HOME": "/cfg"})
    assert cfg.global_dir == Path("/cfg/memoryd") and cfg.home == tmp_path
    relative = InstructionConfig.from_environ({"HOME": "/h", "XDG_CONFIG_HOME": "rel"})
    assert relative.global_dir == Path("/h/.config/memoryd")
