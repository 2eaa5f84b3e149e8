"""What every handler gets: the daemon's parts (``DaemonContext``), and ``Parked``, the answer
of a handler that has to wait (a long poll, an LLM thinking) without holding the owner thread."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.banks.service import BankService
from memoryd.capture.service import CaptureService
from memoryd.recall import Recall
from memoryd.registry import ProjectRegistry

# A request id this long is taken as unique (memctl sends 32 hex digits): a retry can be told
# by it. Shorter ids are counters, reused by every client.
UNIQUE_ID_CHARS = 16


def unique_id(req: p.Request[Any]) -> str:
    """The request's id if a retry can be recognised by it, else ""."""
    return req.id if isinstance(req.id, str) and len(req.id) >= UNIQUE_ID_CHARS else ""


@dataclass
class DaemonContext:
    registry: ProjectRegistry
    errors: BackgroundErrors
    endpoint: str
    request_stop: Callable[[str], None]
    recall: Recall
    capture: CaptureService | None = None
    banks: BankService | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Parked:
    """Answer later: when the handler, run again, returns a result, or at ``deadline``
    (monotonic) with ``on_timeout``."""

    deadline: float
    on_timeout: msgspec.Struct
    # A cheap test of whether running the handler again could answer now; without it the
    # handler is re-run after every message the loop serves.
    ready: Callable[[], bool] | None = None


Handler = Callable[[DaemonContext, Any], msgspec.Struct | Parked]
