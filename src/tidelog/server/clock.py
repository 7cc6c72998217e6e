"""The broker's one clock (Kafka's ``Time``): every part of the server that needs the wall-clock time asks
the :class:`Clock` it was given, so a test can drive time with a :class:`ManualClock`.

Invariants: ``now_ms`` is the wall clock in milliseconds since the epoch (record timestamps, retention,
deadlines stored in coordinator records); the layers below ``server`` never read a clock, they are handed
``now_ms``. Intervals measured for logs and idle connections use ``time.monotonic`` directly: they do not
depend on the wall clock and never reach the data.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    """The machine's wall clock."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to (tests)."""

    __slots__ = ("_now_ms",)

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        if delta_ms < 0:
            raise ValueError("a clock never goes back")
        self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms
