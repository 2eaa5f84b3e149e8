"""Finding, loading and saving instruction files (design §11).

Every file, discovered or imported, goes through one gate before a byte of it is read: its path is
resolved (symlinks included), must lie in a trusted folder (the project root, the global dir, a
plugin dir, or a configured extra folder), must name a ``.md`` file, must be a regular file and at
most ``max_file_bytes`` long. Imports are followed depth first up to ``max_depth`` levels and
``max_imports_per_file`` directives per file; a cycle, or a file already loaded, is reported and
not followed. Nothing is ever raised for a bad file: it becomes a ``Problem`` in the result.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from memoryd.atomic import write_atomic
from memoryd.core import instructions as core
from memoryd.core.errors import BadRequest, EntryNotFound, Forbidden, TooLarge

SAVE_TARGETS = ("project", "local", "global")  # MEMORY.md, MEMORY.local.md, the global file
MAX_FILES = 200  # all files of one load together: depth x fan-out alone would allow 20**5


@dataclass(frozen=True, kw_only=True)
class InstructionConfig:
    global_dir: Path
    plugins_dir: Path | None = None
    file_name: str = core.DEFAULT_FILE_NAME
    trusted_folders: tuple[Path, ...] = ()
    load_local_files: bool = True
    home: Path = field(default_factory=Path.home)
    max_depth: int = core.MAX_DEPTH
    max_imports_per_file: int = core.MAX_IMPORTS_PER_FILE
    max_file_bytes: int = core.MAX_FILE_BYTES
    max_files: int = MAX_FILES
    save_targets: frozenset[str] = frozenset(SAVE_TARGETS)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **overrides: Any) -> InstructionConfig:
        """The defaults for this user: ``$XDG_CONFIG_HOME/memoryd`` (else ``~/.config/memoryd``)."""
        home = Path(environ.get("HOME") or Path.home())
        xdg = environ.get("XDG_CONFIG_HOME", "")
        config_home = Path(xdg) if os.path.isabs(xdg) else home / ".config"
        fields: dict[str, Any] = {"global_dir": config_home / "memoryd", "home": home}
        return cls(**(fields | overrides))


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """A discovered top-level file, before it is read."""

    tier: core.Tier
    path: Path
    priority: int  # the default; frontmatter may replace it


class LoadResult(msgspec.Struct, frozen=True, kw_only=True):
    segments: list[core.Segment]  # in precedence order, weakest first
    problems: list[core.Problem]
    disabled: list[str] = msgspec.field(default_factory=list)  # files with ``enabled: false``

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.segments)


class SaveResult(msgspec.Struct, frozen=True, kw_only=True):
    diff: str
    written: bool
    path: str


def discover(project_root: Path, config: InstructionConfig) -> list[Candidate]:
    """The top-level files that exist (or are dangling links), in default precedence order."""
    return [
        Candidate(tier=tier, path=path, priority=core.default_priority(tier, variant))
        for tier, variant, path in _slots(project_root, config)
        if os.path.lexists(path)
    ]


def _slots(
    project_root: Path, config: InstructionConfig
) -> list[tuple[core.Tier, core.Variant, Path]]:
    """Every place a top-level file may be, whether it exists or not (the watcher's list)."""
    main = config.file_name
    local = core.local_name(main)
    slots: list[tuple[core.Tier, core.Variant, Path]] = [
        ("global", "main", config.global_dir / main),
        ("global", "local", config.global_dir / local),
    ]
    for plugin in _plugin_dirs(config):
        slots += [
            ("plugin", "main", plugin / "memory" / main),
            ("plugin", "local", plugin / "memory" / local),
        ]
    hidden = project_root / ".memoryd"
    slots += [
        ("project", "hidden", hidden / main),
        ("project", "main", project_root / main),
        ("project", "hidden_local", hidden / local),
        ("project", "local", project_root / local),
    ]
    return [
        (tier, variant, path)
        for tier, variant, path in slots
        if config.load_local_files or variant in ("main", "hidden")
    ]


def _plugin_dirs(config: InstructionConfig) -> list[Path]:
    if config.plugins_dir is None or not config.plugins_dir.is_dir():
        return []
    return sorted(p for p in config.plugins_dir.iterdir() if p.is_dir())


def _real(path: Path) -> Path | None:
    """``path`` with every symlink resolved; None for a symlink loop."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # 3.11 raises RuntimeError for a loop, later ones OSError
        return None


def trusted_roots(project_root: Path, config: InstructionConfig) -> list[Path]:
    folders = [project_root, config.global_dir, *_plugin_dirs(config), *config.trusted_folders]
    return [real for real in map(_real, folders) if real is not None]


def load(project_root: Path, config: InstructionConfig) -> LoadResult:
    """All enabled instruction files of a project with their imports, and what went wrong."""
    return _Loader(project_root, config).run()


class _Loader:
    def __init__(self, project_root: Path, config: InstructionConfig) -> None:
        self.root = project_root
        self.config = config
        self.roots = trusted_roots(project_root, config)
        self.problems: list[core.Problem] = []
        self.disabled: list[str] = []
        self.seen: set[Path] = set()

    def run(self) -> LoadResult:
        groups: list[tuple[int, int, list[core.Segment]]] = []
        for order, cand in enumerate(discover(self.root, self.config)):
            opened = self._open(cand.path, None, ())
            if opened is None:
                continue
            real, parsed = opened
            priority = cand.priority if parsed.front.priority is None else parsed.front.priority
            out: list[core.Segment] = []
            self._expand(cand.tier, priority, parsed, (real,), out)
            groups.append((priority, order, out))
        groups.sort(key=lambda g: (g[0], g[1]))
        segments = [seg for _, _, group in groups for seg in group]
        return LoadResult(segments=segments, problems=self.problems, disabled=self.disabled)

    def _problem(self, kind: core.ProblemKind, path: Path, msg: str, parent: Path | None) -> None:
        origin = None if parent is None else str(parent)
        problem = core.Problem(kind=kind, path=str(path), message=msg, imported_from=origin)
        self.problems.append(problem)

    def _open(
        self, requested: Path, parent: Path | None, chain: tuple[Path, ...]
    ) -> tuple[Path, core.ParsedFile] | None:
        """Resolve, check, read and parse one file; None (and a problem) if refused."""
        real = _real(requested)
        if real is None:
            self._problem("unreadable", requested, "symlink loop", parent)
            return None
        if real in chain:
            self._problem("cycle", real, "import cycle, not followed", parent)
            return None
        if real in self.seen:
            self._problem("duplicate", real, "already loaded, not repeated", parent)
            return None
        if len(self.seen) >= self.config.max_files:
            self._problem(
                "too_many_files", real, f"more than {self.config.max_files} files", parent
            )
            return None
        text = self._read(requested, real, parent)
        if text is None:
            return None
        self.seen.add(real)
        parsed = core.parse_frontmatter(text)
        for note in parsed.notes:
            self._problem("frontmatter", real, note, parent)
        if not parsed.front.enabled:
            self.disabled.append(str(real))
            return None
        return real, parsed

    def _read(self, requested: Path, real: Path, parent: Path | None) -> str | None:
        if not core.is_trusted(real, self.roots):
            self._problem("untrusted", real, "outside the trusted folders, not read", parent)
            return None
        if not (core.is_markdown(requested) and core.is_markdown(real)):
            self._problem("extension", real, "only .md files are loaded", parent)
            return None
        limit = self.config.max_file_bytes
        try:
            # NOFOLLOW: ``real`` has no links left, so a link now is a swap since the check.
            # NONBLOCK: a FIFO must not hang the loader before fstat rejects it.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(real, flags)
        except FileNotFoundError:
            self._problem("missing", real, "no such file", parent)
            return None
        except OSError as exc:
            self._problem("unreadable", real, exc.strerror or type(exc).__name__, parent)
            return None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                self._problem("not_a_file", real, "not a regular file", parent)
                return None
            data = b"" if info.st_size > limit else fh.read(limit + 1)
        if info.st_size > limit or len(data) > limit:
            self._problem("too_large", real, f"larger than {limit} bytes, not loaded", parent)
            return None
        return data.decode("utf-8", errors="replace")

    def _expand(
        self,
        tier: core.Tier,
        priority: int,
        parsed: core.ParsedFile,
        chain: tuple[Path, ...],
        out: list[core.Segment],
    ) -> None:
        """Append the segment of ``chain[-1]``, then its imports' segments, depth first."""
        real, depth = chain[-1], len(chain) - 1
        body, targets = core.split_imports(parsed.body)
        parent = None if depth == 0 else chain[-2]
        origin = None if parent is None else str(parent)
        out.append(core.make_segment(tier, str(real), body, priority, origin))
        cap = self.config.max_imports_per_file
        if len(targets) > cap:
            message = f"{len(targets)} imports, only the first {cap} followed"
            self._problem("fan_out", real, message, parent)
        if targets and depth >= self.config.max_depth:
            message = f"import depth {self.config.max_depth} reached, {len(targets)} not followed"
            self._problem("depth", real, message, parent)
            return
        for target in targets[:cap]:
            try:
                requested = Path(core.resolve_target(target, real, self.config.home))
            except BadRequest as exc:
                self._problem("bad_import", Path(target), str(exc), real)
                continue
            opened = self._open(requested, real, chain)
            if opened is not None:
                self._expand(tier, priority, opened[1], (*chain, opened[0]), out)


# --- save_memory ------------------------------------------------------------------------------


def save_path(project_root: Path, config: InstructionConfig, target: str) -> tuple[Path, Path]:
    """The file a target names and the folder it must stay in; Forbidden for anything else."""
    if target not in SAVE_TARGETS or target not in config.save_targets:
        raise Forbidden(f"save_memory cannot write to {target!r}")
    if target == "global":
        return config.global_dir / config.file_name, config.global_dir
    name = config.file_name if target == "project" else core.local_name(config.file_name)
    return project_root / name, project_root


def save_memory(
    project_root: Path,
    config: InstructionConfig,
    content: str,
    section: str | None = None,
    target: str = "project",
    *,
    confirm: bool = False,
) -> SaveResult:
    """Plan appending ``content`` under ``## section`` of the target file; return the diff, and
    write it (atomically) only when ``confirm`` is true."""
    path, folder = save_path(project_root, config, target)
    real, root = _real(path), _real(folder)
    if real is None or root is None or not core.is_trusted(real, [root]):
        raise Forbidden(f"{path} resolves outside {folder}")
    if not core.is_markdown(real):
        raise Forbidden(f"{path} resolves to a file that is not .md")
    existing, mode = _read_existing(real, config.max_file_bytes)
    new = core.plan_save(existing, content, section, max_bytes=config.max_file_bytes)
    preview = core.diff(existing or "", new, label=path.name)
    if confirm:
        if target == "global":
            real.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        elif not real.parent.is_dir():
            raise EntryNotFound(f"no project directory {real.parent}")
        # A new shared file is meant to be committed; a .local or global one may hold secrets.
        default_mode = 0o644 if target == "project" else 0o600
        write_atomic(real, new.encode(), default_mode if mode is None else mode)
        if target == "local" and mode is None:
            ignore_locally(project_root, path.name)
    return SaveResult(diff=preview, written=confirm, path=str(real))


def ignore_locally(project_root: Path, name: str) -> bool:
    """Add ``name`` to the project's ``.gitignore`` (a git project, or one that has the file)
    unless a line already ignores it; whether the file was changed."""
    ignore = project_root / ".gitignore"
    if not (os.path.lexists(project_root / ".git") or ignore.is_file()):
        return False
    try:
        existing, mode = _read_existing(ignore, core.MAX_FILE_BYTES)
    except (Forbidden, TooLarge):
        return False  # not a regular file, or absurd: leave it to the user
    new = core.plan_gitignore(existing, name)
    if new is None:
        return False
    write_atomic(ignore, new.encode(), 0o644 if mode is None else mode)
    return True


def _read_existing(real: Path, limit: int) -> tuple[str | None, int | None]:
    try:
        info = real.stat()
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(info.st_mode):
        raise Forbidden(f"{real} is not a regular file")
    if info.st_size > limit:
        raise TooLarge(f"{real} is larger than {limit} bytes")
    return real.read_text(encoding="utf-8", errors="replace"), stat.S_IMODE(info.st_mode)


# --- the cache behind files show / list / refresh ---------------------------------------------


class InstructionFiles:
    """One project's instruction files, loaded once and kept until ``refresh`` or a save."""

    def __init__(self, project_root: Path, config: InstructionConfig) -> None:
        self.project_root = project_root
        self.config = config
        self._cached: LoadResult | None = None
        self._local = project_root / core.local_name(config.file_name)
        self._local_seen = os.path.lexists(self._local)

    def result(self) -> LoadResult:
        if self._cached is None:
            self._cached = load(self.project_root, self.config)
        return self._cached

    def refresh(self) -> LoadResult:
        """Load again (a file changed); a local file that appeared since is kept out of git."""
        self._cached = None
        self._ignore_new_local()
        return self.result()

    def _ignore_new_local(self) -> None:
        seen = os.path.lexists(self._local)
        if seen and not self._local_seen:
            ignore_locally(self.project_root, self._local.name)
        self._local_seen = seen

    def watched(self) -> set[Path]:
        """The files whose change should reload these: every place a top-level file may be,
        each file loaded, and each import that was missing (it may be created)."""
        result = self.result()
        paths = {path for _tier, _variant, path in _slots(self.project_root, self.config)}
        paths.update(Path(s.path) for s in result.segments)
        paths.update(Path(p.path) for p in result.problems if p.kind == "missing")
        return paths

    def targets(self) -> dict[str, str]:
        """The file each save target names (what ``memctl files edit`` opens)."""
        allowed = [t for t in SAVE_TARGETS if t in self.config.save_targets]
        return {t: str(save_path(self.project_root, self.config, t)[0]) for t in allowed}

    def files_list(self) -> dict[str, object]:
        result = self.result()
        return {
            "files": [core.provenance(s) for s in result.segments],
            "disabled": list(result.disabled),
            "problems": [msgspec.structs.asdict(p) for p in result.problems],
            "tokens": result.tokens,
            "targets": self.targets(),
        }

    def files_show(self) -> dict[str, object]:
        return {"text": core.render(self.result().segments), **self.files_list()}

    def save_memory(
        self, content: str, section: str | None = None, target: str = "project", *, confirm: bool
    ) -> SaveResult:
        saved = save_memory(
            self.project_root, self.config, content, section, target, confirm=confirm
        )
        if saved.written:
            self._cached = None
            self._local_seen = os.path.lexists(self._local)  # save_memory ignored it already
        return saved
