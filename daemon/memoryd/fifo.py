"""A FIFO writer thread (design §10): the owner thread hands it jobs, it does them one at a
time in the order given, and hands the results back through a queue, waking the owner with
``notify``. The thread touches no daemon state: a job carries everything it needs (the exact
bytes to write and what the file must still be for the write to go ahead), so the owner thread
never waits on a disk and two writes of one file never race.

Used for memory-bank files (``banks.writer``) and the shared memory file (``share``), each with
its own thread so that a slow bank never delays the other."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

J = TypeVar("J")
R = TypeVar("R")

STOP_TIMEOUT_S = 10.0


class _Stop:
    pass


_STOP = _Stop()


class FifoWriter(Generic[J, R]):
    def __init__(
        self,
        work: Callable[[J], R],
        crashed: Callable[[J, str], R],
        notify: Callable[[], None],
        *,
        name: str,
    ) -> None:
        """``work`` does a job (and should never raise for a problem on disk); ``crashed`` makes
        the result of a job whose ``work`` raised anyway (a bug), so the job is not stranded."""
        self._work = work
        self._crashed = crashed
        self._notify = notify
        self._jobs: queue.Queue[J | _Stop] = queue.Queue()
        self._results: queue.SimpleQueue[R] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: J) -> None:
        self._jobs.put(job)

    def results(self) -> list[R]:
        """The results not collected yet, in the order the jobs were done."""
        found = []
        while True:
            try:
                found.append(self._results.get_nowait())
            except queue.Empty:
                return found

    def next_result(self, timeout_s: float) -> R | None:
        """Wait (at most ``timeout_s``) for the next result; for the final sync at shutdown,
        when the owner thread no longer serves its mailbox."""
        try:
            return self._results.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def stop(self) -> bool:
        """Finish the jobs already submitted, then end the thread. False when it did not end
        in time (a hung file system): it is a daemon thread and dies with the process."""
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join(timeout=STOP_TIMEOUT_S)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not isinstance(job := self._jobs.get(), _Stop):
            try:
                result = self._work(job)
            except Exception as exc:  # a bug must not kill the thread and strand the job
                result = self._crashed(job, f"internal error: {type(exc).__name__}: {exc}")
            self._results.put(result)
            self._notify()
