"""Configuration: CLI > environment (``MEMORYD_``, nested with ``__``) > TOML file > defaults.

Only the entry points (``memoryd.cli``, ``memoryd.app``) read configuration; everything else is
handed the part it needs. ``config.example.toml`` is rendered from this model by
``render_example()`` and a test keeps the two equal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


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
        16, ge=4, le=1024, description="Memory for the search index writer, per project (MB)."
    )

    @model_validator(mode="after")
    def _trim_below_max(self) -> StorageSettings:
        if self.audit_trim_to >= self.audit_max_events:
            raise ValueError("storage.audit_trim_to must be below storage.audit_max_events")
        return self


class JobsSettings(_Section):
    index_commit_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How often pending index changes are committed when no search forces it (s).",
    )


class LoggingSettings(_Section):
    level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe level written to the log."
    )
    file: bool = Field(
        True, description="Also write JSON lines to $XDG_STATE_HOME/memoryd/memoryd.log."
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMORYD_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    server: ServerSettings = ServerSettings()
    storage: StorageSettings = StorageSettings()
    jobs: JobsSettings = JobsSettings()
    logging: LoggingSettings = LoggingSettings()

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


class ConfigError(ValueError):
    """The configuration file or environment holds an invalid value."""


def default_config_file() -> Path:
    return Path(platformdirs.user_config_dir("memoryd")) / "config.toml"


def load(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load settings; ``overrides`` come from the command line and win over everything."""
    path = config_file or default_config_file()
    if config_file is not None and not path.is_file():
        raise ConfigError(f"config file {path} does not exist")

    class _FromFile(Settings):
        model_config = SettingsConfigDict(toml_file=path if path.is_file() else None)

    try:
        loaded = _FromFile(**overrides)
    except ValueError as exc:  # pydantic's ValidationError and tomllib's TOMLDecodeError
        raise ConfigError(f"invalid configuration ({path}): {exc}") from exc
    # Validated already; re-wrap as plain Settings (validation only, no sources read again).
    return Settings.model_validate(loaded.model_dump())


def data_dir(settings: Settings) -> Path:
    return Path(settings.storage.data_dir or platformdirs.user_data_dir("memoryd"))


def state_dir() -> Path:
    return Path(platformdirs.user_state_dir("memoryd"))


def _toml_value(value: Any) -> str:
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


def env_snapshot() -> dict[str, str]:
    """The MEMORYD_ variables in effect, for the start-up log line."""
    return {k: v for k, v in os.environ.items() if k.startswith("MEMORYD_")}
