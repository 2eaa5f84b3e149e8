"""The memoryd wire schema: the one contract between the daemon and every client.

Transport: a ZeroMQ ROUTER on the daemon side; one frame per message after the routing
envelope, encoded as MessagePack by msgspec. Requests are a tagged union on ``op``; every request
carries ``v`` (the protocol version, which moves separately from the package version) and ``id``
(echoed in the reply). Replies are ``Ok`` or ``Error``, tagged on ``status``.

Compatibility rules: both sides ignore unknown fields, so adding an optional field is not a
breaking change; removing or retyping one is, and bumps ``PROTOCOL_VERSION``.

The daemon imports this module; this module imports nothing of the daemon.
"""

from __future__ import annotations

import enum
import functools
from typing import Annotated, Any, Literal

import msgspec

PROTOCOL_VERSION = 1
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

RequestId = (
    Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | Annotated[str, msgspec.Meta(max_length=128)]
)
Limit = Annotated[int, msgspec.Meta(ge=1, le=10_000)]
PathText = Annotated[str, msgspec.Meta(max_length=4096)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


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
    """Where an entry came from (SPEC §2)."""

    kind: SourceKind
    agent: str | None = None
    session_id: str | None = None
    transcript_path: str | None = None
    offset: int | None = None
    rule_id: str | None = None


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One atom of project memory (SPEC §2). All times are UTC epoch seconds."""

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
    """A background failure not yet reported to any client (seed 002 error history)."""

    timestamp: float
    description: str
    severity: Literal["info", "warning", "error"] = "error"


# --------------------------------------------------------------------------- requests


class Request(msgspec.Struct, tag_field="op", kw_only=True):
    """Base of every request. ``project`` is the client's working directory: the daemon resolves
    the project from it (SPEC §3) and the request can touch only that project."""

    v: int = PROTOCOL_VERSION
    id: RequestId = 0
    project: PathText | None = None


class Hello(Request, tag="hello"):
    """Report the daemon's protocol and package versions."""

    client_version: str = ""


class StatusRequest(Request, tag="status"):
    """Show the daemon and the current project: entry counts, sessions, SLO, recent errors."""


class Remember(Request, tag="remember"):
    """Store TEXT in project memory (confirmed, or pinned with --pin)."""

    content: Annotated[str, msgspec.Meta(max_length=65_536)]
    category: Category | None = None
    section: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    tags: Annotated[list[Tag], msgspec.Meta(max_length=32)] = []
    file_paths: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []
    pin: bool = False


class Search(Request, tag="search"):
    """Search project memory (or the archive) and show scored results."""

    query: Annotated[str, msgspec.Meta(max_length=8192)]
    k: Limit = 5
    archive: bool = False
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []


Format = Literal["claude", "gemini", "codex", "plain"]


class Inject(Request, tag="inject"):
    """Build the token-budgeted memory payload for an agent's context."""

    format: Format = "plain"
    query: Annotated[str, msgspec.Meta(max_length=65_536)] = ""
    remaining_context: Annotated[int, msgspec.Meta(ge=0)] | None = None
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []
    session: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class Budget(Request, tag="budget"):
    """Show the project's token budget ceiling, or set it to TOKENS (0 restores the default)."""

    tokens: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | None = None


class AliasAdd(Request, tag="alias_add"):
    """Add search synonyms for a term (merged with any the term already has)."""

    term: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    synonyms: Annotated[
        list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
        msgspec.Meta(min_length=1, max_length=64),
    ]


class AliasList(Request, tag="alias_list"):
    """List the search aliases in effect: the defaults and the project's own."""


class AliasRemove(Request, tag="alias_remove"):
    """Remove a term's aliases (a default term is switched off for this project)."""

    term: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


Agent = Literal["claude", "codex", "gemini"]
HookKind = Literal["session_start", "prompt", "pre_compact", "session_end"]


class Hook(Request, tag="hook"):
    """An agent hook event (SPEC §12), already translated by ``memctl hook`` from the agent's own
    JSON: session start, a user prompt, a compaction about to happen, or the end of a session."""

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


class Auto(Request, tag="auto"):
    """Show whether memoryd learns from this project's transcripts, or turn it on or off."""

    enabled: bool | None = None


class Preset(Request, tag="preset"):
    """Show or set how eagerly captured findings are promoted: conservative, balanced,
    aggressive."""

    name: Literal["conservative", "balanced", "aggressive"] | None = None


class Episodes(Request, tag="episodes"):
    """List recent session episodes, optionally those whose text contains QUERY."""

    query: Annotated[str, msgspec.Meta(max_length=1024)] = ""
    limit: Limit = 20


class ListEntries(Request, tag="list"):
    """List entries, optionally by category and status."""

    category: Category | None = None
    status: Status | None = None
    archived: bool = False
    limit: Limit = 1000
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0


class Forget(Request, tag="forget"):
    """Delete an entry by id, or every entry matching a keyword (several need --yes)."""

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    confirm: bool = False


class Pin(Request, tag="pin"):
    """Pin an entry (by id or keyword) so it is always injected."""

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class Unpin(Request, tag="unpin"):
    """Unpin an entry (by id or keyword); it stays as confirmed."""

    target: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class Import(Request, tag="import"):
    """Import JSONL lines: content, and optionally category, section, tags, file_paths,
    created_at."""

    lines: Annotated[list[str], msgspec.Meta(max_length=100_000)]
    first_line: Annotated[int, msgspec.Meta(ge=1)] = 1


class Export(Request, tag="export"):
    """Export active entries as JSONL, one entry a line, sorted by id."""

    include_archived: bool = False


class AuditTail(Request, tag="audit_tail"):
    """Show audit events. With ``after_seq`` and ``wait_ms`` the daemon holds the request until a
    newer event exists or the wait ends (long poll, used by ``audit --follow``)."""

    n: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 20
    after_seq: Annotated[int, msgspec.Meta(ge=0)] | None = None
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0


class Check(Request, tag="check"):
    """Verify the project's database integrity, audit hash chain and search index."""


class Shutdown(Request, tag="shutdown"):
    """Stop the daemon gracefully."""


# The memory bank (SPEC §10) and instruction files (SPEC §11).
BankName = Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
BankText = Annotated[str, msgspec.Meta(max_length=512 * 1024)]
Mode = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class BankInit(Request, tag="bank_init"):
    """Create the memory bank's seven files (existing files are never overwritten), filling the
    project brief from BRIEF and the tech context and system patterns from the codebase."""

    brief: Annotated[str, msgspec.Meta(max_length=65_536)] | None = None


class BankValidate(Request, tag="bank_validate"):
    """Report missing required and recommended bank files, empty files, files without a
    header."""


class BankRead(Request, tag="bank_read"):
    """Show one memory bank file."""

    name: BankName


class BankWrite(Request, tag="bank_write"):
    """Create or replace a memory bank file with the text on stdin (decisionLog.md stays
    append-only)."""

    name: BankName
    content: BankText
    mode: Mode | None = None


class BankUpdate(Request, tag="bank_update"):
    """Merge the sections on stdin into an existing memory bank file."""

    name: BankName
    content: BankText
    mode: Mode | None = None


class BankList(Request, tag="bank_list"):
    """List the memory bank's files with size and modification time."""


class BankActivate(Request, tag="bank_activate"):
    """Everything a session starts with: the bank in read order, the custom instructions for
    the mode and files, and the bank's state."""

    mode: Mode | None = None
    files: Annotated[list[PathText], msgspec.Meta(max_length=64)] = []


class BankOptimise(Request, tag="bank_optimise"):
    """Bring a bank above 5,000 tokens back into the 4-8 K band by moving completed and old items
    to memory-bank/archive/ (SPEC §10 Bank budget). Without ``apply`` only shows the plan."""

    apply: bool = False
    mode: Mode | None = None


class BankSync(Request, tag="bank_sync"):
    """Write the memory bank's pending changes to disk now, and wait (up to ``wait_ms``) until
    they are written. Without it they are written at the next periodic sync."""

    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 10_000


class BankProcess(Request, tag="bank_process"):
    """Route free text on stdin to memory bank updates; with --apply, write them."""

    content: Annotated[str, msgspec.Meta(max_length=262_144)]
    apply: bool = False
    mode: Mode | None = None


class Projects(Request, tag="projects"):
    """List the projects the daemon knows and those holding memory-bank/ under the configured
    roots."""


class FilesShow(Request, tag="files_show"):
    """Show the merged instruction files (MEMORY.md and its imports) with their provenance."""


class FilesList(Request, tag="files_list"):
    """List the instruction files in effect, disabled ones and problems."""


class FilesRefresh(Request, tag="files_refresh"):
    """Load the instruction files again from disk and list them."""


class SaveMemory(Request, tag="save_memory"):
    """Append TEXT under a section of an instruction file; shows the diff, and writes only with
    --yes."""

    content: Annotated[str, msgspec.Meta(min_length=1, max_length=65_536)]
    section: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    target: Literal["project", "local", "global"] = "project"
    confirm: bool = False


class IngestLifecycle(Request, tag="ingest_lifecycle"):
    """Import new decisions of decisionLog.md and completed items of progress.md as entries."""


AnyRequest = (
    Hello
    | StatusRequest
    | Remember
    | Search
    | ListEntries
    | Forget
    | Pin
    | Unpin
    | Import
    | Export
    | AuditTail
    | Check
    | Shutdown
    | Inject
    | Budget
    | AliasAdd
    | AliasList
    | AliasRemove
    | Hook
    | Auto
    | Preset
    | Episodes
    | BankInit
    | BankValidate
    | BankRead
    | BankWrite
    | BankUpdate
    | BankList
    | BankActivate
    | BankProcess
    | BankSync
    | BankOptimise
    | Projects
    | FilesShow
    | FilesList
    | FilesRefresh
    | SaveMemory
    | IngestLifecycle
)
REQUEST_TYPES: tuple[type[Request], ...] = (
    Hello,
    StatusRequest,
    Remember,
    Search,
    ListEntries,
    Forget,
    Pin,
    Unpin,
    Import,
    Export,
    AuditTail,
    Check,
    Shutdown,
    Inject,
    Budget,
    AliasAdd,
    AliasList,
    AliasRemove,
    Hook,
    Auto,
    Preset,
    Episodes,
    BankInit,
    BankValidate,
    BankRead,
    BankWrite,
    BankUpdate,
    BankList,
    BankActivate,
    BankProcess,
    BankSync,
    BankOptimise,
    Projects,
    FilesShow,
    FilesList,
    FilesRefresh,
    SaveMemory,
    IngestLifecycle,
)


class Envelope(msgspec.Struct):
    """Just enough of a request to answer it when the rest does not decode. Fields stay raw so
    that a hostile value (deep nesting, bad UTF-8) elsewhere cannot stop us reading the id."""

    id: msgspec.Raw = msgspec.Raw(b"\xc0")
    v: msgspec.Raw = msgspec.Raw(b"\xc0")
    op: msgspec.Raw = msgspec.Raw(b"\xc0")


# --------------------------------------------------------------------------- results


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


class ProjectInfo(msgspec.Struct, kw_only=True):
    root: str
    slug: str
    entries: EntryCounts
    sessions: int
    index: dict[str, Any]


class SloInfo(msgspec.Struct, kw_only=True):
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    degraded: bool = False
    samples: int = 0


class StatusResult(msgspec.Struct, kw_only=True):
    daemon: DaemonInfo
    project: ProjectInfo | None
    slo: SloInfo
    errors: list[BackgroundError]
    capture: dict[str, Any] = {}


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
    entries a ``remember:`` in the prompt created; ``finalized`` whether a session was closed."""

    text: str = ""
    entries: list[str] = []
    remembered: list[str] = []
    finalized: bool = False


class AutoResult(msgspec.Struct, kw_only=True):
    enabled: bool
    preset: str


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


class RejectedLine(msgspec.Struct, kw_only=True):
    line: int
    reason: str


class ImportResult(msgspec.Struct, kw_only=True):
    imported: int
    duplicates: int
    rejected: list[RejectedLine]


class ExportResult(msgspec.Struct, kw_only=True):
    entries: list[Entry]


class AuditResult(msgspec.Struct, kw_only=True):
    events: list[dict[str, Any]]
    last_seq: int


class CheckResult(msgspec.Struct, kw_only=True):
    ok: bool
    database: str
    audit: str
    index: str


class ShutdownResult(msgspec.Struct, kw_only=True):
    stopping: bool


class BankInitResult(msgspec.Struct, kw_only=True):
    created: list[str]
    existing: list[str]


class BankProblem(msgspec.Struct, kw_only=True):
    file: str
    kind: str
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
    sync: str = "scheduled"


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


class BankActivateResult(msgspec.Struct, kw_only=True):
    """``bank_info``: path, project_root, mode, files, validation, tokens, over_budget.
    ``custom_instructions``: source, content, paths of each rule that applies."""

    bank_info: dict[str, Any]
    content: dict[str, str]
    custom_instructions: list[dict[str, Any]]
    cache: dict[str, str]


class BankItem(msgspec.Struct, kw_only=True):
    target_file: str
    operation_type: str
    content: str
    metadata: dict[str, str]


class BankProcessResult(msgspec.Struct, kw_only=True):
    """``source`` is "llm" or "rules"; ``fallback_reason`` says why the LLM was not used when it
    was tried; ``applied`` the files written (with --apply)."""

    items: list[BankItem]
    source: str
    fallback_reason: str | None = None
    applied: list[str] = []
    ingested: int = 0


class KnownProject(msgspec.Struct, kw_only=True):
    name: str
    path: str


class ProjectsResult(msgspec.Struct, kw_only=True):
    projects: list[KnownProject]


class FilesListResult(msgspec.Struct, kw_only=True):
    """``files``: the provenance of each segment (tier, path, imported_from, tokens, hash, …)."""

    files: list[dict[str, Any]]
    disabled: list[str]
    problems: list[dict[str, Any]]
    tokens: int


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


# --------------------------------------------------------------------------- replies


class Ok(msgspec.Struct, tag_field="status", tag="ok", kw_only=True):
    id: Any
    result: Any
    previous_errors: list[BackgroundError] = []


class Error(msgspec.Struct, tag_field="status", tag="error", kw_only=True):
    id: Any
    code: ErrorCode
    message: str
    previous_errors: list[BackgroundError] = []


Reply = Ok | Error

_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_reply_decoder: msgspec.msgpack.Decoder[Reply] = msgspec.msgpack.Decoder(Reply)


@functools.cache
def _request_decoder() -> msgspec.msgpack.Decoder[AnyRequest]:
    """Built on first use: it resolves every request type, which only the daemon needs; each
    ``memctl`` start (a hook's latency) would pay for it (1-2 ms with cached bytecode, more
    without)."""
    return msgspec.msgpack.Decoder(AnyRequest)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def build_request_decoder() -> None:
    """For the daemon, at start: so that its first request does not pay for it."""
    _request_decoder()


def decode_request(frame: bytes) -> AnyRequest:
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
