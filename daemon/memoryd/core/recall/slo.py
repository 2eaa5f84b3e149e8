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

    def record(self, latency_ms: float) -> SloChanged | None:
        """Add a sample; returns the change of mode it caused, if any."""
        self._samples.append(latency_ms)
        if len(self._samples) < self.min_samples:
            return None
        p95 = percentile(sorted(self._samples), 0.95)
        if not self.degraded and p95 > self.degrade_above_ms:
            self.degraded = True
            return SloChanged(True, p95)
        if self.degraded and p95 < self.recover_below_ms:
            self.degraded = False
            return SloChanged(False, p95)
        return None

    def state(self) -> SloState:
        values = sorted(self._samples)
        if not values:
            return SloState(None, None, None, self.degraded, 0)
        p50, p95, p99 = (round(percentile(values, f), 3) for f in (0.5, 0.95, 0.99))
        return SloState(p50, p95, p99, self.degraded, len(values))
