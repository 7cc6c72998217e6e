"""Kafka's quota measurements: a windowed rate (``Rate`` over a ``WindowedSum``) and a token bucket
(``TokenBucket``, KIP-599), with the throttle times Kafka derives from them. Pure: time comes in as
``now_ms``.

Invariants (Kafka's ``SampledStat``, ``Rate`` and ``TokenBucket``, 3.x):

- A :class:`WindowedRate` keeps at most ``samples + 1`` samples, each ``window_ms`` long at most; a
  record goes to the current sample, or to a new one (recycling the oldest slot) once the current one
  is ``window_ms`` old. A sample whose last event is ``samples * window_ms`` old or more is reset
  before every measurement, so an idle entity's past never counts.
- The rate is the sum of the samples over the *window size*: the time since the oldest sample started,
  counted as at least ``samples - 1`` full windows (so a fresh entity's first burst is spread over
  ``(samples - 1) * window_ms``, not over the few milliseconds it took), and at least 1 ms.
- Over quota, the throttle time is Kafka's ``QuotaUtils.throttleTime``: the delay ``X`` that brings the
  observed rate ``O`` back to the quota ``T`` over the window ``W``: ``O * W / (W + X) = T``, so
  ``X = (O - T) / T * W``, rounded half up (Java's ``Math.round``).
- A :class:`WindowedAvg` keeps the same samples and answers the mean of the values recorded in them
  (Kafka's ``Avg``, used for the ``throttle-time`` metric), 0 when none is left.
- A :class:`TokenBucket` holds at most ``samples * window_s * quota`` tokens (the burst), refills at
  ``quota`` tokens per second and starts full; recording takes tokens and may drive it negative. It is
  exceeded while negative; the throttle time is the time to refill to zero: ``-tokens / quota * 1000``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

__all__ = ["KAFKA_QUOTA_WINDOW", "QuotaWindow", "TokenBucket", "WindowedAvg", "WindowedRate", "java_round"]


def java_round(value: float) -> int:
    """Java's ``Math.round``: half up (towards positive infinity)."""
    return math.floor(value + 0.5)


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """How a quota is measured: ``samples`` windows of ``window_ms`` (``quota.window.num`` and
    ``quota.window.size.seconds``; Kafka's defaults 11 and 1 s)."""

    samples: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        if self.samples < 1 or self.window_ms < 1:
            raise ValueError(f"a quota window needs at least one sample of at least 1 ms, not {self}")


class _Sample:
    __slots__ = ("event_count", "last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class WindowedRate:
    """Kafka's ``Rate`` (per second) over a ``WindowedSum``: see the module invariants."""

    __slots__ = ("_current", "_samples", "window")

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        total, window_ms = self._sum_and_window(now_ms)
        return total / (window_ms / 1000)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is taken over (Kafka's ``Rate.windowSize``)."""
        return self._sum_and_window(now_ms)[1]

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """How long to hold the client back for the measured rate to come down to ``quota`` (0 when
        within it): Kafka's ``(observed - quota) / quota * window``."""
        total, window_ms = self._sum_and_window(now_ms)
        observed = total / (window_ms / 1000)
        if observed <= quota:
            return 0
        return java_round((observed - quota) / quota * window_ms)

    def _sum_and_window(self, now_ms: int) -> tuple[float, int]:
        """Purge obsolete samples, then (sum of the samples, window size in ms)."""
        window = self.window
        expire_age = window.samples * window.window_ms
        total = 0.0
        oldest = now_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)
            total += sample.value
            oldest = min(oldest, sample.start_ms)
        elapsed = now_ms - oldest
        min_full_windows = window.samples - 1
        full_windows = elapsed // window.window_ms
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * window.window_ms
        return total, max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        # one slot more than samples: the oldest may still overlap the measured window
        self._current = (self._current + 1) % (self.window.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample


class WindowedAvg(WindowedRate):
    """Kafka's ``Avg`` over the same windowed samples: the mean recorded value (see the module invariants)."""

    __slots__ = ()

    def measure(self, now_ms: int) -> float:
        """The mean of the values recorded in the live samples at ``now_ms`` (0 when there are none)."""
        self._sum_and_window(now_ms)  # resets the expired samples
        count = sum(sample.event_count for sample in self._samples)
        if not count:
            return 0.0
        return sum(sample.value for sample in self._samples) / count


class TokenBucket:
    """Kafka's ``TokenBucket`` for ``controller_mutation_rate``: see the module invariants."""

    __slots__ = ("_last_update_ms", "_tokens", "window")

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self._tokens = 0.0
        self._last_update_ms: int | None = None

    def burst(self, quota: float) -> float:
        return self.window.samples * (self.window.window_ms / 1000) * quota

    def tokens(self, quota: float, now_ms: int) -> float:
        self._refill(quota, now_ms)
        return self._tokens

    def record(self, value: float, quota: float, now_ms: int) -> None:
        self._refill(quota, now_ms)
        self._tokens = min(self.burst(quota), self._tokens - value)

    def throttle_time_ms(self, quota: float, now_ms: int) -> int:
        """Time until the bucket is back at zero tokens (0 when it is not negative)."""
        tokens = self.tokens(quota, now_ms)
        if tokens >= 0:
            return 0
        return java_round(-tokens / quota * 1000)

    def _refill(self, quota: float, now_ms: int) -> None:
        burst = self.burst(quota)
        if self._last_update_ms is None:
            self._tokens = burst  # Kafka starts at 0 tokens at time 0: full by any real clock reading
        else:
            self._tokens = min(burst, self._tokens + quota * (now_ms - self._last_update_ms) / 1000)
        self._last_update_ms = now_ms


KAFKA_QUOTA_WINDOW: Final = QuotaWindow()
"""Kafka's defaults: 11 windows of 1 second."""
