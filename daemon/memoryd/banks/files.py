"""The file operations on one project's memory bank (SPEC §10; seed 000 §7–§9): init, read,
write, update, list, validate, activate, complete a progress item, optimise.

Every operation checks everything (mode, name, path, content, the decision log rule) before it
touches the disk, so a refused request leaves the bank exactly as it was. Writes are atomic.

``write`` replaces a whole file. ``update`` merges sections into an existing file
(``memoryd.core.bank_update``): decision entries are appended, history sections get new
items, other sections are replaced by name. Both refuse in a read-only mode (``ask``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import msgspec

from memoryd.atomic import write_atomic
from memoryd.banks import clinerules
from memoryd.banks.clinerules import Instruction
from memoryd.banks.paths import ARCHIVE_DIR, bank_dir_for, check_name, real_bank_dir, resolve
from memoryd.banks.scan import scan_codebase
from memoryd.core import bank
from memoryd.core.bank_optimise import WARN_TOKENS, OptimisePlan, optimise
from memoryd.core.bank_templates import render_templates
from memoryd.core.bank_update import merge_update
from memoryd.core.errors import BadRequest, EntryNotFound, Forbidden, TooLarge

READ_ONLY_MODES = frozenset({"ask"})
MAX_FILE_BYTES = 512 * 1024  # far above a healthy bank file (~4 KB); keeps one request bounded
FILE_MODE = 0o644  # bank files live in the project's repository, readable like the code


class FileInfo(msgspec.Struct, frozen=True):
    name: str
    size: int
    last_modified: float  # epoch seconds, as every time on the wire


class InitResult(msgspec.Struct, frozen=True):
    created: list[str]
    existing: list[str]


class BankInfo(msgspec.Struct, frozen=True):
    path: str
    project_root: str
    mode: str | None
    files: list[str]
    validation: bank.ValidationReport
    tokens: int
    over_budget: bool


class Activation(msgspec.Struct, frozen=True):
    bank_info: BankInfo
    content: dict[str, str]  # file name → text, in read order
    custom_instructions: list[Instruction]
    cache: dict[str, str] = {}  # filled by the daemon's bank cache when it serves this


def _check_writable(mode: str | None) -> None:
    if mode is not None and mode.casefold() in READ_ONLY_MODES:
        raise Forbidden(f"mode {mode!r} is read-only: the memory bank cannot be changed in it")


def _encode(name: str, content: str) -> bytes:
    data = content.encode("utf-8")
    if len(data) > MAX_FILE_BYTES:
        raise TooLarge(f"{name}: {len(data)} bytes is more than the {MAX_FILE_BYTES} allowed")
    return data


def _read_text(name: str, path: Path) -> tuple[str, float]:
    """A bank file's text and modification time. O_NOFOLLOW and O_NONBLOCK: a symlink swapped
    in after ``resolve`` is refused, and a FIFO cannot hang the daemon."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise EntryNotFound(f"{name} does not exist in the memory bank") from None
    except OSError as exc:
        raise Forbidden(f"{name} cannot be opened: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BadRequest(f"{name} is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise TooLarge(f"{name} is larger than {MAX_FILE_BYTES} bytes")
        data = fh.read(MAX_FILE_BYTES + 1)
    try:
        return data.decode("utf-8"), info.st_mtime
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8 text") from None


class Bank:
    """One project's ``memory-bank/`` directory."""

    def __init__(self, project_root: Path, bank_dir: Path | None = None) -> None:
        self.project_root = project_root
        self.dir = bank_dir if bank_dir is not None else bank_dir_for(project_root)

    # -- reading ---------------------------------------------------------------------------

    def read(self, name: str) -> tuple[str, float]:
        """The file's text and its modification time (epoch seconds)."""
        return _read_text(name, resolve(self.dir, name))

    def _names(self) -> list[str]:
        """Bank files on disk: the seven in read order, then other top-level ones, then the
        archive. Names a client could not use are left out."""
        found = []
        for sub in ("", ARCHIVE_DIR):
            try:
                with os.scandir(self.dir / sub) as entries:
                    found += sorted(f"{sub}/{e.name}".lstrip("/") for e in entries)
            except OSError:
                continue
        usable = [n for n in found if _allowed(n)]
        core = [n for n in bank.READ_ORDER if n in usable]
        return core + [n for n in usable if n not in core]

    def list_files(self) -> list[FileInfo]:
        infos = []
        for name in self._names():
            try:
                info = resolve(self.dir, name).stat()
            except (Forbidden, OSError):
                continue  # a link leading out of the bank is not listed, let alone followed
            if stat.S_ISREG(info.st_mode):
                infos.append(FileInfo(name, info.st_size, info.st_mtime))
        return infos

    def contents(self) -> tuple[dict[str, str | None], list[str]]:
        """The active bank (the seven, None when missing, and other top-level files; never the
        archive) and the names present but refused (unsafe links, unreadable, too big)."""
        texts: dict[str, str | None] = dict.fromkeys(bank.READ_ORDER)
        refused = []
        for name in self._names():
            if name.startswith(f"{ARCHIVE_DIR}/"):
                continue
            try:
                texts[name] = _read_text(name, resolve(self.dir, name))[0]
            except (Forbidden, BadRequest, TooLarge, EntryNotFound):
                refused.append(name)
        return texts, refused

    def validate(self) -> bank.ValidationReport:
        return _report(*self.contents())

    def activate(self, mode: str | None, files: Sequence[str] = ()) -> Activation:
        """Everything a session starts with: the bank in read order, the custom instructions
        for this mode and these files, and the bank's state (seed 002 §2.2)."""
        texts, refused = self.contents()
        content = {name: text for name, text in texts.items() if text is not None}
        tokens = bank.bank_tokens(content)
        info = BankInfo(
            path=str(self.dir),
            project_root=str(self.project_root),
            mode=mode,
            files=list(content),
            validation=_report(texts, refused),
            tokens=tokens,
            over_budget=tokens > WARN_TOKENS,
        )
        instructions = clinerules.collect(self.project_root, mode, files)
        return Activation(info, content, instructions)

    # -- writing ---------------------------------------------------------------------------

    def init(self, brief: str | None = None) -> InitResult:
        """Create the seven files from the templates, filled from ``brief`` and a scan of the
        project. Existing files are never overwritten, whatever they hold."""
        if not self.project_root.is_dir():
            raise EntryNotFound(f"project directory {self.project_root} does not exist")
        files = render_templates(brief, scan_codebase(self.project_root))
        paths = {name: resolve(self.dir, name) for name in files}  # refuses before creating
        self._make_dirs(paths[bank.PROGRESS])
        created, existing = [], []
        for name, content in files.items():
            if os.path.lexists(paths[name]):
                existing.append(name)
                continue
            write_atomic(paths[name], content.encode("utf-8"), FILE_MODE)
            created.append(name)
        return InitResult(created, existing)

    def _current(self, name: str, path: Path) -> str | None:
        return _read_text(name, path)[0] if os.path.lexists(path) else None

    def _make_dirs(self, path: Path) -> None:
        if not self.project_root.is_dir():
            raise EntryNotFound(f"project directory {self.project_root} does not exist")
        if self.dir.exists() and not self.dir.is_dir():
            raise BadRequest(f"{self.dir} exists and is not a directory")
        self.dir.mkdir(exist_ok=True)
        path.parent.mkdir(exist_ok=True)  # the archive, for archive/ names

    def _real_name(self, path: Path) -> str:
        """The name of the file a resolved path is: through an internal symlink it may differ
        from the name asked for, and the rules (append-only, merge) follow the real file."""
        return path.relative_to(real_bank_dir(self.dir)).as_posix()

    def _store(self, name: str, path: Path, old: str | None, new: str) -> None:
        data = _encode(name, new)
        if self._real_name(path) == bank.DECISION_LOG:
            reason = bank.check_decision_log(old, new)
            if reason is not None:
                raise Forbidden(reason)
        self._make_dirs(path)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else FILE_MODE
        write_atomic(path, data, mode)

    def write(self, name: str, content: str, mode: str | None = None) -> Path:
        """Create or replace a whole file (decisionLog.md: only keeping its existing entries)."""
        _check_writable(mode)
        path = resolve(self.dir, name)
        self._store(name, path, self._current(name, path), content)
        return path

    def update(self, name: str, content: str, mode: str | None = None) -> Path:
        """Merge sections into an existing file (see ``memoryd.core.bank_update``)."""
        _check_writable(mode)
        path = resolve(self.dir, name)
        old = self._current(name, path)
        if old is None:
            raise EntryNotFound(f"{name} does not exist; create it with write or init")
        self._store(name, path, old, merge_update(self._real_name(path), old, content))
        return path

    def complete(self, item: str, when: date, mode: str | None = None) -> Path:
        """Move an open progress item to Completed, checked and dated."""
        _check_writable(mode)
        path = resolve(self.dir, bank.PROGRESS)
        old = self._current(bank.PROGRESS, path)
        if old is None:
            raise EntryNotFound(f"{bank.PROGRESS} does not exist; create it with init")
        self._store(bank.PROGRESS, path, old, bank.complete_progress_item(old, item, when))
        return path

    def optimise(self, today: date, mode: str | None = None) -> OptimisePlan:
        """Apply the optimiser's plan. The archive is written before the items leave their file,
        so a crash in between can duplicate an item but never lose one."""
        _check_writable(mode)
        texts, _refused = self.contents()
        plan = optimise(texts, today)
        for name, block in plan.archived.items():
            path = resolve(self.dir, name)
            old = self._current(name, path)
            header = old if old is not None else f"# Archive of {name.split('/', 1)[1]}\n"
            self._store(name, path, old, header.rstrip("\n") + "\n\n" + block)
        for name, text in plan.new_files.items():
            path = resolve(self.dir, name)
            self._store(name, path, texts[name], text)
        return plan


def _report(texts: dict[str, str | None], refused: list[str]) -> bank.ValidationReport:
    report = bank.validate(texts)
    if not refused:
        return report
    problems = [bank.Problem(n, "unreadable", f"{n} is unsafe or unreadable") for n in refused]
    return msgspec.structs.replace(report, valid=False, problems=report.problems + problems)


def _allowed(name: str) -> bool:
    try:
        check_name(name)
    except Forbidden:
        return False
    return True
