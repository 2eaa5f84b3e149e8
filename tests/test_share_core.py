"""The shared file's pure core (``memoryd.core.share``): rendering, reading, collapsing a union
merge's duplicates and planning a merge. The same plans applied to the in-process store prove
that two machines exchanging files end up holding the same memory."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from memctl.protocol import Edge, Entry, Remember, Source
from memoryd.background import BackgroundErrors
from memoryd.config import StorageSettings
from memoryd.core import entries as core_entries
from memoryd.core import share
from memoryd.core.events import EntriesForgotten, EntryAdded, EntrySuperseded, MemoryMerged
from memoryd.project import ProjectMemory
from memoryd.store.memory import MemoryStore


def entry(entry_id: str, content: str, at: float, **fields: object) -> Entry:
    base = core_entries.new_entry(
        entry_id=entry_id,
        content=content,
        category="decision",
        status="confirmed",
        now=at,
        source=Source(kind="user", transcript_path="/home/someone/t.jsonl"),
    )
    return msgspec.structs.replace(base, **fields)  # type: ignore[arg-type]


class Machine:
    """A store and its audit sequence: what one daemon holds of a project."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.seq = 0

    def apply(self, event: object) -> None:
        self.seq += 1
        self.store.apply(event, self.seq)  # type: ignore[arg-type]

    def text(self) -> bytes:
        return share.render(
            self.store.shared_entries(),
            self.store.tombstones().values(),
            self.store.all_edges(),
        )

    def merge(self, data: bytes) -> share.MergePlan:
        parsed = share.parse(data)
        collapsed = share.collapse(parsed.records)
        ids = list(collapsed.versions)
        local = self.store.get_many(ids)
        winners = share.newer(collapsed, local, self.store.tombstones(ids))
        owners = {}
        for v in winners:
            if isinstance(v, share.SharedEntry) and not v.archived:
                fp = core_entries.fingerprint(v.content)
                if (owner := self.store.find_fingerprint(fp)) is not None:
                    owners[fp] = owner
        ends = list({i for key in collapsed.edges for i in key[:2]})
        plan = share.plan_merge(
            winners,
            collapsed.edges.values(),
            local=local,
            owners=owners,
            present=set(self.store.get_many(ends)),
            local_edges={
                (e.source, e.target, e.relation): e.created_at for e in self.store.all_edges()
            },
            total=len(collapsed.versions),
        )
        if not plan.empty():
            self.apply(
                MemoryMerged(
                    origin="test",
                    entries=plan.entries,
                    deleted=plan.deleted,
                    twins=plan.twins,
                    edges=plan.edges,
                    merged_at=0.0,
                )
            )
        return plan


def lines(data: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in data.splitlines()]


# --------------------------------------------------------------------------- the file


def test_render_is_sorted_shared_only_and_leaves_local_details_out() -> None:
    a = entry("b1", "Use UTC everywhere", 10.0, access_count=7, last_accessed_at=50.0)
    b = entry("a2", "Pin the toolchain", 11.0, status="pinned")
    c = entry("c3", "maybe try uv", 12.0, status="candidate")
    tomb = share.Tombstone(id="a0", updated_at=9.0, fingerprint="x")
    edges = [
        Edge(source="b1", target="a2", relation="depends_on", created_at=1.0),
        Edge(source="c3", target="a2", relation="enables", created_at=1.0),  # candidate end
    ]
    data = share.render([a, b, c], [tomb], edges)
    got = lines(data)
    assert [(r["type"], r.get("id")) for r in got] == [
        ("tombstone", "a0"),
        ("entry", "a2"),
        ("entry", "b1"),
        ("edge", None),
    ]
    assert "access_count" not in got[2] and "fingerprint" not in got[2]
    assert got[2]["source"] == {"kind": "user"}  # no transcript path of someone's machine
    assert share.render([b, c, a], [tomb], list(reversed(edges))) == data  # one order only


def test_parse_reads_every_good_line_and_reports_the_bad_ones() -> None:
    good = share.render([entry("a1", "Use UTC everywhere", 10.0)], [], [])
    data = b"\n".join(
        [
            good.rstrip(b"\n"),
            b'{"type": "entry", "id": "x"',  # cut short
            b'{"type": "edge", "source": "a", "target": "b", "relation": "likes", "created_at": 1}',
            b'{"type": "entry", "id": "y", "updated_at": 1, "content": "' + b"z" * 600 + b'",'
            b' "category": "decision", "status": "confirmed", "created_at": 1}',
            b"",
            b'{"type": "tombstone", "id": "a1", "updated_at": 5}',
        ]
    )
    parsed = share.parse(data)
    assert [type(r).__name__ for r in parsed.records] == ["SharedEntry", "Tombstone"]
    assert [m.line for m in parsed.malformed] == [2, 3, 4]
    assert "relation" in parsed.malformed[1].reason
    assert "limit is 500" in parsed.malformed[2].reason
    assert len(parsed.malformed[2].text) == share.MALFORMED_TEXT_CHARS


def test_a_secret_in_a_teammates_file_is_redacted_on_the_way_in() -> None:
    line = json.dumps(
        {
            "type": "entry",
            "id": "s1",
            "updated_at": 1.0,
            "created_at": 1.0,
            "category": "warning",
            "status": "confirmed",
            "content": "the deploy key is AKIA" + "QZ7RT2WX4YB6NC8P",
        }
    )
    (record,) = share.parse(line.encode()).records
    assert isinstance(record, share.SharedEntry)
    assert "QZ7RT2WX4YB6NC8P" not in record.content


def test_collapse_keeps_the_newest_version_and_a_tombstone_wins_a_tie() -> None:
    old = share.to_shared(entry("a1", "Use UTC", 10.0))
    new = msgspec.structs.replace(old, status="pinned", updated_at=20.0)
    tie = share.Tombstone(id="a1", updated_at=20.0)
    edge = Edge(source="a1", target="b2", relation="enables", created_at=5.0)
    earlier = msgspec.structs.replace(edge, created_at=3.0)
    collapsed = share.collapse([new, old, edge, tie, new, earlier, old])
    assert collapsed.versions == {"a1": tie}
    assert list(collapsed.edges.values()) == [earlier]
    assert share.collapse([old, new, old]).versions == {"a1": new}


def test_an_import_line_of_export_keeps_its_local_use() -> None:
    exported = msgspec.json.encode(entry("a1", "Use UTC", 10.0, access_count=4)).decode()
    record = share.decode_import(exported)
    assert isinstance(record, share.SharedEntry) and record.access_count == 4
    assert share.decode_import('{"content": "plain"}') is None
    assert share.to_entry(record, None).access_count == 4


# --------------------------------------------------------------------------- merging


def test_merging_the_file_the_store_wrote_changes_nothing() -> None:
    m = Machine()
    m.apply(EntryAdded(entry("a1", "Use UTC", 10.0)))
    m.apply(EntryAdded(entry("b2", "Pin the toolchain", 11.0, status="pinned")))
    m.apply(EntriesForgotten(("b2",), forgotten_at=12.0))
    plan = m.merge(m.text())
    assert plan.empty() and plan.unchanged == 2


def test_newest_wins_per_id_and_local_use_is_kept() -> None:
    m = Machine()
    m.apply(EntryAdded(entry("a1", "Use UTC", 10.0, access_count=3)))
    m.apply(EntryAdded(entry("b2", "Pin the toolchain", 30.0)))
    theirs = share.render(
        [
            entry("a1", "Use UTC", 20.0, status="pinned"),  # newer: wins
            entry("b2", "Pin the toolchain v2", 25.0),  # older than ours: ignored
            entry("c3", "Releases on Tuesdays", 5.0),  # new here
        ],
        [],
        [],
    )
    plan = m.merge(theirs)
    assert [e.id for e in plan.entries] == ["a1", "c3"] and plan.added == 1
    held = m.store.get_many(["a1", "b2", "c3"])
    assert held["a1"].status == "pinned" and held["a1"].access_count == 3
    assert held["b2"].content == "Pin the toolchain"
    assert held["c3"].fingerprint == core_entries.fingerprint("Releases on Tuesdays")


def test_a_tombstone_deletes_older_versions_only_and_is_remembered() -> None:
    m = Machine()
    m.apply(EntryAdded(entry("a1", "Use UTC", 10.0)))
    m.apply(EntryAdded(entry("b2", "Pin the toolchain", 30.0)))
    theirs = share.render(
        [],
        [
            share.Tombstone(id="a1", updated_at=15.0),
            share.Tombstone(id="b2", updated_at=20.0),  # b2 was edited after: it stays
            share.Tombstone(id="z9", updated_at=1.0, fingerprint="f"),  # never held here
        ],
        [],
    )
    m.merge(theirs)
    assert set(m.store.get_many(["a1", "b2"])) == {"b2"}
    assert set(m.store.tombstones()) == {"a1", "z9"}
    assert m.store.is_forgotten(core_entries.fingerprint("Use UTC"))
    # The old version of a1 arriving again (an old branch) does not bring it back.
    assert m.merge(share.render([entry("a1", "Use UTC", 10.0)], [], [])).empty()
    assert m.store.get("a1") is None


def test_two_entries_with_one_text_settle_on_the_smaller_id_everywhere() -> None:
    alice, bob = Machine(), Machine()
    alice.apply(EntryAdded(entry("a1", "Use UTC everywhere", 10.0)))
    bob.apply(EntryAdded(entry("b2", "use  UTC everywhere", 11.0)))  # same text, own id
    bob.apply(EntryAdded(entry("b3", "Pin the toolchain", 12.0, status="candidate")))
    alice.apply(EntryAdded(entry("a4", "pin the toolchain", 13.0)))
    from_alice, from_bob = alice.text(), bob.text()
    alice.merge(from_bob)
    bob.merge(from_alice)
    for m in (alice, bob):
        b2 = m.store.get("b2")
        assert b2 is not None and b2.archived and b2.superseded_by == "a1"
        assert m.store.find_fingerprint(core_entries.fingerprint("use utc everywhere")).id == "a1"
        assert ("a1", "b2", "replaces") in {
            (e.source, e.target, e.relation) for e in m.store.all_edges()
        }
    # The local candidate gave way to the shared entry with its text.
    b3 = bob.store.get("b3")
    assert b3 is not None and b3.archived and b3.superseded_by == "a4"
    # Exchanging again: both write the same file, and merging it changes nothing.
    assert alice.text() == bob.text()
    assert alice.merge(bob.text()).empty() and bob.merge(alice.text()).empty()


def test_concurrent_edits_converge_after_a_union_merge() -> None:
    """Both sides edit, add and forget; the file git's union merge makes from both converges
    both stores to one memory, which each side writes back byte for byte the same."""
    alice, bob = Machine(), Machine()
    for m in (alice, bob):
        m.apply(EntryAdded(entry("e1", "The queue is RabbitMQ", 10.0)))
        m.apply(EntryAdded(entry("e2", "Staging is stage-1", 10.0)))
        m.apply(EntryAdded(entry("e3", "Two approvals per review", 10.0)))
    alice.apply(EntryAdded(entry("a1", "Metrics go to Prometheus", 20.0)))
    alice.apply(EntriesForgotten(("e2",), forgotten_at=21.0))
    alice.apply(
        EntrySuperseded(old_id="e3", entry=entry("a2", "Three approvals", 22.0), superseded_at=22.0)
    )
    bob.apply(EntryAdded(entry("b1", "Traces go to Tempo", 20.5)))
    bob.apply(EntryAdded(entry("b2", "Logs go to Loki", 23.0)))
    union = alice.text() + bob.text()  # union keeps both sides' lines (order aside)
    alice.merge(union)
    bob.merge(union)
    assert alice.text() == bob.text()
    held = {e.id: e for e in alice.store.shared_entries()}
    assert set(held) == {"e1", "e3", "a1", "a2", "b1", "b2"}
    assert held["e3"].archived and held["e3"].superseded_by == "a2"
    assert "e2" in alice.store.tombstones() and bob.store.get("e2") is None


# --------------------------------------------------------------------------- the kept lines


def test_the_lines_kept_per_id_always_equal_a_full_render(tmp_path: Path) -> None:
    """``ProjectMemory.shared_text`` reads again only what a change touched; after every kind of
    change it must equal the file rendered from the whole store."""
    root = tmp_path / "repo"
    root.mkdir()
    ticks = iter(range(1_000, 1_000_000))
    project = ProjectMemory(
        root, tmp_path / "data", StorageSettings(), BackgroundErrors(), clock=lambda: next(ticks)
    )

    def full() -> bytes:
        return share.render(
            project.store.shared_entries(),
            project.store.tombstones().values(),
            project.store.all_edges(),
        )

    try:
        a = project.remember(Remember(content="Use UTC everywhere")).id
        assert project.shared_text() == full()  # built whole here; kept from now on
        b = project.remember(Remember(content="Pin the toolchain", pin=True)).id
        c = project.remember(Remember(content="Queue is RabbitMQ")).id
        assert project.shared_text() == full()
        project.supersede(c, "Queue is Kafka")
        project.unpin(b)
        project.remember(Remember(content="Use UTC everywhere"))  # reinforced: a new version
        assert project.shared_text() == full()
        project.forget(a, confirm=False)
        project.archive([b])
        theirs = share.render([entry("z" * 32, "Payments via Stripe", 5.0)], [], [])
        parsed = share.parse(theirs, project.known_shared_lines())
        project.merge_shared(parsed.records, parsed.malformed, origin="test")
        text = project.shared_text()
        assert text == full()
        assert b"Stripe" in text and b'"tombstone"' in text and b'"replaces"' in text
        assert project.merge_shared(
            share.parse(text, project.known_shared_lines()).records, (), origin="again"
        ).empty()
    finally:
        project.close()
