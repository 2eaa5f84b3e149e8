"""The memoryd wire schema: the one contract between the daemon and every client.

Transport: a ZeroMQ ROUTER on the daemon side; one frame per message after the routing
envelope, encoded as MessagePack by msgspec. Requests are a tagged union on ``op``; every request
carries ``v`` (the protocol version, which moves separately from the package version) and ``id``
(echoed in the reply). Replies are ``Ok`` or ``Error``, tagged on ``status``.

Each request type names its result type and whether it changes memory; the list of request
types, the decoder of requests and the daemon's set of mutating requests are derived from them,
so an operation is declared in one place.

Compatibility rules: both sides ignore unknown fields, so adding an optional field is not a
breaking change; removing or retyping one is, and bumps ``PROTOCOL_VERSION``.

The daemon imports this module; this module imports nothing of the daemon.
"""

from __future__ import annotations

import enum
import functools
from typing import (
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

import msgspec

# 2: every result typed (status, audit, bank activate, files list); 3: a bank problem may be a
# secret in a file the user edited.
PROTOCOL_VERSION = 3
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

Category = Literal[
    "task_progress",
    "discovery",
    "file_change",
    "warning",
    "decision",
    "error",
    "pattern",
    "architecture",
    "spec",
    "preference",
]
Status = Literal["candidate", "confirmed", "pinned"]
ArchivedReason = Literal["superseded", "stale", "evicted", "user"]
SourceKind = Literal["user", "agent", "transcript", "memory-bank", "import"]
PresetName = Literal["conservative", "balanced", "aggressive"]

RequestId = (
    Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | Annotated[str, msgspec.Meta(max_length=128)]
)
Limit = Annotated[int, msgspec.Meta(ge=1, le=10_000)]
PathText = Annotated[str, msgspec.Meta(max_length=4096)]
# What no name a user gives may hold (a tag, section, alias, bank file, mode, session): C0 and C1
# controls and the invisible characters that reorder or hide text (bidi marks, embeddings,
# overrides and isolates, zero-width characters, the BOM, tag characters). Names are listed,
# injected and become file names, where such a character makes a name read as another one.
# Refused, not stripped: a name the user typed must be the name that is kept. ``explain`` words
# the refusal.
NAME_PATTERN = (
    r"^[^\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
    r"\U000e0000-\U000e007f]*\Z"
)
NAME_RULE = "a name may not hold control, bidi or other invisible characters"
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=NAME_PATTERN)]
Section = Annotated[str, msgspec.Meta(max_length=128, pattern=NAME_PATTERN)]
Term = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=NAME_PATTERN)]
# The agent a write comes from (an MCP client's name): set, the entry's source is that agent, and
# the write may not pin (design §9: only a user pins).
AgentName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class ErrorCode(enum.StrEnum):
    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    TOO_LARGE = "too_large"
    CONFLICT = "conflict"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"
    VERSION_MISMATCH = "version_mismatch"


# --------------------------------------------------------------------------- data model


class Source(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where an entry came from (design §2)."""

    kind: SourceKind
    agent: str | None = None
    session_id: str | None = None
    transcript_path: str | None = None
    offset: int | None = None
    rule_id: str | None = None


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One atom of project memory (design §2). All times are UTC epoch seconds."""

    id: str
    fingerprint: str
    content: str
    category: Category
    section: str
    importance: float
    confidence: float
    status: Status
    archived: bool = False
    archived_reason: ArchivedReason | None = None
    superseded_by: str | None = None
    source: Source = Source(kind="user")
    file_paths: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    access_count: int = 0
    last_accessed_at: float | None = None
    created_at: float
    updated_at: float


class BackgroundError(msgspec.Struct, frozen=True):
    """A background failure not yet reported to any client (design §10 error history)."""

    timestamp: float
    description: str
    severity: Literal["info", "warning", "error"] = "error"


# --------------------------------------------------------------------------- results
# Declared before the requests that name them.


class HelloResult(msgspec.Struct, kw_only=True):
    protocol: int
    version: str
    pid: int


class DaemonInfo(msgspec.Struct, kw_only=True):
    version: str
    protocol: int
    pid: int
    uptime_s: float
    socket: str


class EntryCounts(msgspec.Struct, kw_only=True):
    candidate: int = 0
    confirmed: int = 0
    pinned: int = 0
    archived: int = 0


class Progress(msgspec.Struct, kw_only=True):
    """Long work of the daemon: ``done`` of ``total``, in the unit its field names."""

    done: int
    total: int


class IndexInfo(msgspec.Struct, kw_only=True):
    """The search index: documents held, the last change sequence applied, why it was rebuilt
    from the database when the project was opened (None: it was not), and the documents written
    of a rebuild still under way (None: none is)."""

    documents: int
    applied_seq: int
    rebuilt_at_open: str | None
    rebuilding: Progress | None = None


class ProjectInfo(msgspec.Struct, kw_only=True):
    root: str
    slug: str
    entries: EntryCounts
    sessions: int
    index: IndexInfo
    last_compacted_at: float | None = None  # when compaction last ran to its end
    open_conflicts: int = 0  # unresolved, between two active entries
    awaiting_review: int = 0  # candidates and findings waiting for memctl review
    last_capture_at: float | None = None  # a session last recorded, begun or ended (epoch s)
    bank: bool = False  # memory-bank/ is present in the project
    size_bytes: int | None = None  # its data folder on disk: database, WAL, index, audit log


class SloInfo(msgspec.Struct, kw_only=True):
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    degraded: bool = False
    samples: int = 0


class Backlog(msgspec.Struct, kw_only=True):
    """Transcripts queued to be read between requests (at start, those changed in the last
    ``capture.backfill_days``): files, and the bytes of them not read before, done of total
    since the backlog was last empty."""

    files: Progress
    bytes: Progress


class CaptureInfo(msgspec.Struct, kw_only=True):
    """Transcript capture since the daemon started: transcript files and messages read, files no
    project could be found for, malformed lines, record kinds no parser knows (by kind), and the
    sessions being followed now."""

    enabled: bool
    files: int = 0
    messages: int = 0
    unresolved_files: int = 0
    malformed: int = 0
    unknown_records: dict[str, int] = {}
    live_sessions: int = 0
    backlog: Backlog | None = None


class StatusResult(msgspec.Struct, kw_only=True):
    daemon: DaemonInfo
    project: ProjectInfo | None
    slo: SloInfo
    errors: list[BackgroundError]
    capture: CaptureInfo

    def work_under_way(self) -> bool:
        """Whether the daemon is rebuilding this project's index or reading a transcript
        backlog (``memctl status --wait`` waits for both to end)."""
        rebuilding = self.project is not None and self.project.index.rebuilding is not None
        backlog = self.capture.backlog
        return rebuilding or (backlog is not None and backlog.files.done < backlog.files.total)


class RememberResult(msgspec.Struct, kw_only=True):
    id: str
    duplicate: bool
    status: Status


class ScoredEntry(msgspec.Struct, kw_only=True):
    """A search result: an entry of project memory, or a finding of a session not promoted
    yet (``kind`` "finding", status "candidate")."""

    id: str
    content: str
    category: Category
    status: Status
    score: float
    importance: float
    tags: tuple[str, ...] = ()
    file_paths: tuple[str, ...] = ()
    archived: bool = False
    kind: Literal["entry", "finding"] = "entry"
    session_id: str | None = None


class SearchResult(msgspec.Struct, kw_only=True):
    results: list[ScoredEntry]


class TokenInfo(msgspec.Struct, kw_only=True):
    total: int
    budget: int
    tiers: dict[str, int]


class InjectResult(msgspec.Struct, kw_only=True):
    text: str
    tokens: TokenInfo
    entries: list[str]


class HookResult(msgspec.Struct, kw_only=True):
    """``text`` is the payload to hand the agent ("" for nothing); ``remembered`` the ids of
    entries a ``remember:`` in the prompt created; ``finalized`` whether a session was closed;
    ``tokens`` the payload's size per tier (none when there is no payload);
    ``bank_update`` whether the prompt asked to update the memory bank ("UMB")."""

    text: str = ""
    entries: list[str] = []
    remembered: list[str] = []
    finalized: bool = False
    tokens: TokenInfo | None = None
    bank_update: bool = False


class AutoResult(msgspec.Struct, kw_only=True):
    enabled: bool
    preset: PresetName


class EpisodeInfo(msgspec.Struct, kw_only=True):
    id: str
    session_id: str
    agent: str
    title: str
    goal: str
    decisions: list[str]
    outcome: str
    files: list[str]
    turns: int
    tool_calls: int
    errors: int
    started_at: float | None
    ended_at: float | None
    tags: list[str]


class EpisodesResult(msgspec.Struct, kw_only=True):
    episodes: list[EpisodeInfo]


class BudgetResult(msgspec.Struct, kw_only=True):
    ceiling: int
    default: int
    overridden: bool


class Alias(msgspec.Struct, kw_only=True):
    term: str
    synonyms: list[str]
    source: Literal["default", "project"]


class AliasListResult(msgspec.Struct, kw_only=True):
    aliases: list[Alias]


class ListResult(msgspec.Struct, kw_only=True):
    entries: list[Entry]
    total: int


class ForgetResult(msgspec.Struct, kw_only=True):
    forgotten: list[str]


class PinResult(msgspec.Struct, kw_only=True):
    id: str
    status: Status


class CompactResult(msgspec.Struct, kw_only=True):
    """Decisions of the run (applied, or only planned with ``dry_run``), then the active and
    archived entries after it. ``done`` is False when the answer's wait ended before the run
    did (it goes on in the background)."""

    decayed: int
    expired: int
    evicted: int
    purged: int
    active: int
    archived: int
    dry_run: bool = False
    done: bool = True


class SupersedeResult(msgspec.Struct, kw_only=True):
    id: str  # the new entry
    superseded: str  # the old one, now archived


class ArchiveResult(msgspec.Struct, kw_only=True):
    """The entries whose state changed: ``archived`` True for archive, False for unarchive."""

    ids: list[str]
    archived: bool


class ConflictInfo(msgspec.Struct, kw_only=True):
    """An open conflict: its id (for ``resolve``), its kind, and both entries."""

    id: str
    conflict_type: str
    detected_at: float
    a: Entry
    b: Entry


class ConflictsResult(msgspec.Struct, kw_only=True):
    conflicts: list[ConflictInfo]


class ResolveResult(msgspec.Struct, kw_only=True):
    """``superseded``: the entry archived in favour of the one kept (None with --both)."""

    id: str
    kept: str | None
    superseded: str | None


class RejectedLine(msgspec.Struct, kw_only=True):
    line: int
    reason: str


class ImportResult(msgspec.Struct, kw_only=True):
    imported: int
    duplicates: int
    rejected: list[RejectedLine]


class ExportResult(msgspec.Struct, kw_only=True):
    entries: list[Entry]
    edges: list[Edge] = []  # those between two exported entries


class AuditEvent(msgspec.Struct, kw_only=True):
    """One event of the audit log: its sequence number, and its line exactly as journaled (a JSON
    object whose ``hash`` chains it to the line before, so a client can verify it)."""

    seq: int
    line: str


class AuditResult(msgspec.Struct, kw_only=True):
    events: list[AuditEvent]
    last_seq: int


class CheckResult(msgspec.Struct, kw_only=True):
    ok: bool
    database: str
    audit: str
    index: str
    bank: str = "ok"  # the bank journal against the bank cache


class ShutdownResult(msgspec.Struct, kw_only=True):
    stopping: bool


class BankInitResult(msgspec.Struct, kw_only=True):
    created: list[str]
    existing: list[str]


class BankProblem(msgspec.Struct, kw_only=True):
    file: str
    kind: Literal["empty", "no_header", "unreadable", "secret"]
    message: str


class BankValidateResult(msgspec.Struct, kw_only=True):
    valid: bool
    missing_required: list[str]
    missing_recommended: list[str]
    problems: list[BankProblem]
    empty: bool  # no bank file at all: offer to initialise


class BankReadResult(msgspec.Struct, kw_only=True):
    content: str
    last_modified: float


class BankWriteResult(msgspec.Struct, kw_only=True):
    """``ingested``: entries the lifecycle import added after a write to decisionLog.md or
    progress.md. ``sync``: when the change reaches the file: "scheduled" (the next periodic
    sync; readers through the daemon see it already), "immediate" (a large change, being written
    now) or "unchanged" (the file already held this text)."""

    success: bool
    path: str
    ingested: int = 0
    sync: Literal["scheduled", "immediate", "unchanged"] = "scheduled"


class BankOptimiseResult(msgspec.Struct, kw_only=True):
    """``changed``: bank files items leave; ``archived``: archive files they go to;
    ``applied``: whether they were changed (with --apply, and only when there was a plan)."""

    tokens_before: int
    tokens_after: int
    removed_tokens: int
    changed: list[str]
    archived: list[str]
    applied: bool


class BankSyncResult(msgspec.Struct, kw_only=True):
    """``pending``: changes still not on disk (a write failed and will be retried: see
    ``previous_errors``); ``writing``: the writer had not finished when the wait ended."""

    pending: int
    writing: bool


class BankFileInfo(msgspec.Struct, kw_only=True):
    name: str
    size: int
    last_modified: float


class BankListResult(msgspec.Struct, kw_only=True):
    files: list[BankFileInfo]


class BankInfo(msgspec.Struct, kw_only=True):
    """Where the bank is, the mode asked for, the files present in read order, their validation,
    and their size in tokens (``over_budget`` above the 5,000-token warning). ``reads``: the
    files the mode reads (their content is given); ``writes``: the files it may change (design §10
    §4 modes)."""

    path: str
    project_root: str
    mode: str | None
    files: list[str]
    validation: BankValidateResult
    tokens: int
    over_budget: bool
    reads: list[str] = []
    writes: list[str] = []


class CustomInstruction(msgspec.Struct, kw_only=True):
    """A rule file that applies (``.clinerules``, a mode file, a path-scoped rule): its path
    relative to the project, its text without frontmatter, the patterns it is scoped to."""

    source: str
    content: str
    paths: list[str] = []


class BankCacheInfo(msgspec.Struct, kw_only=True):
    """The daemon's cache of this bank (design §10): its key, files loaded, changes not on
    disk yet and the files they touch, the last sync (ISO 8601 UTC, "" before the first) and the
    sync interval."""

    key: str
    backend: Literal["memory"]
    files_cached: int
    pending_changes: int
    pending_files: list[str]
    last_sync: str
    sync_interval_s: float


class BankActivateResult(msgspec.Struct, kw_only=True):
    """``content``: file name → text, in read order."""

    bank_info: BankInfo
    content: dict[str, str]
    custom_instructions: list[CustomInstruction]
    cache: BankCacheInfo


BankOperation = Literal["append", "append_to_section", "replace_section", "complete_item"]


class BankItem(msgspec.Struct, kw_only=True):
    target_file: str
    operation_type: BankOperation
    content: str
    metadata: dict[str, str]


class BankProcessResult(msgspec.Struct, kw_only=True):
    """``source`` says who routed the items; ``fallback_reason`` why the LLM was not used when
    it was tried; ``applied`` the files written (with --apply)."""

    items: list[BankItem]
    source: Literal["llm", "rules"]
    fallback_reason: str | None = None
    applied: list[str] = []
    ingested: int = 0


class KnownProject(msgspec.Struct, kw_only=True):
    """A project: its name and path, whether memory-bank/ is present, and for one the daemon
    holds memory for (``held``) its entries by status, items waiting for review, sessions, the
    last capture (a session last recorded, begun or ended; epoch s) and the size of its data
    folder (database, WAL, index, audit log). A project that is not ``open`` is read without
    opening it (its database read-only). An older daemon sends name and path only."""

    name: str
    path: str
    held: bool = False
    open: bool = False
    bank: bool = False
    entries: EntryCounts | None = None
    awaiting_review: int | None = None
    sessions: int | None = None
    last_capture_at: float | None = None
    size_bytes: int | None = None


class ProjectsResult(msgspec.Struct, kw_only=True):
    projects: list[KnownProject]


class ProjectRemovedResult(msgspec.Struct, kw_only=True):
    """``archived_to``: where the project's memory went (kept, never deleted)."""

    path: str
    archived_to: str


class SegmentInfo(msgspec.Struct, kw_only=True):
    """The provenance of one instruction file's segment: its tier, path, the file that imported
    it, its size in tokens, the sha256 of its text and its frontmatter priority."""

    tier: Literal["global", "plugin", "project"]
    path: str
    imported_from: str | None
    tokens: int
    hash: str
    priority: int


class FileProblem(msgspec.Struct, kw_only=True):
    kind: Literal[
        "frontmatter", "depth", "fan_out", "cycle", "duplicate", "untrusted", "extension",
        "too_large", "too_many_files", "missing", "unreadable", "not_a_file", "bad_import",
    ]  # fmt: skip
    path: str
    message: str


class FilesListResult(msgspec.Struct, kw_only=True):
    files: list[SegmentInfo]
    disabled: list[str]
    problems: list[FileProblem]
    tokens: int
    # The file each save_memory target names (project, local, global), as the daemon sees them.
    targets: dict[str, str] = {}


class FilesShowResult(FilesListResult, kw_only=True):
    text: str


class SaveMemoryResult(msgspec.Struct, kw_only=True):
    diff: str
    written: bool
    path: str


class IngestResult(msgspec.Struct, kw_only=True):
    decisions: int
    completed: int
    duplicates: int


# --------------------------------------------------------------------------- requests


ResultT = TypeVar("ResultT", bound=msgspec.Struct)


class Request(msgspec.Struct, Generic[ResultT], tag_field="op", kw_only=True):
    """Base of every request. ``project`` is the client's working directory: the daemon resolves
    the project from it (design §3) and the request can touch only that project.

    A request type is declared once, here, and says everything the rest derives from it: its
    ``op`` tag, its fields, its help text (the docstring: the CLI and the MCP server show it),
    the type of its result (the type argument, kept in ``result_type``) and whether it changes
    memory (``mutates``: the daemon caches its reply by request id, so a retry is answered
    instead of applied twice)."""

    v: int = PROTOCOL_VERSION
    id: RequestId = 0
    project: PathText | None = None
    # The user named the project (``--project DIR``): a folder outside any repository is taken
    # as it is. Otherwise such a folder (a scratch directory, ``/``, the home folder) is no
    # project, so that running a command somewhere does not create memory there.
    project_explicit: bool = False

    result_type: ClassVar[type[msgspec.Struct]]
    mutates: ClassVar[bool] = False
    # Whether the request acts on its project (then the project must resolve before it runs).
    needs_project: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is Request:
                cls.result_type = get_args(base)[0]


class Hello(Request[HelloResult], tag="hello"):
    """Report the daemon's protocol and package versions."""

    needs_project = False

    client_version: str = ""


class StatusRequest(Request[StatusResult], tag="status"):
    """Show the daemon and the current project: entry counts, sessions, SLO, recent errors.

    With ``wait_ms``, while long work is under way (an index rebuild, a transcript backlog), the
    reply waits until it ends or ``wait_ms`` has passed, and then tells how far it is."""

    needs_project = False  # it says so when there is none

    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0


class Remember(Request[RememberResult], tag="remember"):
    """Store TEXT in project memory (confirmed, or pinned with --pin)."""

    mutates = True

    content: Annotated[str, msgspec.Meta(max_length=65_536)]
    category: Category | None = None
    section: Annotated[str, msgspec.Meta(max_length=64, pattern=NAME_PATTERN)] | None = None
    tags: Annotated[list[Tag], msgspec.Meta(max_length=32)] = []
    file_paths: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []
    pin: bool = False
    agent: AgentName | None = None


class Search(Request[SearchResult], tag="search"):
    """Search project memory (or the archive) and show scored results."""

    query: Annotated[str, msgspec.Meta(max_length=8192)]
    k: Limit = 5
    archive: bool = False
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []


Format = Literal["claude", "gemini", "codex", "plain"]


class Inject(Request[InjectResult], tag="inject"):
    """Build the token-budgeted memory payload for an agent's context."""

    format: Format = "plain"
    query: Annotated[str, msgspec.Meta(max_length=65_536)] = ""
    remaining_context: Annotated[int, msgspec.Meta(ge=0)] | None = None
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []
    session: Annotated[str, msgspec.Meta(max_length=256, pattern=NAME_PATTERN)] | None = None


class Budget(Request[BudgetResult], tag="budget"):
    """Show the project's token budget ceiling, or set it to TOKENS (0 restores the default)."""

    mutates = True

    tokens: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | None = None


class AliasAdd(Request[Alias], tag="alias_add"):
    """Add search synonyms for a term (merged with any the term already has)."""

    mutates = True

    term: Term
    synonyms: Annotated[list[Term], msgspec.Meta(min_length=1, max_length=64)]


class AliasList(Request[AliasListResult], tag="alias_list"):
    """List the search aliases in effect: the defaults and the project's own."""


class AliasRemove(Request[AliasListResult], tag="alias_remove"):
    """Remove a term's aliases (a default term is switched off for this project)."""

    mutates = True

    term: Term


Agent = Literal["claude", "codex", "gemini"]
HookKind = Literal["session_start", "prompt", "pre_compact", "turn_end", "session_end"]


class Hook(Request[HookResult], tag="hook"):
    """An agent hook event (design §12), already translated by ``memctl hook`` from the agent's own
    JSON: session start, a user prompt, a compaction about to happen, the end of a turn (a
    checkpoint), or the end of a session."""

    mutates = True  # a prompt's `remember:` writes; a session end finalizes

    agent: Agent
    event: HookKind
    session_id: Annotated[str, msgspec.Meta(max_length=256)] | None = None
    transcript_path: PathText | None = None
    prompt: Annotated[str, msgspec.Meta(max_length=262_144)] = ""
    source: Annotated[str, msgspec.Meta(max_length=64)] | None = (
        None  # startup|resume|clear|compact
    )
    remaining_context: Annotated[int, msgspec.Meta(ge=0)] | None = None
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []


class Auto(Request[AutoResult], tag="auto"):
    """Show whether memoryd learns from this project's transcripts, or turn it on or off."""

    mutates = True

    enabled: bool | None = None


class Preset(Request[AutoResult], tag="preset"):
    """Show or set how eagerly captured findings are promoted: conservative, balanced,
    aggressive."""

    mutates = True

    name: PresetName | None = None


class Episodes(Request[EpisodesResult], tag="episodes"):
    """List recent session episodes, optionally those whose text contains QUERY."""

    query: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    limit: Limit = 20


class ListEntries(Request[ListResult], tag="list"):
    """List entries, optionally by category and status."""

    category: Category | None = None
    status: Status | None = None
    archived: bool = False
    limit: Limit = 1000
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


class Forget(Request[ForgetResult], tag="forget"):
    """Delete an entry by id, or every entry matching a keyword (several need --yes)."""

    mutates = True

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    confirm: bool = False


class Pin(Request[PinResult], tag="pin"):
    """Pin an entry (by id or keyword) so it is always injected."""

    mutates = True

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class Unpin(Request[PinResult], tag="unpin"):
    """Unpin an entry (by id or keyword); it stays as confirmed."""

    mutates = True

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


# An import is one event, applied whole on the owner thread: 500 lines hold it ~50 ms, where
# 50,000 held every other client 4.4 s (issue 10). `memctl import` sends a file in requests of
# this many lines.
IMPORT_MAX_LINES = 500


class Import(Request[ImportResult], tag="import"):
    """Import JSONL lines: content, and optionally category, section, tags, file_paths,
    created_at, last_accessed_at, access_count, importance."""

    mutates = True

    lines: Annotated[list[str], msgspec.Meta(max_length=IMPORT_MAX_LINES)]
    first_line: Annotated[int, msgspec.Meta(ge=1)] = 1


class Compact(Request[CompactResult], tag="compact"):
    """Run compaction now (design §8): decay, TTL expiry and eviction to the archive, purge of old
    archives. With --dry-run only report what it would do."""

    mutates = True

    dry_run: bool = False


class Supersede(Request[SupersedeResult], tag="supersede"):
    """Replace an entry (by id or keyword) with TEXT: the old one is archived as superseded and
    linked to the new one, atomically."""

    mutates = True

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    content: Annotated[str, msgspec.Meta(max_length=65_536)]
    agent: AgentName | None = None


class Archive(Request[ArchiveResult], tag="archive"):
    """Archive entries (by id or keyword): kept and found with search --archive, never injected."""

    mutates = True

    targets: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=512)]],
        msgspec.Meta(min_length=1, max_length=1000),
    ]


class Unarchive(Request[ArchiveResult], tag="unarchive"):
    """Bring an archived entry (by id) back to active memory."""

    mutates = True

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class Conflicts(Request[ConflictsResult], tag="conflicts"):
    """List open conflicts between active entries, with both texts."""


class Resolve(Request[ResolveResult], tag="resolve"):
    """Resolve a conflict: --keep ID supersedes the other entry; --both keeps both (it was not a
    conflict)."""

    mutates = True

    conflict: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    keep: Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | None = None


class Export(Request[ExportResult], tag="export"):
    """Export confirmed and pinned entries as JSONL, one entry a line sorted by id, then the
    edges between them (--archived adds archived ones, --all every entry, candidates too)."""

    include_archived: bool = False
    include_all: bool = False


class AuditTail(Request[AuditResult], tag="audit_tail"):
    """Show audit events. With ``after_seq`` and ``wait_ms`` the daemon holds the request until a
    newer event exists or the wait ends (long poll, used by ``audit --follow``)."""

    n: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 20
    after_seq: Annotated[int, msgspec.Meta(ge=0)] | None = None
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0


class Check(Request[CheckResult], tag="check"):
    """Verify the project's database integrity, audit hash chain, search index (the same ids
    as the store) and bank journal (what a restart would apply again is exactly what is not on
    disk yet). With --repair, an index that differs is rebuilt from the store and a bank journal
    that differs written anew from the daemon's bank cache."""

    # With ``repair`` it rewrites the index: a retry is answered, not run again.
    mutates = True

    repair: bool = False


class Shutdown(Request[ShutdownResult], tag="shutdown"):
    """Stop the daemon gracefully."""

    needs_project = False


# The memory bank (design §10) and instruction files (design §11).
BankName = Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=NAME_PATTERN)]
BankText = Annotated[str, msgspec.Meta(max_length=512 * 1024)]
Mode = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=NAME_PATTERN)]


class BankInit(Request[BankInitResult], tag="bank_init"):
    """Create the memory bank's seven files (existing files are never overwritten), filling the
    project brief from BRIEF and the tech context and system patterns from the codebase."""

    mutates = True
    needs_project = False  # the memory-bank/ it creates makes the folder a project

    brief: Annotated[str, msgspec.Meta(max_length=65_536)] | None = None


class BankValidate(Request[BankValidateResult], tag="bank_validate"):
    """Report missing required and recommended bank files, empty files, files without a
    header."""


class BankRead(Request[BankReadResult], tag="bank_read"):
    """Show one memory bank file."""

    name: BankName


class BankWrite(Request[BankWriteResult], tag="bank_write"):
    """Create or replace a memory bank file with the text on stdin (decisionLog.md stays
    append-only)."""

    mutates = True

    name: BankName
    content: BankText
    mode: Mode | None = None


class BankUpdate(Request[BankWriteResult], tag="bank_update"):
    """Merge the sections on stdin into an existing memory bank file."""

    mutates = True

    name: BankName
    content: BankText
    mode: Mode | None = None


class BankList(Request[BankListResult], tag="bank_list"):
    """List the memory bank's files with size and modification time."""


class BankActivate(Request[BankActivateResult], tag="bank_activate"):
    """Everything a session starts with: the bank in read order, the custom instructions for
    the mode and files, and the bank's state."""

    mode: Mode | None = None
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []


class BankOptimise(Request[BankOptimiseResult], tag="bank_optimise"):
    """Bring a bank above 5,000 tokens back into the 4-8 K band by moving completed and old items
    to memory-bank/archive/ (design §10 Bank budget). Without ``apply`` only shows the plan."""

    mutates = True  # with --apply

    apply: bool = False
    mode: Mode | None = None


class BankSync(Request[BankSyncResult], tag="bank_sync"):
    """Write the memory bank's pending changes to disk now, and wait (up to ``wait_ms``) until
    they are written. Without it they are written at the next periodic sync."""

    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 10_000


class BankProcess(Request[BankProcessResult], tag="bank_process"):
    """Route free text on stdin to memory bank updates; with --apply, write them."""

    mutates = True  # with --apply

    content: Annotated[str, msgspec.Meta(max_length=262_144)]
    apply: bool = False
    mode: Mode | None = None


class Projects(Request[ProjectsResult], tag="projects"):
    """List the projects the daemon knows and those holding memory-bank/ under the configured
    roots."""

    needs_project = False


class ProjectsRemove(Request[ProjectRemovedResult], tag="projects_remove"):
    """Forget a project the daemon holds memory for: its memory (database, audit log, index) is
    moved aside under the data folder's removed/, never deleted, and it leaves the project
    list. Working there again starts a new, empty memory."""

    mutates = True
    needs_project = False  # PATH names it; it may be gone from disk already
    path: PathText


class FilesShow(Request[FilesShowResult], tag="files_show"):
    """Show the merged instruction files (MEMORY.md and its imports) with their provenance."""


class FilesList(Request[FilesListResult], tag="files_list"):
    """List the instruction files in effect, disabled ones and problems."""


class FilesRefresh(Request[FilesListResult], tag="files_refresh"):
    """Load the instruction files again from disk and list them."""


class SaveMemory(Request[SaveMemoryResult], tag="save_memory"):
    """Append TEXT under a section of an instruction file; shows the diff, and writes only with
    --yes."""

    mutates = True  # with --yes

    content: Annotated[str, msgspec.Meta(min_length=1, max_length=65_536)]
    section: Section | None = None
    target: Literal["project", "local", "global"] = "project"
    confirm: bool = False


class IngestLifecycle(Request[IngestResult], tag="ingest_lifecycle"):
    """Import new decisions of decisionLog.md and completed items of progress.md as entries."""

    mutates = True


# --------------------------------------------------------------------------- review
# What memory learned, shown to its user: accept, reject, reword (memctl review, the MCP server,
# the memory browser). Kept in one block.

ReviewId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
ReviewIds = Annotated[list[ReviewId], msgspec.Meta(min_length=1, max_length=1000)]


class ReviewItem(msgspec.Struct, kw_only=True):
    """Something memory learned that waits for a user's word: a ``candidate`` (an entry capture
    promoted, in quarantine) or a ``finding`` (captured, not promoted). ``signals`` and
    ``points`` say why it scored what it scored against the preset's ``threshold`` (``reason``
    says it in words); ``agent``, ``session_id``, ``transcript_path`` and ``line`` (1-based)
    where it was captured; ``created_at`` when it was promoted, or when its session began."""

    id: str
    kind: Literal["candidate", "finding"]
    content: str
    category: Category
    importance: float
    signals: list[str]
    points: int
    threshold: int
    reason: str
    rule_id: str | None = None
    agent: str | None = None
    session_id: str | None = None
    transcript_path: str | None = None
    line: int | None = None
    created_at: float | None = None


class ReviewResult(msgspec.Struct, kw_only=True):
    """Newest first; ``total``: how many wait in all."""

    items: list[ReviewItem]
    total: int
    preset: PresetName


class ReviewDecisionResult(msgspec.Struct, kw_only=True):
    """``ids``: the review items acted on; ``entries``: the entries they are now (confirmed by
    accept or edit; archived by reject)."""

    action: Literal["accepted", "rejected", "edited"]
    ids: list[str]
    entries: list[str]


class Review(Request[ReviewResult], tag="review"):
    """List what memory learned and waits for review (candidates and findings not promoted),
    newest first, with why each scored what it scored and where it was captured."""

    limit: Limit = 50


class ReviewAccept(Request[ReviewDecisionResult], tag="review_accept"):
    """Accept items waiting for review (by id or unique prefix): they become confirmed memory."""

    mutates = True

    ids: ReviewIds


class ReviewReject(Request[ReviewDecisionResult], tag="review_reject"):
    """Reject items waiting for review: archived with the reason, and never promoted again."""

    mutates = True

    ids: ReviewIds
    reason: Annotated[str, msgspec.Meta(max_length=1024)] = ""


class ReviewEdit(Request[ReviewDecisionResult], tag="review_edit"):
    """Reword an item waiting for review: TEXT becomes confirmed memory in its place."""

    mutates = True

    target: ReviewId  # the item's id (``id`` is the request's)
    content: Annotated[str, msgspec.Meta(max_length=65_536)]


# --------------------------------------------------------------------------- working memory, graph
# Working memory, the knowledge graph and notes (design §9): results and requests in one block.

Relation = Literal["depends_on", "enables", "replaces", "motivated_by", "contradicts"]
EntryRef = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]  # an id or a keyword
SessionId = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=NAME_PATTERN)]


class FocusResult(msgspec.Struct, kw_only=True):
    """The session's working memory after the change, in focus order; ``added`` the ids this
    request put there (the others were in focus already)."""

    session: str
    ids: list[str]
    added: list[str]


class ReleaseResult(msgspec.Struct, kw_only=True):
    sessions: list[str]  # the sessions whose working memory was cleared
    released: int  # entries let go, over those sessions


class Edge(msgspec.Struct, tag_field="type", tag="edge", frozen=True, kw_only=True):
    """A typed link of the knowledge graph (design §2): ``source`` relation ``target``; tagged,
    as it is also a line of an export and of the shared file."""

    source: str
    target: str
    relation: Relation
    created_at: float


class GraphNode(msgspec.Struct, kw_only=True):
    """An entry of a neighbourhood and its distance in edges from the entry asked about."""

    id: str
    content: str
    category: Category
    status: Status
    archived: bool
    depth: int


class GraphResult(msgspec.Struct, kw_only=True):
    """The entries within ``depth`` edges of one entry and the edges among them; ``truncated``
    when the neighbourhood had more nodes than one answer shows."""

    nodes: list[GraphNode]
    edges: list[Edge]
    truncated: bool = False


class Note(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    content: str
    created_at: float


class NotesResult(msgspec.Struct, kw_only=True):
    notes: list[Note]  # the pending notes, oldest first
    done: list[str] = []  # the ids this request marked done


class Focus(Request[FocusResult], tag="focus"):
    """Put entries (by id or keyword) in a session's working memory: injected on every prompt of
    that session and again after a compaction, until released or the session ends."""

    mutates = True

    session: SessionId
    targets: Annotated[list[EntryRef], msgspec.Meta(min_length=1, max_length=50)]


class Release(Request[ReleaseResult], tag="release"):
    """Clear a session's working memory (without a session: every session's in this project)."""

    mutates = True

    session: SessionId | None = None


class Connect(Request[Edge], tag="connect"):
    """Link two entries (by id or keyword) in the knowledge graph: SOURCE depends_on, enables,
    replaces, motivated_by or contradicts TARGET."""

    mutates = True

    source: EntryRef
    target: EntryRef
    relation: Relation


class Graph(Request[GraphResult], tag="graph"):
    """Show an entry's neighbourhood in the knowledge graph: the entries within DEPTH edges of
    it (either direction) and the edges among them."""

    target: EntryRef
    depth: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1


class NoteAdd(Request[Note], tag="note"):
    """Keep a quick note for later (design §9, `/note`): kept across sessions until marked done,
    never injected."""

    mutates = True

    content: Annotated[str, msgspec.Meta(min_length=1, max_length=65_536)]


class Notes(Request[NotesResult], tag="notes"):
    """List the pending notes, oldest first; with --done ID… mark those done first."""

    mutates = True  # with --done

    done: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
        msgspec.Meta(max_length=1000),
    ] = []


# --------------------------------------------------------------------------- sharing through git
# (design §3: `.memoryd/memory.jsonl`, merged with `merge=union`)


class ShareResult(msgspec.Struct, kw_only=True):
    enabled: bool
    setting: Literal["on", "off", "auto"]  # auto: on while the project holds the shared file
    file: str
    exists: bool
    entries: int = 0  # lines of the file as last written or read: entries, tombstones, edges
    tombstones: int = 0
    edges: int = 0
    pending: bool = False  # a change not written to the file yet
    last_written_at: float | None = None
    last_merged_at: float | None = None
    error: str | None = None  # the last write's failure, if it failed


class Share(Request[ShareResult], tag="share"):
    """Share this project's memory through git: on keeps .memoryd/memory.jsonl (confirmed and
    pinned entries, edges, tombstones) and merges it after a pull; off stops; alone: status."""

    mutates = True

    state: Literal["on", "off"] | None = None


# --------------------------------------------------------------------------- the memory browser
# What `memctl ui` needs that no other operation serves: one entry with its history, and the
# daemon's latency samples (issue 18).


class ShowResult(msgspec.Struct, kw_only=True):
    """An entry, the audit events that name it (oldest first: the newest 200 of them among the
    log's newest 20,000 events), and its edges; ``line``: the transcript line (1-based) it was
    captured from, when it came from a transcript that can still be read."""

    entry: Entry
    history: list[AuditEvent]
    edges: list[Edge]
    line: int | None = None


class Show(Request[ShowResult], tag="show"):
    """Show one entry (by id or keyword): its content, provenance, its history from the audit
    log and its edges."""

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class SessionFindingLine(msgspec.Struct, kw_only=True):
    """A finding of a session beside the transcript line it came from: ``line`` (1-based),
    ``role`` of the message written there, and ``text``: what the line says as its agent's
    parser reads it (the raw line when it parses to nothing), redacted and cut to
    ``SESSION_LINE_CHARS`` (``cut``). ``promoted``: it became an entry."""

    id: str
    content: str
    category: Category
    rule_id: str | None = None
    line: int | None = None
    role: str | None = None
    text: str | None = None
    cut: bool = False
    promoted: bool = False


class SessionResult(msgspec.Struct, kw_only=True):
    """A captured session: its agent and transcript, when it was recorded and closed, and its
    findings in transcript order (the first ``SESSION_FINDINGS`` of ``total``) each with its
    line; ``unreadable`` says why lines could not be read (the file moved, a .json document)."""

    session_id: str
    agent: str
    transcript_path: str
    created_at: float
    finalized_at: float | None
    findings: list[SessionFindingLine]
    total: int
    unreadable: str | None = None


SESSION_FINDINGS = 200  # findings shown with their lines, at most
SESSION_LINE_CHARS = 2000  # of each transcript line's text


class SessionShow(Request[SessionResult], tag="session"):
    """Show a captured session (by its full id): its findings beside the transcript
    lines they came from, each line read by the daemon, redacted and cut short."""

    session_id: SessionId


class LatencySample(msgspec.Struct, kw_only=True):
    """One served request: when (UTC epoch seconds), which operation, how long (ms)."""

    at: float
    op: str
    ms: float


class LatencyWindow(msgspec.Struct, kw_only=True):
    """One operation's latency over a window ("hour" or "day") of the ring."""

    op: str
    window: Literal["hour", "day"]
    count: int
    p50_ms: float | None
    p95_ms: float | None


class DegradeEvent(msgspec.Struct, kw_only=True):
    """Retrieval switched to its cheaper mode (``degraded``) or back, at ``at``."""

    at: float
    degraded: bool
    p95_ms: float


class HealthResult(msgspec.Struct, kw_only=True):
    """The daemon's health: latency per operation over the last hour and day against the SLO
    (``slo_ms``: retrieval degrades above it), the newest samples, degrade events, capture since
    start, resident memory, the project's index size (None outside a project), and how full the
    ring is."""

    now: float
    uptime_s: float
    slo_ms: float
    windows: list[LatencyWindow]
    samples: list[LatencySample]
    degrade_events: list[DegradeEvent]
    slo: SloInfo
    capture: CaptureInfo
    rss_bytes: int | None
    index_documents: int | None
    ring_size: int
    ring_capacity: int


class Health(Request[HealthResult], tag="health"):
    """Show the daemon's health: hook, inject and search latency p50/p95 over the last hour and
    day against the SLO, degrade events, capture throughput, memory and index size."""

    needs_project = False  # the daemon's; the project's index size when there is one

    samples: Annotated[int, msgspec.Meta(ge=0, le=5000)] = 300


def _request_types(base: type[Request[Any]] = Request) -> tuple[type[Request[Any]], ...]:
    """Every concrete request type: each subclass that declares an ``op`` tag."""
    found: list[type[Request[Any]]] = []
    for sub in base.__subclasses__():
        # msgspec gives a class without its own tag its class name as tag; every operation
        # names its own (snake_case), so a shared intermediate base is not taken for one.
        if sub.__struct_config__.tag not in (None, sub.__name__):
            found.append(sub)
        found.extend(_request_types(sub))
    return tuple(found)


REQUEST_TYPES: tuple[type[Request[Any]], ...] = _request_types()
MUTATING: frozenset[type[Request[Any]]] = frozenset(t for t in REQUEST_TYPES if t.mutates)


class Envelope(msgspec.Struct):
    """Just enough of a request to answer it when the rest does not decode. Fields stay raw so
    that a hostile value (deep nesting, bad UTF-8) elsewhere cannot stop us reading the id."""

    id: msgspec.Raw = msgspec.Raw(b"\xc0")
    v: msgspec.Raw = msgspec.Raw(b"\xc0")
    op: msgspec.Raw = msgspec.Raw(b"\xc0")


# --------------------------------------------------------------------------- replies

ReplyId = int | str | None  # None: the request's own id could not be read


class Ok(msgspec.Struct, tag_field="status", tag="ok", kw_only=True):
    """A result, still encoded: the client decodes it into the request's ``result_type``
    (``result_of``), so each reply is checked against the type its request promised."""

    id: ReplyId
    result: msgspec.Raw
    previous_errors: list[BackgroundError] = []


class Error(msgspec.Struct, tag_field="status", tag="error", kw_only=True):
    id: ReplyId
    code: ErrorCode
    message: str
    previous_errors: list[BackgroundError] = []


Reply = Ok | Error

_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_reply_decoder: msgspec.msgpack.Decoder[Reply] = msgspec.msgpack.Decoder(Reply)


@functools.cache
def _request_decoder() -> msgspec.msgpack.Decoder[Request[Any]]:
    """Built on first use: it resolves every request type, which only the daemon needs; each
    ``memctl`` start (a hook's latency) would pay for it (1-2 ms with cached bytecode, more
    without)."""
    any_request: Any = Union[REQUEST_TYPES]  # noqa: UP007 - built at run time from a tuple
    return msgspec.msgpack.Decoder(any_request)


@functools.cache
def _result_decoder(kind: type[ResultT]) -> msgspec.msgpack.Decoder[ResultT]:
    return msgspec.msgpack.Decoder(kind)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def ok(request_id: ReplyId, result: msgspec.Struct) -> Ok:
    """The reply carrying ``result`` (encoded once, here)."""
    return Ok(id=request_id, result=msgspec.Raw(_encoder.encode(result)))


def result_of(request: Request[ResultT], reply: Ok) -> ResultT:
    """The result of ``reply``, decoded as the type ``request`` promises; raises
    ``msgspec.ValidationError`` when the daemon sent something else."""
    decoded: ResultT = _result_decoder(type(request).result_type).decode(reply.result)
    return decoded


def build_request_decoder() -> None:
    """For the daemon, at start: so that its first request does not pay for it."""
    _request_decoder()


def explain(exc: msgspec.ValidationError) -> str:
    """A validation error in the user's words: a refused name says why, not which regex."""
    return str(exc).replace(f"Expected `str` matching regex {NAME_PATTERN!r}", NAME_RULE)


def decode_request(frame: bytes) -> Request[Any]:
    """Decode a request frame; raises ``msgspec.DecodeError`` / ``ValidationError`` when invalid."""
    return _request_decoder().decode(frame)


_id_decoder: msgspec.msgpack.Decoder[int | str | None] = msgspec.msgpack.Decoder(int | str | None)


def decode_envelope(frame: bytes) -> tuple[int | str | None, str | None]:
    """Best effort (id, op) of a request that failed to decode; (None, None) when hopeless."""
    try:
        env = _envelope_decoder.decode(frame)
    except Exception:  # any decode failure: recursion, bad UTF-8, not a map
        return None, None
    return _small_scalar(env.id), _small_scalar(env.op, str)


def _small_scalar(raw: msgspec.Raw, kind: type = object) -> Any:
    if len(raw) > 256:
        return None
    try:
        value = _id_decoder.decode(raw)
    except Exception:
        return None
    return value if isinstance(value, kind) else None


def decode_reply(frame: bytes) -> Reply:
    return _reply_decoder.decode(frame)
