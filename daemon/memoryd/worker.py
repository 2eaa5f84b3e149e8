"""One background thread for slow calls that must not hold up the owner thread (an LLM endpoint
asked by ``bank_process``). The call gets only its arguments, never daemon state; its result comes
back as a ``concurrent.futures.Future``.

Not a ``ThreadPoolExecutor``: the interpreter joins an executor's threads at exit, so a stop would
wait out a call still in progress (up to the LLM timeout). This thread is a daemon thread, and
dies with the process; the call's result is then simply never used.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

_T = TypeVar("_T")


class Worker:
    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, call: Callable[[], _T]) -> Future[_T]:
        future: Future[_T] = Future()
        self._jobs.put((future, call))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return future

    def _run(self) -> None:
        while True:
            future, call = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
