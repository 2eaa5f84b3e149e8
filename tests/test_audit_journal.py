"""The audit journal facing lines a newer memoryd wrote: an event type this version does not
know is a whole line (never cut as torn), and replaying it is refused with a clear error
rather than skipped or crashed on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memctl.protocol import Source
from memoryd.audit import AuditJournal, NewerEvent
from memoryd.core import audit_chain
from memoryd.core.entries import new_entry
from memoryd.core.events import EntryAdded


def _append_foreign(path: Path, seq: int, prev: str) -> None:
    body = json.dumps(
        {"seq": seq, "ts": 1.0, "event": {"type": "from_the_future", "x": 1}, "prev": prev},
        separators=(",", ":"),
    ).encode()
    line, _digest = audit_chain.seal(body, prev)
    with open(path, "ab") as fh:
        fh.write(line + b"\n")


def test_unknown_event_type_is_kept_and_its_replay_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    journal = AuditJournal(path)
    entry = new_entry(
        entry_id="a" * 32,
        content="known",
        category="decision",
        status="confirmed",
        now=1.0,
        source=Source(kind="user"),
    )
    journal.append(EntryAdded(entry))
    prev = journal.last_hash
    journal.close()
    _append_foreign(path, 2, prev)
    size = path.stat().st_size

    reopened = AuditJournal(path)
    try:
        assert reopened.torn_bytes == 0 and path.stat().st_size == size  # nothing cut
        assert reopened.last_seq == 2 and reopened.verify().ok
        with pytest.raises(NewerEvent, match="newer version"):
            list(reopened.events_after(1))
        assert [seq for seq, _event in _known_only(reopened)] == [1]
    finally:
        reopened.close()


def _known_only(journal: AuditJournal) -> list[tuple[int, object]]:
    found = []
    events = journal.events_after(0)
    try:
        for seq, event, _request in events:
            found.append((seq, event))
    except NewerEvent:
        pass
    return found
