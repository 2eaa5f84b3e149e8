"""The in-memory bank cache (design §10, "In-memory cache"). Owner thread only.

Keyed ``{bank_type}:{bank_id}`` (``memory-bank:<project root>``), it holds every bank file it
has served, and is what readers get while the daemon runs. A file's cached text is its ``base``
(the text on disk when last read or written) with the file's pending operations applied.

- A change is checked against the cached text, journaled (``memoryd.banks.journal``), applied in
  memory and acknowledged; the file is written by the FIFO writer at the next sync (every
  ``sync_interval_s``), or at once when the change is larger than ``immediate_bytes``.
- Before a file is served its signature on disk is compared with the base's; an edit made
  outside the daemon reloads the base, and the pending operations are applied on top of it.
- A pending operation that no longer applies on top of the user's version is left out, never
  forced: it is saved in ``bank-conflicts/`` and reported in ``previous_errors``.
- A failed write (disk full, permissions) keeps the operations pending and is retried at the
  next sync; the error is reported once.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from memctl import protocol as p
from memoryd.atomic import write_atomic
from memoryd.background import BackgroundErrors
from memoryd.banks.files import Bank, FileInfo, Sig, file_sig, read_file, stat_sig
from memoryd.banks.journal import BankJournal, Flushed, Flushing, OpRecord
from memoryd.banks.paths import ARCHIVE_DIR
from memoryd.banks.writer import FlushJob, FlushResult
from memoryd.core.bank import model as core_bank
from memoryd.core.bank.ops import (
    Append,
    ApplyItems,
    Complete,
    Failed,
    Op,
    Update,
    Write,
    apply_op,
    op_size,
    replay,
    text_hash,
)
from memoryd.core.errors import (
    BadRequest,
    EntryNotFound,
    Forbidden,
    MemorydError,
    TooLarge,
    Unavailable,
)
from memoryd.core.projects import slug as project_slug
from memoryd.core.redaction import redact

BANK_TYPE = "memory-bank"
MAX_CLEAN_BANKS = 32  # banks kept with nothing pending; the least recently used are dropped
REFUSED = (Forbidden, BadRequest, TooLarge, EntryNotFound)


def bank_key(root: Path) -> str:
    return f"{BANK_TYPE}:{root}"


@dataclass
class CachedFile:
    name: str  # the real file name in the bank
    loaded: bool = False
    base: str | None = None  # None: not on disk
    sig: Sig | None = None
    text: str | None = None  # what readers get: base with the pending operations applied
    pending: list[OpRecord] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)  # pending ops that do not apply on base
    flushing: Flushing | None = None  # the job the writer has, if any
    changed_at: float = 0.0
    last_error: str | None = None

    def rebuild(self) -> None:
        replayed = replay(self.name, self.base, [(r.seq, r.op) for r in self.pending])
        self.text, self.failed = replayed.text, replayed.failed


@dataclass
class CachedBank:
    root: Path
    bank: Bank
    files: dict[str, CachedFile] = field(default_factory=dict)
    last_sync: float | None = None

    @property
    def has_work(self) -> bool:
        """Changes not on disk yet, or a write in flight: never dropped from the cache."""
        return any(f.pending or f.flushing for f in self.files.values())


class Synced(msgspec.Struct, frozen=True, kw_only=True):
    """A file's pending changes settled by one write (or left out): what the audit log says."""

    root: Path
    name: str
    applied: list[str]
    left_out: list[str]
    written: bool
    sha: str


class Submit(msgspec.Struct, frozen=True):
    """Where a change goes (the path, and the real file's name in the bank), and how it was
    scheduled: at the next periodic sync, or at once (a large change)."""

    path: Path
    name: str
    sync: Literal["scheduled", "immediate", "unchanged"]


class BankCache:
    def __init__(
        self,
        journal: BankJournal,
        submit: Callable[[FlushJob], None],
        errors: BackgroundErrors,
        *,
        conflicts_dir: Path,
        immediate_bytes: int = 4096,
        dump_path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._journal = journal
        self._submit = submit
        self._errors = errors
        self._conflicts_dir = conflicts_dir
        self._immediate_bytes = immediate_bytes
        self._dump_path = dump_path
        self._clock = clock
        self._banks: OrderedDict[str, CachedBank] = OrderedDict()
        self._recover()

    # -- banks and files ----------------------------------------------------------------------

    def bank(self, root: Path) -> CachedBank:
        key = bank_key(root)
        cached = self._banks.get(key)
        if cached is None:
            cached = self._banks[key] = CachedBank(root, Bank(root))
            self._evict()
        self._banks.move_to_end(key)
        return cached

    def _evict(self) -> None:
        idle = [key for key, cached in self._banks.items() if not cached.has_work]
        for key in idle[: max(0, len(idle) - MAX_CLEAN_BANKS)]:
            del self._banks[key]

    def _file(self, cached: CachedBank, name: str) -> tuple[Path, CachedFile]:
        path, real = cached.bank.locate(name)
        file = cached.files.get(real)
        if file is None:
            file = cached.files[real] = CachedFile(real)
        self._refresh(file, path)
        return path, file

    def _refresh(self, file: CachedFile, path: Path) -> None:
        """Reload the base when the file on disk is not the one loaded (an edit made outside the
        daemon). Not while the writer has the file: its result says what is on disk."""
        if file.flushing is not None or (file.loaded and stat_sig(path) == file.sig):
            return
        if os.path.lexists(path):
            base, info = read_file(file.name, path)
            file.base, file.sig = base, file_sig(info)
        else:
            file.base, file.sig = None, None
        file.loaded = True
        file.rebuild()

    # -- reading -------------------------------------------------------------------------------

    def read(self, root: Path, name: str) -> tuple[str, float]:
        """The file's text and when it last changed (epoch seconds)."""
        _path, file = self._file(self.bank(root), name)
        if file.text is None:
            raise EntryNotFound(f"{name} does not exist in the memory bank")
        return file.text, _modified(file)

    def _names(self, cached: CachedBank) -> list[str]:
        """The bank's files: those on disk (in the bank's order) and those only in the cache."""
        names = cached.bank.names()
        extra = sorted(n for n, f in cached.files.items() if f.text is not None and n not in names)
        return names + extra

    def contents(self, root: Path) -> tuple[dict[str, str | None], list[str]]:
        """As ``Bank.contents``, from the cache: the seven (None when missing) and the other
        top-level files, and the names present but refused."""
        cached = self.bank(root)
        texts: dict[str, str | None] = dict.fromkeys(core_bank.READ_ORDER)
        refused = []
        for name in self._names(cached):
            if name.startswith(f"{ARCHIVE_DIR}/"):
                continue
            try:
                texts[name] = self._file(cached, name)[1].text
            except REFUSED:
                refused.append(name)
        return texts, refused

    def listing(self, root: Path) -> list[FileInfo]:
        cached = self.bank(root)
        infos = []
        for name in self._names(cached):
            try:
                file = self._file(cached, name)[1]
            except REFUSED:
                continue  # a link leading out of the bank is not listed, let alone followed
            if file.text is not None:
                infos.append(FileInfo(name, len(file.text.encode("utf-8")), _modified(file)))
        return infos

    def exists(self, root: Path, name: str) -> bool:
        try:
            return self._file(self.bank(root), name)[1].text is not None
        except REFUSED:
            return True  # something is there; never create over it

    # -- changing ------------------------------------------------------------------------------

    def change(
        self, root: Path, name: str, op_for: Callable[[str | None], Op], request: str = ""
    ) -> Submit:
        """Apply the operation ``op_for`` makes from the current text; refused (raising) before
        anything is journaled when it does not apply. Acknowledged once journaled. ``request``:
        the client's unique request id, journaled with the change; a request journaled before
        (the reply was lost: a daemon died before answering, the client retried) is answered,
        not applied again."""
        cached = self.bank(root)
        cached.bank.check_dir()
        path, file = self._file(cached, name)
        if request and self._journal.seen(request, file.name):
            return Submit(path, file.name, "scheduled")
        op = op_for(file.text)
        new = apply_op(file.name, file.text, op)
        if new == file.text:
            return Submit(path, file.name, "unchanged")
        record = OpRecord(
            seq=self._journal.next_seq(),
            ts=self._clock(),
            root=str(root),
            name=file.name,
            op=op,
            request=request,
        )
        try:
            self._journal.append(record)
        except OSError as exc:
            raise Unavailable(
                f"the bank journal cannot be written ({exc.strerror or exc}); "
                f"the change to {name} was not saved"
            ) from None
        file.pending.append(record)
        file.text, file.changed_at = new, record.ts
        if op_size(op) > self._immediate_bytes:
            self._enqueue(cached, file)
            return Submit(path, file.name, "immediate")
        return Submit(path, file.name, "scheduled")

    def apply(self, root: Path, name: str, op: Op, request: str = "") -> Submit:
        return self.change(root, name, lambda _old: op, request)

    def write(self, root: Path, name: str, content: str, request: str = "") -> Submit:
        return self.change(root, name, lambda old: Write(content, text_hash(old)), request)

    def update(self, root: Path, name: str, content: str, request: str = "") -> Submit:
        return self.change(root, name, lambda old: Update(content), request)

    def reload(self, root: Path, name: str) -> None:
        """A watcher saw the file change: revalidate it now (reads do so anyway)."""
        with contextlib.suppress(*REFUSED):
            self._file(self.bank(root), name)

    # -- syncing -------------------------------------------------------------------------------

    def sync(self, root: Path | None = None) -> int:
        """Hand every file with pending operations (of one bank, or all) to the writer, those
        whose last write failed included (tried again). Returns how many files were handed
        over."""
        banks = [self.bank(root)] if root is not None else list(self._banks.values())
        return self._hand_over(banks, lambda file: True)

    def sync_except_failed(self) -> int:
        """As ``sync`` for every bank, leaving out the files whose last write failed (at
        shutdown: they stay journaled and are written at the next start, instead of holding
        up the exit)."""
        return self._hand_over(list(self._banks.values()), lambda file: file.last_error is None)

    def _hand_over(self, banks: list[CachedBank], wanted: Callable[[CachedFile], bool]) -> int:
        dirty = [
            (cached, file)
            for cached in banks
            for file in cached.files.values()
            if file.pending and not file.flushing and wanted(file)
        ]
        dirty.sort(key=lambda cf: cf[1].pending[0].seq)  # the oldest change goes first
        return sum(self._enqueue(cached, file) for cached, file in dirty)

    def _enqueue(self, cached: CachedBank, file: CachedFile) -> int:
        """Journal what the writer is about to do, then hand it the file. The marker's hash is
        of the exact text it may write, and its ``failed`` the operations that text leaves out:
        after a crash, a file on disk with that hash says which operations are done."""
        if file.flushing is not None or not file.pending:
            return 0
        # An edit made since the file was loaded is taken in now, so that the text handed over
        # is already the user's version with the operations on top. On failure the writer meets
        # the same problem and reports it.
        with contextlib.suppress(MemorydError, OSError):
            self._refresh(file, cached.bank.locate(file.name)[0])
        upto = file.pending[-1].seq
        marker = Flushing(
            root=str(cached.root),
            name=file.name,
            upto=upto,
            hash=text_hash(file.text),
            failed=list(file.failed),
        )
        self._journal.append(marker)
        file.flushing = marker
        self._submit(
            FlushJob(
                root=str(cached.root),
                name=file.name,
                base_hash=text_hash(file.base) if file.loaded else "unknown",
                text=file.text,
                failed=list(file.failed),
                upto=upto,
            )
        )
        return 1

    def busy(self, root: Path | None = None) -> bool:
        """Whether the writer still has a file (of this bank, or of any)."""
        if root is None:
            banks = list(self._banks.values())
        else:
            one = self._banks.get(bank_key(root))
            banks = [one] if one is not None else []
        return any(f.flushing for cached in banks for f in cached.files.values())

    def pending(self, root: Path | None = None) -> int:
        """Operations not on disk yet (of one bank, or all)."""
        banks = self._banks.values() if root is None else [self.bank(root)]
        return sum(len(f.pending) for cached in banks for f in cached.files.values())

    def collect(self, results: Iterable[FlushResult]) -> list[Synced]:
        """The writer's reports, each on its own: one that fails must not strand the others.
        Returns what was settled, for the audit log."""
        settled = []
        for result in results:
            try:
                synced = self.flushed(result)
            except (MemorydError, OSError) as exc:
                self._errors.record(f"memory bank {result.name} in {result.root}: {exc}")
                continue
            if synced is not None:
                settled.append(synced)
        return settled

    def flushed(self, result: FlushResult) -> Synced | None:
        """The writer's report on one job; what it settled, if anything."""
        cached = self._banks.get(bank_key(Path(result.root)))
        file = cached.files.get(result.name) if cached is not None else None
        if cached is None or file is None or file.flushing is None:
            return None  # cannot happen: a bank is never dropped while the writer has its file
        file.flushing = None
        if result.stale:
            # The file changed on disk since it was loaded: nothing was written. Take the user's
            # version in, apply the operations on top, and hand that over under a new marker.
            file.base, file.sig, file.loaded = result.text, result.sig, True
            file.rebuild()
            self._enqueue(cached, file)
            return None
        if result.error is not None and result.retry:
            self._report_retry(cached, file, result.error)
            return None
        file.last_error = None
        done = [r for r in file.pending if r.seq <= result.upto]
        if result.error is not None:
            reasons = {r.seq: result.error for r in done}
        else:
            reasons = {f.seq: f.reason for f in result.failed}
        saved = self._settle(cached, file, result.upto, reasons)
        if result.error is not None:
            file.loaded = False  # whatever is there now is read again before it is served
        else:
            file.base, file.sig, file.loaded = result.text, result.sig, True
        file.rebuild()
        cached.last_sync = self._clock()
        if any(op_size(r.op) > self._immediate_bytes for r in file.pending):
            self._enqueue(cached, file)  # a large change came while the writer had the file
        self._journal.compact(self._unsettled())
        written = result.error is None and any(r.seq not in reasons for r in done)
        return Synced(
            root=cached.root,
            name=result.name,
            applied=[_kind(r.op) for r in done if r.seq not in reasons],
            left_out=[str(path) for path in saved],
            written=written,
            sha=text_hash(result.text) if written else "",
        )

    def _report_retry(self, cached: CachedBank, file: CachedFile, error: str) -> None:
        if file.last_error != error:
            file.last_error = error
            self._errors.record(
                f"memory bank {file.name} in {cached.root} could not be written: {error}; "
                f"{len(file.pending)} change(s) are kept and retried at the next sync"
            )

    def _settle(
        self, cached: CachedBank, file: CachedFile, upto: int, reasons: dict[int, str]
    ) -> list[Path]:
        """The file's operations up to ``upto`` are done: those in ``reasons`` did not apply and
        are set aside, the others are on disk. One that could not be set aside stays pending
        (tried again at the next sync) rather than be dropped, and the journal then still
        holds them all. Returns where the set-aside ones went."""
        done = [r for r in file.pending if r.seq <= upto]
        kept, saved = self._set_aside_all(cached, [r for r in done if r.seq in reasons], reasons)
        file.pending = kept + [r for r in file.pending if r.seq > upto]
        if not kept:
            self._journal.append(Flushed(root=str(cached.root), name=file.name, upto=upto))
        return saved

    def _set_aside_all(
        self, cached: CachedBank, records: list[OpRecord], reasons: dict[int, str]
    ) -> tuple[list[OpRecord], list[Path]]:
        """Set aside each record: those that could not be saved, and where the others went."""
        kept, saved = [], []
        for record in records:
            try:
                saved.append(self._set_aside(cached, record, reasons[record.seq]))
            except OSError as exc:
                kept.append(record)
                self._errors.record(
                    f"memory bank {record.name} in {cached.root}: change #{record.seq} does not "
                    f"apply ({reasons[record.seq]}) and could not be saved aside "
                    f"({exc.strerror or exc}); it is kept in the bank journal"
                )
        return kept, saved

    def _set_aside(self, cached: CachedBank, record: OpRecord, reason: str) -> Path:
        """Keep a change that could not be applied where the user can find it, and say so."""
        folder = self._conflicts_dir / project_slug(cached.root)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Sequence numbers start again after the journal empties: the name must be unique anyway.
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(record.ts))
        unique = f"{stamp}-{record.seq}-{uuid.uuid4().hex[:8]}"
        path = folder / f"{unique}-{record.name.replace('/', '--')}"
        write_atomic(path, _op_text(record.op).encode("utf-8"))
        self._errors.record(
            f"memory bank {record.name} in {cached.root}: change #{record.seq} "
            f"({_kind(record.op)}) was not applied: {reason}. The file was left "
            f"as it is on disk; the change is saved in {path}",
            "warning",
        )
        return path

    def _unsettled(self) -> Iterator[OpRecord | Flushing]:
        """What the journal must still hold: pending operations and jobs in flight."""
        files = [f for cached in self._banks.values() for f in cached.files.values()]
        yield from sorted((r for f in files for r in f.pending), key=lambda r: r.seq)
        yield from (f.flushing for f in files if f.flushing is not None)

    def _recover(self) -> None:
        """Load what the journal holds from before a restart: pending operations, minus those a
        write already reached disk with (the daemon died before hearing back)."""
        recovered = self._journal.recovered
        if recovered.unreadable:
            self._errors.record(
                f"{recovered.unreadable} unreadable line(s) of the bank journal were set aside in "
                f"{self._journal.path}.bad"
            )
        for (root, name), pending in recovered.files.items():
            cached = self.bank(Path(root))
            file = cached.files[name] = CachedFile(name, pending=pending.ops)
            file.changed_at = pending.ops[-1].ts
            marker = pending.flushing
            if marker is None or self._disk_hash(cached, name) != marker.hash:
                continue  # not written: every operation is applied again, over what is there
            self._settle(cached, file, marker.upto, {f.seq: f.reason for f in marker.failed})
        self._journal.compact(self._unsettled())

    def check_journal(self, root: Path, *, repair: bool = False) -> tuple[str, bool]:
        """Whether the bank journal on disk agrees with the cache about ``root``'s bank: every
        line readable, and the changes a restart would apply again exactly those not on disk
        yet (one more would be applied twice, one fewer lost). ``repair`` writes a journal that
        differs anew from the cache (the request ids to remember, what is pending, the writes
        in flight). Returns "ok", the problem, or what the repair did, and whether the journal
        agrees now."""
        problem = self._journal_difference(root)
        if problem is None or not repair:
            return problem or "ok", problem is None
        self._journal.compact(self._unsettled(), force=True)
        still = self._journal_difference(root)
        done = "repaired" if still is None else f"still {still}"
        return f"{done}: written anew from the cache (it had {problem})", still is None

    def _journal_difference(self, root: Path) -> str | None:
        journaled = self._journal.on_disk()
        cached = self._banks.get(bank_key(root))
        files = cached.files if cached is not None else {}
        names = {n for r, n in journaled.files if r == str(root)} | {
            n for n, f in files.items() if f.pending
        }
        problems = []
        if journaled.unreadable:
            problems.append(f"{journaled.unreadable} unreadable line(s)")
        for name in sorted(names):
            disk = self._disk_hash(cached, name) if cached is not None else None
            on_disk = journaled.files.get((str(root), name))
            live = files.get(name)
            restart = _left_after(on_disk.ops, on_disk.flushing, disk) if on_disk else set()
            now = _left_after(live.pending, live.flushing, disk) if live else set()
            if extra := restart - now:
                problems.append(
                    f"{name}: {len(extra)} change(s) journaled as pending that are done "
                    "(a restart would apply them again)"
                )
            if missing := now - restart:
                problems.append(f"{name}: {len(missing)} pending change(s) not journaled")
        return "; ".join(problems) or None

    @staticmethod
    def _disk_hash(cached: CachedBank, name: str) -> str | None:
        try:
            return text_hash(cached.bank.load(name)[2])
        except (MemorydError, OSError):
            return None

    def report(self, description: str) -> None:
        self._errors.record(description)

    def close(self) -> None:
        self._journal.close()

    # -- diagnostics ---------------------------------------------------------------------------

    def describe(self, root: Path, interval_s: float) -> p.BankCacheInfo:
        """The cache metadata ``bank_activate`` reports (design §10)."""
        cached = self.bank(root)
        pending = [f.name for f in cached.files.values() if f.pending]
        return p.BankCacheInfo(
            key=bank_key(root),
            backend="memory",
            files_cached=sum(1 for f in cached.files.values() if f.loaded),
            pending_changes=sum(len(f.pending) for f in cached.files.values()),
            pending_files=sorted(pending),
            last_sync=_iso(cached.last_sync),
            sync_interval_s=interval_s,
        )

    def dump(self) -> None:
        """Write the whole cache to the debug dump (diagnostic only: never read back)."""
        if self._dump_path is None:
            return
        state = {
            key: {
                "root": str(cached.root),
                "last_sync": cached.last_sync,
                "files": {
                    name: {
                        "text": f.text,
                        "base_hash": text_hash(f.base) if f.loaded else None,
                        "pending": [msgspec.to_builtins(r) for r in f.pending],
                        "writing": f.flushing is not None,
                    }
                    for name, f in cached.files.items()
                },
            }
            for key, cached in self._banks.items()
        }
        self._dump_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The cache holds the user's own files too: the dump, a diagnostic, is redacted whole
        # (a marker holds no quote, so the JSON stays JSON).
        text = msgspec.json.format(msgspec.json.encode(state), indent=2).decode()
        write_atomic(self._dump_path, redact(text).text.encode())


def _left_after(ops: Iterable[OpRecord], flushing: Flushing | None, disk: str | None) -> set[int]:
    """The operations a restart applies again: all, but those a write in flight already put on
    disk (the file has the hash its marker names), as ``BankCache._recover`` decides."""
    written = flushing is not None and disk == flushing.hash
    return {r.seq for r in ops if not (written and flushing is not None and r.seq <= flushing.upto)}


def _modified(file: CachedFile) -> float:
    if file.pending or file.sig is None:
        return file.changed_at
    return file.sig[2] / 1e9


def _iso(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _kind(op: Op) -> str:
    return str(op.__struct_config__.tag)


def _op_text(op: Op) -> str:
    match op:
        case Write(content=content) | Update(content=content):
            return content
        case Complete(item=item, day=day):
            return f"Move to Completed ({day.isoformat()}): {item}\n"
        case Append(block=block):
            return block
        case ApplyItems(items=items):
            return "\n\n".join(f"{i.target_file} {i.operation_type}: {i.content}" for i in items)
