"""Reader threads: reads (``search``, ``inject``) served off the owner thread (issue 12).

The owner decodes every request, runs every write and takes, for a read, what it needs on the
owner thread (its handler returns a ``Deferred``: the index caught up with every acknowledged
change, a searcher of it). A reader thread then runs the read, with a database connection of
its own; the result comes back through a queue, and a byte on a socket pair wakes the owner's
poll, which applies what the read left (accesses, latency) and sends the reply: no ZeroMQ
socket is touched off the owner thread. tantivy's search and SQLite release the GIL, so on
several cores reads overlap there; Python's share of a read (ranking, packing) does not.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memoryd.server.context import Deferred


@dataclass
class ReadJob:
    """One read handed to a reader thread; ``outcome`` is what ``deferred.read`` returned, or
    the exception it raised."""

    deferred: Deferred[Any, Any]
    on_done: Callable[[ReadJob], None]  # called on the owner thread (``collect``)
    outcome: Any = None
    failed: bool = False


class Readers:
    """``count`` reader threads sharing one queue of reads. ``submit`` and ``collect`` are the
    owner thread's; the owner polls ``fileno()`` and calls ``collect`` when it is readable."""

    def __init__(self, count: int, *, name: str = "memoryd-reader") -> None:
        self.count = count
        self.in_flight = 0  # reads submitted and not collected yet (owner thread only)
        self._jobs: queue.SimpleQueue[ReadJob | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[ReadJob] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def fileno(self) -> int:
        return self._wake_r.fileno()

    def submit(self, job: ReadJob) -> None:
        self.in_flight += 1
        self._jobs.put(job)

    def collect(self) -> int:
        """Hand every finished read to its ``on_done``; returns how many there were."""
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        n = 0
        while True:
            try:
                job = self._done.get_nowait()
            except queue.Empty:
                return n
            self.in_flight -= 1
            n += 1
            job.on_done(job)

    def drain(self, deadline: float) -> None:
        """Collect the reads still running (their replies sent) until ``deadline``
        (monotonic): a stop answers what it took on."""
        while self.in_flight and time.monotonic() < deadline:
            try:
                job = self._done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.in_flight -= 1
            job.on_done(job)

    def close(self) -> None:
        """Stop the threads once the reads queued before are done (they are daemon threads: a
        read stuck in a call does not hold the exit up)."""
        for _ in self._threads:
            self._jobs.put(None)
        self._wake_r.close()
        self._wake_w.close()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.outcome = job.deferred.read()
            except BaseException as exc:  # handed to the owner, which answers with an error
                job.outcome, job.failed = exc, True
            self._done.put(job)
            # A wake-up is pending already (or the owner closed: nobody to tell).
            with contextlib.suppress(BlockingIOError, OSError):
                self._wake_w.send(b"\0")
