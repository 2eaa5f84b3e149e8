"""The per-project audit journal: ``audit.jsonl``, append-only, hash-chained (design §3).

Journal-first: an event is written and fsynced here before the store applies it, and the store
records the sequence number it has applied in the same transaction. On open, events the store has
not applied yet (the daemon died between the two writes) are replayed, so the journal is both the
user's audit trail and the write-ahead log of memory changes.

Trimming keeps the newest ``trim_to`` events once there are more than ``max_events``, by atomic
rewrite, and never drops an event newer than the caller's checkpoint (the last backup).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from memctl import protocol as p
from memoryd.atomic import write_atomic
from memoryd.core import audit_chain
from memoryd.core.errors import Unavailable
from memoryd.core.events import Event
from memoryd.disk import append_durably, write_failure_cause


class AuditRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    seq: int
    ts: float
    event: Event
    prev: str
    # The client's request that made the change (its id and op), so that a replay at open
    # remembers it too: a retry of it is then answered, not applied again.
    request: str = ""
    op: str = ""


class _Sequenced(msgspec.Struct):
    """Just the sequence number of a record: a line whose event this version does not know (a
    newer memoryd wrote it) is still a whole line, not a torn one to cut."""

    seq: int


class NewerEvent(Unavailable):
    """An event this version cannot apply: a newer memoryd journaled it."""


_record_decoder = msgspec.json.Decoder(AuditRecord)
_seq_decoder = msgspec.json.Decoder(_Sequenced)
_encoder = msgspec.json.Encoder()


class AuditJournal:
    def __init__(
        self,
        path: Path,
        *,
        max_events: int = 5000,
        trim_to: int = 4000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 < trim_to < max_events:
            raise ValueError("audit trim_to must be positive and below max_events")
        self.path = path
        self.max_events = max_events
        self.trim_to = trim_to
        self._clock = clock
        self.torn_bytes = 0
        self.last_seq, self.last_hash, self.count = self._recover()
        # Unbuffered: a line the disk refused must not stay in a buffer to be written later.
        self._fh = open(path, "ab", buffering=0)  # noqa: SIM115 - held for the journal's lifetime
        os.chmod(path, 0o600)

    def _recover(self) -> tuple[int, str, int]:
        """Load the tail state; a torn last line (the daemon died mid-write, before the fsync that
        would have acknowledged it) is moved to ``audit.jsonl.torn`` and cut off. Only the tail is
        decoded: the journal can hold large import events, and start-up must stay fast."""
        if not self.path.exists():
            return 0, audit_chain.GENESIS, 0
        data = self.path.read_bytes()
        good_end = len(data) if data.endswith(b"\n") else data.rfind(b"\n") + 1
        last: tuple[int, str] | None = None
        while good_end > 0:
            start = data.rfind(b"\n", 0, good_end - 1) + 1
            last = self._last_link(data[start : good_end - 1])
            if last is not None:
                break
            good_end = start  # a line that does not verify is torn too
        if good_end < len(data):
            self.torn_bytes = len(data) - good_end
            with open(self.path.with_name(self.path.name + ".torn"), "ab") as torn:
                torn.write(data[good_end:] + b"\n")
            with open(self.path, "rb+") as fh:
                fh.truncate(good_end)
                os.fsync(fh.fileno())
        if last is None:
            return 0, audit_chain.GENESIS, 0
        return last[0], last[1], data.count(b"\n", 0, good_end)

    @staticmethod
    def _last_link(line: bytes) -> tuple[int, str] | None:
        try:
            body, digest = audit_chain.unseal(line)
            return _seq_decoder.decode(body).seq, digest
        except (audit_chain.ChainError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def append(self, event: Event, request: tuple[str, str] | None = None) -> int:
        """Journal ``event`` (made by ``request``, its id and op, if a client's) durably and
        return its sequence number."""
        seq = self.last_seq + 1
        rid, op = request or ("", "")
        record = AuditRecord(
            seq=seq, ts=self._clock(), event=event, prev=self.last_hash, request=rid, op=op
        )
        body = _encoder.encode(record)
        line, digest = audit_chain.seal(body, self.last_hash)
        fd = self._fh.fileno()
        try:
            append_durably(fd, line + b"\n", os.fstat(fd).st_size)
        except OSError as exc:
            cause = write_failure_cause(self.path.parent, exc)
            raise Unavailable(
                f"the audit log {self.path} cannot be written: {cause}; nothing was changed"
            ) from exc
        self.last_seq, self.last_hash, self.count = seq, digest, self.count + 1
        return seq

    def events_of(self, request_id: str) -> list[Event]:
        """The events the client's request ``request_id`` made, oldest first, as long as the
        journal still holds them (a trim drops the oldest). Only to answer a retry of a change
        whose reply was lost: it reads the journal a line at a time, decoding only the lines
        whose ``request`` field is this id (as the encoder wrote it: escaped where JSON must);
        a line that does not decode is not this request's."""
        needle = b'"request":' + _encoder.encode(request_id)
        found = []
        with open(self.path, "rb") as fh:
            for line in fh:
                if needle not in line:
                    continue
                try:
                    body, _ = audit_chain.unseal(line)
                    record = _record_decoder.decode(body)
                except (audit_chain.ChainError, msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if record.request == request_id:
                    found.append(record.event)
        return found

    def _lines(self) -> list[bytes]:
        return self.path.read_bytes().splitlines()

    def events_after(self, seq: int) -> Iterator[tuple[int, Event, tuple[str, str] | None]]:
        """Each event after ``seq``: its number, itself, and the request that made it."""
        if seq >= self.last_seq:
            return  # nothing newer: skip reading the file at all
        for line in self._lines():
            body, _ = audit_chain.unseal(line)
            if _seq_decoder.decode(body).seq <= seq:
                continue
            try:
                record = _record_decoder.decode(body)
            except msgspec.ValidationError as exc:
                raise NewerEvent(
                    f"{self.path} holds an event this memoryd cannot apply ({exc}); it was "
                    "written by a newer version: upgrade memoryd to open this project"
                ) from None
            yield record.seq, record.event, (record.request, record.op) if record.request else None

    def tail(self, n: int, after_seq: int | None = None) -> list[p.AuditEvent]:
        """The last ``n`` events (after ``after_seq`` when given), each with its line as
        journaled, hash included."""
        if n == 0:
            return []
        events = [
            p.AuditEvent(
                seq=_seq_decoder.decode(audit_chain.unseal(line)[0]).seq, line=line.decode()
            )
            for line in self._lines()
        ]
        if after_seq is not None:
            events = [e for e in events if e.seq > after_seq]
        return events[-n:]

    def verify(self) -> audit_chain.ChainReport:
        return audit_chain.verify(self._lines())

    @property
    def needs_trim(self) -> bool:
        return self.count > self.max_events

    def trim(self, checkpoint_seq: int) -> int:
        """Keep the newest ``trim_to`` events plus any newer than ``checkpoint_seq``. Returns how
        many were dropped."""
        lines = self._lines()
        keep_from = max(0, len(lines) - self.trim_to)
        first_kept_seq = self.last_seq - (len(lines) - keep_from) + 1
        # Events after the checkpoint exist nowhere else yet: they must survive the trim.
        if checkpoint_seq < first_kept_seq - 1:
            keep_from = max(0, keep_from - (first_kept_seq - 1 - checkpoint_seq))
        if keep_from == 0:
            return 0
        self._fh.close()
        write_atomic(self.path, b"".join(line + b"\n" for line in lines[keep_from:]))
        self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115
        self.count = len(lines) - keep_from
        return keep_from

    def close(self) -> None:
        self._fh.close()
