"""One project's memory bank on disk (design §10): init, read, list, validate,
activate, and the two primitives every change goes through: ``load`` a file and
``store_if_unchanged`` its new text.

Changes (write, update, complete an item, optimise) are made by the daemon's cache
(``memoryd.banks.cache``, journaled, with the rules of ``memoryd.core.bank.ops``) and put on disk
by its writer thread (``memoryd.banks.writer``) through those primitives; there is no other
write path. Names and paths are checked before the disk is touched, so a refused request leaves
the bank exactly as it was. Writes are atomic."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from memoryd.atomic import make_repository_dir, write_atomic
from memoryd.banks import clinerules
from memoryd.banks.clinerules import Instruction
from memoryd.banks.paths import ARCHIVE_DIR, bank_dir_for, check_name, real_bank_dir, resolve
from memoryd.banks.scan import scan_codebase
from memoryd.core.bank import model as bank
from memoryd.core.bank import modes
from memoryd.core.bank.modes import Access
from memoryd.core.bank.ops import MAX_FILE_BYTES
from memoryd.core.bank.optimise import WARN_TOKENS
from memoryd.core.bank.templates import render_templates
from memoryd.core.errors import BadRequest, EntryNotFound, Forbidden, TooLarge
from memoryd.core.redaction import redact

FILE_MODE = 0o644  # bank files live in the project's repository, readable like the code

# What tells one version of a file from another without reading it: inode, size, modification
# time in ns. An editor that saves in place changes the last two, one that renames the first.
Sig = tuple[int, int, int]


def file_sig(info: os.stat_result) -> Sig:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def stat_sig(path: Path) -> Sig | None:
    """The file's signature now, or None when it does not exist."""
    try:
        return file_sig(os.stat(path, follow_symlinks=False))
    except OSError:  # gone, or its folder is no longer one: read again, and refused there
        return None


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
    reads: list[str]  # the files this mode reads (design §10), of those present
    writes: list[str]  # the files it may change, of the seven and those present


class Activation(msgspec.Struct, frozen=True):
    bank_info: BankInfo
    content: dict[str, str]  # file name → text, in read order
    custom_instructions: list[Instruction]


def _read_text(name: str, path: Path) -> tuple[str, float]:
    """A bank file's text and modification time."""
    text, info = read_file(name, path)
    return text, info.st_mtime


def read_file(name: str, path: Path) -> tuple[str, os.stat_result]:
    """A bank file's text and its status, from the same open file. O_NOFOLLOW and O_NONBLOCK: a
    symlink swapped in after ``resolve`` is refused, and a FIFO cannot hang the daemon."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise EntryNotFound(f"{name} does not exist in the memory bank") from None
    except OSError as exc:
        raise Forbidden(f"{name} cannot be opened: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a directory
        os.close(fd)
        raise BadRequest(f"{name} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > MAX_FILE_BYTES:
            raise TooLarge(f"{name} is larger than {MAX_FILE_BYTES} bytes")
        data = fh.read(MAX_FILE_BYTES + 1)
    try:
        return data.decode("utf-8"), info
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

    def names(self) -> list[str]:
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
        for name in self.names():
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
        for name in self.names():
            if name.startswith(f"{ARCHIVE_DIR}/"):
                continue
            try:
                texts[name] = _read_text(name, resolve(self.dir, name))[0]
            except (Forbidden, BadRequest, TooLarge, EntryNotFound):
                refused.append(name)
        return texts, refused

    def validate(self) -> bank.ValidationReport:
        return report(*self.contents())

    def activate(
        self,
        mode: str | None,
        files: Sequence[str] = (),
        contents: tuple[dict[str, str | None], list[str]] | None = None,
        *,
        access: Access | None = None,
    ) -> Activation:
        """Everything a session starts with: the bank in read order (the files the mode reads),
        the custom instructions for this mode and these files, and the bank's state (design
        §10). ``contents``: the bank as the daemon's cache has it, instead of as it is on disk;
        ``access``: the mode's, when the caller's configuration adds read-only modes."""
        texts, refused = contents if contents is not None else self.contents()
        access = access if access is not None else modes.access(mode)
        present = [name for name, text in texts.items() if text is not None]
        content = {name: texts[name] or "" for name in access.readable(present)}
        tokens = bank.bank_tokens(content)
        info = BankInfo(
            path=str(self.dir),
            project_root=str(self.project_root),
            mode=mode,
            files=present,
            validation=report(texts, refused),
            tokens=tokens,
            over_budget=tokens > WARN_TOKENS,
            reads=list(content),
            writes=access.writable(dict.fromkeys([*bank.READ_ORDER, *present])),
        )
        instructions = clinerules.collect(self.project_root, mode, files)
        return Activation(info, content, instructions)

    # -- writing ---------------------------------------------------------------------------

    def init(
        self, brief: str | None = None, exists: Callable[[str], bool] | None = None
    ) -> InitResult:
        """Create the seven files from the templates, filled from ``brief`` and a scan of the
        project. Existing files are never overwritten, whatever they hold; ``exists`` names the
        files that exist elsewhere than on disk (in the daemon's cache, not yet written)."""
        if not self.project_root.is_dir():
            raise EntryNotFound(f"project directory {self.project_root} does not exist")
        # The brief and what the scan read from the project are redacted like an entry.
        files = {
            name: redact(text).text
            for name, text in render_templates(brief, scan_codebase(self.project_root)).items()
        }
        paths = {name: resolve(self.dir, name) for name in files}  # refuses before creating
        self._make_dirs(paths[bank.PROGRESS])
        created, existing = [], []
        for name, content in files.items():
            if os.path.lexists(paths[name]) or (exists is not None and exists(name)):
                existing.append(name)
                continue
            write_atomic(paths[name], content.encode("utf-8"), FILE_MODE)
            created.append(name)
        return InitResult(created, existing)

    def check_dir(self) -> None:
        """Refuse early what would make every write fail."""
        if not self.project_root.is_dir():
            raise EntryNotFound(f"project directory {self.project_root} does not exist")
        if self.dir.exists() and not self.dir.is_dir():
            raise BadRequest(f"{self.dir} exists and is not a directory")

    def _make_dirs(self, path: Path) -> None:
        self.check_dir()
        make_repository_dir(self.dir)
        make_repository_dir(path.parent)  # the archive, for archive/ names

    def _real_name(self, path: Path) -> str:
        """The name of the file a resolved path is: through an internal symlink it may differ
        from the name asked for, and the rules (append-only, merge) follow the real file."""
        return path.relative_to(real_bank_dir(self.dir)).as_posix()

    def locate(self, name: str) -> tuple[Path, str]:
        """Where ``name`` is, and the name of the real file (through an internal link it may
        differ). Refused when the name or a link leads out of the bank."""
        path = resolve(self.dir, name)
        return path, self._real_name(path)

    def load(self, name: str) -> tuple[Path, str, str | None, Sig | None]:
        """As ``locate``, and the file's text and signature (None, None: it does not exist)."""
        path, real = self.locate(name)
        if not os.path.lexists(path):
            return path, real, None, None
        text, info = read_file(name, path)
        return path, real, text, file_sig(info)

    def store_if_unchanged(self, path: Path, text: str, expect: Sig | None) -> Sig | None:
        """Write ``text`` atomically (keeping the file's permissions) and return its new
        signature, unless the file on disk is no longer the one of signature ``expect`` at the
        moment of the rename: then nothing is written (None)."""
        self._make_dirs(path)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else FILE_MODE
        written = write_atomic(
            path, text.encode("utf-8"), mode, unless=lambda: stat_sig(path) != expect
        )
        return None if written is None else file_sig(written)


def report(texts: dict[str, str | None], refused: list[str]) -> bank.ValidationReport:
    """The validation report of a bank's texts, the refused names counted as problems."""
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
