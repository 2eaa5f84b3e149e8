"""Background errors awaiting a client (design §10's error history, design §4 ``previous_errors``).

Failures that happen outside any request (a sync, a replay, a parse) are recorded here and handed
to the next client reply, at most ``limit`` at a time, each reported once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from memctl.protocol import BackgroundError

Severity = Literal["info", "warning", "error"]


class BackgroundErrors:
    def __init__(self, limit: int = 10, clock: Callable[[], float] = time.time) -> None:
        self._pending: deque[BackgroundError] = deque(maxlen=100)
        self._recent: deque[BackgroundError] = deque(maxlen=limit)
        self._limit = limit
        self._clock = clock
        self.on_record: Callable[[BackgroundError], None] | None = None

    def record(self, description: str, severity: Severity = "error") -> None:
        error = BackgroundError(timestamp=self._clock(), description=description, severity=severity)
        self._pending.append(error)
        self._recent.append(error)
        if self.on_record is not None:
            self.on_record(error)

    def take(self) -> list[BackgroundError]:
        """The oldest unreported errors (at most ``limit``); each is returned once."""
        taken: list[BackgroundError] = []
        while self._pending and len(taken) < self._limit:
            taken.append(self._pending.popleft())
        return taken

    def recent(self) -> list[BackgroundError]:
        """The last errors whether reported or not, for ``status``."""
        return list(self._recent)
