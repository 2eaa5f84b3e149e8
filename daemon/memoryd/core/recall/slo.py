"""The retrieval SLO monitor (design §5): a rolling window of latencies that
switches retrieval to a cheaper mode when p95 is too high and back when it recovers."""

from __future__ import annotations

import math
from collections import deque

import msgspec


class SloState(msgspec.Struct, frozen=True):
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    degraded: bool
    samples: int


class SloChanged(msgspec.Struct, frozen=True):
    degraded: bool
    p95_ms: float


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


class SloMonitor:
    def __init__(
        self,
        window: int = 100,
        degrade_above_ms: float = 300.0,
        recover_below_ms: float = 200.0,
        min_samples: int = 5,
    ) -> None:
        if recover_below_ms > degrade_above_ms:
            raise ValueError("recover threshold must not exceed the degrade threshold")
        self._samples: deque[float] = deque(maxlen=window)
        self.degrade_above_ms = degrade_above_ms
        self.recover_below_ms = recover_below_ms
        self.min_samples = min_samples
        self.degraded = False
        self._above = 0  # samples in the window above degrade_above_ms
        self._at_or_above_recover = 0  # ... at or above recover_below_ms

    def record(self, latency_ms: float) -> SloChanged | None:
        """Add a sample; returns the change of mode it caused, if any. Whether p95 passed a
        threshold is told by how many samples lie past it (counted as they come and go), the
        window sorted only when the mode changes: this runs on every search."""
        samples = self._samples
        if len(samples) == samples.maxlen:
            self._count(samples[0], -1)
        samples.append(latency_ms)
        self._count(latency_ms, 1)
        n = len(samples)
        if n < self.min_samples:
            return None
        # The p95 (nearest rank r) lies above T when more than n - r samples do.
        beyond = n - max(1, math.ceil(0.95 * n))
        if not self.degraded and self._above > beyond:
            self.degraded = True
            return SloChanged(True, percentile(sorted(samples), 0.95))
        if self.degraded and self._at_or_above_recover <= beyond:
            self.degraded = False
            return SloChanged(False, percentile(sorted(samples), 0.95))
        return None

    def _count(self, latency_ms: float, step: int) -> None:
        self._above += step * (latency_ms > self.degrade_above_ms)
        self._at_or_above_recover += step * (latency_ms >= self.recover_below_ms)

    def state(self) -> SloState:
        values = sorted(self._samples)
        if not values:
            return SloState(None, None, None, self.degraded, 0)
        p50, p95, p99 = (round(percentile(values, f), 3) for f in (0.5, 0.95, 0.99))
        return SloState(p50, p95, p99, self.degraded, len(values))
