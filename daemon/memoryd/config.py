"""Configuration: CLI > environment (``MEMORYD_``, nested with ``__``) > TOML file > defaults.

Only the entry points (``memoryd.cli``, ``memoryd.app``) read configuration; everything else is
handed the part it needs. ``config.example.toml`` is rendered from this model by
``render_example()`` and a test keeps the two equal.

The model is pydantic's; pydantic-settings reads the environment and the file, and is imported
only when there is one to read (``load``): it costs ~50 ms and ~7 MB of the daemon's start-up,
which a daemon run with its defaults (the usual user service) does not pay.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from memoryd.core import instructions as core_instructions
from memoryd.core.capture.rules import load_user_rules
from memoryd.core.recall import budget
from memoryd.core.recall.budget import DEFAULT_CEILING
from memoryd.core.recall.retrieval import ACCESS_CAP, RetrievalConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    max_message_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Largest request frame accepted; larger frames are dropped by ZeroMQ.",
    )
    reply_cache_size: int = Field(
        256,
        ge=0,
        le=100_000,
        description="Replies remembered per request id, so a client's retry is not applied twice.",
    )
    readers: int = Field(
        0,
        ge=0,
        le=32,
        description="Threads that serve search, inject and the hook's payload off the owner "
        "thread when reads overlap, each with its own database connection; 0: the owner serves "
        "them. Off by default: on 2 busy cores they cost throughput (bench/retrieval.py).",
    )


class StorageSettings(_Section):
    data_dir: str = Field(
        "", description="Where project data lives; empty means $XDG_DATA_HOME/memoryd."
    )
    synchronous: Literal["FULL", "NORMAL"] = Field(
        "FULL",
        description="SQLite synchronous mode; FULL survives power loss, NORMAL only crashes.",
    )
    audit_max_events: int = Field(
        5000, ge=10, description="Audit events kept per project before trimming."
    )
    audit_trim_to: int = Field(4000, ge=5, description="Audit events kept after a trim.")
    index_heap_mb: int = Field(
        16,
        ge=15,  # tantivy refuses a writer under 15 MB (then no index could be written at all)
        le=1024,
        description="Memory for the search index writer, per project (MB).",
    )

    @model_validator(mode="after")
    def _trim_below_max(self) -> StorageSettings:
        if self.audit_trim_to >= self.audit_max_events:
            raise ValueError("storage.audit_trim_to must be below storage.audit_max_events")
        return self


class JobsSettings(_Section):
    capture_idle_check_s: float = Field(
        60.0, gt=0, le=3600, description="How often quiet sessions are looked for (s)."
    )
    quarantine_check_s: float = Field(
        3600.0, gt=0, le=86400, description="How often candidates past 24 h are reviewed (s)."
    )
    index_commit_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How often pending index changes are committed when no search forces it (s).",
    )
    compaction_s: float = Field(
        3600.0,
        gt=0,
        le=7 * 86400,
        description="How often open projects are compacted and a bank over budget optimised (s).",
    )


_CORE_RETRIEVAL = RetrievalConfig()


class RetrievalSettings(_Section):
    """design §5 retrieval and budget defaults; ``to_core`` hands them to the pure pipeline."""

    category_weights: dict[str, float] = Field(
        _CORE_RETRIEVAL.category_weights, description="Score multiplier per category."
    )
    status_boosts: dict[str, float] = Field(
        _CORE_RETRIEVAL.status_boosts, description="Score multiplier per status."
    )
    recency_amplitude: float = Field(
        _CORE_RETRIEVAL.recency_amplitude, ge=0, description="Recency: 1 + A × 2^(-days/half-life)."
    )
    recency_half_life_days: float = Field(
        _CORE_RETRIEVAL.recency_half_life_days, gt=0, description="Recency half-life (days)."
    )
    access_boost_per_access: float = Field(
        _CORE_RETRIEVAL.access_boost_per_access, ge=0, description="Score bonus per past access."
    )
    access_boost_max_count: int = Field(
        _CORE_RETRIEVAL.access_boost_max_count,
        ge=0,
        lt=ACCESS_CAP,
        description="Accesses counted at most.",
    )
    file_affinity: float = Field(
        _CORE_RETRIEVAL.file_affinity, ge=1, description="Bonus for entries near an active file."
    )
    max_candidate_scan: int = Field(
        _CORE_RETRIEVAL.max_candidate_scan, ge=1, le=100_000, description="BM25 candidates scored."
    )
    top_k: int = Field(_CORE_RETRIEVAL.top_k, ge=1, description="Results kept after scoring.")
    relative_threshold: float = Field(
        _CORE_RETRIEVAL.relative_threshold,
        ge=0,
        le=1,
        description="Drop results below this × best.",
    )
    search_relative_threshold: float = Field(
        _CORE_RETRIEVAL.search_relative_threshold,
        ge=0,
        le=1,
        description="Drop search results below this × best (inject uses relative_threshold).",
    )
    neighbour_window_s: float = Field(
        _CORE_RETRIEVAL.neighbour_window_s,
        ge=0,
        description="Entries written this close to a strong hit rank near it (s; 0: off).",
    )
    neighbour_anchors: int = Field(
        _CORE_RETRIEVAL.neighbour_anchors, ge=1, description="First results whose neighbours rise."
    )
    neighbour_share: float = Field(
        _CORE_RETRIEVAL.neighbour_share,
        ge=0,
        le=1,
        description="A neighbour ranks at least this × its strong hit's score.",
    )
    max_per_session: int = Field(
        _CORE_RETRIEVAL.max_per_session,
        ge=1,
        description="Results from one source session, at most.",
    )
    inject_top_n: int = Field(
        _CORE_RETRIEVAL.inject_top_n, ge=0, description="Retrieved entries injected, at most."
    )
    inject_min_shared: int = Field(
        _CORE_RETRIEVAL.inject_min_shared,
        ge=0,
        description="Query words an injected entry must share (fewer when the query has fewer).",
    )
    max_pinned: int = Field(
        _CORE_RETRIEVAL.max_pinned, ge=0, description="Pinned entries injected."
    )
    fuzzy_min_length: int = Field(
        _CORE_RETRIEVAL.fuzzy_min_length,
        ge=1,
        description="Terms this long also match at edit distance 1.",
    )
    prefix_min_length: int = Field(
        _CORE_RETRIEVAL.prefix_min_length,
        ge=1,
        description="Terms this long also match as prefixes.",
    )
    alias_weight: float = Field(
        _CORE_RETRIEVAL.alias_weight, ge=0, description="Weight of alias terms against query words."
    )
    date_boost: float = Field(
        _CORE_RETRIEVAL.date_boost,
        ge=0,
        description="Weight of query words naming the day an entry was written (0: off).",
    )
    budget_ceiling: int = Field(
        DEFAULT_CEILING,
        ge=0,
        description="Token ceiling of a payload (per project: memctl budget).",
    )

    def to_core(self) -> RetrievalConfig:
        return RetrievalConfig(**self.model_dump(exclude={"budget_ceiling"}))


class SloSettings(_Section):
    window: int = Field(
        100, ge=5, le=100_000, description="Retrieval latencies in the rolling window."
    )
    degrade_above_ms: float = Field(300.0, gt=0, description="p95 above this degrades retrieval.")
    recover_below_ms: float = Field(200.0, gt=0, description="p95 below this restores it.")
    min_samples: int = Field(5, ge=1, description="No decision with fewer samples than this.")


class CaptureRoot(_Section):
    path: str
    agent: Literal["claude", "codex", "gemini"]


_DEFAULT_ROOTS = [
    CaptureRoot(path="~/.claude/projects", agent="claude"),
    CaptureRoot(path="~/.codex/sessions", agent="codex"),
    CaptureRoot(path="~/.gemini/tmp", agent="gemini"),
]


class CaptureSettings(_Section):
    enabled: bool = Field(True, description="Watch agent transcripts and learn from them.")
    roots: list[CaptureRoot] = Field(
        _DEFAULT_ROOTS, description="Transcript folders to watch, each with its agent."
    )
    debounce_s: float = Field(0.25, gt=0, le=60, description="Quiet time before a file is read.")
    backfill_days: float = Field(
        14, ge=0, description="At start, read transcripts changed within this many days."
    )
    idle_minutes: float = Field(
        30, gt=0, description="A session with no new line for this long is finalized."
    )
    hook_wait_s: float = Field(
        1.0,
        gt=0,
        le=60,
        description="A turn's or session's end hook waits this long for its transcript to be "
        "read, then is answered and the reading goes on (keep it under the hook's own budget: "
        "memctl hook --timeout, 1.5 s).",
    )
    checkpoint_every: int = Field(10, ge=1, description="Messages between session checkpoints.")
    preset: Literal["conservative", "balanced", "aggressive"] = Field(
        "balanced", description="Promotion preset for projects that chose none (memctl config)."
    )
    rules: list[dict[str, Any]] = Field(
        [], description="Extra extraction rules, in the schema of the built-in ones."
    )

    @field_validator("rules")
    @classmethod
    def _rules_load(cls, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        load_user_rules(rules)  # raises ValueError naming the bad rule
        return rules


class BanksSettings(_Section):
    """Memory banks (design §10): the optional LLM processor of ``bank_process`` and discovery."""

    llm_base_url: str = Field(
        "",
        description="OpenAI-compatible endpoint (up to /chat/completions); empty: rules only.",
    )
    llm_model: str = Field("", description="Model name sent to the endpoint.")
    llm_api_key_env: str = Field(
        "",
        description="Name of the environment variable holding the API key (never the key itself).",
    )
    llm_timeout_s: float = Field(
        10, gt=0, le=120, description="Give up on the endpoint after this long (s)."
    )
    memory_bank_roots: list[str] = Field(
        [], description="Folders searched (4 levels deep) for projects holding memory-bank/."
    )
    read_only_modes: list[str] = Field(
        ["ask"],
        description="Modes in which the memory bank cannot be changed, beyond the seed's own "
        "(plan and ask change nothing; act, architect and debug only their files).",
    )
    sync_interval_s: float = Field(
        60,
        ge=0.05,
        le=3600,
        description="Write the bank cache's pending changes to the markdown files this often (s).",
    )
    sync_immediate_bytes: int = Field(
        4096, ge=0, description="A change larger than this (bytes) is written at once."
    )
    debug_dump: bool = Field(
        False,
        description="Write the whole bank cache to $XDG_STATE_HOME/memoryd/cache_memory_dump.json"
        " after each sync (diagnostic only).",
    )


class InstructionsSettings(_Section):
    """Instruction files (design §11): ``MEMORY.md`` and the files it imports."""

    file_name: str = Field(
        core_instructions.DEFAULT_FILE_NAME,
        description="Name of the instruction file (its local variant: <name>.local.md).",
    )
    budget_percent: int = Field(
        round(budget.SHARES["instructions"] * 100),
        ge=0,
        le=round(budget.MAX_INSTRUCTIONS_SHARE * 100),
        description="Share of a session-start payload the instruction files may take (%), "
        "paid for by the session bridge's share.",
    )
    max_depth: int = Field(
        core_instructions.MAX_DEPTH, ge=0, le=10, description="How deep @imports are followed."
    )
    plugins_dir: str = Field(
        "",
        description="Folder of plugins, each with memory/MEMORY.md; empty means "
        "$XDG_CONFIG_HOME/memoryd/plugins.",
    )
    trusted_folders: list[str] = Field(
        [],
        description="Folders @imports may read from besides the project, the global folder and "
        "the plugins (absolute, or starting with ~).",
    )

    @field_validator("file_name")
    @classmethod
    def _plain_markdown_name(cls, name: str) -> str:
        core_instructions.local_name(name)  # BadRequest, a ValueError, for anything else
        return name

    @field_validator("trusted_folders")
    @classmethod
    def _absolute(cls, folders: list[str]) -> list[str]:
        for folder in folders:
            if not os.path.isabs(os.path.expanduser(folder)):
                raise ValueError(f"trusted folder {folder!r} is not absolute")
        return folders


class LoggingSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe level written to the log."
    )
    file: bool = Field(
        True,
        description="Also write JSON lines to $XDG_STATE_HOME/memoryd/memoryd.log (not under "
        "systemd, whose journal keeps what the daemon prints).",
    )
    max_bytes: int = Field(
        10 * 1024 * 1024, ge=64 * 1024, description="Size at which the log file is rotated."
    )
    backups: int = Field(3, ge=0, le=100, description="Rotated log files kept (memoryd.log.1 …).")


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    server: ServerSettings = ServerSettings()
    storage: StorageSettings = StorageSettings()
    jobs: JobsSettings = JobsSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    slo: SloSettings = SloSettings()
    capture: CaptureSettings = CaptureSettings()
    banks: BanksSettings = BanksSettings()
    instructions: InstructionsSettings = InstructionsSettings()
    logging: LoggingSettings = LoggingSettings()


class ConfigError(ValueError):
    """The configuration file or environment holds an invalid value."""


def default_config_file() -> Path:
    return Path(platformdirs.user_config_dir("memoryd")) / "config.toml"


def load(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load settings; ``overrides`` come from the command line and win over everything."""
    path = config_file or default_config_file()
    if config_file is not None and not path.is_file():
        raise ConfigError(f"config file {path} does not exist")

    if path.is_file():
        _check_names(path)
    try:
        if not path.is_file() and not _in_environment(os.environ):
            return Settings(**overrides)  # defaults and the command line: nothing to read
        loaded = _read_sources(path if path.is_file() else None, overrides)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path, os.environ)) from exc
    except ValueError as exc:  # tomllib's TOMLDecodeError
        raise ConfigError(f"invalid configuration ({path}): {exc}") from exc
    # Validated already; re-wrap as plain Settings (validation only, no sources read again).
    return Settings.model_validate(loaded.model_dump())


def _in_environment(environ: Mapping[str, str]) -> bool:
    """Whether a variable names a section (``MEMORYD_<SECTION>…``, in any case, as
    pydantic-settings matches them); ``MEMORYD_SOCKET`` is the clients' too and no setting."""
    prefixes = tuple(f"MEMORYD_{section}".upper() for section in Settings.model_fields)
    return any(name.upper().startswith(prefixes) for name in environ)


def _read_sources(toml_file: Path | None, overrides: dict[str, Any]) -> BaseModel:
    """The settings as pydantic-settings reads them: ``overrides`` > environment > file."""
    from pydantic_settings import (
        BaseSettings,
        PydanticBaseSettingsSource,
        SettingsConfigDict,
        TomlConfigSettingsSource,
    )

    class _FromSources(BaseSettings, Settings):
        model_config = SettingsConfigDict(
            env_prefix="MEMORYD_",
            env_nested_delimiter="__",
            extra="ignore",
            frozen=True,
            toml_file=toml_file,
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    return _FromSources(**overrides)


def _check_names(path: Path) -> None:
    """A misspelt section or key is an error naming the file and the nearest valid name: pydantic
    would ignore an unknown section, so ``[retreival]`` would silently change nothing."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"invalid configuration ({path}): {exc}") from exc
    except RecursionError:  # tomllib reads nested arrays and tables by recursion
        raise ConfigError(
            f"invalid configuration ({path}): arrays or tables nested too deeply to read"
        ) from None
    sections = Settings.model_fields
    for name, value in data.items():
        if name not in sections:
            raise ConfigError(f"{path}: unknown section [{name}]{_nearest(name, sections)}")
        fields = sections[name].annotation.model_fields  # type: ignore[union-attr]
        for key in value if isinstance(value, dict) else ():
            if key not in fields:
                raise ConfigError(f"{path}: unknown key {key!r} in [{name}]{_nearest(key, fields)}")


def _nearest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _explain(exc: ValidationError, path: Path, environ: Mapping[str, str]) -> str:
    """Each invalid value with where it came from: an environment variable named as such (a
    user who never touched the file must not be sent to it), otherwise the file."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        variable = "MEMORYD_" + "__".join(loc).upper()
        where = f"environment variable {variable}" if variable in environ else str(path)
        lines.append(f"{'.'.join(loc)}: {error['msg']} (from {where})")
    return "invalid configuration: " + "; ".join(lines)


# What a running daemon applies on SIGHUP, per section; a change to any other setting is named in
# ``needs_restart_for`` (the socket, storage, what the watcher and the bank LLM were started with).
LIVE_SETTINGS: dict[str, frozenset[str]] = {
    "logging": frozenset(LoggingSettings.model_fields),
    "jobs": frozenset(JobsSettings.model_fields),
    "retrieval": frozenset(RetrievalSettings.model_fields),
    "slo": frozenset(SloSettings.model_fields),
    "capture": frozenset({"preset", "idle_minutes", "checkpoint_every", "hook_wait_s"}),
    "banks": frozenset({"sync_interval_s"}),
}


@dataclass(frozen=True)
class Reload:
    """What a reload changes: ``applied`` live, and ``needs_restart_for`` (``section.key``)."""

    applied: tuple[str, ...]
    needs_restart_for: tuple[str, ...]


def plan_reload(running: Settings, fresh: Settings) -> Reload:
    """Compare the settings the daemon runs with to freshly loaded ones, key by key."""
    applied: list[str] = []
    restart: list[str] = []
    for section in Settings.model_fields:
        before = getattr(running, section).model_dump()
        after = getattr(fresh, section).model_dump()
        for key in after:
            if before.get(key) != after[key]:
                live = key in LIVE_SETTINGS.get(section, frozenset())
                (applied if live else restart).append(f"{section}.{key}")
    return Reload(tuple(applied), tuple(restart))


def data_dir(settings: Settings) -> Path:
    return Path(settings.storage.data_dir or platformdirs.user_data_dir("memoryd"))


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir("memoryd"))


def _toml_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def render_example() -> str:
    """Every setting with its default and a comment, as TOML."""
    lines = [
        "# memoryd configuration: every setting with its default.",
        "# Location: $XDG_CONFIG_HOME/memoryd/config.toml (or `memoryd run --config FILE`).",
        "# Environment overrides: MEMORYD_<SECTION>__<KEY>, e.g. MEMORYD_LOGGING__LEVEL=debug.",
        "# The socket path is not set here: it follows $XDG_RUNTIME_DIR, or $MEMORYD_SOCKET for",
        "# both the daemon and its clients.",
    ]
    for name, field in Settings.model_fields.items():
        section = field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel)
        lines += ["", f"[{name}]"]
        for key, sub in section.model_fields.items():
            lines.append(f"# {sub.description}")
            lines.append(f"{key} = {_toml_value(sub.default)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- check-config


class Origin(BaseModel):
    """One effective setting and where its value came from."""

    section: str
    key: str
    value: Any
    source: str  # "default", the config file's path, or "environment variable MEMORYD_…"


def effective(
    settings: Settings, config_file: Path | None, environ: Mapping[str, str]
) -> list[Origin]:
    """Every setting as ``settings`` holds it, with its origin: the environment wins over the
    file, the file over the default (as ``load`` applied them)."""
    path = config_file or default_config_file()
    try:
        from_file = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        from_file = {}  # load() has reported it already
    found = []
    for section in Settings.model_fields:
        values = getattr(settings, section).model_dump(mode="json")
        in_file = from_file.get(section, {})
        for key, value in values.items():
            variable = f"MEMORYD_{section}__{key}".upper()
            if variable in environ or f"MEMORYD_{section}".upper() in environ:
                source = f"environment variable {variable}"
            elif isinstance(in_file, dict) and key in in_file:
                source = str(path)
            else:
                source = "default"
            found.append(Origin(section=section, key=key, value=value, source=source))
    return found


def render_effective(origins: Iterable[Origin], config_file: Path | None) -> str:
    """The effective configuration as TOML, each value followed by where it came from."""
    path = config_file or default_config_file()
    lines = [f"# memoryd's effective configuration; file: {path if path.is_file() else 'none'}"]
    section = None
    for o in origins:
        if o.section != section:
            section = o.section
            lines += ["", f"[{section}]"]
        lines.append(f"{o.key} = {_toml_value(o.value)}  # {o.source}")
    return "\n".join(lines) + "\n"
