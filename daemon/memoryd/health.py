"""The health ring (issue 18): a bounded record of how long the daemon took to serve the
requests an agent waits on (hooks, inject, search), kept on the owner thread and served by the
``health`` operation (``memctl health``, the memory browser's Health view)."""

from __future__ import annotations

from collections import deque

from memctl import protocol as p
from memoryd.core.recall.slo import percentile

# The operations whose latency an agent feels.
TIMED_OPS = frozenset({"hook", "inject", "search"})
# About a day of a busy user's hooks (a prompt, a tool call and a turn's end each run one): the
# oldest samples fall off first, so the "day" window may cover less than a day.
CAPACITY = 50_000
WINDOWS = (("hour", 3600.0), ("day", 86_400.0))


class HealthRing:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._samples: deque[p.LatencySample] = deque(maxlen=capacity)

    def record(self, at: float, op: str, ms: float) -> None:
        if op in TIMED_OPS:
            self._samples.append(p.LatencySample(at=at, op=op, ms=ms))

    def __len__(self) -> int:
        return len(self._samples)

    def newest(self, n: int) -> list[p.LatencySample]:
        """The newest ``n`` samples, oldest first."""
        if n <= 0:
            return []
        return list(self._samples)[-n:]

    def windows(self, now: float) -> list[p.LatencyWindow]:
        """p50 and p95 of each timed operation over the last hour and the last day."""
        found: list[p.LatencyWindow] = []
        for op in sorted(TIMED_OPS):
            for name, span in WINDOWS:
                values = sorted(s.ms for s in self._samples if s.op == op and s.at >= now - span)
                found.append(
                    p.LatencyWindow(
                        op=op,
                        window="hour" if name == "hour" else "day",
                        count=len(values),
                        p50_ms=round(percentile(values, 0.5), 3) if values else None,
                        p95_ms=round(percentile(values, 0.95), 3) if values else None,
                    )
                )
        return found


def rss_bytes() -> int | None:
    """The daemon's resident memory now (Linux), or its peak (elsewhere); None if unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            import os

            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError):
        return None
