"""The audit journal facing lines a newer memoryd wrote: an event type this version does not
know is a whole line (never cut as torn), and replaying it is refused with a clear error
rather than skipped or crashed on; the lookup of a request's events passes such a line over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memctl.protocol import Source
from memoryd.audit import AuditJournal, NewerEvent
from memoryd.core import audit_chain
from memoryd.core.entries import new_entry
from memoryd.core.events import EntryAdded, NoteAdded, NotesDone


def _append_foreign(path: Path, seq: int, prev: str, request: str = "") -> None:
    record = {"seq": seq, "ts": 1.0, "event": {"type": "from_the_future", "x": 1}, "prev": prev}
    if request:
        record |= {"request": request, "op": "note"}
    body = json.dumps(record, separators=(",", ":")).encode()
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


def test_the_events_of_a_request_are_found_by_its_own_field_only(tmp_path: Path) -> None:
    """``events_of`` (a retry whose reply was lost): the lines whose ``request`` is the id,
    however the id must be escaped in JSON; not a line that only quotes it in its text, nor
    another request's; a line this version cannot decode is passed over."""
    journal = AuditJournal(tmp_path / "audit.jsonl")
    odd = 'retry-"quoted"\\id'
    mine = NoteAdded(id="n1", content="rotate the keys", created_at=1.0)
    quoting = NoteAdded(id="n2", content=f"the request {odd} failed", created_at=2.0)
    journal.append(mine, (odd, "note"))
    journal.append(quoting, ("other-request", "note"))
    journal.close()
    _append_foreign(journal.path, journal.last_seq + 1, journal.last_hash, request=odd)
    done = NotesDone(ids=("n1",), done_at=3.0)
    reopened = AuditJournal(journal.path)
    try:
        reopened.append(done, (odd, "notes"))
        assert reopened.events_of(odd) == [mine, done]
        assert reopened.events_of("other-request") == [quoting]
        assert reopened.events_of("retry") == []
    finally:
        reopened.close()
