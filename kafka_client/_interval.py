"""A quantity observed over an interval (latencies, throttle times): sum, count and
maximum since the last time they were taken, for the metrics pushed to the brokers
(:mod:`kafka_client._cluster.telemetry`). Kept by the part that observes the quantity,
taken on the I/O thread."""
from __future__ import annotations

from typing import Tuple

__all__ = ["IntervalStat"]


class IntervalStat:
    """One quantity observed since the last push: sum, count and maximum, which the push
    turns into an average and a maximum and resets."""

    __slots__ = ("total", "count", "max")

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.max = 0.0

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1
        if value > self.max:
            self.max = value

    def merge(self, other: "IntervalStat") -> None:
        """Count ``other``'s observations in this one too."""
        self.total += other.total
        self.count += other.count
        if other.max > self.max:
            self.max = other.max

    def take(self) -> Tuple[float, float]:
        """``(average, maximum)`` since the last take (0 when nothing was observed)."""
        avg = self.total / self.count if self.count else 0.0
        top = self.max
        self.total = 0.0
        self.count = 0
        self.max = 0.0
        return avg, top
