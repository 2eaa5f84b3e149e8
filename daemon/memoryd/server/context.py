"""What every handler gets: the daemon's parts (``DaemonContext``), its run state (``Lifecycle``),
``Parked``, the answer of a handler that has to wait (a long poll, an LLM thinking) without
holding the owner thread, and ``Deferred``, the answer a reader thread computes (a search)."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from memctl import protocol as p
from memoryd.background import BackgroundErrors
from memoryd.banks.service import BankService
from memoryd.banks.writer import BankWriter
from memoryd.capture.service import CaptureService
from memoryd.capture.watcher import TranscriptWatcher
from memoryd.compactor import Compactor
from memoryd.health import HealthRing
from memoryd.index import SearchScope
from memoryd.project import ProjectMemory, ProjectReader
from memoryd.recall import Recall
from memoryd.registry import ProjectRegistry
from memoryd.share import ShareService, ShareWriter

# A request id this long is taken as unique (memctl sends 32 hex digits): a retry can be told
# by it. Shorter ids are counters, reused by every client.
UNIQUE_ID_CHARS = 16


def unique_id(req: p.Request[Any]) -> str:
    """The request's id if a retry can be recognised by it, else ""."""
    return req.id if isinstance(req.id, str) and len(req.id) >= UNIQUE_ID_CHARS else ""


class RunState(enum.Enum):
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass
class Lifecycle:
    """Whether the loop keeps serving. Changed only on the owner thread, by a handler (a
    ``shutdown`` request, a SIGTERM turned into ``StopRequested``); the loop reads it."""

    state: RunState = RunState.RUNNING
    reason: str = ""
    # A client waits for the reply to its ``shutdown``: the loop must see it leave first.
    wait_for_client: bool = False

    def stop(self, reason: str, *, wait_for_client: bool = False) -> bool:
        """Ask the loop to stop; False if it was stopping already."""
        if self.state is RunState.STOPPING:
            return False
        self.state, self.reason, self.wait_for_client = RunState.STOPPING, reason, wait_for_client
        return True


@dataclass(frozen=True)
class DaemonContext:
    """The parts handlers work with, built once by the composition root (``memoryd.app``).

    ``reload`` re-reads the configuration and applies what can change live (the composition root
    alone reads configuration); ``backfill_days`` is how far back a transcript folder that
    appears later is caught up."""

    registry: ProjectRegistry
    errors: BackgroundErrors
    endpoint: str
    recall: Recall
    reload: Callable[[], None]
    log: Any
    capture: CaptureService | None = None
    banks: BankService | None = None
    bank_writer: BankWriter | None = None
    watcher: TranscriptWatcher | None = None
    compactor: Compactor | None = None
    share: ShareService | None = None
    share_writer: ShareWriter | None = None
    backfill_days: float = 0.0
    # Binds the socket again when its file is gone (the server's ``keep_socket``).
    keep_socket: Callable[[], bool] | None = None
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    started: float = field(default_factory=time.monotonic)
    # Latency of the requests an agent waits on, for ``health`` (filled by the loop).
    health: HealthRing = field(default_factory=HealthRing)

    def request_stop(self, reason: str) -> None:
        if self.lifecycle.stop(reason, wait_for_client=reason == "shutdown request"):
            self.log.info("stopping", reason=reason)


@dataclass(frozen=True)
class Parked:
    """Answer later: when the handler, run again, returns a result, or at ``deadline``
    (monotonic) with the ``on_timeout`` of its run then."""

    deadline: float
    on_timeout: msgspec.Struct
    # A cheap test of whether running the handler again could answer now; without it the
    # handler is re-run after every message the loop serves.
    ready: Callable[[], bool] | None = None
    # Called when the request is answered ``on_timeout`` at the deadline: what the handler
    # would have done on its next run is left to someone else. (Not as the daemon stops.)
    expired: Callable[[], None] | None = None


_R = TypeVar("_R")
_A = TypeVar("_A", bound=msgspec.Struct)


@dataclass(frozen=True)
class Deferred(Generic[_R, _A]):
    """Answer from a reader thread (``server/readers.py``): ``read`` runs there and touches no
    state of the owner's (it reads what the handler took for it on the owner thread: a
    searcher, a database connection of its own); ``finish`` runs back on the owner thread with
    what it returned, applies what the read left (accesses, latency) and gives the result.
    With no reader threads, both run at once on the owner thread."""

    read: Callable[[], _R]
    finish: Callable[[_R], _A]

    def run(self) -> _A:
        return self.finish(self.read())


def deferred_read(
    ctx: DaemonContext,
    project: ProjectMemory,
    scope: SearchScope | None,
    read: Callable[[ProjectReader], _R],
    answer: Callable[[_R], _A],
) -> Deferred[_R, _A]:
    """A read of ``project`` for a reader thread: what it needs taken now, on the owner thread
    (``ProjectMemory.reader``; ``scope`` None: the read does not search), what it leaves
    applied back there (``Recall.settle_read``) before ``answer`` gives the reply."""
    reader = project.reader(scope)

    def run() -> _R:
        with reader:
            return read(reader)

    def finish(result: _R) -> _A:
        ctx.recall.settle_read(project, reader)
        return answer(result)

    return Deferred(run, finish)


Handler = Callable[[DaemonContext, Any], msgspec.Struct | Parked | Deferred[Any, Any]]
