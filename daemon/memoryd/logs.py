"""Structured logging, configured once by the composition root (and again on SIGHUP), through
structlog's standard-library integration: human-readable lines when stderr is a terminal, JSON
lines otherwise; under systemd the journal keeps what goes to stderr, elsewhere the log file
``$XDG_STATE_HOME/memoryd/memoryd.log`` is written too, in JSON, and rotated by size (the
standard library's ``RotatingFileHandler``). Everything else asks ``structlog.get_logger()``.

Logging never takes the daemon down: a record the file cannot take (disk full, EIO, a directory
made unwritable) is dropped, stderr says so once, and the file is opened afresh at the next
record, so the log resumes by itself when the cause is gone. Nothing here raises to a caller."""

from __future__ import annotations

import contextlib
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
    """No secret reaches a log line: a field or a traceback (an exception's text can quote the
    input that caused it) is redacted like everything memory keeps. The keys our code fills
    from its own vocabulary are passed over: every request logs a line, and redaction costs
    ~13 µs a string however short."""
    for key, value in event.items():
        if isinstance(value, str) and key not in _OWN_KEYS:
            event[key] = redact(value).text
    return event


# The event's name (a constant at every call), its level and time, a request's op (a protocol
# tag) and outcome (ok or an error code).
_OWN_KEYS = frozenset({"event", "level", "timestamp", "op", "outcome"})


def _say(text: str) -> None:
    """One line on stderr, if stderr takes it."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"memoryd: {text}\n")
        sys.stderr.flush()


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr (the journal under systemd): when it fails there is nowhere left to say so."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().flush()


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """Rotated by size; every file it opens (the first and each after a rotation) is 0600: the
    log names projects and files of the user. A record it cannot write is dropped and the file
    closed, to be opened again by the next record (the stdlib's ``emit`` does that when it has
    no stream); ``flush`` and ``close`` never raise."""

    failing = False

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)  # one created earlier by a looser version
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.write(fd, b"\n")  # a line torn by a failed write (full disk) ends here
            return os.fdopen(fd, "a", encoding=self.encoding)
        except BaseException:
            os.close(fd)
            raise

    def emit(self, record: logging.LogRecord) -> None:
        self._written = True
        super().emit(record)  # a failure goes to handleError, which clears _written
        if self._written and self.failing:
            self.failing = False
            _say(f"writing the log file {self.baseFilename} again")

    def handleError(self, record: logging.LogRecord) -> None:
        self._written = False
        if not self.failing:
            self.failing = True
            _say(
                f"cannot write the log file {self.baseFilename} ({sys.exc_info()[1]}); "
                "its records are dropped until it can"
            )
        # The stream may hold bytes it could not write, or be closed by a failed rotation.
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().flush()

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            super().close()


class _NeverRaising(structlog.stdlib.BoundLogger):
    """A log call is never the reason a caller fails: whatever goes wrong while a record is
    processed or handed to the handlers stays here."""

    def _proxy_to_logger(
        self, method_name: str, event: str | None = None, *event_args: str, **event_kw: Any
    ) -> Any:
        try:
            return super()._proxy_to_logger(method_name, event, *event_args, **event_kw)
        except Exception:
            return None


def under_systemd() -> bool:
    """systemd connects stderr to the journal and says so in ``JOURNAL_STREAM``."""
    return bool(os.environ.get("JOURNAL_STREAM"))


def configure(
    level: str, log_file: Path | None, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 3
) -> None:
    """(Re)configure logging; safe to call again on SIGHUP."""
    close()
    console = sys.stderr.isatty()
    stderr = _Stderr(sys.stderr)
    stderr.setFormatter(
        _formatter(structlog.dev.ConsoleRenderer(colors=False) if console else _json())
    )
    handlers: list[logging.Handler] = [stderr]
    if log_file is not None and not under_systemd():
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            _say(f"cannot create {log_file.parent} ({exc}); logging to stderr only")
        else:
            # delay: the file is opened by the first record, so that one that cannot be
            # opened now (full disk, no permission) is a dropped record, not a failed start.
            rotating = _PrivateRotatingFile(
                log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True
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
        wrapper_class=_NeverRaising,
        logger_factory=lambda *args: logging.getLogger(_LOGGER),
        cache_logger_on_first_use=False,
    )


def _json() -> Any:
    return structlog.processors.JSONRenderer()


def close() -> None:
    logger = logging.getLogger(_LOGGER)
    handlers, logger.handlers = logger.handlers, []
    for handler in handlers:
        with contextlib.suppress(Exception):
            handler.close()


def enabled(level: int = logging.INFO) -> bool:
    """Whether a record of ``level`` would be written: the per-request line is skipped before
    it costs a bound logger (~8 µs a request) when the level leaves it out."""
    return logging.getLogger(_LOGGER).isEnabledFor(level)


def get(**bound: Any) -> Any:
    """A lazy logger: it follows a later ``configure`` (SIGHUP) instead of keeping the old file."""
    return structlog.get_logger(**bound)
