"""Exactly once across restarts (issue 10): the client's change the owner thread is serving.

The loop sets ``SERVING`` around the handler of a mutating request with a unique id;
``ProjectMemory.commit`` journals each event with it and the store records, in the transaction
of each event, what the request did (``requests`` table). The loop then keeps the reply there
before sending it, so a retry of the request, even after a restart, gets the first reply and
changes nothing. Only the owner thread touches it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Requests remembered per project: the newest this many, none older than this.
KEEP_REQUESTS = 10_000
KEEP_REQUESTS_S = 7 * 86_400.0
PRUNE_EVERY = 256  # replies kept between two prunes of a project's requests
KEEP_PENDING = 1_024  # requests that changed a project and are not answered yet, at most


class Serving:
    """The request (id, op) whose handler is running, or None; and, until the loop answers
    them, the project each such request changed (its reply is kept there, and only there:
    a request that changed nothing costs no encode and no store write)."""

    def __init__(self) -> None:
        self.current: tuple[str, str] | None = None
        self._changed: dict[str, Any] = {}

    def changed(self, project: Any) -> None:
        """The current request committed an event in ``project``."""
        if self.current is not None:
            self._changed[self.current[0]] = project
            if len(self._changed) > KEEP_PENDING:  # a request never answered: not kept forever
                del self._changed[next(iter(self._changed))]

    def take(self, request_id: str) -> Any | None:
        """The project ``request_id`` changed, once (None: it changed nothing)."""
        return self._changed.pop(request_id, None)

    @contextmanager
    def serving(self, request_id: str, op: str) -> Iterator[None]:
        before, self.current = self.current, (request_id, op)
        try:
            yield
        finally:
            self.current = before


SERVING = Serving()
