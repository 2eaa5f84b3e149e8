"""Domain exceptions. Each maps to exactly one wire error code, so a handler raises and the
server turns it into an ``Error`` reply; nothing else escapes the loop."""

from __future__ import annotations

from memctl.protocol import ErrorCode


class MemorydError(Exception):
    """Base of every error that is reported to a client."""

    code: ErrorCode = ErrorCode.INTERNAL


class BadRequest(MemorydError, ValueError):
    code = ErrorCode.BAD_REQUEST


class EntryNotFound(MemorydError, LookupError):
    code = ErrorCode.NOT_FOUND


class NoProject(EntryNotFound):
    """The request's folder is not inside a project, and the user did not name it as one."""


class Forbidden(MemorydError, PermissionError):
    code = ErrorCode.FORBIDDEN


class TooLarge(MemorydError, ValueError):
    code = ErrorCode.TOO_LARGE


class Ambiguous(MemorydError):
    """A keyword matched several entries where one was needed."""

    code = ErrorCode.CONFLICT


class Conflict(MemorydError):
    """The text a change was made against is no longer there (a user edited the file)."""

    code = ErrorCode.CONFLICT


class Unavailable(MemorydError):
    code = ErrorCode.UNAVAILABLE
