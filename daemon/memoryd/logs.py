"""Structured logging, configured once by the composition root (and again on SIGHUP), through
structlog's standard-library integration: human-readable lines when stderr is a terminal, JSON
lines otherwise; under systemd the journal keeps what goes to stderr, elsewhere the log file
``$XDG_STATE_HOME/memoryd/memoryd.log`` is written too, in JSON, and rotated by size (the
standard library's ``RotatingFileHandler``). Everything else asks ``structlog.get_logger()``."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import structlog

from memoryd.core.redaction import redact

_LOGGER = "memoryd"
_SHARED: list[Any] = [
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _formatter(renderer: Any) -> logging.Formatter:
    return structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redacted,
            renderer,
        ],
        foreign_pre_chain=_SHARED,
    )


def _redacted(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """No secret reaches a log line: a message, a field or a traceback (an exception's text
    can quote the input that caused it) is redacted like everything memory keeps."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value).text
    return event


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """Rotated by size; every file it opens (the first and each after a rotation) is 0600: the
    log names projects and files of the user."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # one created earlier by a looser version
        return os.fdopen(fd, "a", encoding=self.encoding)


def under_systemd() -> bool:
    """systemd connects stderr to the journal and says so in ``JOURNAL_STREAM``."""
    return bool(os.environ.get("JOURNAL_STREAM"))


def configure(
    level: str, log_file: Path | None, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 3
) -> None:
    """(Re)configure logging; safe to call again on SIGHUP."""
    close()
    console = sys.stderr.isatty()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(
        _formatter(structlog.dev.ConsoleRenderer(colors=False) if console else _json())
    )
    handlers: list[logging.Handler] = [stderr]
    if log_file is not None and not under_systemd():
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        rotating = _PrivateRotatingFile(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
        rotating.setFormatter(_formatter(_json()))
        handlers.append(rotating)
    logger = logging.getLogger(_LOGGER)
    logger.handlers = handlers
    logger.setLevel(getattr(logging, level.upper()))
    logger.propagate = False
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_SHARED,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=lambda *args: logging.getLogger(_LOGGER),
        cache_logger_on_first_use=False,
    )


def _json() -> Any:
    return structlog.processors.JSONRenderer()


def close() -> None:
    logger = logging.getLogger(_LOGGER)
    for handler in logger.handlers:
        handler.close()
    logger.handlers = []


def get(**bound: Any) -> Any:
    """A lazy logger: it follows a later ``configure`` (SIGHUP) instead of keeping the old file."""
    return structlog.get_logger(**bound)
