"""The bank cache's write-ahead journal: ``bank-journal.jsonl`` in the data directory.

A bank change is acknowledged once its operation is here, fsynced; the markdown file is written
later by the writer thread. Three kinds of line:

- ``op``: a change accepted for one file (the operation, not its result: ``core.bank_ops``);
- ``flushing``: the writer was handed the file's operations up to ``upto`` and will leave it
  with the text of hash ``hash`` (those in ``failed`` left out), or write nothing if the file is
  no longer the one the text was made from;
- ``flushed``: the writer reported the file written up to ``upto``;
- ``seen``: the request id of a change already settled, carried over when the journal is
  compacted (the last ``REMEMBERED_REQUESTS``), so that a client's retry reaching a later
  daemon is answered, not applied again.

After a crash, an operation is still pending unless a ``flushed`` line covers it, or a
``flushing`` line does and the file on disk has that line's hash (the daemon died after the
rename, before hearing back; the writer never writes any other text, so the hash is proof).
The journal is emptied whenever nothing is pending and no request id is to be remembered, and
compacted above ``COMPACT_ABOVE`` lines otherwise, so it stays small; only the owner thread writes
it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from memoryd.atomic import write_atomic
from memoryd.core.bank.ops import Failed, Op
from memoryd.disk import append_durably

COMPACT_ABOVE = 1000  # lines; below it a journal with pending operations is left as it is
REMEMBERED_REQUESTS = 500  # request ids kept across compaction (fewer than COMPACT_ABOVE)


class OpRecord(msgspec.Struct, tag="op", frozen=True, kw_only=True):
    seq: int
    ts: float
    root: str  # the project directory; the bank is its memory-bank/
    name: str  # the real file name inside the bank
    op: Op
    request: str = ""  # the client's request id: a retry reaching the next daemon is known


class Flushing(msgspec.Struct, tag="flushing", frozen=True, kw_only=True):
    root: str
    name: str
    upto: int
    hash: str  # of the text the writer may write ("" for none: nothing is written)
    failed: list[Failed] = []  # operations up to ``upto`` the text leaves out, with why


class Flushed(msgspec.Struct, tag="flushed", frozen=True, kw_only=True):
    root: str
    name: str
    upto: int


class Seen(msgspec.Struct, tag="seen", frozen=True, kw_only=True):
    request: str
    name: str


Record = OpRecord | Flushing | Flushed | Seen
FileKey = tuple[str, str]  # (project root, file name)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Record).decode


@dataclass
class PendingFile:
    """What the journal holds for one file after a restart."""

    ops: list[OpRecord] = field(default_factory=list)
    flushing: Flushing | None = None


@dataclass
class Recovered:
    files: dict[FileKey, PendingFile]
    last_seq: int
    unreadable: int  # lines that could not be decoded (kept in the .bad file beside)
    # (request id, file) of every change journaled, oldest first: one request (bank_process)
    # may change several files, and a retry must add those the dead daemon had not journaled.
    requests: tuple[tuple[str, str], ...] = ()


class BankJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.recovered = self._load()
        self.last_seq = self.recovered.last_seq
        self._requests: OrderedDict[tuple[str, str], None] = OrderedDict()
        for key in self.recovered.requests:
            self._remember(key)
        self._fd, self._size = self._open()

    def _open(self) -> tuple[int, int]:
        # Unbuffered: a failed append leaves nothing behind in a buffer for the next one to carry.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        return fd, os.fstat(fd).st_size

    def _load(self) -> Recovered:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return Recovered({}, 0, 0)
        records, bad = [], []
        for line in data.splitlines():
            try:
                records.append(_decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                bad.append(line)  # a torn last line, or one a newer version wrote
        if bad:
            with open(self.path.with_name(self.path.name + ".bad"), "ab") as fh:
                fh.write(b"".join(line + b"\n" for line in bad))
        self.count = len(records)
        if bad or (data and not data.endswith(b"\n")):
            self._rewrite(records)  # appends start on a clean line again
        return _recover(records, len(bad))

    def on_disk(self) -> Recovered:
        """What the journal file holds now, as a restart would recover it (``check``); reads
        only, sets nothing aside."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return Recovered({}, 0, 0)
        records, bad = [], 0
        for line in data.splitlines():
            try:
                records.append(_decode(line))
            except (msgspec.DecodeError, msgspec.ValidationError):
                bad += 1
        return _recover(records, bad)

    def append(self, record: Record) -> None:
        """Journal ``record`` durably (written and fsynced before returning). On failure (disk
        full) the journal is cut back to where it was, so a change the client is told failed
        cannot come back at the next start."""
        self._size = append_durably(self._fd, _encode(record) + b"\n", self._size)
        self.count += 1
        if isinstance(record, OpRecord):
            self.last_seq = max(self.last_seq, record.seq)
            if record.request:
                self._remember((record.request, record.name))

    def _remember(self, key: tuple[str, str]) -> None:
        self._requests[key] = None
        self._requests.move_to_end(key)
        while len(self._requests) > REMEMBERED_REQUESTS:
            self._requests.popitem(last=False)

    def seen(self, request: str, name: str) -> bool:
        """Whether a change to ``name`` by client request ``request`` was journaled already,
        by this daemon or one before it (among the last ``REMEMBERED_REQUESTS``)."""
        return (request, name) in self._requests

    def next_seq(self) -> int:
        return self.last_seq + 1

    def compact(self, keep: Iterable[Record], *, force: bool = False) -> None:
        """Replace the journal by the request ids to remember and ``keep`` (the pending
        operations and the ``flushing`` lines still in flight); nothing to keep empties it.
        ``force``: even when short (``check --repair`` writing it anew from the cache)."""
        kept: list[Record] = [Seen(request=r, name=n) for r, n in self._requests]
        kept.extend(keep)
        small = (kept and self.count <= COMPACT_ABOVE) or (not kept and self.count == 0)
        if small and not force:
            return
        self._rewrite(kept)  # a new file: if this fails, the old one is still whole and open
        os.close(self._fd)
        self._fd, self._size = self._open()

    def _rewrite(self, records: list[Record]) -> None:
        write_atomic(self.path, b"".join(_encode(r) + b"\n" for r in records))
        self.count = len(records)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _recover(records: list[Record], unreadable: int) -> Recovered:
    files: dict[FileKey, PendingFile] = {}
    last_seq = 0
    requests: dict[tuple[str, str], None] = {}
    for record in records:
        if isinstance(record, Seen):
            requests[(record.request, record.name)] = None
            continue
        if isinstance(record, OpRecord) and record.request:
            requests[(record.request, record.name)] = None
        key = (record.root, record.name)
        pending = files.setdefault(key, PendingFile())
        match record:
            case OpRecord(seq=seq):
                pending.ops.append(record)
                last_seq = max(last_seq, seq)
            case Flushing():
                pending.flushing = record
            case Flushed(upto=upto):
                pending.ops = [op for op in pending.ops if op.seq > upto]
                if pending.flushing is not None and pending.flushing.upto <= upto:
                    pending.flushing = None
    return Recovered(
        {k: v for k, v in files.items() if v.ops}, last_seq, unreadable, tuple(requests)
    )
