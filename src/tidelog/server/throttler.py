"""A rate limit that sleeps the calling thread: Kafka's ``Throttler`` (``kafka.utils``), which the log
cleaner uses for ``log.cleaner.io.max.bytes.per.second``.

Invariants:

- Callers report what they have just done with :meth:`Throttler.maybe_throttle` (``observed`` units,
  bytes for the cleaner). The reports add up over a check period, which starts when the throttler is
  created and again after every check.
- A check happens at the first report after more than ``check_interval_ms`` of the period has passed, if
  anything was observed. If the period's rate (observed over elapsed time) is above the desired rate, the
  caller sleeps for Kafka's amount: ``observed * 1000 / rate - elapsed_ms`` milliseconds rounded as
  Java's ``Math.round`` (``elapsed_ms`` is the elapsed time truncated to whole milliseconds), which is how
  much longer the period must last for its average to come down to the desired rate; nothing when that
  rounds to zero or less, and at most ``threading.TIMEOUT_MAX`` seconds (reached only by absurdly small
  rates). A period at or below the desired rate never sleeps, so with Kafka's default rate
  (``Double.MAX_VALUE``) the throttler never sleeps at all.
- After a check the new period starts at the clock's reading after the sleep, with nothing observed,
  whether the sleep lasted its full length or was cut short.
- The clock (monotonic nanoseconds) is given at construction and the sleep with each report: the log
  cleaner passes its abort event's ``wait``, so stopping the broker cuts a long sleep short. Reports from
  several threads share one budget (a lock is held across the check and the sleep, as in Kafka).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["Throttler"]

_NS_PER_MS: Final = 1_000_000
_NS_PER_SECOND: Final = 1_000_000_000
_MAX_SLEEP_MS: Final = threading.TIMEOUT_MAX * 1000


class Throttler:
    """Holds a process to ``desired_rate_per_sec`` on average by sleeping the thread that reports to it."""

    def __init__(
        self,
        desired_rate_per_sec: float,
        *,
        check_interval_ms: int = 100,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not desired_rate_per_sec > 0:
            raise ValueError(f"desired rate must be positive, not {desired_rate_per_sec}")
        self.desired_rate_per_sec = desired_rate_per_sec
        self.check_interval_ms = check_interval_ms
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._period_start_ns = clock_ns()
        self._observed = 0

    def maybe_throttle(self, observed: int, sleep: Callable[[float], object] = time.sleep) -> None:
        """Add ``observed`` to the period; at a check, call ``sleep(seconds)`` if the period ran too fast."""
        with self._lock:
            self._observed += observed
            elapsed_ns = self._clock_ns() - self._period_start_ns
            if elapsed_ns <= self.check_interval_ms * _NS_PER_MS or self._observed <= 0:
                return
            rate = self._observed * _NS_PER_SECOND / elapsed_ns
            if rate > self.desired_rate_per_sec:
                elapsed_ms = elapsed_ns // _NS_PER_MS
                exact_ms = self._observed * 1000 / self.desired_rate_per_sec - elapsed_ms
                sleep_ms = math.floor(exact_ms + 0.5) if exact_ms < _MAX_SLEEP_MS else _MAX_SLEEP_MS
                if sleep_ms > 0:
                    sleep(sleep_ms / 1000)
            self._period_start_ns = self._clock_ns()
            self._observed = 0
