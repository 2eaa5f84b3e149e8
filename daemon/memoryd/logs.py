"""Structured logging, configured once by the composition root: JSON lines to stderr and to
``$XDG_STATE_HOME/memoryd/memoryd.log``. Everything else asks ``structlog.get_logger()``."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO, Any

import structlog


class _Tee:
    """A file-like object writing each log line to several streams."""

    def __init__(self, streams: list[IO[str]]) -> None:
        self.streams = streams

    def write(self, text: str) -> None:
        for stream in self.streams:
            stream.write(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


_open_files: list[IO[str]] = []


def configure(level: str, log_file: Path | None) -> None:
    """(Re)configure logging; safe to call again on SIGHUP."""
    close()
    streams: list[IO[str]] = [sys.stderr]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fh = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives until close()
        os.chmod(log_file, 0o600)
        _open_files.append(fh)
        streams.append(fh)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.WriteLoggerFactory(file=_Tee(streams)),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def close() -> None:
    while _open_files:
        _open_files.pop().close()


def get(**bound: Any) -> Any:
    """A lazy logger: it follows a later ``configure`` (SIGHUP) instead of keeping the old file."""
    return structlog.get_logger(**bound)
