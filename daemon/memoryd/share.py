"""Sharing memory through git (design §9, design §3): the daemon side of ``core.share``.

When a project shares (``memctl share on``, or unset and the project holds
``.memoryd/memory.jsonl``, as a clone of a sharing repository does), the owner thread renders the
shared file after every change that can move it (``ProjectMemory.share_revision``) and hands the
bytes to its own FIFO writer thread, which writes them atomically, and only if the file is still
the one the owner last read or wrote: a file ``git pull`` just replaced is never overwritten
unread. The file's folder is watched; a change not made by the daemon (its hash is not the one
it wrote) is merged into the store as one audited event, then written back in canonical form (a
union merge leaves duplicate lines). Merging what the daemon wrote itself changes nothing, so
its own writes cannot loop. A project is merged when it opens too, so a restart or a pull while
the daemon was down is caught up before the first request is answered.

``memctl share off`` stops writing and merging and leaves both files where they are: they are in
the team's repository, and deleting them in one clone would delete them for everyone at the next
commit (``git rm -r .memoryd`` does that on purpose).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from memctl import protocol as p
from memoryd.atomic import make_repository_dir, write_atomic
from memoryd.background import BackgroundErrors
from memoryd.core import share as core_share
from memoryd.core.errors import BadRequest
from memoryd.fifo import FifoWriter
from memoryd.project import ProjectMemory
from memoryd.registry import ProjectRegistry

FILE_MODE = 0o644  # a file of the repository, like any other


def share_file(root: Path) -> Path:
    return root / core_share.SHARE_DIR / core_share.SHARE_FILE


def is_share_file(path: str) -> bool:
    parent = os.path.basename(os.path.dirname(path))
    return parent == core_share.SHARE_DIR and os.path.basename(path) == core_share.SHARE_FILE


def _hash(data: bytes | None) -> str:
    """The content hash of a file's bytes; "" for no file."""
    # blake2b: Python's own in every build, and it lets go of the GIL on a large file (the
    # builtin sha256, without OpenSSL in the daemon, holds it: ~5 ms a MB on the owner thread).
    return "" if data is None else hashlib.blake2b(data, digest_size=32).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def unsafe(root: Path) -> str | None:
    """Why the project's shared file must not be used, or None. It comes with a repository, so
    a link in its place is refused: ``.memoryd`` linked to another project's would write this
    project's memory there, and ``memory.jsonl`` linked to any file would read that file into
    memory (and the audit log)."""
    folder = root / core_share.SHARE_DIR
    for path, kind, is_kind in (
        (folder, "a directory", stat.S_ISDIR),
        (folder / core_share.SHARE_FILE, "a regular file", stat.S_ISREG),
    ):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
        if stat.S_ISLNK(mode):
            return f"{path} is a symbolic link: memory is shared only through a file in the project"
        if not is_kind(mode):
            return f"{path} is not {kind}"
    return None


# --------------------------------------------------------------------------- the writer thread


class ShareJob(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    text: bytes
    base_hash: str  # the file as the owner last saw it ("" absent): written only over that
    revision: int


class ShareWritten(msgspec.Struct, frozen=True, kw_only=True):
    root: str
    revision: int
    hash: str = ""  # of the text written
    stale: bool = False  # the file changed since the owner saw it: nothing written
    error: str | None = None


def write_share_file(job: ShareJob) -> ShareWritten:
    """On the writer thread: write the file atomically unless it changed meanwhile."""
    done = ShareWritten(root=job.root, revision=job.revision)
    root = Path(job.root)
    if not root.is_dir():
        return msgspec.structs.replace(done, error=f"project directory {root} no longer exists")
    path = share_file(root)
    refused = unsafe(root)
    if refused is not None:
        return msgspec.structs.replace(done, error=refused)
    try:
        make_repository_dir(path.parent)

        def changed() -> bool:
            return _hash(_read(path)) != job.base_hash

        if changed() or write_atomic(path, job.text, FILE_MODE, unless=changed) is None:
            return msgspec.structs.replace(done, stale=True)
    except OSError as exc:
        return msgspec.structs.replace(done, error=f"cannot write {path}: {exc.strerror or exc}")
    return msgspec.structs.replace(done, hash=_hash(job.text))


def _crashed(job: ShareJob, reason: str) -> ShareWritten:
    return ShareWritten(root=job.root, revision=job.revision, error=reason)


class ShareWriter(FifoWriter[ShareJob, ShareWritten]):
    def __init__(self, notify: Callable[[], None]) -> None:
        super().__init__(write_share_file, _crashed, notify, name="memoryd-share-writer")


# --------------------------------------------------------------------------- the service


@dataclass
class _Shared:
    """What the owner thread knows of one sharing project's file."""

    seen_hash: str | None = None  # the file as last read or written (None: not read yet)
    written_revision: int = -1  # the project's share_revision the file holds
    in_flight: int | None = None  # the revision the writer has
    failed_revision: int | None = None  # a write of it failed: retried by the periodic job
    last_written_at: float | None = None
    last_merged_at: float | None = None
    error: str | None = None
    counts: tuple[int, int, int] = (0, 0, 0)  # entries, tombstones, edges of the last text


class ShareService:
    """Owner thread only."""

    def __init__(
        self,
        registry: ProjectRegistry,
        writer: ShareWriter,
        errors: BackgroundErrors,
        *,
        log: Any,
        watch: Callable[[Path], object] = lambda folder: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._writer = writer
        self._errors = errors
        self._log = log
        self.watch = watch  # watch a project's .memoryd/ folder (set by the composition root)
        self._clock = clock
        self._shared: dict[Path, _Shared] = {}

    # ------------------------------------------------------------------ which projects

    @staticmethod
    def setting_of(project: ProjectMemory) -> Literal["on", "off", "auto"]:
        chosen = project.share_setting()
        return "auto" if chosen is None else "on" if chosen else "off"

    def enabled(self, project: ProjectMemory) -> bool:
        chosen = project.share_setting()
        if chosen is not None:
            return chosen
        path = share_file(project.root)
        return path.is_file() and not path.is_symlink()

    def on_open(self, project: ProjectMemory) -> None:
        """A project opened: when it shares, merge its file (pulled while the daemon was down, or
        left behind by a crash mid-write) and watch it."""
        self._shared.pop(project.root, None)
        if not self.enabled(project):
            return
        refused = unsafe(project.root)
        if refused is not None:
            self._errors.record(f"{project.slug}: not sharing memory: {refused}")
            return
        self._start(project)

    def _start(self, project: ProjectMemory) -> _Shared:
        state = self._shared.setdefault(project.root, _Shared())
        folder = share_file(project.root).parent
        _remove_stale_temps(folder)
        self.watch(folder)
        self._merge_file(project, state)
        return state

    def set(self, project: ProjectMemory, enabled: bool) -> None:
        if enabled and (refused := unsafe(project.root)) is not None:
            raise BadRequest(f"cannot share memory: {refused}")
        project.set_share(enabled)
        if not enabled:
            self._shared.pop(project.root, None)
            return
        folder = share_file(project.root).parent
        make_repository_dir(folder)
        _ensure_gitattributes(folder / core_share.GITATTRIBUTES)
        if project.root not in self._shared:
            self._start(project)

    # ------------------------------------------------------------------ reading the file

    def file_changed(self, path: str) -> None:
        """The watcher saw the shared file change (a pull, a checkout, an edit, our own write)."""
        root = Path(path).parent.parent
        if root not in self._shared:
            return  # not sharing, or not open: it is merged when it opens
        project = self._registry.get(str(root))
        state = self._shared.get(project.root)
        if state is not None:
            self._merge_file(project, state)

    def _merge_file(self, project: ProjectMemory, state: _Shared) -> None:
        path = share_file(project.root)
        refused = unsafe(project.root)
        if refused is not None:
            if refused != state.error:
                self._errors.record(f"{project.slug}: shared memory not read: {refused}")
            state.error = refused
            return
        try:
            data = _read(path)
        except OSError as exc:
            self._errors.record(f"{project.slug}: cannot read {path}: {exc}", "warning")
            return
        seen = _hash(data)
        if seen == state.seen_hash:
            return  # what we wrote, or read, last
        state.seen_hash = seen
        state.written_revision = -1  # compare with what the store would write, once
        if data is None:
            return
        parsed = core_share.parse(data, project.known_shared_lines())
        plan = project.merge_shared(
            parsed.records, parsed.malformed, origin=str(path), arrival_is_use=True
        )
        state.last_merged_at = self._clock()
        if parsed.malformed:
            first = parsed.malformed[0]
            self._errors.record(
                f"{project.slug}: skipped {len(parsed.malformed)} malformed line(s) of {path} "
                f"(line {first.line}: {first.reason}); they are kept in the audit log",
                "warning",
            )
        self._log.info(
            "share_merged",
            project=project.slug,
            written=len(plan.entries),
            added=plan.added,
            deleted=len(plan.deleted),
            edges=len(plan.edges),
            unchanged=plan.unchanged + parsed.known,
            malformed=len(parsed.malformed),
        )

    # ------------------------------------------------------------------ writing the file

    def step(self) -> bool:
        """Hand the writer the file of each sharing project whose memory moved since its file
        was last written (at most one job per project at a time: changes made meanwhile go in
        the next one). The loop's idle work; never more work queued on the owner thread."""
        if not self._shared:
            return False
        for project in self._registry.opened():
            state = self._shared.get(project.root)
            if state is None or state.in_flight is not None:
                continue
            revision = project.share_revision
            if revision in (state.written_revision, state.failed_revision):
                continue
            self._submit(project, state, revision)
        return False

    def _submit(self, project: ProjectMemory, state: _Shared, revision: int) -> None:
        text = project.shared_text()
        state.counts = _counts(text)
        if _hash(text) == state.seen_hash:
            state.written_revision = revision  # the file already says this
            return
        state.in_flight = revision
        base = state.seen_hash if state.seen_hash is not None else ""
        self._writer.submit(
            ShareJob(root=str(project.root), text=text, base_hash=base, revision=revision)
        )

    def written(self, results: Iterable[ShareWritten]) -> None:
        """The writer's reports, collected on the owner thread."""
        for result in results:
            root = Path(result.root)
            state = self._shared.get(root)
            if state is None:
                continue  # turned off (or closed) meanwhile
            state.in_flight = None
            if result.error is not None:
                if result.error != state.error:  # retried each index tick: reported once
                    self._errors.record(f"shared memory not written: {result.error}")
                state.error, state.failed_revision = result.error, result.revision
            elif result.stale:
                # Changed on disk since we read it (a pull): merge it first, write after.
                project = self._registry.get(str(root))
                self._merge_file(project, state)
            else:
                state.seen_hash, state.written_revision = result.hash, result.revision
                state.error, state.failed_revision = None, None
                state.last_written_at = self._clock()

    def retry_failed(self) -> None:
        """The periodic job: a write that failed is tried again."""
        for state in self._shared.values():
            state.failed_revision = None

    def pending(self, project: ProjectMemory) -> bool:
        """Whether a change of this project is not in its file yet."""
        state = self._shared.get(project.root)
        if state is None or state.failed_revision is not None:
            return False
        return state.in_flight is not None or state.written_revision != project.share_revision

    def flush(self, deadline: float) -> None:
        """At shutdown: write what is pending and wait for it (until ``deadline``, monotonic)."""
        self.step()
        while any(s.in_flight is not None for s in self._shared.values()):
            result = self._writer.next_result(deadline - time.monotonic())
            if result is None:
                self._log.error("share_final_write_timeout")
                return
            self.written([result, *self._writer.results()])
            self.step()

    # ------------------------------------------------------------------ status

    def status(self, project: ProjectMemory) -> p.ShareResult:
        path = share_file(project.root)
        state = self._shared.get(project.root)
        result = p.ShareResult(
            enabled=state is not None,
            setting=self.setting_of(project),
            file=str(path),
            exists=path.is_file(),
        )
        if state is None:
            return result
        result.entries, result.tombstones, result.edges = state.counts
        result.pending = self.pending(project)
        result.last_written_at = state.last_written_at
        result.last_merged_at = state.last_merged_at
        result.error = state.error
        return result


def _counts(text: bytes) -> tuple[int, int, int]:
    """Entries, tombstones and edges in a rendered file (each line starts with its type)."""
    lines = text.splitlines()
    return (
        sum(line.startswith(b'{"type":"entry"') for line in lines),
        sum(line.startswith(b'{"type":"tombstone"') for line in lines),
        sum(line.startswith(b'{"type":"edge"') for line in lines),
    )


def _ensure_gitattributes(path: Path) -> None:
    """``memory.jsonl merge=union`` in ``.memoryd/.gitattributes``, once (a line the user added
    is kept, the file is not rewritten when it already says so)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    if core_share.GITATTRIBUTES_LINE in (line.strip() for line in text.splitlines()):
        return
    if text and not text.endswith("\n"):
        text += "\n"
    write_atomic(path, (text + core_share.GITATTRIBUTES_LINE + "\n").encode(), FILE_MODE)


def _remove_stale_temps(folder: Path) -> None:
    """Temp files of a write a crash interrupted (``write_atomic`` names them
    ``.memory.jsonl.*.tmp``): never the file itself, which is always whole."""
    try:
        for temp in folder.glob(f".{core_share.SHARE_FILE}.*.tmp"):
            temp.unlink(missing_ok=True)
    except OSError:
        pass
