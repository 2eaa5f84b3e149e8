"""The audit log's hash chain, as pure functions over bytes.

A line is the JSON body of an event record with ``"hash"`` appended as its last member:
``{...body...,"hash":"<sha256 hex>"}``. The hash is ``sha256(prev_hash + body)`` where ``body`` is
the line without the hash member and ``prev_hash`` is the previous line's hash (the body also
names it in ``prev``). Trimming keeps a suffix of the log, so verification starts from the first
kept line's ``prev`` as its anchor.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import msgspec

GENESIS = "0" * 64
_SUFFIX = re.compile(rb',"hash":"([0-9a-f]{64})"\}$')


class ChainError(ValueError):
    """A line is malformed or does not link to the one before it."""


class ChainReport(msgspec.Struct, frozen=True):
    ok: bool
    events: int
    first_seq: int | None
    last_seq: int | None
    last_hash: str
    problem: str | None = None


class _Link(msgspec.Struct):
    seq: int
    prev: str


def seal(body: bytes, prev_hash: str) -> tuple[bytes, str]:
    """Append the chained hash to a JSON object ``body``; returns (line without newline, hash)."""
    if not (body.startswith(b"{") and body.endswith(b"}")):
        raise ChainError("body must be a JSON object")
    digest = hashlib.sha256(prev_hash.encode() + body).hexdigest()
    return body[:-1] + b',"hash":"' + digest.encode() + b'"}', digest


def unseal(line: bytes) -> tuple[bytes, str]:
    """Split a sealed line into (body, hash) and check the hash matches the body."""
    line = line.rstrip(b"\n")
    match = _SUFFIX.search(line)
    if match is None:
        raise ChainError("line has no hash")
    body = line[: match.start()] + b"}"
    digest = match.group(1).decode()
    link = msgspec.json.decode(body, type=_Link)
    if hashlib.sha256(link.prev.encode() + body).hexdigest() != digest:
        raise ChainError(f"hash mismatch at seq {link.seq}")
    return body, digest


def verify(lines: Iterable[bytes]) -> ChainReport:
    """Check every line's hash and its link to the previous line, and that seqs increase by 1."""
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash = GENESIS
    count = 0
    for raw in lines:
        try:
            body, digest = unseal(raw)
            link = msgspec.json.decode(body, type=_Link)
        except (ChainError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            return ChainReport(
                False, count, first_seq, last_seq, last_hash, f"after seq {last_seq}: {exc}"
            )
        if last_seq is not None and (link.prev != last_hash or link.seq != last_seq + 1):
            return ChainReport(
                False, count, first_seq, last_seq, last_hash, f"broken link at seq {link.seq}"
            )
        first_seq = link.seq if first_seq is None else first_seq
        last_seq, last_hash, count = link.seq, digest, count + 1
    return ChainReport(True, count, first_seq, last_seq, last_hash)
