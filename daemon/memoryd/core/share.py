"""Memory shared through git (design §9, design §3): the file ``.memoryd/memory.jsonl`` and how it
merges into a project's store.

The file holds one JSON object a line, sorted: the project's confirmed and pinned entries
(archived ones too, so that a supersede or an archive travels), a tombstone for each entry
forgotten (or purged), and the edges between shared entries. Git merges it with
``merge=union``, which keeps both sides' lines, so after a merge an id may appear several times;
``collapse`` keeps the newest version of each (a tombstone wins a tie), and ``plan_merge`` takes
from it only what is newer than the store's own version, so nothing local is lost and merging a
file the daemon wrote itself changes nothing. Access counts are local use and never shared.

Pure: bytes and the store's current versions in, a plan (``MergePlan``) out; the daemon turns the
plan into one audited event (``events.MemoryMerged``).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Annotated, Literal

import msgspec

from memctl.protocol import (
    ArchivedReason,
    Category,
    Edge,
    Entry,
    Relation,
    Source,
    SourceKind,
    Status,
)
from memoryd.core import entries as core_entries
from memoryd.core.errors import MemorydError
from memoryd.core.redaction import redact

SHARE_DIR = ".memoryd"
SHARE_FILE = "memory.jsonl"
GITATTRIBUTES = ".gitattributes"  # in SHARE_DIR: it names the file relative to its folder
GITATTRIBUTES_LINE = f"{SHARE_FILE} merge=union"
SHARED_STATUSES: tuple[Status, ...] = ("confirmed", "pinned")
RELATIONS = frozenset({"depends_on", "enables", "replaces", "motivated_by", "contradicts"})
MALFORMED_TEXT_CHARS = 300  # of a bad line kept in the audit event (redacted)
SOURCE_FIELD_CHARS = 128  # of a shared source's agent and rule id
# Archived by this machine's compaction (design §8): local housekeeping, driven by local use,
# never shared. A teammate's file would otherwise archive (and, once purged, delete) what the
# team still uses; the same goes for a purge's tombstone.
LOCAL_ARCHIVE_REASONS = frozenset({"stale", "evicted"})

EntryId = Annotated[str, msgspec.Meta(pattern=r"^[0-9A-Za-z_.-]{1,128}$")]
Time = Annotated[float, msgspec.Meta(ge=0)]
Unit = Annotated[float, msgspec.Meta(ge=0, le=1)]


class SharedSource(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where an entry came from, without the local details (a teammate's transcript path)."""

    kind: SourceKind
    agent: str | None = None
    rule_id: str | None = None


class SharedEntry(
    msgspec.Struct, tag_field="type", tag="entry", frozen=True, kw_only=True, omit_defaults=True
):
    """An entry as the shared file (and an import) carries it: what a teammate needs, not the
    derived fields (fingerprint, section) nor, in the file, the local use."""

    id: EntryId
    updated_at: Time
    content: str
    category: Category
    status: Status
    importance: Unit = 0.7
    confidence: Unit = 1.0
    created_at: Time
    tags: tuple[str, ...] = ()
    file_paths: tuple[str, ...] = ()
    archived: bool = False
    archived_reason: ArchivedReason | None = None
    superseded_by: EntryId | None = None
    source: SharedSource = SharedSource(kind="import")
    # Only in an import (memctl export writes them); the shared file leaves them out.
    access_count: Annotated[int, msgspec.Meta(ge=0)] | None = None
    last_accessed_at: Time | None = None


class Tombstone(msgspec.Struct, tag_field="type", tag="tombstone", frozen=True, kw_only=True):
    """An entry deleted on purpose: ``forgotten`` by a user, or ``purged`` from the archive.
    ``updated_at`` is when, so that per id the newest version wins whatever its kind."""

    id: EntryId
    updated_at: Time
    fingerprint: Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{0,64}$")] = ""
    reason: Literal["forgotten", "purged"] = "forgotten"


Record = SharedEntry | Tombstone | Edge
Version = SharedEntry | Tombstone
EdgeKey = tuple[str, str, Relation]

_decoder = msgspec.json.Decoder(Record)
_any = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class Malformed(msgspec.Struct, frozen=True, kw_only=True):
    """A line that could not be read: reported (audit, log) and skipped, the rest still read."""

    line: int
    reason: str
    text: str


class Parsed(msgspec.Struct, frozen=True, kw_only=True):
    records: tuple[Record, ...]
    malformed: tuple[Malformed, ...] = ()
    known: int = 0  # lines skipped as exactly what the store would write


# --------------------------------------------------------------------------- reading


def parse(data: bytes, known: Container[bytes] = ()) -> Parsed:
    """Every line of a shared file; a bad line is kept aside with why, never fatal. Lines in
    ``known`` (the store's own, as ``line`` encodes them) are skipped unread: after a pull
    most lines are, and reading one (redaction above all) is what a merge costs."""
    records: list[Record] = []
    malformed: list[Malformed] = []
    skipped = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if raw in known:
            skipped += 1
            continue
        try:
            records.append(clean(_decoder.decode(raw)))
        except (msgspec.DecodeError, msgspec.ValidationError, MemorydError) as exc:
            # A teammate's bad line is input like any other: what the audit keeps is redacted.
            text = redact(raw[:MALFORMED_TEXT_CHARS].decode("utf-8", "replace")).text
            reason = redact(str(exc)[:MALFORMED_TEXT_CHARS]).text
            malformed.append(Malformed(line=number, reason=reason, text=text))
    return Parsed(records=tuple(records), malformed=tuple(malformed), known=skipped)


def decode_import(raw: str) -> Record | None:
    """An import line with an identity (a line of ``memctl export`` or of the shared file), or
    None for a plain one (content and optional fields: a new entry). Raises for a bad line."""
    value = _any.decode(raw)
    if not isinstance(value, dict):
        raise msgspec.ValidationError("an import line must be a JSON object")
    if "type" not in value and "id" not in value:
        return None
    if "type" not in value:
        value = {**value, "type": "entry"}
    if value.get("type") == "entry" and isinstance(value.get("source"), dict):
        # An export carries the full source; only what SharedSource holds is kept.
        value["source"] = {k: v for k, v in value["source"].items() if k in _SOURCE_FIELDS}
    record: Record = msgspec.convert(value, Record)
    return clean(record)


_SOURCE_FIELDS = frozenset(SharedSource.__struct_fields__)


def clean(record: Record) -> Record:
    """The checks of a hand-written entry (redaction, length, tags, paths) applied to one read
    from a file: a teammate's file is input like any other."""
    if isinstance(record, Edge):
        if record.relation not in RELATIONS:
            raise msgspec.ValidationError(f"unknown relation {record.relation!r}")
        if record.source == record.target:
            raise msgspec.ValidationError("an edge cannot link an entry to itself")
        return record
    if isinstance(record, Tombstone):
        return record
    content = core_entries.clean_content(redact(record.content).text)
    tags = core_entries.clean_tags(redact(t).text for t in record.tags)
    paths = core_entries.clean_paths(redact(f).text for f in record.file_paths)
    source = _clean_source(record.source)
    if record.archived != (record.archived_reason is not None):
        raise msgspec.ValidationError("archived and archived_reason must go together")
    if (content, tags, paths, source) == (
        record.content,
        record.tags,
        record.file_paths,
        record.source,
    ):
        return record
    return msgspec.structs.replace(
        record, content=content, tags=tags, file_paths=paths, source=source
    )


def _clean_source(source: SharedSource) -> SharedSource:
    """The agent and rule id are free text in a teammate's file: redacted and bounded."""
    agent = None if source.agent is None else redact(source.agent[:SOURCE_FIELD_CHARS]).text
    rule = None if source.rule_id is None else redact(source.rule_id[:SOURCE_FIELD_CHARS]).text
    if (agent, rule) == (source.agent, source.rule_id):
        return source
    return msgspec.structs.replace(source, agent=agent, rule_id=rule)


# --------------------------------------------------------------------------- writing


def to_shared(entry: Entry) -> SharedEntry:
    """An entry as the shared file holds it."""
    return SharedEntry(
        id=entry.id,
        updated_at=entry.updated_at,
        content=entry.content,
        category=entry.category,
        status=entry.status,
        importance=entry.importance,
        confidence=entry.confidence,
        created_at=entry.created_at,
        tags=entry.tags,
        file_paths=entry.file_paths,
        archived=entry.archived,
        archived_reason=entry.archived_reason,
        superseded_by=entry.superseded_by,
        source=SharedSource(
            kind=entry.source.kind, agent=entry.source.agent, rule_id=entry.source.rule_id
        ),
    )


def line(version: Version | Edge) -> bytes:
    """One line of the file, without its newline."""
    return _encoder.encode(version)


def is_shared(entry: Entry) -> bool:
    """Whether the shared file carries ``entry``: confirmed and pinned ones, unless this
    machine's compaction archived them (``LOCAL_ARCHIVE_REASONS``)."""
    return entry.status in SHARED_STATUSES and entry.archived_reason not in LOCAL_ARCHIVE_REASONS


def lines_of(entries: Iterable[Entry], tombstones: Iterable[Tombstone]) -> dict[str, bytes]:
    """id → line for the shared entries and the tombstones of forgotten ones (an entry wins
    over a stale tombstone of its id; a purge is compaction's, and stays local)."""
    found = {t.id: line(t) for t in tombstones if t.reason != "purged"}
    found.update((e.id, line(to_shared(e))) for e in entries if is_shared(e))
    return found


def join(lines: Mapping[str, bytes], edges: Iterable[Edge], shared: Container[str]) -> bytes:
    """The file from its version lines (by id) and the edges between ``shared`` entries."""
    links = sorted(
        (e for e in edges if e.source in shared and e.target in shared),
        key=lambda e: (e.source, e.target, e.relation),
    )
    body = [lines[i] for i in sorted(lines)] + [line(e) for e in links]
    return b"".join(text + b"\n" for text in body)


def render(
    entries: Iterable[Entry], tombstones: Iterable[Tombstone], edges: Iterable[Edge]
) -> bytes:
    """The shared file for a store: its confirmed and pinned entries and its tombstones sorted
    by id, then the edges between shared entries, one JSON object a line. The same store gives
    the same bytes on every machine."""
    entries = list(entries)
    shared = {e.id for e in entries if is_shared(e)}
    return join(lines_of(entries, tombstones), edges, shared)


# --------------------------------------------------------------------------- merging


def _key(version: Version) -> tuple[float, int, bytes]:
    """Newest ``updated_at`` wins; on a tie a tombstone wins, then the larger encoding (any
    fixed order will do: both machines must pick the same)."""
    shared = version
    if isinstance(version, SharedEntry):
        shared = msgspec.structs.replace(version, access_count=None, last_accessed_at=None)
    return (version.updated_at, isinstance(version, Tombstone), _encoder.encode(shared))


class Collapsed(msgspec.Struct, frozen=True, kw_only=True):
    """One version per id and one edge per key: what a union merge's duplicates come to."""

    versions: dict[str, Version]
    edges: dict[EdgeKey, Edge]


def collapse(records: Iterable[Record]) -> Collapsed:
    versions: dict[str, Version] = {}
    edges: dict[EdgeKey, Edge] = {}
    for record in records:
        if isinstance(record, Edge):
            key = (record.source, record.target, record.relation)
            held = edges.get(key)
            if held is None or record.created_at < held.created_at:  # the first time it existed
                edges[key] = record
            continue
        current = versions.get(record.id)
        if current is None or _key(record) > _key(current):
            versions[record.id] = record
    return Collapsed(versions=versions, edges=edges)


def newer(
    collapsed: Collapsed, local: Mapping[str, Entry], tombstones: Mapping[str, Tombstone]
) -> list[Version]:
    """The versions that beat what the store holds for their id (its entry or its tombstone);
    a version equal to the store's changes nothing (a file the daemon wrote itself)."""
    found: list[Version] = []
    for entry_id, version in sorted(collapsed.versions.items()):
        held = local.get(entry_id)
        mine: Version | None = tombstones.get(entry_id)
        if held is not None:
            if held.updated_at != version.updated_at:  # the common case: no encoding needed
                if version.updated_at > held.updated_at:
                    found.append(version)
                continue
            mine = to_shared(held)
        if mine is None or _key(version) > _key(mine):
            found.append(version)
    return found


class MergePlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a merge changes: entries written whole (new, or a newer version), entries deleted
    under a tombstone (and tombstones recorded for ids never held), local entries archived
    because a shared twin (same text) wins, and edges added."""

    entries: tuple[Entry, ...] = ()
    added: int = 0  # of ``entries``, those the store did not hold
    deleted: tuple[Tombstone, ...] = ()
    twins: tuple[tuple[str, str], ...] = ()  # (archived id, kept id)
    edges: tuple[Edge, ...] = ()
    unchanged: int = 0  # versions no newer than the store's

    def empty(self) -> bool:
        return not (self.entries or self.deleted or self.twins or self.edges)


def to_entry(version: SharedEntry, held: Entry | None, now: float | None = None) -> Entry:
    """The store's entry for a shared version: derived fields recomputed, local use kept. An
    entry new here without a use of its own counts as used ``now`` (when it arrived): its TTL
    and decay start then, not at its creation on a teammate's machine (a fresh clone would
    otherwise archive the team's older memory at its first compaction)."""
    count = version.access_count
    if count is None:
        count = held.access_count if held is not None else 0
    accessed = version.last_accessed_at
    if accessed is None:
        accessed = held.last_accessed_at if held is not None else now
    return Entry(
        id=version.id,
        fingerprint=core_entries.fingerprint(version.content),
        content=version.content,
        category=version.category,
        section=core_entries.section_of(version.category),
        importance=version.importance,
        confidence=version.confidence,
        status=version.status,
        archived=version.archived,
        archived_reason=version.archived_reason,
        superseded_by=version.superseded_by,
        source=Source(
            kind=version.source.kind, agent=version.source.agent, rule_id=version.source.rule_id
        ),
        file_paths=version.file_paths,
        tags=version.tags,
        access_count=count,
        last_accessed_at=accessed,
        created_at=version.created_at,
        updated_at=version.updated_at,
    )


def plan_merge(
    winners: Iterable[Version],
    edges: Iterable[Edge],
    *,
    local: Mapping[str, Entry],
    owners: Mapping[str, Entry],
    present: Iterable[str],
    local_edges: Mapping[EdgeKey, float],
    total: int,
    now: float | None = None,
) -> MergePlan:
    """The plan for the ``winners`` (from ``newer``) and the file's ``edges``.

    ``local``: the store's entries for the winners' ids; ``owners``: the store's active entry
    for each fingerprint a winner would hold active; ``present``: the edge endpoints the store
    holds; ``local_edges``: the store's edges among them (key → created_at); ``total``: the
    versions read, to count the unchanged ones.

    Two active entries cannot share a text: when a winner would, the shared one with the
    smaller id stays active and the other is archived as superseded by it (a local candidate
    always gives way), on every machine alike, with its own ``updated_at`` kept so that the
    machines agree on the result."""
    winners = list(winners)
    entries: dict[str, Entry] = {}
    deleted: list[Tombstone] = []
    for version in winners:
        if isinstance(version, Tombstone):
            held = local.get(version.id)
            fingerprint = held.fingerprint if held is not None else version.fingerprint
            deleted.append(msgspec.structs.replace(version, fingerprint=fingerprint))
        else:
            entries[version.id] = to_entry(version, local.get(version.id), now)
    gone = {t.id for t in deleted}
    twins = _settle_twins(entries, owners, gone)
    links = {(e.source, e.target, e.relation): e for e in edges}
    for loser, kept, at in twins:
        # The kept twin replaces the other, dated by the loser's own time on every machine.
        links.setdefault(
            (kept, loser, "replaces"),
            Edge(source=kept, target=loser, relation="replaces", created_at=at),
        )
    # Twins exist by construction (held here, or written by this plan).
    alive = (set(present) | set(entries) | {i for t in twins for i in t[:2]}) - gone
    added_edges = tuple(
        e
        for key, e in sorted(links.items())
        if e.source in alive
        and e.target in alive
        and (key not in local_edges or e.created_at < local_edges[key])
    )
    written = tuple(entries[i] for i in sorted(entries))
    return MergePlan(
        entries=written,
        added=sum(1 for e in written if e.id not in local),
        deleted=tuple(deleted),
        twins=tuple(sorted((loser, kept) for loser, kept, _ in twins if loser not in entries)),
        edges=added_edges,
        unchanged=total - len(winners),
    )


def _settle_twins(
    entries: dict[str, Entry], owners: Mapping[str, Entry], gone: set[str]
) -> list[tuple[str, str, float]]:
    """Archive all but one of the active entries sharing a text; returns (loser, kept, the
    loser's updated_at). Changes ``entries`` in place (a winner that loses is written
    archived)."""
    by_text: dict[str, list[Entry]] = {}
    for entry in entries.values():
        if not entry.archived:
            by_text.setdefault(entry.fingerprint, []).append(entry)
    for fingerprint, owner in owners.items():
        if owner.id not in entries and owner.id not in gone and not owner.archived:
            by_text.setdefault(fingerprint, []).append(owner)
    losers: list[tuple[str, str, float]] = []
    for group in by_text.values():
        if len(group) < 2:
            continue
        # A pin is the user's word: a pinned twin stays over a confirmed one, then the
        # smaller id (the same choice on every machine).
        shared = sorted((e.status != "pinned", e.id) for e in group if e.status in SHARED_STATUSES)
        kept = shared[0][1] if shared else min(e.id for e in group)
        for entry in group:
            if entry.id == kept:
                continue
            losers.append((entry.id, kept, entry.updated_at))
            if entry.id in entries:
                entries[entry.id] = msgspec.structs.replace(
                    entry, archived=True, archived_reason="superseded", superseded_by=kept
                )
    return losers


def touches_shared(tag: object) -> bool:
    """Whether an event (by its tag) can change what the shared file holds. Local use
    (accesses), session memory, settings and aliases never do."""
    return tag not in _LOCAL_ONLY


_LOCAL_ONLY = frozenset(
    {
        "entries_accessed",
        "alias_set",
        "alias_removed",
        "setting_changed",
        "findings_recorded",
        "bank_file_synced",
        "bank_optimised",
        "entry_decayed",
    }
)
