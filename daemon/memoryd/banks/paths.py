"""Which paths a bank operation may touch (design §10). A name is checked as text
before any path is built from it, then the resolved path, symlinks followed, must still be a
bank file inside the bank directory. Everything refused raises ``Forbidden`` saying why."""

from __future__ import annotations

import os
from pathlib import Path

from memoryd.core.errors import Forbidden

BANK_DIRNAME = "memory-bank"
ARCHIVE_DIR = "archive"  # the optimiser's archive is the only subfolder a name may use
MAX_NAME_CHARS = 255


def bank_dir_for(project_root: Path) -> Path:
    return project_root / BANK_DIRNAME


def check_name(name: str) -> tuple[str, ...]:
    """The parts of an allowed name: ``<file>.md`` or ``archive/<file>.md``, forward slashes,
    no hidden parts. Refused otherwise, before the file system is consulted."""
    if not isinstance(name, str) or not name:
        raise Forbidden("a memory bank file name is required")
    if "\x00" in name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise Forbidden(f"{name!r}: control characters are not allowed in a file name")
    if len(name) > MAX_NAME_CHARS:
        raise Forbidden(f"file name longer than {MAX_NAME_CHARS} characters")
    if "\\" in name:
        raise Forbidden(f"{name!r}: use forward slashes in memory bank file names")
    if name.startswith(("/", "~")) or (len(name) > 1 and name[1] == ":"):
        raise Forbidden(f"{name!r}: absolute paths are not allowed; name a file in the bank")
    parts = tuple(name.split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise Forbidden(f"{name!r}: '..', '.' and empty path parts are not allowed")
    if any(part.startswith(".") for part in parts):
        raise Forbidden(f"{name!r}: hidden files are not part of a memory bank")
    if not parts[-1].endswith(".md"):
        raise Forbidden(f"{name!r}: only .md files are allowed in a memory bank")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != ARCHIVE_DIR):
        raise Forbidden(f"{name!r}: only top-level files and {ARCHIVE_DIR}/<file>.md are allowed")
    return parts


def real_bank_dir(bank_dir: Path) -> Path:
    """The bank directory with symlinks resolved; it must stay inside its project."""
    real = Path(os.path.realpath(bank_dir))
    project = Path(os.path.realpath(bank_dir.parent))
    if real == project or not real.is_relative_to(project):
        raise Forbidden(f"{bank_dir} is a symlink leading outside its project")
    return real


def resolve(bank_dir: Path, name: str) -> Path:
    """The real path of a bank file (it need not exist yet). Symlinks are allowed only when,
    resolved, they still name an allowed bank file: a link may not carry a read or a write out
    of the bank, nor to a file type a name could not."""
    parts = check_name(name)
    root = real_bank_dir(bank_dir)
    real = Path(os.path.realpath(root.joinpath(*parts)))
    if not real.is_relative_to(root) or real == root:
        raise Forbidden(f"{name!r} leads outside the memory bank through a symlink")
    try:
        check_name(real.relative_to(root).as_posix())
    except Forbidden:
        raise Forbidden(f"{name!r} is a symlink to a file a bank may not hold") from None
    return real
