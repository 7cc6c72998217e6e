"""A latency distribution as Kafka's histograms keep it: count, sum and a bounded reservoir of samples.

Invariant: adding a sample is O(1) (a deque with ``maxlen``); quantiles are computed only when asked (at
scrape time), from the last :data:`RESERVOIR_SIZE` samples.
"""

from __future__ import annotations

import collections
from typing import Final

__all__ = ["QUANTILES", "RESERVOIR_SIZE", "Samples"]

RESERVOIR_SIZE: Final = 1028
"""Samples kept: the size of Kafka's exponentially decaying reservoir."""

QUANTILES: Final = (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)
"""Kafka's histogram percentiles, as the JMX exporter labels them (``quantile="0.99"``)."""


class Samples:
    """count, sum and the most recent samples of one distribution."""

    __slots__ = ("count", "recent", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.recent: collections.deque[float] = collections.deque(maxlen=RESERVOIR_SIZE)

    def add(self, value: float) -> None:
        self.count += 1
        self.sum += value
        self.recent.append(value)

    def quantiles(self) -> list[tuple[float, float]]:
        ordered = sorted(self.recent)
        if not ordered:
            return [(q, 0.0) for q in QUANTILES]
        last = len(ordered) - 1
        return [(q, ordered[min(last, int(q * len(ordered)))]) for q in QUANTILES]
