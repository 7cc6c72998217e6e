"""Logging how the recovery of the log dirs goes when the broker starts after an unclean shutdown.

Invariants: one INFO line per log dir when its recovery starts being reported, then at most one every
:data:`INTERVAL_S` seconds, and one when the dir is done: segments recovered of the total, partitions, and
the rate in MB/s since the dir's first report. The clock (monotonic, injectable for tests) is read here,
never in the storage layer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tidelog.storage.log_manager import RecoveryProgress

__all__ = ["INTERVAL_S", "RecoveryProgressLog"]

INTERVAL_S: Final = 5.0

log = logging.getLogger("tidelog.recovery")


class RecoveryProgressLog:
    """The ``recovery_progress`` callback of :class:`~tidelog.storage.log_manager.LogManager`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval_s: float = INTERVAL_S) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._started: dict[Path, float] = {}
        self._last_logged: dict[Path, float] = {}

    def __call__(self, progress: RecoveryProgress) -> None:
        now = self._clock()
        started = self._started.setdefault(progress.log_dir, now)
        last = self._last_logged.get(progress.log_dir)
        if not progress.done and last is not None and now - last < self._interval_s:
            return
        self._last_logged[progress.log_dir] = now
        elapsed = max(now - started, 1e-3)
        log.info(
            "recovering %s after an unclean shutdown: %d/%d segments, %d/%d partitions, %.1f MB at %.1f MB/s%s",
            progress.log_dir,
            progress.segments_done,
            progress.segments_total,
            progress.partitions_done,
            progress.partitions_total,
            progress.bytes_done / 1e6,
            progress.bytes_done / 1e6 / elapsed,
            " (done)" if progress.done else "",
        )
